"""What the Observations pane shows of background buffering, as plain data (no Qt, no I/O).

A record's buffer: the observation chunks the background observer made that the model does not see
yet (each with the messages it covers), whether a reflection is waiting to be swapped in, the
settings that decide when they are activated and when a turn waits, and the recent activity the
engine notes on the row (chunks buffered, activations, turns that blocked, failures and back-off).
Resource scope: which thread each chunk of the shared log came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from core.observational import OMRecord
from core.prompt import AssembledPrompt
from core.observational.buffer import backoff_of, events
from studio.logic.observations_layout import format_when
from studio.logic.request_layout import OBSERVER_CALL, observer_calls

NO_BUFFERING = "Background buffering is off for this record: observations are made in the turn that needs them."


@dataclass(frozen=True)
class ChunkRow:
    number: int
    covers: str  # "4 messages · 180 tokens"
    until: str  # the newest message it covers
    tokens: int  # of the observation text
    preview: str
    text: str
    created_at: str | None = None


@dataclass(frozen=True)
class EventRow:
    when: str
    what: str
    blocked: bool
    at: str | None = None


@dataclass(frozen=True)
class BufferView:
    settings: str  # how buffering is configured, in words
    status: str  # what is waiting now, in words
    chunks: list[ChunkRow]
    events: list[EventRow]
    blocked_turns: int  # turns among the recent events that waited for the observer or reflector


def _num(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _section(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    return value if isinstance(value, Mapping) else {}


def settings_text(config: Mapping[str, Any]) -> str:
    obs, refl = _section(config, "observation"), _section(config, "reflection")
    interval, threshold = _num(obs.get("bufferTokens")), _num(obs.get("messageTokens"))
    if not interval or not threshold:
        return NO_BUFFERING
    activation = obs.get("bufferActivation")
    kept = f" and keeps about {round(threshold * (1 - float(activation))):,} tokens raw" \
        if isinstance(activation, (int, float)) else ""
    block = _num(obs.get("blockAfter"))
    text = (f"Observes in the background every {interval:,} tokens; activates at {threshold:,}{kept}; a turn waits "
            f"for the observer only past {block:,} tokens." if block else
            f"Observes in the background every {interval:,} tokens; activates at {threshold:,}{kept}.")
    refl_at, refl_threshold = refl.get("bufferActivation"), _num(refl.get("observationTokens"))
    if isinstance(refl_at, (int, float)) and not isinstance(refl_at, bool) and refl_threshold:
        text += f" Reflection is prepared from {round(refl_threshold * float(refl_at)):,} log tokens."
    return text


_EVENT_TEXT: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "buffered": lambda e: f"buffered a chunk: {e.get('messages', '?')} messages, {e.get('messageTokens', 0):,} tokens",
    "activated": lambda e: f"activated {e.get('chunks', '?')} chunk(s), {e.get('messageTokens', 0):,} message tokens "
                           f"left the context" + (f"; {e['left']} still buffered" if e.get("left") else ""),
    "observed": lambda e: f"observed in the turn: {e.get('messages', '?')} messages"
                          + (f" of thread {e['thread']}" if e.get("thread") else ""),
    "reflection-buffered": lambda e: f"prepared a reflection: {e.get('from', 0):,} → {e.get('to', 0):,} tokens",
    "reflection-activated": lambda e: f"swapped in the prepared reflection (generation {e.get('generation', '?')})",
    "reflected": lambda e: f"reflected in the turn (generation {e.get('generation', '?')})",
    "reflection-dropped": lambda e: "dropped the prepared reflection: an observation it covered was edited",
    "observer-failed": lambda e: f"observer failed; retry after {format_when(e.get('retryAt'))}: {e.get('error', '')}",
    "reflector-failed": lambda e: f"reflector failed; retry after {format_when(e.get('retryAt'))}: {e.get('error', '')}",
}


def event_rows(record: OMRecord) -> list[EventRow]:
    """Newest first."""
    rows = []
    for e in reversed(events(record.studio)):
        kind = str(e.get("kind") or "")
        describe = _EVENT_TEXT.get(kind)
        text = describe(e) if describe is not None else kind
        blocked = bool(e.get("blocked"))
        if blocked:
            text += " — the turn waited"
        rows.append(EventRow(format_when(e.get("at")), text, blocked, e.get("at")))
    return rows


# A table cell cannot draw the priority emoji (no colour-emoji font on most Linux set-ups): words instead.
_MARK_WORDS = {"🔴": "[high]", "🟡": "[medium]", "🟢": "[low]", "✅": "[done]"}


def plain_marks(text: str) -> str:
    for mark, word in _MARK_WORDS.items():
        text = text.replace(mark, word)
    return text


def chunk_rows(record: OMRecord) -> list[ChunkRow]:
    rows = []
    for n, chunk in enumerate(record.buffered, start=1):
        body = [ln.strip().lstrip("*- ").strip() for ln in plain_marks(chunk.observations).splitlines()
                if ln.strip() and not ln.strip().startswith("Date:")]
        preview = " · ".join(body) if body else plain_marks(chunk.observations).strip()
        rows.append(ChunkRow(n, f"{len(chunk.message_ids)} messages · {chunk.message_tokens:,} tokens",
                             format_when(chunk.last_observed_at), chunk.token_count,
                             preview if len(preview) <= 160 else preview[:159] + "…", plain_marks(chunk.observations),
                             chunk.created_at))
    return rows


def status_text(record: OMRecord) -> str:
    parts = []
    chunks = record.buffered
    if chunks:
        parts.append(f"{len(chunks)} chunk(s) buffered, covering {sum(c.message_tokens for c in chunks):,} message "
                     "tokens; not shown to the model until activated.")
    else:
        parts.append("Nothing buffered.")
    if record.buffered_reflection:
        parts.append(f"A reflection is ready ({record.buffered_reflection_tokens:,} tokens), swapped in when the log "
                     "reaches its threshold.")
    if record.is_buffering_observation:
        parts.append("The observer is running in the background.")
    if record.is_buffering_reflection:
        parts.append("The reflector is running in the background.")
    for which in ("observer", "reflector"):
        backoff = backoff_of(record.studio, which)
        if backoff is not None:
            parts.append(f"The {which} failed {backoff.failures}×; next try after {format_when(backoff.retry_at)}.")
    return " ".join(parts)


def turn_activity(records: list[OMRecord], at: str | None) -> str:
    """What background buffering did at one turn (its clock reading ``at``, as the turn record and
    the row's events both carry it): "activated 2 buffered chunk(s); the turn did not wait"..."""
    if not at:
        return ""
    done = []
    for record in records:
        for e in events(record.studio):
            if e.get("at") != at:
                continue
            kind = e.get("kind")
            if kind == "activated":
                done.append(f"activated {e.get('chunks', '?')} buffered chunk(s)")
            elif kind == "observed":
                done.append("observed in the turn")
            elif kind == "reflection-activated":
                done.append("swapped in the prepared reflection")
            elif kind == "reflected":
                done.append("reflected in the turn")
            else:
                continue
            done.append("the turn waited for it" if e.get("blocked") else "the turn did not wait")
    return "; ".join(done)


def prompt_buffer_note(notes: Mapping[str, Any]) -> str | None:
    """The inspector's line about observational memory for a previewed turn (None when there is nothing
    to say): what waits in the buffer, outside this prompt, what the turn would activate or observe, and
    why it would not (an observer or reflector backing off after a failure), buffered or not."""
    om = _section(notes, "observational-memory")
    buffer = _section(om, "buffer") if om.get("buffering") else {}
    parts = []
    if buffer.get("chunks"):
        parts.append(f"{buffer['chunks']} observation chunk(s) buffered in the background "
                     f"({int(buffer.get('messageTokens') or 0):,} message tokens), not in this prompt")
    for key in ("activation", "observation", "reflection", "observationError", "reflectionError"):
        if isinstance(om.get(key), str):
            parts.append(om[key])
    if not parts:
        return None
    return "Observational memory: " + "; ".join(parts) + "."


#: How many of the messages an observation would take out of the window the notice names.
OBSERVE_FIRST_LISTED = 5


def next_turn_notice(prompt: AssembledPrompt) -> str | None:
    """The preview's notice when the next turn calls the observer or the reflector before its own model
    call, or swaps in a prepared reflection (None when it does none of these): the prompt the turn sends
    will differ from the one shown. For an observation: how many messages leave the window and which,
    and that observations are added; for a reflection: that the observations shown are replaced."""
    om = _section(prompt.notes, "observational-memory")
    parts = [p for p in (_observe_first(prompt, _section(om, "observeFirst")),
                         _reflect_first(_section(om, "reflectFirst"))) if p]
    return "Not the exact prompt: the next turn will first " + " Then it will ".join(parts) if parts else None


def _reflect_first(first: Mapping[str, Any]) -> str | None:
    how = first.get("how")
    if how not in ("swap", "wait", "reflect"):
        return None
    size = f"(the log holds {int(first.get('tokens') or 0):,} tokens ≥ {int(first.get('threshold') or 0):,})"
    if how == "swap":
        return (f"swap in the reflection prepared in the background {size}: the observations shown here are "
                "replaced by it.")
    wait = "wait for the background reflector and swap in what it prepared, or else " if how == "wait" else ""
    return (f"{wait}reflect {size} with the reflector model, which this preview does not call: the observations "
            "shown here are replaced by its rewrite.")


def observed_first(prompt: AssembledPrompt) -> tuple[str, ...]:
    """The stored messages the next turn will first observe (and so take out of the window) before its own model
    call, in the order it takes them: the preview's ``observeFirst`` note, empty when there is none (a past turn
    rebuilt, a turn under the threshold)."""
    first = _section(_section(prompt.notes, "observational-memory"), "observeFirst")
    return tuple(str(i) for i in first.get("messages") or ())


#: The roles of the fragments that hold the messages an observation takes (not an observation block's).
MESSAGE_ROLES = ("user", "assistant", "tool")


def _observe_first(prompt: AssembledPrompt, first: Mapping[str, Any]) -> str | None:
    ids = list(observed_first(prompt))
    # Synchronous observation takes the message being sent too, and keeps it (and, as Mastra 1.71 does, the reply of
    # a turn that observed its own message) in the prompt: observed, yet not leaving the window.
    said, kept = list(first.get("input") or ()), list(first.get("kept") or ())
    if not ids and not said and not kept:
        return None
    shown = {i: f for f in prompt.fragments for i in f.stored_ids if f.role in MESSAGE_ROLES}
    named = []
    for i in ids[:OBSERVE_FIRST_LISTED]:
        f = shown.get(i)
        text = " ".join(f.text.split()) if f is not None else ""
        named.append(f"{f.role} “{text[:60]}{'…' if len(text) > 60 else ''}”" if f is not None
                     else f"{i[:8]} (another conversation of this resource)")
    more = f" and {len(ids) - OBSERVE_FIRST_LISTED} more" if len(ids) > OBSERVE_FIRST_LISTED else ""
    wait = "wait for the background observer, then " if first.get("waitsForBackground") else ""
    stays = [w for w, n in (("the message being sent", said), ("the reply before it", kept)) if n]
    going = ("those messages leave the window and " if not stays else f"{len(ids)} of them leave the window and "
             if ids else "")
    kept_said = (f" ({' and '.join(stays)} {'stay' if len(stays) > 1 else 'stays'} in the prompt, observed as well)"
                 if stays else "")
    return (f"{wait}observe {len(ids) + len(said) + len(kept)} message(s) "
            f"({int(first.get('tokens') or 0):,} tokens) with the observer model, which this preview does not "
            f"call{_batches_said(first)}. The prompt it sends will differ here: {going}"
            f"the observations made of them are added{kept_said}."
            + (f" Would go: {'; '.join(named)}{more}." if ids else ""))


def _batches_said(first: Mapping[str, Any]) -> str:
    """How the observation is cut into calls (``max_tokens_per_batch``, the observer's window), and where the first
    call's request is shown; empty when the preview has none."""
    batches = [int(n) for n in first.get("batches") or ()]
    request = _section(first, "firstRequest")
    if not batches or not request:
        return ""
    window = request.get("window")
    fitted = f", each fitted to its {int(window):,}-token context window" if window else ""
    calls, about = observer_calls(first)
    shown = f"under Request: “{OBSERVER_CALL} 1 of {about}{calls}”"
    if calls == 1:
        return f" (one call; its request, exactly as sent, is {shown})"
    more = calls - 1
    return (f", in {about}{calls} calls of at most {int(request.get('maxTokensPerBatch') or 0):,} message tokens"
            f"{fitted}: the first takes {batches[0]} message(s) ({int(request.get('messageTokens') or 0):,} tokens), "
            f"its request, exactly as sent, is {shown}; {about}{more} more batch{'es' if more != 1 else ''} after "
            "this one, each made from the observations the one before stored"
            + (" (their number is a forecast: each fits what the observations stored before it leave room for)"
               if about else ""))


def buffer_view(record: OMRecord) -> BufferView:
    rows = event_rows(record)
    return BufferView(settings_text(record.config), status_text(record), chunk_rows(record), rows,
                      sum(1 for r in rows if r.blocked))


__all__ = ["MESSAGE_ROLES", "NO_BUFFERING", "BufferView", "ChunkRow", "EventRow", "buffer_view", "chunk_rows", "event_rows",
           "next_turn_notice", "observed_first", "prompt_buffer_note", "settings_text", "status_text", "turn_activity"]
