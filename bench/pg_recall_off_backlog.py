"""What a backlog left by memories without semantic recall costs every keyword search on Postgres.

    .venv/bin/python bench/pg_recall_off_backlog.py                 # 10,000 messages saved with recall off
    .venv/bin/python bench/pg_recall_off_backlog.py --messages 50000 --runs 50

A save by a ``Memory`` without semantic recall keys no keyword doc: the queue's trigger keeps its messages
for the next write with recall (2,000 a save) or ``memory-studio reindex``. Until then every search reads the
backlog (``RecallIndex.backlog``) and says some changes are not keyword-indexed yet, whatever resource it is
for. This saves ``--messages`` messages of one resource with recall off, times a keyword search of another
resource (median of ``--runs``), applies the queue (``sync_keywords``, timed) and times the search again.

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

    url, _drop = _pg_server().fresh_database()  # type: ignore[attr-defined]
    with open_store(url) as store:
        plain = Memory(store)
        for start in range(0, args.messages, 500):
            plain.save_messages([Message.user(f"note {i} about the staging server and item {i % 97}",
                                              thread_id=f"t{i % 50}", resource_id="sam")
                                 for i in range(start, min(start + 500, args.messages))])
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

        ms, reason = search()
        print(f"queued {queued():,}: keyword search of another resource {ms:.2f} ms median; reason: {reason}")
        began = time.perf_counter()
        left = index.sync_keywords(limit=10 * args.messages)
        print(f"applying the queue: {time.perf_counter() - began:.2f} s ({left or 'all applied'})")
        ms, reason = search()
        print(f"queued {queued():,}: keyword search of another resource {ms:.2f} ms median; reason: {reason}")


if __name__ == "__main__":
    main()
