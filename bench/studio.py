"""Studio figures: cold start to first paint on the demo database, time to first rows of a
100,000-message thread, peak memory, the recall playground's query time at 10,000 messages, and
Replay's step and what-if times on a 1,000-turn thread.

    .venv/bin/python bench/studio.py                 # everything; offscreen unless a display is set
    .venv/bin/python bench/studio.py --only start    # cold start and the 100k thread only
    .venv/bin/python bench/studio.py --only start --runs 9

Aims (issue 18): cold start to first paint at most 450 ms and peak memory at most 250 MB on the demo
database; the first rows of a 100,000-message thread in under 50 ms; a recall playground query under
50 ms (embedding excluded: query vectors are looked up).

What "cold start" measures: a fresh interpreter runs the ``memory-studio`` command as a user starts it
(``studio.cli.main(["--db", <demo db>])``: argument parsing, the system-library check, then
``studio.app.main``: the application, the window built with ``finish_later``, ``launch``: show; after
the first paint finish the window, open the database and warm the engine on a worker) on the demo
database, already seeded (``core.demo.seed_demo`` fills it once, when the bench builds it; the app's
own first-launch seeding is not measured). The app's settings live in the bench's folder
(``XDG_CONFIG_HOME``). First paint is the main window's first Paint event (seen by an event filter
the child installs through ``studio.app.launch``), counted from just before the child process is
started (interpreter start-up included); the child also reports its CPU time at that moment, which
the machine's other load barely changes.
Peak memory is the child's own high-water mark (``VmHWM``; ``ru_maxrss`` would carry over the
parent's peak across fork + exec, and the parent grows while it builds the databases) once the tree
is filled, the first messages are shown and the warm-up has finished. Each measurement runs in a fresh
process (cold imports, cold caches of this process; the OS file cache stays warm). Sources are compiled
to bytecode first (``compileall``), and one start runs before the measured ones (its cache of shiboken's
compiled signature module filled, ``studio/qt_boot.py``), as an installed app's are: with
``PYTHONDONTWRITEBYTECODE`` set, every run would otherwise compile them. The databases are built once
under .temp/bench/ and kept.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".temp" / "bench"
BIG = 100_000

PEAK_MB = r"""
import resource, sys
def peak_mb():
    # This process's own peak: VmHWM (Linux) belongs to the process's memory; ru_maxrss would also
    # carry the parent's peak across fork + exec (the bench's parent grows while it builds databases).
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 * 1024 if sys.platform == "darwin" else 1024)
"""

COLD_START = PEAK_MB + r"""
import json, resource, sys, time

t_proc = float(sys.argv[2])
HEAVY = ("sqlalchemy", "numpy", "duckdb", "onnxruntime", "tiktoken", "jsonschema", "core.memory")
marks = {}
seen = {}
def watch(app_module):  # the app's own launch, watched: an event filter sees the first paint
    from PySide6.QtCore import QEvent, QObject, QTimer
    class Paint(QObject):
        def eventFilter(self, obj, event):
            if event.type() == QEvent.Type.Paint and "paint" not in marks:
                marks["paint"] = time.time() - t_proc
                marks["paint_cpu"] = time.process_time()  # this process's CPU seconds, interpreter start included
                marks["loaded_at_paint"] = [m for m in HEAVY if m in sys.modules]
            return False
    real_launch = app_module.launch
    def launch(window, opening, warm=True):
        seen["filter"] = Paint(); window.installEventFilter(seen["filter"])
        seen["window"], seen["startup"] = window, real_launch(window, opening, warm)
        seen["timer"] = t = QTimer(); t.timeout.connect(check); t.start(5)
        return seen["startup"]
    app_module.launch = launch
from studio.import_hook import after_import
after_import("studio.app", watch)  # importing studio.app here would load Qt before the command does
def check():
    window, startup = seen["window"], seen["startup"]
    m = window.messages_pane.model if window.session is not None else None  # the tab shown at start
    if window.resources is not None and window.resources.thread_rows() and "tree" not in marks:
        marks["tree"] = time.time() - t_proc
    if m is not None and m.rowCount() and "messages" not in marks:
        marks["messages"] = time.time() - t_proc
    if startup.warm_result is not None and "warmed" not in marks:
        marks["warmed"] = time.time() - t_proc
    if {"tree", "messages", "warmed"} <= set(marks) or time.time() - t_proc > 60:
        marks["loaded_at_end"] = [m for m in HEAVY if m in sys.modules]
        marks["rss_mb"] = peak_mb()
        print(json.dumps(marks), flush=True); window.close(); sys.modules["PySide6.QtWidgets"].QApplication.instance().quit()
