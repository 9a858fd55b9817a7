"""What an agent turn sends with each model call, and reading a streamed reply.

``ModelCall`` holds a turn's resolved settings, tool choice, context-window budget and whether it
streams, and turns them into the keyword arguments of ``ChatModel.generate`` / ``stream`` for one
step of the tool loop. ``request_body_for`` says what request body those arguments make on the wire
(the turn record keeps it). ``stream_reply`` yields a streamed reply's text as ``text-delta`` events
and returns the finished ``ChatResult``.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol, runtime_checkable

from core.agent_stream import StreamEvent
from core.context_window import PromptBudget
from core.llm.base import ChatModel, ChatResult, Message, ModelError
from core.llm.settings import ModelSettings, ModelSettingsError, ToolChoice
from core.llm.wire import WIRE_FORMS, request_body
from core.prompt import AssembledPrompt

log = logging.getLogger(__name__)

__all__ = ["ModelCall", "request_body_for", "sent_settings", "stream_reply", "transport_for", "wire_form_of"]


@dataclass(frozen=True)
class ModelCall:
    """What one turn sends with every model call: settings, tool choice, window budget, streaming."""

    settings: ModelSettings
    tool_choice: ToolChoice | None
    budget: PromptBudget | None
    streaming: bool

    def model_kwargs(self, prompt: AssembledPrompt, step: int) -> dict[str, Any]:
        """The arguments of step ``step``'s model call (0: the first call of the turn)."""
        kwargs: dict[str, Any] = {"tools": prompt.tools or None}
        # Temperature and max_tokens go as the arguments every ChatModel has; the rest only when set,
        # so a model written before ``settings`` existed works until a caller uses them.
        if self.settings.temperature is not None:
            kwargs["temperature"] = self.settings.temperature
        if self.settings.max_tokens is not None:
            kwargs["max_tokens"] = self.settings.max_tokens
        if replace(self.settings, temperature=None, max_tokens=None):
            kwargs["settings"] = self.settings
        choice = self.tool_choice
        if choice is not None and choice not in ("auto", "none"):
            if not prompt.tools:
                raise ModelSettingsError(f"tool_choice {choice!r} needs a tool, but this turn offers none.")
            # Forcing a tool on every step would loop until max_steps: only the first call is forced.
            choice = choice if step == 0 else "auto"
        if choice is not None and prompt.tools:
            kwargs["tool_choice"] = choice
        return kwargs


def request_body_for(model: ChatModel, messages: list[Message], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The request body ``model.generate(messages, **kwargs)`` sends: the model's own
    ``request_body`` when it has one (a ``WireModel``: ``OpenAICompatibleModel``), else the OpenAI
    form of the same arguments under the model's name (a scripted or custom model has no wire of its own)."""
    # The same tests as ``isinstance(model, WireModel)`` / ``ServedModel`` (a runtime-checkable
    # protocol's member is present and, for a method, not None), without typing recomputing the
    # protocols' members on every check (this runs on every model call).
    wire: Callable[..., dict[str, Any]] | None = getattr(model, "request_body", None)
    if wire is not None:
        return wire(messages, **kwargs)
    settings = (kwargs.get("settings") or ModelSettings()).merged(
        ModelSettings(temperature=kwargs.get("temperature"), max_tokens=kwargs.get("max_tokens")))
    # The name a server knows it by; else model_id without its provider.
    name = getattr(model, "model", None)
    return request_body(name if isinstance(name, str) and name else model.model_id.split("/", 1)[-1], messages,
                        tools=kwargs.get("tools"), tool_choice=kwargs.get("tool_choice"), settings=settings)


def sent_settings(model: ChatModel, messages: list[Message], temperature: float | None,
                  max_tokens: int | None) -> dict[str, Any]:
    """A span's account of what a call made outside a turn (an observer, a reflector, a title) sends besides
    its messages, as the agent's own model spans say it: the settings in the request body
    (``modelSettings``: temperature, and ``max_tokens`` when capped) and the hash of the whole body
    (``requestHash``), so the Traces pane shows the call's whole request, not only its messages. Nothing
    when the body cannot be made."""
    from core.replay.record import request_hash

    try:
        body = request_body_for(model, messages, {"temperature": temperature, "max_tokens": max_tokens})
    except Exception:  # noqa: BLE001 - a span's detail never fails the call
        log.debug("could not make the request body of a call for its span", exc_info=True)
        return {}
    return {"modelSettings": {k: v for k, v in body.items() if k not in ("model", "messages", "tools", "tool_choice")},
            "requestHash": request_hash(body)}


def transport_for(model: ChatModel, streaming: bool) -> dict[str, Any]:
    """The keys besides the request body that say how the reply travels, as ``model`` sends them: the
    model's own ``transport`` (``OpenAICompatibleModel``: ``stream`` and ``stream_options``), else
    the OpenAI form (``{"stream": true}`` when streaming; nothing otherwise)."""
    own: Callable[..., dict[str, Any]] | None = getattr(model, "transport", None)
    if own is not None:
        return dict(own(streaming=streaming))
    return {"stream": True} if streaming else {}


def wire_form_of(model: ChatModel) -> str | None:
    """How ``model`` serialises a request body on the wire, when it says (``OpenAICompatibleModel``:
    ``core.llm.wire.OPENAI_PYTHON_WIRE``); None for a model whose bytes we do not know (a scripted or
    custom ``ChatModel``): Replay then shows its body as JSON, never as the bytes sent."""
    form = getattr(model, "wire_form", None)
    return form if isinstance(form, str) and form in WIRE_FORMS else None


@runtime_checkable
class _Closeable(Protocol):
    """A reply stream that holds a connection (a generator, the SDK's stream): closed when abandoned."""

    def close(self) -> None: ...


def stream_reply(model: ChatModel, messages: list[Message],
                 kwargs: dict[str, Any]) -> Generator[StreamEvent, None, ChatResult]:
    """Yield the reply's text as it arrives; return the finished result."""
    chunks = model.stream(messages, **kwargs)
    result: ChatResult | None = None
    try:
        for chunk in chunks:
            if chunk.text_delta:
                yield StreamEvent("text-delta", text=chunk.text_delta)
            if chunk.result is not None:
                result = chunk.result
    finally:
        if isinstance(chunks, _Closeable):
            chunks.close()  # an abandoned turn also closes the model's HTTP stream
    if result is None:
        raise ModelError("the reply stream ended without a final result", model_id=model.model_id,
                         hint="the model's stream() must end with a chunk that carries the result")
    return result
