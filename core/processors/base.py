"""The processor protocol: one shape for every memory processor.

A processor has a stable ``id``, reads its inputs from the ``ProcessorContext`` it is handed (never
from globals), adds to the turn's ``MessageList`` with provenance, and — when it adds nothing — says
why through ``ctx.skip``. The Studio shows those reasons; silent no-ops were a top complaint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Protocol, runtime_checkable

from core.message_list import MessageList
from core.messages import Message
from core.options import MemoryOptions
from core.processors.services import MemoryServices

if TYPE_CHECKING:  # pragma: no cover
    from core.replay.frozen import FrozenTurn
    from core.storage import Store
    from core.storage.memory_store import Thread
    from core.tokens import Tokenizer
    from core.traces.tracer import SpanTracer


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
    # False while previewing (``Memory.assemble``): processors must not write or call models then.
    # The agent runtime sets it for real turns.
    live: bool = False

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
