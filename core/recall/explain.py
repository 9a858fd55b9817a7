"""Looking inside one recall search: the three rankings side by side, and why a message is not a hit.

``inspect_search`` runs the search pipeline itself (``core.recall.search.run``) and shows what a
search throws away: the vector list (cosines), the keyword list (BM25), and the hybrid list
(``hybrid.combine`` then ``hybrid.rerank``), each with every candidate's rank, raw scores and fused score, and marked hit,
below the threshold or outside the top-k. Its hits are the hits ``search`` returns for each mode
(a test keeps them equal), so the Studio's recall playground shows what recall does, not a copy of it.

``explain_message`` answers "why not this message?" for any stored message: its rank and score in
each list over the whole scope (not only the candidates), and what excluded it: deleted, another
resource or thread, a role that is never indexed, no text, edited since it was keyword-indexed, no
vector (or one from another embedding model), no keyword match, below the threshold, outside the
top-k, or never a hybrid candidate.

Both only read: they never apply the keyword queue or write a row (looking never writes). Messages
deleted since they were indexed are shown as deleted and never counted as hits; keyword candidates
edited since (by a process without recall, or another program) are shown as edited, left out of the
keyword list as the search leaves them out (``search.SearchRun.edited``).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Sequence

from core.messages import Message
from core.recall.passages import INDEXED_ROLES
from core.recall.schema import FTS_TABLE
from core.recall.search import run
from core.recall.text import recall_text
from core.recall.hybrid import fusion_for
from core.storage.memory_store import Include

if TYPE_CHECKING:  # pragma: no cover
    from core.recall.index import RecallIndex
    from core.storage import Store

logger = logging.getLogger(__name__)

ListName = Literal["vector", "keyword", "hybrid"]
LISTS: tuple[ListName, ...] = ("vector", "keyword", "hybrid")
Status = Literal["hit", "below-threshold", "outside-top-k", "deleted", "edited"]
# A score shown with three decimals read "0.000" for FTS5's BM25 of a word found in half or more of the
# keyword-indexed messages (its weight is clamped to ~1e-6: every word of a small database is such a word),
# which looks like no score at all. Below this, a score is shown with two significant digits, and a BM25
# this small is said to weigh (almost) nothing.
NEAR_ZERO = 0.0005


def score_text(score: float | None, digits: int = 3) -> str:
    """A score as people read it: ``digits`` decimals, or two significant digits when that would show
    a non-zero score as 0 ("0.00000052", never "0.000"); "?" when there is none."""
    if score is None:
        return "?"
    if score == 0 or abs(score) >= 10 ** -digits / 2:
        return f"{score:.{digits}f}"
    return f"{score:.{min(12, 1 - math.floor(math.log10(abs(score))))}f}"


def near_zero_weight(score: float | None, scoring: str) -> str:
    """What a BM25 near 0 means, said after it ("" otherwise): its words are in half or more of the
    keyword-indexed messages, so BM25 weighs them at almost nothing (FTS5 clamps such a word's weight
    to ~1e-6)."""
    if scoring != "BM25" or score is None or not 0 < score < NEAR_ZERO:
        return ""
    return (" Its BM25 is near 0: the words it matched are in half or more of the keyword-indexed messages "
            "(in a small database, even ordinary words are), so BM25 weighs them at almost nothing and this "
            "rank says little.")


FULL_RANKING = 1_000_000  # "every match": keyword ranks for one explained message are over the whole scope

# Codes of ``Explanation.verdict`` (and ``Placement.status``), in the order they decide the verdict.
VERDICTS = (
    "deleted", "other-resource", "other-thread", "role-not-indexed", "no-text", "not-indexed", "wrong-model",
    "hit", "neighbour", "below-threshold", "outside-top-k", "edited", "not-a-candidate", "no-match",
)


@dataclass(frozen=True)
class Candidate:
    """One message in one list. ``score`` is the list's own: cosine, -BM25 (higher is better) or fused."""

    rank: int  # 1-based position in its list
    message_id: str
    thread_id: str | None
    resource_id: str | None
    score: float
    vector_score: float | None  # cosine similarity (None: no vector from this model)
    keyword_score: float | None  # -BM25 (None: not in the keyword list)
    vector_rank: int | None = None  # hybrid: its rank in the vector / keyword candidate lists
    keyword_rank: int | None = None
    combined: float | None = None  # hybrid: the fused score, with its thread's share, before the re-rank
    status: Status = "hit"
    own: float | None = None  # hybrid: the fused score of its own two lists, before its thread's share

    @property
    def thread_moved(self) -> bool:
        """Hybrid: its thread's share changed its fused score as shown (three decimals)."""
        return self.own is not None and self.combined is not None and f"{self.own:.3f}" != f"{self.combined:.3f}"


