"""Translation between OpenAI chat-completions JSON and ``ChatResult``, in both directions.

The client parses with the same functions the loopback server uses to write, so a reply
that survives a round trip through here is exactly what the engine sees. Parsing works on
plain dicts, not SDK types, because local servers add and omit fields freely.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from core.stored_text import finite_json, json_text
from core.llm.base import (
    ChatChunk,
    ChatResult,
    ToolCall,
    ToolCallAssembler,
    ToolCallDelta,
    Usage,
    split_text,
)


def completion_text(content: Any) -> str:
    """The text of a reply's ``content``: a string, or (some servers) a list of parts, concatenated."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def result_from_completion(data: dict[str, Any], *, model_id: str) -> ChatResult:
    """Parse a non-streaming ``chat.completion`` response body."""
    choices = data.get("choices") or []
    choice = choices[0] if choices else {}
    message = choice.get("message") or {}
    calls = []
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        raw = function.get("arguments")
        if not isinstance(raw, str):
            # Ollama's native API sends arguments as an object; normalise to text.
            raw = "" if raw is None else _json_dumps(raw)
        calls.append(ToolCall.from_raw(call.get("id") or f"call_{index}",
                                       function.get("name") or "", raw))
    finish = choice.get("finish_reason") or ("tool_calls" if calls else "stop")
    return ChatResult(text=completion_text(message.get("content")), tool_calls=tuple(calls),
                      usage=Usage.from_dict(data.get("usage")), finish_reason=finish,
                      model_id=model_id, raw=data)


def _json_dumps(value: Any) -> str:
    return json_text(value, ensure_ascii=False)


class StreamAssembler:
    """Turns ``chat.completion.chunk`` dicts into ``ChatChunk``s and, at the end, a result."""

    def __init__(self, *, model_id: str) -> None:
        self._model_id = model_id
        self._text: list[str] = []
        self._tools = ToolCallAssembler()
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._first: dict[str, Any] = {}
        self.chunk_count = 0

    def feed(self, data: dict[str, Any]) -> ChatChunk | None:
        """Absorb one chunk; return the deltas it carried, or None if it carried none."""
        self.chunk_count += 1
        if not self._first:
            self._first = {k: data[k] for k in ("id", "model", "created") if k in data}
        if data.get("usage"):
            self._usage = data["usage"]
        text = ""
        deltas: list[ToolCallDelta] = []
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or {}
            text += completion_text(delta.get("content"))
            for position, call in enumerate(delta.get("tool_calls") or []):
                function = call.get("function") or {}
                arguments = function.get("arguments")
                if arguments is not None and not isinstance(arguments, str):
                    arguments = _json_dumps(arguments)
                deltas.append(ToolCallDelta(index=int(call.get("index", position)),
                                            id=call.get("id"), name=function.get("name"),
                                            arguments_delta=arguments or ""))
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        for delta_ in deltas:
            self._tools.add(delta_)
        if text:
            self._text.append(text)
        if not text and not deltas:
            return None
        return ChatChunk(text_delta=text, tool_call_deltas=tuple(deltas))

    @property
    def finished(self) -> bool:
        """Whether a chunk said why the reply ended. Every server we target sends ``finish_reason``
        before ``[DONE]`` (which the SDK swallows), so a stream without it was cut short."""
        return self._finish is not None

    def result(self) -> ChatResult:
        calls = self._tools.tool_calls()
        text = "".join(self._text)
        finish = self._finish or ("tool_calls" if calls else "stop")
        provisional = ChatResult(text=text, tool_calls=calls, usage=Usage.from_dict(self._usage),
                                 finish_reason=finish, model_id=self._model_id)
        # Shape the trace record like a non-streamed completion so traces read the same.
        raw = completion_from_result(provisional, model=str(self._first.get("model", "")),
                                     completion_id=str(self._first.get("id", "")))
        raw["streamed_chunks"] = self.chunk_count
        return ChatResult(text=text, tool_calls=calls, usage=provisional.usage,
                          finish_reason=finish, model_id=self._model_id, raw=raw)


def completion_from_result(result: ChatResult, *, model: str, completion_id: str,
                           created: int = 0) -> dict[str, Any]:
    """Write a ``chat.completion`` body for ``result`` (what an OpenAI server returns)."""
    message: dict[str, Any] = {"role": "assistant",
                               "content": result.text if result.text or not result.tool_calls else None}
    if result.tool_calls:
        message["tool_calls"] = [call.to_message_dict() for call in result.tool_calls]
    body: dict[str, Any] = {
        "id": completion_id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": result.finish_reason}],
    }
    if result.usage is not None:
        body["usage"] = result.usage.to_dict()
    return body


