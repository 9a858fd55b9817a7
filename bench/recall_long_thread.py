"""Recall on a long thread after a restart: the first vector search of a 100,000-message thread, thread-scoped
and narrowed to the thread within its (partitioned) resource, then the first hybrid search of the resource,
and the searches after each, with the process's peak memory.

    .venv/bin/python bench/recall_long_thread.py                  # 100,000 messages (about 1 GB of disk, ~20 s to write)
    .venv/bin/python bench/recall_long_thread.py --messages 20000

The thread is written through ``Memory.save_messages`` with semantic recall on and the hashing embedder at 512
dimensions (the default model's size; the model itself costs nothing here), so the writer partitions the
resource as it would a real one. Each scope is then searched by a fresh process (nothing cached: "after a
restart"), which prints its first search, the median of the next ones and its peak RSS; when the index was
still loading its keyword memory or thread order in the background after them, how much longer that took
and the median of the same searches after. The scratch folder is removed at the end.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from core import Memory, MemoryOptions, open_store  # noqa: E402
from core.embedding import HashingEmbedder  # noqa: E402
from core.messages import Message  # noqa: E402

QUERIES = ["topic 5 with some words", "message number 77", "about topic 12", "number 4242 about topic 3",
           "some words about topic 30", "message number 99901"]


def write(path: Path, n: int) -> float:
    store = open_store(path)
    memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=True), embedder=HashingEmbedder(512))
    memory.create_thread(resource_id="bench", thread_id="long")
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    started = time.perf_counter()
    for start in range(0, n, 1000):
        memory.save_messages([
            Message.create("user" if i % 2 == 0 else "assistant",
                           [{"type": "text", "text": f"message number {i} about topic {i % 37} with some words"}],
                           thread_id="long", resource_id="bench", created_at=t0 + timedelta(milliseconds=i))
            for i in range(start, min(start + 1000, n))])
    store.close()
    return time.perf_counter() - started


def _peak_mb() -> float:
    """This process's peak resident memory (VmHWM: ``ru_maxrss`` would carry the writer's peak across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# Vector searches of the thread, of the thread narrowed within its resource, and a hybrid search of the
# resource (its first one also loads the keyword memory and the thread's order: Known problems).
SCOPES = ("thread", "narrowed", "hybrid")


def search(path: Path, scope: str) -> None:
    """In this (fresh) process: the scope's first search, then the others; one line."""
    store = open_store(path)
    memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=True), embedder=HashingEmbedder(512))
    resource_id = "bench" if scope in ("narrowed", "hybrid") else None
    thread_id = None if scope == "hybrid" else "long"
    times = []
    for q in QUERIES:
        started = time.perf_counter()
        hits = memory.search(q, resource_id=resource_id, thread_id=thread_id, top_k=5,
                             mode="hybrid" if scope == "hybrid" else "vector")
        times.append((time.perf_counter() - started) * 1000)
        assert hits, f"no hits for {q!r}"
    index = next(v for k, v in store.extensions.items() if k.startswith("recall-index:"))
    loading = index.loads.busy()
    waited = time.perf_counter()
    index.loads.wait()  # (a large keyword memory and thread order load in the background meanwhile)
    waited = (time.perf_counter() - waited) * 1000
    after = []
    for q in QUERIES[1:]:
        started = time.perf_counter()
        memory.search(q, resource_id=resource_id, thread_id=thread_id, top_k=5,
                      mode="hybrid" if scope == "hybrid" else "vector")
        after.append((time.perf_counter() - started) * 1000)
    peak = _peak_mb()
    print(f"{scope:>9}: first search {times[0]:,.0f} ms, next {len(times) - 1} median "
          f"{statistics.median(times[1:]):.1f} ms, peak RSS {peak:,.0f} MB"
          + (f"; background loads ended {waited:,.0f} ms after them, then a median of {statistics.median(after):.1f} ms"
             if loading else ""), flush=True)
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--search", choices=SCOPES, help=argparse.SUPPRESS)  # (the child process)
    ap.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.search:
        search(args.db, args.search)
        return
    folder = Path(tempfile.mkdtemp(prefix="recall-long-thread-"))
    try:
        db = folder / "long.db"
        print(f"{args.messages:,} messages in one thread written in {write(db, args.messages):.1f} s")
        for scope in SCOPES:
            subprocess.run([sys.executable, __file__, "--search", scope, "--db", str(db)], check=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
