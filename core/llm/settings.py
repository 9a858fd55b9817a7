"""Model settings and tool choice: how a reply is sampled and whether the model must call a tool.

``ModelSettings.parse`` takes the dict a caller writes, in our names (``max_tokens``, ``top_p``) or
Mastra's ``modelSettings`` names (``maxTokens``/``maxOutputTokens``, ``topP``, ``stopSequences``,
...), and refuses unknown keys and bad values with a message naming what is allowed.
``parse_tool_choice`` takes ``"auto"``, ``"none"``, ``"required"`` or a named tool written as
``{"name": ...}``, Mastra's ``{"type": "tool", "toolName": ...}`` or OpenAI's
``{"type": "function", "function": {"name": ...}}``, and returns the OpenAI wire form that chat
models receive.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Union

from core.errors import MemoryStudioError

__all__ = ["ModelSettings", "ModelSettingsError", "ToolChoice", "parse_tool_choice", "tool_choice_name"]

#: A tool choice as chat models receive it: ``"auto" | "none" | "required"`` or
#: ``{"type": "function", "function": {"name": ...}}``.
ToolChoice = Union[str, dict[str, Any]]  # noqa: UP007 (runtime alias)


class ModelSettingsError(MemoryStudioError, ValueError):
    """A model setting or tool choice is unknown or has an invalid value; the message says which."""


_ALIASES = {
    "max_tokens": "max_tokens", "maxTokens": "max_tokens", "maxOutputTokens": "max_tokens",
    "max_output_tokens": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p", "topP": "top_p",
    "top_k": "top_k", "topK": "top_k",
    "stop": "stop", "stopSequences": "stop", "stop_sequences": "stop",
    "seed": "seed",
    "frequency_penalty": "frequency_penalty", "frequencyPenalty": "frequency_penalty",
    "presence_penalty": "presence_penalty", "presencePenalty": "presence_penalty",
    "response_format": "response_format", "responseFormat": "response_format",
}
#: The ``response_format`` types OpenAI-compatible servers accept.
RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema")


@dataclass(frozen=True)
class ModelSettings:
    """Sampling settings sent with every model call of a turn; None leaves the server's default.

    ``max_tokens``: cap on the reply's tokens (also the reply budget a context window keeps free).
    ``temperature`` (0–2), ``top_p`` (0–1), ``top_k`` (≥ 1; llama.cpp, vLLM and Ollama read it,
    OpenAI ignores it), ``stop``: strings that end the reply, ``seed``: for repeatable sampling
    where the server supports it, ``frequency_penalty`` / ``presence_penalty`` (−2–2).
    ``response_format``: the reply's format in OpenAI's wire form (``{"type": "json_object"}`` or
    ``{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}``), sent as given.
    """

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: tuple[str, ...] | None = None
    seed: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    response_format: dict[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        _int("max_tokens", self.max_tokens, minimum=1)
        _int("top_k", self.top_k, minimum=1)
        _int("seed", self.seed, minimum=None)
        _number("temperature", self.temperature, 0.0, 2.0)
        _number("top_p", self.top_p, 0.0, 1.0)
        _number("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        _number("presence_penalty", self.presence_penalty, -2.0, 2.0)
        stop = self.stop
        if isinstance(stop, str):
            object.__setattr__(self, "stop", (stop,))
        elif stop is not None:
            if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) and s for s in stop):
                raise ModelSettingsError(f"model_settings stop must be a string or a list of strings, got {stop!r}.")
            object.__setattr__(self, "stop", tuple(stop))
        fmt = self.response_format
        if fmt is not None:
            if not isinstance(fmt, Mapping) or fmt.get("type") not in RESPONSE_FORMAT_TYPES:
                raise ModelSettingsError(
                    "model_settings response_format must be a dict whose \"type\" is "
                    f"{', '.join(repr(t) for t in RESPONSE_FORMAT_TYPES)}, got {fmt!r}.")
            if fmt["type"] == "json_schema" and not isinstance(fmt.get("json_schema"), Mapping):
                raise ModelSettingsError('model_settings response_format of type "json_schema" needs a '
                                         '"json_schema" object ({"name": ..., "schema": {...}}).')
            object.__setattr__(self, "response_format", json.loads(json.dumps(fmt)))

    @classmethod
    def parse(cls, value: ModelSettings | Mapping[str, Any] | None) -> ModelSettings:
        if value is None:
            return cls()
        if isinstance(value, ModelSettings):
            return value
        if not isinstance(value, Mapping):
            raise ModelSettingsError(f"model_settings must be a dict, got {type(value).__name__}.")
        data: dict[str, Any] = {}
        for key, item in value.items():
            name = _ALIASES.get(key)
            if name is None:
                known = ", ".join(f.name for f in fields(cls))
                raise ModelSettingsError(f"Unknown model setting {key!r}. Known settings: {known} "
                                         "(or Mastra's camelCase names: maxTokens, topP, stopSequences, ...).")
            if name in data:
                raise ModelSettingsError(f"model_settings gives {name} twice (as {key!r} and another name).")
            data[name] = item
        return cls(**data)

    def merged(self, over: ModelSettings) -> ModelSettings:
        """These settings with every value ``over`` sets replacing ours (per-call over defaults)."""
        return replace(self, **{f.name: getattr(over, f.name) for f in fields(over)
                                if getattr(over, f.name) is not None})

    def to_dict(self) -> dict[str, Any]:
        """The settings that are set, by our names (for traces and the request body)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = list(value) if isinstance(value, tuple) else \
                    json.loads(json.dumps(value)) if isinstance(value, dict) else value
        return out

    def __bool__(self) -> bool:
        return bool(self.to_dict())


def parse_tool_choice(value: Any, tool_names: list[str]) -> ToolChoice | None:
    """``value`` in any accepted form → the OpenAI wire form; a named tool must be one of ``tool_names``."""
    if value is None:
        return None
    if isinstance(value, str):
        if value in ("auto", "none", "required"):
            return value
        raise ModelSettingsError(f"tool_choice must be 'auto', 'none', 'required' or {{'name': <tool>}}, got {value!r}.")
    if isinstance(value, Mapping):
        name = value.get("name") or value.get("toolName")
        function = value.get("function")
        if name is None and isinstance(function, Mapping):
            name = function.get("name")
        if isinstance(name, str) and name:
            if name not in tool_names:
                offered = ", ".join(tool_names) or "none"
                raise ModelSettingsError(f"tool_choice names {name!r}, which this agent does not offer. Tools: {offered}.")
            return {"type": "function", "function": {"name": name}}
    raise ModelSettingsError(f"tool_choice must be 'auto', 'none', 'required' or {{'name': <tool>}}, got {value!r}.")


def tool_choice_name(choice: ToolChoice | None) -> str | None:
    """The forced tool's name, for a named choice."""
    if isinstance(choice, dict):
        return str(choice["function"]["name"])
    return None


def _int(name: str, value: Any, *, minimum: int | None) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or (minimum is not None and value < minimum):
        need = "an integer" if minimum is None else f"an integer ≥ {minimum}"
        raise ModelSettingsError(f"model_settings {name} must be {need}, got {value!r}.")


def _number(name: str, value: Any, low: float, high: float) -> None:
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value) or not low <= value <= high:
        raise ModelSettingsError(f"model_settings {name} must be a number from {low:g} to {high:g}, got {value!r}.")
