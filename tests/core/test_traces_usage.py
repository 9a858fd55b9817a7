"""Token usage per model (for the Studio's cost estimate): per trace and over a thread's traces."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from core.traces.spans import ModelUsage, SpanRecord, TraceFilters
from core.traces.store import DuckDBObservabilityStore

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
LOCAL = {"provider": "openai-compatible", "model": "llama3:8b", "model_id": "openai-compatible/llama3:8b",
         "base_url": "http://localhost:11434/v1"}


def run(trace: str, thread: str, minutes: int, calls: list[tuple[str, int, int]], root_model: object = None) -> list[SpanRecord]:
    base = T0 + timedelta(minutes=minutes)
    spans = [SpanRecord(trace_id=trace, span_id=f"{trace}-root", name="agent run: 'chef'", span_type="agent_run",
                        started_at=base, ended_at=base + timedelta(seconds=5), thread_id=thread,
                        attributes={"model": root_model} if root_model is not None else None)]
    for i, (model, inp, out) in enumerate(calls):
        spans.append(SpanRecord(
            trace_id=trace, span_id=f"{trace}-gen{i}", parent_span_id=f"{trace}-root", name=f"llm: '{model}'",
            span_type="model_generation", started_at=base + timedelta(seconds=i), thread_id=thread,
            ended_at=base + timedelta(seconds=i + 1),
            attributes={"model": model, "provider": model.split("/")[0],
                        "usage": {"prompt_tokens": inp, "completion_tokens": out}}))
    return spans


def test_usage_is_split_by_model_per_trace_and_per_thread(tmp_path: Path) -> None:
    store = DuckDBObservabilityStore(tmp_path / "observability.duckdb")
    store.write_spans(run("a", "t1", 0, [("openai/gpt-4o-mini", 1000, 200), ("openai/gpt-4o-mini", 500, 100)]))
    store.write_spans(run("b", "t1", 1, [("openai/gpt-4o", 300, 30), ("openai-compatible/llama3:8b", 40, 4)],
                          root_model=LOCAL))
    store.write_spans(run("c", "t2", 2, [("openai/gpt-4o", 7, 7)]))

    traces = {t.trace_id: t for t in store.list_traces()}
    assert traces["a"].models == (ModelUsage("openai/gpt-4o-mini", "openai", None, 1500, 300, 2),)
    assert traces["b"].models == (
        ModelUsage("openai-compatible/llama3:8b", "openai-compatible", "http://localhost:11434/v1", 40, 4, 1),
        ModelUsage("openai/gpt-4o", "openai", None, 300, 30, 1),
    )
    assert traces["a"].input_tokens == 1500 and traces["a"].output_tokens == 300

    thread = {u.model: u for u in store.usage_by_model(TraceFilters(thread_id="t1"))}
    assert set(thread) == {"openai/gpt-4o-mini", "openai/gpt-4o", "openai-compatible/llama3:8b"}
    assert (thread["openai/gpt-4o"].input_tokens, thread["openai/gpt-4o"].output_tokens) == (300, 30)
    assert thread["openai-compatible/llama3:8b"].base_url == "http://localhost:11434/v1"
    everything = store.usage_by_model()
    assert sum(u.input_tokens for u in everything) == 1500 + 300 + 40 + 7
