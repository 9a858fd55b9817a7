"""MemoryInputFilter: a client that re-sends the whole conversation every turn would otherwise get
every message twice. Input messages already stored in this thread are dropped from the input; the
history processor loads them from storage instead."""

from __future__ import annotations

from core.options import InputFilterOptions
from core.processors.base import BaseProcessor, ProcessorContext


class MemoryInputFilter(BaseProcessor):
    id = "memory-input-filter"

    def __init__(self, options: InputFilterOptions | None = None) -> None:
        self.options = options or InputFilterOptions()

    def process_input(self, ctx: ProcessorContext) -> None:
        req = ctx.request
        inputs = ctx.messages.messages("input")
        if req.frozen is not None:
            # A rebuilt turn's inputs are the ones it kept; they are all stored by now, not echoed.
            ctx.skip(self.id, "rebuilt turn: its recorded inputs")
            return
        if not req.thread_id or len(inputs) < 2:
            ctx.skip(self.id, "no echoed history in the input")
            return
        stored = {m.id for m in ctx.store.memory.get_messages([m.id for m in inputs]) if m.thread_id == req.thread_id}
        # Never drop the newest input: that is the question being asked now.
        echoed = [m.id for m in inputs[:-1] if m.id in stored]
        if not echoed:
            ctx.skip(self.id, "no echoed history in the input")
            return
        ctx.messages.remove(echoed)
        ctx.note(self.id, dropped=echoed)
