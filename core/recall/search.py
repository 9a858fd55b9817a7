"""The search pipeline of a ``RecallIndex``: vector list, keyword list, fusion, re-rank, threshold, reason.

``run`` performs the steps once and keeps every intermediate list (``SearchRun``); ``run_search``
turns a run into the ``SearchResult`` a caller gets, and the recall playground's explanation
(``explain.inspect_search``) shows the same run's lists, so "why not this message?" can never disagree
with what the search did.

Hybrid fuses by normalised scores (``hybrid.combine``); every keyword candidate gets its exact cosine
from the scope's vectors first, so the fusion sees both signals and every hit shows a similarity.
Then the re-rank adds each candidate's next message and the period the query names, from one
batched read of the candidates' rows (thread order and ``createdAt``). The fusion runs on arrays by
candidate (``hybrid.Combined``), fed the in-process vector set's rows when it can (``_RowLists``: no
record built but for the answer), else the lists' records and the order by id (``_fuse``).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Protocol

import numpy as np
import sqlalchemy as sa

from core.recall import hybrid, pieces
from core.recall.backends import KeywordBackend
from core.recall.keyword import CONTEXT_WEIGHT
from core.recall.keyword_memory import KeywordMemory, RowHits
from core.recall.matrix import ScopeVectors, VectorSet
from core.recall.order_rows import NO_DAY, NO_LABEL, NO_NEXT, Gathered
from core.recall import order_cache
from core.recall.order_cache import OrderCache
from core.recall.text import (LABEL_CHARS, MAX_QUERY_TERMS, SpeakerMatcher, query_dates, query_text,
                               speaker_label)
from core.recall.types import MIGRATE_HINT, MODES, MessagePieces, Mode, PieceEstimate, SearchHit, SearchResult, ranked_of
from core.recall.schema import text_of_raw
from core.storage import dialect
from core.timeutil import to_iso

if TYPE_CHECKING:  # pragma: no cover
    from core.embedding import Embedder
    from core.storage import Store

log = logging.getLogger(__name__)


class Searchable(Protocol):
    """What the pipeline reads of an index (``RecallIndex`` is one)."""

    store: "Store"
    embedder: "Embedder"
    model_id: str
    table: str
    keywords: KeywordBackend
    writable: bool  # (a writable database's vector table is made by its first write)

    @property
    def has_fts(self) -> bool: ...

    def backlog(self, conn: sa.Connection | None = None) -> tuple[str | None, set[str], set[str] | None]: ...

    def edited_since_indexed(self, conn: sa.Connection, message_ids: list[str], *, queued: bool = True) -> set[str]: ...

    def edited_note(self, count: int) -> str: ...

    def vector_set(self, conn: sa.Connection, resource_id: str | None, thread_id: str | None) -> ScopeVectors | None: ...


@dataclass
class SearchRun:
    """One search's steps, with everything a caller may want to show."""

    mode: Mode
    scope: str
    notes: list[str] = field(default_factory=list)  # degraded or partial answers, in order
    backlog: str | None = None  # changes not yet keyword-indexed (said before the notes)
    terms: list[str] = field(default_factory=list)  # quoted keyword terms searched
    dropped_terms: list[str] = field(default_factory=list)  # quoted terms dropped as very common
    qvec: np.ndarray | None = None
    vset: ScopeVectors | None = None
    # ``vector``, ``keyword`` (best first, deleted messages left out) and ``cosines`` (of the keyword candidates
    # outside the vector list) are properties: a search fed the vector set's rows (``_RowLists``) builds their
    # records only when they are read (the playground, a test), not for the fusion.
    _vector: list[hybrid.Ranked] | None = field(default=None, repr=False)
    _keyword: list[hybrid.Ranked] | None = field(default=None, repr=False)
    _cosines: dict[str, float] | None = field(default=None, repr=False)
    rows: "_RowLists | None" = field(default=None, repr=False)  # the lists as rows, when the search was fed them
    # ``fused`` (a property): ``combine``'s records of every candidate (``every_candidate`` or a threshold),
    # else of those that may reach the top_k; built when first read (a search itself needs none).
    combined: hybrid.Combined | None = None
    received: int = 0  # how many of ``combined.order``'s best were re-ranked (``receivers``)
    reranked: list[hybrid.Fused] = field(default_factory=list)  # ``rerank`` (all, or those that may reach top_k)
    gone: set[str] = field(default_factory=set)  # deleted since indexed (left out of every list)
    # Updated since indexed (queued; None: the backend does not list them, every keyword hit is checked),
    # and of the keyword hits among them, those whose keyword doc holds an older text: left out of the
    # keyword list (not of the vector list: an edit drops the old vectors at once, ``Memory._recall_follow``).
    updated: set[str] | None = field(default_factory=set)
    edited: set[str] = field(default_factory=set)
    # Not stored yet at the time searched (a rebuilt turn's ``unstored``): left out of every list before the
    # fusion, as if not indexed, so they move no other candidate's score (neighbours' share, thread prior).
    unstored: frozenset[str] = frozenset()
    left_out: list[tuple[Literal["vector", "keyword"], hybrid.Ranked]] = field(default_factory=list)  # (list, candidate) left out as deleted or edited
    date_spans: int = 0
    by_speaker: set[str] = field(default_factory=set)  # candidates spoken by a speaker the query names
    embed_ms: float = 0.0  # time spent embedding the query
    # Vector mode with pieces (``_with_pieces``): the messages re-scored by their pieces (the scan's best
    # ``pieces.RESCORED`` or more; empty when none was), and of them those scored by a piece: its score,
    # which piece of how many, and the piece's text.
    rescored: list[str] = field(default_factory=list)
    by_piece: dict[str, tuple[pieces.Best, str]] = field(default_factory=dict)
    # ``vector_only_too``: the list a vector-mode search of the same query answers (hybrid runs for the
    # playground), best first; empty when the index reads no pieces in this scope (then it is ``vector``).
    vector_only: list[hybrid.Ranked] = field(default_factory=list)
    _fused: list[hybrid.Fused] | None = field(default=None, repr=False)

    @property
    def vector(self) -> list[hybrid.Ranked]:
        if self._vector is None:
            self._vector = self.rows.vector() if self.rows is not None else []
        return self._vector

    @vector.setter
    def vector(self, ranked: list[hybrid.Ranked]) -> None:
        self._vector = ranked

    @property
    def keyword(self) -> list[hybrid.Ranked]:
        if self._keyword is None:
            self._keyword = self.rows.hits.records() if self.rows is not None else []
        return self._keyword

    @keyword.setter
    def keyword(self, ranked: list[hybrid.Ranked]) -> None:
        self._keyword = ranked

    @property
    def cosines(self) -> dict[str, float]:
        if self._cosines is None:
            self._cosines = self.rows.cosines() if self.rows is not None else {}
        return self._cosines

    @cosines.setter
    def cosines(self, found: dict[str, float]) -> None:
        self._cosines = found

    def counts(self) -> tuple[int, int]:
        """How many candidates the vector and the keyword list gave (without building their records)."""
        if self.rows is not None:
            return len(self.rows.pos), len(self.rows.hits.rows)
        return len(self.vector), len(self.keyword)

    @property
    def receivers(self) -> list[tuple[float, float, str]]:
        """The entries of ``combined.order`` re-ranked (or that could be: the best ``received``)."""
        return self.combined.order[: self.received] if self.combined is not None else []

    @property
    def fused(self) -> list[hybrid.Fused]:
        if self._fused is None:
            self._fused = self.combined.fused(self.receivers) if self.combined is not None else []
        return self._fused