@dataclass(frozen=True)
class Shown:
    """What a list row shows of a stored message."""

    id: str
    thread_id: str | None
    role: str
    created_at: datetime | None
    text: str


@dataclass(frozen=True)
class Window:
    """A hybrid hit with its ``message_range`` neighbours (what recall adds to the prompt), oldest first."""

    hit_id: str
    message_ids: tuple[str, ...]


@dataclass
class Inspection:
    query: str
    resource_id: str | None
    thread_id: str | None
    top_k: int
    threshold: float | None
    before: int
    after: int
    model_id: str
    lists: dict[ListName, list[Candidate]] = field(default_factory=dict)
    windows: list[Window] = field(default_factory=list)
    messages: dict[str, Shown] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # degraded or partial answers, said once
    terms: list[str] = field(default_factory=list)  # keyword terms searched (very common ones dropped)
    dropped_terms: list[str] = field(default_factory=list)
    vectors_in_scope: int = 0
    waiting: int = 0  # messages of the scope not keyword-indexed yet (new or edited since), besides ``notes``'
    unembedded: int = 0  # keyword matches with no vector from this model (saved while recall was off), in ``notes``
    timings: dict[str, float] = field(default_factory=dict)  # ms: embed, search (everything else)
    qvec: Any = None  # the query vector, reused by ``explain_message``
    keyword_scoring: str = "BM25"  # what the keyword list's scores are: BM25 (libSQL) or ts_rank (Postgres)
    # A vector-mode search of the same query (``SearchRun.vector_only``), where the scope has piece vectors
    # (``core.recall.pieces``): the messages it re-scored by their pieces, in its order, and of them those
    # a piece scored (score, which piece of how many, the piece's text). Empty: no pieces read here.
    rescored: list[str] = field(default_factory=list)
    vector_only: list[str] = field(default_factory=list)
    by_piece: dict[str, tuple[Any, str]] = field(default_factory=dict)

    @property
    def scope(self) -> str:
        return f"resource {self.resource_id}" if self.resource_id is not None else f"thread {self.thread_id}"

    def hits(self, name: ListName) -> list[Candidate]:
        return [c for c in self.lists.get(name, []) if c.status == "hit"]

    def count(self, name: ListName, status: Status) -> int:
        return sum(1 for c in self.lists.get(name, []) if c.status == status)

    def summary(self, name: ListName) -> str:
        """One line under a list: hits and what was cut, never a silent empty list."""
        hits = len(self.hits(name))
        parts = [f"{hits} hit{'s' if hits != 1 else ''}"]
        below = self.count(name, "below-threshold")
        if below:
            parts.append(f"{below} result{'s' if below != 1 else ''} below the threshold {self.threshold:g}")
        outside = self.count(name, "outside-top-k")
        if outside:
            parts.append(f"{outside} outside the top {self.top_k}")
        gone = self.count(name, "deleted")
        if gone:
            parts.append(f"{gone} deleted since indexed")
        edited = self.count(name, "edited")
        if edited:
            parts.append(f"{edited} edited since indexed")
        if name == "keyword" and self.threshold is not None:
            parts.append(f"threshold not applied to {self.keyword_scoring}")
        return " · ".join(parts)

    def empty_reason(self, name: ListName) -> str | None:
        """Why a list has no hits, in words a person can act on; None when it has some."""
        if self.hits(name):
            return None
        cands = self.lists.get(name, [])
        below = self.count(name, "below-threshold")
        if below:
            best = max((c.vector_score for c in cands if c.vector_score is not None), default=None)
            tail = f" (best similarity {best:.3f})" if best is not None else ""
            return f"{below} result{'s' if below != 1 else ''} below the threshold {self.threshold:g}{tail}: lower it to see them"
        if cands:
            edited = self.count(name, "edited")
            if edited == len(cands):
                return ("every candidate was edited since it was keyword-indexed (the next save with recall or "
                        "`memory-studio reindex` indexes the new text)")
            return ("every candidate was deleted since it was indexed" if not edited else
                    "every candidate was deleted or edited since it was indexed")
        if name == "keyword":
            return f"no keyword matches in {self.scope}" if self.terms else "the query has no searchable words"
        if self.vectors_in_scope == 0:  # (vector or hybrid: no keyword match either)
            return f"no messages indexed for {self.scope} with model {self.model_id}"
        return f"nothing found in {self.scope}"


