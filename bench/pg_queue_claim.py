"""What a Postgres recall write pays to claim its messages' queue rows while a backlog drains.

    .venv/bin/python bench/pg_queue_claim.py                      # backlog 100,000, batches of 2 and 100
    .venv/bin/python bench/pg_queue_claim.py --backlog 1000000 --runs 100
    .venv/bin/python bench/pg_queue_claim.py --without-index      # the queue as before 0025 (no message_id index)

``pg_keywords.claim_queued`` locks the queue rows of the messages a write is about to key (the
deadlock fix of 2026-12-04). A migrated Mastra database (or one whose docs ``0026`` queued again)
holds a backlog until the writers' drains have applied it; every write in the meantime claims. This
fills the queue of a fresh database with ``--backlog`` rows (as the migration's ``INSERT … SELECT``
does), then times ``claim_queued`` for a turn's 2 new messages and a save's batch of 100 (ids not
queued, and ids at the backlog's end), each in its own transaction, rolled back. It also times the
backlog's insert itself (what the queue's triggers pay for the index, per row) and prints the
claim's plan. ``--without-index`` drops the index first: the same code, the queue as it was.

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

from core.recall import pg_keywords  # noqa: E402
from core.recall.pg_schema import QUEUE_INDEX  # noqa: E402
from core.recall.schema import QUEUE_TABLE  # noqa: E402
from core.storage import open_store  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backlog", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--without-index", action="store_true", help="drop the queue's message_id index first")
    args = ap.parse_args()

    url, _drop = _pg_server().fresh_database()  # type: ignore[attr-defined]
    store = open_store(url)
    db = store.db
    with db.transaction() as conn:
        if args.without_index:
            conn.exec_driver_sql(f"DROP INDEX IF EXISTS {QUEUE_INDEX}")
        indexed = bool(conn.exec_driver_sql("SELECT to_regclass(?) IS NOT NULL", (QUEUE_INDEX,)).scalar())
    start = time.perf_counter()
    with db.transaction() as conn:
        conn.exec_driver_sql(f"INSERT INTO {QUEUE_TABLE} (message_id, op) SELECT 'backlog-' || i, 'insert' "
                             "FROM generate_series(1, ?) i", (args.backlog,))
    fill = time.perf_counter() - start
    with db.transaction() as conn:
        conn.exec_driver_sql(f"ANALYZE {QUEUE_TABLE}")
    print(f"queue index on message_id: {'yes' if indexed else 'no'}; backlog {args.backlog:,} rows inserted in "
          f"{fill * 1000:.0f} ms ({fill / args.backlog * 1e6:.2f} µs a row)")

    cases = {
        "turn (2 new ids)": lambda r: [f"new-{r}-a", f"new-{r}-b"],
        "save (100 new ids)": lambda r: [f"new-{r}-{i}" for i in range(100)],
        "save (100 queued ids)": lambda r: [f"backlog-{args.backlog - 100 * (r % 50) - i}" for i in range(100)],
    }
    with db.read() as conn:
        plan = conn.exec_driver_sql(
            f"EXPLAIN SELECT seq FROM {QUEUE_TABLE} WHERE message_id = ANY(CAST(? AS text[])) ORDER BY seq FOR UPDATE",
            (cases["save (100 new ids)"](0),)).all()
    scans = [r[0].strip().lstrip("-> ").split("  (")[0] for r in plan if "Scan" in r[0]]
    print("claim plan: " + " / ".join(scans))
    for name, ids_of in cases.items():
        times = []
        for r in range(args.runs):
            ids = ids_of(r)
            with db.engine.connect() as conn:
                t0 = time.perf_counter()
                pg_keywords.claim_queued(conn, ids)
                times.append(time.perf_counter() - t0)
                conn.rollback()
        times.sort()
        print(f"claim_queued, {name}: p50 {statistics.median(times) * 1000:.3f} ms, "
              f"p90 {times[int(len(times) * 0.9)] * 1000:.3f} ms ({args.runs} runs)")
    store.close()


if __name__ == "__main__":
    main()
