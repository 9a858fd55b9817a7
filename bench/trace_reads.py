"""What a Traces-pane read of the DuckDB trace file costs, and how much of it is opening the file.

Builds a trace file of N runs (8 spans each, 20 threads), then times with one reader: opening and
closing the file alone; the first page of one thread read as the pane read it before (list, count and
usage each in its own open) and as it reads it now (the three in one ``SpanReader.reading`` block);
and one trace's spans. Medians of wall clock and of this process's CPU, 30 rounds each.

    .venv/bin/python bench/trace_reads.py [--runs 2000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb  # noqa: E402

from core.traces.spans import SpanRecord, TraceFilters  # noqa: E402
from core.traces.store import DuckDBObservabilityStore  # noqa: E402


def build(path: Path, runs: int) -> None:
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    spans: list[SpanRecord] = []
    for t in range(runs):
        trace, began = f"{t:032x}", start + timedelta(seconds=t)
        root = f"{t:08x}00000000"
        spans.append(SpanRecord(trace, root, "agent run: 'chef'", "agent_run", began, thread_id=f"th{t % 20}",
                                ended_at=began + timedelta(seconds=1), created_at=began))
        for i in range(1, 8):
            spans.append(SpanRecord(
                trace, f"{t:08x}{i:08x}", "llm: 'scripted/demo'", "model_generation", began, parent_span_id=root,
                ended_at=began + timedelta(milliseconds=500), created_at=began, thread_id=f"th{t % 20}",
                input={"messages": [{"role": "user", "content": "x" * 400}]},
                attributes={"model": "scripted/demo", "usage": {"input_tokens": 10, "output_tokens": 3}}))
    DuckDBObservabilityStore(path).write_spans(spans, budget_s=60)


def timed(fn: Callable[[], object], rounds: int = 30) -> str:
    wall, cpu = [], []
    for _ in range(rounds):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - w) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return f"wall {statistics.median(wall):6.1f} ms   cpu {statistics.median(cpu):6.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "observability.duckdb"
        build(path, args.runs)
        reader = DuckDBObservabilityStore(path, read_only=True)
        thread = TraceFilters(thread_id="th3")
        bill = TraceFilters(thread_id="th3")

        def apart() -> None:
            reader.list_traces(50, 0, thread)
            reader.count_traces(thread)
            reader.usage_by_model(bill)

        def together() -> None:
            with reader.reading():
                apart()

        print(f"trace file: {args.runs} runs, {path.stat().st_size / 1e6:.1f} MB")
        print(f"open + close the file            {timed(lambda: duckdb.connect(str(path), read_only=True).close())}")
        print(f"page read, one open per read (3) {timed(apart)}")
        print(f"page read, one reading block (1) {timed(together)}")
        print(f"one trace's spans (get_trace)    {timed(lambda: reader.get_trace(f'{3:032x}'))}")


if __name__ == "__main__":
    main()
