"""How long the Studio's UI thread stops answering on a large database: a resource of 3,000 threads and a
thread of 100,000 messages with an observation log of 5,000 lines, each pane shown in turn, through the
app's own start-up path (its UI-thread cycle collector, ``launch`` with the warm-up on a worker), and the
first Recall Playground search.

    .venv/bin/python bench/studio_stalls.py            # offscreen unless a display is set
    .venv/bin/python bench/studio_stalls.py --keep     # keep the database (under .temp/bench/)
    .venv/bin/python bench/studio_stalls.py --messages 1000000 --no-ui   # the reads alone, a larger thread
    .venv/bin/python bench/studio_stalls.py --keep --traces /tmp/stalls.txt   # and what ran in each stall

A 5 ms timer on the UI thread notes every gap between its ticks; a gap is the time the UI thread could
not run Python (its own work, or waiting for the GIL while a worker holds it). Printed per step: the
longest gap and how many exceeded 50 ms. With ``--traces``, every tick re-arms
``faulthandler.dump_traceback_later``, so a stall of 100 ms or more writes every thread's stack (what
the UI thread ran, or which worker held the GIL). faulthandler reads the other threads' stacks without
the GIL, so now and then a run with ``--traces`` dies in the middle of a dump: take its figures from a
run without it. Also the time ``Memory.turns`` takes to list the 50,000
turns of the large thread, and the whole of Replay's open of it on its worker (rows, records, turns)
before it shows the first turn. No aim is set in an issue; a stall of a few hundred milliseconds is what
a user notices as a freeze. And the tree's reads (``list_resources``, ``tree_summaries``: best of 5),
each one statement that holds the GIL on libSQL.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

THREADS = 3_000
MESSAGES = 100_000
OBSERVATIONS = 5_000  # lines of the large thread's observation log
QUERY = "plans of the project"  # the Recall Playground's first search


def build(path: Path, messages: int) -> None:
    from core.messages import Message
    from core.storage import open_store

    store = open_store(path)
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    store.memory.create_thread(thread_id="huge", resource_id="big", title=f"{messages:,} messages")
    for start in range(0, messages, 2000):
        store.memory.save_messages([
            (Message.user if i % 2 == 0 else Message.assistant)(
                f"message {i}: " + "some words about the project and its plans " * (1 + i % 7), id=f"h{i}",
                thread_id="huge", resource_id="big", created_at=t0 + timedelta(seconds=i))
            for i in range(start, min(messages, start + 2000))])
    observe(store, OBSERVATIONS)
    for k in range(THREADS):
        store.memory.create_thread(thread_id=f"t{k:04d}", resource_id="many", title=f"Thread number {k}")
        store.memory.save_messages([
            Message.user(f"hello {k}", id=f"m{k}a", thread_id=f"t{k:04d}", resource_id="many",
                         created_at=t0 + timedelta(minutes=k)),
            Message.assistant(f"hi {k}", id=f"m{k}b", thread_id=f"t{k:04d}", resource_id="many",
                              created_at=t0 + timedelta(minutes=k, seconds=1))])
    store.close()


def observe(store: object, count: int) -> None:
    """An observation log of ``count`` lines on the large thread (a date line every 50), as the observer
    commits one."""
    from core.observational.records import lookup_key
    from core.observational.store import Cursor, Observation, commit_observation

    marks = ("\U0001F534", "\U0001F7E1", "\U0001F7E2", "\u2705")  # the observer's priorities
    lines: list[str] = []
    for i in range(count):
        if i % 50 == 0:
            lines.append(f"Date: Jan {1 + i // 50 % 28}, 2026")
        lines.append(f"* {marks[i % 4]} ({i % 24:02d}:{i % 60:02d}) observation {i}: the user talked about the "
                     f"project and its plans, item {i}")
    obs = Observation("\n".join(lines), 20 * count, ["h0"], 100, 0, Cursor("2026-01-01T00:00:00.000Z", "h0"))
    commit_observation(store, record=None, key=lookup_key("thread", thread_id="huge", resource_id="big"),  # type: ignore[arg-type]
                       scope="thread", thread_id="huge", resource_id="big", config={}, obs=obs)


def tree_reads(path: Path) -> dict[str, float]:
    """Best of 5 milliseconds of each read the thread tree (and the command line) makes."""
    from core.storage import open_store

    store = open_store(path)
    try:
        out = {}
        for name in ("list_resources", "tree_summaries"):
            read = getattr(store.memory, name, None)
            if read is None:  # (a checkout from before it)
                continue
            times = []
            for _ in range(5):
                started = time.perf_counter()
                read()
                times.append((time.perf_counter() - started) * 1000)
            out[name] = min(times)
        return out
    finally:
        store.close()


def turns_time(path: Path, messages: int) -> float:
    from core import Memory, MemoryOptions
    from core.storage import open_store

    store = open_store(path)
    try:
        started = time.perf_counter()
        turns = Memory(store, MemoryOptions()).turns("huge")
        assert len(turns) == messages // 2
        return time.perf_counter() - started
    finally:
        store.close()


def replay_open_time(path: Path) -> float:
    """Seconds Replay's worker takes to open the large thread (its rows, records and turns; no Qt)."""
    from core import Memory
    from core.storage import open_store
    from studio.replay_jobs import ReplayThread

    store = open_store(path)
    try:
        started = time.perf_counter()
        ReplayThread.open(store, lambda options, name: Memory(store, options), "huge")
        return time.perf_counter() - started
    finally:
        store.close()


