"""How one of our span records reads as an OpenTelemetry span: name, kind and attributes.

Model calls, agent runs and tool calls follow OpenTelemetry's GenAI semantic conventions (the
attribute names are the constants of the installed ``opentelemetry-semantic-conventions``):

- a ``model_generation`` span is ``chat {model}`` (kind CLIENT) with ``gen_ai.operation.name``,
  ``gen_ai.provider.name`` (and the older ``gen_ai.system``, still read by several backends),
  ``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.usage.input_tokens`` /
  ``output_tokens``, ``gen_ai.response.finish_reasons``, and the messages as
  ``gen_ai.input.messages`` / ``gen_ai.output.messages`` / ``gen_ai.tool.definitions`` (JSON text in
  the conventions' parts format). Our prompt carries its system messages inside the chat history,
  so they stay in ``gen_ai.input.messages`` with role ``system``, as the conventions ask;
- an ``agent_run`` span is ``invoke_agent {agent}``; a ``tool_call`` span is ``execute_tool {tool}``;
- every span keeps what our own store has (span type, thread, resource, attributes, input, output)
  under ``memory_studio.*``, and the thread id as ``gen_ai.conversation.id``.

The record has already been redacted by the tracer: this module never sees a secret it should hide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import SpanKind

from core.traces.spans import SpanRecord, SpanType, decode_json
from core.stored_text import json_text

AttributeValue = str | bool | int | float | Sequence[str]

#: Longest JSON text kept in one attribute; longer values are cut with a marker. A 100k-token prompt
#: is ~400 KB, and a batch of such spans would pass the OTLP request limit and be dropped whole.
DEFAULT_MAX_ATTRIBUTE_CHARS = 128 * 1024
_CUT = "…[truncated by memory-studio]"

# Operation names of the conventions (the values of GenAiOperationNameValues, whose enum class is
# marked deprecated in the package while the GenAI conventions move to their own repository).
CHAT = "chat"
INVOKE_AGENT = "invoke_agent"
EXECUTE_TOOL = "execute_tool"


def describe_span(
    record: SpanRecord, *, capture_content: bool = True, max_chars: int = DEFAULT_MAX_ATTRIBUTE_CHARS
) -> tuple[str, SpanKind, dict[str, AttributeValue]]:
    """The OpenTelemetry name, kind and attributes of ``record``."""
    attrs: dict[str, AttributeValue] = {"memory_studio.span_type": record.span_type}
    for key, value in (
        ("memory_studio.thread_id", record.thread_id),
        ("memory_studio.resource_id", record.resource_id),
        ("memory_studio.run_id", record.run_id),
        ("memory_studio.entity.type", record.entity_type),
        ("memory_studio.entity.name", record.entity_name),
        (gen_ai.GEN_AI_CONVERSATION_ID, record.thread_id),
    ):
        if value:
            attrs[key] = str(value)
    own = record.attributes if isinstance(record.attributes, Mapping) else {}
    for key, value in own.items():
        if value is not None:
            attrs[f"memory_studio.attributes.{key}"] = _scalar(value, max_chars)
    # Model and tool spans carry their input and output as GenAI attributes instead.
    genai_content = record.span_type in (SpanType.MODEL_GENERATION.value, SpanType.TOOL_CALL.value)
    if capture_content:
        for key, value in (("memory_studio.input", None if genai_content else record.input),
                           ("memory_studio.output", None if genai_content else record.output),
                           ("memory_studio.metadata", record.metadata)):
            if value is not None:
                attrs[key] = _json(value, max_chars)
    if isinstance(record.error, Mapping) and record.error.get("name"):
        attrs[error_attributes.ERROR_TYPE] = str(record.error["name"])

    name, kind = record.name, SpanKind.INTERNAL
    if record.span_type == SpanType.MODEL_GENERATION.value:
        name, kind = _model_call(record, own, attrs, capture_content, max_chars), SpanKind.CLIENT
    elif record.span_type == SpanType.AGENT_RUN.value:
        name = _agent_run(record, own, attrs)
    elif record.span_type == SpanType.TOOL_CALL.value:
        name = _tool_call(record, own, attrs, capture_content, max_chars)
    return name, kind, attrs


# -- GenAI spans -----------------------------------------------------------------------------------


def _model_call(record: SpanRecord, own: Mapping[str, Any], attrs: dict[str, AttributeValue],
                capture_content: bool, max_chars: int) -> str:
    provider = str(own.get("provider") or "unknown")
    request_model = _bare_model(own.get("model"), provider) or "unknown"
    attrs[gen_ai.GEN_AI_OPERATION_NAME] = CHAT
    attrs[gen_ai.GEN_AI_PROVIDER_NAME] = provider
    attrs[gen_ai.GEN_AI_SYSTEM] = provider
    attrs[gen_ai.GEN_AI_REQUEST_MODEL] = request_model
    attrs[gen_ai.GEN_AI_RESPONSE_MODEL] = _bare_model(own.get("responseModel"), provider) or request_model
    _usage(own.get("usage"), attrs)
    finish = own.get("finishReason")
    if finish:
        attrs[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] = [str(finish)]
    if capture_content:
        data = record.input if isinstance(record.input, Mapping) else {}
        messages = data.get("messages")
        if isinstance(messages, list):
            attrs[gen_ai.GEN_AI_INPUT_MESSAGES] = _json(input_messages(messages), max_chars)
        tools = data.get("tools")
        if isinstance(tools, list) and tools:
            attrs[gen_ai.GEN_AI_TOOL_DEFINITIONS] = _json(tools, max_chars)
        if isinstance(record.output, Mapping):
            attrs[gen_ai.GEN_AI_OUTPUT_MESSAGES] = _json(output_messages(record.output, finish), max_chars)
    return f"{CHAT} {request_model}"


def _agent_run(record: SpanRecord, own: Mapping[str, Any], attrs: dict[str, AttributeValue]) -> str:
    agent = record.entity_name or record.entity_id or "agent"
    attrs[gen_ai.GEN_AI_OPERATION_NAME] = INVOKE_AGENT
    attrs[gen_ai.GEN_AI_AGENT_NAME] = agent
    if record.entity_id:
        attrs[gen_ai.GEN_AI_AGENT_ID] = record.entity_id
    _usage(own.get("usage"), attrs)
    return f"{INVOKE_AGENT} {agent}"


def _tool_call(record: SpanRecord, own: Mapping[str, Any], attrs: dict[str, AttributeValue],
               capture_content: bool, max_chars: int) -> str:
    tool = str(own.get("toolName") or record.name)
    attrs[gen_ai.GEN_AI_OPERATION_NAME] = EXECUTE_TOOL
    attrs[gen_ai.GEN_AI_TOOL_NAME] = tool
    attrs[gen_ai.GEN_AI_TOOL_TYPE] = "function"
    if own.get("toolCallId"):
        attrs[gen_ai.GEN_AI_TOOL_CALL_ID] = str(own["toolCallId"])
    if capture_content:
        if record.input is not None:
            attrs[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = _json(record.input, max_chars)
        if record.output is not None:
            attrs[gen_ai.GEN_AI_TOOL_CALL_RESULT] = _json(record.output, max_chars)
    return f"{EXECUTE_TOOL} {tool}"


def _usage(usage: Any, attrs: dict[str, AttributeValue]) -> None:
    if not isinstance(usage, Mapping):
        return
    for ours, theirs in (("prompt_tokens", gen_ai.GEN_AI_USAGE_INPUT_TOKENS),
                         ("completion_tokens", gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS)):
        value = usage.get(ours)
        if isinstance(value, int) and not isinstance(value, bool):
            attrs[theirs] = value


def _bare_model(model: Any, provider: str) -> str | None:
    """``openai/gpt-4o`` → ``gpt-4o``: our model ids carry the provider; the conventions do not."""
    if not model:
        return None
    text = str(model)
    prefix = f"{provider}/"
    return text[len(prefix):] if text.startswith(prefix) else text


# -- messages in the conventions' parts format -----------------------------------------------------


def input_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """OpenAI chat-format messages → ``[{"role", "parts": [...]}]`` of ``gen_ai.input.messages``."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        role = str(message.get("role") or "user")
        parts = _content_parts(message.get("content"))
        parts.extend(_tool_call_part(call) for call in message.get("tool_calls") or () if isinstance(call, Mapping))
        if role == "tool":
            parts = [{"type": "tool_call_response", "id": message.get("tool_call_id"),
                      "response": decode_json(message.get("content"))}]
        entry: dict[str, Any] = {"role": role, "parts": parts}
        if message.get("name"):
            entry["name"] = message["name"]
        out.append(entry)
    return out


