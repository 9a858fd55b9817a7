"""OpenTelemetry export, checked against a real OTLP/HTTP receiver on 127.0.0.1 inside the test."""

from __future__ import annotations

import gzip
import json
import logging
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

from core import Memory, MemoryOptions
from core.agent import Agent
from core.llm import ScriptedModel, ScriptedReply, tool_call
from core.traces.composite import CompositeSpanExporter
from core.traces.exporter import DuckDBSpanExporter
from core.traces.otel import OTelSpanExporter
from core.traces.otel_config import otel_endpoint_from_env, traces_url, with_env_exporters
from core.traces.tracer import InMemorySpanExporter, Tracer

SECRET_KEY = "sk-live-THISISASECRETKEY1234567890"
SECRET_BEARER = "Bearer abcdefghijklmnop.qrstuvwxyz"


class Receiver:
    """An OTLP/HTTP trace receiver: POST /v1/traces with protobuf, decoded with opentelemetry-proto."""

    def __init__(self, *, hold: threading.Event | None = None) -> None:
        self.bodies: list[bytes] = []
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        self.hold = hold
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if receiver.hold is not None:
                    receiver.hold.wait()
                receiver.paths.append(self.path)
                if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.bodies.append(body)
                receiver.requests.append(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def spans(self) -> list[tuple[dict[str, Any], PbSpan]]:
        """Every received span with its resource attributes."""
        out = []
        for request in self.requests:
            for rs in request.resource_spans:
                resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
                for ss in rs.scope_spans:
                    out.extend((resource, span) for span in ss.spans)
        return out

    def close(self) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def attrs(span: PbSpan) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in span.attributes}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _agent(memory: Memory, tracer: Tracer, secret_tool: bool = False) -> Agent:
    def lookup(city: str, **_extra: object) -> str:
        """Weather for a city."""
        return f"sunny in {city}"

    model = ScriptedModel([
        ScriptedReply(tool_calls=(tool_call("lookup", {"city": "Oslo", "api_key": SECRET_KEY}),)),
        f"It is sunny in Oslo. (your key was {SECRET_KEY})",
    ], name="weather")
    return Agent("weatherbot", instructions="You answer about the weather.", model=model, memory=memory,
                 tools=[lookup], tracer=tracer)


