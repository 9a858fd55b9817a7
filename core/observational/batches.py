"""How a backlog of unobserved messages is cut into observer calls (Mastra's ``maxTokensPerBatch``).

A batch is whole messages, oldest first, of at most ``max_tokens_per_batch`` unobserved-message
tokens (``messages_tokens``, the count the thresholds use); a single message larger than that goes
alone. When the observer's context window is known (a ``PromptBudget`` from ``core.context_window``),
the whole request must also fit its ``prompt_limit`` (the window less the reply kept free and the
tokenizer slack): the instructions, the tail of the observations so far, the thread's hints and the
history message. The tail is then cut to at most half of what the rest of the request leaves (or
``previous_observer_tokens``, when smaller), so the messages always keep room. A single message that
does not fit even so goes alone, cut to fit (``_cut_to_fit``: its beginning and its end, with a line in
its middle saying how much the observer does not see); the stored message stays whole. Only when the
instructions alone are over the window is the request over it, and the server's refusal says so
(``jobs._context_not_fitted``).

``plan`` cuts the whole backlog from the state given; a caller sends its first call, stores the
result, and plans again from the stored state (the log and hints the next call is built from).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from core.observational.tokens import count_text, messages_tokens, observer_text
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
    # Characters of a single message over the observer's window that its request leaves out (``_cut_to_fit``).
    left_out: int = 0


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
            if batch and _ends_call(used, estimate, cost, max_tokens, room):
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
        left_out = 0
        if budget is not None and counted > budget.prompt_limit:  # a single message over the window
            request, counted, left_out = _cut_to_fit(batch[0], tail, build, tokenizer, budget)
        calls.append(ObserverCall(tuple(batch), request, used, counted, left_out))
        at += len(batch)
    return calls


def calls_left(rest: Sequence["Message"], *, cost: Callable[["Message"], int], build: BuildRequest,
               tokenizer: "Tokenizer", max_tokens: int, budget: "PromptBudget | None",
               previous_tokens: int | None) -> tuple[int, bool]:
    """How many observer calls ``rest`` (oldest first) takes after the call being made, counted without building
    their requests (``cost``: a message's ``messages_tokens``), and whether that is exact.

    Without a window it is: ``plan`` cuts by ``max_tokens`` alone, whatever the log holds. With one, each call's
    room depends on the observations stored before it, which the calls before it write: not known yet. The count
    then assumes the room the requests keep once the log fills the tail they show (the log grows with every call;
    a plan from the log as it is now counted too few calls for a long backlog, 18 for 39). A forecast: a call may
    fit more or fewer messages than it assumes (``_longest_fitting``), so the count can move as the calls go."""
    room = None
    if budget is not None:  # (the tail as ``_tail_tokens`` caps it, without building the requests that show it)
        bare = request_tokens(tokenizer, build([], 0))
        room = budget.prompt_limit - bare - _capped_tail(budget, bare, previous_tokens)[1]
    calls = used = estimate = 0
    for msg in rest:
        size = cost(msg)
        if calls and _ends_call(used, estimate, size, max_tokens, room):
            calls, used, estimate = calls + 1, 0, 0
        elif not calls:
            calls = 1
        used += size
        estimate += size + _LABEL_TOKENS
    return calls, budget is None


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


def _cut_to_fit(msg: "Message", tail: int | None, build: BuildRequest, tokenizer: "Tokenizer",
                budget: "PromptBudget") -> tuple[list[dict[str, Any]], int, int]:
    """The request of ``msg`` alone (over ``budget``'s limit whole) with the message's text cut to fit: its first
    two thirds and last third of what fits kept (a pasted document's question is often at its end), and a line in
    their place saying how many characters the observer does not see and that the message is kept whole. The most
    characters that fit, by a binary search started from the text's own characters per token. Returns the request,
    its tokens and the characters left out (all of them when the instructions alone are over the limit)."""
    text = observer_text(msg) or "[empty message]"
    limit = budget.prompt_limit

    def attempt(kept: int) -> tuple[list[dict[str, Any]], int]:
        head, end = _cut_points(text, kept)
        shown = (f"{text[:head]}\n[… {end - head:,} characters of this message are left out here: the whole message "
                 f"is over the observer's {budget.context_window:,}-token context window. It is kept as it is in the "
                 f"conversation's history.]\n{text[end:]}").strip()
        request = build([msg.copy(content={"format": 2, "parts": [{"type": "text", "text": shown}]})], tail)
        return request, request_tokens(tokenizer, request)

    fits, over = 0, len(text)  # ``over`` is known not to fit (the whole message); ``fits`` is taken either way
    found: tuple[list[dict[str, Any]], int] | None = None
    bare = request_tokens(tokenizer, build([], tail))
    per_token = len(text) / max(1, count_text(tokenizer, text))
    # The first try: a little over what fits, most often, so the search runs over short texts from there on.
    guess: int | None = min(over - 1, int(max(0, limit - bare) * per_token * 1.25) + 16)
    while over - fits > 1:
        mid = guess if guess is not None and fits < guess < over else (fits + over) // 2
        guess = None
        request, counted = attempt(mid)
        if counted <= limit:
            fits, found = mid, (request, counted)
        else:
            over = mid
    if found is None:
        found = attempt(fits)
    head, end = _cut_points(text, fits)
    return found[0], found[1], end - head


def _cut_points(text: str, kept: int) -> tuple[int, int]:
    """Where ``text`` cut to ``kept`` characters ends its beginning (two thirds) and starts its end (one third),
    each moved to a space near it."""
    return _at_space(text, kept - kept // 3, back=True), _at_space(text, len(text) - kept // 3, back=False)


def _at_space(text: str, at: int, *, back: bool) -> int:
    """``at`` moved to the nearest whitespace within a few characters (back for where the kept beginning ends,
    forward for where the kept end starts), so a cut falls between words; ``at`` itself when there is none."""
    if at <= 0 or at >= len(text) or text[at - 1].isspace() or text[at].isspace():
        return at
    near = text.rfind(" ", max(0, at - 40), at) if back else text.find(" ", at, at + 40)
    return at if near < 0 else near if back else near + 1


def _ends_call(used: int, estimate: int, size: int, max_tokens: int, room: int | None) -> bool:
    """Whether a message of ``size`` tokens starts the next call, after messages of ``used`` tokens (``estimate``
    with their labels) in this one: over ``max_tokens``, or over the ``room`` the window leaves the messages."""
    return used + size > max_tokens or (room is not None and estimate + size + _LABEL_TOKENS > room)


def _capped_tail(budget: "PromptBudget", bare: int, previous_tokens: int | None) -> tuple[int, int]:
    """Half of what a request without messages or observations (``bare`` tokens) leaves of the window, and the
    observations' tail capped to it (``previous_tokens`` when smaller)."""
    half = max(0, (budget.prompt_limit - bare) // 2)
    return half, half if previous_tokens is None else min(previous_tokens, half)


def _tail_tokens(build: BuildRequest, tokenizer: "Tokenizer", budget: "PromptBudget | None",
                 previous_tokens: int | None) -> int | None:
    """How much of the observations so far the requests show: as configured without a window; with
    one, at most half of what the request without them leaves."""
    if budget is None:
        return previous_tokens
    bare = request_tokens(tokenizer, build([], 0))
    half, tail = _capped_tail(budget, bare, previous_tokens)
    for _ in range(3):  # the tail's heading and closing words count too: cut it until the whole section fits
        over = request_tokens(tokenizer, build([], tail)) - bare - half
        if over <= 0 or tail == 0:
            break
        tail = max(0, tail - over)
    return tail


__all__ = ["ObserverCall", "calls_left", "plan", "request_tokens"]
