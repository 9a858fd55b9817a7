"""Two processes on one DuckDB file: the agent writes spans while the Studio reads them.

DuckDB lets no other process open a file while one holds it for writing, so these tests use real
processes, not threads. They assert on counts and errors only; waits are reported, not asserted.
The reader and the writer overlap by construction, not by luck: halfway through, the writer waits
(through a marker file) until the reader has read spans it wrote, and only then writes the rest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core.traces.store import DuckDBObservabilityStore
from core.traces.tracer import DuckDBSpanExporter, SpanType, Tracer

REPO = Path(__file__).resolve().parents[2]

HOLD_LOCK = textwrap.dedent(
    """
    import sys, duckdb
    con = duckdb.connect(sys.argv[1])  # read-write: nobody else may open the file now
    print("locked", flush=True)
    sys.stdin.readline()
    con.close()
    """
)

WRITER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from core.traces.tracer import DuckDBSpanExporter, SpanType, Tracer
    path, traces, per_trace = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    half, reader_saw, done = (Path(a) for a in sys.argv[4:7])
    exporter = DuckDBSpanExporter(path, batch_size=7, flush_interval_s=0.02, max_queue=40)
    tracer = Tracer(exporter)
    span_ids, errors, slowest_export = [], [], 0.0
    waited_for_reader = False
    for t in range(traces):
        if t == traces // 2:  # halfway: wait until the reader has read what is written so far
            exporter.flush(timeout=60)
            half.touch()
            deadline = time.monotonic() + 240
            while not reader_saw.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            waited_for_reader = reader_saw.exists()
        try:
            with tracer.start_span(f"agent run {t}", SpanType.AGENT_RUN, thread_id="th",
                                   resource_id="u") as root:
                span_ids.append(root.span_id)
                for i in range(per_trace - 1):
                    began = time.monotonic()
                    with tracer.memory_operation("recall", input={"i": i}) as child:
                        span_ids.append(child.span_id)
                    slowest_export = max(slowest_export, time.monotonic() - began)
        except Exception as exc:
            errors.append(repr(exc))
        time.sleep(0.03)  # pacing only: lets the reader interleave
    exporter.shutdown(timeout=60)
    done.touch()
    s = exporter.stats
    print(json.dumps({"span_ids": span_ids, "errors": errors, "written": s.written,
                      "waited_for_reader": waited_for_reader,
                      "spilled": s.spilled, "imported": s.imported, "dropped": s.dropped,
                      "busy": s.busy, "queued": exporter.queued,
                      "max_open_wait_s": exporter.store.wait_stats.max_wait_s,
                      "slowest_span_s": slowest_export}))
    """
)

