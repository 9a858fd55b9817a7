"""Re-running a turn: send a (rebuilt or what-if) prompt to a model and report the reply. Never writes."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from core.errors import MemoryStudioError
from core.replay.capture import model_label

if TYPE_CHECKING:  # pragma: no cover
    from core.llm.base import ChatModel, Message
    from core.prompt import AssembledPrompt

SETTINGS = ("temperature", "max_tokens", "timeout")


class RerunError(MemoryStudioError, ValueError):
    """A re-run was asked in a way that cannot work; the message says what to change."""


@dataclass(frozen=True)
class RerunResult:
    """The new reply: its text, token figures (the model's usage, else estimates), wall time, which
    model answered, and the raw assistant message (with any tool calls it asked for, never run)."""

    text: str
    tokens_in: int
    tokens_out: int
    latency_ms: float
    model: str | None
    message: "Message"
    usage_estimated: bool = False


def rerun(prompt: "AssembledPrompt", model: "ChatModel", *,
          model_settings: Mapping[str, Any] | None = None) -> RerunResult:
    """Send ``prompt.messages`` (and its tools) to ``model``. Tool calls in the reply are reported,
    not executed, and nothing is saved: the original thread is never touched."""
    settings = dict(model_settings or {})
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise RerunError(f"Unknown model setting(s) for a re-run: {', '.join(unknown)}. "
                         f"Use {', '.join(SETTINGS)}.")
    start = time.perf_counter()
    result = model.generate(list(prompt.messages), tools=list(prompt.tools) or None, **settings)
    latency = (time.perf_counter() - start) * 1000.0
    estimated = result.usage is None
    if result.usage is not None:
        tokens_in, tokens_out = result.usage.prompt_tokens, result.usage.completion_tokens
    else:
        from core.tokens import default_tokenizer

        tokens_in, tokens_out = prompt.total_tokens, default_tokenizer().count(result.text or "")
    return RerunResult(result.text or "", int(tokens_in), int(tokens_out), latency, model_label(model),
                       result.to_assistant_message(), estimated)


__all__ = ["RerunError", "RerunResult", "SETTINGS", "rerun"]
