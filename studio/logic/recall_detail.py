"""The messages a semantic-recall fragment holds, one row each (no Qt).

A recall fragment is either one message of the current thread, or one system block of messages
from the user's other threads. Each message is a *hit* (found by the search, with its own fused,
vector and keyword scores) or a *neighbour* (added around a hit by ``message_range``, with no score
of its own). The rows come from the fragment's provenance, as ``core.processors.semantic_recall``
recorded it; nothing is searched again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from studio.logic.prompt_layout import FragmentRow
from studio.logic.short_ids import short_id

RECALL_SOURCE = "semantic-recall"


@dataclass(frozen=True)
class RecalledRow:
    message_id: str
    thread_id: str | None
    role: str
    hit: bool
    hit_id: str  # the hit itself, or the hit this neighbour came with
    score: float | None  # fused (hybrid) or the mode's own score; None for a neighbour
    vector: float | None
    keyword: float | None
    hit_score: float | None  # a neighbour's hit's score (for its tooltip)
    source: str  # which ranking found the hit: vector, keyword or hybrid

    @property
    def found_as(self) -> str:
        return "hit" if self.hit else f"neighbour of {short_id(self.hit_id)}"

    @property
    def found_tip(self) -> str:
        if self.hit:
            return f"Found by the {self.source} search."
        score = "" if self.hit_score is None else f", which scored {self.hit_score:.3f}"
        return f"Recalled around hit {self.hit_id}{score} (message_range); it was not scored itself."


def fmt_score(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"




def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def recalled_rows(row: FragmentRow, thread_id: str | None = None) -> list[RecalledRow]:
    """One row per recalled message of ``row`` (empty for fragments recall did not add).

    ``thread_id``: the thread being previewed (a same-thread recall fragment does not repeat it).
    """
    if row.source != RECALL_SOURCE or not row.stored_ids:
        return []
    detail = row.detail
    recalled = detail.get("recalled")
    if isinstance(recalled, list):
        return [_from_record(r) for r in recalled if isinstance(r, Mapping)]
    if row.role == "system":  # a block recorded before per-message details existed
        return _from_block_summary(row)
    mid = row.stored_ids[0]
    neighbour = row.neighbour_of
    hit = neighbour is None
    return [RecalledRow(
        message_id=mid, thread_id=thread_id, role=row.role, hit=hit, hit_id=mid if hit else str(neighbour),
        score=row.score if hit else None, vector=_num(detail.get("similarity")) if hit else None,
        keyword=_num(detail.get("keyword_score")) if hit else None, hit_score=row.score,
        source=str(detail.get("source") or ""),
    )]


def _from_record(r: Mapping[str, Any]) -> RecalledRow:
    hit = bool(r.get("hit"))
    return RecalledRow(
        message_id=str(r.get("message_id")), thread_id=r.get("thread_id"), role=str(r.get("role") or ""),
        hit=hit, hit_id=str(r.get("hit_id") or r.get("message_id")), score=_num(r.get("score")),
        vector=_num(r.get("vector_score")), keyword=_num(r.get("keyword_score")),
        hit_score=_num(r.get("hit_score")), source=str(r.get("source") or ""),
    )


def _from_block_summary(row: FragmentRow) -> list[RecalledRow]:
    raw_scores = row.detail.get("scores")
    scores = raw_scores if isinstance(raw_scores, Mapping) else {}
    hits = set(row.detail.get("hit_ids") or ())
    out = []
    for mid in row.stored_ids:
        hit = mid in hits
        out.append(RecalledRow(mid, None, "", hit, mid if hit else "?", None, _num(scores.get(mid)) if hit else None,
                               None, None, ""))
    return out


__all__ = ["RECALL_SOURCE", "RecalledRow", "fmt_score", "recalled_rows", "short_id"]
