"""``hybrid.Combined`` on arrays by candidate against the dict-keyed loops it replaced (2026-12-06, main
0e8a606), copied below as the reference: every score, order, cut and re-ranked record the same to the bit,
for lists with messages listed twice, keyword hits without a cosine, no cosine spread, several threads,
next-message maps naming nothing, themselves, non-candidates or one message twice, and named periods and
speakers."""

from __future__ import annotations

import math
from typing import AbstractSet, Mapping, Sequence

from hypothesis import given, settings, strategies as st

from core.recall import hybrid
from core.recall.hybrid import (DATE_BOOST, KEYWORD_SHARE, NEXT_SHARE, SPEAKER_BOOST, Fused, Ranked, _rescored,
                                places)

_SCORE = hybrid._SCORE
_ROUNDING = 1e-9


def may_reach(order: list[tuple[float, float, str]], top_k: int, *, dated: bool,
              spoken: bool = True) -> list[tuple[float, float, str]]:
    """The search's cut before it was ``Combined.reach`` (search.py of main 0e8a606)."""
    if len(order) <= top_k:
        return order
    gain = (NEXT_SHARE * max(-order[0][0], 0.0) + (SPEAKER_BOOST if spoken else _ROUNDING)
            + (DATE_BOOST if dated else 0.0))
    bar = -order[top_k - 1][0] - gain
    return [e for e in order if -e[0] >= bar]


class DictCombined:
    """As ``hybrid.Combined`` (its docstring says what and why), in the dict loops it replaced."""

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
        if not math.isfinite(kw_scale):  # (a subnormal best score: divided first, as ``hybrid.Combined`` does)
            kw_scale = 1.0
            keyword = [h._replace(score=h.score / best_kw * keyword_share) for h in keyword]
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
        """As ``hybrid.Combined.propagate`` (its docstring says what and why), in the dict loops it replaced."""
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
        """As ``hybrid.Combined.thread_prior`` (its docstring says what and why), in the dict loops it replaced."""
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
        """As ``hybrid.Combined.reranked`` (its docstring says what and why), in the dict loops it replaced."""
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


IDS = "abcdefghijklmn"
SCORES = st.sampled_from([-0.5, 0.0, 0.25, 0.3333, 0.5, 0.9, 1.0]) | st.floats(-1.0, 1.0, allow_nan=False)


def bits(entries: Sequence[tuple[float, float, str]]) -> list[tuple[str, str, str]]:
    return [(float(neg).hex(), float(tie).hex(), m) for neg, tie, m in entries]


def records(fused: list[Fused]) -> list[tuple[object, ...]]:
    return [(*f[:3], f.score.hex(), *f[4:]) for f in fused]


