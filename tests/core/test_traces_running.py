"""A run in progress shows in the trace store while it runs, and says so when its process died.

A span is exported when it ends, so a turn hanging on a slow model or a long tool call used to show
nothing until it ended. Now a span open for a while is written as a running row (no end time) that
its end replaces; a running row whose writing process is gone reads as never finished.

The runs here are real agent turns (scripted model) whose tool blocks on an event or on the test's
word, read by a second store object (what the Studio opens), and for the death of the writer a real
subprocess killed with SIGKILL mid-run. Waits poll with generous deadlines; nothing is timed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TypeVar

import pytest

from core import Agent, open_store
from core.agent import Tool
from core.llm import ScriptedModel
from core.llm.scripted import ScriptedReply, tool_call
from core.traces.home import trace_home
from core.traces.live import RUNNING_KEY, WriterLease, live_writers, running_writer, writer_alive
from core.traces.spans import SpanRecord, TraceFilters
from core.traces.store import DuckDBObservabilityStore

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], what: str, deadline_s: float = 60.0) -> T:
    """Poll ``probe`` until it answers; the deadline only ends a test that already failed."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        found = probe()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"never saw {what}")


def blocking_agent(store: object, gate: threading.Event, entered: threading.Event) -> Agent:
    def lookup(args: dict[str, object], _ctx: object) -> dict[str, object]:
        entered.set()
        gate.wait(120)
        return {"found": args.get("q")}

    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("lookup", {"q": "peanuts"}),)), "No peanuts."])
    return Agent("chef", instructions="Be brief.", model=model, tools=[Tool("lookup", "Look it up.", lookup)],
                 tracer=store.tracer())  # type: ignore[attr-defined]


def running_tool(reader: DuckDBObservabilityStore) -> list[SpanRecord] | None:
    """The spans of the one trace, once its blocked tool call shows as running."""
    page = reader.list_traces()
    if len(page) != 1:
        return None
    spans = reader.get_trace(page[0].trace_id)
    return list(spans) if any(s.span_type == "tool_call" and s.running for s in spans) else None


def test_a_turn_blocked_in_a_tool_shows_running_then_finished_with_nothing_twice(tmp_path: Path) -> None:
    gate, entered = threading.Event(), threading.Event()
    with open_store(tmp_path / "memory.db") as store:
        agent = blocking_agent(store, gate, entered)
        turn = threading.Thread(target=lambda: agent.generate("Anything with peanuts?",
                                                              memory={"resource": "ada", "thread": "t1"}))
        turn.start()
        try:
            assert entered.wait(60)
            path = trace_home(store.location, store.db).path
            assert path is not None
            reader = DuckDBObservabilityStore(path, read_only=True)  # a second connection, as the Studio's

            live = wait_for(lambda: running_tool(reader), "the blocked tool call as a running span")
            summary = reader.list_traces()[0]
            assert summary.status == "running"
            assert summary.ended_at is None and summary.duration_ms is None  # no made-up end or length
            assert reader.list_traces(filters=TraceFilters(status="running"))[0].trace_id == summary.trace_id
            assert reader.list_traces(filters=TraceFilters(status="ok")) == []
            by_type = {s.span_type: s for s in live}
            root, tool, model_call = by_type["agent_run"], by_type["tool_call"], by_type["model_generation"]
            assert root.running and tool.running and root.ended_at is None and tool.duration_ms is None
            assert tool.input == {"q": "peanuts"}  # what the tool was called with, while it runs
            assert not model_call.running  # the model call that asked for the tool had ended: shown finished
            assert running_writer(root.metadata) is not None
            assert reader.get_trace(summary.trace_id).unfinished == frozenset()  # its writer lives
            running_ids = [s.span_id for s in live]
        finally:
            gate.set()
            turn.join(60)
        store.tracer().flush(30)

        done = reader.list_traces()
        assert len(done) == 1 and done[0].status == "ok" and done[0].duration_ms is not None
        spans = reader.get_trace(done[0].trace_id)
        ids = [s.span_id for s in spans]
        assert len(ids) == len(set(ids)) == done[0].span_count  # nothing twice
        assert set(running_ids) <= set(ids)  # nothing seen running went missing
        assert all(not s.running for s in spans)
        assert all(not (isinstance(s.metadata, dict) and RUNNING_KEY in s.metadata) for s in spans)
        assert [s.span_type for s in spans].count("model_generation") == 2


