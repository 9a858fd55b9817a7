"""One search pipeline on both backends: the playground's inspection (core/recall/explain.py) shows
the lists, terms and hits the search itself used, on libSQL and on Postgres alike."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex
from core.recall.explain import explain_message, inspect_search
from core.recall.keyword import Fts5Keywords
from core.recall.matrix_vectors import MatrixVectors
from core.recall.pg_keywords import TsvectorKeywords
from core.recall.pg_vectors import PgVectors

pytestmark = pytest.mark.backends

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def big_index(store, n: int = 300) -> RecallIndex:
    texts = [f"hello there friend number {i}" for i in range(n)]
    texts[10] = "hello, my zebra is called Stripes"
    texts[20] = "hello, the zebra crossing near the school"
    store.memory.create_thread(thread_id="t", resource_id="u")
    msgs = [(Message.user if i % 2 == 0 else Message.assistant)(
        text, id=f"t-{i}", thread_id="t", resource_id="u", created_at=T0 + timedelta(seconds=i))
        for i, text in enumerate(texts)]
    store.memory.save_messages(msgs)
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    assert index.index_messages(msgs).ok
    return index


def test_backends_are_chosen_by_what_the_database_can_do(store):
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    caps = store.capabilities
    assert isinstance(index.keywords, Fts5Keywords if caps.full_text == "fts5" else TsvectorKeywords)
    assert isinstance(index.vectors, MatrixVectors if caps.vectors == "blob-matrix" else PgVectors)
    assert type(index) is RecallIndex


def test_the_inspection_shows_the_search_s_terms_lists_and_hits(store):
    index = big_index(store)
    query = "hello zebra stripes"
    ins = inspect_search(index, query, resource_id="u", top_k=4, before=0, after=0)
    # "hello" is in every message: dropped by the search, and the inspection says so on both backends.
    assert ins.dropped_terms == ["hello"] and ins.terms == ["zebra", "stripes"]
    for mode in ("vector", "keyword", "hybrid"):
        found = index.search(query, resource_id="u", top_k=4, mode=mode).hits
        assert [c.message_id for c in ins.hits(mode)] == [h.message_id for h in found], mode
    e = explain_message(index, "t-5", ins)
    assert e.placements["keyword"].status == "no-match" and "hello dropped as very common" in e.placements["keyword"].why


def test_a_nul_character_in_a_message_separates_words_for_keywords(store):
    """A NUL in a message's text is a word break for the keyword index on both backends: libSQL's
    driver cuts a text value at its first NUL when read back, and Postgres refuses NUL in text, so the
    words after it would be lost (libSQL) or the message left unindexed (Postgres)."""
    T = datetime(2026, 3, 1, tzinfo=timezone.utc)
    store.memory.create_thread(thread_id="t", resource_id="u")
    msgs = [Message.user("alpha\x00omega zebra", id="m0", thread_id="t", resource_id="u", created_at=T),
            Message.assistant("nothing here", id="m1", thread_id="t", resource_id="u",
                              created_at=T + timedelta(seconds=1))]
    store.memory.save_messages(msgs)
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    report = index.index_messages(msgs)
    assert not report.failed
    for word in ("alpha", "omega", "zebra"):
        hits = index.search(word, resource_id="u", mode="keyword").hits
        assert hits and hits[0].message_id == "m0", word
