"""Fitting a prompt into the model's context window, before anything is sent.

A model that says its window (``OpenAICompatibleModel(context_window=N)``, ``ScriptedModel(...,
context_window=N)``) gets a ``PromptBudget``: the window, and the tokens kept free for the reply
(``model_settings`` ``max_tokens``, else ``DEFAULT_REPLY_RESERVE`` capped at a quarter of the window).
When the assembled prompt plus that reply budget is over the window, memory is dropped in this
order until it fits: the oldest history messages, then recall (same-thread messages, oldest first,
then the other-threads block), then other memory system messages, then observational memory (the
other-conversations block, then the log's chunks oldest first; the last chunk goes with the header,
the task hints and the continuation reminder, so observations are never sent without what says what
they are), then working memory. Each drop is recorded as the ``context-window`` skip reason and
note, so the prompt record, the trace and the Studio show it. What cannot be dropped (instructions, the input, call-time
context, this turn's tool results, tool definitions) raises ``ContextWindowError`` when it alone
does not fit: the request is never sent.

Counts come from the engine's tokenizer (``o200k_base``), not the server's: the server's chat
template adds tokens per message, and a model with a smaller vocabulary needs more tokens for the
same text (SmolLM2 behind llama.cpp counted 2,049 for a prompt we counted as 2,024). So a tenth of
the window (``TOKENIZER_SLACK``) is kept free as well. A server's own overflow error still gets a
hint naming its context size (``core.llm.openai_compatible``); a smaller ``context_window`` leaves
more room.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from core.errors import MemoryStudioError
from core.message_list import MessageList, SystemEntry
from core.prompt import AssembledPrompt, Fragment

__all__ = ["CONTEXT_WINDOW_ID", "ContextWindowError", "DEFAULT_REPLY_RESERVE", "PromptBudget", "TOKENIZER_SLACK",
           "fit_prompt"]

#: The key of the skip reason and note that record what was dropped to fit the window.
CONTEXT_WINDOW_ID = "context-window"
#: Tokens kept free for the reply when no ``max_tokens`` is set (at most a quarter of the window).
DEFAULT_REPLY_RESERVE = 1024
#: The share of the window kept free for tokenizer differences between the engine and the server.
TOKENIZER_SLACK = 0.10

_TIER_LABELS = {
    "history": "history",
    "recall": "recall",
    "memory": "other memory",
    "observations": "observational memory",
    "working-memory": "working memory",
}


class ContextWindowError(MemoryStudioError, ValueError):
    """The prompt cannot fit the model's context window, even with every memory message dropped.

    Raised before any request is sent. ``prompt_tokens`` / ``reply_tokens`` / ``context_window``
    say by how much.
    """

    def __init__(self, message: str, *, prompt_tokens: int, reply_tokens: int, context_window: int,
                 model_id: str) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.reply_tokens = reply_tokens
        self.context_window = context_window
        self.model_id = model_id


@dataclass(frozen=True)
class PromptBudget:
    """What a prompt may use: ``context_window`` tokens, minus ``reply_tokens`` kept for the reply and
    ``slack`` kept for tokenizer differences (``for_model``: a tenth of the window).

    ``reply_source`` says where ``reply_tokens`` came from ("max_tokens" or "default reserve").
    """

    context_window: int
    reply_tokens: int
    model_id: str = "the model"
    reply_source: str = "default reserve"
    slack: int = 0

    @classmethod
    def for_model(cls, context_window: int, *, max_tokens: int | None, model_id: str) -> PromptBudget:
        if not isinstance(context_window, int) or isinstance(context_window, bool) or context_window < 1:
            raise ContextWindowError(
                f"{model_id}: context_window must be a positive number of tokens, got {context_window!r}.",
                prompt_tokens=0, reply_tokens=0, context_window=0, model_id=model_id)
        slack = int(context_window * TOKENIZER_SLACK)
        if max_tokens is not None:
            if max_tokens + slack >= context_window:
                raise ContextWindowError(
                    f"{model_id}: max_tokens {max_tokens:,} leaves no room for a prompt in the "
                    f"{context_window:,}-token context window ({slack:,} of it kept for tokenizer differences). "
                    "Lower max_tokens in model_settings.",
                    prompt_tokens=0, reply_tokens=max_tokens, context_window=context_window, model_id=model_id)
            return cls(context_window, max_tokens, model_id, "max_tokens", slack)
        return cls(context_window, min(DEFAULT_REPLY_RESERVE, context_window // 4), model_id, slack=slack)

    @property
    def prompt_limit(self) -> int:
        return self.context_window - self.reply_tokens - self.slack

    def describe(self) -> str:
        kept = "max_tokens" if self.reply_source == "max_tokens" else "reserved"
        slack = f", {self.slack:,} for tokenizer differences" if self.slack else ""
        return (f"{self.model_id}'s {self.context_window:,}-token context window "
                f"({self.reply_tokens:,} {kept} for the reply{slack})")


def fit_prompt(
    ml: MessageList, build: Callable[[], AssembledPrompt], budget: PromptBudget,
    skipped: dict[str, str], notes: dict[str, dict[str, Any]], *, observations_whole: bool = True,
) -> AssembledPrompt:
    """``build()``'s prompt, with memory dropped from ``ml`` until it fits ``budget``.

    ``observations_whole`` (default): observational memory is dropped as framed units (below). False
    fits it as turns recorded before that rule were fitted (each of its system messages with the other
    memory system messages, then its reminder with history), so such a turn rebuilds exactly.

    Drops accumulate in ``notes["context-window"]`` across the calls of one turn (a tool loop
    re-fits a growing prompt), and ``skipped["context-window"]`` says all of them in words.
    """
    # A fresh note each time: the records of earlier model calls keep what they were sent with.
    earlier = notes.get(CONTEXT_WINDOW_ID, {})
    note: dict[str, Any] = {"dropped": {k: list(v) for k, v in earlier.get("dropped", {}).items()},
                            "droppedTokens": dict(earlier.get("droppedTokens", {})),
                            "contextWindow": budget.context_window, "replyTokens": budget.reply_tokens}
    notes[CONTEXT_WINDOW_ID] = note
    prompt = build()
    over = prompt.total_tokens - budget.prompt_limit
    if over > 0:
        freed = _drop(ml, prompt, over, note, observations_whole)
        if freed:
            skipped[CONTEXT_WINDOW_ID] = _reason(note, budget)
            prompt = build()
    if prompt.total_tokens > budget.prompt_limit:
        raise ContextWindowError(_too_big(prompt, budget), prompt_tokens=prompt.total_tokens,
                                 reply_tokens=budget.reply_tokens, context_window=budget.context_window,
                                 model_id=budget.model_id)
    return prompt


def _drop(ml: MessageList, prompt: AssembledPrompt, over: int, note: dict[str, Any],
          observations_whole: bool = True) -> int:
    """Remove memory from ``ml``, cheapest tier first, until ``over`` tokens are freed.

    Each candidate is a unit dropped whole. Observational memory's view is fitted as one piece
    (``_observation_units``): its chunks go oldest first, and the last chunk takes the header that
    says what the notes are, the task hints and the continuation reminder with it, so the model never
    receives observations without what frames them (nor the framing without observations)."""
    systems = ml.system_entries()
    candidates: dict[str, list[list[tuple[Fragment, SystemEntry | None]]]] = {t: [] for t in _TIER_LABELS}
    observational: list[tuple[Fragment, SystemEntry | None]] = []
    for f in prompt.fragments:
        framing_or_log = f.role == "system" or f.detail.get("part") == "continuation"
        if observations_whole and f.source == _OM_ID and f.kind == "memory" and framing_or_log:
            entry = systems[f.index] if f.role == "system" and f.index < len(systems) else None
            observational.append((f, entry))
            continue
        tier, entry = _tier(f, systems)
        if tier is not None:
            candidates[tier].append([(f, entry)])
    # Within recall, same-thread messages go before the other-threads block.
    candidates["recall"].sort(key=lambda unit: unit[0][1] is not None)
    candidates["observations"] = _observation_units(observational)
    freed = 0
    conversation: list[str] = []
    system: list[SystemEntry] = []
    for tier in _TIER_LABELS:
        for unit in candidates[tier]:
            if freed >= over:
                break
            for f, entry in unit:
                label = str(f.detail.get("messageId")) if entry is None else f"system:{f.source}"
                if tier == "observations" and entry is not None:
                    label = f"{label}:{f.detail.get('part')}"  # the reason counts chunks and framing apart
                note["dropped"].setdefault(tier, []).append(label)
                note["droppedTokens"][tier] = note["droppedTokens"].get(tier, 0) + f.tokens
                freed += f.tokens
                if entry is None:
                    conversation.append(label)
                else:
                    system.append(entry)
    ml.remove(conversation)
    ml.remove_system_entries(system)
    return freed


#: Observational memory's processor id (its system blocks and its continuation reminder carry it).
_OM_ID = "observational-memory"


_Part = tuple[Fragment, "SystemEntry | None"]


def _observation_units(parts: list[_Part]) -> list[list[_Part]]:
    """Observational memory's fragments as drop units: the other-conversations block, then each chunk
    of the log oldest first, the last chunk together with everything that frames the log (the header
    and ``<observations>`` marker, the current task and suggested response, the continuation
    reminder). Its raw unobserved messages are not here: they are history, dropped with history."""
    others = [p for p in parts if p[0].detail.get("part") == "other-conversations"]
    chunks = [p for p in parts if p[0].detail.get("part") == "chunk"]
    framing = [p for p in parts if p[0].detail.get("part") not in ("chunk", "other-conversations")]
    units = [[p] for p in others]
    if chunks:
        units.extend([c] for c in chunks[:-1])
        units.append([chunks[-1], *framing])
    elif framing:
        units.append(framing)
    return units


def _tier(f: Fragment, systems: list[SystemEntry]) -> tuple[str | None, SystemEntry | None]:
    if f.role == "system":
        if f.index >= len(systems) or f.kind != "memory":
            return None, None
        entry = systems[f.index]  # system fragments come first, one per entry, in the same order
        if f.source == "working-memory":
            return "working-memory", entry
        return ("recall" if f.source == "semantic-recall" else "memory"), entry
    if f.kind != "memory" or "messageId" not in f.detail:
        return None, None
    return ("recall" if f.source == "semantic-recall" else "history"), None


def _reason(note: dict[str, Any], budget: PromptBudget) -> str:
    parts = []
    for tier, label in _TIER_LABELS.items():
        dropped = note["dropped"].get(tier)
        if not dropped:
            continue
        tokens = note["droppedTokens"][tier]
        if tier == "observations":
            parts.append(f"{label}: {_observations_dropped(dropped)} ({tokens:,} tokens)")
            continue
        messages = sum(1 for d in dropped if not d.startswith("system:"))
        blocks = len(dropped) - messages
        what = []
        if messages:
            what.append(f"{'the oldest ' if tier == 'history' else ''}{messages} message{'s' if messages != 1 else ''}")
        if blocks:
            what.append("the system message" if blocks == 1 else f"{blocks} system messages")
        parts.append(f"{label}: {' and '.join(what)} ({tokens:,} tokens)")
    return f"dropped to fit {budget.describe()}: " + "; ".join(parts)


def _observations_dropped(labels: list[str]) -> str:
    """What the window took of observational memory, in words: its oldest chunks, the other
    conversations, or the whole view (the last chunk goes with the header, hints and reminder)."""
    chunks = sum(1 for d in labels if d.endswith(":chunk"))
    whole = any(d.endswith(":instructions") or d == "om-continuation" for d in labels)
    others = any(d.endswith(":other-conversations") for d in labels)
    what = []
    if others:
        what.append("the other conversations block")
    if whole:
        what.append(f"every observation ({chunks} chunk{'s' if chunks != 1 else ''}) with the header, "
                    "task hints and reminder that frame them")
    elif chunks:
        what.append(f"the oldest {chunks} chunk{'s' if chunks != 1 else ''} of observations")
    return " and ".join(what) or f"{len(labels)} part{'s' if len(labels) != 1 else ''}"


def _too_big(prompt: AssembledPrompt, budget: PromptBudget) -> str:
    by_source: dict[str, int] = {}
    for f in prompt.fragments:
        key = "tools" if f.kind == "tools" else f.source
        by_source[key] = by_source.get(key, 0) + f.tokens
    names = {"instructions": "instructions", "input": "input", "context": "context",
             "response": "this turn's replies and tool results", "tools": "tool definitions"}
    shown = [f"{names.get(src, src)} {n:,}" for src, n in sorted(by_source.items(), key=lambda kv: -kv[1]) if n]
    return (f"The prompt needs {prompt.total_tokens:,} tokens ({', '.join(shown)}) with every memory message "
            f"already dropped, which does not fit {budget.describe()}. Nothing was sent. Shorten the input, "
            f"lower max_tokens in model_settings, or use a model with a larger context window (context_window=...).")
