"""Background buffering's rules, as plain functions: which buffered chunks an activation takes, how
long a failed model call backs off, and the small event log the Studio shows (no I/O here).

Vocabulary (Mastra's): a *chunk* is one observation made in the background and kept out of the
context; *activation* appends a prefix of the chunks to the log the model sees and moves the thread's
cursor past the messages they cover. The chunk list always continues right after the cursor, so a
single cursor per thread stays enough.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping, Sequence

from core.observational.records import BufferedChunk, append_chunk, split_chunks
from core.timeutil import parse_iso, to_iso

#: First wait after a failed observer or reflector call; doubles per failure up to ``BACKOFF_MAX``.
BACKOFF_BASE = timedelta(seconds=30)
BACKOFF_MAX = timedelta(minutes=30)
#: Events kept in the row's metadata for the Studio (newest last).
MAX_EVENTS = 20
#: A failure's words kept in a back-off and in its event: whole, up to this many characters. A model error's
#: hint and a cut-off reply's reason end with what to do, which a shorter cap (500 and 300 before) cut away.
MAX_ERROR_CHARS = 2_000
#: Hint writes kept in a row's metadata (``hints``) for record-less rebuilds: at most this many, and
#: the oldest dropped while their texts exceed ``MAX_HINT_CHARS`` (the newest is always kept).
MAX_HINTS = 20
MAX_HINT_CHARS = 16_000
_HINT_KEYS = ("currentTask", "suggestedResponse")


def activation_count(chunks: Sequence[BufferedChunk], pending_tokens: int, retained_tokens: int, *,
                     force: bool = False) -> int:
    """How many chunks (a prefix) to activate so that about ``retained_tokens`` of the pending
    message tokens stay raw. At least one chunk when any exist; all of them when ``force`` (a turn
    past ``block_after`` takes everything that is ready)."""
    if not chunks:
        return 0
    if force:
        return len(chunks)
    target = max(0, pending_tokens - retained_tokens)
    taken, count = 0, 0
    for chunk in chunks:
        if count and taken + chunk.message_tokens > target:
            break
        taken += chunk.message_tokens
        count += 1
    return count


def activated_log(active: str, chunks: Sequence[BufferedChunk]) -> str:
    """The log with ``chunks`` appended, each after a boundary line naming the cursor it covers."""
    for chunk in chunks:
        active = append_chunk(active, chunk.observations, chunk.last_observed_at)
    return active


@dataclass(frozen=True)
class Backoff:
    failures: int
    retry_at: str
    error: str

    def active(self, now: datetime) -> bool:
        try:
            return parse_iso(self.retry_at) > now
        except ValueError:
            return False


def backoff_of(studio: Mapping[str, Any], which: str) -> Backoff | None:
    """The back-off a row records for ``which`` ("observer" / "reflector"), if any."""
    data = studio.get(f"{which}Backoff")
    if not isinstance(data, Mapping) or not data.get("retryAt"):
        return None
    return Backoff(int(data.get("failures") or 1), str(data["retryAt"]), str(data.get("error") or ""))


def next_backoff(previous: Backoff | None, error: str, now: datetime) -> Backoff:
    failures = (previous.failures if previous is not None else 0) + 1
    wait = min(BACKOFF_BASE * (2 ** (failures - 1)), BACKOFF_MAX)
    return Backoff(failures, to_iso(now + wait), kept_error(error))


def kept_error(error: str) -> str:
    """``error`` as a row keeps it: whole up to ``MAX_ERROR_CHARS``, else cut there and marked so."""
    if len(error) <= MAX_ERROR_CHARS:
        return error
    return error[:MAX_ERROR_CHARS - 1].rstrip() + "…"


def with_event(studio: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
    """``studio`` metadata with ``event`` appended to its event list (the newest ``MAX_EVENTS`` kept)."""
    out = dict(studio)
    events = [e for e in (out.get("events") or []) if isinstance(e, Mapping)]
    out["events"] = [*events, dict(event)][-MAX_EVENTS:]
    return out


def with_appended(studio: Mapping[str, Any], active: str, at: str, cursor: str | None) -> dict[str, Any]:
    """``studio`` metadata noting that from ``at`` on the log held ``len(chunks)`` chunks covering
    messages up to ``cursor``: a turn rebuilt without a record then shows only the chunks that
    existed at its time (activation appends chunks whose boundary is older than the turn that
    activated them, so boundaries alone would date them too early)."""
    out = dict(studio)
    marks = [m for m in (out.get("appended") or []) if isinstance(m, list) and len(m) == 3]
    marks.append([len(split_chunks(active)), at, cursor])
    out["appended"] = marks
    return out


def chunks_at(studio: Mapping[str, Any], cutoff: str) -> tuple[int, str | None] | None:
    """(chunks, cursor) of the log up to ``cutoff`` (a turn's next stored message: a mark at that
    very millisecond is the turn's own, written in its input phase before its reply was stamped)
    per the ``appended`` marks; None when the row has no marks (older rows, Mastra's: the caller
    dates chunks by their boundaries)."""
    marks = [m for m in (studio.get("appended") or []) if isinstance(m, list) and len(m) == 3]
    if not marks:
        return None
    before = [(int(n), cursor) for n, at, cursor in marks if isinstance(at, str) and at <= cutoff]
    return max(before, key=lambda m: m[0]) if before else (0, None)


def hints_written_at(studios: Sequence[Mapping[str, Any]], cursor: str) -> str | None:
    """When the thread's hints whose cursor is ``cursor`` were written, per the ``appended`` marks of
    ``studios`` (the rows of one log, every generation): the first mark naming that cursor. An
    activation or observation writes the hints, the log and its mark in one transaction, and each
    moves the cursor on; a later reflection's mark names the same cursor but writes no hints. None
    when no mark names it (rows written before marks, Mastra's)."""
    ats = [at for studio in studios for m in (studio.get("appended") or [])
           if isinstance(m, list) and len(m) == 3 and m[2] == cursor and isinstance(at := m[1], str)]
    return min(ats) if ats else None


def _hint_values(values: Mapping[str, Any] | None) -> dict[str, str]:
    """The prompt's hints among ``values`` (a thread's ``mastra.om``): the non-blank texts only."""
    return {k: v for k in _HINT_KEYS
            if isinstance(values, Mapping) and isinstance(v := values.get(k), str) and v.strip()}


def _hint_entries(studio: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(e) for e in (studio.get("hints") or [])
            if isinstance(e, Mapping) and isinstance(e.get("at"), str) and isinstance(e.get("thread"), str)]


def _hint_chars(entry: Mapping[str, Any]) -> int:
    before = entry.get("before")
    return sum(len(v) for v in _hint_values(entry).values()) + sum(len(v) for v in _hint_values(before).values())


def with_hints(studio: Mapping[str, Any], at: str, thread_id: str, before: Mapping[str, Any] | None,
               after: Mapping[str, Any] | None) -> dict[str, Any]:
    """``studio`` metadata noting that at ``at`` an activation or observation left ``thread_id``'s
    hints (current task, suggested response) as ``after`` (the thread's ``mastra.om`` once written).
    The first entry a row keeps for a thread also holds the hints it replaced (``before``), so a turn
    older than every kept entry is still known. Bounded: ``MAX_HINTS`` entries and ``MAX_HINT_CHARS``
    of text; an entry dropped passes its hints on as the ``before`` of its thread's next entry."""
    out = dict(studio)
    entries = _hint_entries(out)
    entry: dict[str, Any] = {"at": at, "thread": thread_id, **_hint_values(after)}
    if not any(e["thread"] == thread_id for e in entries):
        entry["before"] = _hint_values(before)
    entries.append(entry)
    while len(entries) > 1 and (len(entries) > MAX_HINTS or sum(map(_hint_chars, entries)) > MAX_HINT_CHARS):
        dropped = entries.pop(0)
        following = next((e for e in entries if e["thread"] == dropped["thread"]), None)
        if following is not None:
            following["before"] = _hint_values(dropped)
    out["hints"] = entries
    return out


@dataclass(frozen=True)
class HintsThen:
    """A thread's hints at a past time per the rows' ``hints`` entries: ``values`` (``currentTask``,
    ``suggestedResponse``); ``newest`` the hints the newest entry wrote (what the thread holds unless
    another program wrote them since); ``last`` whether ``values`` are the newest entry's."""

    values: dict[str, str]
    newest: dict[str, str]
    last: bool


def hints_then(studios: Sequence[Mapping[str, Any]], thread_id: str, end: str) -> HintsThen | None:
    """The hints ``thread_id`` had up to ``end`` (a write at ``end`` counts: a turn writes in its
    input phase, before its reply is stamped, and no later than that stamp), per the ``hints``
    entries of ``studios`` (the rows of one log). None when no row holds an entry for the thread
    (rows written before the entries, Mastra's): the caller dates the hints otherwise."""
    entries = sorted((e for studio in studios for e in _hint_entries(studio) if e["thread"] == thread_id),
                     key=lambda e: e["at"])
    if not entries:
        return None
    newest = _hint_values(entries[-1])
    before = [e for e in entries if e["at"] <= end]
    if before:
        return HintsThen(_hint_values(before[-1]), newest, len(before) == len(entries))
    first = entries[0]
    if not isinstance(first.get("before"), Mapping):
        return None
    return HintsThen(_hint_values(first["before"]), newest, False)


def events(studio: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(e) for e in (studio.get("events") or []) if isinstance(e, Mapping)]


__all__ = [
    "BACKOFF_BASE",
    "BACKOFF_MAX",
    "MAX_ERROR_CHARS",
    "MAX_EVENTS",
    "MAX_HINTS",
    "MAX_HINT_CHARS",
    "Backoff",
    "HintsThen",
    "activated_log",
    "activation_count",
    "backoff_of",
    "chunks_at",
    "events",
    "hints_then",
    "hints_written_at",
    "kept_error",
    "next_backoff",
    "with_appended",
    "with_event",
    "with_hints",
]