def stream_chunks_from_result(result: ChatResult, *, model: str, completion_id: str,
                              include_usage: bool, created: int = 0) -> list[dict[str, Any]]:
    """Write the ``chat.completion.chunk`` sequence an OpenAI server would stream."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": completion_id, "object": "chat.completion.chunk", "created": created,
                "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in split_text(result.text, 3)]
    for index, call in enumerate(result.tool_calls):
        chunks.append(chunk({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                                             "function": {"name": call.name, "arguments": ""}}]}))
        for piece in split_text(call.raw_arguments, 2):
            chunks.append(chunk({"tool_calls": [{"index": index,
                                                 "function": {"arguments": piece}}]}))
    chunks.append(chunk({}, result.finish_reason))
    if include_usage and result.usage is not None:
        chunks.append({"id": completion_id, "object": "chat.completion.chunk", "created": created,
                       "model": model, "choices": [], "usage": result.usage.to_dict()})
    return chunks


#: Keys of a chat-completions body that only say how the reply travels, not what the model is asked.
TRANSPORT_KEYS = ("stream", "stream_options")


def request_body(model: str, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                 tool_choice: Any = None, settings: Any = None) -> dict[str, Any]:
    """The JSON body of a ``/chat/completions`` request as an OpenAI-compatible server receives it
    (``stream`` and ``stream_options`` left out): the model's name, the messages, the tools and the
    tool choice (only with tools), and every setting that is set (``ModelSettings``: sampling
    settings by their wire names, ``top_k`` at the top level as local servers read it, and
    ``response_format``). ``OpenAICompatibleModel`` sends exactly this; a turn record keeps it.

    A float that is not finite (NaN, Infinity: in a tool's schema, a response format) is ``null``, as
    ``core.stored_text.json_text`` writes it: the client refuses to send such a float (a body with a bare
    ``NaN`` is not JSON), and the rows a turn's rebuild reads hold ``null`` there too."""
    body: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        body["tools"] = tools
        if tool_choice is not None:
            body["tool_choice"] = tool_choice
    if settings is not None:
        body.update(settings.to_dict())
    return finite_json(body)  # type: ignore[no-any-return]


def without_transport(body: dict[str, Any]) -> dict[str, Any]:
    """A request body without the keys that only say how the reply travels (``TRANSPORT_KEYS``)."""
    return {k: v for k, v in body.items() if k not in TRANSPORT_KEYS}


#: How ``OpenAICompatibleModel`` puts a body on the wire, as a turn record names it (``TurnRecord.wire``):
#: the ``openai`` client (``chat.completions.create``) orders the body's keys by its own parameter list
#: (``SDK_KEY_ORDER``), adds what goes as ``extra_body`` (``top_k``) after them, and serialises with
#: ``json.dumps(ensure_ascii=False, separators=(",", ":"), allow_nan=False)`` in UTF-8
#: (``openai._utils._json.openapi_dumps``); nested objects keep their keys in the order given.
#: ``wire_bytes`` makes the same bytes from a recorded body; the loopback tests prove them equal to
#: what the server received. A new serialisation gets a new name; records without one are shown as JSON.
OPENAI_PYTHON_WIRE = "openai-python-1"
WIRE_FORMS = (OPENAI_PYTHON_WIRE,)
SDK_KEY_ORDER = (
    "model", "stream", "service_tier", "messages", "audio", "frequency_penalty", "function_call", "functions",
    "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata", "modalities", "moderation", "n",
    "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key", "prompt_cache_options",
    "prompt_cache_retention", "reasoning_effort", "response_format", "safety_identifier", "seed", "stop", "store",
    "stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity",
    "web_search_options",
)


def wire_bytes(body: Mapping[str, Any], transport: Mapping[str, Any] | None = None,
               form: str = OPENAI_PYTHON_WIRE) -> bytes:
    """The exact bytes of ``body`` (with ``transport``'s ``stream`` / ``stream_options``) as ``form``
    sends it (``OPENAI_PYTHON_WIRE``: see there). Keys the client has no parameter for go last, in the
    body's order (the client merges ``extra_body`` after its own)."""
    if form != OPENAI_PYTHON_WIRE:
        raise ValueError(f"unknown wire form {form!r} (known: {', '.join(WIRE_FORMS)})")
    whole = {**body, **(transport or {})}
    known = set(SDK_KEY_ORDER)
    ordered = {k: whole[k] for k in SDK_KEY_ORDER if k in whole}
    ordered.update((k, v) for k, v in whole.items() if k not in known)
    return json.dumps(ordered, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
