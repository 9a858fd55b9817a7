"""Replay after edits: a turn that ran before a message or an observation changed rebuilds with what
its model saw then.

``as_of(source, when)`` wraps a ``ReplaySource`` (the cache of stored rows a rebuild reads) in a view
that answers ``messages(ids)`` and ``generation(row_id)`` as they stood at ``when``, from the version
tables (``core.edits``): a message edited since comes back with the text of its first version after
``when``, a message deleted since comes back from its version row, and a generation's log comes back
as it was before the first edit after ``when``. ``changed`` names every message it answered from the
past, ``"edited since"`` or ``"deleted since"``; the rebuild hands that to ``ReplayInfo.changed_since``
so viewers can mark those fragments. A prompt rebuilt *now* (``rebuild="now"``) uses the stored rows as
they are, so it shows the new text.
"""

from __future__ import annotations

import weakref
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterable

from core.edits import messages as message_edits
from core.edits import observations as observation_edits
from core.messages import Message
from core.timeutil import to_iso

if TYPE_CHECKING:  # pragma: no cover
    from core.observational.records import OMRecord
    from core.replay.frozen import ReplaySource

EDITED = "edited since"
DELETED = "deleted since"


class _Past:
    """Per ``ReplaySource``: the version history of the rows its rebuilds read, loaded once. When
    nothing changed after a turn (the usual case: no edit ever, or none since) no row is read at all."""

    def __init__(self, source: "ReplaySource") -> None:
        self.store = source.store
        self._newest: dict[str, str | None] = {}
        self.messages: dict[str, list[tuple[str, Message | None]]] = {}
        self.logs: dict[str, list[tuple[str, str]]] = {}

    def newest(self, kind: str) -> str | None:
        if kind not in self._newest:
            edits = message_edits if kind == "messages" else observation_edits
            self._newest[kind] = edits.newest_change(self.store)
        return self._newest[kind]

    def message_versions(self, ids: list[str]) -> None:
        unknown = [i for i in ids if i not in self.messages]
        if unknown:
            found = message_edits.version_rows(self.store, unknown)
            for mid in unknown:
                self.messages[mid] = found.get(mid, [])

    def log_versions(self, row_id: str) -> list[tuple[str, str]]:
        if row_id not in self.logs:
            self.logs[row_id] = observation_edits.log_versions(self.store, row_id)
        return self.logs[row_id]


_CACHE: "weakref.WeakKeyDictionary[Any, _Past]" = weakref.WeakKeyDictionary()


def _first_after(versions: list[tuple[str, Any]], when: str) -> tuple[bool, Any]:
    """(True, what it was before) for the first change after ``when``; (False, None) when none."""
    for changed_at, before in versions:
        if changed_at > when:
            return True, before
    return False, None


class SourceAsOf:
    """A ``ReplaySource`` whose messages and observation logs are those of one moment."""

    def __init__(self, source: "ReplaySource", when: datetime) -> None:
        self._source = source
        self.when = to_iso(when)
        self.changed: dict[str, str] = {}
        try:
            self._past = _CACHE[source]
        except KeyError:
            self._past = _CACHE.setdefault(source, _Past(source))

    def __getattr__(self, name: str) -> Any:  # everything else is the wrapped source's
        return getattr(self._source, name)

    def messages(self, ids: Iterable[str]) -> dict[str, Message]:
        wanted = list(dict.fromkeys(ids))
        current = self._source.messages(wanted)
        newest = self._past.newest("messages")
        if newest is None or newest <= self.when:
            return current  # nothing changed after this turn
        self._past.message_versions(wanted)
        out: dict[str, Message] = {}
        for mid in wanted:
            changed, then = _first_after(self._past.messages.get(mid, []), self.when)
            if changed:
                if then is None:
                    continue  # created (restored) after the turn: the turn never saw it
                out[mid] = then
                self.changed[mid] = EDITED if mid in current else DELETED
            elif mid in current:
                out[mid] = current[mid]
        return out

    def generation(self, row_id: str) -> "OMRecord | None":
        record = self._source.generation(row_id)
        newest = self._past.newest("observations")
        if record is None or newest is None or newest <= self.when:
            return record
        changed, log = _first_after(self._past.log_versions(row_id), self.when)
        return replace(record, active_observations=log) if changed else record


def as_of(source: "ReplaySource", when: datetime) -> SourceAsOf:
    return SourceAsOf(source, when)


def edit_reason(fragment: Any, *prompts: Any, differing: bool = False) -> str | None:
    """``"message-edited"`` / ``"message-deleted"`` when a fragment differs between two prompts because
    one of its stored messages changed after the earlier turn (``prompt_diff``'s reason), else None.

    An input fragment names no stored message; its messages are the record's input messages of the prompt
    that holds it (not the other prompt's: the previous turn's input, edited since, is not this turn's).
    ``differing``: for a fragment in one prompt only, count a message only when the two prompts answered
    it differently (changed since one turn and not the other, or one edited and one deleted); a message
    edited after both turns explains no difference between them."""
    ids = set(getattr(fragment, "stored_ids", ()) or ())
    if not ids and getattr(fragment, "source", None) == "input":
        # An input fragment names no stored message (a new input is not stored yet); a stored turn's input
        # is its record's input messages, which may have been edited since.
        home = [p for p in prompts if any(f is fragment for f in getattr(p, "fragments", ()) or ())] or prompts
        for prompt in home:
            record = getattr(getattr(prompt, "replay", None), "record", None)
            ids.update(getattr(record, "input_ids", ()) or ())
    answers = [getattr(getattr(p, "replay", None), "changed_since", None) or {} for p in prompts]
    kinds: set[str] = set()
    for i in ids:
        seen = [changed.get(i) for changed in answers]
        if differing and len(set(seen)) <= 1:
            continue  # the same answer on both sides: not why the fragment is in one prompt only
        kinds.update(str(k) for k in seen if k)
    if DELETED in kinds:
        return "message-deleted"
    return "message-edited" if EDITED in kinds else None


def thread_changed_since(source: "ReplaySource", thread_id: str, when: datetime) -> bool:
    """Whether a message of the thread was edited or deleted after ``when`` (a reconstruction, which
    queries today's rows, cannot show the old text and says so)."""
    return message_edits.thread_changed_after(source.store, thread_id, to_iso(when))


__all__ = ["DELETED", "EDITED", "SourceAsOf", "as_of", "edit_reason", "thread_changed_since"]
