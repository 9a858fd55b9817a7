"""Fusing the vector and keyword rankings into one.

``combine`` (used by hybrid search) is a convex combination of normalised scores: each candidate gets
``a * bm25 / best_bm25 + (1 - a) * (cos - min_cos) / (max_cos - min_cos)``, the cosine range taken over
the vector candidates of the query. Candidates found by keywords alone get their exact cosine (the
vectors are in memory), so both signals are known for every candidate except BM25 below the keyword
list, which counts as 0. Normalising within the query makes the two scales comparable without
hard-coding a cosine range, which differs by model (spec/embedder.md).

Why not reciprocal rank fusion (``fuse``, kept for comparison): ranks throw away how *far* apart two
candidates are. With the USE model, keyword search alone is much stronger than vectors on LoCoMo, and
RRF let a mid-ranked vector hit push a clear keyword winner out of first place. Measured on the public
split (``bench/recall_locomo.py --sweep``; recall@1 / recall@10 / nDCG@10 / worst conversation's @10):
RRF at its best settings (k=5, keyword weight 1.5, depth 50) .287 / .711 / .518 / .672; this
combination with a=0.85 .352 / .717 / .549 / .691. Every a from .7 to .95 at depths 20-100 landed
within .715-.722 at @10, so a sits in the middle of a plateau rather than on a tuned peak.

Before the re-rank, each candidate gains a share of its thread neighbours' fused scores (the previous
and the next message, when candidates: ``Combined.propagate``, ``NEIGHBOUR_SHARE``): an answer in a
conversation spans a few turns, and a turn whose neighbours match the query too is more likely among
them. Hybrid recall@10 on LoCoMo's public split .760 -> .777 with USE, .794 -> .807 with e5, every
conversation gaining with both (see ``Combined.propagate`` for the neighbours of the share chosen).
Then each gains a share of the best other candidate of its thread (``Combined.thread_prior``,
``THREAD_SHARE``): a conversation whose other turns match the query too is more likely to be about it than
one matching once in passing. Hybrid recall@10 .777 -> .789 with USE, .807 -> .818 with e5; what the
prompt sees at top 4 with the default range .710 -> .722 and .745 -> .755.

``rerank`` then uses what a conversation's order and times say (hybrid search only):

- The next message of the thread. A question is usually answered in the following turn, so a message
  whose reply also matches the query is more likely the one asked about: each candidate gains
  ``NEXT_SHARE`` of its next message's fused score when that message is a candidate too.
- The period the query names ("on 25 May, 2022", "in June", "last week"; ``text.query_dates``).
  Neither the words nor the vectors of a message know when it was written; its ``createdAt`` does.
  Candidates written in that period gain ``DATE_BOOST``: a boost, not a filter, as a question may name
  when something happened rather than when it was talked about.

The sum is divided by ``1 + NEXT_SHARE (+ DATE_BOOST when the query names a period)``, so reranked
scores keep the bound of ``combine`` (at most 1). Measured on LoCoMo's public split (hybrid, USE;
recall@1 / @10 / nDCG@10): combine alone .351 / .717 / .548; with the next message at NEXT_SHARE
.12-.25, @10 .724-.730 (a plateau; .3 falls back to .725); the previous message as well added nothing
(.729 at .05), nor did adding non-candidate neighbours. With dates at DATE_BOOST .1 / .2 / .3 / .5 / 1.0:
@10 .736 / .740 / .744 / .746 / .746; .3 takes most of the gain while staying a boost
(12 questions gained, 1 lost against no date boost). All five conversations improved.
- The speaker the query names. A transcript line often starts with who says it ("Caroline: ..."), and
  a question about a person ("What did Caroline research?") is mostly answered by that person's own
  lines: on LoCoMo's public split 678 of 760 questions name one speaker, and 930 of their 967 evidence
  messages are that speaker's. The name itself cannot rank (it is in half the messages: dropped as
  very common, and BM25 gives it no weight anyway), so candidates whose text starts with the named
  speaker's label (``text.speaker_label``) gain ``SPEAKER_BOOST``. Hybrid recall@10 .744 -> .760
  (every conversation gained: .767/.735/.778/.713/.733 -> .781/.770/.793/.722/.753); .2 gave .7605
  and .4 .7600, a plateau.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from itertools import chain, compress, count, repeat
from operator import and_, attrgetter, is_not, itemgetter, ne, not_
from typing import AbstractSet, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from core.recall.types import CANDIDATES, Fused as Fused, Ranked as Ranked  # (re-exported: the fusion's types)

# Share of the keyword score in ``combine``; tuned on LoCoMo's public split only (a plateau, see above).
KEYWORD_SHARE = 0.85

# ``rerank``: share of the next message's fused score added to a candidate, and the boost of a
# candidate written in the period the query names. Tuned on LoCoMo's public split only (see above).
NEXT_SHARE = 0.2
DATE_BOOST = 0.3
# ``rerank``: boost of a candidate whose text starts with the label of a speaker the query names
# ("Caroline: ..." for "What did Caroline research?"; ``text.speaker_label``). See the module docstring.
SPEAKER_BOOST = 0.4
# ``Combined.propagate``: share of each thread neighbour's fused score (previous and next message, when
# candidates) added to a candidate's before the re-rank. Tuned on LoCoMo's public split only (see
# ``Combined.propagate``); 0 turns it off.
NEIGHBOUR_SHARE = 0.4
# ``Combined.thread_prior``: share of the best other candidate of a candidate's thread added to its score,
# after the neighbours' share and before the re-rank. Tuned on LoCoMo's public split only (see
# ``Combined.thread_prior``); 0 turns it off.
THREAD_SHARE = 0.3


@dataclass(frozen=True)
class Fusion:
    """The fusion settings of one embedding model: its keyword share in ``combine`` and how many
    candidates each list feeds the fusion (``candidates``; the keyword list ``keyword_candidates`` when
    set)."""

    keyword_share: float = KEYWORD_SHARE
    candidates: int = CANDIDATES
    # Lower-case the query before it is embedded (the stored passages keep their case; ``search.run``).
    lower_query: bool = False
    # The keyword list's depth when it differs from the vector list's (None: ``candidates`` for both).
    keyword_candidates: int | None = None

    def depths(self, top_k: int) -> tuple[int, int]:
        """How many hits the vector and the keyword list give a hybrid search of ``top_k``."""
        kw = self.candidates if self.keyword_candidates is None else self.keyword_candidates
        return max(top_k, self.candidates), max(top_k, kw)


# Per embedding model family (the model id before '@'), tuned on LoCoMo's public split only.
# e5's cosines separate related from unrelated messages better than USE's (vector-only recall@10 .62
# against .49), so its vectors earn a larger share, and a deeper list lets the re-rank reach the
# messages one list ranks low. Hybrid recall@10 / worst conversation with e5
# (``bench/recall_locomo.py --model e5``): USE's settings (a=.85, depth 50) .781 / .749; depth 50:
# a=.75 .790 / .763, .7 .789 / .765, .65 .789 / .758, .6 .784, .5 .777; depth 100: a=.7 .788 / .753,
# .65 .794 / .765, .6 .793 / .768, .55 .785; a=.65 at depth 30 / 80 / 150: .778 / .795 / .795 (a plateau
# from .6 to .7 at depths 80-150). Next-message share .1-.4, speaker boost .2-.6 and date boost .2-.5
# moved it by less than .01 either way, so those stay as tuned for USE.
#
# USE (the default model) embeds a query better lower-cased: vector-only recall@10 .485 -> .535 (worst
# conversation .378 -> .507), with the passages as stored (lower-casing them too gave less). At USE's
# old fusion (a=.85, depth 50) hybrid stays .789 / worst .745; the better vector list earns a larger
# share and a deeper list: at depth 100, a=.6 / .7 / .75 / .8: .808 / .806 / .806 / .804, worst
# .768-.774 (the question as typed there: .789-.798, worst .733-.760). Measured with
# ``bench/recall_routes.py --model use --only form`` (ARCHITECTURE, Figures).
# Each candidate costs the fusion work (its cosine, its thread order, the neighbours' share, the thread
# prior, the re-rank), so the two lists' depths were then tuned apart (``--only depth``, 245 settings):
# a=.65 with the vector list 70 deep and the keyword list 50 gives .806 / worst .766, and every setting
# next to it .800-.807 (a=.6 / .7, vector 60 / 80, keyword 40 / 60; at a=.65 every vector depth 60-120
# with every keyword depth 30-100 is .800-.808), for 120 list places instead of 200: a hybrid search
# x.76-.85 the time of a=.75 / 100 / 100's, round by round (``bench/recall_speed.py --skip-1m --no-model
# --fusion use --compare-fusion``). Vector 50 stays below .80 at every share and keyword depth. Fusing
# only the best N of the combination in the later steps lost (N=80 .795-.803, N=40 .783-.794): the
# neighbours' share needs every candidate.
MODEL_FUSION: dict[str, Fusion] = {
    "multilingual-e5-small-q4": Fusion(keyword_share=0.65, candidates=80),
    "use-multilingual-v3-q": Fusion(keyword_share=0.65, candidates=70, keyword_candidates=50, lower_query=True),
}


def fusion_for(model_id: str | None) -> Fusion:
    """The fusion settings for vectors of ``model_id`` (USE's, the defaults, for any other model)."""
    family = (model_id or "").split("@", 1)[0]
    return MODEL_FUSION.get(family, Fusion())


# Reciprocal rank fusion settings (``fuse``): k=5 with keyword weight 1.5 was RRF's best on the split.
RRF_K = 5.0
VECTOR_WEIGHT = 1.0
KEYWORD_WEIGHT = 1.5


def combine(
    vector: Sequence[Ranked],
    keyword: Sequence[Ranked],
    cosines: Mapping[str, float] | None = None,
    *,
    keyword_share: float = KEYWORD_SHARE,
    limit: int | None = None,
) -> list[Fused]:
    """Score-aware fusion, best first; ties broken by cosine, then message id, so the order is stable.

    ``vector`` holds cosines, ``keyword`` -BM25 scores (higher is better), both best first. ``cosines``
    gives the exact cosine of keyword candidates that are not in ``vector`` (a missing one counts as the
    lowest vector candidate's). Fused scores are at most 1; they are at least 0 except for keyword-only
    candidates less similar than every vector candidate.
    ``limit`` keeps only the best ones (the ranking above them is the same).
    """
    scored = Combined(vector, keyword, cosines, keyword_share=keyword_share)
    return scored.fused(scored.order[:limit] if limit is not None else scored.order)


# The ids, threads and resources of the candidates at some places, in that order (``Combined``'s feeders).
Fields = Callable[[np.ndarray], "tuple[list[str], Sequence[str | None], Sequence[str | None]]"]


class Links(NamedTuple):
    """Each candidate's next message, by candidate (``Combined``'s order): whether it names one other
    than itself (``has``), and that message's place among the candidates (``at``; -1: not a candidate)."""

    has: np.ndarray
    at: np.ndarray


class Combined:
    """``combine``'s scores of every candidate, best first (``order``: (-score, -cosine, message id)),
    with the ``Fused`` records built only for the candidates asked for (``fused``): a search needs
    every score (any candidate may be another's next message) but records for the few that can
    still reach its top k.

    The scores are kept as arrays by candidate (``ids``: the vector list's candidates, then the keyword
    list's others; a message listed twice counts once, as its last entry), and every step after the
    fusion (``propagate``, ``thread_prior``, ``reshape``, the cut ``reach`` and ``reranked``) works on
    them in numpy, with the floating-point operations of the formulas in their docstrings in the same
    order as a loop over the candidates would do them, so each score is the same to the bit; the
    order's ties go by cosine, then message id, as a sort of ``(-score, -cosine, id)`` tuples would.
    The tuples (``order``, ``entries``) and maps by id (``scores``, ``own``) are built only when asked
    (the playground, tests); a search asks for records of its hits only."""

    def __init__(self, vector: Sequence[Ranked], keyword: Sequence[Ranked], cosines: Mapping[str, float] | None = None,
                 *, keyword_share: float = KEYWORD_SHARE, vec_at: dict[str, int] | None = None) -> None:
        """The candidates of two lists of records (the records feeder; ``of_rows`` is the vector set's).
        ``vec_at``: ``places(vector)``, when the caller has it."""
        cosines = cosines or {}
        # Each candidate's place in its lists (0-based; a message listed twice: its last place). Places,
        # not (rank, hit) pairs: small ints are shared objects, so the maps allocate nothing per candidate.
        vec_at = places(vector) if vec_at is None else vec_at
        kw_at = places(keyword)
        lo: float
        span: float
        if vector:
            lo = min(map(_SCORE, vector))
            span = max(map(_SCORE, vector)) - lo
        else:
            lo, span = 0.0, 0.0
        # The candidates: the vector list's (each once, at its last place), then the keyword list's others.
        # (each step a C-level map over the candidates, not a Python loop: ~120 of them a search)
        vec_rows: Sequence[Ranked] = vector if len(vec_at) == len(vector) else list(map(vector.__getitem__, vec_at.values()))
        kw_rows: Sequence[Ranked] = keyword if len(kw_at) == len(keyword) else list(map(keyword.__getitem__, kw_at.values()))
        kw_ids = list(map(_MESSAGE_ID, kw_rows))
        outside = list(map(not_, map(vec_at.__contains__, kw_ids)))
        kw_only = list(compress(kw_rows, outside))
        only_ids = list(compress(kw_ids, outside))
        vec_ids = list(map(_MESSAGE_ID, vec_rows))
        nv = len(vec_rows)
        ids = vec_ids + only_ids
        m = len(ids)
        # Each candidate's cosine (a keyword-only one without a known cosine: NaN, ``known`` False), and its
        # places in the lists (-1: not listed).
        known_cos: list[float | None] = list(map(cosines.get, only_ids))
        known = np.ones(m, dtype=bool)
        if None in known_cos:
            known[nv:] = [c is not None for c in known_cos]
            known_cos = [math.nan if c is None else c for c in known_cos]
        cos = np.fromiter(chain(map(_SCORE, vec_rows), known_cos), dtype=np.float64, count=m)
        kat = np.fromiter(chain(map(kw_at.get, vec_ids, repeat(-1)), map(kw_at.__getitem__, only_ids)),
                          dtype=np.int64, count=m)
        vat = np.full(m, -1, dtype=np.int64)
        vat[:nv] = list(vec_at.values()) if len(vec_at) != len(vector) else range(nv)
        kw_scores = np.fromiter(map(_SCORE, keyword), dtype=np.float64, count=len(keyword))
        threads = [*map(_THREAD_ID, vec_rows), *map(_THREAD_ID, kw_only)]
        resources = [*map(_RESOURCE_ID, vec_rows), *map(_RESOURCE_ID, kw_only)]

        def fields(at: np.ndarray) -> tuple[list[str], list[str | None], list[str | None]]:
            where = at.tolist()
            return [ids[i] for i in where], [threads[i] for i in where], [resources[i] for i in where]

        self._threads = threads
        self._start(m, ids, fields, None, cos, known if not known.all() else None, vat, kat, kw_scores, lo, span,
                    bool(vector), keyword_share)

    @classmethod
    def of_rows(cls, count: int, fields: Fields, codes: np.ndarray, cos: np.ndarray, vector_count: int, kat: np.ndarray,
                kw_scores: np.ndarray, *, keyword_share: float = KEYWORD_SHARE) -> "Combined":
        """The candidates as the vector set's rows give them (the rows feeder, ``search._RowLists``): the
        vector list's ``vector_count`` first (best first, each message once), then the keyword list's
        others in its order (``count`` in all); ``fields`` gives the ids, threads and resources of the
        candidates at some places (as their hits in either list name them, the vector list's first), built
        only when asked (a search asks for its top k); each one's thread code (equal codes: the same
        thread), cosine (float64 of the scan's float32, as the records hold it) and place in the keyword
        list (-1: none), and the keyword list's scores. The same candidates, arrays and scores as
        ``Combined(vector, keyword, cosines)`` of the records these rows stand for."""
        self = cls.__new__(cls)
        vat = np.arange(count, dtype=np.int64)
        vat[vector_count:] = -1
        vcos = cos[:vector_count]
        lo = float(vcos.min()) if vector_count else 0.0
        span = float(vcos.max()) - lo if vector_count else 0.0
        self._start(count, None, fields, codes, cos, None, vat, kat, kw_scores, lo, span, vector_count > 0,
                    keyword_share)
        return self

    def _start(self, count: int, ids: list[str] | None, fields: Fields, codes: np.ndarray | None, cos: np.ndarray,
               known: np.ndarray | None, vat: np.ndarray, kat: np.ndarray, kw_scores: np.ndarray, lo: float,
               span: float, has_vector: bool, keyword_share: float) -> None:
        """Both feeders' arrays by candidate, and ``combine``'s scores from them."""
        if not 0.0 <= keyword_share <= 1.0:
            raise ValueError(f"keyword_share must be between 0 and 1, not {keyword_share}")
        m = self.count = count
        self._ids, self._fields, self._codes = ids, fields, codes
        # (``known``: None when every candidate's cosine is known)
        self._cos, self._known, self._vat, self._kat, self._kw_scores = cos, known, vat, kat, kw_scores
        best_kw = float(kw_scores.max()) if len(kw_scores) else 0.0
        kw_scale = keyword_share / best_kw if best_kw > 0 else 0.0
        vec_share = 1.0 - keyword_share
        # (an unlisted candidate's -1 reads the list's last score, a listed one's: the same products, masked)
        if math.isfinite(kw_scale):
            kw_part = np.where(kat >= 0, kw_scores[kat] * kw_scale, 0.0) if len(kw_scores) else np.zeros(m)
        else:  # a best score so near 0 that its reciprocal overflows (a subnormal): divide first (no inf * 0)
            kw_part = np.where(kat >= 0, kw_scores[kat] / best_kw * keyword_share, 0.0)
        # ``vec_part``: (cos - lo) / span capped at 1, not clamped at 0 (a keyword hit whose cosine is below
        # every vector candidate's counts against it: clamping at 0 cost .009 recall@20 and .006 recall@5 on
        # LoCoMo public; the cap keeps a keyword candidate more similar than every vector candidate, possible
        # when the vector list was cut by a filter, from outranking the best of both lists). With no spread,
        # 1 for a cosine at least the lowest, else 0; without a vector list or a cosine, 0.
        if not has_vector:
            part = np.zeros(m)
        elif span > 1e-12:
            with np.errstate(invalid="ignore"):
                part = np.minimum((cos - lo) / span, 1.0)
        else:
            with np.errstate(invalid="ignore"):
                part = np.where(cos >= lo, 1.0, 0.0)
        if known is not None:
            part[~known] = 0.0
        self._s = kw_part + vec_share * part
        self._s0 = self._s  # (each candidate's score from its own two lists: ``own``)
        tie = -cos
        if known is not None:
            tie[~known] = 2.0  # (-(-2.0): no cosine counts as -2)
        self._tie = tie
        self._keys: np.ndarray | None = None
        self._rank: np.ndarray | None = None  # candidates best first (None: not sorted yet)
        self._links: tuple[object, np.ndarray, np.ndarray, np.ndarray] | None = None
        # (``within``'s best and top_k-th score of the scores ``_s`` (the same object), kept for the second cut)
        self._cut: tuple[np.ndarray, int, float, float] | None = None

    @property
    def ids(self) -> list[str]:
        """The candidates' message ids, in their order (built when first asked, by the rows feeder)."""
        if self._ids is None:
            self._ids = self._fields(np.arange(self.count))[0]
        return self._ids

    def ids_at(self, at: "np.ndarray | list[int]") -> list[str]:
        """The message ids of the candidates at ``at`` (only theirs gathered, when ``ids`` is not built yet)."""
        if self._ids is None:
            return self._fields(np.asarray(at, dtype=np.int64))[0]
        ids = self._ids
        return [ids[i] for i in (at.tolist() if isinstance(at, np.ndarray) else at)]

    # -- arrays --------------------------------------------------------------------------------------

    def _id_keys(self) -> np.ndarray:
        """The candidates' ids as a numpy array that sorts as Python sorts the strings (numpy's fixed-width
        text drops trailing NUL characters, so ids with a NUL are compared as Python objects)."""
        if self._keys is None:
            self._keys = np.array(self.ids, dtype=object if "\0" in "".join(self.ids) else str)
        return self._keys

    def _sorted(self, scores: np.ndarray, at: np.ndarray | None = None, group: np.ndarray | None = None) -> np.ndarray:
        """Positions (in ``at``, or of every candidate) by (-score, -cosine, id), as tuples sort (within
        each ``group`` code first, when given). The ids are compared only when two candidates have the same
        score and cosine (rare: the sort by the two numbers is then the whole order)."""
        tie = self._tie if at is None else self._tie[at]
        neg = -scores
        keys = (tie, neg) if group is None else (tie, neg, group)
        order = np.lexsort(keys)
        if len(order) > 1:
            # (equal scores first, the rest only if some: two equal scores are rare)
            ranked = neg[order]
            same = ranked[1:] == ranked[:-1]
            if same.any():
                same &= tie[order[1:]] == tie[order[:-1]]
                if group is not None:
                    same &= group[order[1:]] == group[order[:-1]]
            if same.any():
                ids = self._id_keys() if at is None else self._id_keys()[at]
                order = np.lexsort((ids, *keys))
        return order

    @property
    def rank(self) -> np.ndarray:
        """The candidates, best first (positions in ``ids``)."""
        if self._rank is None:
            self._rank = self._sorted(self._s)
        return self._rank

    def sorted_scores(self) -> np.ndarray:
        """Every candidate's score, best first."""
        ranked: np.ndarray = self._s[self.rank]
        return ranked

    def _linked(self, next_of: "Mapping[str, str | None] | Links") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per candidate: whether ``next_of`` names a next message other than itself, that message's
        position (-1: not a candidate), and the candidate whose next message it is (-1: none; of two, the
        last in ``next_of``'s order). Kept for the same map (a search passes one to both steps).
        ``next_of``: a map by id, or ``Links`` (the first two by candidate, as the vector set's rows give them)."""
        if self._links is not None and self._links[0] is next_of:
            return self._links[1], self._links[2], self._links[3]
        if isinstance(next_of, Links):
            has, nidx = next_of
            pidx = np.full(len(nidx), -1, dtype=np.int64)
            linked = np.flatnonzero(nidx >= 0)
            pidx[nidx[linked]] = linked  # (a thread's order: no two candidates have the same next message)
            self._links = (next_of, has, nidx, pidx)
            return has, nidx, pidx
        ids = self.ids
        m = len(ids)
        at: dict[str | None, int] = dict(zip(ids, range(m)))
        # (C-level maps over the candidates, not a Python loop: each one's next message, whether it names one
        # other than itself, and that message's position)
        nexts = list(map(next_of.get, ids))
        has = np.fromiter(map(and_, map(is_not, nexts, repeat(None)), map(ne, nexts, ids)), dtype=bool, count=m)
        nidx = np.fromiter(map(at.get, nexts, repeat(-1)), dtype=np.int64, count=m)
        nidx[~has] = -1
        pidx = np.full(m, -1, dtype=np.int64)
        linked = np.flatnonzero(nidx >= 0)
        to = nidx[linked]
        if len(set(to.tolist())) == len(to):
            pidx[to] = linked
        else:  # (two name the same next message: the last in the map's order counts, as a map by next would keep)
            place = {mid: k for k, mid in enumerate(next_of)}
            for k in sorted(linked.tolist(), key=lambda k: place[ids[k]]):
                pidx[nidx[k]] = k
        self._links = (next_of, has, nidx, pidx)
        return has, nidx, pidx

    @property
    def order(self) -> list[tuple[float, float, str]]:
        """Every candidate's ``(-score, -(cosine or -2.0), message id)``, best first."""
        return self._tuples(self.rank)

    @property
    def entries(self) -> list[tuple[float, float, str]]:
        """``order``'s entries in the candidates' order (``ids``)."""
        return list(zip((-self._s).tolist(), self._tie.tolist(), self.ids))

    def _tuples(self, at: np.ndarray) -> list[tuple[float, float, str]]:
        ids = self.ids
        return list(zip((-self._s[at]).tolist(), self._tie[at].tolist(), [ids[i] for i in at.tolist()]))

    def scores(self) -> dict[str, float]:
        return dict(zip(self.ids, self._s.tolist()))

    @property
    def own(self) -> dict[str, float]:
        """Each candidate's score from its own two lists, before ``propagate`` and ``thread_prior`` (the
        recall playground shows both parts)."""
        return dict(zip(self.ids, self._s0.tolist()))

    def propagate(self, next_of: "Mapping[str, str | None] | Links", share: float) -> None:
        """Each candidate's score becomes ``(score + share * (previous's + next's)) / (1 + 2 * share)``,
        its thread neighbours' scores counted when they are candidates (``next_of``: the next message of
        each candidate, as for ``rerank``; the previous one is the candidate whose next it is), then
        ``order`` is sorted again (the same ties). Scores stay at most 1.

        A conversation's answer is spread over a few turns (a question, its answer, a follow-up), and a
        turn whose neighbours also match the query is more likely among them than one matching alone.
        Measured on LoCoMo's public split (``bench/recall_routes.py --only propagate``; hybrid recall@10,
        USE / e5, base .760 / .794): share .3 .774 / .807, .4 .777 / .807, .5 .782 / .805; every
        conversation gained with both models at .3-.5. The previous message alone, or a previous-message
        share added in ``rerank`` beside the next message's (no divisor), gained less, and not on both
        models at the same share; the divisor's side effect alone (stronger date and speaker boosts) gained
        at most .005."""
        if not self._takes(share):
            return
        self._s = self._propagated(next_of, share)
        self._rank = None

    def _propagated(self, next_of: "Mapping[str, str | None] | Links", share: float) -> np.ndarray:
        """``propagate``'s scores (a candidate named as its own next message, or naming a message that is not
        a candidate, gains ``share * 0.0``, as the formula's loop adds it)."""
        has, nidx, pidx = self._linked(next_of)
        base = self._s
        nxt = np.where(nidx >= 0, base[nidx], 0.0)
        s = np.where(has, base + share * nxt, base)
        s = np.where(pidx >= 0, s + share * base[pidx], s)
        return s * (1.0 / (1.0 + 2.0 * share))

    def thread_prior(self, share: float) -> None:
        """Each candidate's score becomes ``(score + share * best) / (1 + share)``, ``best`` being the best
        score of another candidate of the same thread (the thread its hit in either list names; 0 when it
        is its thread's only candidate), then ``order`` is sorted again (the same ties). Scores stay at
        most 1, and candidates of one thread keep their order among themselves (for a share below 1).

        A thread whose other messages match the query too is more likely to be about it than one where a
        single message matches in passing: the evidence of a conversation adds up, as a document's
        passages do in passage retrieval. Measured on LoCoMo's public split, where a thread is a
        session (``bench/recall_routes.py --only thread``, on top of the neighbours' share; hybrid
        recall@10, USE / e5, base .777 / .807): share .2 .787 / .814, .3 .789 / .818, .5 .787 / .822;
        every conversation gained with e5 at .2-.5, and all but one with USE (-.002 there). The mean of the
        best two others gave the same (.788 / .817 at .3); the sum of all others, capped at 1, less (.780 /
        .804)."""
        if not self._takes(share):
            return
        self._s = self._prior(self._s, share)
        self._rank = None

    def _prior(self, s: np.ndarray, share: float) -> np.ndarray:
        """``thread_prior``'s scores from scores ``s``: each thread's best and second-best candidate by
        (-score, -cosine, id), as the sorted order has them."""
        if self._codes is None:
            codes = dict(zip(dict.fromkeys(self._threads), count()))
            self._codes = np.fromiter(map(codes.__getitem__, self._threads), dtype=np.int64, count=len(self._threads))
        th = self._codes
        m = len(s)
        # In the sorted order each thread's candidates are one run, best first: a candidate at the head of its
        # run gains the next place's score when that place is of its thread (else ``share * 0.0``), every other
        # one its run head's. Computed in that order (the same products and sums, so the same bits), then
        # put back in the candidates' order.
        order = self._sorted(s, group=th)
        grouped = th[order]
        ranked = s[order]
        head = np.empty(m, dtype=bool)
        head[0] = True
        np.not_equal(grouped[1:], grouped[:-1], out=head[1:])
        start = np.maximum.accumulate(np.where(head, np.arange(m), 0))  # (each place's run head)
        after = np.zeros(m, dtype=bool)  # (the next place is of the same thread)
        np.logical_not(head[1:], out=after[:-1])
        following = np.empty(m)
        following[:-1] = ranked[1:]
        following[-1] = 0.0
        gained = np.where(head, np.where(after, share * following, share * 0.0), share * ranked[start])
        out = np.empty(m)
        out[order] = (ranked + gained) * (1.0 / (1.0 + share))
        return out

    def reshape(self, next_of: "Mapping[str, str | None] | Links", neighbour_share: float, thread_share: float) -> None:
        """``propagate(next_of, neighbour_share)`` then ``thread_prior(thread_share)``, sorted once."""
        takes_neighbours, takes_thread = self._takes(neighbour_share), self._takes(thread_share)
        s = self._s
        if takes_neighbours:
            s = self._propagated(next_of, neighbour_share)
        if takes_thread:
            s = self._prior(s, thread_share)
        if takes_neighbours or takes_thread:
            self._s = s
            self._rank = None

    def _takes(self, share: float) -> bool:
        """Whether a step with this share changes anything (a negative share is refused)."""
        if share < 0:
            raise ValueError(f"share must not be negative, not {share}")
        return share != 0 and self.count > 0

    def reach(self, top_k: int, *, dated: bool, spoken: bool = True, among: int | None = None) -> int:
        """How many of the best candidates (of the best ``among``, or of all) the re-rank could place in the
        top ``top_k``: gains are never negative, so the top_k-th candidate keeps at least its score, and
        no candidate gains more than the next-message share of the best score plus the speaker boost
        (unless no candidate gains it: ``spoken`` False) and, when the query names a period (``dated``),
        the date boost (the common divisor changes no order). Of a prefix, the same cut."""
        ranked = self.sorted_scores()
        n = len(ranked) if among is None else among
        if n <= top_k:
            return n
        # (without the speaker boost's slack, a margin for rounding: scores and gains are a few units at most,
        # their sums' rounding errors about 1e-15)
        gain = (NEXT_SHARE * max(float(ranked[0]), 0.0) + (SPEAKER_BOOST if spoken else _ROUNDING)
                + (DATE_BOOST if dated else 0.0))
        bar = float(ranked[top_k - 1]) - gain
        return int(np.count_nonzero(ranked[:n] >= bar))

    def within(self, top_k: int, *, dated: bool, spoken: bool = True, among: np.ndarray | None = None) -> np.ndarray:
        """The candidates ``reach`` counts, found without sorting (positions in ``ids``' order, not best
        first): the best ``reach(top_k, dated=dated, spoken=spoken)``, or of the candidates ``among`` (a
        previous ``within``'s: the best ``reach(..., among=len(among))``). Every candidate whose score is at
        least ``reach``'s bar: the best score and the top_k-th are taken by a partition of the negated scores,
        which places them (and a NaN, last) as the sort does, so the set is the same."""
        s = self._s
        pool = len(s) if among is None else len(among)
        if pool <= top_k:
            return np.arange(len(s)) if among is None else among
        cut = self._cut
        if cut is None or cut[0] is not s or cut[1] != top_k:
            neg = np.partition(-s, (0, top_k - 1))
            cut = self._cut = (s, top_k, float(-neg[0]), float(-neg[top_k - 1]))  # (the second cut's too)
        gain = (NEXT_SHARE * max(cut[2], 0.0) + (SPEAKER_BOOST if spoken else _ROUNDING)
                + (DATE_BOOST if dated else 0.0))
        bar = cut[3] - gain
        if among is None:
            return np.flatnonzero(s >= bar)
        kept: np.ndarray = among[s[among] >= bar]
        return kept

    def best_ids(self, count: int) -> list[str]:
        """The ids of the best ``count`` candidates, best first."""
        ids = self.ids
        return [ids[i] for i in self.rank[:count].tolist()]

    def reranked(
        self,
        entries: Sequence[tuple[float, float, str]] | int | np.ndarray,
        next_of: "Mapping[str, str | None] | Links",
        in_period: "AbstractSet[str] | np.ndarray | None" = None,
        *,
        limit: int | None = None,
        by_speaker: "AbstractSet[str] | np.ndarray | None" = None,
    ) -> list[Fused]:
        """``rerank(self.fused(entries), next_of, in_period, limit=limit, scores=self.scores(),
        by_speaker=by_speaker)``, the same records in the same order, with a record built only for each
        candidate returned (a search keeps ``limit`` of about a hundred). ``entries``: entries of
        ``order``, a count of its best (a search's cut, ``reach``), or the positions of some candidates in
        any order (``within``: the same records, as the order goes by score, cosine and id alone)."""
        if NEXT_SHARE < 0 or DATE_BOOST < 0 or SPEAKER_BOOST < 0:
            raise ValueError("next_share, date_boost and speaker_boost must not be negative")
        if isinstance(entries, np.ndarray):
            at = entries
        elif isinstance(entries, int):
            at = self.rank[:entries]
        else:
            place = dict(zip(self.ids, range(len(self.ids))))
            at = np.fromiter(map(place.__getitem__, map(_ENTRY_ID, entries)), dtype=np.int64, count=len(entries))
        _, nidx, _ = self._linked(next_of)
        s = self._s
        # ``_rescored``'s sums, in its order: the next message's share (a candidate), the date boost, the
        # speaker boost; then the common divisor.
        nx = nidx[at]
        score = s[at]
        score = np.where(nx >= 0, score + NEXT_SHARE * s[np.maximum(nx, 0)], score)
        dated = in_period is not None
        spoken = by_speaker if _any(by_speaker) else None
        if dated and _any(in_period):
            marked = self._marked(in_period, at)  # type: ignore[arg-type]
            score = np.where(marked, score + DATE_BOOST, score)
        if spoken:
            marked = self._marked(spoken, at)
            score = np.where(marked, score + SPEAKER_BOOST, score)
        score = score * (1.0 / (1.0 + NEXT_SHARE + (DATE_BOOST if dated else 0.0) + (SPEAKER_BOOST if spoken else 0.0)))
        picked = self._sorted(score, at)[:limit]
        return self._records(at[picked], score[picked].tolist())

    def _marked(self, which: "AbstractSet[str] | np.ndarray", at: np.ndarray) -> np.ndarray:
        """Whether each candidate at ``at`` is in ``which`` (ids, or a mask by candidate)."""
        if isinstance(which, np.ndarray):
            marked: np.ndarray = which[at]
            return marked
        return np.fromiter(map(which.__contains__, self.ids_at(at)), dtype=bool, count=len(at))

    def fused(self, entries: Sequence[tuple[float, float, str]]) -> list[Fused]:
        """The records of these entries of ``order``, in their order."""
        place = dict(zip(self.ids, range(len(self.ids))))
        at = np.fromiter(map(place.__getitem__, map(_ENTRY_ID, entries)), dtype=np.int64, count=len(entries))
        return self._records(at, [-e[0] for e in entries])

    def _records(self, at: np.ndarray, scores: Sequence[float]) -> list[Fused]:
        """The records of the candidates at ``at`` with these scores: each one's thread and resource as its
        hit names them, its cosine (None: not known), keyword score, and 1-based places in the lists."""
        ids, threads, resources = self._fields(at)
        cos = self._cos[at].tolist()
        known = self._known[at].tolist() if self._known is not None else repeat(True)
        vat = self._vat[at].tolist()
        kat = self._kat[at].tolist()
        kw = self._kw_scores.tolist() if len(self._kw_scores) else []
        return [_fused_of((mid, thread, resource, float(score), c if ok else None,
                           kw[k] if k >= 0 else None, v + 1 if v >= 0 else None, k + 1 if k >= 0 else None))
                for mid, thread, resource, score, c, ok, v, k in zip(ids, threads, resources, scores, cos, known, vat, kat)]


def _any(which: "AbstractSet[str] | np.ndarray | None") -> bool:
    """Whether a set of ids, or a mask by candidate, holds any candidate."""
    return bool(which.any()) if isinstance(which, np.ndarray) else bool(which)


_ROUNDING = 1e-9
# ``Fused(*fields)`` without the named tuple's ``__new__`` (a frame per record), as ``types.ranked_of``.
_fused_of: Callable[[tuple[str, str | None, str | None, float, float | None, float | None, int | None, int | None]],
                    Fused] = partial(tuple.__new__, Fused)
_SCORE = attrgetter("score")
_MESSAGE_ID = attrgetter("message_id")
_THREAD_ID = attrgetter("thread_id")
_RESOURCE_ID = attrgetter("resource_id")
_ENTRY_ID = itemgetter(2)


def places(ranked: Sequence[Ranked]) -> dict[str, int]:
    """Each message's place in a list (0-based; a message listed twice: its last place)."""
    return dict(zip(map(_MESSAGE_ID, ranked), range(len(ranked))))


def rerank(
    fused: Sequence[Fused],
    next_of: Mapping[str, str | None],
    in_period: AbstractSet[str] | None = None,
    *,
    next_share: float | None = None,
    date_boost: float | None = None,
    limit: int | None = None,
    scores: Mapping[str, float] | None = None,
    by_speaker: AbstractSet[str] | None = None,
    speaker_boost: float | None = None,
) -> list[Fused]:
    """``combine``'s candidates rescored by their thread neighbour and the period the query names.

    ``next_of`` maps a candidate to the next message of its thread (any message, or None for none; only
    candidates count). ``in_period`` holds the candidates written in the period the query names, or is
    None when it names none. ``next_share`` and ``date_boost`` default to ``NEXT_SHARE`` and ``DATE_BOOST`` (read at
    call time). Each score becomes ``(score + next_share * next's score + date_boost * [in period]) /
    (1 + next_share + date_boost * [the query names a period])``: at most 1 like ``combine``'s. Order
    best first, ties broken by cosine then message id; ``limit`` keeps the best ones. ``scores`` gives
    the fused score of every candidate when ``fused`` holds only those that can still reach the limit
    (the others may be next messages all the same). ``by_speaker`` holds the candidates spoken by a
    speaker the query names (None or empty when it names none): they gain ``speaker_boost`` (default
    ``SPEAKER_BOOST``), counted in the divisor like the date boost.
    """
    next_share = NEXT_SHARE if next_share is None else next_share  # read now: settings can be changed
    date_boost = DATE_BOOST if date_boost is None else date_boost
    speaker_boost = SPEAKER_BOOST if speaker_boost is None else speaker_boost
    base = scores if scores is not None else {f.message_id: f.score for f in fused}
    entries = [(-f.score, -(f.vector_score if f.vector_score is not None else -2.0), f.message_id) for f in fused]
    kept = _rescored(entries, base, next_of, in_period, by_speaker, next_share, date_boost, speaker_boost, limit)
    return [fused[at]._replace(score=-neg) for neg, _, _, at in kept]


def _rescored(
    entries: Sequence[tuple[float, float, str]],
    base: Mapping[str, float],
    next_of: Mapping[str, str | None],
    in_period: AbstractSet[str] | None,
    by_speaker: AbstractSet[str] | None,
    next_share: float,
    date_boost: float,
    speaker_boost: float,
    limit: int | None,
) -> list[tuple[float, float, str, int]]:
    """``rerank``'s rescoring of entries ``(-fused score, -(vector score or -2.0), message id)``: each
    entry as ``(-new score, the same tie, the message id, its place in entries)``, best first (ties by
    cosine, then id, then place), the best ``limit`` of them."""
    if next_share < 0 or date_boost < 0 or speaker_boost < 0:
        raise ValueError("next_share, date_boost and speaker_boost must not be negative")
    dated = in_period is not None
    spoken = by_speaker if by_speaker else None
    scale = 1.0 / (1.0 + next_share + (date_boost if dated else 0.0) + (speaker_boost if spoken else 0.0))
    scored: list[tuple[float, float, str, int]] = []
    get_next = next_of.get
    for at, (neg_score, tie, mid) in enumerate(entries):
        score = float(-neg_score)
        nxt = get_next(mid)
        if nxt is not None and nxt != mid and nxt in base:
            score += next_share * base[nxt]
        if dated and mid in in_period:  # type: ignore[operator]
            score += date_boost
        if spoken and mid in spoken:
            score += speaker_boost
        score *= scale
        scored.append((-score, tie, mid, at))
    scored.sort()
    return scored[:limit] if limit is not None else scored


def fuse(
    vector: Sequence[Ranked],
    keyword: Sequence[Ranked],
    *,
    k: float = RRF_K,
    vector_weight: float = VECTOR_WEIGHT,
    keyword_weight: float = KEYWORD_WEIGHT,
) -> list[Fused]:
    """Reciprocal rank fusion: ``w_v / (k + rank_v) + w_k / (k + rank_k)`` with 1-based ranks; a list
    a message is absent from adds nothing. Best first; ties broken by vector score, then message id."""
    entries: dict[str, dict[str, object]] = {}
    for rank, hit in enumerate(vector, start=1):
        e = entries.setdefault(hit.message_id, {"hit": hit, "score": 0.0})
        e["score"] = float(e["score"]) + vector_weight / (k + rank)  # type: ignore[arg-type]
        e["vector"] = (rank, hit.score)
    for rank, hit in enumerate(keyword, start=1):
        e = entries.setdefault(hit.message_id, {"hit": hit, "score": 0.0})
        e["score"] = float(e["score"]) + keyword_weight / (k + rank)  # type: ignore[arg-type]
        e["keyword"] = (rank, hit.score)
    out = []
    for mid, e in entries.items():
        first: Ranked = e["hit"]  # type: ignore[assignment]
        v = e.get("vector")
        kw = e.get("keyword")
        out.append(
            Fused(
                mid, first.thread_id, first.resource_id, float(e["score"]),  # type: ignore[arg-type]
                v[1] if v else None, kw[1] if kw else None,  # type: ignore[index]
                v[0] if v else None, kw[0] if kw else None,  # type: ignore[index]
            )
        )
    out.sort(key=lambda f: (-f.score, -(f.vector_score if f.vector_score is not None else -2.0), f.message_id))
    return out
