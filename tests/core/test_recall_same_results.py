"""The search's shortcuts return exactly what the long way returns, on libSQL and on Postgres.

Hybrid search re-ranks only the candidates that can still reach the top ``top_k`` and reads only the
start of their texts; ``hybrid.combine`` scores in one pass; keyword search answers a resource in one
statement. Each is checked here against the long way (every candidate re-ranked, the fusion formula
written out, the keyword statement joined to the messages) on a fixed corpus with speaker labels,
dates, repeated words and exact BM25 ties, in a database of one resource and of two.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex, hybrid, keyword
from core.recall import pg_order
from core.recall import search as pipeline
from core.recall.pg_order import PgOrderCache
from core.recall.text import SpeakerMatcher, query_dates

pytestmark = pytest.mark.backends

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
WORDS = ("zebra crossing lake hiking peanuts allergy Lyon museum painting guitar concert recipe soup "
         "garden tomato train station ticket birthday cake puppy adoption school teacher novel chapter").split()
QUERIES = [
    "zebra", "Where did Caroline go hiking?", "What did Mel paint at the museum", "peanuts allergy soup",
    "train ticket on 3 March 2026", "guitar concert in March", "birthday cake puppy", "novel chapter teacher",
    "Caroline", "tomato garden recipe last week", "Lyon", "station", "crossing zebra lake",
]


def corpus(store, resource: str, thread: str, n: int, seed: int) -> list[Message]:
    """Labelled lines over a small vocabulary (so BM25 scores repeat), one every few hours."""
    rng = np.random.default_rng(seed)
    store.memory.create_thread(thread_id=thread, resource_id=resource)
    msgs = []
    for i in range(n):
        speaker = ("Caroline", "Mel")[i % 2]
        words = " ".join(rng.choice(WORDS, int(rng.integers(2, 7))))
        if i % 17 == 0:
            words = "zebra crossing"  # identical texts: exact ties in BM25
        msgs.append((Message.user if i % 2 == 0 else Message.assistant)(
            f"{speaker}: {words}", id=f"{thread}-{i}", thread_id=thread, resource_id=resource,
            created_at=T0 + timedelta(hours=5 * i)))
    store.memory.save_messages(msgs)
    return msgs


def long_way_keyword(index: RecallIndex, query: str, resource: str, limit: int) -> list[tuple[str, float]]:
    """The keyword statement with its join to the messages (an ``until`` after every message)."""
    with index.store.db.read() as conn:
        terms, _ = index.keywords.terms(conn, query)
        hits = index.keywords.search(conn, query, resource_id=resource, thread_id=None, limit=limit,
                                     until="9999-12-31T00:00:00.000Z", terms=terms)
    return [(h.message_id, h.score) for h in hits]


def check_every_query(index: RecallIndex, resource: str) -> None:
    for query in QUERIES:
        for top_k in (1, 3, 10):
            got = index.search(query, resource_id=resource, mode="hybrid", top_k=top_k).hits
            run = pipeline.run(index, query, resource_id=resource, thread_id=None, top_k=top_k, mode="hybrid",
                               every_candidate=True)
            assert [(h.message_id, h.score) for h in got] == [(f.message_id, f.score) for f in run.reranked[:top_k]], (query, top_k)
            keyword_hits = index.search(query, resource_id=resource, mode="keyword", top_k=top_k).hits
            assert [(h.message_id, h.score) for h in keyword_hits] == long_way_keyword(index, query, resource, top_k), (query, top_k)


def test_shortcuts_give_the_long_ways_results_with_one_resource_and_with_two(store, monkeypatch):
    # Term statistics are recounted only when asked here (they may otherwise refresh between the two
    # ways of one query and drop another common term).
    monkeypatch.setattr(keyword, "STATS_CHECK_S", 1e9)
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    assert index.index_messages(corpus(store, "u", "t", 180, 1)).ok
    check_every_query(index, "u")  # one resource
    assert index.index_messages(corpus(store, "v", "t2", 120, 2)).ok
    index.keywords.stats.clear()
    check_every_query(index, "u")  # two resources
    check_every_query(index, "v")


def test_ties_at_the_cut_are_broken_by_message_id_as_the_long_way_does(store, monkeypatch):
    monkeypatch.setattr(keyword, "STATS_CHECK_S", 1e9)
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    store.memory.create_thread(thread_id="t", resource_id="u")
    msgs = [Message.user("zebra crossing", id=f"m{i:03d}", thread_id="t", resource_id="u",
                         created_at=T0 + timedelta(seconds=i)) for i in range(40)]
    msgs += [Message.user(f"other words {i}", id=f"x{i:03d}", thread_id="t", resource_id="u",
                          created_at=T0 + timedelta(seconds=100 + i)) for i in range(300)]
    store.memory.save_messages(msgs)
    assert index.index_messages(msgs).ok
    for limit in (1, 5, 39, 40, 41):
        hits = index.search("zebra", resource_id="u", mode="keyword", top_k=limit).hits
        assert [(h.message_id, h.score) for h in hits] == long_way_keyword(index, "zebra", "u", limit)
    ties = index.search("zebra", resource_id="u", mode="keyword", top_k=40).hits
    assert len({h.score for h in ties}) < len(ties) / 2  # the corpus does tie at these cuts


def test_hybrid_hits_are_every_candidate_propagated_from_a_full_thread_order_then_reranked(store, monkeypatch):
    """The long way of the neighbours' share (``Combined.propagate``) and the thread prior
    (``Combined.thread_prior``): every candidate's thread order read in full, both formulas written out over
    every candidate, then ``rerank``; a search's hits are its top k."""
    monkeypatch.setattr(keyword, "STATS_CHECK_S", 1e9)
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    assert index.index_messages(corpus(store, "u", "t", 180, 1) + corpus(store, "u", "t2", 90, 2)).ok
    reader = pg_order.thread_order if isinstance(index.order, PgOrderCache) else pipeline.thread_order
    share, tshare = hybrid.NEIGHBOUR_SHARE, hybrid.THREAD_SHARE
    assert share > 0 and tshare > 0
    changed = 0
    for query in QUERIES:
        run = pipeline.run(index, query, resource_id="u", thread_id=None, top_k=10, mode="hybrid", every_candidate=True)
        combined = hybrid.Combined(run.vector, run.keyword, run.cosines,
                                   keyword_share=hybrid.fusion_for(index.model_id).keyword_share)
        base = combined.scores()
        with index.store.db.read() as conn:
            order = reader(conn, list(base), labels=True)
        next_of = {m: n for m, (n, _, _) in order.items() if n is not None}
        prev_of = {n: m for m, n in next_of.items() if n in base}
        near = {m: (s + share * base.get(next_of.get(m, ""), 0.0) + share * base.get(prev_of.get(m, ""), 0.0))
                * (1.0 / (1.0 + 2.0 * share)) for m, s in base.items()}
        thread_of = {r.message_id: r.thread_id for r in [*run.keyword, *run.vector]}
        assert len(set(thread_of.values())) == 2
        want = {m: (s + tshare * max((near[o] for o in near if o != m and thread_of[o] == thread_of[m]), default=0.0))
                * (1.0 / (1.0 + tshare)) for m, s in near.items()}
        cos = {**run.cosines, **{r.message_id: r.score for r in run.vector}}
        fused = [hybrid.Fused(m, None, None, sc, cos.get(m), None, None, None) for m, sc in want.items()]
        spans = query_dates(query, pipeline.today())
        in_period = {m for m, (_, day, _) in order.items() if day is not None and any(sp.contains(day) for sp in spans)}
        named = SpeakerMatcher(query)
        spoken = {m for m, (_, _, label) in order.items() if label is not None and named(label)}
        long_way = hybrid.rerank(fused, next_of, in_period if spans else None, scores=want, by_speaker=spoken or None)
        plain = hybrid.rerank([f._replace(score=base[f.message_id]) for f in fused], next_of, in_period if spans else None,
                              scores=base, by_speaker=spoken or None)
        changed += [f.message_id for f in long_way[:3]] != [f.message_id for f in plain[:3]]
        for top_k in (1, 3, 10):
            hits = index.search(query, resource_id="u", mode="hybrid", top_k=top_k).hits
            assert [h.message_id for h in hits] == [f.message_id for f in long_way[:top_k]], (query, top_k)
            assert [h.score for h in hits] == pytest.approx([f.score for f in long_way[:top_k]], rel=1e-12, abs=1e-15)
    assert changed  # (the neighbours' share and the thread prior did change some top 3)


