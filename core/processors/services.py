"""What a processor may use: the typed services the engine hands every processor.

A processor never sees the ``Memory`` facade. It gets a ``MemoryServices`` on its context
(``ctx.services``) holding exactly the collaborators processors need, each behind a small
interface with an offline implementation, so a test builds one without monkeypatching.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from core.background import INLINE_WORK, InlineWork
from core.messages import Message
from core.timeutil import Clock, SystemClock
from core.traces.tracer import NOOP_TRACER, SpanTracer

if TYPE_CHECKING:  # pragma: no cover
    from core.background import BackgroundWork
    from core.llm.base import ChatModel
    from core.recall import RecallIndex
    from core.storage import Store
    from core.tokens import Tokenizer
    from core.working_memory import WorkingMemoryService


class SaveMessages(Protocol):
    """Persists a turn's messages with the facade's rules (system rows dropped, working-memory
    traffic hidden, missing threads created, ownership checked, order kept) and returns what was
    stored. ``writes`` (staged working-memory updates, each with ``commit(conn)``) are committed in
    the same transaction, so a turn is saved whole or not at all. It does not index them for recall:
    the semantic-recall output processor does that."""

    def __call__(self, messages: Sequence[Message], *, writes: Sequence[Any] = ()) -> list[Message]: ...


@dataclass(frozen=True)
class MemoryServices:
    """The collaborators of one memory, as processors see them.

    ``store``: the database (threads, messages, working memory, observational-memory rows).
    ``tokenizer``: counts tokens for budgets and the prompt record.
    ``working_memory``: reads and writes working memory with its scope and validation rules.
    ``save_messages``: persists a turn (see ``SaveMessages``).
    ``clock``: what "now" is (default: the system clock, UTC).
    ``tracer``: where spans go (default: the no-op tracer; never None).
    ``recall_index``: the semantic-recall index, or None when this memory was built without
    semantic recall (the processor then says so and adds nothing).
    ``observer_model`` / ``reflector_model``: the chat models observational memory calls
    (None: no observation or reflection runs; the reflector falls back to the observer).
    ``title_model``: the chat model that names untitled threads when ``generate_title`` is on (None:
    no title is generated; an agent turn passes its own model).
    ``background``: the memory's background work (``core.background``): buffered observations and
    reflections, titles, embeddings are submitted here with ``submit(kind, key, fn)`` and run off
    the turn's critical path; ``Memory.wait_idle`` waits for them. Default: run at once (a test
    building services by hand).
    """

    store: "Store"
    tokenizer: "Tokenizer"
    working_memory: "WorkingMemoryService"
    save_messages: SaveMessages
    clock: Clock = field(default_factory=SystemClock)
    tracer: SpanTracer = NOOP_TRACER
    recall_index: "RecallIndex | None" = None
    observer_model: "ChatModel | None" = None
    reflector_model: "ChatModel | None" = None
    title_model: "ChatModel | None" = None
    background: "BackgroundWork | InlineWork" = INLINE_WORK


__all__ = ["MemoryServices", "SaveMessages"]
