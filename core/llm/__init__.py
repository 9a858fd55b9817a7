"""Chat models: the interface the engine calls, a real OpenAI-compatible client, and
offline stand-ins (a scripted model and a loopback OpenAI server) for tests and the demo."""

from __future__ import annotations

from core.llm.base import (
    ChatChunk,
    ChatModel,
    ChatResult,
    Message,
    ModelError,
    ScriptExhaustedError,
    ToolCall,
    ToolCallAssembler,
    ToolCallDelta,
    ToolSpec,
    Usage,
    parse_tool_arguments,
)
from core.llm.keys import (
    DEFAULT_KEYRING_SERVICE,
    KeyringMissingError,
    ResolvedKey,
    Secret,
    resolve_api_key,
    store_api_key,
)
from core.llm.loopback import LoopbackServer, RecordedRequest, hash_embedding
from core.llm.http import RetryPolicy
from core.llm.openai_compatible import OpenAICompatibleModel
from core.llm.providers import PROVIDERS, Provider, parse_model_name, resolve_model
from core.llm.settings import ModelSettings, ModelSettingsError, ToolChoice, parse_tool_choice
from core.llm.scripted import Responder, ScriptedModel, ScriptedReply, ScriptedRequest, ScriptStep, tool_call

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