R = hybrid.Ranked


def combine_written_out(vector: list[hybrid.Ranked], keyword: list[hybrid.Ranked], cosines: dict[str, float],
                        share: float) -> list[tuple[str, float, float | None, float | None, int | None, int | None]]:
    """``hybrid.combine``'s documented formula, candidate by candidate."""
    vec = {h.message_id: (r, h.score) for r, h in enumerate(vector, 1)}
    kw = {h.message_id: (r, h.score) for r, h in enumerate(keyword, 1)}
    best = max((h.score for h in keyword), default=0.0)
    lo = min((h.score for h in vector), default=0.0)
    span = max((h.score for h in vector), default=0.0) - lo
    rows = []
    for mid in list(vec) + [m for m in kw if m not in vec]:
        cos = vec[mid][1] if mid in vec else cosines.get(mid)
        if cos is None or not vector:
            part = 0.0
        elif span <= 1e-12:
            part = 1.0 if cos >= lo else 0.0
        else:
            part = min((cos - lo) / span, 1.0)
        k = kw[mid][1] * (share / best if best > 0 else 0.0) if mid in kw else 0.0
        score = k + (1.0 - share) * part
        rows.append((-score, -(cos if cos is not None else -2.0), mid, cos))
    rows.sort()
    return [(mid, -neg, cos, kw[mid][1] if mid in kw else None, vec[mid][0] if mid in vec else None,
             kw[mid][0] if mid in kw else None) for neg, _, mid, cos in rows]


