"""How a backlog of unobserved messages is cut into observer calls (Mastra's ``maxTokensPerBatch``).

A batch is whole messages, oldest first, of at most ``max_tokens_per_batch`` unobserved-message
tokens (``messages_tokens``, the count the thresholds use); a single message larger than that goes
alone. When the observer's context window is known (a ``PromptBudget`` from ``core.context_window``),
the whole request must also fit its ``prompt_limit`` (the window less the reply kept free and the
tokenizer slack): the instructions, the tail of the observations so far, the thread's hints and the
history message. The tail is then cut to at most half of what the rest of the request leaves (or
``previous_observer_tokens``, when smaller), so the messages always keep room; a single message
that does not fit even so goes alone, and the server's refusal says so (``jobs._context_not_fitted``).

``plan`` cuts the whole backlog from the state given; a caller sends its first call, stores the
result, and plans again from the stored state (the log and hints the next call is built from).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from core.observational.tokens import count_text, messages_tokens
from core.tokens import MESSAGE_OVERHEAD

if TYPE_CHECKING:  # pragma: no cover
    from core.context_window import PromptBudget
    from core.messages import Message
    from core.tokens import Tokenizer

#: Builds an observer request for a batch with the observations' tail cut to this many tokens
#: (None: ``previous_observer_tokens`` as configured).
BuildRequest = Callable[["Sequence[Message]", "int | None"], "list[dict[str, Any]]"]

#: What the history message adds per message beyond its ``messages_tokens`` (its "User (9:14 AM):"
#: label, a day header now and then): the estimate a batch grows by before its request is counted.
_LABEL_TOKENS = 6


@dataclass(frozen=True)
class ObserverCall:
    """One observer call: the messages it observes and the request it sends (``messages``)."""

    batch: tuple["Message", ...]
    messages: list[dict[str, Any]]
    tokens: int  # ``batch``'s unobserved-message tokens (``messages_tokens``)
    request_tokens: int  # the request as the engine's tokenizer counts it (each message with its framing)


def request_tokens(tokenizer: "Tokenizer", messages: Sequence[dict[str, Any]]) -> int:
    """A chat request's tokens as a prompt counts them: each message's text plus its framing."""
    return sum(count_text(tokenizer, str(m.get("content") or "")) + MESSAGE_OVERHEAD for m in messages)


def plan(pending: Sequence["Message"], *, build: BuildRequest, tokenizer: "Tokenizer", max_tokens: int,
         budget: "PromptBudget | None", previous_tokens: int | None, limit: int | None = None) -> list[ObserverCall]:
    """``pending`` (oldest first) as observer calls, each at most ``max_tokens`` message tokens and, with a
    ``budget``, a request within its ``prompt_limit`` (see the module doc); the first ``limit`` calls only,
    when given. Empty when nothing is pending."""
    tail = _tail_tokens(build, tokenizer, budget, previous_tokens)
    room = budget.prompt_limit - request_tokens(tokenizer, build([], tail)) if budget is not None else None
    calls: list[ObserverCall] = []
    at = 0
    while at < len(pending) and (limit is None or len(calls) < limit):
        batch: list[Message] = []
        used = estimate = 0
        for msg in pending[at:]:
            cost = messages_tokens(tokenizer, [msg])
            if batch and (used + cost > max_tokens or (room is not None and estimate + cost + _LABEL_TOKENS > room)):
                break
            batch.append(msg)
            used += cost
            estimate += cost + _LABEL_TOKENS
        request = build(batch, tail)
        counted = request_tokens(tokenizer, request)
        if budget is not None and len(batch) > 1 and counted > budget.prompt_limit:
            # The estimate was short (a message's lines cost more in the history than in its count): the
            # newest wait. The longest prefix that fits, found in O(log n) requests (one message dropped a
            # request was quadratic: 2,000 messages of blank lines took seconds of CPU per observer call).
            batch, request, counted = _longest_fitting(batch, tail, build, tokenizer, budget.prompt_limit)
            used = messages_tokens(tokenizer, batch)
        calls.append(ObserverCall(tuple(batch), request, used, counted))
        at += len(batch)
    return calls


def _longest_fitting(batch: list["Message"], tail: int | None, build: BuildRequest, tokenizer: "Tokenizer",
                     limit: int) -> tuple[list["Message"], list[dict[str, Any]], int]:
    """The longest prefix of ``batch`` (whose whole request is over ``limit``) whose request fits, with that
    request and its tokens; the first message alone when none does. A request grows with its prefix (the
    history is the prefix's history plus the next lines), so a binary search finds what dropping the newest
    one at a time would."""
    fits, over = 1, len(batch)  # ``over`` is known not to fit; ``fits`` is taken whether it fits or not
    found: tuple[list[dict[str, Any]], int] | None = None
    while over - fits > 1:
        mid = (fits + over) // 2
        request = build(batch[:mid], tail)
        counted = request_tokens(tokenizer, request)
        if counted <= limit:
            fits, found = mid, (request, counted)
        else:
            over = mid
    if found is None:
        request = build(batch[:fits], tail)
        found = request, request_tokens(tokenizer, request)
    return batch[:fits], found[0], found[1]


def _tail_tokens(build: BuildRequest, tokenizer: "Tokenizer", budget: "PromptBudget | None",
                 previous_tokens: int | None) -> int | None:
    """How much of the observations so far the requests show: as configured without a window; with
    one, at most half of what the request without them leaves."""
    if budget is None:
        return previous_tokens
    bare = request_tokens(tokenizer, build([], 0))
    half = max(0, (budget.prompt_limit - bare) // 2)
    tail = half if previous_tokens is None else min(previous_tokens, half)
    for _ in range(3):  # the tail's heading and closing words count too: cut it until the whole section fits
        over = request_tokens(tokenizer, build([], tail)) - bare - half
        if over <= 0 or tail == 0:
            break
        tail = max(0, tail - over)
    return tail


__all__ = ["ObserverCall", "plan", "request_tokens"]