@dataclass(frozen=True)
class Placement:
    """Where one message stands in one list, over the whole scope."""

    list: ListName
    status: str  # one of VERDICTS
    why: str
    rank: int | None = None  # position in that ranking (None: not ranked there)
    ranked: int = 0  # how many messages that ranking held
    score: float | None = None


@dataclass
class Explanation:
    message_id: str
    verdict: str  # one of VERDICTS: the first reason that decides it
    summary: str
    message: Shown | None = None
    placements: dict[ListName, Placement] = field(default_factory=dict)
    facts: list[str] = field(default_factory=list)  # what is stored about it (vector, keyword doc)
    neighbour_of: str | None = None


# -- the lists -------------------------------------------------------------------------------------
def inspect_search(
    index: "RecallIndex",
    query: str,
    *,
    resource_id: str | None,
    thread_id: str | None = None,
    top_k: int = 4,
    threshold: float | None = None,
    before: int = 1,
    after: int = 1,
    qvec: Any = None,
) -> Inspection:
    """Every list of one search, with ranks, raw scores, fused scores and what was cut (reads only).

    Scope as in ``RecallIndex.search``: a resource (optionally narrowed to ``thread_id``), or a thread.
    ``qvec`` skips embedding the query (the caller embedded it already).
    """
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, not {top_k!r}")
    if before < 0 or after < 0:
        raise ValueError("the message range must not be negative")
    out = Inspection(query, resource_id, thread_id, top_k, threshold, before, after, index.model_id,
                     keyword_scoring=keyword_scoring(index.store))
    out.lists = {name: [] for name in LISTS}
    if resource_id is None and thread_id is None:
        out.notes.append("no resource or thread given: recall needs a scope")
        return out
    if not query or not query.strip():
        out.notes.append("the query has no text")
        return out
    started = time.perf_counter()
    # The search's own steps, every hybrid candidate re-ranked (a search re-ranks only those that can
    # reach its top-k; their order is the same).
    done = run(index, query, resource_id=resource_id, thread_id=thread_id, top_k=top_k, mode="hybrid",
               qvec=qvec, every_candidate=True, vector_only_too=True)
    embed_ms = done.embed_ms
    out.qvec = done.qvec
    with index.store.db.read() as conn:
        waiting = index.keywords.waiting(conn, resource_id, thread_id) if index.has_fts else 0
    # The messages left out as edited since indexed are among those waiting (an update is queued for each)
    # and have a note of their own (``done.notes``): counted once, there.
    waiting = max(0, waiting - len(done.edited))
    out.waiting = waiting + len(done.edited)
    if waiting:
        how = ("allow writes to this database to index them" if index.store.db.read_only
               else "the next save with recall indexes them (or run `memory-studio reindex`)")
        other = " other" if done.edited else ""
        out.notes.append(f"{waiting}{other} message{'s' if waiting != 1 else ''} of this scope "
                         f"{'are' if waiting != 1 else 'is'} not keyword-indexed yet (new or edited since); {how}")
    out.notes.extend(done.notes)
    out.terms = [_plain(t) for t in done.terms]
    out.dropped_terms = [_plain(t) for t in done.dropped_terms]
    out.vectors_in_scope = done.vset.n if done.vset is not None else 0
    out.rescored = list(done.rescored)
    out.vector_only = [r.message_id for r in done.vector_only]
    out.by_piece = dict(done.by_piece)
    vec_ranked, kw_ranked = done.vector, done.keyword
    cos_of = {**done.cosines, **{r.message_id: r.score for r in vec_ranked}}

    ids = list(dict.fromkeys([r.message_id for r in vec_ranked] + [r.message_id for r in kw_ranked]))
    # (and the keyword candidates left out as edited since indexed: shown with their text now)
    edited = [r.message_id for _, r in done.left_out if r.message_id in done.edited]
    out.messages = _shown(index, list(dict.fromkeys(ids + edited)))
    gone = {mid for mid in ids if mid not in out.messages}
    kw_at = {r.message_id: r.score for r in kw_ranked}
    out.lists["vector"] = _mark(
        [Candidate(i, r.message_id, r.thread_id, r.resource_id, r.score, r.score, kw_at.get(r.message_id))
         for i, r in enumerate(vec_ranked, start=1)], top_k, threshold, gone)
    out.lists["keyword"] = _mark(
        [Candidate(i, r.message_id, r.thread_id, r.resource_id, r.score, cos_of.get(r.message_id), r.score)
         for i, r in enumerate(kw_ranked, start=1)], top_k, None, gone)
    # Keyword matches without a vector from this model (a save without recall keys its messages' docs, only a
    # writer with the model embeds them): found by their words only, which the banner says.
    if done.qvec is not None:
        n = out.unembedded = sum(1 for c in out.lists["keyword"] if c.vector_score is None and c.message_id not in gone)
        if n:
            out.notes.append(
                f"{n} keyword match{'es' if n != 1 else ''} {'have' if n != 1 else 'has'} no vector from {index.model_id} "
                f"yet (saved while semantic recall was off, or by another program): found by "
                f"{'their' if n != 1 else 'its'} words only; `memory-studio reindex` embeds {'them' if n != 1 else 'it'}")
    combined = {f.message_id: f.score for f in done.fused}
    own = done.combined.own if done.combined is not None else {}
    out.lists["hybrid"] = _mark(
        [Candidate(i, f.message_id, f.thread_id, f.resource_id, f.score, f.vector_score, f.keyword_score,
                   f.vector_rank, f.keyword_rank, combined.get(f.message_id), own=own.get(f.message_id))
         for i, f in enumerate(done.reranked, start=1)], top_k, threshold, gone)
    # Candidates the search left out as deleted (or, keyword ones, edited) since they were indexed: shown
    # last, marked so (an edited row that cannot be read as deleted, as the search sees such a row).
    for found_in, r in done.left_out:
        cand = Candidate(0, r.message_id, r.thread_id, r.resource_id, r.score, None, None,
                         status="edited" if r.message_id in done.edited and r.message_id in out.messages else "deleted")
        names: tuple[ListName, ...] = (found_in, "hybrid")
        for name in names:
            if not any(c.message_id == r.message_id for c in out.lists[name]):
                out.lists[name].append(replace(cand, rank=len(out.lists[name]) + 1))
    out.windows = _windows(index, out, resource_id)
    out.timings = {"embed": embed_ms, "search": (time.perf_counter() - started) * 1000 - embed_ms}
    return out


