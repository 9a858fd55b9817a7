"""The tracer: parenting, errors, redaction, no-op tracing, export into DuckDB."""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta, timezone
from itertools import count
from pathlib import Path
from typing import Literal

import pytest

from core.traces.store import DuckDBObservabilityStore
from core.traces.tracer import (
    REDACTED,
    DuckDBSpanExporter,
    InMemorySpanExporter,
    NoopTracer,
    SpanType,
    Tracer,
    current_span,
    redact_secrets,
)


def make_tracer() -> tuple[Tracer, InMemorySpanExporter]:
    ticks = count()
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    ids = count(1)

    def new_id(kind: Literal["trace", "span"]) -> str:
        return f"{kind}{next(ids)}"

    exporter = InMemorySpanExporter()
    tracer = Tracer(exporter, clock=lambda: start + timedelta(milliseconds=next(ticks)), id_factory=new_id)
    return tracer, exporter


def test_nested_spans_parent_automatically_and_inherit_ids() -> None:
    tracer, out = make_tracer()
    with tracer.start_span("agent run: support", SpanType.AGENT_RUN, thread_id="th", resource_id="u",
                           entity_type="agent", entity_name="Support") as run:
        with tracer.memory_operation("recall") as recall:
            assert current_span() is recall
        with tracer.start_span("llm: m", SpanType.MODEL_GENERATION) as gen:
            with tracer.start_span("tool: search", SpanType.TOOL_CALL):
                pass
        assert current_span() is run
    assert current_span() is None
    spans = {s.name: s for s in out.spans}
    assert [s.name for s in out.spans] == ["memory: recall", "tool: search", "llm: m", "agent run: support"]
    assert spans["memory: recall"].parent_span_id == run.span_id
    assert spans["memory: recall"].attributes == {"operationType": "recall"}
    assert spans["tool: search"].parent_span_id == gen.span_id
    assert {s.trace_id for s in out.spans} == {run.trace_id}
    assert all((s.thread_id, s.resource_id) == ("th", "u") for s in out.spans)
    assert spans["tool: search"].root_entity_name == "Support"
    assert spans["llm: m"].parent_entity_name == "Support"
    assert all(s.ended_at is not None and s.ended_at >= s.started_at for s in out.spans)
    assert recall.span_id != run.span_id


def test_explicit_parent_new_trace_and_threads_do_not_leak() -> None:
    tracer, out = make_tracer()
    with tracer.start_span("root", SpanType.AGENT_RUN) as root:
        other = tracer.start_span("side", SpanType.AGENT_RUN, new_trace=True)
        other.end()
        seen: list[object] = []
        worker = threading.Thread(target=lambda: seen.append(current_span()))
        worker.start()
        worker.join()
    child = tracer.start_span("late child", SpanType.GENERIC, parent=root)
    child.end()
    assert seen == [None]  # a thread starts with its own, empty context
    by_name = {s.name: s for s in out.spans}
    assert by_name["side"].parent_span_id is None and by_name["side"].trace_id != root.trace_id
    assert by_name["late child"].parent_span_id == root.span_id


def test_errors_are_recorded_and_re_raised() -> None:
    tracer, out = make_tracer()
    with pytest.raises(ValueError, match="bad tool input"):
        with tracer.start_span("run", SpanType.AGENT_RUN):
            with tracer.start_span("tool: x", SpanType.TOOL_CALL):
                raise ValueError("bad tool input")
    tool, run = out.spans
    assert tool.error["message"] == "bad tool input" and tool.error["name"] == "ValueError"
    assert run.error["name"] == "ValueError"
    assert current_span() is None


def test_end_sets_output_and_attributes_once() -> None:
    tracer, out = make_tracer()
    span = tracer.start_span("llm", SpanType.MODEL_GENERATION, attributes={"model": "m"},
                             input={"messages": [{"role": "user", "content": "hi"}]})
    record = span.end(output={"text": "yo"}, attributes={"usage": {"inputTokens": 3}})
    assert span.end(output="ignored") is None
    assert record is not None and out.spans == [record]
    assert record.output == {"text": "yo"}
    assert record.attributes == {"model": "m", "usage": {"inputTokens": 3}}


