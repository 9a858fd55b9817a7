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

from dataclasses import dataclass
from operator import attrgetter
from typing import AbstractSet, Mapping, Sequence

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


class Combined:
    """``combine``'s scores of every candidate, best first (``order``: (-score, -cosine, message id)),
    with the ``Fused`` records built only for the candidates asked for (``fused``): a search needs
    every score (any candidate may be another's next message) but records for the few that can
    still reach its top k."""

    def __init__(self, vector: Sequence[Ranked], keyword: Sequence[Ranked], cosines: Mapping[str, float] | None = None,
                 *, keyword_share: float = KEYWORD_SHARE, vec_at: dict[str, int] | None = None) -> None:
        """``vec_at``: ``places(vector)``, when the caller has it."""
        if not 0.0 <= keyword_share <= 1.0:
            raise ValueError(f"keyword_share must be between 0 and 1, not {keyword_share}")
        cosines = cosines or {}
        # Each candidate's place in its lists (0-based; a message listed twice: its last place). Places,
        # not (rank, hit) pairs: small ints are shared objects, so the maps allocate nothing per candidate.
        self._vector, self._keyword = vector, keyword
        self._vec_at = vec_at = places(vector) if vec_at is None else vec_at
        self._kw_at = kw_at = places(keyword)
        self._cosines = cosines
        best_kw: float = max(map(_SCORE, keyword), default=0.0)
        kw_scale = keyword_share / best_kw if best_kw > 0 else 0.0
        vec_share = 1.0 - keyword_share
        lo: float
        span: float
        if vector:
            lo = min(map(_SCORE, vector))
            span = max(map(_SCORE, vector)) - lo
        else:
            lo, span = 0.0, 0.0

        def vec_part(cos: float | None) -> float:
            if cos is None or not vector:
                return 0.0
            if span <= 1e-12:
                return 1.0 if cos >= lo else 0.0
            # Not clamped: a keyword hit whose cosine is below every vector candidate's counts against it
            # (clamping at 0 cost .009 recall@20 and .006 recall@5 on LoCoMo public).
            # Capped at 1: a keyword candidate more similar than every vector candidate (possible when
            # the vector list was cut by a filter) must not outrank the best of both lists.
            return min((cos - lo) / span, 1.0)

        scored: list[tuple[float, float, str]] = []
        # Each candidate's score by id, kept as computed (``scores``' values, the same floats): the re-rank's
        # lookups would otherwise build a new float per candidate from ``order``.
        self._score_of: dict[str, float] = {}
        score_of = self._score_of
        # Each candidate's thread, as its hit in either list names it (the vector list's first): the thread
        # prior's groups, noted here while the hit is at hand rather than looked up again per candidate.
        self._thread_of: dict[str, str | None] = {}
        thread_of = self._thread_of
        # Each candidate's score from its own two lists, kept when ``propagate`` adds its neighbours' share
        # (the recall playground shows both parts).
        self.own: dict[str, float] = score_of
        spread = span > 1e-12
        add = scored.append
        if spread and len(vec_at) == len(vector) and len(kw_at) == len(keyword):
            # Each message listed once in each list (the common case): the lists read as they are, each
            # record unpacked once; the same operations as the general loops below, in the same order.
            kw_get = kw_at.get
            for mid, thread, _, cos in vector:
                k = kw_get(mid)
                part = (cos - lo) / span
                part = 1.0 if part > 1.0 else part
                score = (keyword[k].score * kw_scale if k is not None else 0.0) + vec_share * part
                add((-score, -cos, mid))
                score_of[mid] = score
                thread_of[mid] = thread
            cos_get = cosines.get
            for mid, thread, _, kw_score in keyword:
                if mid in vec_at:
                    continue
                known = cos_get(mid)
                if known is not None:
                    part = (known - lo) / span
                    score = kw_score * kw_scale + vec_share * (1.0 if part > 1.0 else part)
                    add((-score, -known, mid))
                else:
                    score = kw_score * kw_scale + vec_share * vec_part(known)
                    add((-score, 2.0, mid))  # (-(-2.0): no cosine counts as -2)
                score_of[mid] = score
                thread_of[mid] = thread
        else:
            for i in vec_at.values():  # (a message listed twice counts once, as its last entry)
                h = vector[i]
                k = kw_at.get(h.message_id)
                cos = h.score
                if spread:  # (vec_part, inlined: the common case)
                    part = (cos - lo) / span
                    part = 1.0 if part > 1.0 else part
                else:
                    part = vec_part(cos)
                score = (keyword[k].score * kw_scale if k is not None else 0.0) + vec_share * part
                scored.append((-score, -cos, h.message_id))
                score_of[h.message_id] = score
                thread_of[h.message_id] = h.thread_id
            for i in kw_at.values():
                h = keyword[i]
                if h.message_id in vec_at:
                    continue
                known = cosines.get(h.message_id)
                if spread and known is not None:  # (vec_part, inlined: the common case)
                    part = (known - lo) / span
                    score = h.score * kw_scale + vec_share * (1.0 if part > 1.0 else part)
                else:
                    score = h.score * kw_scale + vec_share * vec_part(known)
                scored.append((-score, -(known if known is not None else -2.0), h.message_id))
                score_of[h.message_id] = score
                thread_of[h.message_id] = h.thread_id
        # Sorted when ``order`` is first asked: a search that reshapes the scores (``reshape``) sorts only
        # their new entries, and reads the candidates in any order (``entries``).
        self.entries = scored
        self._order: list[tuple[float, float, str]] | None = None

    @property
    def order(self) -> list[tuple[float, float, str]]:
        """Every candidate's ``(-score, -(cosine or -2.0), message id)``, best first."""
        if self._order is None:
            self.entries.sort()
            self._order = self.entries
        return self._order

    def scores(self) -> dict[str, float]:
        return {mid: -neg for neg, _, mid in self.order}

    def propagate(self, next_of: Mapping[str, str | None], share: float) -> None:
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
        self._reorder(self._propagated(next_of, share)[0])

    def _propagated(self, next_of: Mapping[str, str | None], share: float) -> tuple[
            list[tuple[float, float, str]], dict[str | None, tuple[float, float, str]],
            dict[str | None, tuple[float, float, str]]]:
        """The candidates' entries with ``propagate``'s scores, in ``entries``' order (not sorted again),
        and, found in the same pass, each thread's best and second-best new entry (``reshape``'s)."""
        base = self._score_of
        prev_of = {nxt: mid for mid, nxt in next_of.items() if nxt != mid and nxt in base and mid in base}
        scale = 1.0 / (1.0 + 2.0 * share)
        thread_of = self._thread_of
        scored: list[tuple[float, float, str]] = []
        best_of: dict[str | None, tuple[float, float, str]] = {}
        second_of: dict[str | None, tuple[float, float, str]] = {}
        get_next, get_prev, get_base = next_of.get, prev_of.get, base.get
        get_best, get_second = best_of.get, second_of.get
        add = scored.append
        for neg, tie, mid in self.entries:
            score = -neg
            nxt = get_next(mid)
            if nxt is not None and nxt != mid:
                score += share * get_base(nxt, 0.0)
            prev = get_prev(mid)
            if prev is not None:
                score += share * base[prev]
            entry = (-(score * scale), tie, mid)
            add(entry)
            # (entries are unique, so the two best of a thread do not depend on the pass's order)
            thread = thread_of[mid]
            best = get_best(thread)
            if best is None:
                best_of[thread] = entry
            elif entry < best:
                second_of[thread] = best
                best_of[thread] = entry
            else:
                second = get_second(thread)
                if second is None or entry < second:
                    second_of[thread] = entry
        return scored, best_of, second_of

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
        base = self._score_of
        thread_of = self._thread_of
        # Per thread: its best candidate's id and score, and the second-best score (None: no other).
        best_of: dict[str | None, tuple[str, float]] = {}
        second_of: dict[str | None, float] = {}
        for neg, _, mid in self.order:  # (best first: the first seen of a thread is its best)
            thread = thread_of[mid]
            if thread not in best_of:
                best_of[thread] = (mid, -neg)
            elif thread not in second_of:
                second_of[thread] = -neg
        scale = 1.0 / (1.0 + share)
        scored: list[tuple[float, float, str]] = []
        for neg, tie, mid in self.order:
            thread = thread_of[mid]
            best_id, best = best_of[thread]
            other = second_of.get(thread, 0.0) if mid == best_id else best
            scored.append((-((base[mid] + share * other) * scale), tie, mid))
        self._reorder(scored)

    def reshape(self, next_of: Mapping[str, str | None], neighbour_share: float, thread_share: float) -> None:
        """``propagate(next_of, neighbour_share)`` then ``thread_prior(thread_share)``: the same scores and
        the same order, with ``order`` sorted once instead of twice (each thread's best and second-best
        candidate after the neighbours' share found by comparing their entries, not by sorting them)."""
        takes_neighbours, takes_thread = self._takes(neighbour_share), self._takes(thread_share)
        if not (takes_neighbours and takes_thread):
            if takes_neighbours:
                self.propagate(next_of, neighbour_share)
            elif takes_thread:
                self.thread_prior(thread_share)
            return
        entries, best_of, second_of = self._propagated(next_of, neighbour_share)
        thread_of = self._thread_of
        # ``thread_prior``'s step over those entries (its ``base`` is ``propagate``'s scores, ``-neg``): per
        # thread, its best candidate's id, what the others add (the best's score) and what the best adds
        # (the second's, or 0), each product computed once per thread
        scale = 1.0 / (1.0 + thread_share)
        adds: dict[str | None, tuple[str, float, float]] = {}
        for thread, best in best_of.items():
            second = second_of.get(thread)
            adds[thread] = (best[2], thread_share * -best[0], thread_share * (-second[0] if second is not None else 0.0))
        scored: list[tuple[float, float, str]] = []
        add = scored.append
        score_of: dict[str, float] = {}
        for neg, tie, mid in entries:
            best_id, to_others, to_best = adds[thread_of[mid]]
            score = (-neg + (to_best if best_id == mid else to_others)) * scale
            add((-score, tie, mid))
            score_of[mid] = score
        scored.sort()
        self.entries = self._order = scored
        self._score_of = score_of  # (``_reorder``'s map: the same keys and floats, built in the same pass)

    def _takes(self, share: float) -> bool:
        """Whether a step with this share changes anything (a negative share is refused)."""
        if share < 0:
            raise ValueError(f"share must not be negative, not {share}")
        return share != 0 and bool(self.entries)

    def _reorder(self, scored: list[tuple[float, float, str]]) -> None:
        """``order`` and the scores by id from a step's new (negated score, tie, id) entries."""
        scored.sort()
        self.entries = self._order = scored
        self._score_of = {mid: -neg for neg, _, mid in scored}

    def reranked(
        self,
        entries: Sequence[tuple[float, float, str]],
        next_of: Mapping[str, str | None],
        in_period: AbstractSet[str] | None = None,
        *,
        limit: int | None = None,
        by_speaker: AbstractSet[str] | None = None,
        scores: Mapping[str, float] | None = None,
    ) -> list[Fused]:
        """``rerank(self.fused(entries), next_of, in_period, limit=limit, scores=self.scores(),
        by_speaker=by_speaker)``, the same records in the same order, with a record built only for each
        candidate returned (a search keeps ``limit`` of about a hundred). ``scores``: ``self.scores()``,
        when the caller has it."""
        base = self._score_of if scores is None else scores
        kept = _rescored(entries, base, next_of, in_period, by_speaker, NEXT_SHARE, DATE_BOOST, SPEAKER_BOOST, limit)
        return self.fused([(neg, tie, mid) for neg, tie, mid, _ in kept])  # (each record's score: the re-ranked one)

    def fused(self, entries: Sequence[tuple[float, float, str]]) -> list[Fused]:
        """The records of these entries of ``order``, in their order."""
        out: list[Fused] = []
        vec_at, kw_at, vector, keyword, cosines = self._vec_at, self._kw_at, self._vector, self._keyword, self._cosines
        for neg_score, _, mid in entries:
            v = vec_at.get(mid)
            k = kw_at.get(mid)
            if v is not None:
                first = vector[v]
                cos: float | None = first.score
            else:
                first = keyword[k]  # type: ignore[index]
                cos = cosines.get(mid)
            out.append(
                Fused(mid, first.thread_id, first.resource_id, float(-neg_score), cos,
                      keyword[k].score if k is not None else None,
                      v + 1 if v is not None else None, k + 1 if k is not None else None)
            )
        return out


_SCORE = attrgetter("score")
_MESSAGE_ID = attrgetter("message_id")


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
