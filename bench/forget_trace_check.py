"""The check after a forget reads the trace file twice (``DuckDBObservabilityStore.spans_naming``): once while
the forget still holds the file (a tracer's flush waits meanwhile), once after. How long one read takes on a
trace file of ``N`` spans with ~1 KB of input and output each, looking for a resource and its three threads.

    PYTHONPATH=. .venv/bin/python bench/forget_trace_check.py [N]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.traces.spans import SpanRecord  # noqa: E402
from core.traces.store import DuckDBObservabilityStore  # noqa: E402


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    path = Path(tempfile.mkdtemp(prefix="forget-trace-")) / "observability.duckdb"
    store = DuckDBObservabilityStore(path)
    at = datetime(2026, 3, 1, tzinfo=timezone.utc)
    text = "lorem ipsum dolor " * 30
    batch: list[SpanRecord] = []
    for i in range(n):  # 50 users of 3 threads, 5 spans a trace
        batch.append(SpanRecord(trace_id=f"T{i // 5}", span_id=f"s{i}", name="llm", span_type="model_generation",
                                started_at=at + timedelta(seconds=i), ended_at=at + timedelta(seconds=i),
                                thread_id=f"u{i % 50}-t{i % 3}", resource_id=f"u{i % 50}",
                                input={"messages": [{"role": "user", "content": text + str(i)}]},
                                output={"text": text}))
        if len(batch) == 2_000:
            store.write_spans(batch)
            batch = []
    if batch:
        store.write_spans(batch)
    values = ["u7", "u7-t0", "u7-t1", "u7-t2"]
    times = []
    found: set[tuple[str, str]] = set()
    for _ in range(7):
        start = time.perf_counter()
        found = store.spans_naming(values)
        times.append(time.perf_counter() - start)
    print(f"{n:,} spans, file {path.stat().st_size / 1e6:.1f} MB: one read of 4 ids median "
          f"{statistics.median(times) * 1000:.0f} ms (min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}), "
          f"{len(found)} spans found; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
