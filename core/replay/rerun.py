"""Re-running a turn's model call: send the recorded request again (or a what-if's) and report the reply.

By default a re-run sends what the record says the call sent: the messages, the tool definitions
offered (a tool whose function is not available here is offered with its recorded definition all the
same: nothing runs), the tool choice and every setting. The caller may change settings and the tool
choice (``model_settings``, ``tool_choice``); the model is whichever ``ChatModel`` it passes. The
result says which of these differ from the original request, and carries the usage the server
reported for the original call and for the re-run. Tool calls in the reply are reported, never run,
and nothing is written.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from core.errors import MemoryStudioError
from core.llm.settings import ModelSettings, ModelSettingsError
from core.model_call import ModelCall, request_body_for
from core.replay.capture import endpoint_of, model_label

if TYPE_CHECKING:  # pragma: no cover
    from core.llm.base import ChatModel, Message
    from core.prompt import AssembledPrompt
    from core.replay.record import CallReplay

SETTINGS = tuple(f for f in ModelSettings.__dataclass_fields__) + ("timeout",)
_NOT_SETTINGS = ("model", "messages", "tools", "tool_choice")
KEEP = object()  # ``tool_choice=KEEP``: send the recorded tool choice


class RerunError(MemoryStudioError, ValueError):
    """A re-run was asked in a way that cannot work; the message says what to change."""


@dataclass(frozen=True)
class RerunResult:
    """The new reply: its text, token figures (the server's usage, else our estimates), wall time,
    which model answered, and the raw assistant message (with any tool calls it asked for, never
    run). ``request``: the body sent; ``original``: the recorded one (None: not recorded);
    ``differences``: (what, original, re-run) for the model, endpoint, each setting, the tool choice
    and the tools; ``usage`` / ``original_usage``: what the servers reported (None: nothing)."""

    text: str
    tokens_in: int
    tokens_out: int
    latency_ms: float
    model: str | None
    message: "Message"
    usage_estimated: bool = False
    request: dict[str, Any] = field(default_factory=dict)
    original: dict[str, Any] | None = None
    differences: tuple[tuple[str, str, str], ...] = ()
    usage: dict[str, int] | None = None
    original_usage: dict[str, int] | None = None
    endpoint: str | None = None
    original_endpoint: str | None = None
    estimated_tokens: int = 0  # our o200k count of the prompt sent

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls the reply asked for (``{"name", "arguments"}``): shown, never run."""
        out = []
        for call in self.message.get("tool_calls") or ():
            function = call.get("function") or {}
            out.append({"name": function.get("name"), "arguments": function.get("arguments")})
        return out


def recorded_call(prompt: "AssembledPrompt", index: int = 0) -> "CallReplay | None":
    """Call ``index`` of a rebuilt turn (None for a prompt that is not a rebuild)."""
    calls = prompt.replay.calls if prompt.replay is not None else ()
    return calls[index] if 0 <= index < len(calls) else None


def rerun(prompt: "AssembledPrompt", model: "ChatModel", *, model_settings: Mapping[str, Any] | None = None,
          tool_choice: Any = KEEP, call: int = 0, settings: Mapping[str, Any] | None = None) -> RerunResult:
    """Send model call ``call`` of a rebuilt (or what-if) turn to ``model``: its messages and tools with
    the recorded settings and tool choice, changed by ``model_settings`` (any ``ModelSettings`` name,
    and ``timeout``) and ``tool_choice`` (None: send none). ``settings``: every setting to send instead
    of the recorded ones (an editor that may also remove one). Nothing is run or saved."""
    overrides = dict(model_settings or {})
    timeout = overrides.pop("timeout", None)
    try:
        changes = ModelSettings.parse(overrides)
        replacing = ModelSettings.parse(settings) if settings is not None else None
    except ModelSettingsError as exc:
        raise RerunError(f"{exc} Use {', '.join(SETTINGS)}.") from None
    replay = recorded_call(prompt, call)
    sent_prompt = replay.prompt if replay is not None else prompt
    original = dict(replay.request) if replay is not None else (dict(prompt.request) if prompt.request else None)
    recorded = replay.record is not None if replay is not None else False
    base = _recorded_settings(original) if recorded and original is not None else ModelSettings()
    wire = (replacing if replacing is not None else base).merged(changes)
    choice = (original or {}).get("tool_choice") if tool_choice is KEEP else tool_choice
    try:  # the agent's own rule for a call's arguments (a forced tool choice goes out as it did: step 0)
        kwargs = ModelCall(wire, choice, None, False).model_kwargs(sent_prompt, 0)
    except ModelSettingsError as exc:
        raise RerunError(str(exc)) from None
    request = request_body_for(model, list(sent_prompt.messages), kwargs)
    start = time.perf_counter()
    result = model.generate(list(sent_prompt.messages), **({"timeout": timeout} if timeout is not None else {}),
                            **kwargs)
    latency = (time.perf_counter() - start) * 1000.0
    estimated = result.usage is None
    if result.usage is not None:
        tokens_in, tokens_out = result.usage.prompt_tokens, result.usage.completion_tokens
    else:
        from core.tokens import default_tokenizer

        tokens_in, tokens_out = sent_prompt.total_tokens, default_tokenizer().count(result.text or "")
    record = prompt.replay.record if prompt.replay is not None else None
    endpoint = endpoint_of(model)
    original_endpoint = record.endpoint if record is not None else None
    found = differences(original if recorded else None, request, original_endpoint, endpoint)
    if recorded and record is not None and record.transport:
        # A re-run asks for the whole reply at once; the recorded call streamed it.
        found += tuple((k.replace("_", " "), _show(v), "—") for k, v in record.transport.items())
    return RerunResult(
        result.text or "", int(tokens_in), int(tokens_out), latency, model_label(model),
        result.to_assistant_message(), estimated, request, original if recorded else None, found,
        result.usage.to_dict() if result.usage is not None else None,
        replay.usage if replay is not None else None, endpoint, original_endpoint, int(sent_prompt.total_tokens))


def _recorded_settings(body: Mapping[str, Any]) -> ModelSettings:
    known = set(ModelSettings.__dataclass_fields__)
    return ModelSettings.parse({k: v for k, v in body.items() if k in known})


def _show(value: Any) -> str:
    if value is None:
        return "—"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def differences(original: Mapping[str, Any] | None, sent: Mapping[str, Any], original_endpoint: str | None,
                endpoint: str | None) -> tuple[tuple[str, str, str], ...]:
    """(what, original, re-run) for each part of the request outside its messages that differs: the
    model, the endpoint, each setting, the tool choice and the tools offered. Without a recorded
    request, every part is listed against "not recorded"."""
    if original is None:
        rows = [("model", "not recorded", _show(sent.get("model"))), ("endpoint", "not recorded", _show(endpoint))]
        rows += [(k, "not recorded", _show(v)) for k, v in sent.items() if k not in _NOT_SETTINGS]
        return tuple(rows)
    out: list[tuple[str, str, str]] = []
    if original.get("model") != sent.get("model"):
        out.append(("model", _show(original.get("model")), _show(sent.get("model"))))
    if (original_endpoint or None) != (endpoint or None):
        out.append(("endpoint", _show(original_endpoint), _show(endpoint)))
    keys = [k for k in dict.fromkeys([*original, *sent]) if k not in ("model", "messages", "tools")]
    for key in keys:
        if original.get(key) != sent.get(key):
            out.append((key.replace("_", " "), _show(original.get(key)), _show(sent.get(key))))
    names = [_tool_names(original.get("tools")), _tool_names(sent.get("tools"))]
    if original.get("tools") != sent.get("tools"):
        out.append(("tools", names[0] or "none", names[1] or "none"))
    return tuple(out)


def _tool_names(tools: Any) -> str:
    return ", ".join(str((t.get("function") or {}).get("name", "?")) for t in tools or () if isinstance(t, Mapping))


__all__ = ["KEEP", "RerunError", "RerunResult", "SETTINGS", "differences", "recorded_call", "rerun"]
