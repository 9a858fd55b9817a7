"""The DuckDB observability store: round trips, tree order, filters, retention, starting over."""

from __future__ import annotations

import os
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from core.traces.store import (
    DuckDBObservabilityStore,
    RetentionSettings,
    prune_main,
)
from core.traces.spans import (
    SpanRecord,
    SpanType,
    TraceFilters,
    span_depths,
)

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


def span(
    trace: str,
    sid: str,
    parent: str | None,
    name: str,
    span_type: str,
    start_ms: int,
    dur_ms: int = 5,
    *,
    base: datetime = T0,
    **extra: object,
) -> SpanRecord:
    started = base + timedelta(milliseconds=start_ms)
    return SpanRecord(
        trace_id=trace,
        span_id=sid,
        parent_span_id=parent,
        name=name,
        span_type=span_type,
        started_at=started,
        ended_at=started + timedelta(milliseconds=dur_ms),
        created_at=started,
        updated_at=started + timedelta(milliseconds=dur_ms),
        **extra,  # type: ignore[arg-type]
    )


def agent_trace(
    trace: str,
    *,
    base: datetime = T0,
    thread: str = "thread-1",
    resource: str = "user-1",
    name: str = "agent run: support",
    error: bool = False,
    usage: tuple[int, int] = (120, 30),
) -> list[SpanRecord]:
    """One agent run with every span type we emit, children before the root (export order)."""
    ids = dict(thread_id=thread, resource_id=resource)
    root = f"{trace}-root"
    return [
        span(trace, f"{trace}-recall", f"{trace}-proc", "memory: recall", "memory_operation", 2,
             base=base, attributes={"operationType": "recall"}, output={"messages": 3}, **ids),
        span(trace, f"{trace}-proc", root, "input processor: memory", "processor_run", 1, 10,
             base=base, entity_type="processor", entity_name="SemanticRecall", **ids),
        span(trace, f"{trace}-gen", root, "llm: gpt-4o-mini", "model_generation", 12, 40, base=base,
             input={"messages": [{"role": "system", "content": "You are helpful."},
                                 {"role": "user", "content": "hi ✓"}]},
             output={"text": "hello"},
             attributes={"model": "gpt-4o-mini", "provider": "openai",
                         "usage": {"inputTokens": usage[0], "outputTokens": usage[1],
                                   "totalTokens": usage[0] + usage[1]}},
             **ids),
        span(trace, f"{trace}-tool", f"{trace}-gen", "tool: search", "tool_call", 20, 5, base=base,
             entity_type="tool", entity_name="search", input={"q": "x"},
             error={"message": "boom", "name": "RuntimeError"} if error else None, **ids),
        span(trace, f"{trace}-save", root, "memory: save", "memory_operation", 55, base=base,
             attributes={"operationType": "save"}, **ids),
        span(trace, f"{trace}-wm", root, "memory: working-memory update", "memory_operation", 60,
             base=base, attributes={"operationType": "working-memory update"}, **ids),
        span(trace, root, None, name, "agent_run", 0, 70, base=base, entity_type="agent",
             entity_id="support", entity_name="Support", input={"prompt": "hi"}, tags=["demo"],
             metadata={"runKind": "chat"}, **ids),
    ]


@pytest.fixture
def store(tmp_path: Path) -> DuckDBObservabilityStore:
    return DuckDBObservabilityStore(tmp_path / "obs" / "observability.duckdb")


def test_every_span_type_round_trips_unchanged(store: DuckDBObservabilityStore) -> None:
    spans = agent_trace("t1")
    store.write_spans(spans)
    back = store.get_trace("t1")
    assert not back.busy and not back.stale
    assert {s.span_id: s for s in back} == {s.span_id: s for s in spans}
    assert {s.span_type for s in back} == {t.value for t in (
        SpanType.AGENT_RUN, SpanType.MODEL_GENERATION, SpanType.PROCESSOR_RUN,
        SpanType.MEMORY_OPERATION, SpanType.TOOL_CALL)}
    gen = next(s for s in back if s.span_type == "model_generation")
    assert gen.input["messages"][1] == {"role": "user", "content": "hi ✓"}
    assert gen.attributes["usage"]["totalTokens"] == 150


def test_writing_the_same_span_twice_keeps_one_row(store: DuckDBObservabilityStore) -> None:
    spans = agent_trace("t1")
    store.write_spans(spans)
    store.write_spans(spans[:3])
    assert len(store.get_trace("t1")) == len(spans)


