"""Runs in progress on Postgres: a span open for a while is written as a running row in the database's own
``mastra_ai_spans`` that its end replaces, and a running row whose writer is gone reads as never finished.

The writers of one Postgres database may be on many hosts (no shared folder for a lock file), so a
writer's lease is a session-level advisory lock (``PgWriterLease``) that readers see in ``pg_locks``.
The runs are real agent turns (scripted model) on a real server; the writer's death is a subprocess
killed with SIGKILL mid-run, and a lease's session ended by the server. Waits poll with generous
deadlines; nothing is timed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest

from core import open_store
from core.traces.live import RUNNING_KEY, running_writer
from core.traces.pg_store import LEASE_SPACE, PgSpanStore, PgWriterLease, lease_key
from core.traces.spans import SpanRecord, TraceFilters
from core.traces.tracer import DuckDBSpanExporter, SpanType, Tracer

from .test_traces_postgres import MASTRA_PG_SPANS_DDL, _sql
from .test_traces_running import blocking_agent, running_tool, wait_for

REPO = Path(__file__).resolve().parents[2]


def reader_of(url: str) -> tuple[Any, PgSpanStore]:
    """A second store on the database, read-only, as the Studio opens it (its own connections)."""
    store = open_store(url, read_only=True)
    reader = store.observability
    assert isinstance(reader, PgSpanStore)
    return store, reader


def lease_held(url: str, writer: str) -> bool:
    [[(n,)]] = _sql(url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 "
                         f"AND classid = {LEASE_SPACE} AND objid = {lease_key(writer)}")
    return n == 1


def test_a_turn_blocked_in_a_tool_shows_running_then_finished_with_nothing_twice(pg_url: str) -> None:
    gate, entered = threading.Event(), threading.Event()
    looker, reader = reader_of(pg_url)
    with open_store(pg_url) as store:
        agent = blocking_agent(store, gate, entered)
        turn = threading.Thread(target=lambda: agent.generate("Anything with peanuts?",
                                                              memory={"resource": "ada", "thread": "t1"}))
        turn.start()
        try:
            assert entered.wait(60)
            live = wait_for(lambda: running_tool(reader), "the blocked tool call as a running span")
            summary = reader.list_traces()[0]
            assert summary.status == "running"
            assert summary.ended_at is None and summary.duration_ms is None
            assert reader.list_traces(filters=TraceFilters(status="running"))[0].trace_id == summary.trace_id
            by_type = {s.span_type: s for s in live}
            root, tool = by_type["agent_run"], by_type["tool_call"]
            assert root.running and tool.running and tool.input == {"q": "peanuts"}
            assert not by_type["model_generation"].running
            writer = running_writer(root.metadata)
            assert writer is not None and lease_held(pg_url, writer)
            assert reader.get_trace(summary.trace_id).unfinished == frozenset()  # its writer lives
            running_ids = [s.span_id for s in live]
        finally:
            gate.set()
            turn.join(60)
        assert store.tracer().flush(30)

        done = wait_for(lambda: [t for t in reader.list_traces() if t.status == "ok"], "the finished run")
        assert len(done) == 1 and done[0].duration_ms is not None
        spans = reader.get_trace(done[0].trace_id)
        ids = [s.span_id for s in spans]
        assert len(ids) == len(set(ids)) == done[0].span_count  # nothing twice
        assert set(running_ids) <= set(ids)
        assert all(not s.running for s in spans)
        assert all(not (isinstance(s.metadata, dict) and RUNNING_KEY in s.metadata) for s in spans)
    assert not lease_held(pg_url, writer)  # the store closed: its writer let go of the lease
    looker.close()


T0 = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)


def _pair(trace: str = "t" * 32) -> tuple[SpanRecord, SpanRecord]:
    running = SpanRecord(trace, "s" * 16, "agent run: x", "agent_run", T0, created_at=T0,
                         metadata={RUNNING_KEY: {"writer": "1-abc", "pid": 1, "host": "h"}})
    finished = SpanRecord(trace, "s" * 16, "agent run: x", "agent_run", T0, created_at=T0,
                          ended_at=T0 + timedelta(seconds=3), output={"text": "done"})
    return running, finished


@pytest.mark.parametrize("made_by", ["us", "mastra"])
def test_a_running_row_gives_way_to_the_finished_span_never_the_reverse(pg_url: str, made_by: str) -> None:
    if made_by == "mastra":
        _sql(pg_url, *MASTRA_PG_SPANS_DDL)  # Mastra's table, with its timestamp trigger
    running, finished = _pair()
    with open_store(pg_url) as store:
        spans = store.observability
        assert isinstance(spans, PgSpanStore)
        spans.write_spans([running])
        (row,) = spans.get_trace(running.trace_id)
        assert row.running and spans.get_trace(running.trace_id).unfinished == {running.span_id}  # "1-abc": no lease
        assert spans.list_traces()[0].status == "unfinished"
        spans.write_spans([finished])
        spans.write_spans([running])  # late (a spill imported again, a snapshot taken before the end)
        spans.write_spans([running, finished, running])  # one batch holding both, in any order
        (row,) = spans.get_trace(running.trace_id)
        assert row.ended_at == finished.ended_at and row.output == {"text": "done"} and row.metadata is None
        assert spans.list_traces()[0].status == "ok"
    [[(ended_z,)]] = _sql(pg_url, 'SELECT "endedAtZ" FROM mastra_ai_spans')
    assert ended_z == finished.ended_at  # the mirror Mastra reads was replaced with the row


WRITER = textwrap.dedent(
    """
    import sys
    from core import Agent, open_store
    from core.agent import Tool
    from core.llm import ScriptedModel
    from core.llm.scripted import ScriptedReply, tool_call

    def lookup(args, ctx):
        print("in tool", flush=True)
        sys.stdin.readline()  # blocks until the test says so, or the process is killed
        return {"found": True}

    store = open_store(sys.argv[1])
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("lookup", {"q": "x"}),)), "done"])
    agent = Agent("chef", instructions="Be brief.", model=model, tools=[Tool("lookup", "Look it up.", lookup)],
                  tracer=store.tracer())
    agent.generate("Anything?", memory={"resource": "ada", "thread": "t1"})
    """
)


def test_a_writer_killed_mid_run_leaves_a_trace_that_says_it_never_finished(pg_url: str) -> None:
    open_store(pg_url).close()  # the memory tables, made before the writer starts
    child = subprocess.Popen([sys.executable, "-c", WRITER, pg_url], cwd=REPO, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    looker, reader = reader_of(pg_url)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "in tool"
        live = wait_for(lambda: running_tool(reader), "the killed writer's run as running")
        writer = running_writer(next(s for s in live if s.parent_span_id is None).metadata)
        assert writer is not None and writer.startswith(f"{child.pid}-")
        assert lease_held(pg_url, writer)
        assert reader.list_traces()[0].status == "running"
        before = reader.change_mark()
        child.send_signal(signal.SIGKILL)
        child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(60)

    # The server ends the dead process's sessions (their sockets closed), and with them its lease.
    wait_for(lambda: not lease_held(pg_url, writer), "the server letting go of the dead writer's lease")
    assert reader.change_mark() != before  # what the Studio's poll compares: it reads the trace again
    summary = reader.list_traces()[0]
    assert summary.status == "unfinished"
    assert summary.ended_at is None and summary.duration_ms is None  # no made-up end
    spans = reader.get_trace(summary.trace_id)
    open_ids = {s.span_id for s in spans if s.running}
    assert open_ids and spans.unfinished == open_ids  # root and tool call: never finished, not "running"
    assert {s.span_type for s in spans if s.span_id in open_ids} == {"agent_run", "tool_call"}
    ids = [s.span_id for s in spans]
    assert len(ids) == len(set(ids)) and set(ids) >= {s.span_id for s in live}
    assert reader.list_traces(filters=TraceFilters(status="running"))[0].status == "unfinished"
    looker.close()


def test_a_lease_whose_session_the_server_ended_is_taken_again_while_the_run_goes_on(pg_url: str) -> None:
    """The lease's connection is cut (a server restart, a network drop, an administrator): the run's rows read
    as never finished, until the writer's next write finds the lease gone and takes it again."""
    with open_store(pg_url) as store:
        sink = store.observability
        assert isinstance(sink, PgSpanStore)
        exporter = DuckDBSpanExporter(sink, background=False, running_after_s=0.0, prune_interval_s=None)
        tracer = Tracer(exporter)
        looker, reader = reader_of(pg_url)
        try:
            with tracer.start_span("agent run: long", SpanType.AGENT_RUN, thread_id="t") as root:
                assert exporter.flush(10)
                (row,) = reader.get_trace(root.trace_id)
                writer = running_writer(row.metadata)
                assert row.running and writer is not None and reader.list_traces()[0].status == "running"
                lease = exporter._lease  # (the lease itself: private, but it is what this test is about)
                assert isinstance(lease, PgWriterLease) and lease.held
                pid = lease._conn.info.backend_pid  # type: ignore[union-attr]
                with psycopg.connect(pg_url, autocommit=True) as admin:
                    assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
                wait_for(lambda: not lease_held(pg_url, writer), "the ended session's lease let go")
                assert reader.list_traces()[0].status == "unfinished"

                with tracer.start_span("tool: wait", SpanType.TOOL_CALL, parent=root):
                    assert exporter.flush(10)  # this write checks the lease first and takes it again
                assert lease_held(pg_url, writer)
                assert reader.list_traces()[0].status == "running"
            assert exporter.flush(10)
            assert reader.list_traces()[0].status == "ok"
        finally:
            exporter.shutdown(5)
            looker.close()
        assert not lease_held(pg_url, writer)
