"""The Agents SDK's traces, mirrored into our trace store as they happen.

A ``TracingProcessor`` (the SDK's own extension point) that, for runs started with a
``MemorySession``'s run config, opens one of our spans for each of the SDK's: the run is an
``agent_run`` root (thread and resource from the session), an agent span an ``agent_run`` child, a
generation a ``model_generation`` whose input is the exact chat messages the SDK sent, a Responses
call a ``model_generation`` with the instructions and items it sent, a function call a
``tool_call``. Runs of other sessions (or none) are left alone. The SDK's other processors (its
own exporter) keep working beside this one.
"""

from __future__ import annotations

import contextvars
import json
import logging
import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agents.tracing import TracingProcessor, add_trace_processor, get_current_span, get_current_trace

from core.integrations.openai_agents.capture import ARMED, from_span
from core.traces.tracer import NOOP_TRACER, Span, SpanTracer, SpanType, tracing_disabled

if TYPE_CHECKING:  # pragma: no cover
    from core.integrations.openai_agents.session import MemorySession

log = logging.getLogger(__name__)

#: The trace-metadata key a MemorySession's run config sets; its value names the session.
SESSION_KEY = "memory_studio_session"

#: The instructions the memory filter gave the model call about to run: (SDK trace id, text). A
#: Responses call's span has its instructions only from the response, and a server need not echo them
#: (llama.cpp's does not); the span then takes these, once (a later call, or a nested run started
#: from a tool, sets its own or finds none).
SENT_INSTRUCTIONS: contextvars.ContextVar[tuple[str, str | None] | None] = contextvars.ContextVar(
    "memory_studio_sent_instructions", default=None)


