"""Chat models: the interface the engine calls, a real OpenAI-compatible client, and
offline stand-ins (a scripted model and a loopback OpenAI server) for tests and the demo.

Every name loads its module on first access (PEP 562): ``import core.llm.keys`` (the Studio's
preferences, before the window's first paint) does not load the client, the providers table or the
loopback server's ``http.server``."""

from __future__ import annotations

import typing as _typing

from core.lazy_names import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:  # pragma: no cover
    from core.llm.base import (
        ChatChunk,
        ChatModel,
        ChatResult,
        Message,
        ModelError,
        parse_tool_arguments,
        ScriptExhaustedError,
        ToolCall,
        ToolCallAssembler,
        ToolCallDelta,
        ToolSpec,
        Usage,
    )
    from core.llm.keys import (
        DEFAULT_KEYRING_SERVICE,
        KeyringMissingError,
        resolve_api_key,
        ResolvedKey,
        Secret,
        store_api_key,
    )
    from core.llm.http import RetryPolicy
    from core.llm.openai_compatible import OpenAICompatibleModel
    from core.llm.providers import parse_model_name, Provider, PROVIDERS, resolve_model
    from core.llm.settings import ModelSettings, ModelSettingsError, parse_tool_choice, ToolChoice
    from core.llm.scripted import Responder, ScriptedModel, ScriptedReply, ScriptedRequest, ScriptStep, tool_call
    from core.llm.loopback import hash_embedding, LoopbackServer, RecordedRequest

_LAZY = {
    "ChatChunk": "core.llm.base",
    "ChatModel": "core.llm.base",
    "ChatResult": "core.llm.base",
    "Message": "core.llm.base",
    "ModelError": "core.llm.base",
    "parse_tool_arguments": "core.llm.base",
    "ScriptExhaustedError": "core.llm.base",
    "ToolCall": "core.llm.base",
    "ToolCallAssembler": "core.llm.base",
    "ToolCallDelta": "core.llm.base",
    "ToolSpec": "core.llm.base",
    "Usage": "core.llm.base",
    "DEFAULT_KEYRING_SERVICE": "core.llm.keys",
    "KeyringMissingError": "core.llm.keys",
    "resolve_api_key": "core.llm.keys",
    "ResolvedKey": "core.llm.keys",
    "Secret": "core.llm.keys",
    "store_api_key": "core.llm.keys",
    "RetryPolicy": "core.llm.http",
    "OpenAICompatibleModel": "core.llm.openai_compatible",
    "parse_model_name": "core.llm.providers",
    "Provider": "core.llm.providers",
    "PROVIDERS": "core.llm.providers",
    "resolve_model": "core.llm.providers",
    "ModelSettings": "core.llm.settings",
    "ModelSettingsError": "core.llm.settings",
    "parse_tool_choice": "core.llm.settings",
    "ToolChoice": "core.llm.settings",
    "Responder": "core.llm.scripted",
    "ScriptedModel": "core.llm.scripted",
    "ScriptedReply": "core.llm.scripted",
    "ScriptedRequest": "core.llm.scripted",
    "ScriptStep": "core.llm.scripted",
    "tool_call": "core.llm.scripted",
    "hash_embedding": "core.llm.loopback",
    "LoopbackServer": "core.llm.loopback",
    "RecordedRequest": "core.llm.loopback",
}

__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())


__all__ = [
    "DEFAULT_KEYRING_SERVICE",
    "ChatChunk",
    "ChatModel",
    "ChatResult",
    "KeyringMissingError",
    "LoopbackServer",
    "Message",
    "ModelError",
    "ModelSettings",
    "ModelSettingsError",
    "OpenAICompatibleModel",
    "PROVIDERS",
    "Provider",
    "RecordedRequest",
    "ResolvedKey",
    "Responder",
    "RetryPolicy",
    "ScriptExhaustedError",
    "ScriptStep",
    "ScriptedModel",
    "ScriptedReply",
    "ScriptedRequest",
    "Secret",
    "ToolCall",
    "ToolCallAssembler",
    "ToolCallDelta",
    "ToolChoice",
    "ToolSpec",
    "Usage",
    "hash_embedding",
    "parse_model_name",
    "parse_tool_arguments",
    "parse_tool_choice",
    "resolve_api_key",
    "resolve_model",
    "store_api_key",
    "tool_call",
]