def test_get_trace_orders_depth_first_with_siblings_by_start(store: DuckDBObservabilityStore) -> None:
    spans = agent_trace("t1")
    random.Random(4).shuffle(spans)
    store.write_spans(spans)
    ordered = store.get_trace("t1")
    assert [s.span_id.split("-", 1)[1] for s in ordered] == [
        "root", "proc", "recall", "gen", "tool", "save", "wm"]
    depths = span_depths(ordered)
    assert [depths[s.span_id] for s in ordered] == [0, 1, 2, 1, 2, 1, 1]


def test_list_traces_summarises_and_filters(store: DuckDBObservabilityStore) -> None:
    store.write_spans(agent_trace("a", base=T0, thread="th-a", resource="alice"))
    store.write_spans(agent_trace("b", base=T0 + timedelta(hours=1), thread="th-b",
                                  resource="bob", error=True, usage=(10, 5)))
    store.write_spans(agent_trace("c", base=T0 + timedelta(hours=2), thread="th-c",
                                  resource="alice", name="agent run: billing"))
    # A run still in progress (as Mastra writes them): root without endedAt.
    running = span("d", "d-root", None, "agent run: support", "agent_run", 0,
                   base=T0 + timedelta(hours=3), thread_id="th-d", resource_id="bob")
    store.write_spans([SpanRecord(**{**running.__dict__, "ended_at": None})])

    page = store.list_traces(limit=10)
    assert [t.trace_id for t in page] == ["d", "c", "b", "a"]
    b = page[2]
    assert (b.status, b.span_count, b.error_count) == ("error", 7, 1)
    assert (b.input_tokens, b.output_tokens, b.total_tokens) == (10, 5, 15)
    assert (b.thread_id, b.resource_id, b.duration_ms) == ("th-b", "bob", 70.0)
    assert page[0].status == "running" and page[3].status == "ok"

    def ids(**kw: object) -> list[str]:
        return [t.trace_id for t in store.list_traces(filters=TraceFilters(**kw))]  # type: ignore[arg-type]

    assert ids(resource_id="alice") == ["c", "a"]
    assert ids(thread_id="th-b") == ["b"]
    assert ids(status="error") == ["b"]
    assert ids(status="ok") == ["c", "a"]
    assert ids(status="running") == ["d"]
    assert ids(name="BILLING") == ["c"]
    assert ids(name="Support") == ["d", "c", "b", "a"]  # c matches by its entity name
    assert ids(since=T0 + timedelta(minutes=90)) == ["d", "c"]
    assert [t.trace_id for t in store.list_traces(limit=2, offset=1)] == ["c", "b"]
    assert store.count_traces() == 4
    assert store.count_traces(TraceFilters(resource_id="bob")) == 2


def test_reading_a_missing_store_says_so_and_creates_nothing(store: DuckDBObservabilityStore) -> None:
    result = store.list_traces()
    assert result == [] and result.missing and not result.busy
    assert store.count_traces() == 0 and store.count_traces().missing
    assert store.pending_migrations() == ["create_mastra_ai_spans"]
    assert not store.path.exists()
    store.write_spans(agent_trace("t1"))
    assert store.pending_migrations() == []


def test_reading_a_store_no_one_wrote_leaves_no_lock_files_beside_it(store: DuckDBObservabilityStore) -> None:
    """Reading a trace file that does not exist made its sidecar locks (``<file>.lock``,
    ``<file>.write-intent``): the Studio browsing a database Mastra wrote (no traces of ours) left two
    empty files beside the user's database (found 2026-12-06 walking the Studio on a Mastra database).
    Once a writer has been there its gate file is there, and a read waits on it as before."""
    store.path.parent.mkdir(parents=True, exist_ok=True)
    assert store.list_traces().missing and store.count_traces().missing
    assert not store.get_trace("t1")
    assert list(store.path.parent.iterdir()) == []
    store.write_spans(agent_trace("t1"))
    assert [t.trace_id for t in store.list_traces()] == ["t1"]


def test_deleting_the_file_starts_over(store: DuckDBObservabilityStore) -> None:
    store.write_spans(agent_trace("old"))
    assert store.count_traces() == 1
    for leftover in store.path.parent.glob(store.path.name + "*"):
        leftover.unlink()
    assert store.list_traces().missing
    store.write_spans(agent_trace("new"))
    assert [t.trace_id for t in store.list_traces()] == ["new"]