def run(
    index: Searchable,
    query: str,
    *,
    resource_id: str | None,
    thread_id: str | None,
    top_k: int,
    mode: Mode,
    threshold: float | None = None,
    until: datetime | None = None,
    qvec: Any = None,
    every_candidate: bool = False,
    unstored: frozenset[str] = frozenset(),
    exclude_thread: str | None = None,
    vector_only_too: bool = False,
) -> SearchRun:
    """The steps of one search. ``qvec``: the query's vector, when the caller has it already.
    ``every_candidate``: re-rank every hybrid candidate (the playground shows them all), not only
    those that can still reach the top ``top_k`` (their order is the same either way). ``unstored``:
    message ids to search as if they were not indexed (a rebuilt turn's messages stored after it ran).
    ``exclude_thread``: a thread of the resource whose messages are never candidates (an SDK session's
    own, which its model receives anyway): each list leaves them out as it is read, so it is ``depth``
    long without them, and the fusion, neighbours' share and thread prior see only other threads'.
    ``vector_only_too``: a hybrid run also keeps the list a vector-mode search answers (``vector_only``,
    with its pieces' scores), from the same scan (the playground's "why not this message?")."""
    scope = f"resource {resource_id}" if resource_id is not None else f"thread {thread_id}"
    if exclude_thread is not None:
        scope += f" (thread {exclude_thread} left out)"
    out = SearchRun(mode, scope)
    out.unstored = unstored

    def degrade(reason: str, *, failure: bool = True) -> None:
        # The search answers anyway, with less, and says why in its reason; the log keeps a line too:
        # a warning for a failure, info for a state that repeats on every search until fixed.
        out.notes.append(reason)
        log.log(logging.WARNING if failure else logging.INFO, "recall search over %s degraded: %s", scope, reason)

    until_iso = to_iso(until) if until is not None else None
    fusion = hybrid.fusion_for(index.model_id)  # per embedding model (its cosines' scale differs)
    depth, kw_depth = fusion.depths(top_k) if mode == "hybrid" else (top_k, top_k)

    def embed() -> Any:
        started = time.perf_counter()
        vec = None
        try:
            text = query_text(query)
            vec = np.asarray(index.embedder.embed([text.lower() if fusion.lower_query else text], kind="query"),
                             dtype=np.float32)[0]
        except Exception as exc:  # the embedder failing must not take keyword results down with it
            degrade(f"query embedding failed ({exc}); vector results missing")
        out.embed_ms = (time.perf_counter() - started) * 1000
        return vec

    embedded = qvec is not None
    # One read connection (one snapshot) for every step below.
    with index.store.db.read() as conn:
        # The keyword terms first (their notes come where they did): on Postgres, counting a query's new
        # terms is then the read's first statement and goes with the change log's (``pg_changes``).
        if mode in ("keyword", "hybrid") and index.has_fts:
            out.terms, out.dropped_terms = index.keywords.terms(conn, query)
        # A backend that reads a hybrid search's lists in one statement (Postgres: ``pg_hybrid``) does,
        # with the query embedded first; the same lists, fused and re-ranked by the same code below.
        one_read = getattr(index, "read_hybrid", None)
        noted = False  # the long query's note said
        if mode == "hybrid" and until_iso is None and index.has_fts and one_read is not None:
            if not embedded:
                qvec, embedded = embed(), True
            vset = index.vector_set(conn, resource_id, thread_id) if qvec is not None else None
            if vset is not None and not vset.skips.reasons():
                _note_long_query(out, degrade)
                noted = True
                got = one_read(conn, vset, qvec, out.terms, resource_id=resource_id, thread_id=thread_id, depth=depth,
                               keyword_depth=kw_depth, narrowed=thread_id if resource_id is not None else None,
                               labels=hybrid.SPEAKER_BOOST > 0, exclude_thread=exclude_thread)
                if got is not None:
                    if got.queued:
                        out.backlog, out.gone, out.updated = index.backlog(conn)
                    out.qvec, out.vset = qvec, vset
                    _keyword_listed(index, conn, out, got.keyword, degrade)
                    _listed(out, "vector", got.vector)
                    _fuse(out, conn, query, top_k, threshold, until, every_candidate, degrade, fusion.keyword_share,
                          got.order, False)
                    return out
        # Changes since the last write are left to the next writer (a search never writes); messages
        # deleted since they were indexed are left out here.
        pending, out.gone, out.updated = index.backlog(conn)
        if mode != "vector":
            out.backlog = pending
        kept: OrderCache | None = getattr(index, "order", None) if mode == "hybrid" else None
        synced: bool | None = None
        if kept is not None:
            try:
                synced = kept.sync(conn)  # (before the vector scan: see ``sync``)
            except sa.exc.DBAPIError:  # the re-rank's read tries again, and says so if it fails
                synced = None
        if mode in ("keyword", "hybrid"):
            if not index.has_fts:
                degrade(f"keyword index missing; {MIGRATE_HINT}", failure=False)
            elif not noted:  # (said once: the one statement's branch may have said it, then not answered)
                _note_long_query(out, degrade)

        def keyword_list() -> None:
            if mode in ("keyword", "hybrid") and index.has_fts:
                kw = index.keywords.search(conn, query, resource_id=resource_id, thread_id=thread_id, limit=kw_depth,
                                           until=until_iso, terms=out.terms, exclude_thread=exclude_thread)
                _keyword_listed(index, conn, out, kw, degrade)  # (``KeywordHit`` is ``Ranked``: as they come)

        if mode in ("vector", "hybrid") and not embedded:
            qvec = embed()
        out.qvec = qvec
        if mode in ("vector", "hybrid") and qvec is not None:
            out.vset = index.vector_set(conn, resource_id, thread_id)
        # The keyword list comes before the vector list, also on an in-process matrix: the scan streams the
        # whole matrix through the CPU's caches, and what runs after it starts with cold code and data.
        # (Measured 2026-12-03, alternated in one process: the keyword list after the scan cost 0.03 ms more
        # a search once its hits' fields were gathered by numpy; looking up the keyword hits' rows before
        # the scan as well cost 0.02-0.03 ms more than after it.) A server's vectors (Postgres) are read
        # after it, with its cosines.
        narrowed = thread_id if resource_id is not None else None
        hits = _row_hits(index, conn, out, mode, kw_depth, depth, narrowed, kept, resource_id=resource_id,
                         thread_id=thread_id, until=until_iso, exclude_thread=exclude_thread,
                         vector_only_too=vector_only_too)
        if hits is None:
            keyword_list()
        elif (hits.rows < 0).any():  # (a hit without a single row: the lists as records, ``_fuse``'s other feeder)
            _keyword_listed(index, conn, out, hits.records(), degrade)
        vector: list[hybrid.Ranked] | None = None
        if hits is not None and not (hits.rows < 0).any():
            assert isinstance(out.vset, VectorSet) and qvec is not None
            for skipped in out.vset.skips.reasons():
                degrade(skipped, failure=False)
            pos, cos = out.vset.search(qvec, depth)  # (``VectorSet.ranked``'s scan, its records not built)
            out.rows = _RowLists(out.vset, qvec, pos, cos, hits)
        elif mode in ("vector", "hybrid") and qvec is not None:
            if out.vset is None:
                # A writable database's table is made by its first write: until then nothing was embedded,
                # which the empty answer's reason says ("no messages indexed for ...").
                if not index.writable:
                    degrade(f"no vector table {index.table}; {MIGRATE_HINT}", failure=False)
            else:
                for skipped in out.vset.skips.reasons():
                    degrade(skipped, failure=False)
                backend = getattr(index, "vectors", None)
                # Vector mode re-scores its best messages by their pieces, where the scope has any
                # (``_with_pieces``); hybrid fuses the passage cosines as they are.
                by_pieces = ((mode == "vector" or vector_only_too) and getattr(index, "pieces", False)
                             and backend is not None and backend.has_pieces(conn, resource_id, thread_id))
                if by_pieces and mode == "vector":
                    wide = out.vset.ranked(qvec, max(pieces.RESCORED, depth), narrowed, until_iso, exclude_thread)
                    vector = _with_pieces(backend, conn, out, wide, qvec, depth)
                else:
                    vector = out.vset.ranked(qvec, depth, narrowed, until_iso, exclude_thread)
                    if by_pieces:
                        # (every message re-scored, in its vector-only order: the playground shows ranks)
                        wide = out.vset.ranked(qvec, max(pieces.RESCORED, top_k), narrowed, until_iso, exclude_thread)
                        out.vector_only = _with_pieces(backend, conn, out, wide, qvec, len(wide))
        if vector is not None:
            _listed(out, "vector", vector)
        if mode == "hybrid":
            _fuse(out, conn, query, top_k, threshold, until, every_candidate, degrade, fusion.keyword_share, kept, synced)
    return out


