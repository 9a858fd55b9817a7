"""Observational memory: a dated observation log that replaces old raw messages (spec §3).

The processor lives in ``core.processors.observational``; this package holds the parts it is made
of, and the read functions the Studio uses (``load_history``, ``load_current``).
"""

from __future__ import annotations

from core.observational.context import (
    CONTINUATION_ID,
    CONTINUATION_TEXT,
    TAG,
    context_blocks,
    optimize_chunk,
)
from core.observational.observer import OBSERVER_SYSTEM_PROMPT, build_observer_messages, format_history
from core.observational.parsing import ObserverOutput, parse_observer_output
from core.observational.records import Chunk, OMRecord, append_chunk, lookup_key, split_chunks
from core.observational.reflector import COMPRESSION_GUIDANCE, REFLECTOR_SYSTEM_PROMPT, Reflection, reflect
from core.observational.store import Cursor, ThreadHints, current_record, load_current, load_history, thread_hints
from core.observational.tokens import message_tokens, messages_tokens

__all__ = [
    "COMPRESSION_GUIDANCE",
    "CONTINUATION_ID",
    "CONTINUATION_TEXT",
    "Chunk",
    "Cursor",
    "OBSERVER_SYSTEM_PROMPT",
    "OMRecord",
    "ObserverOutput",
    "REFLECTOR_SYSTEM_PROMPT",
    "Reflection",
    "TAG",
    "ThreadHints",
    "append_chunk",
    "build_observer_messages",
    "context_blocks",
    "current_record",
    "format_history",
    "load_current",
    "load_history",
    "lookup_key",
    "message_tokens",
    "messages_tokens",
    "optimize_chunk",
    "parse_observer_output",
    "reflect",
    "split_chunks",
    "thread_hints",
]
