"""Span write throughput into DuckDB and list_traces read latency.

    .venv/bin/python bench/span_throughput.py [--big 100000]

Writes use the store directly (one short-lived connection per batch, as the exporter does), so
batch size 1 shows the per-connection cost. Reads time ``list_traces(limit=50)`` and a
filtered variant on files holding 10k and 100k spans (10 spans per trace).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.traces.store import DuckDBObservabilityStore  # noqa: E402
from core.traces.spans import SpanRecord, TraceFilters  # noqa: E402

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)


def make_spans(n_traces: int, per_trace: int = 10, offset: int = 0) -> list[SpanRecord]:
    spans: list[SpanRecord] = []
    for t in range(offset, offset + n_traces):
        base = T0 + timedelta(seconds=t)
        root = f"r{t}"
        for i in range(per_trace):
            is_root = i == 0
            spans.append(SpanRecord(
                trace_id=f"trace{t:08d}", span_id=root if is_root else f"s{t}-{i}",
                parent_span_id=None if is_root else root,
                name="agent run: bench" if is_root else ("llm: m" if i == 1 else "memory: recall"),
                span_type="agent_run" if is_root else ("model_generation" if i == 1 else "memory_operation"),
                started_at=base + timedelta(milliseconds=i), ended_at=base + timedelta(milliseconds=20 + i),
                thread_id=f"th{t % 50}", resource_id=f"u{t % 7}",
                input={"messages": [{"role": "user", "content": "hello " * 20}]},
                attributes={"usage": {"inputTokens": 100, "outputTokens": 20}} if i == 1
                else {"operationType": "recall"},
            ))
    return spans


def bench_writes(tmp: Path) -> None:
    for batch in (1, 50, 500):
        store = DuckDBObservabilityStore(tmp / f"w{batch}.duckdb")
        total = {1: 100, 50: 2000, 500: 10000}[batch]
        spans = make_spans(total // 10)
        began = time.perf_counter()
        for i in range(0, len(spans), batch):
            store.write_spans(spans[i : i + batch], budget_s=5)
        elapsed = time.perf_counter() - began
        print(f"write  batch={batch:>4}: {total / elapsed:>9,.0f} spans/s "
              f"({elapsed / (total / batch) * 1000:.1f} ms per batch, {total} spans)")


def bench_reads(tmp: Path, n_spans: int) -> None:
    store = DuckDBObservabilityStore(tmp / f"r{n_spans}.duckdb")
    for offset in range(0, n_spans // 10, 5000):
        store.write_spans(make_spans(min(5000, n_spans // 10 - offset), offset=offset), budget_s=30)
    for label, kwargs in (
        ("list_traces(limit=50)", {}),
        ("list_traces(thread_id=...)", {"filters": TraceFilters(thread_id="th3")}),
        ("list_traces(status='error')", {"filters": TraceFilters(status="error")}),
    ):
        times = []
        for _ in range(7):
            began = time.perf_counter()
            result = store.list_traces(limit=50, **kwargs)  # type: ignore[arg-type]
            times.append(time.perf_counter() - began)
            assert not result.busy
        print(f"read {n_spans:>7,} spans {label:<28}: median {statistics.median(times) * 1000:6.1f} ms "
              f"(min {min(times) * 1000:.1f})")
    began = time.perf_counter()
    trace = store.get_trace("trace00000042")
    print(f"read {n_spans:>7,} spans get_trace (10 spans)        : {(time.perf_counter() - began) * 1000:6.1f} ms"
          f" [{len(trace)}]")
    print(f"     file size: {store.file_size() / 1e6:.1f} MB")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--big", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        bench_writes(tmp)
        for n in (10_000, args.big):
            bench_reads(tmp, n)


if __name__ == "__main__":
    main()
