"""A turn's inputs taken from its record instead of from queries: the processors' "frozen source".

When a request carries a ``FrozenTurn`` (``RequestContext.frozen``), each built-in processor takes
what it would have queried from here, and runs its own formatting code on it, so a rebuilt prompt
and a live one cannot drift apart: history gets exactly the recorded message ids, recall exactly the
recorded hits and windows, working memory the recorded version's text, observational memory the
recorded generation's log as it then was (and the hints of the time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from core.messages import Message
from core.replay import observations
from core.replay.record import TurnRecord
from core.storage import schema as t

if TYPE_CHECKING:  # pragma: no cover
    from core.observational.store import ThreadHints
    from core.observational.records import OMRecord
    from core.recall import SearchHit
    from core.storage import Store


@dataclass
class FrozenTurn:
    """What a recorded turn's processors read. ``missing``: stored rows the record names that are gone."""

    record: TurnRecord
    history: list[Message]
    hits: list["SearchHit"]
    windows: dict[str, list[Message]]
    wm_text: str | None
    wm_known: bool
    om_record: "OMRecord | None"
    om_hints: "ThreadHints"
    missing: list[str] = field(default_factory=list)

    def window(self, hit_id: str) -> list[Message]:
        return list(self.windows.get(hit_id, ()))


def _version_text(store: "Store", version_id: int) -> tuple[bool, str | None]:
    if not store.db.has_table(t.wm_versions.name):
        return False, None
    with store.db.read() as conn:
        row = conn.execute(sa.select(t.wm_versions.c.working_memory).where(t.wm_versions.c.id == version_id)).first()
    return (True, row[0]) if row is not None else (False, None)


def working_memory_text(store: "Store", record: TurnRecord) -> tuple[bool, str | None]:
    """(known, text) of the working memory a recorded turn showed."""
    if record.wm_version_id is not None:
        return _version_text(store, record.wm_version_id)
    return True, record.wm_text


def load(store: "Store", record: TurnRecord) -> FrozenTurn:
    """Load every stored row a record names, in one pass."""
    wanted = set(record.history_ids)
    for hit in record.recall:
        wanted.update(hit.window_ids)
        wanted.add(hit.message_id)
    found = {m.id: m for m in store.memory.get_messages(sorted(wanted))}
    missing = [mid for mid in sorted(wanted) if mid not in found]
    history = [found[mid] for mid in record.history_ids if mid in found]
    windows = {hit.message_id: sorted((found[w] for w in hit.window_ids if w in found),
                                      key=lambda m: (m.created_at, m.id)) for hit in record.recall}
    hits = _hits(record)
    # No version and no text: working memory was empty (or off) at that turn.
    wm_known, wm_text = working_memory_text(store, record)
    if not wm_known:
        missing.append(f"working-memory version {record.wm_version_id}")
    state = observations.recorded(store, generation_id=record.om_generation, chunks=record.om_chunks,
                                  hints=record.om_hints, unobserved=history)
    missing.extend(state.unknowns)
    missing.extend(f"text {key} named by the record" for key in record.unresolved)
    return FrozenTurn(record, history, hits, windows, wm_text, wm_known, state.record, state.hints, missing)


def _hits(record: TurnRecord) -> list[Any]:
    if not record.recall:
        return []
    from core.recall import SearchHit

    out = []
    for h in record.recall:
        source = "hybrid" if h.vector is not None and h.keyword is not None else "keyword" if h.vector is None else "vector"
        out.append(SearchHit(h.message_id, h.thread_id or None, record.resource_id, h.fused, source,  # type: ignore[arg-type]
                             h.vector, h.keyword))
    return out


__all__ = ["FrozenTurn", "load", "working_memory_text"]
