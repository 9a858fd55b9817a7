"""One search over a ``RecallIndex``: vector list, keyword list, fusion, threshold, and the reason.

Hybrid fuses by normalised scores (``hybrid.combine``); every keyword candidate gets its exact cosine
from the in-memory vectors first, so the fusion sees both signals and every hit shows a similarity.
Then ``hybrid.rerank`` adds each candidate's next message and the period the query names, from one
batched read of the candidates' rows (thread order and ``createdAt``).
"""

from __future__ import annotations

import logging
from datetime import date, datetime, timezone
from typing import TYPE_CHECKING

import numpy as np
import sqlalchemy as sa

from core.timeutil import parse_iso, to_iso
from core.recall import hybrid, keyword
from core.recall.text import query_dates
from core.recall.index import CANDIDATES, MIGRATE_HINT, MODES, SearchHit, SearchResult

if TYPE_CHECKING:  # pragma: no cover
    from core.recall.index import Mode, RecallIndex
    from core.recall.matrix import VectorSet

log = logging.getLogger(__name__)


def run_search(
    index: "RecallIndex",
    query: str,
    *,
    resource_id: str | None,
    thread_id: str | None,
    top_k: int,
    mode: "Mode",
    threshold: float | None,
    until: datetime | None = None,
) -> SearchResult:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, not {top_k!r}")
    scope = f"resource {resource_id}" if resource_id is not None else f"thread {thread_id}"
    if resource_id is None and thread_id is None:
        return SearchResult([], "no resource or thread given: recall needs a scope", mode)
    if not query or not query.strip():
        return SearchResult([], "the query has no text", mode)
    notes: list[str] = []

    def degrade(reason: str, *, failure: bool = True) -> None:
        # The search answers anyway, with less, and says why in its reason; the log keeps a line too:
        # a warning for a failure, info for a state that repeats on every search until fixed.
        notes.append(reason)
        log.log(logging.WARNING if failure else logging.INFO, "recall search over %s degraded: %s", scope, reason)

    until_iso = to_iso(until) if until is not None else None
    details_extra: dict[str, int] = {}
    depth = max(top_k, CANDIDATES) if mode == "hybrid" else top_k
    vec_ranked: list[hybrid.Ranked] = []
    kw_ranked: list[hybrid.Ranked] = []
    qvec: np.ndarray | None = None
    vset: VectorSet | None = None

    if mode in ("keyword", "hybrid"):
        pending = index.sync_keywords()
        if pending:
            notes.append(pending)
        if not index.has_fts:
            degrade(f"keyword index missing; {MIGRATE_HINT}", failure=False)
        else:
            with index.store.db.read() as conn:
                kw = keyword.search(
                    conn, query, resource_id=resource_id, thread_id=thread_id, limit=depth, stats=index.term_stats,
                    until=until_iso,
                )
            kw_ranked = [hybrid.Ranked(h.message_id, h.thread_id, h.resource_id, h.score) for h in kw]

    if mode in ("vector", "hybrid"):
        try:
            qvec = np.asarray(index.embedder.embed([query], kind="query"), dtype=np.float32)[0]
        except Exception as exc:  # the embedder failing must not take keyword results down with it
            degrade(f"query embedding failed ({exc}); vector results missing")
        if qvec is not None:
            with index.store.db.read() as conn:
                vset = index.vector_set(conn, resource_id, thread_id)
            if vset is None:
                degrade(f"no vector table {index.table}; {MIGRATE_HINT}", failure=False)
            else:
                for skipped in vset.skips.reasons():
                    degrade(skipped, failure=False)
                vec_ranked = _vector_ranked(vset, qvec, depth, thread_id if resource_id is not None else None,
                                            until_iso)

    if mode == "vector":
        hits = [SearchHit(r.message_id, r.thread_id, r.resource_id, r.score, "vector", r.score, None) for r in vec_ranked]
    elif mode == "keyword":
        hits = [SearchHit(r.message_id, r.thread_id, r.resource_id, r.score, "keyword", None, r.score) for r in kw_ranked]
    else:
        cosines: dict[str, float] = {}
        if vset is not None and qvec is not None:
            seen = {r.message_id for r in vec_ranked}
            cosines = _cosines(vset, qvec, [r.message_id for r in kw_ranked if r.message_id not in seen])
        fused = hybrid.combine(vec_ranked, kw_ranked, cosines)
        # A past turn's "last week" counts from that turn's day.
        spans = query_dates(query, until.astimezone(timezone.utc).date() if until is not None else today())
        if spans:
            details_extra["date_spans"] = len(spans)
        order: dict[str, tuple[str | None, date | None]] = {}
        # Only candidates that can still reach the top_k need their row read (a few microseconds each).
        receivers = fused if threshold is not None else _may_reach(fused, top_k, bool(spans))
        if receivers and (hybrid.NEXT_SHARE > 0 or spans):
            try:
                with index.store.db.read() as conn:
                    order = thread_order(conn, [f.message_id for f in receivers])
            except sa.exc.DBAPIError as exc:  # ranking without neighbours and dates beats no answer
                degrade(f"thread order not read ({exc.__class__.__name__}); hits ranked without it")
        next_of = {mid: nxt for mid, (nxt, _) in order.items() if nxt is not None}
        in_period = (
            {mid for mid, (_, day) in order.items() if day is not None and any(s.contains(day) for s in spans)}
            if spans else None
        )
        # Without a threshold only the top_k are needed; with one, every candidate may be.
        fused = hybrid.rerank(
            receivers, next_of, in_period, limit=top_k if threshold is None else None,
            scores={f.message_id: f.score for f in fused},
        )
        hits = [
            SearchHit(
                f.message_id, f.thread_id, f.resource_id, f.score,
                "hybrid" if f.vector_rank and f.keyword_rank else "vector" if f.vector_rank else "keyword",
                f.vector_score, f.keyword_score,
            )
            for f in fused
        ]

    if threshold is not None:
        if mode == "keyword":
            notes.append("threshold applies to vector similarity; ignored in keyword mode")
        else:
            kept = [h for h in hits if h.vector_score is not None and h.vector_score >= threshold]
            dropped = len(hits) - len(kept)
            if dropped and not kept:
                notes.append(f"{dropped} hit(s) below threshold {threshold}")
            elif dropped:
                notes.append(f"{dropped} candidate(s) below threshold {threshold} dropped")
            hits = kept
    hits = hits[:top_k]
    if not hits:
        notes.insert(0, _empty_reason(index, vset, kw_ranked, mode, scope))
    reason = "; ".join(n for n in notes if n) or None
    details = {
        "vector_candidates": len(vec_ranked), "keyword_candidates": len(kw_ranked),
        "vectors_in_scope": vset.n if vset is not None else 0, "model_id": index.model_id, **details_extra,
    }
    return SearchResult(hits, reason, mode, details)