def test_secrets_are_redacted_but_token_counts_kept() -> None:
    tracer, out = make_tracer()
    with tracer.start_span(
        "llm", SpanType.MODEL_GENERATION,
        attributes={
            "api_key": "sk-live-123", "apiKey": "x", "provider": {"Authorization": "Bearer abc",
                                                                "headers": [{"x-auth-token": "t"}]},
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "totalTokens": 12},
            "maxTokens": 256, "token_count": 5,
        },
        input={"messages": [{"role": "user", "content": "my key is sk-abcdefghijklmnopqrstuv ok"}]},
        metadata={"db": {"password": "hunter2", "user": "me"}, "clientSecret": "s"},
    ) as span:
        span.end(output={"access_token": "at", "refreshToken": "rt", "tokens": 7})
    record = out.spans[0]
    attrs = record.attributes
    assert attrs["api_key"] == attrs["apiKey"] == REDACTED
    assert attrs["provider"] == {"Authorization": REDACTED, "headers": [{"x-auth-token": REDACTED}]}
    assert attrs["usage"] == {"prompt_tokens": 10, "completion_tokens": 2, "totalTokens": 12}
    assert (attrs["maxTokens"], attrs["token_count"]) == (256, 5)
    assert record.metadata == {"db": {"password": REDACTED, "user": "me"}, "clientSecret": REDACTED}
    assert record.output == {"access_token": REDACTED, "refreshToken": REDACTED, "tokens": 7}
    assert record.input["messages"][0]["content"] == f"my key is {REDACTED} ok"
    assert "hunter2" not in repr(out.spans) and "sk-live" not in repr(out.spans)


def test_redaction_does_not_touch_the_callers_objects() -> None:
    data = {"password": "p", "nested": [{"token": "t"}]}
    assert redact_secrets(data) == {"password": REDACTED, "nested": [{"token": REDACTED}]}
    assert data == {"password": "p", "nested": [{"token": "t"}]}


def test_noop_tracer_accepts_the_same_calls() -> None:
    tracer = NoopTracer()
    with tracer.start_span("run", SpanType.AGENT_RUN, thread_id="t") as span:
        span.set_attributes({"a": 1})
        with tracer.memory_operation("save") as inner:
            inner.end(output=1)
    assert tracer.flush() is True and current_span() is None


def test_a_broken_exporter_never_fails_the_run() -> None:
    attempts: list[int] = []

    class Broken(InMemorySpanExporter):
        def export(self, spans: object) -> None:
            attempts.append(len(spans))  # type: ignore[arg-type]
            raise OSError("disk on fire")

    tracer = Tracer(Broken())
    finished = []
    with tracer.start_span("run", SpanType.AGENT_RUN):
        with tracer.memory_operation("recall"):
            pass
        finished.append("run body")
    # Both spans were handed to the exporter, which failed each time; the run went on to the end.
    assert finished == ["run body"] and attempts == [1, 1]
    assert tracer.current_span() is None  # the failed export left no span open behind it


