"""What saves without semantic recall leave for keyword search on Postgres, and what a backlog costs it.

    .venv/bin/python bench/pg_recall_off_backlog.py                 # 10,000 messages saved with recall off
    .venv/bin/python bench/pg_recall_off_backlog.py --messages 50000 --runs 50

A save by a ``Memory`` without semantic recall keys its own messages' keyword docs in its transaction
(``core.recall.own_docs``; before 2026-12-07 it keyed none and the queue's trigger kept them for the next write
with recall, 2,000 a save, or ``memory-studio reindex``). This saves ``--messages`` messages of one resource with
recall off (batches of 500, timed), prints what is queued and times a keyword search of another resource
(median of ``--runs``). Then the same number is written by "another program" (the store's own save, below
``Memory``: what Mastra's writes are), which the queue keeps: the search is timed with that backlog, the queue is
applied (``sync_keywords``, timed) and the search timed again. Run from another checkout, the first part shows
what that code leaves.

Starts its own PostgreSQL (the test suite's helper, as ``bench/scale.py``), stopped at exit.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from scale import _pg_server  # noqa: E402  (the one PostgreSQL of a bench run)

from core import Memory, MemoryOptions, Message  # noqa: E402
from core.embedding import default_embedder  # noqa: E402
from core.recall.tables import QUEUE_TABLE  # noqa: E402
from core.storage import open_store  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()

    def notes(start: int, resource: str) -> list[Message]:
        return [Message.user(f"note {i} about the staging server and item {i % 97}", thread_id=f"{resource}{i % 50}",
                             resource_id=resource)
                for i in range(start, min(start + 500, args.messages))]

    url, _drop = _pg_server().fresh_database()  # type: ignore[attr-defined]
    with open_store(url) as store:
        plain = Memory(store)
        saves = []
        for start in range(0, args.messages, 500):
            began = time.perf_counter()
            plain.save_messages(notes(start, "sam"))
            saves.append((time.perf_counter() - began) * 1000)
        print(f"saved {args.messages:,} messages with recall off, 500 a save: median {statistics.median(saves):.1f} ms "
              f"a save ({sum(saves) / 1000:.2f} s in all)")
        index = Memory(store, MemoryOptions(semantic_recall=True), embedder=default_embedder()).recall_index
        assert index is not None

        def search() -> tuple[float, str | None]:
            times = []
            for _ in range(args.runs):
                began = time.perf_counter()
                found = index.search("staging server", resource_id="ada", mode="keyword", top_k=5)
                times.append((time.perf_counter() - began) * 1000)
            return statistics.median(times), found.reason

        def queued() -> int:
            with store.db.read() as conn:
                return int(conn.exec_driver_sql(f"SELECT count(*) FROM {QUEUE_TABLE}").scalar() or 0)

        def applied() -> None:
            began = time.perf_counter()
            left = index.sync_keywords(limit=10 * args.messages)
            print(f"applying the queue: {time.perf_counter() - began:.2f} s ({left or 'all applied'})")

        ms, reason = search()
        print(f"after them, queued {queued():,}: keyword search of another resource {ms:.2f} ms median; reason: {reason}")
        if queued():
            applied()
            ms, reason = search()
            print(f"queued {queued():,}: keyword search of another resource {ms:.2f} ms median; reason: {reason}")
        for t in range(50):
            store.memory.create_thread(thread_id=f"other{t}", resource_id="other")
        for start in range(0, args.messages, 500):  # another program's writes (below Memory): queued
            store.memory.save_messages(notes(start, "other"))
        ms, reason = search()
        print(f"{args.messages:,} more written by another program, queued {queued():,}: keyword search of another "
              f"resource {ms:.2f} ms median; reason: {reason}")
        applied()
        ms, reason = search()
        print(f"queued {queued():,}: keyword search of another resource {ms:.2f} ms median; reason: {reason}")


if __name__ == "__main__":
    main()
