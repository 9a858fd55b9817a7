"""Inside one recall search (core/recall/explain.py): the three lists, what was cut, and "why not this message?"."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex, hybrid
from core.recall.explain import explain_message, inspect_search

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)

ALICE = [
    "I am allergic to peanuts and shellfish",
    "Noted: no peanuts and no shellfish in your meal plans",
    "My cat is called Miso and she likes tuna",
    "Miso the cat sounds lovely",
    "Book a table for two at an Italian place on Friday",
    "Done: Trattoria Roma, Friday 8pm, table for two",
    "Remind me to buy cat food and peanut-free snacks",
    "Reminder set: cat food and peanut-free snacks",
]


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def seed(store, thread: str, resource: str, texts: list[str], start: int = 0, index: RecallIndex | None = None):
    if store.memory.get_thread(thread) is None:
        store.memory.create_thread(thread_id=thread, resource_id=resource)
    msgs = [
        (Message.user if i % 2 == 0 else Message.assistant)(
            text, id=f"{thread}-{i}", thread_id=thread, resource_id=resource, created_at=at(start + i))
        for i, text in enumerate(texts)
    ]
    store.memory.save_messages(msgs)
    if index is not None:
        assert index.index_messages(msgs).ok
    return msgs


@pytest.fixture
def index(store):
    idx = RecallIndex.for_store(store, HashingEmbedder(64))
    seed(store, "t1", "alice", ALICE[:4], index=idx)
    seed(store, "t2", "alice", ALICE[4:], start=100, index=idx)
    seed(store, "t3", "bob", ["I am allergic to peanuts too", "Bob, noted: peanuts are out"], start=200, index=idx)
    return idx


def checksum(store) -> str:
    h = hashlib.sha256()
    with store.db.read() as conn:
        names = [r[0] for r in conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        for name in names:
            if name.startswith("memory_studio_message_fts_"):
                continue  # FTS5 shadow tables: covered by the docs table and the FTS table itself
            h.update(name.encode())
            for row in conn.execute(sa.text(f'SELECT * FROM "{name}" ORDER BY 1')).all():
                h.update(repr(tuple(row)).encode())
    return h.hexdigest()


QUERIES = ["what is she allergic to? peanuts", "the cat's name", "Friday dinner table", "snacks"]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("top_k,threshold", [(1, None), (3, None), (20, None), (3, 0.2), (5, 0.5)])
def test_each_list_s_hits_are_what_search_returns(index, query, top_k, threshold):
    ins = inspect_search(index, query, resource_id="alice", top_k=top_k, threshold=threshold, before=0, after=0)
    for mode in ("vector", "keyword", "hybrid"):
        expected = index.search(query, resource_id="alice", top_k=top_k, mode=mode, threshold=threshold).hits
        got = ins.hits(mode)
        assert [c.message_id for c in got] == [h.message_id for h in expected], (mode, query)
        assert [round(c.score, 9) for c in got] == [round(h.score, 9) for h in expected], mode
        assert all(c.resource_id == "alice" for c in ins.lists[mode])


def test_hybrid_rows_carry_ranks_raw_scores_and_the_fused_score(index):
    ins = inspect_search(index, "allergic peanuts", resource_id="alice", top_k=4)
    vec_rank = {c.message_id: c.rank for c in ins.lists["vector"]}
    kw_rank = {c.message_id: c.rank for c in ins.lists["keyword"]}
    top = ins.lists["hybrid"][0]
    assert top.message_id in {"t1-0", "t1-1"}
    assert top.vector_score is not None and top.keyword_score is not None and top.combined is not None
    for c in ins.lists["hybrid"]:
        assert c.vector_rank == vec_rank.get(c.message_id)
        assert c.keyword_rank == kw_rank.get(c.message_id)
        assert 0.0 <= c.score <= 1.0
    assert [c.rank for c in ins.lists["hybrid"]] == list(range(1, len(ins.lists["hybrid"]) + 1))
    assert "peanuts" in ins.terms
    assert ins.messages["t1-0"].text == ALICE[0]


def test_a_threshold_says_how_many_results_it_cut(index):
    ins = inspect_search(index, "allergic peanuts", resource_id="alice", top_k=4, threshold=0.99)
    assert ins.hits("hybrid") == [] and ins.hits("vector") == []
    below = ins.count("hybrid", "below-threshold")
    assert below == len(ins.lists["hybrid"]) > 0
    assert f"{below} results below the threshold 0.99" in ins.summary("hybrid")
    assert "below the threshold 0.99" in ins.empty_reason("hybrid")
    assert "lower it" in ins.empty_reason("hybrid")
    # keyword search has no similarity to cut by: its hits stay, and the summary says so
    assert ins.hits("keyword")
    assert "threshold not applied to BM25" in ins.summary("keyword")


def test_an_empty_scope_says_why(index):
    ins = inspect_search(index, "peanuts", resource_id="nobody", top_k=4)
    assert ins.hits("vector") == []
    assert "no messages indexed for resource nobody" in ins.empty_reason("vector")
    assert "no keyword matches" in ins.empty_reason("keyword")
    assert inspect_search(index, "  ", resource_id="alice").notes == ["the query has no text"]
    with pytest.raises(ValueError):
        inspect_search(index, "x", resource_id="alice", top_k=0)


def test_range_gives_each_hit_its_neighbours(index):
    ins = inspect_search(index, "Miso the cat", resource_id="alice", thread_id=None, top_k=1, before=1, after=1)
    [hit] = ins.hits("hybrid")
    [window] = ins.windows
    assert window.hit_id == hit.message_id
    n = int(hit.message_id.rsplit("-", 1)[1])
    thread = hit.message_id.rsplit("-", 1)[0]
    expected = [f"{thread}-{i}" for i in (n - 1, n, n + 1) if 0 <= i < 4]
    assert list(window.message_ids) == expected
    assert all(mid in ins.messages for mid in window.message_ids)


def test_inspecting_and_explaining_never_write(store, index):
    # A change waits in the keyword queue: a search on this branch would apply it; looking must not.
    store.memory.delete_messages(["t2-3"])
    seed(store, "t4", "alice", ["saved by a process without recall"], start=700)
    before = checksum(store)
    ins = inspect_search(index, "cat food snacks", resource_id="alice", top_k=2, threshold=0.1)
    for mid in ("t1-0", "t2-3", "t3-0", "nope"):
        explain_message(index, mid, ins)
    assert checksum(store) == before
    assert any(n.startswith("1 message of this scope is not keyword-indexed yet") for n in ins.notes)
    # another resource's backlog is not this search's concern
    assert not any("keyword-indexed" in n for n in inspect_search(index, "peanuts", resource_id="bob").notes)


def test_why_not_a_hit_a_cut_and_a_neighbour(index):
    ins = inspect_search(index, "allergic peanuts", resource_id="alice", top_k=1, before=1, after=1)
    hit = ins.hits("hybrid")[0].message_id
    e = explain_message(index, hit, ins)
    assert e.verdict == "hit" and e.placements["hybrid"].rank == 1
    assert e.placements["vector"].rank is not None and e.placements["keyword"].rank is not None
    neighbour = "t1-1" if hit == "t1-0" else "t1-0"
    e = explain_message(index, neighbour, ins)
    assert e.verdict == "neighbour" and e.neighbour_of == hit
    assert "neighbour of hybrid hit 1" in e.summary
    # a candidate below the first place: outside the top 1, with its rank and score
    ins0 = inspect_search(index, "allergic peanuts", resource_id="alice", top_k=1, before=0, after=0)
    second = ins0.lists["hybrid"][1]
    e = explain_message(index, second.message_id, ins0)
    assert e.verdict == "outside-top-k"
    assert e.placements["hybrid"].rank == 2 and "outside the top 1" in e.summary


def test_why_not_below_the_threshold(index):
    ins = inspect_search(index, "allergic peanuts", resource_id="alice", top_k=4, threshold=0.99, before=0, after=0)
    e = explain_message(index, "t1-0", ins)
    assert e.verdict == "below-threshold"
    assert "below the threshold 0.99" in e.summary
    assert e.placements["vector"].score is not None


def test_why_not_another_resource_thread_role_or_a_deleted_message(store, index):
    ins = inspect_search(index, "peanuts", resource_id="alice", top_k=4)
    e = explain_message(index, "t3-0", ins)
    assert e.verdict == "other-resource" and "resource bob" in e.summary
    in_thread = inspect_search(index, "peanuts", resource_id=None, thread_id="t1", top_k=4)
    e = explain_message(index, "t2-0", in_thread)
    assert e.verdict == "other-thread" and "scope to resource" in e.summary
    store.memory.save_messages([Message.system("be kind", id="sys-1", thread_id="t1", resource_id="alice",
                                               created_at=at(50))])
    assert explain_message(index, "sys-1", ins).verdict == "role-not-indexed"
    assert explain_message(index, "never-existed", ins).verdict == "deleted"
    store.memory.delete_messages(["t1-0"])
    ins = inspect_search(index, "allergic peanuts", resource_id="alice", top_k=4)
    assert "t1-0" not in [c.message_id for c in ins.hits("hybrid")]
    assert [c.status for c in ins.lists["hybrid"] if c.message_id == "t1-0"] == ["deleted"]
    e = explain_message(index, "t1-0", ins)
    assert e.verdict == "deleted" and "index still holds it" in e.summary


def test_why_not_a_message_that_was_never_indexed_or_has_another_model_s_vector(store, index):
    ins = inspect_search(index, "peanuts", resource_id="alice", top_k=4)
    store.memory.create_thread(thread_id="t9", resource_id="alice")
    plain = Message.user("peanut allergy details", id="t9-0", thread_id="t9", resource_id="alice", created_at=at(300))
    store.memory.save_messages([plain])
    e = explain_message(index, "t9-0", ins)  # saved without recall: no vector, no keyword entry yet
    assert e.verdict == "not-indexed" and "reindex" in e.summary
    assert e.facts == ["vector from hashing-ngram-v1@d64: no", "keyword-indexed: no"]

    class OtherModel(HashingEmbedder):
        def __init__(self) -> None:
            super().__init__(64)
            self.model_id = "other-model@d64"

    other = RecallIndex(store, OtherModel())
    other.index_messages([plain])
    ins = inspect_search(index, "peanut allergy", resource_id="alice", top_k=4)
    assert any("other-model@d64 ignored" in n for n in ins.notes)
    e = explain_message(index, "t9-0", ins)
    assert e.verdict == "hit" and e.placements["keyword"].rank == 1  # found by its words alone
    assert e.placements["vector"].status == "wrong-model"
    assert "other-model@d64" in e.placements["vector"].why and "reindex" in e.placements["vector"].why


def test_why_not_a_message_that_was_never_a_hybrid_candidate(store, index):
    seed(store, "t5", "alice", [f"peanut butter recipe number {i}" for i in range(60)], start=400, index=index)
    seed(store, "t6", "alice", ["weather in Lisbon is sunny"], start=600, index=index)
    ins = inspect_search(index, "peanut butter recipe", resource_id="alice", top_k=4)
    e = explain_message(index, "t6-0", ins)
    assert e.verdict == "not-a-candidate"
    assert e.placements["keyword"].status == "no-match"
    assert e.placements["vector"].rank is not None and e.placements["vector"].rank > 50
    assert "never a candidate" in e.summary


def test_hybrid_rows_and_why_say_what_the_thread_added(index, monkeypatch):
    # Each hybrid candidate keeps its own lists' score beside the one with its thread's share (its
    # neighbours', ``Combined.propagate``, and its thread's best other candidate's, ``Combined.thread_prior``):
    # the first is what the search fuses with both turned off.
    ins = inspect_search(index, "allergic peanuts", resource_id="alice", top_k=4, before=0, after=0)
    monkeypatch.setattr(hybrid, "NEIGHBOUR_SHARE", 0.0)
    monkeypatch.setattr(hybrid, "THREAD_SHARE", 0.0)
    alone = inspect_search(index, "allergic peanuts", resource_id="alice", top_k=4, before=0, after=0)
    monkeypatch.undo()
    without = {c.message_id: c.combined for c in alone.lists["hybrid"]}
    assert {c.message_id: c.own for c in ins.lists["hybrid"]} == without
    assert all(c.own == c.combined for c in alone.lists["hybrid"])
    lifted = [c for c in ins.lists["hybrid"] if f"{c.own:.3f}" != f"{c.combined:.3f}"]
    assert lifted  # t1-0 and t1-1 are neighbours, and both match
    for c in lifted:
        why = explain_message(index, c.message_id, ins).placements["hybrid"].why
        assert f"{c.own:.3f} from its own lists, {c.combined:.3f} with its thread's share" in why
    first = alone.lists["hybrid"][0].message_id
    assert "thread's share" not in explain_message(index, first, alone).placements["hybrid"].why