READER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from core.traces.store import DuckDBObservabilityStore
    path, expected = sys.argv[1], int(sys.argv[2])
    half, reader_saw, done = (Path(a) for a in sys.argv[3:6])
    store = DuckDBObservabilityStore(path, read_only=True, read_budget_s=0.2)
    seen, complete, errors = set(), set(), []
    busy = stale = polls = 0
    slowest_read = 0.0
    seen_while_writer_ran = 0  # spans read before the writer finished
    deadline = time.monotonic() + 240  # only reached when the writer failed; the test then fails
    while len(seen) < expected and time.monotonic() < deadline:
        polls += 1
        try:
            began = time.monotonic()
            page = store.list_traces(limit=1000)
            slowest_read = max(slowest_read, time.monotonic() - began)
            busy += page.busy
            stale += page.stale
            if page:  # like the Studio: the newest trace is open in the detail pane
                busy += store.get_trace(page[0].trace_id).busy
            for summary in page:
                if summary.trace_id in complete:
                    continue
                spans = store.get_trace(summary.trace_id)
                busy += spans.busy
                seen.update(s.span_id for s in spans)
                if not spans.busy and len(spans) == summary.span_count:
                    complete.add(summary.trace_id)
        except Exception as exc:
            errors.append(repr(exc))
        if not done.exists():
            seen_while_writer_ran = len(seen)
            if seen and half.exists():
                reader_saw.touch()  # lets the writer write its second half
        time.sleep(0.01)
    print(json.dumps({"seen": sorted(seen), "errors": errors, "busy": busy, "stale": stale,
                      "seen_while_writer_ran": seen_while_writer_ran,
                      "polls": polls, "max_open_wait_s": store.wait_stats.max_wait_s,
                      "slowest_read_s": slowest_read}))
    """
)


def run_python(code: str, *args: str, stdin: int | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": ""},
    )


@pytest.mark.slow
def test_agent_writes_while_studio_reads_and_every_span_arrives(tmp_path: Path) -> None:
    path = tmp_path / "observability.duckdb"
    traces, per_trace = 30, 10
    markers = [str(tmp_path / name) for name in ("writer-half", "reader-saw", "writer-done")]
    reader = run_python(READER, str(path), str(traces * per_trace), *markers)
    writer = run_python(WRITER, str(path), str(traces), str(per_trace), *markers)
    w_out, w_err = writer.communicate(timeout=300)
    r_out, r_err = reader.communicate(timeout=300)
    assert writer.returncode == 0, w_err
    assert reader.returncode == 0, r_err
    w, r = json.loads(w_out), json.loads(r_out)
    print("writer:", {k: v for k, v in w.items() if k != "span_ids"})
    print("reader:", {k: v for k, v in r.items() if k != "seen"})

    assert w["errors"] == [] and r["errors"] == []
    # The reader read spans while the writer was still running (and still had half its runs to write).
    assert w["waited_for_reader"] is True
    assert 0 < r["seen_while_writer_ran"]
    assert len(w["span_ids"]) == traces * per_trace
    assert (w["dropped"], w["queued"]) == (0, 0)
    assert set(r["seen"]) == set(w["span_ids"])  # every span written was read live
    store = DuckDBObservabilityStore(path)
    assert store.count_traces() == traces
    assert sum(t.span_count for t in store.list_traces(limit=100)) == traces * per_trace


def test_while_another_process_holds_the_file_nothing_fails_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    path = tmp_path / "observability.duckdb"
    store = DuckDBObservabilityStore(path, read_budget_s=0.05)
    exporter = DuckDBSpanExporter(store, background=False, max_queue=8, write_budget_s=0.05)
    tracer = Tracer(exporter)
    with tracer.start_span("first run", SpanType.AGENT_RUN):
        pass
    assert exporter.flush(timeout=10)
    assert [t.name for t in store.list_traces()] == ["first run"]  # now cached

    holder = run_python(HOLD_LOCK, str(path), stdin=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        page = store.list_traces()
        assert page.busy and page.stale and [t.name for t in page] == ["first run"]
        assert store.get_trace("never-read").busy
        assert store.count_traces().busy

        for n in range(4):  # 4 runs x 3 spans: more than max_queue, so some spill to disk
            with tracer.start_span(f"run {n}", SpanType.AGENT_RUN):
                with tracer.memory_operation("save"):
                    with tracer.start_span("tool: t", SpanType.TOOL_CALL):
                        pass
        assert exporter.flush(timeout=0.2) is False  # busy: stays queued, nothing raised
        assert exporter.stats.busy > 0 and exporter.stats.spilled > 0
        assert list(path.parent.glob("*.spill-*.jsonl"))
        assert store.prune(keep_days=1, budget_s=0.05).busy
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=60)

    assert exporter.flush(timeout=30) is True
    assert exporter.stats.dropped == 0 and exporter.stats.imported == exporter.stats.spilled
    assert not list(path.parent.glob("*.spill-*"))
    fresh = store.list_traces(limit=10)
    assert not fresh.busy and len(fresh) == 5
    assert sum(t.span_count for t in fresh) == 1 + 4 * 3
