"""Traces on Postgres: Mastra's PgStore ``mastra_ai_spans`` table in the same database, written by the
background exporter (never holding up a turn), read back like the DuckDB store, pruned."""

from __future__ import annotations

import io
import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from core import Memory, MemoryOptions, open_store
from core.agent import Agent
from core.cli import main as cli_main
from core.llm import ScriptedModel
from core.traces.pg_store import PRUNE_LOCK, PgSpanStore
from core.traces.spans import SpanRecord, TraceFilters
from core.traces.store import RetentionSettings, TraceStoreReadOnlyError

from .test_traces_store import T0, _bulky_traces, agent_trace, span

# Mastra's own statements for the table (@mastra/pg, PgStore init with schema "public"), in its shape.
MASTRA_PG_SPANS_DDL = (
    'CREATE TABLE IF NOT EXISTS "public"."mastra_ai_spans" ("traceId" TEXT NOT NULL, "spanId" TEXT NOT NULL, '
    '"name" TEXT NOT NULL, "spanType" TEXT NOT NULL, "isEvent" BOOLEAN NOT NULL, "startedAt" TIMESTAMP NOT NULL, '
    '"parentSpanId" TEXT, "entityType" TEXT, "entityId" TEXT, "entityName" TEXT, "parentEntityType" TEXT, '
    '"parentEntityId" TEXT, "parentEntityName" TEXT, "rootEntityType" TEXT, "rootEntityId" TEXT, '
    '"rootEntityName" TEXT, "userId" TEXT, "organizationId" TEXT, "resourceId" TEXT, "runId" TEXT, '
    '"sessionId" TEXT, "threadId" TEXT, "requestId" TEXT, "environment" TEXT, "serviceName" TEXT, '
    '"scope" JSONB, "entityVersionId" TEXT, "parentEntityVersionId" TEXT, "rootEntityVersionId" TEXT, '
    '"experimentId" TEXT, "source" TEXT, "metadata" JSONB, "tags" JSONB, "attributes" JSONB, "links" JSONB, '
    '"input" JSONB, "output" JSONB, "error" JSONB, "endedAt" TIMESTAMP, "requestContext" JSONB, '
    '"createdAt" TIMESTAMP NOT NULL, "updatedAt" TIMESTAMP, "startedAtZ" TIMESTAMPTZ DEFAULT NOW(), '
    '"endedAtZ" TIMESTAMPTZ DEFAULT NOW(), "createdAtZ" TIMESTAMPTZ DEFAULT NOW(), '
    '"updatedAtZ" TIMESTAMPTZ DEFAULT NOW())',
    "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = "
    "lower('public_mastra_ai_spans_traceid_spanid_pk') AND connamespace = "
    "(SELECT oid FROM pg_namespace WHERE nspname = 'public')) THEN ALTER TABLE \"public\".\"mastra_ai_spans\" "
    "ADD CONSTRAINT public_mastra_ai_spans_traceid_spanid_pk PRIMARY KEY (\"traceId\", \"spanId\"); END IF; END $$",
    'CREATE OR REPLACE FUNCTION "public".trigger_set_timestamps() RETURNS TRIGGER AS $$ BEGIN '
    "IF TG_OP = 'INSERT' THEN NEW.\"createdAt\" = NOW(); NEW.\"updatedAt\" = NOW(); NEW.\"createdAtZ\" = NOW(); "
    "NEW.\"updatedAtZ\" = NOW(); ELSIF TG_OP = 'UPDATE' THEN NEW.\"updatedAt\" = NOW(); NEW.\"updatedAtZ\" = NOW(); "
    "NEW.\"createdAt\" = OLD.\"createdAt\"; NEW.\"createdAtZ\" = OLD.\"createdAtZ\"; END IF; RETURN NEW; END; "
    "$$ LANGUAGE plpgsql",
    'DROP TRIGGER IF EXISTS "mastra_ai_spans_timestamps" ON "public"."mastra_ai_spans"',
    'CREATE TRIGGER "mastra_ai_spans_timestamps" BEFORE INSERT OR UPDATE ON "public"."mastra_ai_spans" '
    'FOR EACH ROW EXECUTE FUNCTION "public".trigger_set_timestamps()',
    'CREATE INDEX IF NOT EXISTS "mastra_ai_spans_traceid_startedat_idx" ON "public"."mastra_ai_spans" '
    '("traceId", "startedAt" DESC)',
    'CREATE INDEX IF NOT EXISTS "mastra_ai_spans_root_spans_idx" ON "public"."mastra_ai_spans" ("startedAt" DESC) '
    'WHERE "parentSpanId" IS NULL',
    'CREATE INDEX IF NOT EXISTS "mastra_ai_spans_metadata_gin_idx" ON "public"."mastra_ai_spans" USING gin ("metadata")',
)
MASTRA_INDEXES = {f"mastra_ai_spans_{n}" for n in (
    "traceid_startedat_idx", "parentspanid_startedat_idx", "name_idx", "spantype_startedat_idx", "root_spans_idx",
    "entitytype_entityid_idx", "entitytype_entityname_idx", "orgid_userid_idx", "metadata_gin_idx", "tags_gin_idx")}


