"""A chat model that replays a script: the offline stand-in for tests and the demo.

It is never mistaken for a real model: its ``model_id`` is ``scripted/<name>``, its
``provider`` is ``"scripted"`` and ``describe()`` says so, so a trace or a Studio pane that
shows it tells the user no language model was involved.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from core.llm.base import (
    ChatChunk,
    ChatResult,
    Message,
    ModelError,
    ScriptExhaustedError,
    ToolCall,
    ToolSpec,
    Usage,
    chunks_from_result,
)
from core.llm.settings import ModelSettings, ToolChoice


@dataclass(frozen=True)
class ScriptedReply:
    """One scripted assistant turn: text, tool calls, or both.

    ``usage`` defaults to a deterministic estimate (about four characters per token) so
    token displays have numbers to show; give it explicitly to test exact figures.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    finish_reason: str | None = None


#: A script entry: a plain text reply, a ``ScriptedReply``, a finished ``ChatResult``, or an
#: exception instance to raise (to script a provider failure).
ScriptStep = Union[str, dict[str, Any], ScriptedReply, ChatResult, BaseException]  # noqa: UP007 (runtime alias)
#: Computes a reply from the request, for demo scripts that react to what they are sent.
Responder = Callable[[list[Message], Union[list[ToolSpec], None]], ScriptStep]


def tool_call(name: str, arguments: dict[str, Any] | str | None = None, *, id: str = "") -> ToolCall:
    """Build a scripted tool call. Pass a string to script raw (even malformed) arguments.

    An empty ``id`` is filled in on replay with a stable ``call_<request>_<index>``.
    """
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return ToolCall.from_raw(id, name, raw)


def reply_from_dict(step: dict[str, Any], number: int = 0, model_id: str = "scripted") -> ScriptedReply:
    """A script entry written as plain data (handy in JSON demo scripts):
    ``{"text": "...", "tool_calls": [{"name": "...", "arguments": {...}, "id": "..."}]}``."""
    unknown = set(step) - {"text", "content", "tool_calls", "finish_reason"}
    if unknown:
        raise ModelError(f"script entry #{number} has unknown keys {sorted(unknown)}", model_id=model_id,
                         hint="use text, tool_calls and finish_reason")
    calls = []
    for raw in step.get("tool_calls") or ():
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise ModelError(f"script entry #{number} has a tool call without a name", model_id=model_id,
                             hint='write tool calls as {"name": ..., "arguments": {...}}')
        args = raw.get("arguments", raw.get("args"))
        calls.append(tool_call(raw["name"], args, id=str(raw.get("id") or "")))
    text = step.get("text", step.get("content")) or ""
    return ScriptedReply(text=str(text), tool_calls=tuple(calls), finish_reason=step.get("finish_reason"))


@dataclass(frozen=True)
class ScriptedRequest:
    """What the scripted model was asked, exactly, so tests can assert on the prompt.

    ``temperature`` / ``max_tokens`` are the effective values (explicit, else from ``settings``);
    ``settings`` holds every setting that was set, by name; ``tool_choice`` is the wire form.
    """

    messages: list[Message]
    tools: list[ToolSpec] | None
    temperature: float | None
    max_tokens: int | None
    stream: bool
    settings: dict[str, Any] = field(default_factory=dict)
    tool_choice: ToolChoice | None = None


def _settings(settings: ModelSettings | None, temperature: float | None, max_tokens: int | None) -> ModelSettings:
    return (settings or ModelSettings()).merged(ModelSettings(temperature=temperature, max_tokens=max_tokens))