def _with_pieces(backend: Any, conn: sa.Connection, out: SearchRun, wide: list[hybrid.Ranked], qvec: np.ndarray,
                 depth: int, estimate: bool = True) -> list[hybrid.Ranked]:
    """Vector mode: the scan's best messages (``wide``) re-scored, each with pieces by its best mixed row
    (``pieces.mixed_scores``: the cosine of ``unit(passage + piece)``), each without by its passage cosine;
    sorted (ties in the scan's order) and cut to ``depth``. One read of their pieces; the scores of every
    piece in a few array operations.

    Where the backend scores pieces where they are stored (``estimates_pieces``: Postgres), it first gives
    each message's score within a bound, and only the messages that could be among the best ``depth`` are
    read (``pieces.must_read``); the others' rows stay zero in the same matrices (``pieces.rows_alone``: a
    row's bits do not depend on the other rows), so each message read scores to the bit as it would with
    all of them read, and the answer is the same."""
    ids = [r.message_id for r in wide]
    out.rescored = ids
    if not ids:
        return wide[:depth]
    q = np.asarray(qvec, dtype=np.float32)
    norm = float(np.linalg.norm(q))
    q = q / norm if norm > 0 else q
    dim = len(q)
    estimates: dict[str, PieceEstimate] = {}
    got: dict[str, MessagePieces] = {}
    if (estimate and backend.estimates_pieces and depth < len(wide) and len(set(ids)) == len(ids)
            and all(math.isfinite(r.score) for r in wide) and pieces.rows_alone(dim)):
        estimates = backend.estimate_pieces(conn, ids, q)
        chosen = [ids[i] for i in pieces.must_read([r.score for r in wide], [estimates.get(m) for m in ids], depth)]
        got = backend.read_pieces(conn, chosen) if chosen else {}
        if got.keys() != set(chosen) or any(len(got[m].spans) != estimates[m].pieces for m in chosen):
            return _with_pieces(backend, conn, out, wide, qvec, depth, False)  # (changed between the reads)
    else:
        got = backend.read_pieces(conn, ids)
    if not got and not estimates:
        return wide[:depth]
    # The messages with pieces in the scan's order, each read (``got``) or only estimated (its rows zero).
    held = [(i, m) for i, m in enumerate(ids) if m in got or m in estimates]
    owners = [m for _, m in held]
    counts = np.fromiter((len(got[m].spans) if m in got else estimates[m].pieces for m in owners),
                         dtype=np.int64, count=len(owners))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    if len(got) == len(owners):
        vecs = np.concatenate([got[m].vectors for m in owners])
        # (np.stack's rows, at half its cost)
        whole = np.concatenate([got[m].passage for m in owners]).reshape(len(owners), -1)
    else:
        vecs = np.zeros((int(counts.sum()), dim), dtype=np.float32)
        whole = np.zeros((len(owners), dim), dtype=np.float32)
        for k, m in enumerate(owners):
            if m in got:
                vecs[starts[k]:starts[k] + counts[k]] = got[m].vectors
                whole[k] = got[m].passage
    of = np.repeat(np.arange(len(owners)), counts)
    # ``pieces.mixed_scores`` of every piece at once, p its message's passage (q.p and q.v in float32, as the
    # scan's; p.v, the sums and the division in float64). p.v as the read computed it when it did
    # (``MessagePieces.passage_dots``: the same bits, ``pieces.dots_by_row``), else here.
    if len(got) == len(owners) and all(got[m].passage_dots is not None for m in owners):
        p_v = np.concatenate([got[m].passage_dots for m in owners])
    elif all(e.passage_dots is not None for e in got.values()):
        p_v = np.zeros(len(vecs), dtype=np.float64)
        for k, m in enumerate(owners):
            if m in got:
                p_v[starts[k]:starts[k] + counts[k]] = got[m].passage_dots
    else:
        p_v = pieces.passage_dots(vecs, whole[of])
    scores = pieces.mixed_scores((whole @ q)[of], vecs @ q, p_v)
    best = np.maximum.reduceat(scores, starts)
    # Every message's score (the scan's cosine, or its best mixed row), sorted stably (equal scores keep the
    # scan's order), as a Python sort by -score would; only the answered messages are made anew. A message
    # only estimated is under the ``depth``-th score by its bound (``pieces.must_read``): it goes last.
    final = np.fromiter((r.score for r in wide), dtype=np.float64, count=len(wide))
    final[[i for i, _ in held]] = best
    unread = [i for i, m in held if m not in got]
    if unread:
        final[unread] = -np.inf
        real = np.delete(final, unread)
        highest = max(estimates[ids[i]].score + estimates[ids[i]].bound for i in unread)
        if not (np.isfinite(real).all() and len(real) >= depth and np.sort(real)[-depth] > highest):
            return _with_pieces(backend, conn, out, wide, qvec, depth, False)  # (a bound that did not hold)
    if np.isfinite(final).all() or unread:
        order = np.argsort(-final, kind="stable")[:depth].tolist()
        kept = [wide[i] if ids[i] not in got else ranked_of((wide[i][0], wide[i][1], wide[i][2], float(final[i])))
                for i in order]
    else:  # (a sort by NaN has no order numpy and Python agree on: Python's, as before)
        at = dict(zip(owners, best.tolist()))
        scored = [r if (s := at.get(r.message_id)) is None else ranked_of((r[0], r[1], r[2], s)) for r in wide]
        scored.sort(key=lambda r: -r.score)
        kept = scored[:depth]
    place = dict(zip(owners, range(len(owners))))
    for r in kept:  # which piece won, for the messages answered (the playground names it)
        w = place.get(r.message_id)
        if w is None:
            continue
        j = int(np.argmax(scores[starts[w]:starts[w] + counts[w]]))
        found = got[r.message_id]
        a, b = found.spans[j]
        out.by_piece[r.message_id] = (pieces.Best(float(best[w]), j, int(counts[w])),
                                      pieces.label_of(found.content) + found.content[a:b])
    return kept


