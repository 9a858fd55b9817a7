"""``export --with-traces`` at scale: spans read in batches and written as they are read, byte for byte
the file the per-trace reads gave, on DuckDB (beside a libSQL file) and on Postgres."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import pytest

from core import open_store
from core.cli import main
from core.timeutil import FixedClock
from core.traces.spans import SpanRecord, TraceFilters
from core.transfer import ExportOptions, Streamed, export_data, render_chunks, write_atomically
from core.transfer.replay_sections import iter_trace_spans

pytestmark = pytest.mark.backends

NewDb = Callable[[str], "Path | str"]
T0 = datetime(2026, 5, 1, 8, 0, tzinfo=timezone.utc)
THREADS = ("t1", "t2", "t3", "t4")  # created in this order: the export's order of threads


def span(trace: str, span_id: str, at: float, *, parent: str | None = None, thread: str | None = None,
         **extra: Any) -> SpanRecord:
    started = T0 + timedelta(seconds=at)
    fields: dict[str, Any] = {"span_type": "agent_run" if parent is None else "tool_call",
                              "ended_at": started + timedelta(milliseconds=250), "resource_id": "r",
                              "thread_id": thread, **extra}
    return SpanRecord(trace_id=trace, span_id=span_id, parent_span_id=parent, name=f"{span_id} · step",
                      started_at=started, **fields)


def run_of(trace: str, thread: str, at: float, n: int = 4) -> list[SpanRecord]:
    """A root and ``n - 1`` children with attributes, events, an error and a nested child."""
    root = span(trace, f"{trace}-root", at, thread=thread, input={"messages": [{"role": "user", "content": "é\n中"}]},
                output={"text": "ok"}, metadata={"k": [1, 2.5, None, True]})
    spans = [root]
    for i in range(1, n):
        spans.append(span(trace, f"{trace}-s{i}", at + i / 10, parent=root.span_id if i < 3 else f"{trace}-s1",
                          thread=thread, span_type="model_generation" if i == 1 else "tool_call",
                          attributes={"usage": {"inputTokens": 10 * i, "outputTokens": i}, "events": [
                              {"name": "retry", "attributes": {"attempt": i}}]},
                          links=[{"traceId": trace, "spanId": root.span_id}] if i == 2 else None,
                          error={"message": f"tool {i} failed", "details": {"code": "E\u0007"}} if i == 2 else None))
    return spans


def fixture_spans() -> list[SpanRecord]:
    spans: list[SpanRecord] = []
    for n, thread in enumerate(THREADS[:3]):
        for k in range(5):
            spans += run_of(f"{n}{k}" + "a" * 30, thread, 100 * n + 7 * k)
    # Two runs of t1 starting at the same moment: the trace id breaks the tie.
    spans += run_of("1" + "b" * 31, "t1", 50) + run_of("0" + "b" * 31, "t1", 50)
    # A run of t1 whose child names t2: listed for both, written once, under t1 (the first thread).
    spans += run_of("c" * 32, "t1", 60) + [span("c" * 32, "c-in-t2", 60.5, parent="c" * 32 + "-root", thread="t2")]
    # A run whose root names no thread: it is t2's through a child.
    spans += [span("d" * 32, "d-root", 150), span("d" * 32, "d-child", 150.1, parent="d-root", thread="t2")]
    # Foreign data: two roots, an orphan, a parent cycle, a running span and a point event.
    spans += [span("e" * 32, "e-root1", 210, thread="t3"), span("e" * 32, "e-root2", 205, thread="t3"),
              span("e" * 32, "e-orphan", 211, parent="gone", thread="t3"),
              span("e" * 32, "e-cyc1", 212, parent="e-cyc2", thread="t3"),
              span("e" * 32, "e-cyc2", 212, parent="e-cyc1", thread="t3"),
              span("e" * 32, "e-running", 213, parent="e-root1", thread="t3", ended_at=None),
              span("e" * 32, "e-event", 214, parent="e-root1", thread="t3", is_event=True, ended_at=None)]
    # Another resource's thread: not exported.
    spans += run_of("f" * 32, "x", 5)
    return spans


def seed(db: "Path | str") -> None:
    with open_store(db) as store:
        for n, thread in enumerate(THREADS):
            store.memory.create_thread(thread_id=thread, resource_id="r", title=thread,
                                       created_at=T0 + timedelta(minutes=n))
        store.memory.create_thread(thread_id="x", resource_id="other", created_at=T0)
        assert store.observability is not None
        store.observability.write_spans(fixture_spans())


def per_trace_reference(store: Any, thread_ids: list[str]) -> list[dict[str, Any]]:
    """What ``export --with-traces`` wrote before spans were read in batches: each thread's runs by
    OFFSET pages of ``list_traces``, each run read alone with ``get_trace``."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for tid in thread_ids:
        offset = 0
        while True:
            page = store.observability.list_traces(limit=3, offset=offset, filters=TraceFilters(thread_id=tid))
            assert not page.busy
            for summary in page:
                if summary.trace_id not in seen:
                    seen.add(summary.trace_id)
                    out.extend(s.to_json_dict() for s in store.observability.get_trace(summary.trace_id))
            if len(page) < 3:
                break
            offset += 3
    return out