@pytest.fixture
def spans(pg_url: str) -> Any:
    store = open_store(pg_url)
    obs = store.observability
    assert isinstance(obs, PgSpanStore)
    yield obs
    store.close()


def _agent(store: Any) -> Agent:
    memory = Memory(store, MemoryOptions(last_messages=5))
    return Agent("chef", instructions="Cook.", memory=memory, model=ScriptedModel(lambda m, t: "Try a curry."))


def _sql(url: str, *statements: str) -> list[Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        out = []
        for statement in statements:
            cur = conn.execute(statement)
            out.append(cur.fetchall() if cur.description else None)
        return out


def test_a_turn_writes_its_trace_into_the_same_database(pg_url: str) -> None:
    store = open_store(pg_url)
    assert store.location.observability_path is None  # no trace file anywhere: the database holds them
    reply = _agent(store).generate("Dinner ideas?", memory={"resource": "ada", "thread": "t1"})
    assert reply.text == "Try a curry."
    assert store.tracer().flush(10)
    store.close()
    with open_store(pg_url, read_only=True) as other:  # another process, the way the Studio opens it
        reader = other.observability
        assert isinstance(reader, PgSpanStore)
        [trace] = reader.list_traces()
        assert (trace.entity_name, trace.status, trace.thread_id, trace.resource_id) == ("chef", "ok", "t1", "ada")
        assert trace.total_tokens > 0 and trace.span_count >= 4
        tree = reader.get_trace(trace.trace_id)
        assert tree[0].parent_span_id is None and {"memory: recall", "memory: save"} <= {s.name for s in tree}
        gen = next(s for s in tree if s.span_type == "model_generation")
        assert gen.input["messages"][-1]["content"] == "Dinner ideas?"
        assert reader.count_traces(TraceFilters(thread_id="t1")) == 1


def test_the_table_is_mastras_pgstore_layout_and_mastra_can_init_over_it(spans: PgSpanStore, pg_url: str) -> None:
    spans.write_spans(agent_trace("t1"))
    columns, pk, indexes = _sql(
        pg_url,
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_name = 'mastra_ai_spans' ORDER BY ordinal_position",
        "SELECT conname FROM pg_constraint WHERE contype = 'p' AND conrelid = 'mastra_ai_spans'::regclass",
        "SELECT indexname FROM pg_indexes WHERE tablename = 'mastra_ai_spans'",
    )
    types = {name: (kind, nullable) for name, kind, nullable in columns}
    assert [c[0] for c in columns][:3] == ["traceId", "spanId", "name"] and len(columns) == 46
    assert types["isEvent"] == ("boolean", "NO") and types["attributes"] == ("jsonb", "YES")
    assert types["startedAt"] == ("timestamp without time zone", "NO")
    assert types["startedAtZ"][0] == types["endedAtZ"][0] == "timestamp with time zone"
    assert pk == [("public_mastra_ai_spans_traceid_spanid_pk",)]
    assert MASTRA_INDEXES <= {r[0] for r in indexes}
    _sql(pg_url, *MASTRA_PG_SPANS_DDL)  # Mastra's init afterwards: no second primary key, nothing to redo
    # Mastra reads the Z mirrors: they hold the same instants.
    [[(started, started_z)]] = _sql(pg_url, "SELECT \"startedAt\", \"startedAtZ\" FROM mastra_ai_spans "
                                            "WHERE \"spanId\" = 't1-root'")
    assert started_z == started.replace(tzinfo=timezone.utc) == T0


def test_a_table_mastra_created_is_written_and_read_as_it_is(pg_url: str) -> None:
    _sql(pg_url, *MASTRA_PG_SPANS_DDL)
    with open_store(pg_url) as store:
        obs = store.observability
        assert isinstance(obs, PgSpanStore)
        obs.write_spans(agent_trace("t1"))
        assert [t.trace_id for t in obs.list_traces()] == ["t1"] and len(obs.get_trace("t1")) == 7
    [[(n,)]] = _sql(pg_url, "SELECT count(*) FROM mastra_ai_spans WHERE \"createdAtZ\" IS NOT NULL")
    assert n == 7  # Mastra's trigger stamped our rows as it stamps its own


def test_every_field_round_trips_and_a_span_is_stored_once(spans: PgSpanStore) -> None:
    written = agent_trace("t1")
    spans.write_spans(written)
    spans.write_spans(written[:3])
    back = spans.get_trace("t1")
    assert {s.span_id: s for s in back} == {s.span_id: s for s in written}  # microseconds and JSON included
    assert [s.span_id.split("-", 1)[1] for s in back] == ["root", "proc", "recall", "gen", "tool", "save", "wm"]


def test_a_dropped_span_table_is_made_again(spans: PgSpanStore, pg_url: str) -> None:
    spans.write_spans(agent_trace("old"))
    _sql(pg_url, "DROP TABLE mastra_ai_spans")  # traces are derived data: someone may clear them
    assert spans.list_traces().missing
    spans.write_spans(agent_trace("new"))
    assert [t.trace_id for t in spans.list_traces()] == ["new"]


def test_traces_are_listed_summarised_and_filtered(spans: PgSpanStore) -> None:
    spans.write_spans(agent_trace("a", base=T0, thread="th-a", resource="alice"))
    spans.write_spans(agent_trace("b", base=T0 + timedelta(hours=1), thread="th-b", resource="bob", error=True,
                                  usage=(10, 5)))
    spans.write_spans(agent_trace("c", base=T0 + timedelta(hours=2), thread="th-c", resource="alice",
                                  name="agent run: billing"))
    running = span("d", "d-root", None, "agent run: support", "agent_run", 0, base=T0 + timedelta(hours=3),
                   thread_id="th-d", resource_id="bob", error=None)
    spans.write_spans([SpanRecord(**{**running.__dict__, "ended_at": None})])
    page = spans.list_traces(limit=10)
    assert [t.trace_id for t in page] == ["d", "c", "b", "a"]
    assert (page[2].status, page[2].error_count, page[2].total_tokens) == ("error", 1, 15)
    assert page[0].status == "running" and page[3].status == "ok" and page[3].duration_ms == 70.0

    def ids(**kw: Any) -> list[str]:
        return [t.trace_id for t in spans.list_traces(filters=TraceFilters(**kw))]

    assert ids(resource_id="alice") == ["c", "a"] and ids(thread_id="th-b") == ["b"]
    assert ids(status="error") == ["b"] and ids(status="ok") == ["c", "a"]
    assert ids(name="BILLING") == ["c"] and ids(name="Support") == ["d", "c", "b", "a"]
    assert ids(since=T0 + timedelta(minutes=90)) == ["d", "c"]
    assert spans.count_traces(TraceFilters(resource_id="bob")) == 2


def test_nul_and_lone_surrogates_are_stored_and_a_refused_span_does_not_block_the_rest(
    spans: PgSpanStore, caplog: pytest.LogCaptureFixture
) -> None:
    odd = span("t1", "odd", None, "agent run: a\x00b", "agent_run", 0, input={"text": "nul \x00 and \ud800 here"})
    spans.write_spans([odd])
    [back] = spans.get_trace("t1")
    assert back.name == "agent run: a\ufffdb" and back.input["text"].startswith("nul \ufffd and ")
    refused = SpanRecord(**{**span("t2", "bad", None, "x", "agent_run", 0).__dict__, "name": None})
    with caplog.at_level(logging.ERROR, logger="core.traces.pg_store"):
        spans.write_spans([span("t2", "good-1", "bad", "a", "generic", 1), refused,
                           span("t2", "good-2", "bad", "b", "generic", 2)])
    assert {s.span_id for s in spans.get_trace("t2")} == {"good-1", "good-2"}
    assert "span bad of trace t2 refused" in caplog.text


def test_a_locked_span_table_never_holds_up_a_turn(pg_url: str) -> None:
    store = open_store(pg_url)
    agent = _agent(store)
    agent.generate("first", memory={"resource": "ada", "thread": "t1"})
    tracer = store.tracer()
    assert tracer.flush(10)
    with psycopg.connect(pg_url) as holder:  # e.g. a long VACUUM FULL by someone else
        holder.execute("LOCK TABLE mastra_ai_spans IN ACCESS EXCLUSIVE MODE")
        reply = agent.generate("second", memory={"resource": "ada", "thread": "t1"})
        assert reply.text == "Try a curry."  # the turn finished, its messages saved, spans queued
        texts = [m.text for m in Memory(store).recall(thread_id="t1", per_page=False).messages]
        assert texts[-2:] == ["second", "Try a curry."]
        assert not tracer.flush(0.5)  # nothing could be written while the lock is held
        assert tracer.exporter.stats.busy >= 1 and tracer.exporter.queued > 0
        holder.rollback()
    assert tracer.flush(10)
    with open_store(pg_url, read_only=True) as other:
        assert other.observability.count_traces() == 2  # type: ignore[union-attr]
    store.close()


def test_prune_by_days_and_by_size(spans: PgSpanStore) -> None:
    now = T0 + timedelta(days=30)
    for days_ago in (10, 5, 1):
        spans.write_spans(agent_trace(f"d{days_ago}", base=now - timedelta(days=days_ago)))
    result = spans.prune(keep_days=3, now=now)
    assert (result.traces_deleted, result.spans_deleted) == (2, 14)
    assert [t.trace_id for t in spans.list_traces()] == ["d1"] and not spans.get_trace("d10")
    spans.prune(keep_days=1, now=now + timedelta(days=5))
    _bulky_traces(spans, 150)  # type: ignore[arg-type]
    before = spans.size_bytes()
    assert before > 4 * 1024 * 1024
    result = spans.prune(keep_mb=2)
    assert not result.busy and result.compacted and result.bytes_after == spans.size_bytes() < before
    kept = [t.trace_id for t in spans.list_traces(limit=1000)]
    assert 0 < len(kept) < 150
    assert kept == [f"t{i:03d}" for i in range(149, 149 - len(kept), -1)]  # the newest, whole
    assert len(spans.get_trace(kept[-1])) == 7


def test_prune_follows_retention_refuses_read_only_and_yields_to_another_pruner(pg_url: str) -> None:
    with open_store(pg_url) as store:
        obs = store.observability
        assert isinstance(obs, PgSpanStore)
        obs.write_spans(agent_trace("ancient", base=datetime(2000, 1, 1, tzinfo=timezone.utc)))
        obs.write_spans(agent_trace("fresh", base=datetime.now(timezone.utc)))
        with pytest.raises(ValueError, match="0 means no limit"):
            obs.prune(keep_days=-1)
        with psycopg.connect(pg_url) as other:  # another process is pruning right now
            other.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (PRUNE_LOCK,))
            assert obs.prune(keep_days=7).busy
        kept_by_settings = PgSpanStore(store.db, retention=RetentionSettings(keep_days=7))
        assert kept_by_settings.prune().traces_deleted == 1
    with open_store(pg_url, read_only=True) as reader:
        with pytest.raises(TraceStoreReadOnlyError):
            reader.observability.prune(keep_days=1)  # type: ignore[union-attr]
        assert [t.trace_id for t in reader.observability.list_traces()] == ["fresh"]  # type: ignore[union-attr]


def test_prune_command_on_a_postgres_url(pg_url: str) -> None:
    def run(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        return cli_main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()

    open_store(pg_url).close()
    code, out, _ = run("where", "--db", pg_url)
    assert code == 0 and "traces: its mastra_ai_spans table" in out
    code, out, _ = run("traces", "prune", "--db", pg_url, "--keep-days", "30")
    assert code == 0 and "no traces yet" in out
    with open_store(pg_url) as store:
        obs = store.observability
        assert isinstance(obs, PgSpanStore)
        obs.write_spans(agent_trace("old", base=datetime(2001, 1, 1, tzinfo=timezone.utc)))
        obs.write_spans(agent_trace("new", base=datetime.now(timezone.utc)))
    code, out, err = run("traces", "prune", "--db", pg_url, "--keep-days", "30")
    assert code == 0, err
    assert "(mastra_ai_spans): deleted 1 traces (7 spans)" in out and "MB ->" in out
    code, _, err = run("traces", "prune", "--db", pg_url, "--keep-days", "-3")
    assert code == 2 and "must not be negative" in err
