"""Reading spans Mastra wrote: the exact libSQL DDL, jsonb blobs, ISO text timestamps."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import libsql_experimental as libsql

from core.traces.libsql_reader import LibSQLSpanReader
from core.traces.locking import observe_statements
from core.traces.spans import TraceFilters
from tests.core.test_storage_busy_reads import HOLD_EXCLUSIVE

# Verbatim from the spec (§1.2), as LibSQLStore.init() creates it.
MASTRA_SPANS_DDL = """CREATE TABLE mastra_ai_spans ("traceId" TEXT NOT NULL, "spanId" TEXT NOT NULL, "name" TEXT NOT NULL,
  "spanType" TEXT NOT NULL, "isEvent" INTEGER NOT NULL, "startedAt" TEXT NOT NULL,
  "parentSpanId" TEXT, "entityType" TEXT, "entityId" TEXT, "entityName" TEXT,
  "parentEntityType" TEXT, "parentEntityId" TEXT, "parentEntityName" TEXT, "rootEntityType" TEXT,
  "rootEntityId" TEXT, "rootEntityName" TEXT, "userId" TEXT, "organizationId" TEXT,
  "resourceId" TEXT, "runId" TEXT, "sessionId" TEXT, "threadId" TEXT, "requestId" TEXT,
  "environment" TEXT, "serviceName" TEXT, "scope" TEXT, "entityVersionId" TEXT,
  "parentEntityVersionId" TEXT, "rootEntityVersionId" TEXT, "experimentId" TEXT, "source" TEXT,
  "metadata" TEXT, "tags" TEXT, "attributes" TEXT, "links" TEXT, "input" TEXT, "output" TEXT,
  "error" TEXT, "endedAt" TEXT, "requestContext" TEXT, "createdAt" TEXT NOT NULL,
  "updatedAt" TEXT, UNIQUE (spanId, traceId))"""
MASTRA_SPANS_INDEXES = (
    'CREATE UNIQUE INDEX mastra_ai_spans_spanid_traceid_idx ON mastra_ai_spans ("spanId", "traceId")',
    'CREATE INDEX mastra_ai_spans_trace_started_at_idx ON mastra_ai_spans ("traceId", "startedAt")',
    'CREATE INDEX mastra_ai_spans_roots_started_at_idx ON mastra_ai_spans ("startedAt" DESC) '
    'WHERE "parentSpanId" IS NULL',
)
JSONB = ("attributes", "input", "output", "error", "metadata")


def insert(con: object, **row: object) -> None:
    cols = list(row)
    values = ", ".join("jsonb(?)" if c in JSONB else "?" for c in cols)
    params = tuple(json.dumps(row[c]) if c in JSONB and row[c] is not None else row[c] for c in cols)
    con.execute(  # type: ignore[attr-defined]
        f"INSERT INTO mastra_ai_spans ({', '.join(chr(34) + c + chr(34) for c in cols)}) VALUES ({values})",
        params,
    )


def mastra_db(path: Path) -> None:
    con = libsql.connect(str(path))
    con.execute(MASTRA_SPANS_DDL)
    for statement in MASTRA_SPANS_INDEXES:
        con.execute(statement)
    common = {"isEvent": 0, "threadId": "th-1", "resourceId": "user-1"}
    insert(con, traceId="T1", spanId="s-root", name="agent run: 'chef'", spanType="agent_run",
           startedAt="2025-01-02T03:04:05.000Z", endedAt="2025-01-02T03:04:07.500Z",
           createdAt="2025-01-02T03:04:05.000Z", entityName="chef", input={"messages": ["hi"]},
           metadata={"a": 1}, **common)
    insert(con, traceId="T1", spanId="s-recall", parentSpanId="s-root", name="memory: recall",
           spanType="memory_operation", startedAt="2025-01-02T03:04:05.100Z",
           endedAt="2025-01-02T03:04:05.200Z", createdAt="2025-01-02T03:04:05.100Z",
           attributes={"operationType": "recall"}, **common)
    insert(con, traceId="T1", spanId="s-gen", parentSpanId="s-root", name="llm: 'gpt-4o'",
           spanType="model_generation", startedAt="2025-01-02T03:04:05.300Z",
           endedAt="2025-01-02T03:04:07.000Z", createdAt="2025-01-02T03:04:05.300Z",
           input={"messages": [{"role": "user", "content": "hi"}]}, output={"text": "hello"},
           attributes={"usage": {"inputTokens": 11, "outputTokens": 4, "totalTokens": 15}},
           **common)
    insert(con, traceId="T2", spanId="r2", name="agent run: 'chef'", spanType="agent_run",
           startedAt="2025-01-03T00:00:00.000Z", endedAt="2025-01-03T00:00:01.000Z",
           createdAt="2025-01-03T00:00:00.000Z", error={"message": "model refused"},
           isEvent=0, threadId="th-2", resourceId="user-2")
    con.commit()
    kind = con.execute('SELECT typeof("attributes") FROM mastra_ai_spans WHERE "spanId" = ?',
                       ("s-gen",)).fetchone()
    assert kind == ("blob",), "the fixture must store jsonb blobs like Mastra does"
    con.close()


def test_reads_mastra_spans_through_the_same_api(tmp_path: Path) -> None:
    path = tmp_path / "mastra.db"
    mastra_db(path)
    reader = LibSQLSpanReader(path)

    traces = reader.list_traces()
    assert [t.trace_id for t in traces] == ["T2", "T1"]
    t1 = traces[1]
    assert (t1.span_count, t1.status, t1.duration_ms) == (3, "ok", 2500.0)
    assert (t1.input_tokens, t1.output_tokens, t1.total_tokens) == (11, 4, 15)
    assert (t1.thread_id, t1.resource_id) == ("th-1", "user-1")
    assert traces[0].status == "error"
    assert (t1.input_text, traces[0].input_text) == ("hi", None)  # what the run was asked (T2's root holds none)

    spans = reader.get_trace("T1")
    assert [s.span_id for s in spans] == ["s-root", "s-recall", "s-gen"]
    root, recall, gen = spans
    assert root.started_at == datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert root.metadata == {"a": 1} and root.is_event is False
    assert recall.attributes == {"operationType": "recall"}
    assert gen.input == {"messages": [{"role": "user", "content": "hi"}]}
    assert gen.error is None

    assert reader.count_traces() == 2
    assert [t.trace_id for t in reader.list_traces(filters=TraceFilters(status="error"))] == ["T2"]
    assert [t.trace_id for t in reader.list_traces(filters=TraceFilters(thread_id="th-1"))] == ["T1"]
    since = datetime(2025, 1, 2, 12, tzinfo=timezone.utc)
    assert [t.trace_id for t in reader.list_traces(filters=TraceFilters(since=since))] == ["T2"]


def test_point_events_are_finished_not_running(tmp_path: Path) -> None:
    """Mastra writes a point event (``isEvent`` true) with ``endedAt`` null: it happened, it is not running."""
    path = tmp_path / "mastra.db"
    mastra_db(path)
    con = libsql.connect(str(path))
    insert(con, traceId="T3", spanId="e-root", name="chunk received", spanType="generic", isEvent=1,
           startedAt="2025-01-04T00:00:00.000Z", createdAt="2025-01-04T00:00:00.000Z", threadId="th-3")
    insert(con, traceId="T1", spanId="s-event", parentSpanId="s-root", name="tool approval", spanType="generic",
           isEvent=1, startedAt="2025-01-02T03:04:06.000Z", createdAt="2025-01-02T03:04:06.000Z",
           threadId="th-1")
    insert(con, traceId="T4", spanId="open", name="agent run: 'chef'", spanType="agent_run", isEvent=0,
           startedAt="2025-01-05T00:00:00.000Z", createdAt="2025-01-05T00:00:00.000Z", threadId="th-4")
    con.commit()
    con.close()
    reader = LibSQLSpanReader(path)
    status = {t.trace_id: (t.status, t.duration_ms) for t in reader.list_traces()}
    assert status["T3"] == ("ok", 0.0) and status["T1"][0] == "ok"
    assert status["T4"] == ("running", None)  # a real span without an end is still running
    assert [t.trace_id for t in reader.list_traces(filters=TraceFilters(status="running"))] == ["T4"]
    assert "T3" in [t.trace_id for t in reader.list_traces(filters=TraceFilters(status="ok"))]
    event = next(s for s in reader.get_trace("T1") if s.span_id == "s-event")
    assert event.is_event and not event.running and event.duration_ms == 0.0


def test_missing_file_or_table_reads_as_missing_and_creates_nothing(tmp_path: Path) -> None:
    missing = LibSQLSpanReader(tmp_path / "nope.db")
    assert missing.list_traces().missing and not (tmp_path / "nope.db").exists()
    empty = tmp_path / "empty.db"
    libsql.connect(str(empty)).close()
    assert LibSQLSpanReader(empty).count_traces().missing


def test_usage_by_model_reads_mastra_spans(tmp_path: Path) -> None:
    path = tmp_path / "mastra.db"
    mastra_db(path)
    reader = LibSQLSpanReader(path)
    usage = reader.usage_by_model(TraceFilters(thread_id="th-1"))
    assert [(u.model, u.input_tokens, u.output_tokens) for u in usage] == [("unknown model", 11, 4)]
    assert reader.list_traces()[1].models[0].input_tokens == 11


def test_batched_reads_of_mastra_spans_match_the_per_trace_ones(tmp_path: Path) -> None:
    """The export's reads (``thread_trace_keys``, ``get_traces``) over Mastra's jsonb blobs and ISO text."""
    path = tmp_path / "mastra.db"
    mastra_db(path)
    reader = LibSQLSpanReader(path)
    keys = reader.thread_trace_keys(["th-2", "th-1"], limit=1)
    assert [(k.thread_id, k.trace_id) for k in keys] == [("th-1", "T1")]
    assert [(k.thread_id, k.trace_id) for k in reader.thread_trace_keys(["th-2", "th-1"], limit=5, after=keys[-1])] \
        == [("th-2", "T2")]
    assert reader.get_traces(["T2", "T1", "T2"]) == [*reader.get_trace("T2"), *reader.get_trace("T1")]


# -- another process's lock ------------------------------------------------------------------------------

def _hold_exclusive(path: Path, statement: str) -> subprocess.Popen[str]:
    """Another process holding the file's EXCLUSIVE lock with ``statement`` done (committed when told)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD_EXCLUSIVE, str(path), statement],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def _let_go(proc: subprocess.Popen[str]) -> str:
    said, _ = proc.communicate("\n", timeout=90)
    assert proc.returncode == 0
    return said.strip()