def keyword_scoring(store: "Store") -> str:
    """What a store's keyword scores are: FTS5's BM25 on libSQL, ``ts_rank`` on Postgres."""
    return "ts_rank" if store.capabilities.full_text == "tsvector" else "BM25"


def _plain(term: str) -> str:
    """A quoted keyword term as a person reads it."""
    return term.strip('"').replace('""', '"')


def _mark(cands: list[Candidate], top_k: int, threshold: float | None, gone: set[str]) -> list[Candidate]:
    """Status of each candidate, the way ``search`` cuts: deleted, then threshold, then top-k."""
    out: list[Candidate] = []
    kept = 0
    for c in cands:
        status: Status
        if c.message_id in gone:
            status = "deleted"
        elif threshold is not None and (c.vector_score is None or c.vector_score < threshold):
            status = "below-threshold"
        elif kept < top_k:
            status, kept = "hit", kept + 1
        else:
            status = "outside-top-k"
        out.append(replace(c, status=status))
    return out


def _windows(index: "RecallIndex", out: Inspection, resource_id: str | None) -> list[Window]:
    """Each hybrid hit with its neighbours, as semantic recall reads them (system messages left out)."""
    windows: list[Window] = []
    if out.before == 0 and out.after == 0:
        return [Window(c.message_id, (c.message_id,)) for c in out.hits("hybrid")]
    memory = index.store.memory
    hits = out.hits("hybrid")
    found = memory.message_windows([Include(c.message_id, c.thread_id, out.before, out.after) for c in hits],
                                   resource_id=resource_id)
    for c, window in zip(hits, found):
        msgs = [m for m in window if m.role != "system"]
        for m in msgs:
            out.messages.setdefault(m.id, _show(m))
        windows.append(Window(c.message_id, tuple(m.id for m in msgs)))
    return windows


