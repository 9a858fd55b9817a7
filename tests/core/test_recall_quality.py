"""Recall ranking details: query terms (stop words, clitics, names, numbers, CJK), dropping very common
terms in large indexes, and the score-aware fusion of hybrid search."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex, keyword_query
from core.recall import hybrid, keyword
from core.recall.text import keyword_terms

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def seed(store, thread: str, resource: str, texts: list[str]) -> list[Message]:
    if store.memory.get_thread(thread) is None:
        store.memory.create_thread(thread_id=thread, resource_id=resource)
    msgs = [
        (Message.user if i % 2 == 0 else Message.assistant)(
            text, id=f"{thread}-{i}", thread_id=thread, resource_id=resource, created_at=T0 + timedelta(seconds=i)
        )
        for i, text in enumerate(texts)
    ]
    for start in range(0, len(msgs), 200):
        store.memory.save_messages(msgs[start : start + 200])
    return msgs


# -- query terms ---------------------------------------------------------------------------------


def test_stop_words_go_but_names_numbers_and_dates_stay():
    terms = keyword_terms("When did Caroline go to the LGBTQ support group on 9 October 2022?")
    assert terms == ['"caroline"', '"go"', '"lgbtq"', '"support"', '"group"', '"9"', '"october"', '"2022"']


def test_clitic_fragments_are_not_terms():
    # "\w+" cuts "Caroline's" into "caroline" + "s", "hadn't" into "hadn" + "t": only the name is kept.
    assert keyword_terms("What is Caroline's plan? I hadn't heard, I'm sure you've said") == [
        '"caroline"', '"plan"', '"heard"', '"sure"', '"said"'
    ]
    assert '"won"' in keyword_terms("She won't go, but she won the race")  # "won" is also a verb


def test_a_query_of_stop_words_only_still_searches_them():
    assert keyword_query("what is it?") == '"what" OR "is" OR "it"'
    assert keyword_query("   ?! ") is None


def test_a_y_word_also_searches_its_ic_form_and_back():
    # Porter stems "allergy" / "allergies" to "allergi" and "allergic" to "allerg": the other form is a term too.
    assert keyword_terms("my allergies") == ['"allergies"', '"allergic"']
    assert keyword_terms("allergy") == ['"allergy"', '"allergic"']
    assert keyword_terms("allergic reactions") == ['"allergic"', '"allergy"', '"reactions"']
    assert keyword_terms("historical economy") == ['"historical"', '"history"', '"economy"', '"economic"']
    # Short words, a vowel before the ending, other scripts and words with digits are left alone.
    for text in ("city", "play", "days", "stayed", "toy", "café", "sky", "b2ic", "stoic", "Zoë"):
        assert len(keyword_terms(text)) == 1, text
    assert keyword_terms("spicy") == ['"spicy"', '"spicic"']  # (a form no message uses matches nothing)


@pytest.mark.backends
def test_a_keyword_search_for_allergies_finds_allergic(store):
    msgs = _dated(store, "a", T0, ["I am allergic to peanuts", "Noted, no peanuts", "The weather is grey"])
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    assert index.index_messages(msgs).ok
    for query in ("What are my allergies?", "any allergy I should know about", "is she allergic"):
        hits = index.search(query, resource_id="u", mode="keyword", top_k=3).hits
        assert [h.message_id for h in hits][:1] == ["a-0"], query


def test_chinese_queries_become_character_bigrams():
    assert keyword_terms("我对什么过敏？") == ['"我 对"', '"对 什"', '"什 么"', '"么 过"', '"过 敏"']
    assert keyword_terms("iphone手机 and 花") == ['"iphone"', '"手 机"', '"花"']
    # A Latin piece of a mixed-script word gets its "-y" / "-ic" counterpart like a word of its own.
    assert keyword_terms("allergy过敏") == ['"allergy"', '"allergic"', '"过 敏"']
    assert keyword_terms("the过敏") == ['"过 敏"']  # (a stop word piece stays out, as before)


# -- dropping very common terms ----------------------------------------------------------------------


def _big_store(store, n: int = 300) -> RecallIndex:
    """n messages that all say "hello"; a few rarer words; one Chinese fact."""
    texts = [f"hello there friend number {i}" for i in range(n)]
    texts[10] = "hello, my zebra is called Stripes"
    texts[20] = "hello, the zebra crossing near the school"
    texts[30] = "hello 我对花生过敏"
    msgs = seed(store, "t", "u", texts)
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    assert index.index_messages(msgs).ok
    return index


@pytest.mark.backends  # the same pruning on Postgres (pg_keywords.PgTermStats)
def test_terms_found_in_most_rows_are_dropped_in_a_large_index(store):
    index = _big_store(store)
    assert keyword.PRUNE_MIN_DOCS <= 300
    with store.db.read() as conn:
        assert index.term_stats.select(conn, ['"hello"', '"zebra"']) == ['"zebra"']
        # Every term common: the rarest one is kept rather than nothing.
        assert index.term_stats.select(conn, ['"hello"', '"there"']) in (['"hello"'], ['"there"'])
        assert index.term_stats.select(conn, ['"hello"']) == ['"hello"']  # a lone term is never dropped
    hits = index.search("hello zebra", resource_id="u", mode="keyword", top_k=10).hits
    assert [h.message_id for h in hits][:2] in (["t-10", "t-20"], ["t-20", "t-10"])
    # The messages matching only "hello" are no longer scored: the context column (previous
    # message) is what brings the zebra messages' successors in, nothing else.
    assert {h.message_id for h in hits} <= {"t-10", "t-11", "t-20", "t-21"}
    only_common = index.search("hello there", resource_id="u", mode="keyword", top_k=5).hits
    assert len(only_common) == 5


@pytest.mark.backends  # the same pruning on Postgres (pg_keywords.PgTermStats)
def test_a_chinese_query_still_finds_its_message_in_a_large_index(store):
    index = _big_store(store)
    for mode in ("keyword", "hybrid"):
        hits = index.search("我对什么过敏？", resource_id="u", mode=mode, top_k=3).hits
        assert hits and hits[0].message_id == "t-30", mode


@pytest.mark.backends  # the same pruning on Postgres (pg_keywords.PgTermStats)
def test_small_indexes_keep_every_term(store):
    msgs = seed(store, "t", "u", ["hello zebra", "hello there", "hello again"])
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    index.index_messages(msgs)
    with store.db.read() as conn:
        assert index.term_stats.select(conn, ['"hello"', '"zebra"']) == ['"hello"', '"zebra"']
    hits = index.search("hello zebra", resource_id="u", mode="keyword").hits
    assert {h.message_id for h in hits} == {"t-0", "t-1", "t-2"}


@pytest.mark.backends  # the same pruning on Postgres (pg_keywords.PgTermStats)
def test_term_statistics_follow_the_index_as_it_grows(store, monkeypatch):
    monkeypatch.setattr(keyword, "STATS_CHECK_S", 0.0)
    msgs = seed(store, "t", "u", [f"apple {i}" for i in range(50)])
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    index.index_messages(msgs)
    with store.db.read() as conn:
        assert index.term_stats.select(conn, ['"apple"', '"pear"']) == ['"apple"', '"pear"']
        assert index.term_stats.rows == 50
    more = seed(store, "t2", "u", [f"apple pie {i}" for i in range(250)])
    index.index_messages(more)
    with store.db.read() as conn:
        assert index.term_stats.select(conn, ['"apple"', '"pie"', '"pear"']) == ['"pear"']
        assert index.term_stats.rows == 300


# -- fusion ------------------------------------------------------------------------------------------


def R(mid: str, score: float) -> hybrid.Ranked:
    return hybrid.Ranked(mid, "t", "u", score)


def test_a_clear_keyword_winner_is_not_pushed_down_by_vector_ranks():
    vector = [R("a", 0.61), R("b", 0.60), R("c", 0.59), R("kw", 0.58), R("z", 0.10)]
    keyword_list = [R("kw", 12.0), R("a", 1.0)]
    fused = hybrid.combine(vector, keyword_list)
    assert fused[0].message_id == "kw"
    # RRF, for comparison, ranks "a" first: a high vector rank outweighs a small keyword score.
    assert hybrid.fuse(vector, keyword_list)[0].message_id == "a"


def test_keyword_only_candidates_get_their_exact_cosine():
    vector = [R("a", 0.9), R("b", 0.2)]
    keyword_list = [R("k", 5.0), R("a", 1.0)]
    fused = {f.message_id: f for f in hybrid.combine(vector, keyword_list, {"k": 0.5})}
    assert fused["k"].vector_score == 0.5 and fused["k"].vector_rank is None and fused["k"].keyword_rank == 1
    assert fused["b"].keyword_score is None
    # k: 0.85 * 1 + 0.15 * (0.5 - 0.2) / 0.7
    assert fused["k"].score == pytest.approx(0.85 + 0.15 * 0.3 / 0.7)


def test_extreme_shares_reproduce_each_list():
    vector = [R("a", 0.9), R("b", 0.5), R("c", 0.1)]
    keyword_list = [R("c", 3.0), R("b", 2.0), R("d", 1.0)]
    cos = {"d": 0.0}
    assert [f.message_id for f in hybrid.combine(vector, keyword_list, cos, keyword_share=1.0)][:3] == ["c", "b", "d"]
    assert [f.message_id for f in hybrid.combine(vector, keyword_list, cos, keyword_share=0.0)] == ["a", "b", "c", "d"]
    with pytest.raises(ValueError):
        hybrid.combine(vector, keyword_list, keyword_share=1.5)


def test_one_empty_list_leaves_the_other_order():
    vector = [R("a", 0.9), R("b", 0.5)]
    keyword_list = [R("c", 3.0), R("d", 1.0)]
    assert [f.message_id for f in hybrid.combine(vector, [])] == ["a", "b"]
    assert [f.message_id for f in hybrid.combine([], keyword_list)] == ["c", "d"]
    assert hybrid.combine([], []) == []
    assert [f.message_id for f in hybrid.combine([R("x", 0.3)], [])] == ["x"]  # one candidate: no range


scores = st.floats(min_value=-1.0, max_value=1.0, allow_nan=False)
bm25s = st.floats(min_value=0.0, max_value=50.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    vec=st.dictionaries(st.sampled_from("abcdefgh"), scores, max_size=8),
    kw=st.dictionaries(st.sampled_from("efghijkl"), bm25s, max_size=8),
    share=st.floats(min_value=0.0, max_value=1.0),
    limit=st.integers(min_value=1, max_value=20),
)
def test_fusion_is_bounded_sorted_stable_and_limit_is_a_prefix(vec, kw, share, limit):
    vector = [R(m, s) for m, s in sorted(vec.items(), key=lambda x: -x[1])]
    keyword_list = [R(m, s) for m, s in sorted(kw.items(), key=lambda x: -x[1])]
    cos = {m: 0.0 for m in kw}
    full = hybrid.combine(vector, keyword_list, cos, keyword_share=share)
    assert {f.message_id for f in full} == set(vec) | set(kw)
    assert all(f.score <= 1 + 1e-9 for f in full)
    assert all(f.score >= -1e-9 for f in full if f.vector_rank is not None)
    assert [f.score for f in full] == sorted((f.score for f in full), reverse=True)
    assert hybrid.combine(vector, keyword_list, cos, keyword_share=share, limit=limit) == full[:limit]
    assert hybrid.combine(list(vector), list(keyword_list), dict(cos), keyword_share=share) == full


def test_hybrid_hits_carry_both_scores_and_a_bounded_fused_score(store):
    texts = ["I am allergic to peanuts", "Noted: no peanuts for you", "My cat is called Miso",
             "We went to Lyon in May", "The zebra crossing is new"]
    msgs = seed(store, "t", "u", texts)
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    index.index_messages(msgs)
    result = index.search("zebra Lyon", resource_id="u", mode="hybrid", top_k=5)
    assert result.hits
    assert all(h.vector_score is not None for h in result.hits)  # keyword-only hits get their cosine
    assert all(h.score <= 1.0 + 1e-9 for h in result.hits)
    assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)
    assert {result.hits[0].message_id, result.hits[1].message_id} == {"t-3", "t-4"}
    assert index.search("zebra Lyon", resource_id="u", mode="hybrid", top_k=2).hits == result.hits[:2]


# -- reranking by thread order and the period a query names ----------------------------------------


def F(mid: str, score: float, cos: float = 0.5) -> hybrid.Fused:
    return hybrid.Fused(mid, "t", "u", score, cos, None, 1, None)


def test_rerank_lifts_the_message_whose_reply_also_matches():
    fused = [F("other", 0.80), F("question", 0.78), F("answer", 0.70), F("noise", 0.10)]
    out = hybrid.rerank(fused, {"question": "answer", "other": "not-a-candidate", "answer": "noise"})
    assert [f.message_id for f in out][:2] == ["question", "other"]
    # Unchanged without neighbours (only rescaled): the order of combine stays.
    assert [f.message_id for f in hybrid.rerank(fused, {})] == ["other", "question", "answer", "noise"]
    assert hybrid.rerank(fused, {"question": "answer"}, limit=2) == out[:2]


def test_rerank_prefers_candidates_from_the_named_period_and_stays_bounded():
    fused = [F("may", 0.60), F("june", 0.55), F("none", 0.50)]
    out = hybrid.rerank(fused, {}, {"june"})
    assert out[0].message_id == "june"
    assert hybrid.rerank(fused, {}, set())[0].message_id == "may"  # a period no candidate is from
    top = hybrid.rerank([F("a", 1.0), F("b", 1.0)], {"a": "b", "b": "a"}, {"a", "b"})
    assert all(f.score == pytest.approx(1.0) for f in top)
    with pytest.raises(ValueError):
        hybrid.rerank(fused, {}, next_share=-0.1)


def _R(mid: str, score: float) -> hybrid.Ranked:
    return hybrid.Ranked(mid, "t", "u", score)


def test_propagate_adds_a_share_of_each_candidate_neighbours_and_stays_bounded():
    # q's next message a matches, and so does a's next b: q and a each gain from a neighbour; lone does not.
    vector = [_R("lone", 0.9), _R("q", 0.9), _R("a", 0.8), _R("b", 0.7), _R("far", 0.1)]
    combined = hybrid.Combined(vector, [], {}, keyword_share=0.0)
    before = combined.scores()
    assert [m for _, _, m in combined.order][:2] == ["lone", "q"]  # a tie, broken by id
    combined.propagate({"q": "a", "a": "b", "b": "not-a-candidate", "lone": "lone"}, 0.4)
    after = combined.scores()
    scale = 1 / 1.8
    assert after["q"] == pytest.approx((before["q"] + 0.4 * before["a"]) * scale)
    assert after["a"] == pytest.approx((before["a"] + 0.4 * (before["q"] + before["b"])) * scale)
    assert after["b"] == pytest.approx((before["b"] + 0.4 * before["a"]) * scale)  # its next is no candidate
    assert after["lone"] == pytest.approx(before["lone"] * scale)  # (a message is not its own neighbour)
    assert [m for _, _, m in combined.order] == ["a", "q", "b", "lone", "far"]  # the lone match falls last but one
    assert all(s <= 1.0 + 1e-12 for s in after.values())
    # The re-rank reads the propagated scores, and a search's records carry them.
    assert [f.score for f in combined.fused(combined.order)] == [after[m] for _, _, m in combined.order]


@pytest.mark.parametrize("step,args", [("propagate", ({"q": "a", "a": "b"},)), ("thread_prior", ())])
def test_a_zero_share_changes_nothing_and_a_negative_one_is_refused(step, args):
    vector = [_R("lone", 0.9), _R("q", 0.9), _R("a", 0.8), _R("b", 0.7)]  # (one thread)
    same = hybrid.Combined(vector, [], {}, keyword_share=0.0)
    getattr(same, step)(*args, 0.0)
    assert same.order == hybrid.Combined(vector, [], {}, keyword_share=0.0).order
    with pytest.raises(ValueError):
        getattr(same, step)(*args, -0.1)


@settings(max_examples=80, deadline=None)
@given(
    vec=st.dictionaries(st.sampled_from("abcdefgh"), st.floats(-1.0, 1.0, allow_nan=False), max_size=8),
    kw=st.dictionaries(st.sampled_from("efghijkl"), st.floats(0.0, 30.0, allow_nan=False), max_size=8),
    nexts=st.dictionaries(st.sampled_from("abcdefghijkl"), st.sampled_from("abcdefghijklmn")),
    share=st.sampled_from([0.1, 0.4, 1.0]),
)
def test_propagate_is_the_written_out_formula_sorted_as_combine_sorts(vec, kw, nexts, share):
    # One previous message per message, as in a thread (two candidates never share their next message).
    seen: set[str] = set()
    nexts = {m: n for m, n in sorted(nexts.items()) if not (n in seen or seen.add(n))}  # type: ignore[func-returns-value]
    vector = [_R(m, s) for m, s in sorted(vec.items(), key=lambda x: (-x[1], x[0]))]
    keyword_list = [_R(m, s) for m, s in sorted(kw.items(), key=lambda x: (-x[1], x[0]))]
    combined = hybrid.Combined(vector, keyword_list, {})
    base = combined.scores()
    ties = {m: tie for _, tie, m in combined.order}
    prev = {n: m for m, n in nexts.items() if n != m and n in base and m in base}
    want = {m: (s + share * (base.get(nexts.get(m, ""), 0.0) if nexts.get(m) != m else 0.0)
                + share * base.get(prev.get(m, ""), 0.0)) / (1 + 2 * share) for m, s in base.items()}
    combined.propagate(nexts, share)
    assert [m for _, _, m in combined.order] == sorted(want, key=lambda m: (-want[m], ties[m], m))
    assert combined.scores() == pytest.approx(want)
    assert max(want.values(), default=0.0) <= 1.0 + 1e-9


def test_thread_prior_adds_a_share_of_the_best_other_candidate_of_each_thread():
    R2 = lambda mid, thread, score: hybrid.Ranked(mid, thread, "u", score)  # noqa: E731
    vector = [R2("lone", "t1", 0.9), R2("a", "t2", 0.8), R2("b", "t2", 0.7), R2("c", "t2", 0.6), R2("far", "t3", 0.1)]
    combined = hybrid.Combined(vector, [], {}, keyword_share=0.0)
    before = combined.scores()
    assert [m for _, _, m in combined.order][0] == "lone"
    combined.thread_prior(0.3)  # (each candidate's thread: its hit's)
    after = combined.scores()
    scale = 1 / 1.3
    assert after["lone"] == pytest.approx(before["lone"] * scale)  # alone in its thread: nothing to add
    assert after["a"] == pytest.approx((before["a"] + 0.3 * before["b"]) * scale)  # the best: the second's share
    assert after["b"] == pytest.approx((before["b"] + 0.3 * before["a"]) * scale)  # the others: the best's
    assert after["c"] == pytest.approx((before["c"] + 0.3 * before["a"]) * scale)
    assert [m for _, _, m in combined.order] == ["a", "b", "lone", "c", "far"]  # a thread about it rises
    assert combined.own == before  # (each candidate's own lists' score stays readable)


@settings(max_examples=80, deadline=None)
@given(
    vec=st.dictionaries(st.sampled_from("abcdefgh"), st.floats(-1.0, 1.0, allow_nan=False), max_size=8),
    kw=st.dictionaries(st.sampled_from("efghijkl"), st.floats(0.0, 30.0, allow_nan=False), max_size=8),
    threads=st.dictionaries(st.sampled_from("abcdefghijkl"), st.sampled_from(["t1", "t2", "t3", None])),
    share=st.sampled_from([0.1, 0.3, 0.9]),
)
def test_thread_prior_is_the_written_out_formula_and_keeps_a_thread_s_own_order(vec, kw, threads, share):
    # Each hit names its message's thread (a message in both lists names the same one).
    R2 = lambda m, s: hybrid.Ranked(m, threads.get(m, "t1"), "u", s)  # noqa: E731
    vector = [R2(m, s) for m, s in sorted(vec.items(), key=lambda x: (-x[1], x[0]))]
    keyword_list = [R2(m, s) for m, s in sorted(kw.items(), key=lambda x: (-x[1], x[0]))]
    combined = hybrid.Combined(vector, keyword_list, {})
    base = combined.scores()
    ties = {m: tie for _, tie, m in combined.order}
    thread_of = {m: threads.get(m, "t1") for m in base}
    want = {m: (s + share * max((base[o] for o in base if o != m and thread_of[o] == thread_of[m]), default=0.0))
            / (1 + share) for m, s in base.items()}
    combined.thread_prior(share)
    after = [m for _, _, m in combined.order]
    assert after == sorted(want, key=lambda m: (-want[m], ties[m], m))
    assert combined.scores() == pytest.approx(want)
    assert max(want.values(), default=0.0) <= 1.0 + 1e-9
    # A share below 1 never reorders one thread's candidates (but where the new scores round to equal floats).
    got = combined.scores()
    for i, x in enumerate(after):
        for y in after[i + 1:]:
            if thread_of[x] == thread_of[y]:
                assert base[x] >= base[y] or got[x] == got[y], (x, y)


@settings(max_examples=120, deadline=None)
@given(
    vec=st.dictionaries(st.sampled_from("abcdefgh"), st.sampled_from([-0.5, 0.0, 0.25, 0.5, 0.9, 1.0]), max_size=8),
    kw=st.dictionaries(st.sampled_from("efghijkl"), st.sampled_from([0.0, 1.0, 2.5, 10.0]), max_size=8),
    threads=st.dictionaries(st.sampled_from("abcdefghijkl"), st.sampled_from(["t1", "t2", "t3", None])),
    nexts=st.dictionaries(st.sampled_from("abcdefghijkl"), st.sampled_from("abcdefghijklmn")),
    shares=st.sampled_from([(0.4, 0.3), (0.1, 0.9), (1.0, 1.0), (0.0, 0.3), (0.4, 0.0), (0.0, 0.0)]),
)
def test_reshape_is_propagate_then_thread_prior_to_the_bit(vec, kw, threads, nexts, shares):
    # (scores from a few values: ties within a thread and across threads are common, as in real lists)
    seen: set[str] = set()
    nexts = {m: n for m, n in sorted(nexts.items()) if not (n in seen or seen.add(n))}  # type: ignore[func-returns-value]
    R2 = lambda m, s: hybrid.Ranked(m, threads.get(m, "t1"), "u", s)  # noqa: E731
    vector = [R2(m, s) for m, s in sorted(vec.items(), key=lambda x: (-x[1], x[0]))]
    keyword_list = [R2(m, s) for m, s in sorted(kw.items(), key=lambda x: (-x[1], x[0]))]
    two_steps, one_pass = hybrid.Combined(vector, keyword_list, {}), hybrid.Combined(vector, keyword_list, {})
    neighbours, thread = shares
    two_steps.propagate(nexts, neighbours)
    two_steps.thread_prior(thread)
    one_pass.reshape(nexts, neighbours, thread)
    assert [(neg.hex(), tie.hex(), m) for neg, tie, m in one_pass.order] == \
        [(neg.hex(), tie.hex(), m) for neg, tie, m in two_steps.order]
    assert one_pass.scores() == two_steps.scores()
    assert one_pass.own == two_steps.own


@settings(max_examples=60, deadline=None)
@given(
    raw=st.dictionaries(st.sampled_from("abcdefgh"), st.floats(min_value=-0.2, max_value=1.0), min_size=1),
    links=st.dictionaries(st.sampled_from("abcdefgh"), st.sampled_from("abcdefghxy")),
    dated=st.one_of(st.none(), st.sets(st.sampled_from("abcdefgh"))),
    limit=st.integers(min_value=1, max_value=10),
)
def test_rerank_is_bounded_sorted_and_limit_is_a_prefix(raw, links, dated, limit):
    fused = [F(m, s) for m, s in sorted(raw.items(), key=lambda x: -x[1])]
    full = hybrid.rerank(fused, links, dated)
    assert sorted(f.message_id for f in full) == sorted(raw)
    assert all(f.score <= 1 + 1e-9 for f in full)
    assert [f.score for f in full] == sorted((f.score for f in full), reverse=True)
    assert hybrid.rerank(fused, links, dated, limit=limit) == full[:limit]


def test_query_dates_reads_calendar_dates_months_years_and_relative_periods():
    from datetime import date

    from core.recall.text import DAY_AFTER, DAY_BEFORE, DateSpan, query_dates

    day = query_dates("What did Nate do for Joanna on 25 May, 2022?")
    assert day == [DateSpan(date(2022, 5, 25) - timedelta(days=DAY_BEFORE), date(2022, 5, 25) + timedelta(days=DAY_AFTER))]
    assert query_dates("on October 13, 2023") == query_dates("on 13th October 2023") == query_dates("2023-10-13")
    assert query_dates("in May 2022") == [DateSpan(date(2022, 5, 1), date(2022, 5, 31))]
    assert query_dates("Which spot did she visit in May?") == [DateSpan(month=5)]
    assert query_dates("How often in 2023?") == [DateSpan(date(2023, 1, 1), date(2023, 12, 31))]
    # "may" the verb, a bare number, an impossible date and Chinese text name no period.
    assert query_dates("I may go with 2000 people") == []
    assert query_dates("on 31 February 2023") == []
    assert query_dates("我五月做了什么？") == []
    today = date(2026, 3, 4)  # a Wednesday
    assert query_dates("what did I say yesterday", today) == [DateSpan(date(2026, 3, 2), date(2026, 3, 3))]
    assert query_dates("last week", today) == [DateSpan(date(2026, 2, 23), date(2026, 3, 1))]
    assert query_dates("last month", today) == [DateSpan(date(2026, 2, 1), date(2026, 2, 28))]
    assert query_dates("two months ago", today) == [DateSpan(date(2026, 1, 1), date(2026, 1, 31))]
    assert query_dates("last week") == []  # relative periods need a day to count from
    assert DateSpan(month=5).contains(date(2019, 5, 31)) and not DateSpan(month=5).contains(date(2019, 6, 1))



_DATE_PIECES = ["on", "in", "of", "since", "last", "week", "ago", "3", "25", "2022", "2023-05-08", "13th", "May",
                "may", "june", "Sept.", "oct", "w123", "x25", "remark", "decide", ",", " ", "-", ":", "5pm", "yesterday"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_DATE_PIECES), max_size=8).map(" ".join))
def test_query_dates_skips_its_patterns_only_when_none_could_match(text):
    """The quick look (a number or a month's name at a word's start) never skips a query a pattern reads."""
    from datetime import date

    from core.recall import text as text_module

    today = date(2026, 3, 1)
    quick = text_module.query_dates(text, today)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(text_module, "_ABSOLUTE_HINT", text_module.re.compile(""))  # every query looked at
        assert text_module.query_dates(text, today) == quick

def _dated(store, thread: str, day: datetime, texts: list[str]) -> list[Message]:
    store.memory.create_thread(thread_id=thread, resource_id="u")
    msgs = [
        (Message.user if i % 2 == 0 else Message.assistant)(
            text, id=f"{thread}-{i}", thread_id=thread, resource_id="u", created_at=day + timedelta(minutes=i)
        )
        for i, text in enumerate(texts)
    ]
    store.memory.save_messages(msgs)
    return msgs


def test_a_date_in_the_query_prefers_messages_from_that_date(store):
    may = _dated(store, "a-may", datetime(2023, 5, 8, 10, tzinfo=timezone.utc), ["We went hiking by the lake", "Sounds lovely"])
    june = _dated(store, "b-june", datetime(2023, 6, 20, 10, tzinfo=timezone.utc), ["We went hiking by the lake", "Sounds lovely"])
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    assert index.index_messages(may + june).ok
    plain = index.search("Where did we go hiking?", resource_id="u", mode="hybrid", top_k=2)
    assert plain.hits[0].message_id == "a-may-0"  # a tie, broken by id
    for query in ("Where did we go hiking in June 2023?", "Where did we go hiking on 20 June, 2023?", "hiking in June?"):
        result = index.search(query, resource_id="u", mode="hybrid", top_k=2)
        assert result.hits[0].message_id == "b-june-0", query
        assert result.details["date_spans"] == 1
        assert all(h.score <= 1 + 1e-9 for h in result.hits)
    may_hits = index.search("hiking in May 2023", resource_id="u", mode="hybrid", top_k=2).hits
    assert may_hits[0].message_id == "a-may-0"


def test_relative_periods_count_from_today(store, monkeypatch):
    from core.recall import search as search_module

    _dated(store, "a-old", datetime(2023, 5, 8, 10, tzinfo=timezone.utc), ["I booked the dentist"])
    recent = _dated(store, "b-new", datetime(2026, 3, 3, 10, tzinfo=timezone.utc), ["I booked the dentist"])
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    index.index_messages(store.memory.get_messages("a-old") + recent)
    monkeypatch.setattr(search_module, "today", lambda: datetime(2026, 3, 4).date())
    hits = index.search("what did I book yesterday? dentist", resource_id="u", mode="hybrid", top_k=2).hits
    assert hits[0].message_id == "b-new-0"


@pytest.mark.backends
def test_a_message_whose_reply_matches_rises_above_an_equal_one(store, monkeypatch):
    # Same first message in two threads; only in the second does the reply also talk about it.
    a = _dated(store, "a", T0, ["Tell me about the zebra", "The weather is grey today"])
    b = _dated(store, "b", T0 + timedelta(days=1), ["Tell me about the zebra", "A zebra has black and white stripes"])
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    assert index.index_messages(a + b).ok
    ranked = [h.message_id for h in index.search("zebra", resource_id="u", mode="hybrid", top_k=3).hits]
    assert ranked.index("b-0") < ranked.index("a-0")
    monkeypatch.setattr(hybrid, "NEXT_SHARE", 0.0)
    monkeypatch.setattr(hybrid, "THREAD_SHARE", 0.0)
    ranked = [h.message_id for h in index.search("zebra", resource_id="u", mode="hybrid", top_k=3).hits]
    assert ranked.index("b-0") < ranked.index("a-0")  # the neighbours' share alone (``Combined.propagate``)
    monkeypatch.setattr(hybrid, "NEIGHBOUR_SHARE", 0.0)
    monkeypatch.setattr(hybrid, "THREAD_SHARE", 0.3)
    ranked = [h.message_id for h in index.search("zebra", resource_id="u", mode="hybrid", top_k=3).hits]
    assert ranked.index("b-0") < ranked.index("a-0")  # the thread prior alone (``Combined.thread_prior``)
    monkeypatch.setattr(hybrid, "THREAD_SHARE", 0.0)
    ranked = [h.message_id for h in index.search("zebra", resource_id="u", mode="hybrid", top_k=3).hits]
    assert ranked.index("a-0") < ranked.index("b-0")  # without any of them: a tie, broken by id
    # The same holds inside one thread, and with a threshold (every candidate reranked).
    monkeypatch.undo()
    hits = index.search("zebra", resource_id="u", thread_id="b", mode="hybrid", top_k=2, threshold=-1.0).hits
    assert {h.message_id for h in hits} == {"b-0", "b-1"}


def test_a_chinese_query_with_a_date_still_finds_its_message(store):
    msgs = _dated(store, "zh", datetime(2023, 5, 8, 10, tzinfo=timezone.utc), ["我对花生过敏", "好的，我记住了"])
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    index.index_messages(msgs)
    for query in ("我对什么过敏？", "May 2023 我对什么过敏？"):
        hits = index.search(query, resource_id="u", mode="hybrid", top_k=2).hits
        assert hits and hits[0].message_id == "zh-0", query


# -- speakers a query names ------------------------------------------------------------------------


def test_speaker_labels_are_short_names_before_a_colon_at_the_start():
    from core.recall.text import SpeakerMatcher, speaker_label

    assert speaker_label("Caroline: I went to a support group") == "caroline"
    assert speaker_label("  Mary Ann: yes") == "mary ann"
    assert speaker_label("卡罗琳: 你好") == "卡罗琳"
    for text in ("https://example.com: a link", "At 10:30 we met", "We met. Later: lunch", "Caroline:no space", ""):
        assert speaker_label(text) is None, text
    named = SpeakerMatcher("What did Caroline's mentor say?")
    assert named("caroline") and not named("melanie") and not named(None)
    assert not SpeakerMatcher("what about Mary?")("mary ann")  # every word of the label
    assert SpeakerMatcher("卡罗琳去了哪里？")("卡罗琳")


def test_a_label_needs_a_colon_and_every_character_normalised_to_one_is_known():
    import sys
    import unicodedata

    from core.recall.text import COLON_CHARS, speaker_label

    # speaker_label skips texts without one of these before normalising: the list must be complete.
    colons = {chr(c) for c in range(sys.maxunicode + 1) if ":" in unicodedata.normalize("NFKC", chr(c))}
    assert colons <= set(COLON_CHARS)
    assert speaker_label("Caroline\uff1a hello") == "caroline"  # a full-width colon is a colon
    assert speaker_label("Caroline said hello") is None


@pytest.mark.backends
def test_thread_order_reads_the_same_labels_as_decoding_the_whole_content(store):
    """The re-rank reads only the start of each text where the database can cut it out of the JSON;
    whatever a row holds, its label is the one decoding the whole content gives."""
    import json

    from core.recall import search as pipeline
    from core.recall.schema import text_of_raw
    from core.recall.text import speaker_label
    from core.storage import dialect

    texts = [f"Caroline: line {i}" if i % 2 else f"Mel: line {i}" for i in range(12)]
    msgs = seed(store, "t", "u", texts)
    contents = [
        json.dumps({"format": 2, "parts": [], "content": "Nate: plain json"}),
        json.dumps({"format": 2, "parts": [{"type": "text", "text": "Joanna: from the parts"}]}),  # no content
        json.dumps({"format": 2, "parts": [{"type": "text", "text": "Joanna: parts win"}], "content": "  \n "}),
        '{"content": "Tim: first", "content": "Gina: the last one counts"}',  # duplicate keys
        json.dumps({"content": "J\u00f6rg: escaped"}, ensure_ascii=True),
        json.dumps({"content": "卡罗琳： 你好"}, ensure_ascii=False),
        "Deb: not json at all",
        '{"content": "Evan: broken json',
        '{"content": "Sam: NaN is Python-only", "n": NaN}',
        json.dumps({"content": 42, "parts": [{"type": "text", "text": "Max: number content"}]}),
        json.dumps({"content": "x" * 100 + "Zed: too far"}),
        json.dumps({"content": "\t Ann Lee : spaced"}),
    ]
    with store.db.write() as conn:
        for m, content in zip(msgs, contents):
            conn.exec_driver_sql("UPDATE mastra_messages SET content = ? WHERE id = ?", (content, m.id))
    ids = [m.id for m in msgs]
    with store.db.read() as conn:
        got = pipeline.thread_order(conn, ids, labels=True)
        raw = dict(conn.exec_driver_sql(
            f"SELECT id, {dialect.stored_text_sql(conn, 'content')} FROM mastra_messages").all())
        plain = pipeline.thread_order(conn, ids)
    expected = {mid: speaker_label(text_of_raw(raw[mid])) for mid in ids}
    assert {mid: label for mid, (_, _, label) in got.items()} == expected
    assert expected[msgs[0].id] == "nate" and expected[msgs[3].id] == "gina" and expected[msgs[1].id] == "joanna"
    assert {mid: (nxt, day) for mid, (nxt, day, _) in got.items()} == {mid: (nxt, day) for mid, (nxt, day, _) in plain.items()}
    assert got[msgs[0].id][0] == msgs[1].id and got[msgs[-1].id][0] is None


def test_rerank_boosts_the_named_speakers_candidates_and_stays_bounded():
    f = [hybrid.Fused(m, None, None, s, 0.5, None, 1, None) for m, s in (("a", 0.9), ("b", 0.8), ("c", 0.1))]
    ranked = hybrid.rerank(f, {}, None, by_speaker={"b"})
    assert [x.message_id for x in ranked][:2] == ["b", "a"]
    assert all(0 <= x.score <= 1 for x in ranked)
    assert [x.message_id for x in hybrid.rerank(f, {}, None, by_speaker=set())] == ["a", "b", "c"]
    with pytest.raises(ValueError):
        hybrid.rerank(f, {}, None, speaker_boost=-1)


def test_a_query_naming_a_speaker_prefers_that_speakers_message(store):
    msgs = _dated(store, "talk", T0, [
        "Caroline: I went hiking by the lake on Sunday",
        "Melanie: I went hiking by the lake too, last year",
    ])
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    assert index.index_messages(msgs).ok
    for who, expected in (("Melanie", "talk-1"), ("Caroline", "talk-0")):
        hits = index.search(f"Where did {who} go hiking?", resource_id="u", mode="hybrid", top_k=2).hits
        assert hits[0].message_id == expected, who
        assert all(h.score <= 1 + 1e-9 for h in hits)


@settings(max_examples=150, deadline=None)
@given(
    vec=st.dictionaries(st.sampled_from("abcdefgh"), st.sampled_from([-0.5, 0.0, 0.25, 0.5, 0.9, 1.0, 0.3333]), min_size=1, max_size=8),
    kw=st.dictionaries(st.sampled_from("efghijkl"), st.sampled_from([0.0, 1.0, 2.5, 10.0, 3.7]), max_size=8),
    known=st.dictionaries(st.sampled_from("ijkl"), st.sampled_from([-0.7, 0.1, 0.6, 1.2])),
    share=st.sampled_from([0.0, 0.65, 0.85, 1.0]),
)
def test_combined_reads_lists_of_unique_messages_as_the_general_loops_do(vec, kw, known, share):
    """Lists naming each message once take ``Combined``'s unpacking loops; a copy of each list with its last
    hit listed again (counted once, as its last entry: the same candidates and scores) takes the general
    loops. Entries, scores and threads are the same to the bit."""
    vector = [hybrid.Ranked(m, f"t{ord(m) % 3}", "u", s) for m, s in sorted(vec.items(), key=lambda x: (-x[1], x[0]))]
    keyword_list = [hybrid.Ranked(m, f"t{ord(m) % 2}", "u", s) for m, s in sorted(kw.items(), key=lambda x: (-x[1], x[0]))]
    unique = hybrid.Combined(vector, keyword_list, known, keyword_share=share)
    general = hybrid.Combined(vector + vector[-1:], keyword_list + keyword_list[-1:], known, keyword_share=share)

    def bits(c: hybrid.Combined) -> list[tuple[str, str, str]]:
        return [(neg.hex(), tie.hex(), m) for neg, tie, m in c.entries]

    assert bits(unique) == bits(general)
    assert [(m, s.hex()) for m, s in unique.own.items()] == [(m, s.hex()) for m, s in general.own.items()]
    assert unique.ids == general.ids and unique._threads == general._threads