def test_a_running_row_gives_way_to_the_finished_span_never_the_reverse(tmp_path: Path) -> None:
    store = DuckDBObservabilityStore(tmp_path / "observability.duckdb")
    start = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)
    running = SpanRecord("t" * 32, "s" * 16, "agent run: x", "agent_run", start, created_at=start,
                         metadata={RUNNING_KEY: {"writer": "1-abc", "pid": 1, "host": "h"}})
    finished = SpanRecord("t" * 32, "s" * 16, "agent run: x", "agent_run", start, created_at=start,
                          ended_at=start + timedelta(seconds=3), output={"text": "done"})
    store.write_spans([running])
    assert store.get_trace("t" * 32)[0].running
    store.write_spans([finished])
    store.write_spans([running])  # late (a spill imported again, a snapshot taken before the end)
    store.write_spans([running, finished, running])  # one batch holding both, in any order
    (row,) = store.get_trace("t" * 32)
    assert row.ended_at == finished.ended_at and row.output == {"text": "done"} and row.metadata is None


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from core import Agent, open_store
    from core.agent import Tool
    from core.llm import ScriptedModel
    from core.llm.scripted import ScriptedReply, tool_call

    def lookup(args, ctx):
        print("in tool", flush=True)
        sys.stdin.readline()  # blocks until the test says so, or the process is killed
        return {"found": True}

    store = open_store(Path(sys.argv[1]))
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("lookup", {"q": "x"}),)), "done"])
    agent = Agent("chef", instructions="Be brief.", model=model, tools=[Tool("lookup", "Look it up.", lookup)],
                  tracer=store.tracer())
    agent.generate("Anything?", memory={"resource": "ada", "thread": "t1"})
    """
)


def test_a_writer_killed_mid_run_leaves_a_trace_that_says_it_never_finished(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with open_store(db) as store:  # makes the database and claims its trace file, then lets go
        path = trace_home(store.location, store.db).path
    assert path is not None
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], cwd=REPO, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "in tool"
        reader = DuckDBObservabilityStore(path, read_only=True)
        live = wait_for(lambda: running_tool(reader), "the killed writer's run as running")
        writer = running_writer(next(s for s in live if s.parent_span_id is None).metadata)
        assert writer is not None and writer.startswith(f"{child.pid}-")
        assert writer_alive(path, writer) is True
        assert reader.list_traces()[0].status == "running"
        before = live_writers(path)
        child.send_signal(signal.SIGKILL)
        child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(60)

    assert writer_alive(path, writer) is False  # the OS let go of the dead process's lease
    assert live_writers(path) != before  # what the Studio's poll compares: it reads the trace again
    summary = reader.list_traces()[0]
    assert summary.status == "unfinished"
    assert summary.ended_at is None and summary.duration_ms is None  # still no made-up end
    spans = reader.get_trace(summary.trace_id)
    open_ids = {s.span_id for s in spans if s.running}
    assert open_ids and spans.unfinished == open_ids  # root and tool call: never finished, not "running"
    ids = [s.span_id for s in spans]
    assert len(ids) == len(set(ids)) and set(ids) >= {s.span_id for s in live}

    # The next writer beside it cleans up the dead lease file; the trace still reads as never finished.
    lease = WriterLease(path)
    assert lease.acquire()
    assert writer_alive(path, writer) is False
    assert reader.list_traces()[0].status == "unfinished"
    lease.close()


EXITING = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    from core import Agent, open_store
    from core.agent import Tool
    from core.llm import ScriptedModel
    from core.llm.scripted import ScriptedReply, tool_call

    entered = threading.Event()
    def lookup(args, ctx):
        entered.set()
        threading.Event().wait()  # never returns: the process exits around it
    store = open_store(Path(sys.argv[1]))
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("lookup", {}),)), "done"])
    agent = Agent("chef", instructions="Be brief.", model=model, tools=[Tool("lookup", "Look it up.", lookup)],
                  tracer=store.tracer())
    threading.Thread(target=lambda: agent.generate("Anything?", memory={"resource": "ada", "thread": "t1"}),
                     daemon=True).start()
    entered.wait(60)
    """
)