from studio.cli import main  # the `memory-studio` command, as a user starts it
main(["--db", sys.argv[1]])
import os; os._exit(0)  # skip interpreter teardown: only the figures matter here
"""

# Waits in an idle event loop, as the app does: a spinning one would take the GIL from the worker.
IDLE_WAIT = r"""
def wait(cond, limit=60.0):
    loop = QEventLoop(); tick = QTimer(); tick.timeout.connect(lambda: cond() and loop.quit()); tick.start(1)
    QTimer.singleShot(int(limit * 1000), loop.quit)
    if not cond():
        loop.exec()
    tick.stop()
"""

BIG_THREAD = PEAK_MB + r"""
import json, resource, sys, time
from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtWidgets import QApplication
from studio.app import make_app
from studio.models.messages_model import MessageRoles
from studio.panes.messages import MessagesPane
from studio.selection import Selection
from studio.session import StudioSession, open_for_studio
from studio.theme import apply_theme
app = make_app(); apply_theme(app, "dark")
session = StudioSession(open_for_studio(sys.argv[1]))
pane = MessagesPane(session); pane.resize(1000, 800); pane.show()
app.processEvents()
""" + IDLE_WAIT + r"""model = pane.model
out = {"open_ms": [], "open_cpu_ms": [], "jump_ms": []}
for run in range(5):
    pane.set_selection(Selection())
    app.processEvents()
    t0, c0 = time.perf_counter(), time.process_time()
    pane.set_selection(Selection("bench", "big"))
    wait(lambda: model.rowCount() > 0 and model.index(model.rowCount() - 1).data(MessageRoles.LOADED))
    pane.view.viewport().repaint()
    out["open_ms"].append((time.perf_counter() - t0) * 1000)
    out["open_cpu_ms"].append((time.process_time() - c0) * 1000)  # both threads: the worker and the UI
    target = (run + 1) * 15_000 + 123
    t0 = time.perf_counter()
    pane.view.scrollTo(model.index(target))
    pane.view.viewport().repaint()
    wait(lambda: model.index(target).data(MessageRoles.LOADED))
    pane.view.viewport().repaint()
    out["jump_ms"].append((time.perf_counter() - t0) * 1000)
