"""MessageHistory: the newest N messages of the thread, and saving the turn afterwards (spec §2.3)."""

from __future__ import annotations

from core.message_list import Provenance
from core.messages import Message
from core.options import MessageHistoryOptions
from core.processors.base import BaseProcessor, ProcessorContext
from core.storage.memory_store import MessageQuery


class MessageHistory(BaseProcessor):
    """``options`` replace the turn's ``MemoryOptions.message_history`` when given."""

    id = "message-history"

    def __init__(self, options: MessageHistoryOptions | None = None) -> None:
        self.options = options

    def _options(self, ctx: ProcessorContext) -> MessageHistoryOptions:
        return self.options or ctx.request.options.message_history

    def process_input(self, ctx: ProcessorContext) -> None:
        req = ctx.request
        if not req.thread_id:
            ctx.skip(self.id, "no thread id was given, so there is no history to load")
            return
        limit = self._options(ctx).limit
        if limit <= 0:
            ctx.skip(self.id, "history is disabled (last_messages is 0 or False)")
            return
        if req.frozen is not None and req.frozen.history is not None:  # a recorded turn: its exact window
            rows = list(req.frozen.history)
        else:
            # Storage errors propagate: a turn without its history would silently mislead the model.
            rows = ctx.store.memory.list_messages(
                MessageQuery(
                    thread_id=req.thread_id, resource_id=req.resource_id, last=limit, exclude_system=True,
                    before=(req.as_of.created_at, req.as_of.id) if req.as_of is not None else None,
                )
            )
        if not rows:
            ctx.skip(self.id, f"thread {req.thread_id} has no stored messages yet")
            return
        for msg in rows:
            ctx.messages.add(msg, "memory", Provenance(self.id, (msg.id,)))
        ctx.note(self.id, loaded=len(rows), limit=limit)

    def process_output(self, ctx: ProcessorContext) -> None:
        save_turn(ctx, self.id)


def save_turn(ctx: ProcessorContext, processor_id: str) -> list[Message] | None:
    """Persist this turn's input and response (the output side of history and of observational
    memory). Returns what was saved, or None when nothing may be saved (and says why)."""
    req = ctx.request
    if not req.thread_id:
        ctx.skip(processor_id, "no thread id, nothing saved")
        return None
    if req.read_only:
        ctx.skip(processor_id, "read-only: the turn was not saved")
        return None
    if not ctx.live:
        ctx.skip(processor_id, "preview: nothing saved")
        return None
    if ctx.finish_reason == "error" and not ctx.messages.messages("response"):
        ctx.skip(processor_id, "the model call failed with no output; the input was not saved")
        return None
    saved = ctx.services.save_messages(ctx.messages.new_messages())
    ctx.saved.extend(saved)
    return saved
