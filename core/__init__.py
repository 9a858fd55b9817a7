"""Memory Studio's memory engine: a Python re-implementation of Mastra's agent memory.

The public API is what ``__all__`` lists; everything else is internal and may change. Every error
the engine raises on purpose subclasses ``MemoryStudioError``. The embedders and ``RecallError``
load on first access (PEP 562), so ``import core`` does not import numpy.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from core.agent import Agent, AgentError, AgentResult, Tool, TurnFailedError
from core.agent_stream import AgentStream, StreamEvent
from core.context_window import ContextWindowError, PromptBudget
from core.errors import MemoryStudioError
from core.llm import LoopbackServer, ModelError, ModelSettings, ModelSettingsError, OpenAICompatibleModel, ScriptedModel
from core.memory import (
    CloneResult,
    ConfigurationError,
    Memory,
    RecallResult,
    ScopeConflictError,
    ThreadOwnershipError,
    resolve_memory,
)
from core.background import BackgroundWork
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
    ReadOnlyError,
    SchemaError,
    StorageError,
    Store,
    open_store,
)
from core.storage.memory_store import Thread
from core.version import __version__
from core.working_memory import ConcurrentUpdateError, Version
from core.working_memory_schema import WorkingMemoryError

if _typing.TYPE_CHECKING:  # pragma: no cover
    from core.embedding import HashingEmbedder, ModelNotInstalledError, OpenAIEmbedder
    from core.recall import RecallError

_LAZY = {
    "HashingEmbedder": "core.embedding",
    "ModelNotInstalledError": "core.embedding",
    "OpenAIEmbedder": "core.embedding",
    "RecallError": "core.recall",
}


def __getattr__(name: str) -> _typing.Any:
    if name in _LAZY:
        return getattr(_importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    "open_store",
    "resolve_memory",
]