def _listed(out: SearchRun, which: Literal["vector", "keyword"], ranked: list[hybrid.Ranked]) -> None:
    """A list as read, less the messages deleted since they were indexed and, from the keyword list,
    those edited since (``_keyword_listed``): kept in ``left_out``."""
    if out.unstored:
        ranked = [r for r in ranked if r.message_id not in out.unstored]
    left = out.gone | out.edited if which == "keyword" and out.edited else out.gone
    setattr(out, which, [r for r in ranked if r.message_id not in left] if left else ranked)
    if left:
        out.left_out.extend((which, r) for r in ranked if r.message_id in left)


def _keyword_listed(index: Searchable, conn: sa.Connection, out: SearchRun, ranked: list[hybrid.Ranked],
                    degrade: Callable[..., None]) -> None:
    """The keyword list, less the hits whose keyword doc holds a text from before an edit not indexed
    yet (``RecallIndex.edited_since_indexed``: read only for hits with an update queued), said in the
    reason; then ``_listed``."""
    if out.updated is None or out.updated:
        asked = [r.message_id for r in ranked if r.message_id not in out.gone and r.message_id not in out.unstored
                 and (out.updated is None or r.message_id in out.updated)]
        out.edited = index.edited_since_indexed(conn, asked, queued=out.updated is not None) if asked else set()
        if out.edited:
            degrade(index.edited_note(len(out.edited)), failure=False)
    _listed(out, "keyword", ranked)


