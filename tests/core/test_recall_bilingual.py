"""A Chinese question finds a Chinese and an English fact (real USE model, hybrid search)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from core.messages import Message
from core.recall import RecallIndex

# Engine behaviour: every test here runs on libSQL and on Postgres.
pytestmark = pytest.mark.backends

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def use_embedder():
    from core.embedding import EmbedderError, default_embedder

    try:
        return default_embedder()
    except EmbedderError as exc:  # the model is provisioned by `make test`; say so rather than fail obscurely
        pytest.skip(f"USE model not installed: {exc}")


@pytest.mark.slow
def test_chinese_query_finds_chinese_and_english_facts(store, use_embedder):
    facts = {
        "zh-fact": ("t-zh", "我对花生过敏，吃了会很危险。"),
        "en-fact": ("t-en", "My sister lives in Lyon and works as a nurse."),
    }
    fillers = ["The weather is nice today.", "I watched a movie last night.", "Let's meet for coffee tomorrow.",
               "明天我们去公园散步吧。", "我喜欢听古典音乐。", "The train was late again this morning."]
    index = RecallIndex.for_store(store, use_embedder)
    clock = 0
    for thread in ("t-zh", "t-en", "t-fill"):
        store.memory.create_thread(thread_id=thread, resource_id="u")
    msgs = []
    for mid, (thread, text) in facts.items():
        msgs.append(Message.user(text, id=mid, thread_id=thread, resource_id="u", created_at=T0 + timedelta(seconds=clock)))
        clock += 1
    for i, text in enumerate(fillers):
        msgs.append(Message.user(text, id=f"fill-{i}", thread_id="t-fill", resource_id="u",
                                 created_at=T0 + timedelta(seconds=100 + i)))
    store.memory.save_messages(msgs)
    # One message per thread for the facts, so each passage is the fact alone.
    assert index.index_messages(msgs).ok
    zh = index.search("我对什么过敏？", resource_id="u", mode="hybrid", top_k=3).hits
    assert "zh-fact" in [h.message_id for h in zh]
    en = index.search("我的姐姐住在哪里？", resource_id="u", mode="hybrid", top_k=3).hits
    assert "en-fact" in [h.message_id for h in en]


def test_japanese_keywords_are_found_in_kanji_kana_and_half_width_katakana(store):
    """Keyword recall alone (no model): Japanese has no spaces, so the index must cut it into characters
    and bigrams on both engines; common kana must not drown the rare words once the index is large."""
    from core.embedding import HashingEmbedder

    facts = {
        "ja-meeting": "来週の月曜日に東京で会議があります。",
        "ja-coffee": "私は毎朝コーヒーを飲みます。",
        "ja-allergy": "ｱﾚﾙｷﾞｰがあります: えびとかにはだめです。",  # half-width katakana, as some keyboards type it
        "en-note": "The meeting notes are in the shared folder.",
    }
    fillers = [f"今日は{'晴れ' if i % 2 else '雨'}の日です。{i}番目のメモです。" for i in range(240)]
    store.memory.create_thread(thread_id="t-ja", resource_id="u")
    msgs = [Message.user(text, id=mid, thread_id="t-ja", resource_id="u", created_at=T0 + timedelta(seconds=i))
            for i, (mid, text) in enumerate(facts.items())]
    msgs += [Message.user(text, id=f"fill-{i}", thread_id="t-ja", resource_id="u",
                          created_at=T0 + timedelta(seconds=100 + i)) for i, text in enumerate(fillers)]
    for start in range(0, len(msgs), 100):
        store.memory.save_messages(msgs[start:start + 100])
    index = RecallIndex.for_store(store, HashingEmbedder(dim=64))
    assert index.index_messages(msgs).ok

    def first(query: str) -> str:
        hits = index.search(query, resource_id="u", mode="keyword", top_k=3).hits
        assert hits, query
        return hits[0].message_id

    assert first("東京の会議はいつですか？") == "ja-meeting"  # kanji bigrams, with common kana around them
    assert first("月曜日") == "ja-meeting"
    assert first("コーヒー") == "ja-coffee"  # katakana with the long-vowel mark
    assert first("アレルギー") == "ja-allergy"  # full-width query, half-width text (NFKC on both sides)
    assert first("えび") == "ja-allergy"  # hiragana
    assert first("meeting 会議") in ("ja-meeting", "en-note")


@pytest.mark.slow
def test_use_embeds_the_query_lower_cased_and_cjk_as_typed(store, use_embedder):
    """With USE (the default model) a search embeds its query lower-cased (``Fusion.lower_query``: the
    passages keep their case; measured on LoCoMo, ``core/recall/hybrid.py``); Chinese and Japanese
    queries have no case and are embedded as typed. e5 and every other model embed the query as typed."""
    import numpy as np

    from core.recall import hybrid, search

    store.memory.create_thread(thread_id="t", resource_id="u")
    msg = Message.user("Caroline went to the support group on Friday.", id="m", thread_id="t", resource_id="u",
                       created_at=T0)
    store.memory.save_messages([msg])
    index = RecallIndex.for_store(store, use_embedder)
    assert index.index_messages([msg]).ok

    def vector(text: str) -> np.ndarray:
        return np.asarray(use_embedder.embed([text], kind="query"), dtype=np.float32)[0]

    asked = "When did Caroline go to the LGBTQ support group?"
    for query in (asked, "卡罗琳什么时候去了支持小组？", "キャロラインはいつサポートグループに行きましたか？"):
        for mode in ("vector", "hybrid"):
            run = search.run(index, query, resource_id="u", thread_id=None, top_k=3, mode=mode)
            assert np.array_equal(run.qvec, vector(query.lower())), (query, mode)
    assert not np.array_equal(vector(asked), vector(asked.lower()))  # (so the check above can fail)
    assert index.search(asked, resource_id="u", mode="hybrid", top_k=3).hits[0].message_id == "m"
    assert hybrid.fusion_for(use_embedder.model_id).lower_query
    assert not hybrid.fusion_for("multilingual-e5-small-q4@1571fc98").lower_query
    assert not hybrid.fusion_for("hashing-64").lower_query