@settings(max_examples=300, deadline=None)
@given(
    vec=st.dictionaries(st.sampled_from(IDS[:9]), SCORES, max_size=9),
    kw=st.dictionaries(st.sampled_from(IDS[5:]), st.sampled_from([0.0, 1.0, 2.5, 10.0]) | st.floats(0.0, 40.0), max_size=9),
    known=st.dictionaries(st.sampled_from(IDS[9:]), SCORES),
    twice=st.booleans(),
    flat=st.booleans(),
    threads=st.integers(1, 3),
    nexts=st.dictionaries(st.sampled_from(IDS), st.none() | st.sampled_from(IDS + "xyz")),
    shares=st.sampled_from([(0.4, 0.3), (0.0, 0.3), (0.4, 0.0), (0.0, 0.0), (0.5, 1.0)]),
    period=st.none() | st.sets(st.sampled_from(IDS)),
    speaker=st.sets(st.sampled_from(IDS)),
    top_k=st.integers(1, 8),
    every=st.booleans(),
    share=st.sampled_from([0.0, 0.65, 0.85, 1.0]),
)
def test_the_arrays_score_cut_and_rerank_as_the_dict_loops_did(vec, kw, known, twice, flat, threads, nexts, shares,
                                                               period, speaker, top_k, every, share):
    if flat:
        vec = dict.fromkeys(vec, 0.5)
    vector = [Ranked(m, f"t{ord(m) % threads}", "u", s) for m, s in sorted(vec.items(), key=lambda x: (-x[1], x[0]))]
    keyword = [Ranked(m, f"t{ord(m) % threads}", None, s) for m, s in sorted(kw.items(), key=lambda x: (-x[1], x[0]))]
    if twice:  # (a message listed twice: its last entry counts)
        vector = vector + vector[:1]
        keyword = keyword + keyword[-1:]
    got = hybrid.Combined(vector, keyword, known, keyword_share=share)
    want = DictCombined(vector, keyword, known, keyword_share=share)
    assert bits(got.entries) == bits(want.entries)
    assert bits(got.order) == bits(want.order)
    assert {m: s.hex() for m, s in got.own.items()} == {m: s.hex() for m, s in want.own.items()}
    got.reshape(nexts, *shares)
    want.reshape(nexts, *shares)
    assert bits(got.order) == bits(want.order)
    assert {m: s.hex() for m, s in got.scores().items()} == {m: s.hex() for m, s in want.scores().items()}
    dated = period is not None
    receivers = want.order if every else may_reach(want.order, top_k, dated=dated)
    received = len(got.order) if every else got.reach(top_k, dated=dated)
    assert received == len(receivers)
    fewer = may_reach(receivers, top_k, dated=dated, spoken=False)
    assert got.reach(top_k, dated=dated, spoken=False, among=received) == len(fewer)
    for entries, count in ((receivers, received), (fewer, len(fewer))):
        for limit in (None, top_k):
            expected = want.reranked(entries, nexts, period, limit=limit, by_speaker=speaker or None)
            assert records(got.reranked(count, nexts, period, limit=limit, by_speaker=speaker or None)) == records(expected)
            assert records(got.reranked(entries, nexts, period, limit=limit, by_speaker=speaker or None)) == records(expected)
    assert records(got.fused(got.order)) == records(want.fused(want.order))


@settings(max_examples=150, deadline=None)
@given(
    vec=st.dictionaries(st.sampled_from(IDS[:9]), SCORES, max_size=9),
    kw=st.dictionaries(st.sampled_from(IDS[5:]), st.floats(0.0, 40.0), max_size=9),
    nexts=st.dictionaries(st.sampled_from(IDS), st.none() | st.sampled_from(IDS + "xyz")),
    step=st.sampled_from(["propagate", "thread_prior"]),
    share=st.sampled_from([0.0, 0.3, 0.4, 1.0]),
)
def test_each_step_alone_scores_as_the_dict_loops_did(vec, kw, nexts, step, share):
    vector = [Ranked(m, f"t{ord(m) % 2}", "u", s) for m, s in sorted(vec.items(), key=lambda x: (-x[1], x[0]))]
    keyword = [Ranked(m, f"t{ord(m) % 3}", None, s) for m, s in sorted(kw.items(), key=lambda x: (-x[1], x[0]))]
    got, want = hybrid.Combined(vector, keyword, {}), DictCombined(vector, keyword, {})
    for c in (got, want):
        if step == "propagate":
            c.propagate(nexts, share)
        else:
            c.thread_prior(share)
    assert bits(got.order) == bits(want.order)
    assert {m: s.hex() for m, s in got.scores().items()} == {m: s.hex() for m, s in want.scores().items()}


def test_ids_ending_in_nul_sort_as_python_strings():
    """numpy's fixed-width text drops a trailing NUL; such ids are compared as Python strings."""
    vector = [Ranked("a\0", "t", "u", 0.5), Ranked("a", "t", "u", 0.5)]
    got, want = hybrid.Combined(vector, [], {}), DictCombined(vector, [], {})
    assert bits(got.order) == bits(want.order) and [m for _, _, m in got.order] == ["a", "a\0"]
