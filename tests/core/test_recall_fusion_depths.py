"""A model's fusion may list the vector and the keyword side of a hybrid search to different depths
(``hybrid.Fusion.keyword_candidates``; USE's since session 24: vector 70, keyword 50): each list is read
to its own depth, the fusion sees those lists, and the Studio's explanation names each depth."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex, hybrid
from core.recall import search as pipeline

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def _index(store) -> RecallIndex:  # type: ignore[no-untyped-def]
    index = RecallIndex.for_store(store, HashingEmbedder(32))
    store.memory.create_thread(thread_id="t", resource_id="u")
    msgs = [Message.user(f"note {i}: {('garden tomatoes', 'bicycle', 'concert')[i % 3]} item{i % 20}", id=f"m{i:03d}",
                         thread_id="t", resource_id="u", created_at=T0 + timedelta(minutes=i)) for i in range(150)]
    store.memory.save_messages(msgs)
    assert not index.index_messages(msgs).failed
    return index


@pytest.mark.parametrize("vector_depth,keyword_depth", [(30, 8), (8, 30), (12, None)])
def test_each_list_is_read_to_its_own_depth(store, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                            vector_depth: int, keyword_depth: int | None):
    index = _index(store)
    family = index.model_id.split("@", 1)[0]
    monkeypatch.setitem(hybrid.MODEL_FUSION, family, hybrid.Fusion(keyword_share=0.65, candidates=vector_depth,
                                                                  keyword_candidates=keyword_depth))
    run = pipeline.run(index, "garden tomatoes", resource_id="u", thread_id=None, top_k=5, mode="hybrid",
                       every_candidate=True)
    want_kw = vector_depth if keyword_depth is None else keyword_depth
    assert (len(run.vector), len(run.keyword)) == (vector_depth, want_kw)
    # the same lists as each side's own search to that depth
    vector = pipeline.run(index, "garden tomatoes", resource_id="u", thread_id=None, top_k=vector_depth, mode="vector")
    keyword = pipeline.run(index, "garden tomatoes", resource_id="u", thread_id=None, top_k=want_kw, mode="keyword")
    assert [r.message_id for r in run.vector] == [r.message_id for r in vector.vector]
    assert [r.message_id for r in run.keyword] == [r.message_id for r in keyword.keyword]
    # the fusion's candidates are those two lists' messages
    assert {mid for _, _, mid in run.combined.order} == {r.message_id for r in [*run.vector, *run.keyword]}
    # a search never lists fewer than its top_k
    deep = pipeline.run(index, "garden tomatoes", resource_id="u", thread_id=None, top_k=40, mode="hybrid")
    assert (len(deep.vector), len(deep.keyword)) == (40, 40)


def test_the_default_models_fusion_lists_vector_70_and_keyword_50():
    use = hybrid.fusion_for("use-multilingual-v3-q@b8b05b01")
    assert (use.keyword_share, use.depths(10), use.lower_query) == (0.65, (70, 50), True)
    assert hybrid.fusion_for("multilingual-e5-small-q4@1571fc98").depths(10) == (80, 80)
    assert hybrid.Fusion().depths(10) == (hybrid.Fusion().candidates,) * 2


def test_why_not_names_each_lists_own_depth(store, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    from core.recall.explain import explain_message, inspect_search

    index = _index(store)
    monkeypatch.setitem(hybrid.MODEL_FUSION, index.model_id.split("@", 1)[0],
                        hybrid.Fusion(keyword_share=0.65, candidates=12, keyword_candidates=6))
    ins = inspect_search(index, "garden tomatoes", resource_id="u", top_k=4)
    listed = {c.message_id for name in ("vector", "keyword") for c in ins.lists[name]}
    keyword_only = pipeline.run(index, "garden tomatoes", resource_id="u", thread_id=None, top_k=50, mode="keyword")
    beyond = next(r.message_id for r in keyword_only.keyword[6:] if r.message_id not in listed)
    e = explain_message(index, beyond, ins)
    assert e.verdict == "not-a-candidate"
    assert "the best 12 of the vector list and 6 of the keyword list" in e.placements["hybrid"].why
    assert "below the 6 candidates" in e.placements["keyword"].why
    assert "below the 12 candidates" in e.placements["vector"].why
