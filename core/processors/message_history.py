"""MessageHistory: the newest N messages of the thread (or, with only a token budget, the newest that fit it),
and saving the turn afterwards (spec §2.3)."""

from __future__ import annotations

from datetime import datetime
from typing import Iterable

from core.message_list import Provenance
from core.messages import Message
from core.options import MessageHistoryOptions
from core.processors.base import BaseProcessor, ProcessorContext
from core.prompt import message_tokens
from core.storage.memory_store import MessageQuery
from core.storage.message_pages import UnreadableMessage

_PAGE = 40  # messages per read when only a token budget bounds history (Mastra's page size)


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
        opts = self._options(ctx)
        limit = opts.limit
        if not opts.enabled:
            ctx.skip(self.id, "history is disabled (last_messages or message_history.max_tokens is 0 or False)")
            return
        before = req.before  # a replayed turn's input, or this turn's own: what was stored before it
        # Storage errors propagate: a turn without its history would silently mislead the model.
        # A stored row that does not parse is left out and reported, never fatal (Invariant 15).
        unreadable: list[UnreadableMessage] = []
        if req.frozen is not None and req.frozen.history is not None:  # a recorded turn: its exact window
            rows = list(req.frozen.history)
        elif limit is None:
            rows = self._newest_within(ctx, req.thread_id, req.resource_id, before, int(opts.max_tokens or 0),
                                       unreadable, req.not_memory)
        else:
            skip = req.not_memory  # (a reconstruction's: read as many more, so the window keeps its size)
            read = ctx.store.memory.list_messages(
                MessageQuery(thread_id=req.thread_id, resource_id=req.resource_id, last=limit + len(skip),
                             exclude_system=True, before=before)
            )
            rows, unreadable = list(read), read.unreadable
            if skip:
                rows = [m for m in rows if m.id not in skip][-limit:]  # (limit > 0: 0 disables history)
        if unreadable:
            ctx.note(self.id, unreadable=[u.to_dict() for u in unreadable])
        if not rows:
            ctx.skip(self.id, f"thread {req.thread_id} has no stored messages yet")
            return
        for msg in rows:
            ctx.messages.add(msg, "memory", Provenance(self.id, (msg.id,)))
        if limit is None:
            ctx.note(self.id, loaded=len(rows), limit=None, maxTokens=opts.max_tokens)
        else:
            ctx.note(self.id, loaded=len(rows), limit=limit)

    def _newest_within(self, ctx: ProcessorContext, thread_id: str, resource_id: str | None,
                       before: tuple[datetime, str] | None, max_tokens: int,
                       unreadable: list[UnreadableMessage], skip: frozenset[str] = frozenset()) -> list[Message]:
        """No count cap: the newest messages, page by page, until they alone pass the token budget.

        The message that crosses the budget is loaded too, so the token limiter sees the thread as
        over budget exactly when loading every message would have shown it over (what it then
        keeps does not depend on older messages).
        """
        newest_first: list[Message] = []
        tokens = 0
        while tokens <= max_tokens:
            page = ctx.store.memory.list_messages(
                MessageQuery(thread_id=thread_id, resource_id=resource_id, last=_PAGE, exclude_system=True,
                             before=before)
            )
            unreadable.extend(page.unreadable)
            for msg in reversed(page):
                if msg.id in skip:
                    continue
                newest_first.append(msg)
                tokens += message_tokens(ctx.tokenizer, msg)
                if tokens > max_tokens:
                    break
            if len(page) + len(page.unreadable) < _PAGE:
                break
            # The next page starts below the oldest row of this one, readable or not.
            before = min([(m.created_at, m.id) for m in page] + [(u.created_at, u.id) for u in page.unreadable])
        newest_first.reverse()
        return newest_first

    def process_output(self, ctx: ProcessorContext) -> None:
        save_turn(ctx, self.id)


def turn_failed(ctx: ProcessorContext) -> bool:
    """The turn's model call failed: a turn is saved whole or not at all, so nothing of it is saved
    (not even the tool steps before the failure), and nothing is indexed."""
    return ctx.finish_reason == "error"


def save_turn(ctx: ProcessorContext, processor_id: str, stored: Iterable[str] = ()) -> list[Message] | None:
    """Persist this turn's input and response (the output side of history and of observational
    memory). Returns what was saved, or None when nothing may be saved (and says why). ``stored``: ids of
    input messages the turn stored already (observational memory stores an input it observes before the
    model call): not saved again, yet counted among ``ctx.saved``."""
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
    if turn_failed(ctx):
        # A half turn (input plus the tool steps before the failure) would make a retry store the
        # input twice.
        ctx.skip(processor_id, "the model call failed; nothing of this turn was saved")
        return None
    writes, ctx.pending_writes = ctx.pending_writes, []
    early = set(stored)
    new = [m for m in ctx.messages.new_messages() if m.id not in early]
    # ``writes`` only when there are any: a plain save function (services built without a Memory)
    # need not know about staged working-memory updates.
    saved = ctx.services.save_messages(new, writes=writes) if writes else ctx.services.save_messages(new)
    ctx.saved.extend(m for m in ctx.messages.messages("input") if m.id in early)
    ctx.saved.extend(saved)
    return saved