NEW_ROOT = ("INSERT INTO mastra_ai_spans (\"traceId\", \"spanId\", name, \"spanType\", \"isEvent\", \"startedAt\", "
            "\"createdAt\", \"threadId\") VALUES ('T9', 'r9', 'agent run', 'agent_run', 0, "
            "'2025-01-09T00:00:00.000Z', '2025-01-09T00:00:00.000Z', 'th-9')")


def test_a_read_waits_for_another_process_lock_with_other_threads_running(tmp_path: Path) -> None:
    """A Mastra file in a rollback journal mode (SQLite's default) while another process holds its EXCLUSIVE
    lock: the read waits with the GIL free (it waited in SQLite's busy handler, which keeps the GIL, so the
    Studio's UI thread stood still for the read budget), then sees what the other process committed."""
    path = tmp_path / "mastra.db"
    mastra_db(path)
    reader = LibSQLSpanReader(path, read_budget_s=300)  # longer than the locker's watchdog (60 s)
    assert reader.count_traces() == 2
    sent, done = threading.Event(), threading.Event()
    outcome: list[Any] = []
    stop = observe_statements(lambda *_a: sent.set())
    locker = _hold_exclusive(path, NEW_ROOT)

    def run() -> None:
        try:
            outcome.append(reader.list_traces())
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert sent.wait(60)  # its first statement went to the driver, and meets the lock there
        ticks = 0
        while ticks < 20:  # this thread runs while the read waits (it could not while the GIL was held)
            time.sleep(0.002)
            ticks += 1
        assert not done.is_set(), outcome  # still waiting: nothing failed
        assert _let_go(locker) == "released when told"  # (this process never stood still past the watchdog)
    finally:
        if locker.poll() is None:
            locker.communicate("\n", timeout=90)
        thread.join(60)
        stop()
    [result] = outcome
    assert [t.trace_id for t in result] == ["T9", "T2", "T1"] and not result.busy