@settings(max_examples=80, deadline=None)
@given(
    vec=st.dictionaries(st.sampled_from("abcdefghij"), st.floats(-1.0, 1.0, allow_nan=False), max_size=10),
    kw=st.dictionaries(st.sampled_from("fghijklmno"), st.floats(0.0, 40.0, allow_nan=False), max_size=10),
    known=st.sets(st.sampled_from("klmno")),
    share=st.floats(0.0, 1.0),
)
def test_combine_is_its_formula_candidate_by_candidate(vec, kw, known, share):
    vector = [R(m, "t", "u", s) for m, s in sorted(vec.items(), key=lambda x: (-x[1], x[0]))]
    keyword_list = [R(m, "t", "u", s) for m, s in sorted(kw.items(), key=lambda x: (-x[1], x[0]))]
    cosines = {m: 0.1 * (ord(m) - ord("k")) for m in known}
    got = [(f.message_id, f.score, f.vector_score, f.keyword_score, f.vector_rank, f.keyword_rank)
           for f in hybrid.combine(vector, keyword_list, cosines, keyword_share=share)]
    assert got == combine_written_out(vector, keyword_list, cosines, share)


def test_loading_vectors_in_a_batch_keeps_and_counts_what_decoding_row_by_row_does():
    from core.recall.matrix import VectorSet
    from core.recall.vector_table import RawRow, decode

    dim = 4
    good = np.arange(dim, dtype="<f4").tobytes()
    rows = [
        RawRow(1, good, "a", "t", "u", "m"), RawRow(2, good, "b", "t", "u", None),  # kept (one unknown model)
        RawRow(3, good, "c", "t", "u", "other"), RawRow(4, good[:-4], "d", "t", "u", "m"),  # other model, wrong dim
        RawRow(5, good[:-1], "e", "t", "u", "m"), RawRow(6, "text", "f", "t", "u", "m"),  # corrupt, corrupt
        RawRow(7, np.array([1, np.nan, 0, 0], dtype="<f4").tobytes(), "g", "t", "u", "m"),  # not finite
        RawRow(8, good, None, "t", "u", "m"), RawRow(9, bytearray(good), "i", "t2", "u", "m", "2026-01-01T00:00:00.000Z"),
    ]
    got = VectorSet(dim, "m")
    got.extend(rows[:5])
    got.extend(rows[5:])
    kept = [r for r in rows if (r.model_id in (None, "m")) and decode(r.blob, dim) is not None and r.message_id]
    assert got.message_ids == [r.message_id for r in kept] == ["a", "b", "i"]
    assert got.thread_ids == ["t", "t", "t2"] and got.created_at == [None, None, "2026-01-01T00:00:00.000Z"]
    assert np.array_equal(got.matrix, np.stack([decode(r.blob, dim) for r in kept]))
    assert (got.skips.wrong_dim, got.skips.corrupt, got.skips.unknown_model) == (1, 4, 1)
    assert dict(got.skips.other_model) == {"other": 1} and got.max_rowid == 9
    got.extend([])
    assert got.n == 3