class MemoryStudioTraceProcessor(TracingProcessor):
    """Mirrors the SDK's traces of ``MemorySession`` runs into each session's trace store."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: weakref.WeakValueDictionary[str, MemorySession] = weakref.WeakValueDictionary()
        self._spans: dict[str, Span] = {}  # SDK trace id or span id → ours
        # SDK spans we do not mirror (turns, tasks) → our span their children attach to instead
        self._aliases: dict[str, Span] = {}
        self._tracers: dict[str, SpanTracer] = {}  # SDK trace id → the tracer its spans go to

    def register(self, key: str, session: MemorySession) -> None:
        with self._lock:
            self._sessions[key] = session

    # -- the SDK's interface ---------------------------------------------------------------------
    def on_trace_start(self, trace: Any) -> None:
        metadata = getattr(trace, "metadata", None) or {}
        session = self._sessions.get(str(metadata.get(SESSION_KEY))) if isinstance(metadata, Mapping) else None
        if session is None:
            return
        tracer = _tracer_of(session)
        span = tracer.start_span(
            f"agent run: '{trace.name}'", SpanType.AGENT_RUN, new_trace=True, thread_id=session.session_id,
            resource_id=session.resource_id, entity_type="agent", entity_id=trace.name, entity_name=trace.name,
            attributes={"framework": "openai-agents", "sdkTraceId": trace.trace_id},
        )
        if isinstance(span, Span):
            with self._lock:
                self._spans[trace.trace_id] = span
                self._tracers[trace.trace_id] = tracer

    def on_trace_end(self, trace: Any) -> None:
        with self._lock:
            span = self._spans.pop(trace.trace_id, None)
            self._tracers.pop(trace.trace_id, None)
        if span is not None:
            span.end()

    def on_span_start(self, span: Any) -> None:
        with self._lock:
            tracer = self._tracers.get(span.trace_id)
            parent = (self._spans.get(span.parent_id or "") or self._aliases.get(span.parent_id or "")
                      or self._spans.get(span.trace_id))
        if tracer is None or parent is None:
            return
        data = span.span_data
        kind, name = _kind_and_name(data)
        if kind is None:
            with self._lock:
                self._aliases[span.span_id] = parent
            return
        ours = tracer.start_span(name, kind, parent=parent,
                                 entity_type="agent" if kind == SpanType.AGENT_RUN else None,
                                 entity_id=getattr(data, "name", None) if kind == SpanType.AGENT_RUN else None,
                                 entity_name=getattr(data, "name", None) if kind == SpanType.AGENT_RUN else None)
        if isinstance(ours, Span):
            with self._lock:
                self._spans[span.span_id] = ours

    def on_span_end(self, span: Any) -> None:
        _to_turn_record(span.span_data)
        with self._lock:
            ours = self._spans.pop(span.span_id, None)
            self._aliases.pop(span.span_id, None)
        if ours is None:
            return
        try:
            _fill(ours, span.span_data, getattr(span, "trace_id", None))
        except Exception:  # noqa: BLE001 - tracing never fails a run
            log.warning("could not record the SDK's %s span", type(span.span_data).__name__, exc_info=True)
        error = getattr(span, "error", None)
        ours.end(error=str(error.get("message") if isinstance(error, Mapping) else error) if error else None)

    def shutdown(self) -> None:
        for tracer in list(self._tracers.values()):
            tracer.flush(5)

    def force_flush(self) -> None:
        for tracer in list(self._tracers.values()):
            tracer.flush(5)

    # -- for the session -------------------------------------------------------------------------
    def current_session(self) -> MemorySession | None:
        """The live session whose run config started the SDK run going on now (None outside one)."""
        trace = get_current_trace()
        metadata = getattr(trace, "metadata", None) if trace is not None else None
        if not isinstance(metadata, Mapping) or SESSION_KEY not in metadata:
            return None
        with self._lock:
            return self._sessions.get(str(metadata[SESSION_KEY]))

    def current(self) -> tuple[Span | None, SpanTracer]:
        """Our span for the SDK span (or trace) running now and the tracer of its run; (None, the
        no-op tracer) outside a MemorySession run."""
        current = get_current_span()
        trace = get_current_trace()
        with self._lock:
            tracer = self._tracers.get(trace.trace_id) if trace is not None else None
            if tracer is None or trace is None:
                return None, NOOP_TRACER
            if current is not None and current.span_id in self._spans:
                return self._spans[current.span_id], tracer
            if current is not None and current.span_id in self._aliases:
                return self._aliases[current.span_id], tracer
            return self._spans.get(trace.trace_id), tracer


def _tracer_of(session: MemorySession) -> SpanTracer:
    if tracing_disabled():
        return NOOP_TRACER
    return session.memory.turn_tracer()


def _kind_and_name(data: Any) -> tuple[SpanType | None, str]:
    kind = getattr(data, "type", "")
    if kind == "agent":
        return SpanType.AGENT_RUN, f"agent run: '{data.name}'"
    if kind == "generation":
        return SpanType.MODEL_GENERATION, f"llm: '{data.model or 'model'}'"
    if kind == "response":
        return SpanType.MODEL_GENERATION, "llm: responses"
    if kind == "function":
        return SpanType.TOOL_CALL, f"tool: '{data.name}'"
    if kind in ("handoff", "guardrail", "custom", "mcp_tools"):
        return SpanType.GENERIC, f"{kind}: {getattr(data, 'name', None) or getattr(data, 'to_agent', '') or ''}"
    return None, ""


#: Said on a model call whose messages the SDK left out of its trace, instead of an empty prompt.
NOT_RECORDED = ("the Agents SDK did not record what this model call sent and received "
                "(trace_include_sensitive_data is off)")


def _fill(ours: Span, data: Any, trace_id: str | None = None) -> None:
    kind = getattr(data, "type", "")
    if kind == "generation":
        ours.set_attributes({"model": data.model, "modelSettings": dict(data.model_config or {}),
                             "usage": _usage(data.usage)})
        ours.set_attributes({"framework": "openai-agents"})
        if data.input is None and data.output is None:
            # Not an empty prompt and an empty reply: the SDK kept them out (sensitive data off).
            ours.set_attributes({"notRecorded": NOT_RECORDED})
            return
        ours.set_input({"messages": list(data.input or [])})
        ours.set_output(_generation_output(data.output))
    elif kind == "response":
        response = data.response
        if response is None and data.input is None:
            ours.set_attributes({"notRecorded": NOT_RECORDED})
            return
        instructions = getattr(response, "instructions", None) if response is not None else None
        sent = SENT_INSTRUCTIONS.get()
        SENT_INSTRUCTIONS.set(None)
        if not isinstance(instructions, str) and sent is not None and sent[0] == trace_id:
            instructions = sent[1]  # what the memory filter passed on: the server did not echo it
        messages = ([{"role": "system", "content": instructions}] if isinstance(instructions, str) else [])
        raw_input = data.input
        messages += [{"role": "user", "content": raw_input}] if isinstance(raw_input, str) else list(raw_input or [])
        ours.set_input({"messages": messages})
        if response is not None:
            ours.set_attributes({"model": getattr(response, "model", None), "usage": _usage(data.usage)})
            ours.set_output({"text": getattr(response, "output_text", "") or ""})
    elif kind == "function":
        ours.set_input(_arguments(data.input))
        ours.set_attributes({"toolName": data.name})
        ours.set_output(data.output if isinstance(data.output, (str, int, float, bool, type(None))) else str(data.output))
    elif kind == "agent":
        ours.set_attributes({"tools": data.tools, "handoffs": data.handoffs})


def _to_turn_record(data: Any) -> None:
    """A model call's span ends in the task that made the call: its usage (and, when the wire hook did
    not see the body, its model and messages) go to the call the session armed (``capture``)."""
    kind = getattr(data, "type", "")
    pending = ARMED.get() if kind in ("generation", "response") else None
    if pending is None:
        return
    ARMED.set(None)  # this call is done: a later model call in this task (a nested run's) is not it
    try:
        from_span(pending, getattr(data, "model", None), getattr(data, "input", None) if kind == "generation" else None,
                  _usage(getattr(data, "usage", None)))
    except Exception:  # noqa: BLE001 - a record never fails a run
        log.warning("could not keep the SDK's %s span for the turn record", kind, exc_info=True)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _usage(usage: Any) -> dict[str, int] | None:
    if not isinstance(usage, Mapping):
        return None
    prompt = int(usage.get("input_tokens") or usage.get("prompt_tokens") or 0)
    completion = int(usage.get("output_tokens") or usage.get("completion_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _generation_output(output: Any) -> dict[str, Any]:
    text: list[str] = []
    calls: list[Any] = []
    for message in output or []:
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        if isinstance(content, str):
            text.append(content)
        calls.extend(message.get("tool_calls") or [])
    return {"text": "".join(text), "toolCalls": calls}


_PROCESSOR: MemoryStudioTraceProcessor | None = None
_PROCESSOR_LOCK = threading.Lock()


def trace_processor() -> MemoryStudioTraceProcessor:
    """The one processor of this process, added to the SDK's trace processors on first use."""
    global _PROCESSOR
    with _PROCESSOR_LOCK:
        if _PROCESSOR is None:
            _PROCESSOR = MemoryStudioTraceProcessor()
            add_trace_processor(_PROCESSOR)
        return _PROCESSOR