def reference_file(store: Any, clock_start: datetime) -> str:
    """The whole export file as ``json.dumps`` of the document with the per-trace spans wrote it."""
    data = export_data(store, resource_id="r", options=ExportOptions(traces=True), clock=FixedClock(clock_start))
    data["traces"] = per_trace_reference(store, [t["id"] for t in data["threads"]])
    data["counts"]["traces"] = len(data["traces"])
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def test_export_with_traces_reads_runs_in_batches_and_writes_the_same_file(
        tmp_path: Path, db_path: "Path | str", new_db: NewDb) -> None:
    seed(db_path)
    with open_store(db_path) as store:
        reference = reference_file(store, T0)
        spans = json.loads(reference)["traces"]
        # Every fixture span of resource r, each once; the cycle and the orphan are kept.
        assert len(spans) == len(fixture_spans()) - 4
        assert len({(s["traceId"], s["spanId"]) for s in spans}) == len(spans)

        # The batched read, with pages, thread chunks and batches smaller than the data (every boundary
        # crossed, ties on startedAt across a page included), gives the spans in the same order.
        for chunk, page, batch in ((1, 1, 1), (2, 2, 3), (3, 5, 2), (200, 5000, 500)):
            assert list(iter_trace_spans(store, list(THREADS), thread_chunk=chunk, page=page, batch_size=batch)) \
                == spans, (chunk, page, batch)

        # The file, written as the spans are read, is byte for byte the reference.
        data = export_data(store, resource_id="r", options=ExportOptions(traces=True), clock=FixedClock(T0),
                           streamed=True)
        assert isinstance(data["traces"], Streamed)
        out = tmp_path / "streamed.json"
        write_atomically(out, render_chunks(data, "json"))
        assert out.read_bytes() == reference.encode("utf-8")
        assert data["counts"]["traces"] == len(spans)
        # The document as a list (the API's default) renders the same text.
        listed = export_data(store, resource_id="r", options=ExportOptions(traces=True), clock=FixedClock(T0))
        assert "".join(render_chunks(listed, "json")) == reference

    # The command writes that file (but for its time), and it imports with every span.
    cli_file = tmp_path / "cli.json"
    err = io.StringIO()
    assert main(["export", "--db", str(db_path), "--resource", "r", "--with-traces", "-o", str(cli_file)],
                out=io.StringIO(), err=err) == 0, err.getvalue()
    assert f"{len(spans)} spans" in err.getvalue()

    def timeless(text: str) -> str:
        return re.sub(r'\n  "exportedAt": "[^"]*",', "", text, count=1)

    assert timeless(cli_file.read_text(encoding="utf-8")) == timeless(reference)
    target = new_db("dst/target.db")
    if isinstance(target, Path):
        target.parent.mkdir()
    out_text, err = io.StringIO(), io.StringIO()
    assert main(["import", "--db", str(target), str(cli_file), "--no-index"], out=out_text, err=err) == 0, \
        err.getvalue()
    assert f"{len(spans)} spans" in out_text.getvalue()
    with open_store(target) as copy:
        assert list(iter_trace_spans(copy, list(THREADS))) == spans


def test_a_streamed_list_writes_what_json_dumps_writes() -> None:
    """The file written in pieces is ``json.dumps(..., indent=2)`` of the whole document, whatever it holds."""
    rows = [{"a": "x\ny\u2028\"\\", "b": [], "c": {}, "d": [1, {"e": None, "f": 1.5e-7}], "g": "中"}, {}, {"h": [[]]}]
    head = {"format": "f", "nested": {"list": [1, [2, [3, {}]]], "empty": []}, "s": "\u0000\t"}
    for listed in (rows, []):
        whole = {**head, "traces": listed, "after": [{"x": 1}], "counts": {"traces": len(listed)}}
        streamed = {**head, "traces": Streamed(lambda listed=listed: iter(listed)), "after": [{"x": 1}],
                    "counts": {"traces": None}}
        assert "".join(render_chunks(streamed, "json")) == json.dumps(whole, ensure_ascii=False, indent=2) + "\n"
        assert streamed["counts"] == {"traces": len(listed)}