def estimate_tokens(text: str) -> int:
    return 0 if not text else max(1, -(-len(text) // 4))


def prompt_estimate(messages: list[Message], tools: list[ToolSpec] | None) -> int:
    """The prompt tokens a scripted model reports for a request (its usage): ``estimate_tokens`` of the
    messages' text, their tool calls and the tools' definitions."""
    return estimate_tokens(_prompt_text(messages, tools))


def _prompt_text(messages: list[Message], tools: list[ToolSpec] | None) -> str:
    parts = [str(m.get("content") or "") for m in messages]
    parts += [json.dumps(m.get("tool_calls")) for m in messages if m.get("tool_calls")]
    if tools:
        parts.append(json.dumps(tools))
    return "".join(parts)


@dataclass(repr=False, eq=False)
class ScriptedModel:
    """Replays ``script`` one entry per request, or asks ``script`` if it is a callable."""

    script: Sequence[ScriptStep] | Responder
    name: str = "demo"
    #: The context window (tokens) to behave as; None: unknown. The agent fits prompts into it.
    context_window: int | None = None
    requests: list[ScriptedRequest] = field(default_factory=list, init=False)
    _position: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    provider: str = field(default="scripted", init=False)

    @property
    def model_id(self) -> str:
        return f"scripted/{self.name}"

    @property
    def remaining(self) -> int | None:
        """Replies left in a list script; None for a responder callable."""
        if callable(self.script):
            return None
        return len(self.script) - self._position

    def __repr__(self) -> str:
        return f"ScriptedModel(model_id={self.model_id!r}, remaining={self.remaining!r})"

    def describe(self) -> dict[str, Any]:
        info = {"provider": self.provider, "model": self.name, "model_id": self.model_id,
                "scripted": True, "remaining": self.remaining,
                "note": "Scripted stand-in: replays pre-written replies; no language model is called."}
        if self.context_window is not None:
            info["context_window"] = self.context_window
        return info

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
        return self._next(messages, tools, _settings(settings, temperature, max_tokens), tool_choice, stream=False)

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
    ) -> Iterator[ChatChunk]:
        # Take the reply now, not on first iteration, so the request is recorded (and an
        # exhausted script raises) at call time, as with a real client.
        result = self._next(messages, tools, _settings(settings, temperature, max_tokens), tool_choice, stream=True)
        return chunks_from_result(result)

    def _next(self, messages: list[Message], tools: list[ToolSpec] | None, settings: ModelSettings,
              tool_choice: ToolChoice | None, *, stream: bool) -> ChatResult:
        with self._lock:
            request = ScriptedRequest(copy.deepcopy(messages), copy.deepcopy(tools),
                                      settings.temperature, settings.max_tokens, stream,
                                      settings.to_dict(), copy.deepcopy(tool_choice))
            self.requests.append(request)
            number = len(self.requests)
            if callable(self.script):
                step = self.script(request.messages, request.tools)
            else:
                if self._position >= len(self.script):
                    raise ScriptExhaustedError(
                        f"the script has {len(self.script)} replies and request #{number} "
                        "asked for another",
                        model_id=self.model_id,
                        hint="add replies to the script, or pass a responder callable",
                    )
                step = self.script[self._position]
                self._position += 1
        return self._to_result(step, messages, tools, number)

    def _to_result(self, step: ScriptStep, messages: list[Message], tools: list[ToolSpec] | None,
                   number: int) -> ChatResult:
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, ChatResult):
            return step
        if isinstance(step, str):
            reply: Any = ScriptedReply(text=step)
        elif isinstance(step, dict):
            reply = reply_from_dict(step, number, self.model_id)
        else:
            reply = step
        if not isinstance(reply, ScriptedReply):
            raise ModelError(f"script entry #{number} is a {type(step).__name__}",
                             model_id=self.model_id,
                             hint="script entries must be str, dict, ScriptedReply, ChatResult or an exception")
        calls = tuple(
            call if call.id else ToolCall(f"call_{number}_{i}", call.name, call.arguments,
                                          call.raw_arguments, call.arguments_error)
            for i, call in enumerate(reply.tool_calls)
        )
        usage = reply.usage
        if usage is None:
            prompt = prompt_estimate(messages, tools)
            completion = estimate_tokens(reply.text + "".join(c.raw_arguments for c in calls))
            usage = Usage(prompt, completion, prompt + completion)
        finish = reply.finish_reason or ("tool_calls" if calls else "stop")
        return ChatResult(text=reply.text, tool_calls=calls, usage=usage, finish_reason=finish,
                          model_id=self.model_id, raw=None)