def test_spans_reach_the_receiver_with_genai_attributes_and_parents(store, receiver):
    exporter = OTelSpanExporter(receiver.url)
    tracer = Tracer(exporter)
    memory = Memory(store, MemoryOptions(last_messages=5))
    result = _agent(memory, tracer).generate("Weather in Oslo?", memory={"resource": "ada", "thread": "t1"})
    assert exporter.flush(10.0)
    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}

    spans = receiver.spans()
    by_name = {span.name: (res, span) for res, span in spans}
    assert "invoke_agent weatherbot" in by_name and "execute_tool lookup" in by_name
    resource, root = by_name["invoke_agent weatherbot"]
    assert resource["service.name"] == "memory-studio"
    # One trace; the agent run is the root and every other span hangs below it.
    assert {s.trace_id for _, s in spans} == {root.trace_id} and root.trace_id.hex() == result.trace_id
    assert root.parent_span_id == b""
    ids = {s.span_id for _, s in spans}
    assert all(s.parent_span_id in ids for _, s in spans if s is not root)

    chats = [s for _, s in spans if s.name == "chat weather"]
    assert len(chats) == 2
    assert all(c.parent_span_id == root.span_id for c in chats)
    assert all(c.kind == PbSpan.SpanKind.SPAN_KIND_CLIENT for c in chats)
    first, second = sorted(chats, key=lambda s: s.start_time_unix_nano)
    a = attrs(first)
    assert a[gen_ai.GEN_AI_OPERATION_NAME] == "chat"
    assert a[gen_ai.GEN_AI_PROVIDER_NAME] == "scripted" and a[gen_ai.GEN_AI_SYSTEM] == "scripted"
    assert a[gen_ai.GEN_AI_REQUEST_MODEL] == "weather" and a[gen_ai.GEN_AI_RESPONSE_MODEL] == "weather"
    assert a[gen_ai.GEN_AI_CONVERSATION_ID] == "t1"
    prompt = result.prompts[0]
    usage_first = attrs(first)
    assert isinstance(usage_first[gen_ai.GEN_AI_USAGE_INPUT_TOKENS], int)
    assert usage_first[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] > 0 and usage_first[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
    assert a[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] == ["tool_calls"]
    messages = json.loads(a[gen_ai.GEN_AI_INPUT_MESSAGES])
    assert [m["role"] for m in messages] == [m["role"] for m in prompt.messages]
    assert messages[0] == {"role": "system", "parts": [{"type": "text", "content": "You answer about the weather."}]}
    assert messages[-1] == {"role": "user", "parts": [{"type": "text", "content": "Weather in Oslo?"}]}
    tools = json.loads(a[gen_ai.GEN_AI_TOOL_DEFINITIONS])
    assert tools[0]["function"]["name"] == "lookup"
    out = json.loads(a[gen_ai.GEN_AI_OUTPUT_MESSAGES])
    assert out[0]["role"] == "assistant" and out[0]["finish_reason"] == "tool_calls"
    assert out[0]["parts"][0]["type"] == "tool_call" and out[0]["parts"][0]["name"] == "lookup"
    # The second call got the tool result back, in the conventions' tool_call_response part.
    second_in = json.loads(attrs(second)[gen_ai.GEN_AI_INPUT_MESSAGES])
    assert second_in[-1]["role"] == "tool" and second_in[-1]["parts"][0]["type"] == "tool_call_response"
    assert second_in[-1]["parts"][0]["response"] == "sunny in Oslo"

    tool = attrs(by_name["execute_tool lookup"][1])
    assert tool[gen_ai.GEN_AI_TOOL_NAME] == "lookup" and tool[gen_ai.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert tool[gen_ai.GEN_AI_TOOL_CALL_ID] == "call_1_0"
    run = attrs(root)
    assert run[gen_ai.GEN_AI_AGENT_NAME] == "weatherbot"
    assert run[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] == result.usage.prompt_tokens
    assert run["memory_studio.resource_id"] == "ada"
    exporter.shutdown()


def test_secrets_are_redacted_before_they_reach_the_receiver(store, receiver):
    exporter = OTelSpanExporter(receiver.url)
    tracer = Tracer(exporter)
    memory = Memory(store, MemoryOptions(last_messages=5))
    agent = _agent(memory, tracer)
    agent.generate(f"Use my key {SECRET_KEY} and header {SECRET_BEARER}", memory={"resource": "ada", "thread": "t1"})
    with tracer.start_span("custom", "generic", attributes={"password": "hunter2-hunter2", "note": "fine"}):
        pass
    assert exporter.flush(10.0)
    raw = b"".join(receiver.bodies)
    assert raw and b"fine" in raw
    for secret in (SECRET_KEY, SECRET_BEARER.split()[1], "hunter2-hunter2"):
        assert secret.encode() not in raw
    assert b"[REDACTED]" in raw
    exporter.shutdown()


def test_duckdb_and_otel_both_receive_spans_when_the_environment_names_an_endpoint(store, receiver, monkeypatch):
    monkeypatch.setenv("MEMORY_STUDIO_OTEL_ENDPOINT", receiver.url)
    tracer = store.tracer()
    assert isinstance(tracer.exporter, CompositeSpanExporter)
    duck, otel = tracer.exporter.exporters
    assert isinstance(duck, DuckDBSpanExporter) and isinstance(otel, OTelSpanExporter)
    memory = Memory(store, MemoryOptions(last_messages=5))
    result = Agent("plain", instructions="Hi.", model=ScriptedModel(["hello"]), memory=memory).generate(
        "hi", memory={"resource": "r", "thread": "t"})
    assert tracer.flush(10.0)
    received = {s.name for _, s in receiver.spans()}
    assert "invoke_agent plain" in received and "chat demo" in received
    stored = store.observability.get_trace(result.trace_id)
    assert {s.name for s in stored} >= {"agent run: 'plain'", "llm: 'scripted/demo'"}


def test_a_dead_endpoint_logs_a_line_and_never_fails_the_turn(store, caplog):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    exporter = OTelSpanExporter(dead, timeout_s=0.5)
    memory = Memory(store, MemoryOptions(last_messages=5))
    agent = Agent("a", instructions="I", model=ScriptedModel(["ok"]), memory=memory, tracer=Tracer(exporter))
    with caplog.at_level(logging.WARNING, logger="core.traces.otel"):
        assert agent.generate("hi", memory={"resource": "r", "thread": "t"}).text == "ok"
        exporter.flush(10.0)
    assert exporter.stats.failed > 0 and exporter.stats.sent == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "core.traces.otel"]
    assert len(lines) == 1 and dead in lines[0] and "failed" in lines[0]
    assert memory.recall(thread_id="t").messages[-1].text == "ok"
    exporter.shutdown(1.0)


def test_a_stuck_collector_does_not_hold_up_the_turn(store):
    hold = threading.Event()
    stuck = Receiver(hold=hold)
    try:
        exporter = OTelSpanExporter(stuck.url, max_export_batch_size=1, schedule_delay_ms=1)
        memory = Memory(store, MemoryOptions(last_messages=5))
        agent = Agent("a", instructions="I", model=ScriptedModel(["one", "two"]), memory=memory,
                      tracer=Tracer(exporter))
        done: list[str] = []
        worker = threading.Thread(
            target=lambda: done.extend(agent.generate(m, memory={"resource": "r", "thread": "t"}).text
                                       for m in ("a", "b")))
        worker.start()
        worker.join(60)  # a deadlock guard, not a timing assertion: the collector never answers meanwhile
        assert done == ["one", "two"] and not stuck.requests
        hold.set()
        assert exporter.flush(10.0)
        assert any(s.name == "invoke_agent a" for _, s in stuck.spans())
        exporter.shutdown()
    finally:
        stuck.close()


def test_an_error_span_carries_status_and_exception_event(receiver):
    exporter = OTelSpanExporter(receiver.url)
    tracer = Tracer(exporter)
    with pytest.raises(RuntimeError):
        with tracer.start_span("boom", "generic"):
            raise RuntimeError("it broke")
    assert exporter.flush(10.0)
    [(_, span)] = receiver.spans()
    assert span.status.code == span.status.STATUS_CODE_ERROR and span.status.message == "it broke"
    assert attrs(span)["error.type"] == "RuntimeError"
    [event] = span.events
    assert event.name == "exception"
    assert {kv.key: _value(kv.value) for kv in event.attributes}["exception.message"] == "it broke"
    exporter.shutdown()


def test_content_capture_can_be_turned_off(store, receiver):
    exporter = OTelSpanExporter(receiver.url, capture_content=False)
    memory = Memory(store, MemoryOptions(last_messages=5))
    Agent("a", instructions="I", model=ScriptedModel(["the private answer"]), memory=memory,
          tracer=Tracer(exporter)).generate("my private question", memory={"resource": "r", "thread": "t"})
    assert exporter.flush(10.0)
    raw = b"".join(receiver.bodies)
    assert b"private" not in raw
    chat = next(s for _, s in receiver.spans() if s.name == "chat demo")
    assert attrs(chat)[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
    exporter.shutdown()


def test_endpoint_settings():
    assert traces_url("http://h:4318") == "http://h:4318/v1/traces"
    assert traces_url("http://h:4318/") == "http://h:4318/v1/traces"
    assert traces_url("https://cloud.example/api/public/otel") == "https://cloud.example/api/public/otel/v1/traces"
    assert traces_url("http://h:6006/v1/traces") == "http://h:6006/v1/traces"
    with pytest.raises(ValueError, match="http"):
        traces_url("localhost:4318")
    assert otel_endpoint_from_env({}) is None
    assert otel_endpoint_from_env({"MEMORY_STUDIO_OTEL_ENDPOINT": "http://a:1"}) == "http://a:1/v1/traces"
    assert otel_endpoint_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:2"}) == "http://b:2/v1/traces"
    assert otel_endpoint_from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:3/x"}) == "http://c:3/x"
    both = {"MEMORY_STUDIO_OTEL_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:2"}
    assert otel_endpoint_from_env(both) == "http://a:1/v1/traces"
    assert otel_endpoint_from_env({**both, "MEMORY_STUDIO_OTEL_ENDPOINT": "off"}) is None
    assert otel_endpoint_from_env({**both, "OTEL_SDK_DISABLED": "true"}) is None


def test_a_bad_endpoint_setting_never_breaks_tracing(caplog):
    base = InMemorySpanExporter()
    with caplog.at_level(logging.WARNING, logger="core.traces.otel_config"):
        assert with_env_exporters(base, {"MEMORY_STUDIO_OTEL_ENDPOINT": "collector:4318"}) is base
    assert "not an http(s) URL" in caplog.text
    assert with_env_exporters(base, {}) is base


def test_one_failing_exporter_does_not_starve_the_others(caplog):
    class Broken:
        def export(self, spans):
            raise OSError("disk on fire")

        def flush(self, timeout=None):
            return True

        def shutdown(self, timeout=None):
            return None

    kept = InMemorySpanExporter()
    tracer = Tracer(CompositeSpanExporter([Broken(), kept]))
    with caplog.at_level(logging.ERROR, logger="core.traces.composite"):
        with tracer.start_span("s", "generic"):
            pass
    assert [s.name for s in kept.spans] == ["s"]
    assert "Broken failed" in caplog.text


def test_a_real_provider_call_names_provider_and_bare_model_names(store, receiver, monkeypatch):
    from core.llm import LoopbackServer, OpenAICompatibleModel

    monkeypatch.setenv("LOOPBACK_KEY", "sk-loopback-secret-value-123")
    exporter = OTelSpanExporter(receiver.url)
    memory = Memory(store, MemoryOptions(last_messages=5))
    with LoopbackServer(["Hello."]) as server:
        model = OpenAICompatibleModel("loopback-chat", base_url=server.base_url, api_key_env="LOOPBACK_KEY")
        Agent("chat", instructions="Be nice.", model=model, memory=memory, tracer=Tracer(exporter)).generate(
            "Hi", memory={"resource": "u", "thread": "t"})
    assert exporter.flush(10.0)
    chat = next(s for _, s in receiver.spans() if s.name.startswith("chat "))
    a = attrs(chat)
    assert chat.name == "chat loopback-chat"
    assert a[gen_ai.GEN_AI_PROVIDER_NAME] == "openai-compatible"
    assert a[gen_ai.GEN_AI_REQUEST_MODEL] == "loopback-chat" and a[gen_ai.GEN_AI_RESPONSE_MODEL] == "loopback-chat"
    assert b"sk-loopback-secret" not in b"".join(receiver.bodies)
    exporter.shutdown()


def test_an_endpoints_credentials_never_reach_a_log_line(store, caplog):
    """``http://user:token@collector`` is how some collectors take HTTP Basic auth (the exporter sends
    it): the lines that name the endpoint show it without the credential, and without a query."""
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token = "Tok3nValue99xyz"
    url = f"http://collector:{token}@127.0.0.1:{port}?auth={token}"
    with caplog.at_level(logging.INFO, logger="core.traces"):
        composite = with_env_exporters(InMemorySpanExporter(), {"MEMORY_STUDIO_OTEL_ENDPOINT": url})
        assert isinstance(composite, CompositeSpanExporter)
        composite.shutdown(1.0)
        otel = OTelSpanExporter(url, timeout_s=0.5)
        memory = Memory(store, MemoryOptions(last_messages=5))
        agent = Agent("a", instructions="I", model=ScriptedModel(["ok"]), memory=memory, tracer=Tracer(otel))
        assert agent.generate("hi", memory={"resource": "r", "thread": "t"}).text == "ok"
        otel.flush(10.0)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("core.traces")]
    assert any("spans also go to OpenTelemetry at" in line for line in lines), lines
    assert any("failed" in line and f"http://127.0.0.1:{port}/v1/traces" in line for line in lines), lines
    assert not any(token in line for line in lines), lines
    assert otel.stats.failed > 0 and token not in otel.endpoint
    otel.shutdown(1.0)


def test_a_dead_collector_does_not_flood_the_log_with_the_sdks_lines(store, caplog):
    """Each failed batch made the OTLP exporter log an error (and a warning per retry): with steady
    traffic, about a line a second. Each kind of those lines now comes at most once a minute."""
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    exporter = OTelSpanExporter(dead, timeout_s=0.5)
    memory = Memory(store, MemoryOptions(last_messages=5))
    agent = Agent("a", instructions="I", model=ScriptedModel(["one", "two", "three"]), memory=memory,
                  tracer=Tracer(exporter))
    with caplog.at_level(logging.WARNING):
        for text in ("a", "b", "c"):  # three batches, each sent (and failed) on its own
            agent.generate(text, memory={"resource": "r", "thread": "t"})
            exporter.flush(10.0)
    assert exporter.stats.failed > 0 and exporter.stats.sent == 0
    sdk = [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry.exporter")]
    # Without the limit: one "Failed to export" line per batch. (The limit is per process, so an earlier
    # test's dead endpoint may already have used this minute's line: at most one, not exactly one.)
    assert sum(line.startswith("Failed to export") for line in sdk) <= 1, sdk
    assert sum(line.startswith("Transient error") for line in sdk) <= 1, sdk
    exporter.shutdown(1.0)
