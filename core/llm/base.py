"""The chat-model interface the engine talks to, and the values that cross it.

Everything here is plain data: messages and tools travel as OpenAI chat-format dicts
because that is the one format every provider we target (OpenAI, Ollama, LM Studio,
vLLM, llama.cpp) accepts, so the engine never needs a per-provider translation layer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from core.errors import MemoryStudioError
from core.json_kind import json_kind
from core.llm.settings import ModelSettings, ToolChoice

#: One OpenAI chat-format message: ``{"role", "content", "tool_calls"?, "tool_call_id"?, "name"?}``.
Message = dict[str, Any]
#: One OpenAI tool definition: ``{"type": "function", "function": {"name", "description", "parameters"}}``.
ToolSpec = dict[str, Any]

#: How the hint of a ``ModelError`` for a prompt longer than the server's context begins
#: (``OpenAICompatibleModel`` recognises llama.cpp's, vLLM's and OpenAI's overflow errors).
CONTEXT_OVERFLOW_HINT = "the prompt and reply do not fit"


class ModelError(MemoryStudioError):
    """The one exception a chat model raises.

    The message always says which endpoint failed, with what status, and what to do, so a
    user reading it in the Studio can act without a stack trace. It never contains an API key.
    """

    def __init__(
        self,
        detail: str,
        *,
        model_id: str,
        endpoint: str | None = None,
        status: int | None = None,
        hint: str = "",
        attempts: int = 1,
        retryable: bool = False,
        method: str = "POST",
    ) -> None:
        self.detail = detail
        self.method = method
        self.model_id = model_id
        self.endpoint = endpoint
        self.status = status
        self.hint = hint
        self.attempts = attempts
        self.retryable = retryable
        super().__init__(self._compose())

    @property
    def without_hint(self) -> str:
        """The message without its hint (``str(error)`` is this, then " — " and the hint when there is one): for a
        caller that says what to do in words of its own."""
        return self._compose(hint=False)

    def with_hint(self, hint: str) -> "ModelError":
        """A copy of this error, of its own class, that says ``hint`` as what to do instead of its hint (a
        caller that knows better advice for where the call came from); the original is left as it was."""
        copy = type(self).__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy.hint = hint
        copy.args = (copy._compose(),)
        return copy

    def _compose(self, *, hint: bool = True) -> str:
        text = f"{self.model_id}: "
        if self.endpoint:
            text += f"{self.method} {self.endpoint} failed"
            if self.status is not None:
                text += f" with HTTP {self.status}"
            if self.attempts > 1:
                text += f" after {self.attempts} attempts"
            text += ": "
        text += self.detail
        if hint and self.hint:
            text += f" — {self.hint}"
        return text


class ScriptExhaustedError(ModelError):
    """A scripted stand-in was asked for more replies than its script holds."""


@dataclass(frozen=True)
class ToolCall:
    """A tool call requested by the model.

    ``arguments`` is the parsed JSON object. Models do emit invalid JSON; rather than crash,
    ``arguments`` is then ``{}``, ``raw_arguments`` keeps the exact text and
    ``arguments_error`` says what was wrong, so the agent runtime can send that back to the
    model as the tool result and let it try again.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str
    arguments_error: str | None = None

    @property
    def arguments_valid(self) -> bool:
        return self.arguments_error is None

    @classmethod
    def from_raw(cls, id: str, name: str, raw_arguments: str) -> ToolCall:
        arguments, error = parse_tool_arguments(raw_arguments)
        return cls(id=id, name=name, arguments=arguments, raw_arguments=raw_arguments,
                   arguments_error=error)

    def to_message_dict(self) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` entry, echoing the raw text the model produced."""
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.raw_arguments}}


def parse_tool_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """Parse a model's tool-call argument text; never raises."""
    if raw.strip() == "":
        # Several local servers send "" for a call without parameters.
        return {}, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"tool arguments are not valid JSON ({exc.msg} at position {exc.pos})"
    if not isinstance(value, dict):
        return {}, f"tool arguments must be a JSON object of argument names and values, not {json_kind(value)}"
    return value, None


def _count(value: Any) -> int:
    """A token count a server reported: a number that is not finite (Python's parser takes ``NaN`` and
    ``Infinity`` from a reply; ``int()`` of them raised and ended the turn) counts as not reported (0)."""
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return int(value or 0)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage | None:
        if not data:
            return None
        prompt = _count(data.get("prompt_tokens"))
        completion = _count(data.get("completion_tokens"))
        total = _count(data.get("total_tokens")) or prompt + completion
        return cls(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total)

    def to_dict(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.total_tokens}


@dataclass(frozen=True)
class ChatResult:
    """One complete assistant turn."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    finish_reason: str = "stop"
    model_id: str = ""
    #: The provider's response as JSON-compatible dicts (for traces); None for scripted replies.
    raw: dict[str, Any] | None = None
    #: The request body's bytes exactly as the model's HTTP client sent them (``OpenAICompatibleModel``
    #: reads them with a request hook); None: not known (a scripted or custom model). A turn record keeps
    #: a call's bytes hash only when its reproduction of the body's bytes equals these.
    sent: bytes | None = field(default=None, repr=False, compare=False)

    def to_assistant_message(self) -> Message:
        """The assistant message to append to the conversation before sending tool results."""
        message: Message = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = [call.to_message_dict() for call in self.tool_calls]
        return message


@dataclass(frozen=True)
class ToolCallDelta:
    """A fragment of a tool call as it streams in; ``index`` ties fragments together."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments_delta: str = ""


@dataclass(frozen=True)
class ChatChunk:
    """One streaming event. Exactly the last chunk of a stream carries ``result``."""

    text_delta: str = ""
    tool_call_deltas: tuple[ToolCallDelta, ...] = ()
    result: ChatResult | None = None


@runtime_checkable
class ChatModel(Protocol):
    """What the engine needs from a chat model; swap implementations, never monkeypatch."""

    @property
    def model_id(self) -> str:
        """``provider/model``; ``scripted/<name>`` for stand-ins, so they are never mistaken."""
        ...

    @property
    def provider(self) -> str: ...

    def generate(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        settings: ModelSettings | None = None,
        tool_choice: ToolChoice | None = None,
    ) -> ChatResult:
        """One reply. ``settings``: further sampling settings (explicit ``temperature`` /
        ``max_tokens`` win over theirs); ``tool_choice``: OpenAI's wire form. The agent passes
        ``settings`` and ``tool_choice`` only when the caller set them, so a model written before
        they existed keeps working until they are used. A model may also say its context window
        (``WindowedModel``): the agent then fits every prompt into it."""
        ...

    def stream(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        settings: ModelSettings | None = None,
        tool_choice: ToolChoice | None = None,
    ) -> Iterator[ChatChunk]: ...

    def describe(self) -> dict[str, Any]:
        """Identity safe to show, log and store in traces: never a secret."""
        ...


# What a chat model may offer beyond ``ChatModel``: each its own protocol, checked with ``isinstance``
# (a model written without them keeps working).
@runtime_checkable
class WindowedModel(Protocol):
    """A chat model that says its context window in tokens (None: unknown); the agent then fits
    every prompt into it (``core.context_window``)."""

    context_window: int | None


@runtime_checkable
class WireModel(Protocol):
    """A chat model that speaks the OpenAI wire itself (``OpenAICompatibleModel``) and says the
    request body a ``generate`` call with these arguments sends (what a turn record keeps)."""

    def request_body(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        settings: ModelSettings | None = None,
        tool_choice: ToolChoice | None = None,
    ) -> dict[str, Any]: ...


@runtime_checkable
class StoppableModel(Protocol):
    """A chat model whose background call stops when a turn's call to the same server cancels it
    (``core.llm.yielding``): its ``generate`` hands ``current_call()`` the connection it sends on
    (``attach``) or a way to stop (``on_cancel``), and ends in ``CallYielded`` (or any error) when
    stopped. ``OpenAICompatibleModel`` is one. A model that does not say so is stopped only once its
    call has handed over a connection or a stop."""

    stops_background_calls: bool


@runtime_checkable
class ServedModel(Protocol):
    """A chat model that knows the name its server calls it by (``model``, without the provider)."""

    model: str


@dataclass
class ToolCallAssembler:
    """Joins streamed tool-call fragments into complete ``ToolCall`` values."""

    _parts: dict[int, dict[str, str]] = field(default_factory=dict)

    def add(self, delta: ToolCallDelta) -> None:
        part = self._parts.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
        if delta.id:
            part["id"] = delta.id
        if delta.name:
            # Servers send the name once; a few repeat it per fragment, so don't concatenate.
            part["name"] = delta.name
        part["arguments"] += delta.arguments_delta

    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(
            ToolCall.from_raw(part["id"] or f"call_{index}", part["name"], part["arguments"])
            for index, part in sorted(self._parts.items())
        )


def chunks_from_result(result: ChatResult, *, pieces: int = 3) -> Iterator[ChatChunk]:
    """Replay a finished result as a stream, split the way a server would split it.

    Used by stand-ins so stream consumers meet real fragmentation (several text deltas,
    tool arguments in more than one piece) rather than a single convenient blob.
    """
    for piece in split_text(result.text, pieces):
        yield ChatChunk(text_delta=piece)
    for index, call in enumerate(result.tool_calls):
        yield ChatChunk(tool_call_deltas=(ToolCallDelta(index=index, id=call.id, name=call.name),))
        for piece in split_text(call.raw_arguments, 2):
            yield ChatChunk(tool_call_deltas=(ToolCallDelta(index=index, arguments_delta=piece),))
    yield ChatChunk(result=result)


def split_text(text: str, pieces: int) -> list[str]:
    """Split ``text`` into at most ``pieces`` non-empty consecutive parts."""
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, pieces)))
    return [text[i:i + size] for i in range(0, len(text), size)]