def test_prune_by_days_deletes_whole_old_traces(store: DuckDBObservabilityStore) -> None:
    now = T0 + timedelta(days=30)
    for days_ago in (10, 5, 1):
        store.write_spans(agent_trace(f"d{days_ago}", base=now - timedelta(days=days_ago)))
    result = store.prune(keep_days=3, now=now)
    assert (result.traces_deleted, result.spans_deleted) == (2, 14)
    assert [t.trace_id for t in store.list_traces()] == ["d1"]
    assert len(store.get_trace("d10")) == 0


def test_prune_uses_retention_settings_when_no_limit_given(tmp_path: Path) -> None:
    store = DuckDBObservabilityStore(tmp_path / "o.duckdb", retention=RetentionSettings(keep_days=7))
    store.write_spans(agent_trace("ancient", base=datetime(2000, 1, 1, tzinfo=timezone.utc)))
    store.write_spans(agent_trace("fresh", base=datetime.now(timezone.utc)))
    assert store.prune().traces_deleted == 1
    assert [t.trace_id for t in store.list_traces()] == ["fresh"]


def _bulky_traces(store: DuckDBObservabilityStore, n: int) -> None:
    rng = random.Random(7)
    batch: list[SpanRecord] = []
    for i in range(n):
        blob = rng.randbytes(20_000).hex()  # incompressible enough that size tracks count
        spans = agent_trace(f"t{i:03d}", base=T0 + timedelta(minutes=i))
        batch += [SpanRecord(**{**s.__dict__, "output": {"text": blob}}) if s.parent_span_id is None
                  else s for s in spans]
    store.write_spans(batch)


def test_prune_by_size_keeps_newest_traces_and_shrinks_the_file(store: DuckDBObservabilityStore) -> None:
    _bulky_traces(store, 150)
    before = store.file_size()
    assert before > 4 * 1024 * 1024
    result = store.prune(keep_mb=2)
    assert not result.busy and result.compacted
    assert result.bytes_after == store.file_size() <= 2 * 1024 * 1024 < before
    kept = [t.trace_id for t in store.list_traces(limit=1000)]
    assert 0 < len(kept) < 150
    # Oldest first: what is left is exactly the newest traces.
    assert kept == [f"t{i:03d}" for i in range(149, 149 - len(kept), -1)]
    assert len(store.get_trace(kept[0])) == 7


def test_prune_without_compaction_deletes_but_keeps_file(store: DuckDBObservabilityStore) -> None:
    _bulky_traces(store, 20)
    result = store.prune(keep_days=1, compact=False, now=T0 + timedelta(days=5))
    assert result.traces_deleted == 20 and not result.compacted
    assert store.count_traces() == 0


def test_prune_cli(store: DuckDBObservabilityStore, capsys: pytest.CaptureFixture[str]) -> None:
    store.write_spans(agent_trace("old", base=datetime(2001, 1, 1, tzinfo=timezone.utc)))
    store.write_spans(agent_trace("new", base=datetime.now(timezone.utc)))
    assert prune_main(["--db", str(store.path), "--keep-days", "30"]) == 0
    assert "deleted 1 traces (7 spans)" in capsys.readouterr().out
    assert [t.trace_id for t in store.list_traces()] == ["new"]
    assert prune_main(["--db", str(store.path)]) == 2  # no limit given
    assert prune_main(["--db", str(store.path), "--keep-days", "x"]) == 2


def test_read_only_store_refuses_to_write(tmp_path: Path) -> None:
    writer = DuckDBObservabilityStore(tmp_path / "o.duckdb")
    writer.write_spans(agent_trace("t1"))
    reader = DuckDBObservabilityStore(tmp_path / "o.duckdb", read_only=True)
    with pytest.raises(PermissionError):
        reader.write_spans(agent_trace("t2"))
    with pytest.raises(PermissionError):
        reader.prune(keep_days=1)
    assert reader.count_traces() == 1
    assert os.path.exists(tmp_path / "o.duckdb")


def test_prune_refuses_negative_limits_and_zero_means_no_limit(store: DuckDBObservabilityStore,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    store.write_spans(agent_trace("old", base=datetime(2001, 1, 1, tzinfo=timezone.utc)))
    for kwargs in ({"keep_days": -5}, {"keep_mb": -1}, {"keep_days": float("nan")}):
        with pytest.raises(ValueError, match="0 means no limit"):
            store.prune(**kwargs)
    assert store.prune(keep_days=0).traces_deleted == 0
    assert prune_main(["--db", str(store.path), "--keep-days", "-5"]) == 2
    assert "must not be negative" in capsys.readouterr().err
    assert prune_main(["--db", str(store.path), "--keep-days", "0"]) == 0
    assert store.count_traces() == 1
