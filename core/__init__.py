"""Memory Studio's memory engine: a Python re-implementation of Mastra's agent memory.

The public API is what ``__all__`` lists; everything else is internal and may change. Every error
the engine raises on purpose subclasses ``MemoryStudioError``. Every public name but that one and
``__version__`` loads its module on first access (PEP 562), so ``import core`` (and with it any
``import core.<module>``) imports neither SQLAlchemy nor numpy: the Studio's first paint waits for none
of them.
"""

from __future__ import annotations

import typing as _typing

from core.errors import MemoryStudioError
from core.lazy_names import lazy_names as _lazy_names
from core.version import __version__

if _typing.TYPE_CHECKING:  # pragma: no cover
    from core.agent import Agent, AgentError, AgentResult, Tool, TurnFailedError
    from core.agent_stream import AgentStream, StreamEvent
    from core.context_window import ContextWindowError, PromptBudget
    from core.llm import (
        LoopbackServer,
        ModelError,
        ModelSettings,
        ModelSettingsError,
        OpenAICompatibleModel,
        ScriptedModel,
    )
    from core.thread_clone import CloneResult
    from core.memory import (
        ConfigurationError,
        Memory,
        RecallResult,
        resolve_memory,
        ScopeConflictError,
        ThreadOwnershipError,
    )
    from core.background import BackgroundWork
    from core.scopes import ReservedResourceError, check_client_resource
    from core.message_list import MessageList, Provenance
    from core.message_size import MessageTooLargeError
    from core.messages import Message, MessageFormatError
    from core.options import (
        DEFAULT_TEMPLATE,
        InputFilterOptions,
        MemoryOptions,
        MessageHistoryOptions,
        ObservationalMemoryOptions,
        OptionsError,
        SemanticRecallOptions,
        TitleOptions,
        WorkingMemoryOptions,
    )
    from core.processors.base import Processor, ProcessorContext, RequestContext
    from core.processors.services import MemoryServices
    from core.prompt import AssembledPrompt, Fragment
    from core.storage import (
        AlreadyExistsError,
        DatabaseLocationError,
        DatabaseOpenError,
        InvalidArgumentError,
        NotFoundError,
        open_store,
        ReadOnlyError,
        SchemaError,
        StorageError,
        Store,
    )
    from core.storage.memory_store import Thread
    from core.working_memory import ConcurrentUpdateError, Version
    from core.working_memory_schema import WorkingMemoryError
    from core.embedding import HashingEmbedder, ModelNotInstalledError, OpenAIEmbedder
    from core.recall import RecallError

# Every other public name loads its module on first access (PEP 562): ``import core`` (and so any
# ``import core.<module>``) stays cheap, which the Studio's first paint depends on.
_LAZY = {
    "Agent": "core.agent",
    "AgentError": "core.agent",
    "AgentResult": "core.agent",
    "Tool": "core.agent",
    "TurnFailedError": "core.agent",
    "AgentStream": "core.agent_stream",
    "StreamEvent": "core.agent_stream",
    "ContextWindowError": "core.context_window",
    "PromptBudget": "core.context_window",
    "LoopbackServer": "core.llm",
    "ModelError": "core.llm",
    "ModelSettings": "core.llm",
    "ModelSettingsError": "core.llm",
    "OpenAICompatibleModel": "core.llm",
    "ScriptedModel": "core.llm",
    "CloneResult": "core.thread_clone",
    "ConfigurationError": "core.memory",
    "Memory": "core.memory",
    "RecallResult": "core.memory",
    "resolve_memory": "core.memory",
    "ScopeConflictError": "core.memory",
    "ThreadOwnershipError": "core.memory",
    "BackgroundWork": "core.background",
    "ReservedResourceError": "core.scopes",
    "check_client_resource": "core.scopes",
    "MessageList": "core.message_list",
    "Provenance": "core.message_list",
    "MessageTooLargeError": "core.message_size",
    "Message": "core.messages",
    "MessageFormatError": "core.messages",
    "DEFAULT_TEMPLATE": "core.options",
    "InputFilterOptions": "core.options",
    "MemoryOptions": "core.options",
    "MessageHistoryOptions": "core.options",
    "ObservationalMemoryOptions": "core.options",
    "OptionsError": "core.options",
    "SemanticRecallOptions": "core.options",
    "TitleOptions": "core.options",
    "WorkingMemoryOptions": "core.options",
    "Processor": "core.processors.base",
    "ProcessorContext": "core.processors.base",
    "RequestContext": "core.processors.base",
    "MemoryServices": "core.processors.services",
    "AssembledPrompt": "core.prompt",
    "Fragment": "core.prompt",
    "AlreadyExistsError": "core.storage",
    "DatabaseLocationError": "core.storage",
    "DatabaseOpenError": "core.storage",
    "InvalidArgumentError": "core.storage",
    "NotFoundError": "core.storage",
    "open_store": "core.storage",
    "ReadOnlyError": "core.storage",
    "SchemaError": "core.storage",
    "StorageError": "core.storage",
    "Store": "core.storage",
    "Thread": "core.storage.memory_store",
    "ConcurrentUpdateError": "core.working_memory",
    "Version": "core.working_memory",
    "WorkingMemoryError": "core.working_memory_schema",
    "HashingEmbedder": "core.embedding",
    "ModelNotInstalledError": "core.embedding",
    "OpenAIEmbedder": "core.embedding",
    "RecallError": "core.recall",
}

__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())


__all__ = [
    "Agent",
    "AgentError",
    "AgentResult",
    "AgentStream",
    "AlreadyExistsError",
    "AssembledPrompt",
    "BackgroundWork",
    "CloneResult",
    "ConcurrentUpdateError",
    "ConfigurationError",
    "ContextWindowError",
    "DEFAULT_TEMPLATE",
    "DatabaseLocationError",
    "DatabaseOpenError",
    "Fragment",
    "HashingEmbedder",
    "InputFilterOptions",
    "InvalidArgumentError",
    "LoopbackServer",
    "Memory",
    "MemoryOptions",
    "MemoryServices",
    "MemoryStudioError",
    "Message",
    "MessageFormatError",
    "MessageHistoryOptions",
    "MessageList",
    "MessageTooLargeError",
    "ModelError",
    "ModelSettings",
    "ModelSettingsError",
    "ModelNotInstalledError",
    "NotFoundError",
    "ObservationalMemoryOptions",
    "OpenAICompatibleModel",
    "OpenAIEmbedder",
    "OptionsError",
    "Processor",
    "ProcessorContext",
    "PromptBudget",
    "Provenance",
    "ReadOnlyError",
    "RecallError",
    "RecallResult",
    "RequestContext",
    "ReservedResourceError",
    "SchemaError",
    "ScopeConflictError",
    "ScriptedModel",
    "SemanticRecallOptions",
    "TitleOptions",
    "StorageError",
    "StreamEvent",
    "Store",
    "Thread",
    "ThreadOwnershipError",
    "Tool",
    "TurnFailedError",
    "Version",
    "WorkingMemoryError",
    "WorkingMemoryOptions",
    "check_client_resource",
    "open_store",
    "resolve_memory",
]