def output_messages(output: Mapping[str, Any], finish_reason: Any) -> list[dict[str, Any]]:
    """Our ``{"text", "toolCalls"}`` model output → ``gen_ai.output.messages``."""
    parts = _content_parts(output.get("text"))
    parts.extend(_tool_call_part(call) for call in output.get("toolCalls") or () if isinstance(call, Mapping))
    return [{"role": "assistant", "parts": parts, "finish_reason": str(finish_reason or "stop")}]


def _tool_call_part(call: Mapping[str, Any]) -> dict[str, Any]:
    fn = call.get("function")
    fn = fn if isinstance(fn, Mapping) else {}
    return {"type": "tool_call", "id": call.get("id"), "name": fn.get("name"),
            "arguments": decode_json(fn.get("arguments"))}


def _content_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "content": content}] if content else []
    parts: list[dict[str, Any]] = []
    for item in content if isinstance(content, list) else ():
        if isinstance(item, Mapping) and item.get("type") == "text":
            parts.append({"type": "text", "content": item.get("text", "")})
        elif isinstance(item, Mapping):
            parts.append({"type": str(item.get("type") or "unknown"), "content": decode_json(item)})
    return parts


# -- values ----------------------------------------------------------------------------------------


def _json(value: Any, max_chars: int) -> str:
    text = json_text(value, ensure_ascii=False, default=str)
    return text if len(text) <= max_chars else text[:max_chars] + _CUT


def _scalar(value: Any, max_chars: int) -> AttributeValue:
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return value if len(value) <= max_chars else value[:max_chars] + _CUT
    return _json(value, max_chars)
