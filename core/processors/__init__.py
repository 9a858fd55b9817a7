"""Memory processors: the built-in ones, their options, and the contract every processor follows.

One processor per module, each with a stable ``id`` and one options dataclass (``core.options``):

=====================  ======================  ============================
id                     processor               options
=====================  ======================  ============================
memory-input-filter    ``MemoryInputFilter``   ``InputFilterOptions``
working-memory         ``WorkingMemory``       ``WorkingMemoryOptions``
message-history        ``MessageHistory``      ``MessageHistoryOptions``
semantic-recall        ``SemanticRecall``      ``SemanticRecallOptions``
memory-token-limiter   ``MemoryTokenLimiter``  ``MessageHistoryOptions`` (its token budget)
observational-memory   ``ObservationalMemory`` ``ObservationalMemoryOptions``
working-memory-state   ``WorkingMemoryState``  ``WorkingMemoryOptions`` (``use_state_signals``)
=====================  ======================  ============================

A processor reads the turn from its ``ProcessorContext`` and uses only ``ctx.services``
(``MemoryServices``). ``SemanticRecall`` and ``ObservationalMemory`` load on first use, so
importing the engine does not import numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.lazy_names import lazy_names as _lazy_names
from core.options import (
    InputFilterOptions,
    MessageHistoryOptions,
    ObservationalMemoryOptions,
    SemanticRecallOptions,
    WorkingMemoryOptions,
)
from core.processors.base import BaseProcessor, Processor, ProcessorContext, RequestContext
from core.processors.input_filter import MemoryInputFilter
from core.processors.message_history import MessageHistory
from core.processors.services import MemoryServices, SaveMessages
from core.processors.token_limiter import MemoryTokenLimiter
from core.processors.working_memory import WorkingMemory
from core.processors.working_memory_state import WorkingMemoryState

if TYPE_CHECKING:  # pragma: no cover
    from core.processors.observational import ObservationalMemory
    from core.processors.semantic_recall import SemanticRecall

_LAZY = {
    "ObservationalMemory": "core.processors.observational",
    "SemanticRecall": "core.processors.semantic_recall",
}


__all__ = [
    "BaseProcessor",
    "InputFilterOptions",
    "MemoryInputFilter",
    "MemoryServices",
    "MemoryTokenLimiter",
    "MessageHistory",
    "MessageHistoryOptions",
    "ObservationalMemory",
    "ObservationalMemoryOptions",
    "Processor",
    "ProcessorContext",
    "RequestContext",
    "SaveMessages",
    "SemanticRecall",
    "SemanticRecallOptions",
    "WorkingMemory",
    "WorkingMemoryOptions",
    "WorkingMemoryState",
]

__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals(), listed=__all__)
