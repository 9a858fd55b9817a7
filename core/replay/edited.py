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
    """Per ``ReplaySource`` and turn time: what each message and generation was (None: unchanged)."""

    def __init__(self) -> None:
        self.messages: dict[tuple[str, str], Message | None | bool] = {}
        self.logs: dict[tuple[str, str], str | None] = {}


_CACHE: "weakref.WeakKeyDictionary[Any, _Past]" = weakref.WeakKeyDictionary()


class SourceAsOf:
    """A ``ReplaySource`` whose messages and observation logs are those of one moment."""

    def __init__(self, source: "ReplaySource", when: datetime) -> None:
        self._source = source
        self.when = to_iso(when)
        self.changed: dict[str, str] = {}
        try:
            self._past = _CACHE[source]
        except KeyError:
            self._past = _CACHE.setdefault(source, _Past())

    def __getattr__(self, name: str) -> Any:  # everything else is the wrapped source's
        return getattr(self._source, name)

    def _then(self, ids: list[str]) -> dict[str, Message | None]:
        """The messages among ``ids`` that changed after ``when``: as they were then."""
        unknown = [i for i in ids if (i, self.when) not in self._past.messages]
        if unknown:
            found = message_edits.rows_as_of(self._source.store, unknown, self.when)
            for mid in unknown:
                self._past.messages[(mid, self.when)] = found[mid] if mid in found else False
        out: dict[str, Message | None] = {}
        for mid in ids:
            value = self._past.messages[(mid, self.when)]
            if value is not False:
                out[mid] = value  # type: ignore[assignment]
        return out

    def messages(self, ids: Iterable[str]) -> dict[str, Message]:
        wanted = list(dict.fromkeys(ids))
        current = self._source.messages(wanted)
        past = self._then(wanted)
        out: dict[str, Message] = {}
        for mid in wanted:
            if mid in past:
                then = past[mid]
                if then is None:
                    continue  # created (restored) after the turn: the turn never saw it
                out[mid] = then
                self.changed[mid] = EDITED if mid in current else DELETED
            elif mid in current:
                out[mid] = current[mid]
        return out

    def generation(self, row_id: str) -> "OMRecord | None":
        record = self._source.generation(row_id)
        if record is None:
            return None
        key = (row_id, self.when)
        if key not in self._past.logs:
            self._past.logs[key] = observation_edits.log_as_of(self._source.store, [row_id], self.when).get(row_id)
        log = self._past.logs[key]
        return record if log is None else replace(record, active_observations=log)


def as_of(source: "ReplaySource", when: datetime) -> SourceAsOf:
    return SourceAsOf(source, when)


def edit_reason(fragment: Any, *prompts: Any) -> str | None:
    """``"message-edited"`` / ``"message-deleted"`` when a fragment differs between two prompts because
    one of its stored messages changed after the earlier turn (``prompt_diff``'s reason), else None."""
    ids = set(getattr(fragment, "stored_ids", ()) or ())
    kinds = {str(changed[i]) for p in prompts for changed in [getattr(getattr(p, "replay", None), "changed_since", None)
                                                              or {}] for i in ids if i in changed}
    if DELETED in kinds:
        return "message-deleted"
    return "message-edited" if EDITED in kinds else None


def thread_changed_since(source: "ReplaySource", thread_id: str, when: datetime) -> bool:
    """Whether a message of the thread was edited or deleted after ``when`` (a reconstruction, which
    queries today's rows, cannot show the old text and says so)."""
    return message_edits.thread_changed_after(source.store, thread_id, to_iso(when))


__all__ = ["DELETED", "EDITED", "SourceAsOf", "as_of", "edit_reason", "thread_changed_since"]