def _show(m: Message) -> Shown:
    return Shown(m.id, m.thread_id, m.role, m.created_at, " ".join(recall_text(m).split()) or m.text)


def _shown(index: "RecallIndex", ids: Sequence[str]) -> dict[str, Shown]:
    """The stored messages among ``ids`` (a missing id was deleted); one unreadable row is skipped alone."""
    memory = index.store.memory
    try:
        return {m.id: _show(m) for m in memory.get_messages(ids)}
    except Exception:  # noqa: BLE001 - a corrupt row must not hide its neighbours
        logger.warning("a recalled message could not be read; reading them one by one", exc_info=True)
    out: dict[str, Shown] = {}
    for mid in ids:
        try:
            out.update((m.id, _show(m)) for m in memory.get_messages([mid]))
        except Exception:  # noqa: BLE001
            out[mid] = Shown(mid, None, "?", None, "(this stored message could not be read)")
    return out


# -- why not this message? -------------------------------------------------------------------------
def explain_message(
    index: "RecallIndex",
    message_id: str,
    inspection: Inspection,
) -> Explanation:
    """Why ``message_id`` is (or is not) a hit of ``inspection``'s search, list by list (reads only)."""
    ins = inspection
    found = _shown(index, [message_id]) if message_id else {}
    shown = found.get(message_id)
    out = Explanation(message_id, "no-match", "", shown)
    in_lists = {name: next((c for c in ins.lists.get(name, []) if c.message_id == message_id), None)
                for name in LISTS}
    if shown is None:
        indexed = any(c is not None for c in in_lists.values())
        out.verdict = "deleted"
        out.summary = (f"Message {message_id} is not stored any more, but the index still holds it: it was "
                       "deleted after it was indexed, and is never returned." if indexed else
                       f"No message with id {message_id} is stored in this database (deleted, or a wrong id).")
        return out
    stored = _stored(index, message_id)
    scope_problem = _scope_problem(index, stored, ins)
    if scope_problem is not None:
        out.verdict, out.summary = scope_problem
        return out
    if stored is None or stored.role not in INDEXED_ROLES:
        role = stored.role if stored is not None else "?"
        out.verdict = "role-not-indexed"
        out.summary = f"It is a {role} message: recall indexes only user and assistant messages."
        return out
    if not recall_text(stored).strip():
        out.verdict = "no-text"
        out.summary = "It has no text to embed or match (tool calls or files only)."
        return out

    vector_models, has_doc = _index_facts(index, stored)
    has_vector = index.model_id in vector_models
    out.facts.append(f"vector from {index.model_id}: {'yes' if has_vector else 'no'}")
    others = sorted(m or "unknown model" for m in vector_models if m != index.model_id)
    if others:
        out.facts.append(f"vectors from other models: {', '.join(others)}")
    out.facts.append(f"keyword-indexed: {'yes' if has_doc else 'no'}")
    out.placements["vector"] = _vector_placement(index, ins, message_id, has_vector, others)
    out.placements["keyword"] = _keyword_placement(index, ins, message_id, has_doc)
    out.placements["hybrid"] = _hybrid_placement(ins, message_id, in_lists["hybrid"])
    for w in ins.windows:
        if message_id in w.message_ids and w.hit_id != message_id:
            out.neighbour_of = w.hit_id
            break
    out.verdict, out.summary = _verdict(ins, out, has_vector, has_doc, others)
    return out