def _row_hits(index: Searchable, conn: sa.Connection, out: SearchRun, mode: Mode, kw_depth: int, depth: int,
              narrowed: str | None, kept: OrderCache | None, *, resource_id: str | None, thread_id: str | None,
              until: str | None, exclude_thread: str | None, vector_only_too: bool) -> RowHits | None:
    """The keyword list as rows of the scope's vector set (``KeywordMemory.search_rows``) when a hybrid
    search can be fed the set's rows (``_RowLists``): an in-process set with one row a message whose scan
    is ``VectorSet.ranked``'s (``depth_suffices``), the keyword memory answering, the order cache kept, and
    nothing to leave out of the lists (no deletion, edit or unstored message pending, no thread left out,
    no past turn's view, no pieces to re-score for the playground). None: the lists are read as records."""
    vset, qvec = out.vset, out.qvec
    memory = getattr(index.keywords, "memory", None)
    if not (mode == "hybrid" and kept is not None and isinstance(memory, KeywordMemory) and isinstance(vset, VectorSet)
            and qvec is not None and index.has_fts and out.terms and until is None and exclude_thread is None
            and not out.gone and out.updated is not None and not out.updated and not out.unstored):
        return None
    vset.positions_of("")  # (the set's map by message, built once: a first search would build it for its cosines)
    if not vset.depth_suffices(qvec, depth, narrowed):
        return None
    if vector_only_too and getattr(index, "pieces", False):
        backend = getattr(index, "vectors", None)
        if backend is not None and backend.has_pieces(conn, resource_id, thread_id):
            return None
    return memory.search_rows(conn, out.terms, vset, resource_id=resource_id, thread_id=thread_id, limit=kw_depth,
                              weight=CONTEXT_WEIGHT)


class _RowLists:
    """A hybrid search's two lists as the vector set's rows (the rows feeder of ``_fuse``): the scan's
    positions and float32 cosines as they come, and the keyword hits as rows (every one with a row). The
    records (``vector``, ``cosines``; ``hits.records``) are built only when read: ``SearchRun``'s lists."""

    def __init__(self, vset: VectorSet, qvec: np.ndarray, pos: np.ndarray, cos: np.ndarray, hits: RowHits) -> None:
        self.vset, self.qvec, self.pos, self.cos, self.hits = vset, qvec, pos, cos, hits
        self.cand = pos  # (the candidates' rows, ``Combined.ids``' order: set by ``combined``)
        self._only: list[str] | None = []  # (the keyword-only candidates' ids; None: see ``_only_at``)
        self._only_at = np.empty(0, dtype=np.int64)  # (their places in the keyword list)
        self._only_cos = np.empty(0, dtype=np.float32)
        self.slot = np.empty(0, dtype=np.int32)  # (each candidate's place by row: set by ``combined``)

    def vector(self) -> list[hybrid.Ranked]:
        """``VectorSet.ranked``'s records of the scan."""
        mids, threads, resources = self.vset._id_columns()
        pos = self.pos
        return list(map(ranked_of, zip(mids[pos].tolist(), threads[pos].tolist(), resources[pos].tolist(),
                                       self.cos.tolist())))

    def cosines(self) -> dict[str, float]:
        """``VectorSet.cosines`` of the keyword-only candidates (after ``combined``)."""
        only = self._only if self._only is not None else [self.hits.mids[k] for k in self._only_at.tolist()]
        return dict(zip(only, self._only_cos.tolist()))

    def combined(self, keyword_share: float) -> hybrid.Combined:
        """``Combined`` of these lists: the vector list's rows, then the keyword list's others (their cosines
        by ``take`` on the matrix, as ``VectorSet.cosines`` computes them), each one's place in the keyword
        list and thread code by row; ids, threads and resources gathered only for the candidates asked
        (``fields``). The candidates' places are found through an array by row of the set's size, this
        search's own (``slot``: each candidate's place, -1 elsewhere and at the two last entries, which
        ``NO_NEXT`` and ``NEXT_BY_ID`` read), by a few numpy steps rather than maps by row."""
        vset, hits, vrows = self.vset, self.hits, self.pos
        krows = hits.rows
        nv, nk = len(vrows), len(krows)
        slot = np.full(vset.n + 2, -1, dtype=np.int32)  # (places: a few hundred at most)
        listed = np.arange(nk)
        slot[krows] = listed  # (each keyword hit's place; a row listed twice keeps one of its places)
        if (slot[krows] != listed).any():
            # (a message listed twice by the keyword memory: the records feeder, which keeps its last place)
            vector = self.vector()
            vec_at = hybrid.places(vector)
            found = vset.cosines(self.qvec, [m for m in hits.mids if m not in vec_at])
            self._only, self._only_cos = list(found), np.array(list(found.values()), dtype=np.float32)
            self.cand = np.empty(0, dtype=np.int64)
            return hybrid.Combined(vector, hits.records(), found, keyword_share=keyword_share, vec_at=vec_at)
        kat = slot[vrows]  # (each vector candidate's place in the keyword list, -1: none)
        slot[krows] = -1
        slot[vrows] = np.arange(nv)
        only_at = np.flatnonzero(slot[krows] < 0)
        self._only, self._only_at = None, only_at
        only = krows[only_at]
        slot[only] = np.arange(nv, nv + len(only))
        self.slot = slot
        # (``take`` of the rows in the keyword list's order, as ``VectorSet.cosines`` does: the same bits)
        self._only_cos = only_cos = np.take(vset._matrix, only, axis=0) @ self.qvec
        self.cand = np.concatenate((vrows, only))
        # Thread codes: the set's; a keyword-only candidate's is its hit's thread's (the keyword doc's, as the
        # records feeder groups them), the same as its row's but where they differ (then looked up by name).
        codes = vset._thread_codes[self.cand].astype(np.int64)
        if len(only):
            named = hits.threads[only_at]
            differ = np.flatnonzero(named != vset._id_columns()[1][only])
            if len(differ):
                index, start = vset._thread_index, len(vset._thread_index)
                extra: dict[str | None, int] = {}
                for i in differ.tolist():
                    t = named[i]
                    codes[nv + i] = index[t] if t in index else extra.setdefault(t, start + len(extra))
        cos = np.concatenate((self.cos, only_cos)).astype(np.float64)
        return hybrid.Combined.of_rows(len(self.cand), self.fields, codes, cos, nv, np.concatenate((kat, only_at)),
                                       hits.score.astype(np.float64), keyword_share=keyword_share)

    def fields(self, at: np.ndarray) -> tuple[list[str], list[str | None], list[str | None]]:
        """The ids, threads and resources of the candidates at ``at`` (``Combined.of_rows``): the vector
        list's from the set's columns, a keyword-only one's from its hit."""
        mids, threads, resources = self.vset._id_columns()
        nv = len(self.pos)
        if not len(at) or int(at.max()) < nv:
            rows = self.pos[at]
            return mids[rows].tolist(), threads[rows].tolist(), resources[rows].tolist()
        hits, only_at = self.hits, self._only_at
        ids: list[str] = []
        thread_of: list[str | None] = []
        resource_of: list[str | None] = []
        for i in at.tolist():
            if i < nv:
                row = int(self.pos[i])
                ids.append(mids[row])
                thread_of.append(threads[row])
                resource_of.append(resources[row])
            else:
                k = int(only_at[i - nv])
                ids.append(hits.mids[k])
                thread_of.append(hits.threads[k])
                resource_of.append(hits.resources[k])
        return ids, thread_of, resource_of


