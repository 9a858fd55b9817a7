"""``Memory.recall(vector_search_string=...)``: the newest messages plus what a search recalls.

As Mastra's ``Memory.recall({vectorSearchString})``: the thread's newest messages (the page the call
asks for), plus each semantic hit (``top_k``, over ``threshold``) with its ``message_range``
neighbours from the hit's own thread, one list in time order without duplicates. In resource scope
(the memory's ``semantic_recall.scope``) hits come from all of the user's threads. The search is
the recall index's own (``RecallIndex.search``), so what this returns is what a turn would recall.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from core.storage.memory_store import Include

if TYPE_CHECKING:  # pragma: no cover
    from core.messages import Message
    from core.options import SemanticRecallOptions
    from core.recall import RecallIndex, SearchHit
    from core.storage import Store


@dataclass(frozen=True)
class RecalledRange:
    """One semantic hit and the ids of the messages it brings in (itself and its neighbours, in order)."""

    hit: "SearchHit"
    message_ids: tuple[str, ...]

    @property
    def message_id(self) -> str:
        return self.hit.message_id

    @property
    def score(self) -> float:
        return self.hit.score


def search_with_ranges(
    store: "Store", index: "RecallIndex", query: str, *, thread_id: str, resource_id: str | None,
    options: "SemanticRecallOptions", top_k: int | None, threshold: float | None,
) -> tuple[list["Message"], list[RecalledRange], str | None]:
    """The messages the hits bring in (oldest first), each hit with its range, and the search's
    ``reason`` when it found nothing or was degraded."""
    scope_thread = thread_id if options.scope == "thread" or not resource_id else None
    result = index.search(query, resource_id=resource_id, thread_id=scope_thread,
                          top_k=top_k if top_k is not None else options.top_k, mode=options.mode,
                          threshold=threshold if threshold is not None else options.threshold)
    rng = options.message_range
    ranges: list[RecalledRange] = []
    found: dict[str, Message] = {}
    windows = store.memory.message_windows(
        [Include(hit.message_id, hit.thread_id, before=rng.before, after=rng.after) for hit in result.hits],
        resource_id=resource_id)
    for hit, window in zip(result.hits, windows):
        ranges.append(RecalledRange(hit, tuple(m.id for m in window)))
        found.update((m.id, m) for m in window)
    return sorted(found.values(), key=lambda m: (m.created_at, m.id)), ranges, result.reason


def merged(newest: Sequence["Message"], recalled: Sequence["Message"]) -> list["Message"]:
    """One list, oldest first, each message once."""
    seen: dict[str, Message] = {m.id: m for m in recalled}
    seen.update((m.id, m) for m in newest)
    return sorted(seen.values(), key=lambda m: (m.created_at, m.id))


__all__ = ["RecalledRange", "merged", "search_with_ranges"]