def test_duckdb_exporter_writes_an_agent_run(tmp_path: Path) -> None:
    path = tmp_path / "observability.duckdb"
    exporter = DuckDBSpanExporter(path, background=False)
    tracer = Tracer(exporter)
    with tracer.start_span("agent run: a", SpanType.AGENT_RUN, thread_id="th", resource_id="u"):
        with tracer.start_span("input processor: memory", SpanType.PROCESSOR_RUN):
            with tracer.memory_operation("recall"):
                pass
        with tracer.start_span("llm: m", SpanType.MODEL_GENERATION,
                               input={"messages": [{"role": "user", "content": "hi"}]}) as gen:
            gen.end(output={"text": "hey"},  # OpenAI-shaped usage, as core.llm reports it
                    attributes={"usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}})
        with tracer.memory_operation("working-memory update", attributes={"scope": "resource"}):
            pass
    assert exporter.queued == 5
    assert exporter.flush(timeout=10) is True
    exporter.shutdown()
    store = DuckDBObservabilityStore(path)
    (summary,) = store.list_traces()
    assert (summary.span_count, summary.total_tokens, summary.thread_id) == (5, 9, "th")
    names = [s.name for s in store.get_trace(summary.trace_id)]
    assert names == ["agent run: a", "input processor: memory", "memory: recall", "llm: m",
                     "memory: working-memory update"]
    assert exporter.stats.written == 5 and exporter.stats.dropped == 0


def test_a_failed_span_export_leaves_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(InMemorySpanExporter):
        def export(self, spans: object) -> None:
            raise OSError("disk on fire")

    tracer = Tracer(Broken())
    with caplog.at_level(logging.WARNING, logger="core.traces.tracer"):
        with tracer.start_span("agent run: a", SpanType.AGENT_RUN):
            pass
    (record,) = [r for r in caplog.records if r.name == "core.traces.tracer"]
    assert record.levelno == logging.WARNING and "agent run: a" in record.getMessage()
    assert record.exc_info is not None and "disk on fire" in str(record.exc_info[1])


@pytest.mark.parametrize(("value", "off"), [("off", True), ("OFF", True), ("0", True), ("false", True), (" no ", True),
                                            ("", False), ("on", False), ("1", False), ("True", False), ("yes", False)])
def test_the_tracing_switch_reads_off_and_on(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
                                            value: str, off: bool) -> None:
    from core.traces.tracer import tracing_disabled

    monkeypatch.setenv("MEMORY_STUDIO_TRACING", value)
    with caplog.at_level(logging.WARNING, logger="core.traces.tracer"):
        assert tracing_disabled() is off
    assert not caplog.records


def test_a_tracing_switch_that_is_neither_off_nor_on_says_tracing_stays_on(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A typo ("of", "disabled") must not pass for off unnoticed: tracing stays on, and the log says so once."""
    from core.traces.tracer import tracing_disabled

    monkeypatch.setenv("MEMORY_STUDIO_TRACING", "disabled-please")
    with caplog.at_level(logging.WARNING, logger="core.traces.tracer"):
        assert tracing_disabled() is False
        assert tracing_disabled() is False
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "'disabled-please' is neither off" in said[0] and "tracing stays on" in said[0]


def test_a_telling_tracer_names_each_span_as_it_starts_and_exports_as_the_tracer_it_copies() -> None:
    """``Tracer.telling``: the listener hears each span at its start (before its work), with its attributes; the
    spans still go to the same exporter with the same ids and redaction; the original tracer tells nobody; a
    listener that raises never fails the run."""
    tracer, exporter = make_tracer()
    heard: list[tuple[str, object, int]] = []
    told = tracer.telling(lambda span: heard.append((span.name, span.field("attributes"), len(exporter.spans))))
    with told.start_span("run", SpanType.AGENT_RUN):
        with told.start_span("memory: observe", SpanType.MEMORY_OPERATION,
                             attributes={"operationType": "observe", "messages": 4, "apiKey": "sk-secret"}):
            pass
    with tracer.start_span("untold", SpanType.AGENT_RUN):
        pass
    assert [(name, done) for name, _attrs, done in heard] == [("run", 0), ("memory: observe", 0)]
    assert heard[1][1] == {"operationType": "observe", "messages": 4, "apiKey": "sk-secret"}
    assert [s.name for s in exporter.spans] == ["memory: observe", "run", "untold"]
    assert [s.span_id for s in exporter.spans] == ["span3", "span2", "span5"]  # one id sequence (trace1, trace4 between): the same tracer's
    assert exporter.spans[0].attributes["apiKey"] == REDACTED

    def broken(_span: object) -> None:
        raise RuntimeError("listener broke")

    with tracer.telling(broken).start_span("still runs", SpanType.AGENT_RUN):
        pass
    assert exporter.spans[-1].name == "still runs"
