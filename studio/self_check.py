"""``memory-studio --self-check``: prove an installation works end to end, without a display.

It runs the real components in a fresh temporary folder and prints each step as it goes:

1. open a fresh database;
2. create the demo data with the engine (agents, processors, scripted models);
3. assemble a prompt for a demo thread;
4. embed a sentence with the local embedding model (never the hashing fallback);
5. record a trace into the folder's DuckDB file and read it back;
6. render the main window once, offscreen, over that database;

and exits 0, or 1 with the step that failed and why. The bundle's test and the wheel's test run it;
a user can run it to check a machine. Nothing outside the temporary folder is read or written
(Qt settings included), except the embedding model, which is only read.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, TextIO

from core.version import __version__

STEPS = 6
RENDER_TIMEOUT_S = 120.0
PROBE_SENTENCE = "Ada is allergic to peanuts. 艾达对花生过敏。"


class SelfCheckError(RuntimeError):
    """A step did not do what it should; the message says what was seen."""


class _Run:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.n = 0

    def step(self, title: str, fn: Callable[[], str]) -> None:
        self.n += 1
        self.out.write(f"[{self.n}/{STEPS}] {title}… ")
        self.out.flush()
        started = time.perf_counter()
        detail = fn()
        self.out.write(f"ok ({time.perf_counter() - started:.2f} s)\n      {detail}\n")
        self.out.flush()


def run(out: TextIO | None = None) -> int:
    """Run every step; return the process exit code."""
    out = out or sys.stdout
    # Before Qt is imported: the check must never need (or open) a display.
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    frozen = bool(getattr(sys, "frozen", False))
    out.write(
        f"Memory Studio {__version__} self-check ({'bundle' if frozen else 'Python package'}; "
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()})\n"
    )
    started = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="memory-studio-self-check-"))
    run_ = _Run(out)
    state: dict[str, Any] = {"db": folder / "memory.db"}
    try:
        run_.step("Opening a fresh database", lambda: _open_database(state))
        run_.step("Creating demo data with the engine", lambda: _seed(state))
        run_.step("Assembling a prompt", lambda: _assemble(state))
        run_.step("Embedding a sentence with the local model", _embed)
        run_.step("Recording a trace", lambda: _trace(state))
        run_.step("Rendering the main window offscreen", lambda: _render(state, folder))
    except Exception as exc:  # noqa: BLE001 - the point is to report any failure, clearly
        out.write("FAILED\n")
        out.flush()
        sys.stderr.write(
            f"\nSelf-check failed at step {run_.n} of {STEPS}: {exc}\n"
            "Details for a bug report follow.\n" + "".join(traceback.format_exception(exc))
        )
        return 1
    finally:
        store = state.pop("store", None)
        if store is not None:
            store.close()
        shutil.rmtree(folder, ignore_errors=True)
    out.write(f"Self-check passed in {time.perf_counter() - started:.1f} s.\n")
    out.flush()
    return 0


def _open_database(state: dict[str, Any]) -> str:
    from core.storage import open_store

    store = open_store(state["db"])
    state["store"] = store
    if store.pending_migrations():
        raise SelfCheckError(f"a fresh database still has pending migrations: {store.pending_migrations()}")
    return f"{state['db']} (libSQL, schema up to date)"


def _seed(state: dict[str, Any]) -> str:
    from core.demo import seed_demo

    report = seed_demo(state["store"])
    if not report.threads or not report.turns:
        raise SelfCheckError("the demo created no threads")
    if report.recall.startswith("hashing"):  # a local model is "use-…" or, with $MEMORY_STUDIO_EMBEDDER=e5, "multilingual-e5-…"
        raise SelfCheckError(f"the demo could not use the local embedding model: semantic recall was {report.recall}")
    state["thread"] = report.threads[0]
    return report.summary()


def _assemble(state: dict[str, Any]) -> str:
    from core import Memory, MemoryOptions

    store = state["store"]
    thread = store.memory.get_thread(state["thread"])
    if thread is None:
        raise SelfCheckError(f"demo thread {state['thread']!r} is missing")
    memory = Memory(store, MemoryOptions(last_messages=10, working_memory={"enabled": True}))
    prompt = memory.assemble(thread_id=thread.id, resource_id=thread.resource_id,
                             input="What should I cook tonight?", instructions="You are a helpful cook.")
    if len(prompt.messages) < 3:
        raise SelfCheckError(f"the prompt has only {len(prompt.messages)} messages; history is missing")
    tokens = sum(f.tokens for f in prompt.fragments)
    return (f"thread {thread.id}: {len(prompt.messages)} messages, {len(prompt.fragments)} fragments, "
            f"{tokens} tokens by {prompt.tokenizer}")


def _embed() -> str:
    import numpy as np

    from core.embedding import default_embedder
    from core.embedding.provision import model_path

    embedder = default_embedder()
    vectors = embedder.embed([PROBE_SENTENCE])
    norm = float(np.linalg.norm(vectors[0]))
    if vectors.shape[0] != 1 or abs(norm - 1.0) > 1e-3:
        raise SelfCheckError(f"unexpected embedding: shape {vectors.shape}, norm {norm:.4f}")
    path = getattr(getattr(embedder, "inner", embedder), "path", None) or model_path()  # the configured model's file
    return f"{embedder.model_id}: {vectors.shape[1]}-d unit vector; model file {path}"


def _trace(state: dict[str, Any]) -> str:
    from core.traces.spans import SpanType

    store = state["store"]
    tracer = store.tracer()
    with tracer.start_span("self-check", SpanType.GENERIC, new_trace=True, input={"probe": True}) as span:
        trace_id = span.trace_id
    if not tracer.flush(60.0):
        raise SelfCheckError("the trace writer did not flush within 60 s")
    obs = store.observability
    spans = obs.get_trace(trace_id) if obs is not None else []
    if [s.name for s in spans] != ["self-check"]:
        raise SelfCheckError(f"trace {trace_id} read back as {[s.name for s in spans]}")
    total = int(obs.count_traces())
    return f"span 'self-check' read back from {obs.path.name} ({total} traces there, the demo's included)"


def _render(state: dict[str, Any], folder: Path) -> str:
    from PySide6.QtCore import QCoreApplication, QEvent, QEventLoop, QSettings, QTimer

    from studio.app import make_app
    from studio.main_window import MainWindow
    from studio.theme import apply_theme

    state.pop("store").close()  # the Studio opens the file itself, as it would on a desktop
    app = make_app()
    _quiet_offscreen_warnings()
    apply_theme(app, "dark")
    settings = QSettings(str(folder / "studio.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings, _recording_presenter())
    failures: list[Any] = []
    window.open_failed.connect(failures.append)
    window.resize(1280, 800)
    window.show()
    window.open_database(str(state["db"]))
    deadline = time.monotonic() + RENDER_TIMEOUT_S
    loop = QEventLoop()
    rows: list[Any] = []

    def poll() -> None:
        if window.resources is not None:
            rows[:] = window.resources.thread_rows()
        if failures or rows or time.monotonic() > deadline:
            loop.quit()

    timer = QTimer()
    timer.timeout.connect(poll)
    timer.start(20)
    loop.exec()
    timer.stop()
    try:
        if failures:
            problem = failures[0]
            raise SelfCheckError(f"the Studio could not open the database: {problem.text} {problem.advice}")
        if not rows:
            raise SelfCheckError(f"no threads listed after {RENDER_TIMEOUT_S:.0f} s")
        image = window.grab()
        if image.isNull() or image.width() < 100:
            raise SelfCheckError("grabbing the window gave an empty image")
        from studio.fonts import machine_note

        note = machine_note()  # (not a failure: the Studio says so too when it shows such text)
        return (f"{image.width()}×{image.height()} px, {window.tabs.count()} tabs, {len(rows)} threads listed, "
                f"platform {app.platformName()}, Qt {_qt_version()}" + (f"\n      note: {note}" if note else ""))
    finally:
        # Closed, deleted and its settings written now: a window or settings object left to the interpreter's
        # exit wrote studio.ini after ``run`` had removed the folder, which made it again (left in the temp dir).
        window.close()
        window.deleteLater()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        settings.sync()
        del settings


def _quiet_offscreen_warnings() -> None:
    """The offscreen plugin warns about window-manager hints it cannot honour; that is not news here."""
    from PySide6.QtCore import qFormatLogMessage, qInstallMessageHandler

    def handler(mode: Any, context: Any, message: str) -> None:
        if "propagateSizeHints" not in message:
            sys.stderr.write(qFormatLogMessage(mode, context, message) + "\n")

    qInstallMessageHandler(handler)


def _qt_version() -> str:
    from PySide6.QtCore import qVersion

    return str(qVersion())


def _recording_presenter() -> Any:
    from studio.dialogs import DialogPresenter

    class RecordingPresenter(DialogPresenter):
        """Dialogs would wait for a click nobody gives; the check reports problems as text instead."""

        def __init__(self) -> None:
            super().__init__()
            self.problems: list[Any] = []

        def error(self, parent: Any, problem: Any) -> Any:
            self.problems.append(problem)
            return None

        def confirm(self, *args: Any, **kwargs: Any) -> Any:
            return None

    return RecordingPresenter()
