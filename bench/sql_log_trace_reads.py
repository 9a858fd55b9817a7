"""What View > SQL Log costs a trace-file statement: the log's append alone, then one small DuckDB read (two
parameters, one row) run plainly, through the observed connection ``open_duckdb`` hands out while a store is
watched (``core.traces.locking._Observed``) with nobody observing, and with the log observing; short batches of
each interleaved, the order reversed every other round, medians of the CPU a statement.

    .venv/bin/python bench/sql_log_trace_reads.py [--rounds 60] [--batch 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # (the repository's studio/, not bench/studio.py)

import duckdb  # noqa: E402

from core.traces import locking  # noqa: E402
from studio.logic.sql_log import SqlLog  # noqa: E402

SQL = 'SELECT r."traceId" FROM (SELECT ? AS "traceId") r WHERE r."traceId" = ?'
PARAMS = ("T1", "T1")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    log = SqlLog()
    path = Path(tempfile.mkdtemp()) / "observability.duckdb"
    n = 20_000
    start = time.process_time()
    for _ in range(n):
        log._trace_statement(path, SQL, PARAMS, True)
    print(f"append alone: {(time.process_time() - start) / n * 1e6:.2f} µs CPU a statement")

    con = duckdb.connect(str(path), config={"threads": 1})
    observed = locking._Observed(con, path, True)

    def run(c: object) -> float:
        start = time.process_time()
        for _ in range(args.batch):
            c.execute(SQL, PARAMS).fetchall()  # type: ignore[attr-defined]
        return (time.process_time() - start) / args.batch * 1e6

    spent: dict[str, list[float]] = {"plain": [], "observed, nobody told": [], "observed, logged": []}
    names = list(spent)
    for r in range(args.rounds):
        for name in (names if r % 2 else names[::-1]):
            stop = locking.observe_statements(log._trace_statement) if name == "observed, logged" else None
            spent[name].append(run(con if name == "plain" else observed))
            if stop is not None:
                stop()
    plain = statistics.median(spent["plain"])
    for name, values in spent.items():
        median = statistics.median(values)
        print(f"{name}: {median:.1f} µs CPU a statement (median of {len(values)} batches of {args.batch}; "
              f"{median - plain:+.1f})")
    con.close()
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
