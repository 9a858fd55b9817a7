"""MemoryTokenLimiter: keeps the prompt within a token budget by dropping the oldest memory messages.

Mastra's ``memory-token-limiter`` (``messageHistory.maxTokens``): it runs after history and recall
have loaded, counts the whole prompt except tool definitions (instructions, system messages, every
conversation message, the input), and when that is over ``max_tokens`` removes the oldest
*memory* messages (history and same-thread recall) until ``at_max_remove_tokens`` are free below
the budget. The input, call-time context and system messages are never removed: an input over the
budget alone still goes out whole (the model's context window is guarded elsewhere,
``core.context_window``).

Unlike Mastra, the trim point is not persisted in the thread's metadata: a preview must not write,
and a stored turn must rebuild from its messages alone. So once a thread is over budget, each turn
holds about ``max_tokens - at_max_remove_tokens`` of history, instead of growing back to the budget
between trims. What was dropped, and why, is the processor's skip reason and note.
"""

from __future__ import annotations

from core.options import MessageHistoryOptions
from core.processors.base import BaseProcessor, ProcessorContext
from core.prompt import build_prompt


class MemoryTokenLimiter(BaseProcessor):
    """``options`` replace the turn's ``MemoryOptions.message_history`` when given."""

    id = "memory-token-limiter"

    def __init__(self, options: MessageHistoryOptions | None = None) -> None:
        self.options = options

    def _options(self, ctx: ProcessorContext) -> MessageHistoryOptions:
        return self.options or ctx.request.options.message_history

    def process_input(self, ctx: ProcessorContext) -> None:
        opts = self._options(ctx)
        budget = opts.max_tokens
        if budget is None:
            ctx.skip(self.id, "no token budget: message_history.max_tokens is not set")
            return
        prompt = build_prompt(ctx.messages, tokenizer=ctx.tokenizer, tools=[], skipped={}, notes={}, options={},
                              processors=[], context_window=0)
        total = prompt.total_tokens
        if total <= budget:
            ctx.skip(self.id, f"within the {budget:,}-token history budget ({total:,} tokens); nothing dropped")
            ctx.note(self.id, tokens=total, maxTokens=budget, dropped=[])
            return
        target = max(0, budget - opts.remove_tokens)
        dropped: list[str] = []
        freed = 0
        # Fragments come in prompt order, which is time order: the oldest memory message first.
        for fragment in prompt.fragments:
            if total - freed <= target:
                break
            if fragment.kind != "memory" or fragment.role == "system":
                continue
            dropped.append(str(fragment.detail["messageId"]))
            freed += fragment.tokens
        ctx.messages.remove(dropped)
        after = total - freed
        ctx.note(self.id, tokens=after, tokensBefore=total, maxTokens=budget, targetTokens=target, dropped=dropped)
        if not dropped:
            ctx.skip(self.id, f"over the {budget:,}-token history budget ({total:,} tokens) with no memory "
                              "messages to drop; the input and instructions alone exceed it")
            return
        reason = (f"over the {budget:,}-token history budget ({total:,} tokens): dropped the "
                  f"{_count(len(dropped), 'oldest memory message')} ({freed:,} tokens), down to {after:,}")
        if after > budget:
            reason += "; the input and instructions alone exceed the budget"
        elif after > target:
            reason += f"; no memory is left to reach the {target:,}-token trim target"
        else:
            reason += f" (trimmed to at most {target:,} = max_tokens - at_max_remove_tokens)"
        ctx.skip(self.id, reason)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