def _may_reach(fused: list[hybrid.Fused], top_k: int, dated: bool) -> list[hybrid.Fused]:
    """The candidates ``hybrid.rerank`` could place in the top ``top_k``: gains are never negative, so the
    top_k-th candidate keeps at least its score, and no candidate gains more than the next-message share
    of the best score plus the date boost."""
    if len(fused) <= top_k:
        return fused
    gain = hybrid.NEXT_SHARE * max(fused[0].score, 0.0) + (hybrid.DATE_BOOST if dated else 0.0)
    bar = fused[top_k - 1].score - gain
    return [f for f in fused if f.score >= bar]  # fused is sorted best first


def today() -> date:
    """The day relative periods ("yesterday", "last week") count from: UTC, like stored times."""
    return datetime.now(timezone.utc).date()


# The next user/assistant message of each candidate's thread, by (createdAt, id) like
# ``schema.previous_text``; the thread_id/createdAt index answers each subquery with one seek.
_ORDER_SQL = (
    'SELECT m.id, m."createdAt", (SELECT n.id FROM mastra_messages n WHERE n.thread_id = m.thread_id '
    "AND n.role IN ('user', 'assistant') AND n.\"createdAt\" >= m.\"createdAt\" "
    'AND (n."createdAt" > m."createdAt" OR n.id > m.id) ORDER BY n."createdAt", n.id LIMIT 1) '
    "FROM mastra_messages m WHERE m.id IN ({marks})"
)


def thread_order(conn: sa.Connection, message_ids: list[str]) -> dict[str, tuple[str | None, date | None]]:
    """For each message: the id of the next message in its thread (None for the last) and the UTC day
    it was written (None if unreadable). One statement per 500 messages, not one per message."""
    out: dict[str, tuple[str | None, date | None]] = {}
    for start in range(0, len(message_ids), 500):
        chunk = tuple(message_ids[start : start + 500])
        for mid, created, nxt in conn.exec_driver_sql(_ORDER_SQL.format(marks=",".join("?" * len(chunk))), chunk):
            out[mid] = (nxt, _day(created))
    return out


def _day(created: object) -> date | None:
    if isinstance(created, str) and len(created) >= 10 and created[4] == "-" and created.endswith("Z"):
        try:
            return date.fromisoformat(created[:10])  # our and Mastra's format: already UTC
        except ValueError:
            pass
    try:
        return parse_iso(created).astimezone(timezone.utc).date()  # type: ignore[arg-type]
    except Exception:
        return None


def _vector_ranked(vset: "VectorSet", qvec: np.ndarray, depth: int, thread_id: str | None,
                   until: str | None = None) -> list[hybrid.Ranked]:
    # Mastra's saveMessages may store several chunk vectors per message: ask for more, keep each message's best.
    pos, scores = vset.search(qvec, depth * 2, thread_id=thread_id, until=until)
    out: list[hybrid.Ranked] = []
    seen: set[str] = set()
    for p, s in zip(pos.tolist(), scores.tolist()):
        mid = vset.message_ids[p]
        if mid in seen:
            continue
        seen.add(mid)
        out.append(hybrid.Ranked(mid, vset.thread_ids[p], vset.resource_ids[p], float(s)))
        if len(out) == depth:
            break
    return out


def _cosines(vset: "VectorSet", qvec: np.ndarray, message_ids: list[str]) -> dict[str, float]:
    """Exact cosine of each message that has a vector (its best chunk's, if it has several)."""
    rows: list[int] = []
    owners: list[str] = []
    for mid in message_ids:
        for p in vset.positions_of(mid):
            rows.append(p)
            owners.append(mid)
    if not rows:
        return {}
    scores = (vset.matrix[rows] @ qvec).tolist()
    best: dict[str, float] = {}
    for mid, sc in zip(owners, scores):
        if mid not in best or sc > best[mid]:
            best[mid] = float(sc)
    return best


def _empty_reason(index: "RecallIndex", vset: "VectorSet | None", kw: list[hybrid.Ranked], mode: str, scope: str) -> str:
    if mode != "keyword" and vset is not None and vset.n == 0 and not kw:
        foreign = sum(vset.skips.other_model.values())
        if foreign:
            return f"no messages indexed for {scope} with model {index.model_id}"
        return f"no messages indexed for {scope}"
    if mode == "keyword" and not kw:
        return f"no keyword matches in {scope}"
    return f"nothing found in {scope}"