def busy_halfway(db_path: Path, write: Callable[[Any], None]) -> None:
    """``write`` (a writer of the export's pieces) given a resource's export whose trace store turns busy
    after the first batch of spans (a compaction in another process holds it): it must refuse with what
    to do."""
    from core.transfer import TransferError

    from .test_traces_locking import Holder

    seed(db_path)
    holders: list[Holder] = []
    with open_store(db_path) as store:
        assert store.observability is not None
        store.observability.read_budget_s = 0.2
        data = export_data(store, resource_id="r", options=ExportOptions(traces=True), streamed=True)
        data["traces"] = Streamed(lambda: iter_trace_spans(store, list(THREADS), batch_size=2))

        def chunks() -> Any:
            for n, piece in enumerate(render_chunks(data, "json")):
                if n == 40 and not holders:  # well inside the spans: the compaction starts now
                    holders.append(Holder(store.observability.path.with_name(
                        store.observability.path.name + ".lock"), "ex"))
                yield piece

        try:
            with pytest.raises(TransferError, match="is busy .*export again in a moment, or export without "
                                                    "--with-traces"):
                write(chunks())
        finally:
            for holder in holders:
                holder.release()
    assert holders


@pytest.mark.libsql_only
def test_a_trace_store_busy_halfway_leaves_the_file_as_it_was(tmp_path: Path, db_path: Path) -> None:
    """Spans are read while the file is written: a trace store that turns busy halfway refuses the export
    with what to do, and the file being replaced and its folder are left exactly as they were."""
    out = tmp_path / "out" / "r.json"
    out.parent.mkdir()
    out.write_text("previous export\n", encoding="utf-8")
    busy_halfway(db_path, lambda pieces: write_atomically(out, pieces))
    assert out.read_text(encoding="utf-8") == "previous export\n"
    assert [p.name for p in out.parent.iterdir()] == ["r.json"]


@pytest.mark.libsql_only
def test_export_to_standard_output_writes_the_file_export_and_holds_no_span_list(tmp_path: Path, db_path: Path) -> None:
    """``export --with-traces`` without ``-o`` writes what ``-o`` writes, with the spans read in batches
    as for a file: what it holds at once is a batch of runs and a bounded buffer, not every span and the
    whole text (600 runs read 20 a query, ~4 MB of JSON: the peak was ~8x the text before). Measured in
    a process of its own, so that no other test's threads allocate while the peak is taken."""
    with open_store(db_path) as store:
        store.memory.create_thread(thread_id="t", resource_id="r", created_at=T0)
        assert store.observability is not None
        spans: list[SpanRecord] = []
        for k in range(600):
            spans += run_of(f"{k:08d}" + "a" * 24, "t", k)
        store.observability.write_spans(spans)
    written = tmp_path / "t.json"
    child = f"""
import io, json, sys, tracemalloc
import core.transfer.format as fmt
import core.transfer.replay_sections as sections
from core.cli import main

class Sink(io.TextIOBase):  # standard output that counts what it is given and keeps none of it
    size = 0
    def write(self, s):
        self.size += len(s)
        return len(s)

fmt.HELD_IN_MEMORY = 256 * 1024  # (a small buffer and small batches: both bounds far below the text)
sections.TRACE_BATCH = 20
argv = ["export", "--db", {str(db_path)!r}, "--thread", "t", "--with-traces"]
# The file export first: what the command imports and opens is in memory before the peak is taken.
assert main([*argv, "-o", {str(written)!r}], out=io.StringIO(), err=io.StringIO()) == 0
sink = Sink()
tracemalloc.start()
code = main(argv, out=sink, err=io.StringIO())
print(json.dumps([code, tracemalloc.get_traced_memory()[1], sink.size]))
"""
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    code, peak, size = json.loads(done.stdout.strip().splitlines()[-1])
    assert code == 0
    assert peak < size / 2, (peak, size)  # (about a quarter now, 8x before)
    text = re.sub(r'\n  "exportedAt": "[^"]*",', "", written.read_text(encoding="utf-8"), count=1)
    assert json.loads(text)["counts"]["traces"] == len(spans)
    # The same document but for its time: the stream's size less its exportedAt line.
    stamp = len(written.read_text(encoding="utf-8")) - len(text)
    assert size - stamp == len(text)


@pytest.mark.libsql_only
def test_a_trace_store_busy_halfway_leaves_standard_output_empty(db_path: Path) -> None:
    """Written to standard output, a trace store that turns busy halfway leaves nothing there (not half a
    document, even past the size held in memory) and says what to do."""
    from core.transfer.format import write_whole

    out = io.StringIO()
    busy_halfway(db_path, lambda pieces: write_whole(out, pieces, held_in_memory=64))
    assert out.getvalue() == ""
