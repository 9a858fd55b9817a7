"""What naming untitled threads by their first words costs the Studio's thread tree read, on libSQL and Postgres.

    .venv/bin/python bench/thread_tree_openings.py                       # 10,000 untitled threads, both backends
    .venv/bin/python bench/thread_tree_openings.py --threads 3000 --runs 15 --backend libsql

The tree (``studio.reads.load_tree``) reads every thread with ``MemoryStore.tree_summaries`` on each load; with
``openings=True`` the same statement also reads the start of each untitled thread's first user message (a correlated
subquery under ``CASE``, from the (thread_id, createdAt) index). One resource of ``--threads`` untitled threads, each
with an assistant greeting, a user message of ~300 characters and an answer, is built once; then both reads are
timed in turn (alternated, ``--runs`` of each, one unmeasured first): medians of the wall time and of this process's
CPU time (on libSQL the engine runs in it; a busy machine moves the wall time more), and the differences.
A titled thread costs nothing more (``CASE`` skips its subquery): all threads untitled is the worst case.

Postgres: its own server (the test suite's helper, as ``bench/scale.py``), stopped at exit.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from core import Memory, Message  # noqa: E402
from core.storage import open_store  # noqa: E402

T0 = datetime(2026, 11, 1, 9, tzinfo=timezone.utc)
ASK = ("Could you help me plan the week's meals around what is left in the fridge: half a cabbage, four eggs, "
       "a block of feta, rice, two sweet potatoes and some spinach that needs using soon? I cook for two, no "
       "pork, and I would like one dish that keeps for lunch the next day. Thread {n}.")


def build(target: str, threads: int) -> None:
    with open_store(target) as store:
        memory = Memory(store)
        batch: list[Message] = []
        for n in range(threads):
            at = T0 + timedelta(minutes=n)
            tid = f"thread_{n:08x}"
            batch += [Message.assistant("Hello! What can I do for you today?", thread_id=tid, resource_id="walker",
                                        created_at=at),
                      Message.user(ASK.format(n=n), thread_id=tid, resource_id="walker",
                                   created_at=at + timedelta(seconds=5)),
                      Message.assistant("Here is a plan for the week.", thread_id=tid, resource_id="walker",
                                        created_at=at + timedelta(seconds=9))]
            if len(batch) >= 1500:
                memory.save_messages(batch)
                batch = []
        if batch:
            memory.save_messages(batch)


def measure(target: str, runs: int) -> tuple[list[float], list[float], int]:
    """Medians (wall ms, this process's CPU ms) of the read without and with the openings, and the threads named."""
    with open_store(target) as store:
        times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for run in range(runs + 1):
            for openings in (False, True) if run % 2 else (True, False):
                wall, cpu = time.perf_counter(), time.process_time()
                store.memory.tree_summaries(openings=openings)
                if run:
                    times[openings].append(((time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000))
        named = sum(1 for s in store.memory.tree_summaries(openings=True)[1] if s.opening)
    return ([statistics.median(t[i] for t in times[False]) for i in (0, 1)],
            [statistics.median(t[i] for t in times[True]) for i in (0, 1)], named)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--backend", choices=("libsql", "postgres", "both"), default="both")
    args = ap.parse_args()
    targets = []
    if args.backend in ("libsql", "both"):
        folder = Path(tempfile.mkdtemp(prefix="tree-openings-"))
        targets.append(("libSQL", str(folder / "memory.db")))
    if args.backend in ("postgres", "both"):
        from scale import _pg_server  # (the one PostgreSQL of a bench run)

        url, _drop = _pg_server().fresh_database()  # type: ignore[attr-defined]
        targets.append(("Postgres", url))
    for name, target in targets:
        began = time.perf_counter()
        build(target, args.threads)
        built = time.perf_counter() - began
        plain, openings, named = measure(target, args.runs)
        print(f"{name}: {args.threads:,} untitled threads ({3 * args.threads:,} messages, built in {built:.1f} s), "
              f"{named:,} named; tree_summaries, median of {args.runs}:")
        for what, i in (("wall", 0), ("CPU of this process", 1)):
            print(f"  {what}: {plain[i]:.1f} ms without openings, {openings[i]:.1f} ms with "
                  f"({openings[i] - plain[i]:+.1f} ms, {100 * (openings[i] - plain[i]) / plain[i]:+.0f} %)")


if __name__ == "__main__":
    main()