def test_a_process_exiting_mid_run_writes_the_open_spans_as_never_finished(tmp_path: Path) -> None:
    """The run had not been open long enough to be written as running: at exit its open spans are
    written all the same, so the spans that had ended are not orphans hidden from the list."""
    db = tmp_path / "memory.db"
    done = subprocess.run([sys.executable, "-c", EXITING, str(db)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 0, done.stderr
    with open_store(db, read_only=True) as store:
        reader = store.observability
        assert isinstance(reader, DuckDBObservabilityStore)
        (summary,) = reader.list_traces()
        assert summary.status == "unfinished"
        spans = reader.get_trace(summary.trace_id)
        assert {s.span_type for s in spans if s.span_id in spans.unfinished} == {"agent_run", "tool_call"}
        assert [s.span_type for s in spans if not s.running] == ["model_generation"]
        assert live_writers(reader.path) == ()  # a clean exit removes its lease file


@pytest.mark.parametrize("name", ["", "../x", "a/b"])
def test_a_writer_id_that_is_not_a_plain_name_is_never_probed(tmp_path: Path, name: str) -> None:
    assert writer_alive(tmp_path / "observability.duckdb", name) is None


def test_behind_a_composite_exporter_only_the_trace_store_gets_running_rows(tmp_path: Path) -> None:
    """With an OpenTelemetry backend configured the DuckDB exporter sits behind a composite: the running
    rows still reach the trace file, and the other exporters only ever get ended spans."""
    from core.traces.composite import CompositeSpanExporter
    from core.traces.tracer import DuckDBSpanExporter, InMemorySpanExporter, SpanType, Tracer

    path = tmp_path / "observability.duckdb"
    duck = DuckDBSpanExporter(path, background=False, running_after_s=0.0, prune_interval_s=None)
    other = InMemorySpanExporter()
    tracer = Tracer(CompositeSpanExporter([other, duck]))
    reader = DuckDBObservabilityStore(path, read_only=True)
    try:
        with tracer.start_span("agent run: slow", SpanType.AGENT_RUN, thread_id="t", input={"q": 1}) as root:
            assert duck.flush(10)
            (row,) = reader.get_trace(root.trace_id)
            assert row.running and row.input == {"q": 1} and other.spans == []
            assert reader.list_traces()[0].status == "running"
        assert duck.flush(10)
        (row,) = reader.get_trace(root.trace_id)
        assert not row.running and row.metadata is None
        assert [s.span_id for s in other.spans] == [root.span_id] and other.spans[0].ended_at is not None
    finally:
        duck.shutdown(5)


def test_open_spans_at_shutdown_on_a_busy_store_are_spilled_and_read_as_never_finished(tmp_path: Path) -> None:
    """Shut down while the trace store is busy: the open span's running row goes to a spill file with
    the queue (not lost), and once another writer imports it the run reads as never finished."""
    from core.traces.locking import StoreBusy
    from core.traces.store import RetentionSettings
    from core.traces.tracer import DuckDBSpanExporter, SpanType, Tracer

    path = tmp_path / "observability.duckdb"

    class BusyStore:  # the file stays locked by another process until this writer has shut down
        running_rows = True
        retention = RetentionSettings()

        @property
        def path(self) -> Path:
            return path

        def write_spans(self, spans: object, budget_s: float | None = None) -> int:
            raise StoreBusy(path, 0.0)

        def prune(self, *args: object, **kwargs: object) -> object:
            raise AssertionError("not asked")

    exporter = DuckDBSpanExporter(BusyStore(), background=False, prune_interval_s=None)  # type: ignore[arg-type]
    tracer = Tracer(exporter)
    root = tracer.start_span("agent run: cut short", SpanType.AGENT_RUN, thread_id="t")
    with tracer.start_span("llm: m", SpanType.MODEL_GENERATION, parent=root):
        pass
    exporter.shutdown(0.2)
    assert exporter.stats.spilled == 2 and exporter.stats.dropped == 0

    importer = DuckDBSpanExporter(path, background=False, prune_interval_s=None)
    try:
        assert importer.flush(10)
    finally:
        importer.shutdown(5)
    reader = DuckDBObservabilityStore(path, read_only=True)
    (summary,) = reader.list_traces()
    assert summary.status == "unfinished" and summary.span_count == 2
    assert reader.get_trace(summary.trace_id).unfinished == {root.span_id}


def test_spans_that_never_end_are_not_kept_in_mind_forever_and_nothing_is_lost(tmp_path: Path) -> None:
    """A run abandoned without closing its spans: the exporter lets go of the open spans it has written as
    running rows once more than ``max_open`` are open (their rows stay in the store), keeps those not
    written yet, and a span it let go of is still written whole when it does end."""
    from core.traces.tracer import DuckDBSpanExporter, SpanType, Tracer

    path = tmp_path / "observability.duckdb"
    exporter = DuckDBSpanExporter(path, background=False, running_after_s=0.0, prune_interval_s=None, max_open=3)
    tracer = Tracer(exporter)
    reader = DuckDBObservabilityStore(path, read_only=True)
    try:
        # Eight runs opened and never ended (each its own trace: no span is entered as the current one).
        spans = [tracer.start_span(f"agent run: abandoned {n}", SpanType.AGENT_RUN, thread_id="t") for n in range(8)]
        assert exporter.flush(10)
        assert len(exporter._open) <= 3  # (the bound itself: private, but it is what this test is about)
        listed = reader.list_traces(limit=20)
        assert sorted(t.name for t in listed) == sorted(s.name for s in spans)
        assert all(t.status == "running" for t in listed)  # every one written, none lost
        first = spans[0]
        first.end()  # let go of long ago: its end is written all the same
        assert exporter.flush(10)
        (row,) = reader.get_trace(first.trace_id)
        assert not row.running and row.ended_at is not None
    finally:
        exporter.shutdown(5)
