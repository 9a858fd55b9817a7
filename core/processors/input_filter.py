"""MemoryInputFilter: what a request's input may add to a thread that memory already holds.

An OpenAI-style client re-sends the whole conversation every turn, without our message ids, so the
old messages would be stored again (and sent to the model twice). As Mastra's memory-input-filter
does, the input is trimmed by its shape once the thread has stored rows: when it ends with the
user's message(s), only what follows the last assistant message is new; an assistant message at the
end is dropped when it is stored already. On a thread with nothing stored the whole input is the
seed and is kept. Input messages whose ids are stored in this thread are never taken as new.

``MemoryOptions(retain_full_input=True)`` (per memory or per call) keeps the input as given, for a
caller that assembles it on purpose (few-shot examples, a replayed request); only messages stored
under the same id are still left out. The newest input is never dropped.
"""

from __future__ import annotations

from core.messages import Message
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
        by_id = {m.id for m in ctx.store.memory.get_messages([m.id for m in inputs]) if m.thread_id == req.thread_id}
        # Never drop the newest input: that is the question being asked now.
        echoed = [m.id for m in inputs[:-1] if m.id in by_id]
        trimmed: list[str] = []
        if not req.options.retain_full_input and self._thread_has_rows(ctx, req.thread_id):
            trimmed = [m.id for m in _before_the_new_tail(inputs) if m.id not in echoed]
        if not echoed and not trimmed:
            ctx.skip(self.id, "no echoed history in the input" if not req.options.retain_full_input
                     else "retain_full_input: the input is kept as given")
            return
        ctx.messages.remove([*echoed, *trimmed])
        ctx.note(self.id, dropped=echoed + trimmed)
        if trimmed:
            ctx.note(self.id, trimmed=trimmed, why="the thread has stored messages: only what follows the input's "
                     "last assistant message is new (retain_full_input keeps everything)")

    @staticmethod
    def _thread_has_rows(ctx: ProcessorContext, thread_id: str) -> bool:
        with ctx.store.db.read() as conn:
            return bool(ctx.store.memory.newest_message_times([thread_id], conn).get(thread_id))


def _before_the_new_tail(inputs: list[Message]) -> list[Message]:
    """The input messages that an echoing client re-sent: everything up to its last assistant message
    when the input ends with the user's message(s); the input's trailing assistant message otherwise
    is kept (it may be a caller's own instruction, never stored), as are the ones before it."""
    last_assistant = max((i for i, m in enumerate(inputs) if m.role == "assistant"), default=-1)
    if inputs[-1].role == "assistant" or last_assistant < 0:
        return []
    return inputs[:last_assistant + 1]


__all__ = ["MemoryInputFilter"]