@settings(max_examples=80, deadline=None)
@given(
    vec=st.dictionaries(st.sampled_from("abcdefghij"), st.floats(-1.0, 1.0, allow_nan=False), max_size=10),
    kw=st.dictionaries(st.sampled_from("fghijklmno"), st.floats(0.0, 40.0, allow_nan=False), max_size=10),
    known=st.sets(st.sampled_from("klmno")),
    nexts=st.dictionaries(st.sampled_from("abcdefghijklmnopq"), st.sampled_from("abcdefghijklmnopq")),
    period=st.none() | st.sets(st.sampled_from("abcdefghijklmno")),
    speaker=st.sets(st.sampled_from("abcdefghijklmno")),
    cut=st.integers(0, 20),
    limit=st.none() | st.integers(1, 12),
)
def test_reranking_combines_entries_as_rerank_does_its_records(vec, kw, known, nexts, period, speaker, cut, limit):
    """``Combined.reranked`` (a search's way: records built for the hits only) gives ``rerank``'s records."""
    vector = [R(m, "t", "u", s) for m, s in sorted(vec.items(), key=lambda x: (-x[1], x[0]))]
    keyword_list = [R(m, "t2", None, s) for m, s in sorted(kw.items(), key=lambda x: (-x[1], x[0]))]
    cosines = {m: 0.1 * (ord(m) - ord("k")) for m in known}
    combined = hybrid.Combined(vector, keyword_list, cosines)
    entries = combined.order[:cut]
    want = hybrid.rerank(combined.fused(entries), nexts, period, limit=limit, scores=combined.scores(),
                         by_speaker=speaker or None)
    assert combined.reranked(entries, nexts, period, limit=limit, by_speaker=speaker or None) == want


def test_a_query_naming_no_speaker_of_a_candidate_reranks_fewer_with_the_same_results(store, monkeypatch):
    """No receiver spoken by a speaker the query names: only those that reach the top_k without the
    speaker boost are re-ranked, with the same records, scores and order as when every one is."""
    monkeypatch.setattr(keyword, "STATS_CHECK_S", 1e9)
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    assert index.index_messages(corpus(store, "u", "t", 180, 1)).ok
    sizes: list[int] = []
    real = hybrid.Combined.reranked

    def counted(self, entries, *args, **kw):  # type: ignore[no-untyped-def]
        sizes.append(entries if isinstance(entries, int) else len(entries))
        return real(self, entries, *args, **kw)

    monkeypatch.setattr(hybrid.Combined, "reranked", counted)
    fewer = 0
    for query in ("zebra crossing lake", "peanuts allergy soup", "guitar concert in March", "novel chapter teacher"):
        for top_k in (1, 3, 10):
            sizes.clear()
            run = pipeline.run(index, query, resource_id="u", thread_id=None, top_k=top_k, mode="hybrid")
            assert not run.by_speaker
            fewer += sizes[0] < len(run.receivers)
            every = pipeline.run(index, query, resource_id="u", thread_id=None, top_k=top_k, mode="hybrid",
                                 every_candidate=True)
            assert run.reranked == every.reranked[:top_k], (query, top_k)
    assert fewer  # (the shortcut was taken)


@settings(max_examples=150, deadline=None)
@given(
    vec=st.dictionaries(st.sampled_from("abcdefghij"), st.floats(-1.0, 1.0, allow_nan=False), max_size=10),
    kw=st.dictionaries(st.sampled_from("fghijklmno"), st.floats(0.0, 40.0, allow_nan=False), max_size=10),
    nexts=st.dictionaries(st.sampled_from("abcdefghijklmno"), st.sampled_from("abcdefghijklmnopq")),
    period=st.none() | st.sets(st.sampled_from("abcdefghijklmno")),
    top_k=st.integers(1, 8),
)
def test_without_a_named_speaker_the_tighter_cut_keeps_the_top_k(vec, kw, nexts, period, top_k):
    """``Combined.reach(..., spoken=False)`` of the receivers, re-ranked, gives the top_k of every candidate
    re-ranked (no speaker boost), ties and equal scores included."""
    vector = [R(m, "t", "u", s) for m, s in sorted(vec.items(), key=lambda x: (-x[1], x[0]))]
    keyword_list = [R(m, "t2", None, s) for m, s in sorted(kw.items(), key=lambda x: (-x[1], x[0]))]
    combined = hybrid.Combined(vector, keyword_list, {})
    received = combined.reach(top_k, dated=period is not None)
    fewer = combined.reach(top_k, dated=period is not None, spoken=False, among=received)
    assert fewer <= received <= len(combined.order)
    want = combined.reranked(combined.order, nexts, period, limit=top_k)
    assert combined.reranked(fewer, nexts, period, limit=top_k) == want
    assert combined.reranked(combined.order[:fewer], nexts, period, limit=top_k) == want