def stalls(path: Path, messages: int, traces: str | None = None) -> list[tuple[str, float, int]]:
    if not os.environ.get("DISPLAY"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="studio-stalls-config-")  # (the app's settings)
    from PySide6.QtCore import QEventLoop, QSettings, QTimer

    from studio.app import launch, make_app, start
    from studio.main_window import (CHECKS, MESSAGES as MESSAGES_PANE, OBSERVATIONS, PROMPT, RECALL, REPLAY, TRACES,
                                    WORKING_MEMORY, MainWindow)
    from studio.selection import Selection
    from studio.theme import apply_theme
    from studio.ui_gc import UiThreadCollector

    app = make_app()
    collector = UiThreadCollector(app)
    apply_theme(app, "dark")
    window = MainWindow(QSettings(), finish_later=True)
    window.resize(1400, 900)
    gaps: list[float] = []
    last = [time.perf_counter()]

    trace_file = open(traces, "w") if traces else None  # noqa: SIM115 - open for the whole run

    def tick() -> None:
        now = time.perf_counter()
        gaps.append((now - last[0]) * 1000)
        last[0] = now
        if trace_file is not None:  # what runs when the UI thread has not ticked for 100 ms
            faulthandler.dump_traceback_later(0.1, file=trace_file)

    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(5)

    def wait(seconds: float) -> None:
        loop = QEventLoop()
        QTimer.singleShot(int(seconds * 1000), loop.quit)
        loop.exec()

    out: list[tuple[str, float, int]] = []

    def step(label: str, action: object, seconds: float) -> None:
        if trace_file is not None:
            trace_file.write(f"\n=== {label}\n")
            trace_file.flush()
        gaps.clear()
        last[0] = time.perf_counter()
        action()  # type: ignore[operator]
        tick()  # (the action's own time on the UI thread counts as a gap)
        wait(seconds)
        out.append((label, max(gaps), sum(1 for g in gaps if g > 50)))

    step("start, open the database", lambda: launch(window, lambda: start(window, str(path))), 6)
    step(f"open the {messages:,}-message thread", lambda: window.select_thread(Selection("big", "huge")), 3)
    for spec in (PROMPT, WORKING_MEMORY, TRACES, OBSERVATIONS, RECALL, REPLAY, CHECKS):
        step(f"show {spec.title}", lambda spec=spec: window.show_tab(spec), 6 if spec is REPLAY else 3)
        if spec is RECALL:
            recall = window.pane(RECALL)
            step("the first Recall Playground search",
                 lambda: (recall.query_edit.setText(QUERY), recall.search_now()), 6)
    step("back to Messages", lambda: window.show_tab(MESSAGES_PANE), 2)
    step(f"a thread of the {THREADS:,}-thread resource", lambda: window.select_thread(Selection("many", "t2999")), 3)
    timer.stop()
    if trace_file is not None:
        faulthandler.cancel_dump_traceback_later()
        trace_file.close()
    window.close()
    collector.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="keep the database under .temp/bench/")
    ap.add_argument("--messages", type=int, default=MESSAGES, help="messages of the large thread (even)")
    ap.add_argument("--no-ui", action="store_true", help="the reads only, not the Studio")
    ap.add_argument("--traces", metavar="FILE", help="write the UI thread's stack (and every other thread's) "
                    "to FILE whenever it has not ticked for 100 ms")
    args = ap.parse_args()
    messages = args.messages
    folder = REPO / ".temp" / "bench" if args.keep else Path(tempfile.mkdtemp(prefix="studio-stalls-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"stalls-{messages}.db"
    if not path.exists():
        started = time.perf_counter()
        build(path, messages)
        print(f"built {path}: {THREADS:,} threads and one of {messages:,} messages in {time.perf_counter() - started:.1f} s")
    try:
        reads = tree_reads(path)
        print("tree reads: " + ", ".join(f"{name} {ms:.0f} ms" for name, ms in reads.items()))
        print(f"Memory.turns of the {messages:,}-message thread ({messages // 2:,} turns): {turns_time(path, messages):.2f} s")
        print(f"Replay's open of that thread (its worker): {replay_open_time(path):.2f} s")
        if args.no_ui:
            return 0
        print(f"{'step':<46} {'longest UI gap':>15} {'gaps > 50 ms':>13}")
        for label, longest, over in stalls(path, messages, args.traces):
            print(f"{label:<46} {longest:>12.0f} ms {over:>13}")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