def _read_then_locked(tmp_path: Path) -> tuple[LibSQLSpanReader, subprocess.Popen[str]]:
    """A reader with a read budget of 0.3 s that has read the list once, and another process holding the lock."""
    path = tmp_path / "mastra.db"
    mastra_db(path)
    reader = LibSQLSpanReader(path, read_budget_s=0.3)
    assert [t.trace_id for t in reader.list_traces()] == ["T2", "T1"]
    return reader, _hold_exclusive(path, NEW_ROOT)


def test_a_read_still_locked_after_the_read_budget_answers_the_last_good_answer_flagged_busy(tmp_path: Path) -> None:
    reader, locker = _read_then_locked(tmp_path)
    try:
        result = reader.list_traces()
        assert [t.trace_id for t in result] == ["T2", "T1"]  # not an empty screen
        assert result.busy and result.stale and result.waited_s >= 0.3
        assert reader.count_traces().busy  # never read: nothing to show, said so
        assert locker.poll() is None  # (the lock was held all along)
    finally:
        _let_go(locker)
    assert [t.trace_id for t in reader.list_traces()] == ["T9", "T2", "T1"]


def test_reads_of_one_block_still_locked_after_the_read_budget_answer_busy_after_one_wait(tmp_path: Path) -> None:
    """The Traces pane reads a page, its count and its bill in one ``reading`` block: a lock met by the
    block's first statement made the whole block fail (the pane said the traces could not be read) instead
    of answering busy with the last good answer, as a read alone does."""
    reader, locker = _read_then_locked(tmp_path)
    try:
        with reader.reading():
            listed, counted = reader.list_traces(), reader.count_traces()
        assert [t.trace_id for t in listed] == ["T2", "T1"] and listed.busy and listed.stale
        assert counted.busy and counted.waited_s == listed.waited_s  # the count did not wait again
    finally:
        _let_go(locker)
    with reader.reading():
        assert [t.trace_id for t in reader.list_traces()] == ["T9", "T2", "T1"] and reader.count_traces() == 3


def test_a_runs_input_words_are_read_from_each_shape_a_root_span_holds() -> None:
    """What tells one run of an agent from the next in the list (all named "agent run: 'name'"): ours
    ``{"message": text}``, Mastra's ``options.messages`` (a text, texts, messages with text or parts content) or
    ``{messages}``; the last user message; whitespace collapsed; a long one cut with "…"; no text: None."""
    from core.traces.spans import input_words

    assert input_words({"message": "Book  a\n table"}) == "Book a table"
    assert input_words({"message": ["first", "then this"]}) == "then this"
    assert input_words("plain") == "plain"
    assert input_words({"messages": [{"role": "user", "content": "old"}, {"role": "assistant", "content": "x"},
                                     {"role": "user", "content": [{"type": "text", "text": "new"}]}]}) == "new"
    assert input_words([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]) == "hello"
    assert input_words({"message": "word " * 100}, limit=20) == "word word word word…"
    for nothing in (None, {}, {"message": "   "}, [], {"messages": [{"role": "user", "content": []}]}, 3):
        assert input_words(nothing) is None
