"""What a turn's stamp read costs (libSQL): the newest message of the thread's resource
(``MemoryStore.newest_in_resource``, what a turn reads since session 31) against the newest of the
thread alone (``newest_message_times``, what it read before), in one resource of T threads among
others (3 threads each), M messages a thread; median of 300 reads, each in its own read transaction.

    .venv/bin/python bench/stamp_newest.py [--threads 10] [--resources 10000] [--messages 5] [--without-index]

``--without-index`` drops the threads-by-resource index (migration ``0030_threads_by_resource``), as a
libSQL file not migrated yet has it: every thread row is then read.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core import Memory, Message, open_store  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=10, help="threads of the measured resource")
    parser.add_argument("--resources", type=int, default=10_000, help="resources in the database (3 threads each)")
    parser.add_argument("--messages", type=int, default=5, help="messages a thread")
    parser.add_argument("--without-index", action="store_true", help="drop the threads-by-resource index first")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(Path(folder) / "memory.db")
        memory = Memory(store)
        t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
        for r in range(args.resources):
            memory.save_messages([
                Message.user(f"message {i}", thread_id=f"r{r}-t{th}", resource_id=f"r{r}",
                             created_at=t0 + timedelta(milliseconds=th * args.messages + i))
                for th in range(args.threads if r == 0 else 3) for i in range(args.messages)], _index=False)

        if args.without_index:
            with store.db.write() as conn:
                conn.exec_driver_sql("DROP INDEX mastra_threads_resourceid_createdat_idx")

        def median_us(read: Callable[[Any], object]) -> float:
            took = []
            for _ in range(300):
                with store.db.read() as conn:
                    start = time.perf_counter()
                    read(conn)
                    took.append(time.perf_counter() - start)
            return statistics.median(took) * 1e6

        for _ in range(2):
            thread = median_us(lambda conn: store.memory.newest_message_times(["r0-t0"], conn))
            resource = median_us(lambda conn: store.memory.newest_in_resource("r0-t0", "r0", conn))
            print(f"resource of {args.threads} threads, {args.resources} resources, {args.messages} messages a thread: "
                  f"thread's newest {thread:.0f} µs, resource's newest {resource:.0f} µs")
        store.close()


if __name__ == "__main__":
    main()