@settings(max_examples=200, deadline=None)
@given(
    # (few distinct values: equal scores at the cut are common)
    vec=st.dictionaries(st.sampled_from("abcdefghij"), st.sampled_from([-0.5, 0.0, 0.25, 0.5, 1.0]) |
                        st.floats(-1.0, 1.0, allow_nan=False), max_size=10),
    kw=st.dictionaries(st.sampled_from("fghijklmno"), st.sampled_from([0.0, 1.0, 2.0]) |
                       st.floats(0.0, 40.0, allow_nan=False), max_size=10),
    nexts=st.dictionaries(st.sampled_from("abcdefghijklmno"), st.sampled_from("abcdefghijklmnopq")),
    period=st.none() | st.sets(st.sampled_from("abcdefghijklmno")),
    top_k=st.integers(1, 8),
    reshaped=st.booleans(),
)
def test_the_cut_found_without_sorting_is_reachs_best_and_reranks_the_same(vec, kw, nexts, period, top_k, reshaped):
    """``Combined.within`` (the search's cut) holds exactly ``order``'s best ``reach`` candidates, for both
    cuts, and re-ranking them in its order gives the records re-ranking that count of ``order`` gives."""
    vector = [R(m, "t", "u", s) for m, s in sorted(vec.items(), key=lambda x: (-x[1], x[0]))]
    keyword_list = [R(m, "t2" if m < "l" else "t3", None, s) for m, s in sorted(kw.items(), key=lambda x: (-x[1], x[0]))]
    combined = hybrid.Combined(vector, keyword_list, {})
    if reshaped:
        combined.reshape(nexts, hybrid.NEIGHBOUR_SHARE, hybrid.THREAD_SHARE)
    dated = period is not None
    received = combined.reach(top_k, dated=dated)
    fewer = combined.reach(top_k, dated=dated, spoken=False, among=received)
    best = combined.within(top_k, dated=dated)
    tighter = combined.within(top_k, dated=dated, spoken=False, among=best)
    ids = combined.ids
    assert [ids[i] for i in best.tolist()] == [ids[i] for i in sorted(combined.rank[:received].tolist())]
    assert {ids[i] for i in tighter.tolist()} == {e[2] for e in combined.order[:fewer]}
    assert len(tighter) == fewer
    for at, count in ((best, received), (tighter, fewer)):
        assert combined.reranked(at, nexts, period, limit=top_k) == combined.reranked(count, nexts, period, limit=top_k)
        assert combined.reranked(at, nexts, period) == combined.reranked(count, nexts, period)


@settings(max_examples=120, deadline=None)
@given(
    vec=st.dictionaries(st.sampled_from("abcdefghij"), st.floats(-1.0, 1.0, allow_nan=False), max_size=10),
    kw=st.dictionaries(st.sampled_from("fghijklmno"), st.floats(0.0, 40.0, allow_nan=False), max_size=10),
    nexts=st.dictionaries(st.sampled_from("abcdefghijklmno"), st.none() | st.sampled_from("abcdefghijklmnopq")),
    period=st.none() | st.sets(st.sampled_from("abcdefghijklmno")),
    limit=st.none() | st.integers(1, 8),
)
def test_a_next_message_map_naming_none_reshapes_and_reranks_as_one_without_those(vec, kw, nexts, period, limit):
    """A search hands the neighbours' share and the re-rank one map of every read candidate's next message,
    None for the last of a thread (``search._fuse``): the same scores, order and records as a map without them."""
    vector = [R(m, "t" if m < "e" else "t2", "u", s) for m, s in sorted(vec.items(), key=lambda x: (-x[1], x[0]))]
    keyword_list = [R(m, "t2", None, s) for m, s in sorted(kw.items(), key=lambda x: (-x[1], x[0]))]
    plain = {m: n for m, n in nexts.items() if n is not None}
    got, want = hybrid.Combined(vector, keyword_list, {}), hybrid.Combined(vector, keyword_list, {})
    got.reshape(nexts, hybrid.NEIGHBOUR_SHARE, hybrid.THREAD_SHARE)
    want.reshape(plain, hybrid.NEIGHBOUR_SHARE, hybrid.THREAD_SHARE)
    assert got.order == want.order and got.scores() == want.scores()
    assert got.reranked(got.order, nexts, period, limit=limit) == want.reranked(want.order, plain, period, limit=limit)
    records = want.fused(want.order)
    assert hybrid.rerank(records, nexts, period, limit=limit) == hybrid.rerank(records, plain, period, limit=limit)