def _stored(index: "RecallIndex", message_id: str) -> Message | None:
    try:
        found = index.store.memory.get_messages([message_id])
    except Exception:  # noqa: BLE001 - an unreadable row is explained as such by the caller
        logger.warning("message %s could not be read for a recall explanation", message_id, exc_info=True)
        return None
    return found[0] if found else None


def _scope_problem(index: "RecallIndex", m: Message | None, ins: Inspection) -> tuple[str, str] | None:
    if m is None:
        return None
    resource = m.resource_id
    if resource is None and m.thread_id:
        thread = index.store.memory.get_thread(m.thread_id)
        resource = thread.resource_id if thread is not None else None
    if ins.resource_id is not None and resource not in (None, ins.resource_id):
        return "other-resource", (f"It belongs to resource {resource}; this search covers resource "
                                  f"{ins.resource_id} only (recall never crosses resources).")
    narrowed = ins.thread_id if ins.resource_id is None or ins.thread_id is not None else None
    if narrowed is not None and m.thread_id != narrowed:
        return "other-thread", (f"It is in thread {m.thread_id}; this search covers thread {narrowed} only. "
                                "Switch the scope to resource to search every thread of the resource.")
    return None


def _index_facts(index: "RecallIndex", m: Message) -> tuple[set[str | None], bool]:
    """(embedding models that have a vector of this message, whether it has a keyword doc)."""
    models: set[str | None] = set()
    if not index.unindexed([m]):
        models.add(index.model_id)
    with index.store.db.read() as conn:
        models.update(index.vectors.models_of(conn, m.id))
        has_doc = bool(index.has_fts) and m.id in index.keywords.doc_state(conn, [m.id])
    return models, has_doc


def _vector_placement(index: "RecallIndex", ins: Inspection, message_id: str, has_vector: bool,
                      others: list[str]) -> Placement:
    if not has_vector:
        why = (f"Its vector was made by {', '.join(others)}, not by {index.model_id}: vectors of another model "
               "are never compared. Run `memory-studio reindex` to embed it again." if others else
               f"It has no vector from {index.model_id} (saved while recall was off, or into a read-only "
               "database). Run `memory-studio reindex` to embed it.")
        return Placement("vector", "wrong-model" if others else "not-indexed", why)
    if ins.qvec is None:
        return Placement("vector", "no-match", "The query could not be embedded, so there is no vector ranking.")
    with index.store.db.read() as conn:
        vset = index.vector_set(conn, ins.resource_id, ins.thread_id)
    if vset is None:
        return Placement("vector", "not-indexed", f"There is no vector table {index.table}.")
    full = vset.ranked(ins.qvec, max(vset.n, 1), ins.thread_id if ins.resource_id is not None else None)
    rank = next((i for i, r in enumerate(full, start=1) if r.message_id == message_id), None)
    cos = next((r.score for r in full if r.message_id == message_id), None)
    if rank is None:
        return Placement("vector", "no-match", "It is not among the vectors of this scope.", None, len(full))
    cand = next((c for c in ins.lists["vector"] if c.message_id == message_id), None)
    status, why = _cut_reason(ins, cand, rank, cos, "similarity")
    return Placement("vector", status, why + _pieces_part(ins, message_id), rank, len(full), cos)


def _pieces_part(ins: Inspection, message_id: str) -> str:
    """What a vector-only search made of the message, where it read pieces (``core.recall.pieces``): the
    winning piece, or that the message kept its passage's similarity, or was not re-scored."""
    if not ins.rescored:
        return ""
    if message_id not in ins.rescored:
        return (f" A vector-only search re-scores the best {len(ins.rescored)} passages by their pieces; this "
                "message is outside them (scored by its passage alone).")
    at = ins.vector_only.index(message_id) + 1 if message_id in ins.vector_only else None
    where = f", rank {at} there" if at is not None else ""
    found = ins.by_piece.get(message_id)
    if found is None:
        return f" In a vector-only search it keeps its passage similarity (it has no pieces{where})."
    best, text = found
    shown = text if len(text) <= 120 else text[:117] + "…"
    return (f" In a vector-only search it scores {best.score:.3f} by its best of {best.pieces} pieces: "
            f"‘{shown}’{where}.")