class _Answers(Protocol):
    """The thread order of a search's candidates (``Combined.ids``' order), as either feeder has it."""

    def links(self, combined: hybrid.Combined) -> "Mapping[str, str | None] | hybrid.Links": ...

    def found(self, combined: hybrid.Combined, at: list[int]) -> list[tuple[date | None, str | None]]: ...


class _ByRow:
    """The candidates' answers gathered from the vector set's ``OrderRows`` (the rows feeder)."""

    def __init__(self, got: Gathered, slot: np.ndarray) -> None:
        self.got, self.slot = got, slot

    def links(self, combined: hybrid.Combined) -> hybrid.Links:
        nr = self.got.next_row
        # (each next row's place among the candidates by ``_RowLists.slot``: -1 for a row not a candidate, for
        # ``NO_NEXT`` and ``NEXT_BY_ID``, which read its two last entries, and for a row added to the set since
        # the slot was made, which reads its last)
        slot = self.slot
        at = slot[np.minimum(nr, len(slot) - 1)]
        if self.got.next_ids:  # (a next message kept by id: a candidate only if it has a row now)
            place = dict(zip(combined.ids, range(len(combined.ids))))
            for i, mid in self.got.next_ids.items():
                at[i] = place.get(mid, -1)
        return hybrid.Links(nr != NO_NEXT, at)

    def found(self, combined: hybrid.Combined, at: list[int]) -> list[tuple[date | None, str | None]]:
        days, labels, names = self.got.day[at].tolist(), self.got.label[at].tolist(), self.got.labels
        return [(date.fromordinal(d) if d != NO_DAY else None, names[c] if c != NO_LABEL else None)
                for d, c in zip(days, labels)]

    def labelled(self, at: np.ndarray) -> bool:
        return bool((self.got.label[at] != NO_LABEL).any())


class _ById:
    """The candidates' answers as ``thread_order`` (or the order cache, or Postgres's read) gives them, by id
    (the records feeder)."""

    def __init__(self, order: dict[str, tuple[str | None, date | None, str | None]]) -> None:
        self.order = order

    def links(self, combined: hybrid.Combined) -> dict[str, str | None]:
        order = self.order
        return dict(zip(order, map(_NEXT, order.values())))

    def found(self, combined: hybrid.Combined, at: list[int]) -> list[tuple[date | None, str | None]]:
        ids, get = combined.ids, self.order.get
        return [(o[1], o[2]) if (o := get(ids[i])) is not None else (None, None) for i in at]

    def labelled(self, at: np.ndarray) -> bool:
        return any(o[2] is not None for o in self.order.values())


