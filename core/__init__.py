"""Memory Studio's memory engine: a Python re-implementation of Mastra's agent memory.

The public API is what ``__all__`` lists; everything else is internal and may change.
"""

from __future__ import annotations

from core.agent import Agent, AgentError, AgentResult, Tool
from core.memory import (
    CloneResult,
    ConfigurationError,
    Memory,
    RecallResult,
    ScopeConflictError,
    ThreadOwnershipError,
    resolve_memory,
)
from core.message_list import MessageList, Provenance
from core.messages import Message, MessageFormatError
from core.options import (
    DEFAULT_TEMPLATE,
    MemoryOptions,
    ObservationalMemoryOptions,
    OptionsError,
    SemanticRecallOptions,
    WorkingMemoryOptions,
)
from core.processors.base import Processor, ProcessorContext, RequestContext
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

__all__ = [
    "Agent",
    "AgentError",
    "AgentResult",
    "CloneResult",
    "Tool",
    "AlreadyExistsError",
    "AssembledPrompt",
    "ConcurrentUpdateError",
    "ConfigurationError",
    "DEFAULT_TEMPLATE",
    "DatabaseLocationError",
    "DatabaseOpenError",
    "Fragment",
    "InvalidArgumentError",
    "Memory",
    "MemoryOptions",
    "Message",
    "MessageFormatError",
    "MessageList",
    "NotFoundError",
    "ObservationalMemoryOptions",
    "OptionsError",
    "Processor",
    "ProcessorContext",
    "Provenance",
    "ReadOnlyError",
    "RecallResult",
    "RequestContext",
    "SchemaError",
    "ScopeConflictError",
    "SemanticRecallOptions",
    "Thread",
    "StorageError",
    "Store",
    "ThreadOwnershipError",
    "Version",
    "WorkingMemoryError",
    "WorkingMemoryOptions",
    "open_store",
    "resolve_memory",
]
