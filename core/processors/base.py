"""The processor protocol: one shape for every memory processor.

A processor has a stable ``id``, reads its inputs from the ``ProcessorContext`` it is handed (never
from globals), adds to the turn's ``MessageList`` with provenance, and — when it adds nothing — says
why through ``ctx.skip``. The Studio shows those reasons; silent no-ops were a top complaint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from core.message_list import MessageList
from core.messages import Message
from core.options import MemoryOptions
from core.processors.services import MemoryServices

if TYPE_CHECKING:  # pragma: no cover
    from core.context_window import PromptBudget
    from core.replay.frozen import FrozenTurn
    from core.storage import Store
    from core.storage.memory_store import Thread
    from core.tokens import Tokenizer
    from core.traces.tracer import SpanTracer


class SavedAwareWrite:
    """A staged write (``ProcessorContext.pending_writes``) that can be told what its transaction saved.

    ``Memory.save_messages`` commits such a write with ``commit_saved(conn, saved)`` (the messages it
    has just upserted, in the same transaction), so the write need not ask the database which of
    them are stored; everyone else calls ``commit(conn)``."""

    # Whether it writes the saved messages' recall rows (``RecallRows``): a save without one keys their
    # keyword docs itself (``core.recall.own_docs``).
    indexes_recall = False

    def commit(self, conn: Any) -> None:
        raise NotImplementedError

    def commit_saved(self, conn: Any, saved: "Sequence[Message]") -> None:
        self.commit(conn)


@dataclass(frozen=True)
class ThreadAsItStarted:
    """A staged write of a turn that writes nothing: the turn's save (``Memory.save_messages``) refuses to run
    when the turn's thread is no longer the one the turn began with (``core.scopes.check_thread_as_started``).

    ``owner``: the thread's owner when the turn began; None when it was not stored yet. A thread stored then
    and gone by the save was deleted, or its resource forgotten (``memory-studio forget``), while the turn ran,
    maybe in another process: saving would create it again with this turn's messages, and bring back what its
    prompt held (a working-memory update, the turn record). One stored again meanwhile under another owner
    (deleted and taken by another resource, or stored by another program without an owner), or a new thread
    stored meanwhile without an owner, is not this turn's to write into. ``resource_id``: the turn's."""

    thread_id: str
    owner: str | None
    resource_id: str | None

    def commit(self, conn: Any) -> None:
        return None


@dataclass
class RequestContext:
    """Who and what this turn is for."""

    thread_id: str | None
    resource_id: str | None
    options: MemoryOptions
    thread: "Thread | None" = None
    scopes: tuple[str, ...] = ()  # scopes other than resource:/thread:, handed to processors as-is
    values: Mapping[str, Any] = field(default_factory=dict)  # the caller's request-context values
    memory_name: str = "default"
    # Replaying a stored turn: only what was stored before this message is "memory".
    as_of: "Message | None" = None
    # Rebuilding a recorded turn: processors take their inputs from the record, not from queries.
    frozen: "FrozenTurn | None" = None
    # A new turn (or its preview): the time a new input of this turn is stamped with (after every
    # message stored when the input was prepared), as a (createdAt, "") cut-off. Memory is what sorts
    # before it: a turn of the same thread running beside this one can save its messages (dated
    # after it) while this prompt is being built; they are the other turn's, not this one's history,
    # and would end this prompt after its own input.
    input_at: "tuple[datetime, str] | None" = None
    # Stored messages the model receives by another way than this context's list (an SDK session
    # sends the thread itself): semantic recall fills its top k with other messages. Empty for our
    # own turns, whose recall keeps Mastra's rule (a hit already in the prompt is dropped, not replaced).
    recall_exclude: frozenset[str] = frozenset()
    # A thread whose every message the model receives by another way (an SDK session's own thread): a
    # resource-scoped recall search leaves it out by a filter, so its top k is one search of top k and
    # other threads' messages alone are ranked, however long the thread (``RecallIndex.search``'s
    # ``exclude_thread``). None for our own turns.
    recall_exclude_thread: str | None = None
    # Rebuilding a turn from the data (a reconstruction): stored messages older than its input that
    # were not stored yet when it ran (other turns of the thread still running then, by their records),
    # so not its memory: left out of history, observational memory's unobserved messages and recall.
    not_memory: frozenset[str] = frozenset()
    # Rebuilding a stored turn "with the memory as it is now" (``rebuild="today"``): working memory is
    # today's value instead of the version in force at the turn (the rest is as ``as_of`` says).
    memory_today: bool = False

    @property
    def before(self) -> "tuple[datetime, str] | None":
        """The (createdAt, id) memory must sort strictly before: the millisecond of the replayed turn's
        input, else of this turn's own first input (None before the input is prepared, or without one).

        A rebuilt turn takes the live turn's cut-off: a live turn's input is stamped after every stored
        message, so a message of the same millisecond was stored after it (another turn of the thread
        running beside it); which of two such messages came first is not in the data, and their ids'
        order is not the order they were stored in."""
        if self.as_of is not None:
            return (self.as_of.created_at, "")
        return self.input_at

    @property
    def read_only(self) -> bool:
        return self.options.read_only


@dataclass
class ProcessorContext:
    """One turn as the processors see it: the request, the message list they build, and the
    services they may use (``services``: store, tokenizer, tracer, clock, ...; never the facade)."""

    request: RequestContext
    messages: MessageList
    services: MemoryServices
    skipped: dict[str, str] = field(default_factory=dict)
    notes: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-processor details for the record
    phase: str = "input"  # "input" | "output"
    tools: list[dict[str, Any]] = field(default_factory=list)  # tool definitions processors offer the model
    finish_reason: str | None = None  # set by the runtime before output processors run
    saved: list[Message] = field(default_factory=list)  # messages persisted by output processors
    # Writes staged during a live turn (the working-memory tool), each with ``commit(conn)``: they are
    # committed in the same transaction as the turn's messages, so a failed turn writes neither.
    pending_writes: list[Any] = field(default_factory=list)
    # Run after the whole output chain, when ``saved`` is final: recall indexes only what was saved.
    after_output: list[Callable[[], None]] = field(default_factory=list)
    # False while previewing (``Memory.assemble``): processors must not write or call models then.
    # The agent runtime sets it for real turns.
    live: bool = False
    # The model's context window and reply budget, when the model says its window: the prompt
    # record is then fitted into it (``core.context_window``). None: no window is enforced.
    budget: "PromptBudget | None" = None

    # The three services nearly every processor uses, one attribute away.
    @property
    def store(self) -> "Store":
        return self.services.store

    @property
    def tokenizer(self) -> "Tokenizer":
        return self.services.tokenizer

    @property
    def tracer(self) -> "SpanTracer":
        return self.services.tracer

    def skip(self, processor_id: str, reason: str) -> None:
        """Record why a processor added nothing (shown in the prompt record and the trace)."""
        self.skipped[processor_id] = reason

    def note(self, processor_id: str, **details: Any) -> None:
        self.notes.setdefault(processor_id, {}).update(details)


@runtime_checkable
class Processor(Protocol):
    id: str

    def process_input(self, ctx: ProcessorContext) -> None: ...

    def process_output(self, ctx: ProcessorContext) -> None: ...


class BaseProcessor:
    """Convenience base: both phases default to doing nothing."""

    id: str = "processor"

    def process_input(self, ctx: ProcessorContext) -> None:
        return None

    def process_output(self, ctx: ProcessorContext) -> None:
        return None