def _fuse(out: SearchRun, conn: sa.Connection, query: str, top_k: int, threshold: float | None,
          until: datetime | None, every_candidate: bool, degrade: Callable[[str], None],
          keyword_share: float = hybrid.KEYWORD_SHARE, kept: OrderCache | None = None,
          synced: bool | None = None) -> None:
    """Hybrid: fuse the two lists (``combine``), add each candidate's share of its thread neighbours'
    scores (``Combined.propagate``) and of its thread's best other candidate (``Combined.thread_prior``),
    then re-rank by next message, named period and named speaker. One pipeline on arrays by candidate,
    fed either the vector set's rows (``out.rows``: the scan's positions and cosines, the keyword hits as
    rows, each row's next message, day and speaker from its ``OrderRows``) or records and maps by id
    (Postgres, and every search the rows cannot feed: ``_row_hits``)."""
    qvec = out.qvec
    rows = out.rows
    if rows is not None:
        combined = rows.combined(keyword_share)
    else:
        if out.vset is not None and qvec is not None:
            vec_at = hybrid.places(out.vector)  # (the fusion's map, built once for both)
            out.cosines = out.vset.cosines(qvec, [r.message_id for r in out.keyword if r.message_id not in vec_at])
        else:
            vec_at = None
        combined = hybrid.Combined(out.vector, out.keyword, out.cosines, keyword_share=keyword_share, vec_at=vec_at)
    # A past turn's "last week" counts from that turn's day.
    spans = query_dates(query, until.astimezone(timezone.utc).date() if until is not None else today())
    out.date_spans = len(spans)
    # Only candidates that can still reach the top_k need their row read (a few microseconds each), and
    # a record: ``fused`` holds every candidate only when all are re-ranked.
    everyone = threshold is not None or every_candidate
    out.combined = combined
    # Neighbours' scores (``Combined.propagate``) need every candidate's next message: all are read. The
    # thread prior (``Combined.thread_prior``) moves candidates too, so the cut comes after both.
    neighbours = hybrid.NEIGHBOUR_SHARE > 0
    reshaped = neighbours or hybrid.THREAD_SHARE > 0
    dated = bool(spans)
    labels = hybrid.SPEAKER_BOOST > 0
    answers: _ByRow | _ById = _ById({})
    if combined.count and (hybrid.NEXT_SHARE > 0 or spans or labels or neighbours):
        try:
            def threads() -> dict[str, str | None]:  # (asked only when a candidate's answer is not kept)
                hints = {r.message_id: r.thread_id for r in out.keyword}
                hints.update((r.message_id, r.thread_id) for r in out.vector)
                return hints

            got = None
            if rows is not None and kept is not None and len(rows.cand):
                # Every candidate's answer from the set's arrays by row: the unknown ones filled from the order
                # cache first (a few a search after a write), then gathered.
                vset = rows.vset
                found = vset.order_rows.filled(conn, kept, vset, rows.cand, reader=thread_order, threads=threads,
                                               synced=synced)
                got = _ByRow(found, rows.slot) if found is not None else None
            if got is not None:
                answers = got
            else:
                # (every candidate, in ``ids``' order, when the scores are reshaped; else the best that may
                # reach the top_k)
                reading = (combined.ids if reshaped else combined.best_ids(
                    combined.count if everyone else combined.reach(top_k, dated=dated)))
                if kept is not None:
                    order = kept.read(conn, reading, labels=labels, reader=thread_order, threads=threads, synced=synced)
                else:
                    order = thread_order(conn, reading, labels=labels)
                answers = _ById(order)
        except sa.exc.DBAPIError as exc:  # ranking without neighbours and dates beats no answer
            degrade(f"thread order not read ({exc.__class__.__name__}); hits ranked without it")
    # Each candidate's next message, for the neighbours' share and the re-rank alike (positions by candidate:
    # ``Combined._linked``).
    next_of = answers.links(combined)
    if reshaped:  # (``propagate`` then ``thread_prior``, sorted once)
        combined.reshape(next_of, hybrid.NEIGHBOUR_SHARE, hybrid.THREAD_SHARE)
    # The receivers: the best candidates that may reach the top_k (every one for a threshold or the playground).
    # (positions in ``ids``' order, not sorted: ``Combined.within``; the re-rank sorts its own scores)
    best = np.arange(combined.count) if everyone else combined.within(top_k, dated=dated)
    out.received = received = len(best)
    out.by_speaker = set()
    if labels and received and answers.labelled(best):
        # (the query's words read only when some receiver has a label to match them against)
        at = best.tolist()
        named = SpeakerMatcher(query)
        out.by_speaker = {mid for mid, (_, label) in zip(combined.ids_at(at), answers.found(combined, at))
                          if label is not None and named(label)}
    # When no receiver was spoken by a speaker the query names, none gains the speaker boost, so only
    # those that reach the top_k without it are re-ranked (``Combined.reach``'s bound less the boost): the
    # same records, scores and order, without a lookup of each other receiver's next message.
    entries = best
    if not everyone and not out.by_speaker and hybrid.SPEAKER_BOOST > 0:
        entries = combined.within(top_k, dated=dated, spoken=False, among=best)
    in_period: set[str] | None = None
    if spans:
        at = entries.tolist()
        in_period = {mid for mid, (day, _) in zip(combined.ids_at(at), answers.found(combined, at))
                     if day is not None and any(s.contains(day) for s in spans)}
    # Without a threshold only the top_k are needed; with one, every candidate may be.
    out.reranked = combined.reranked(
        entries, next_of, in_period, limit=top_k if threshold is None and not every_candidate else None,
        by_speaker=out.by_speaker or None,
    )


def _note_long_query(out: SearchRun, degrade: Callable[..., None]) -> None:
    """Say so when the query's keyword terms were cut to the first ``MAX_QUERY_TERMS`` (``keyword_terms``)."""
    if len(out.terms) + len(out.dropped_terms) >= MAX_QUERY_TERMS:
        degrade(f"the query has {MAX_QUERY_TERMS} or more keyword terms; only its first {MAX_QUERY_TERMS} are "
                "searched", failure=False)