# drag the scroll bar from top to bottom in 200 steps, painting each step
bar = pane.view.verticalScrollBar()
t0 = time.perf_counter()
for i in range(201):
    bar.setValue(bar.maximum() * i // 200)
    pane.view.viewport().repaint()
    app.processEvents()
out["drag_paint_ms_per_step"] = (time.perf_counter() - t0) * 1000 / 201
out["rows"] = model.rowCount()
out["cached_pages"] = len(model._cache)
out["rss_mb"] = peak_mb()
print(json.dumps(out), flush=True)
session.close()
import os; os._exit(0)
"""

RECALL_PLAYGROUND = r"""
import json, sys, time
import numpy as np
from PySide6.QtCore import QEventLoop, QTimer
from bench.recall_speed import TableEmbedder, words
from studio.app import make_app
from studio.logic.prompt_layout import EmbedderHolder
from studio.panes.recall_playground import RecallPlaygroundPane
from studio.selection import Selection
from studio.session import StudioSession, open_for_studio
from studio.theme import apply_theme
app = make_app(); apply_theme(app, "dark")
session = StudioSession(open_for_studio(sys.argv[1]))
emb = TableEmbedder()  # query vectors looked up, not computed: embedding is excluded
pane = RecallPlaygroundPane(session); pane.embedders = EmbedderHolder(lambda: emb)
pane.resize(1300, 820); pane.show(); app.processEvents()
""" + IDLE_WAIT + r"""pane.set_selection(Selection("bench", "t"))
wait(lambda: pane.thread_list.count() > 0)
rng = np.random.default_rng(7)
queries = [words(rng, 6) for _ in range(100)]
emb.fixed.update(zip(queries, emb.embed(queries, "query")))
got, why = [], []
pane.searched.connect(got.append); pane.explained.connect(why.append)
pane.threshold_check.setChecked(True); pane.threshold_spin.setValue(0.05)
out = {"round_ms": [], "engine_ms": [], "explain_ms": [], "candidates": []}
for i, q in enumerate([queries[-1]] + queries[:-1]):  # the first search loads the matrix: not counted
    n = len(got); t0 = time.perf_counter()
    pane.query_edit.setText(q); pane.search_now()
    wait(lambda: len(got) > n)
    for table in pane.tables.values():
        table.viewport().repaint()
    if i:
        out["round_ms"].append((time.perf_counter() - t0) * 1000)
        out["engine_ms"].append(got[-1].inspection.timings["search"])
        out["candidates"].append(len(got[-1].inspection.lists["hybrid"]))
    if i % 5 == 1:  # why not a message from the middle of the thread?
        m = len(why); t0 = time.perf_counter()
        pane.explain(f"m{(i * 97) % 10000}")
        wait(lambda: len(why) > m)
        out["explain_ms"].append((time.perf_counter() - t0) * 1000)
        pane.why_edit.clear()  # else every later search explains it again, and the two share the cores
print(json.dumps(out), flush=True)
session.close()
import os; os._exit(0)
"""


def build_recall(path: Path, n: int = 10_000) -> None:
    """``n`` synthetic messages in one thread, indexed (vectors and keywords) with looked-up vectors."""
    if path.exists():
        return
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from bench.recall_speed import TableEmbedder, synthetic_messages
    from core import open_store
    from core.recall import RecallIndex

    tmp = path.with_suffix(".partial")
    tmp.unlink(missing_ok=True)
    store = open_store(tmp)
    store.memory.create_thread(thread_id="t", resource_id="bench", title=f"{n:,} indexed messages")
    msgs = synthetic_messages(n, "t", "bench", np.random.default_rng(1))
    index = RecallIndex.for_store(store, TableEmbedder())
    for start in range(0, n, 1000):
        store.memory.save_messages(msgs[start : start + 1000])
        index.index_messages(msgs[start : start + 1000])
    store.close()
    tmp.rename(path)


def build_demo(path: Path) -> None:
    if path.exists():
        return
    from core import open_store
    from core.demo import seed_demo

    store = open_store(path)
    seed_demo(store)
    store.close()


def build_big(path: Path) -> None:
    if path.exists():
        return
    from core import Message, open_store
    from core.messages import text_part, tool_invocation_part

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    tmp = path.with_suffix(".partial")
    tmp.unlink(missing_ok=True)
    store = open_store(tmp)
    store.memory.create_thread(thread_id="big", resource_id="bench", title=f"{BIG:,} messages")
    batch = []
    for i in range(BIG):
        if i % 10 == 9:
            parts = [tool_invocation_part(f"c{i}", "lookup", {"n": i}, {"ok": True, "value": i * 2}),
                     text_part(f"Answer {i}")]
            role = "assistant"
        else:
            role = "user" if i % 2 == 0 else "assistant"
            parts = [text_part(f"Message {i}: " + "lorem ipsum dolor sit amet " * (1 + i % 5))]
        batch.append(Message.create(role, parts, id=f"b{i:07d}", thread_id="big", resource_id="bench",
                                    created_at=t0 + timedelta(seconds=i)))
        if len(batch) == 10_000:
            store.memory.save_messages(batch)
            batch = []
    if batch:
        store.memory.save_messages(batch)
    store.close()
    tmp.rename(path)


def p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[int(0.95 * (len(ordered) - 1))]


def child(script: str, *args: str) -> dict:
    # The app's settings (QSettings(): window geometry, theme, recent files) and its cache
    # (studio/qt_boot.py) go to the bench's folder.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": str(WORK / "config"),
           "XDG_CACHE_HOME": str(WORK / "cache")}
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    t_proc = time.time()
    proc = subprocess.run([sys.executable, "-c", script, *args[:1], str(t_proc), *args[1:]], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"bench child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


HEAVY_SHOWN = ("sqlalchemy", "numpy", "duckdb", "onnxruntime", "tiktoken")


def report_start(demo: Path, big: Path, runs: int) -> None:
    child(COLD_START, str(demo))  # not counted: an installed app's first start fills its cache (studio/qt_boot.py)
    cold = [child(COLD_START, str(demo)) for _ in range(runs)]
    paint = [c["paint"] * 1000 for c in cold]
    cpu = [c["paint_cpu"] * 1000 for c in cold]
    med = lambda key: statistics.median(c.get(key, float("nan")) for c in cold) * 1000  # noqa: E731
    at_paint = sorted({m for c in cold for m in c["loaded_at_paint"]}) or ["none"]
    at_end = [m for m in HEAVY_SHOWN if all(m in c["loaded_at_end"] for c in cold)]
    print(f"cold start → first paint (demo db):      {statistics.median(paint):7.0f} ms   (aim ≤ 450 ms; median of "
          f"{runs}, {min(paint):.0f}–{max(paint):.0f} ms; load average {os.getloadavg()[0]:.1f})")
    print(f"  … CPU time of the process at paint:    {statistics.median(cpu):7.0f} ms   ({min(cpu):.0f}–{max(cpu):.0f} ms)")
    print(f"  … heavy modules loaded at first paint: {', '.join(at_paint)}")
    print(f"cold start → resources tree filled:      {med('tree'):7.0f} ms")
    print(f"cold start → first messages shown:       {med('messages'):7.0f} ms")
    print(f"cold start → engine warmed (worker):     {med('warmed'):7.0f} ms   (loaded by then: {', '.join(at_end)})")
    print(f"peak memory, demo db:                    {max(c['rss_mb'] for c in cold):7.0f} MB   (aim ≤ 250 MB; worst of "
          f"{runs})")

    b = child(BIG_THREAD.replace("t_proc = float(sys.argv[2])", ""), str(big))
    print(f"100,000-message thread → first rows:     {statistics.median(b['open_ms']):7.0f} ms   (aim < 50 ms; "
          f"median of 5, worst {max(b['open_ms']):.0f} ms)")
    print(f"  … CPU time of those (worker + UI):     {statistics.median(b['open_cpu_ms']):7.0f} ms   "
          f"(worst {max(b['open_cpu_ms']):.0f} ms)")
    print(f"jump into the middle → rows:             {statistics.median(b['jump_ms']):7.0f} ms   (median of 5)")
    print(f"scroll-bar drag, paint per step:         {b['drag_paint_ms_per_step']:7.1f} ms   (201 steps)")
    print(f"rows in model / pages held:              {b['rows']:,} / {b['cached_pages']}")
    print(f"peak memory, 100k thread:                {b['rss_mb']:7.0f} MB   (aim < 400 MB)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("start", "recall", "replay"), help="one part of the figures")
    parser.add_argument("--runs", type=int, default=5, help="cold starts measured (default 5)")
    args = parser.parse_args(argv)
    WORK.mkdir(parents=True, exist_ok=True)
    for package in ("core", "studio"):
        compileall.compile_dir(ROOT / package, quiet=1)
    demo, big = WORK / "demo.db", WORK / "big-100k.db"
    t = time.perf_counter()
    build_demo(demo)
    build_big(big)
    print(f"databases ready in {time.perf_counter() - t:.1f} s ({demo}, {big})")
    if args.only in (None, "start"):
        report_start(demo, big, args.runs)
    if args.only in (None, "recall"):
        report_recall()
    if args.only in (None, "replay"):
        from studio_replay import report as replay_report  # bench/ is on sys.path: this script's folder

        replay_report(child, WORK)
    return 0


def report_recall() -> None:
    recall = WORK / "recall-10k.db"
    build_recall(recall)
    r = child(RECALL_PLAYGROUND.replace("t_proc = float(sys.argv[2])", ""), str(recall))
    print(f"recall playground, 10k messages, query:  {statistics.median(r['engine_ms']):7.1f} ms   (aim < 50 ms; "
          f"embedding excluded; p95 {p95(r['engine_ms']):.1f} ms; three lists, "
          f"{statistics.median(r['candidates']):.0f} hybrid candidates)")
    print(f"  … search → three lists painted:        {statistics.median(r['round_ms']):7.1f} ms   "
          f"(p95 {p95(r['round_ms']):.1f} ms; worker, signal, paint)")
    print(f"  … why not this message? (full ranks):  {statistics.median(r['explain_ms']):7.1f} ms   "
          f"(p95 {p95(r['explain_ms']):.1f} ms)")


if __name__ == "__main__":
    raise SystemExit(main())