EDITED_WHY = ("It was edited since it was keyword-indexed (by a process without recall, or another program): its "
              "keyword entry still holds the text before the edit, so keyword search leaves it out until the next "
              "save with recall or `memory-studio reindex` indexes the new text.")


def _keyword_placement(index: "RecallIndex", ins: Inspection, message_id: str, has_doc: bool) -> Placement:
    if not has_doc:
        return Placement("keyword", "not-indexed",
                         "It has no keyword entry yet (the keyword index picks up new messages at the next save "
                         "with recall, or `memory-studio reindex`).")
    if _edited_since_indexed(index, message_id):
        return Placement("keyword", "edited", EDITED_WHY)
    if not ins.terms:
        return Placement("keyword", "no-match", "The query has no searchable words.")
    with index.store.db.read() as conn:
        full = index.keyword_search(conn, ins.query, resource_id=ins.resource_id, thread_id=ins.thread_id,
                                    limit=FULL_RANKING)
    rank = next((i for i, h in enumerate(full, start=1) if h.message_id == message_id), None)
    if rank is None:
        dropped = f" ({', '.join(ins.dropped_terms)} dropped as very common)" if ins.dropped_terms else ""
        return Placement("keyword", "no-match",
                         f"None of the words searched ({', '.join(ins.terms)}){dropped} occur in it or in the "
                         "message before it.", None, len(full))
    score = full[rank - 1].score
    cand = next((c for c in ins.lists["keyword"] if c.message_id == message_id), None)
    status, why = _cut_reason(ins, cand, rank, score, ins.keyword_scoring, threshold_applies=False)
    if _matched_by_context_only(index, ins, message_id):
        why += (" None of the words searched is in the message itself: it matched through the message before "
                "it, whose words its keyword entry holds too (weighed less).")
    return Placement("keyword", status, why + near_zero_weight(score, ins.keyword_scoring), rank, len(full), score)


def _matched_by_context_only(index: "RecallIndex", ins: Inspection, message_id: str) -> bool:
    """Whether a message the keyword search ranks holds none of the words searched in its own text (so
    it matched through its context, the message before it). Told on FTS5 (its body column); Postgres's
    one weighted vector does not tell the two apart, so False there (reads only)."""
    if index.store.capabilities.full_text != "fts5" or not ins.terms:
        return False
    expr = "body : (" + " OR ".join('"' + t.replace('"', '""') + '"' for t in ins.terms) + ")"
    with index.store.db.read() as conn:
        found = conn.exec_driver_sql(
            f"SELECT 1 FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ? AND rowid = "
            "(SELECT rowid FROM mastra_messages WHERE id = ?)", (expr, message_id)).first()
    return found is None


def _edited_since_indexed(index: "RecallIndex", message_id: str) -> bool:
    """Whether the search leaves this message's keyword hits out as edited since indexed (reads only)."""
    with index.store.db.read() as conn:
        _note, gone, updated = index.backlog(conn)
        if message_id in gone or (updated is not None and message_id not in updated):
            return False
        return message_id in index.edited_since_indexed(conn, [message_id], queued=updated is not None)


def _hybrid_placement(ins: Inspection, message_id: str, cand: Candidate | None) -> Placement:
    ranked = len(ins.lists["hybrid"])
    if cand is None:
        vector_depth, keyword_depth = fusion_for(ins.model_id).depths(ins.top_k)
        fused = (f"the best {vector_depth} of each list" if vector_depth == keyword_depth else
                 f"the best {vector_depth} of the vector list and {keyword_depth} of the keyword list")
        return Placement("hybrid", "not-a-candidate",
                         f"Hybrid fuses {fused}; it is in neither, so it was never a candidate.", None, ranked)
    status, why = _cut_reason(ins, cand, cand.rank, cand.score, "fused score")
    # (a candidate left out as edited since indexed was never fused: its score is its raw keyword score)
    return Placement("hybrid", status, why + thread_share_part(cand), cand.rank, ranked,
                     None if status == "edited" else cand.score)