def run_search(
    index: Searchable,
    query: str,
    *,
    resource_id: str | None,
    thread_id: str | None,
    top_k: int,
    mode: Mode,
    threshold: float | None,
    until: datetime | None = None,
    unstored: frozenset[str] = frozenset(),
    exclude_thread: str | None = None,
) -> SearchResult:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, not {top_k!r}")
    if resource_id is None and thread_id is None:
        return SearchResult([], "no resource or thread given: recall needs a scope", mode)
    if not query or not query.strip():
        return SearchResult([], "the query has no text", mode)
    done = run(index, query, resource_id=resource_id, thread_id=thread_id, top_k=top_k, mode=mode,
               threshold=threshold, until=until, unstored=unstored, exclude_thread=exclude_thread)
    notes = [*([done.backlog] if done.backlog else []), *done.notes]
    if mode == "vector":
        hits = [SearchHit(r.message_id, r.thread_id, r.resource_id, r.score, "vector", r.score, None) for r in done.vector]
    elif mode == "keyword":
        hits = [SearchHit(r.message_id, r.thread_id, r.resource_id, r.score, "keyword", None, r.score) for r in done.keyword]
    else:
        hits = [
            SearchHit(
                f.message_id, f.thread_id, f.resource_id, f.score,
                "hybrid" if f.vector_rank and f.keyword_rank else "vector" if f.vector_rank else "keyword",
                f.vector_score, f.keyword_score,
            )
            for f in done.reranked
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
        notes.insert(0, _empty_reason(index, done.vset, done.keyword, mode, done.scope))
    reason = "; ".join(n for n in notes if n) or None
    details: dict[str, Any] = {
        "vector_candidates": done.counts()[0], "keyword_candidates": done.counts()[1],
        "vectors_in_scope": done.vset.n if done.vset is not None else 0, "model_id": index.model_id,
    }
    if done.date_spans:
        details["date_spans"] = done.date_spans
    return SearchResult(hits, reason, mode, details)


_NEXT, _LABEL = itemgetter(0), itemgetter(2)  # (of a ``thread_order`` answer)


def today() -> date:
    """The day relative periods ("yesterday", "last week") count from: UTC, like stored times."""
    return datetime.now(timezone.utc).date()


# The next user/assistant message of each candidate's thread, by (createdAt, id) like
# ``passages``; the thread_id/createdAt index answers each subquery with one seek.
_ORDER_SQL = (
    'SELECT m.id, m."createdAt", (SELECT n.id FROM mastra_messages n WHERE n.thread_id = m.thread_id '
    "AND n.role IN ('user', 'assistant') AND n.\"createdAt\" >= m.\"createdAt\" "
    'AND (n."createdAt" > m."createdAt" OR n.id > m.id) ORDER BY n."createdAt", n.id LIMIT 1), m.thread_id{text} '
    "FROM mastra_messages m WHERE m.id IN ({marks})"
)


def thread_order(
    conn: sa.Connection, message_ids: list[str], *, labels: bool = False,
    keys: dict[str, tuple[object, object]] | None = None,
) -> dict[str, tuple[str | None, date | None, str | None]]:
    """For each message: the id of the next message in its thread (None for the last), the UTC day
    it was written (None if unreadable) and, with ``labels``, the speaker its text starts with
    (``text.speaker_label``); ``keys`` receives each message's (thread id, createdAt) as stored.
    One statement per 500 messages, not one per message; with ``labels``
    it reads only the start of each text where the database can cut it out of the stored JSON
    (``dialect.json_string_head_sql``), else the whole content, decoded as ``text_of_raw`` does."""
    out: dict[str, tuple[str | None, date | None, str | None]] = {}
    head = dialect.json_string_head_sql(conn, "m.content", "content", LABEL_CHARS) if labels else None
    text = "" if not labels else f", {head}" if head is not None else f", {dialect.stored_text_sql(conn, 'm.content')}"
    unread: list[str] = []  # texts whose start the database could not cut out: read whole below
    for start in range(0, len(message_ids), 500):
        chunk = tuple(message_ids[start : start + 500])
        # ``all()``: fetched at once, not row by row (SQLAlchemy's row iteration cost more than the rows).
        for row in conn.exec_driver_sql(_ORDER_SQL.format(text=text, marks=",".join("?" * len(chunk))), chunk).all():
            label = None
            if head is not None:
                first = order_cache.head_text(row[4])
                if first is None:
                    unread.append(row[0])
                else:
                    label = speaker_label(first)
            elif labels:
                label = speaker_label(text_of_raw(row[4]))
            out[row[0]] = (row[2], order_cache.day_of(row[1]), label)
            if keys is not None:
                keys[row[0]] = (row[3], row[1])
    for start in range(0, len(unread), 500):  # rare: plain-text, JSONB, malformed or odd contents
        chunk = tuple(unread[start : start + 500])
        for mid, raw in conn.exec_driver_sql(
            f"SELECT id, {dialect.stored_text_sql(conn, 'content')} FROM mastra_messages "
            f"WHERE id IN ({','.join('?' * len(chunk))})", chunk,
        ):
            nxt, day, _ = out[mid]
            out[mid] = (nxt, day, speaker_label(text_of_raw(raw)))
    return out


def _empty_reason(index: Searchable, vset: ScopeVectors | None, kw: list[hybrid.Ranked], mode: str, scope: str) -> str:
    if mode != "keyword" and (vset.n == 0 if vset is not None else index.writable) and not kw:
        foreign = sum(vset.skips.other_model.values()) if vset is not None else 0
        if foreign:
            return f"no messages indexed for {scope} with model {index.model_id}"
        return f"no messages indexed for {scope}"
    if mode == "keyword" and not kw:
        return f"no keyword matches in {scope}"
    return f"nothing found in {scope}"