def thread_share_part(cand: Candidate) -> str:
    """What its thread changed in a hybrid candidate's score (``Combined.propagate`` and
    ``Combined.thread_prior``), when it changed it as shown (three decimals): its own lists' score and the
    score with its thread's share."""
    if not cand.thread_moved:
        return ""
    return (f" Before the re-rank: {cand.own:.3f} from its own lists, {cand.combined:.3f} with its thread's "
            "share (its previous and next messages' scores and its thread's best other match, when those are "
            "candidates).")


def _cut_reason(ins: Inspection, cand: Candidate | None, rank: int, score: float | None, what: str,
                threshold_applies: bool = True) -> tuple[str, str]:
    shown = score_text(score)
    if cand is None:  # ranked in the scope, but below the candidates a search looks at
        vector_depth, keyword_depth = fusion_for(ins.model_id).depths(ins.top_k)
        depth = vector_depth if what == "similarity" else keyword_depth
        return "outside-top-k", f"Rank {rank} ({what} {shown}): below the {depth} candidates a search keeps."
    if cand.status == "hit":
        return "hit", f"Rank {rank} ({what} {shown}): a hit."
    if cand.status == "below-threshold" and threshold_applies:
        if cand.vector_score is None:
            return "below-threshold", (f"Rank {rank} ({what} {shown}), but it has no similarity to compare with the "
                                       f"threshold {ins.threshold:g}.")
        where = f"Rank {rank}" if what == "similarity" else f"Rank {rank} ({what} {shown})"
        return "below-threshold", f"{where}, but its similarity {cand.vector_score:.3f} is below the threshold {ins.threshold:g}."
    if cand.status == "deleted":
        return "deleted", f"Rank {rank}, but it was deleted after it was indexed."
    if cand.status == "edited":
        return "edited", ("Matched by its keyword entry from before an edit, so left out (the next save with recall "
                          "or `memory-studio reindex` indexes the new text).")
    return "outside-top-k", f"Rank {rank} ({what} {shown}): outside the top {ins.top_k}."


def _verdict(ins: Inspection, e: Explanation, has_vector: bool, has_doc: bool, others: list[str]) -> tuple[str, str]:
    hyb = e.placements["hybrid"]
    if not has_vector and not has_doc:
        if others:
            return "wrong-model", e.placements["vector"].why
        return "not-indexed", "It is not in the recall index at all (no vector, no keyword entry). Run `memory-studio reindex`."
    if hyb.status == "hit":
        return "hit", f"A hit: hybrid rank {hyb.rank} of {hyb.ranked} (fused {hyb.score:.3f})."
    if e.neighbour_of is not None:
        rank = next((c.rank for c in ins.hits("hybrid") if c.message_id == e.neighbour_of), None)
        return "neighbour", (f"Not a hit itself, but it joins the prompt as a neighbour of hybrid hit {rank} "
                             f"({e.neighbour_of}; message range {ins.before} before, {ins.after} after).")
    if hyb.status in ("below-threshold", "outside-top-k"):
        return hyb.status, hyb.why
    if hyb.status == "edited" or (hyb.status == "not-a-candidate" and e.placements["keyword"].status == "edited"):
        dropped = (" Its vector from before the edit was dropped with it; `memory-studio reindex` embeds the new text."
                   if not has_vector else "")
        return "edited", EDITED_WHY + dropped
    if not has_vector:
        return ("wrong-model" if others else "not-indexed"), e.placements["vector"].why
    if hyb.status == "not-a-candidate":
        v, k = e.placements["vector"], e.placements["keyword"]
        where = f"vector rank {v.rank or '—'}, keyword rank {k.rank or '—'}"
        return "not-a-candidate", f"{hyb.why} ({where}.)"
    return hyb.status, hyb.why


__all__ = [
    "LISTS",
    "VERDICTS",
    "Candidate",
    "Explanation",
    "Inspection",
    "Placement",
    "Shown",
    "Window",
    "explain_message",
    "inspect_search",
    "near_zero_weight",
    "score_text",
]
