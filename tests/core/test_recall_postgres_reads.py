"""Postgres's own reads of a recall search answer what the shared ones answer.

The re-rank's read of its candidates (``pg_order.thread_order``: one ``text[]`` parameter on
psycopg's cursor) equals ``search.thread_order`` for ids and contents of every shape; a ``text[]``
sent as text reads back as the same strings; keyword docs written by the index leave no entries in
the GIN pending list (which made the planner scan every doc); the HNSW settings a search runs with are
the ones it asked for.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex, pg_order
from core.recall import search as pipeline
from core.recall.pg_keywords import GIN_INDEX
from core.storage import open_store
from core.storage.pg import cursor

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
ODD_IDS = ['plain', 'with "quotes"', "back\\slash", "comma,brace{}", "space and NULL", "NULL", "", "日本語",
           "quote' single", "tail\\"]


def _messages() -> list[Message]:
    out = []
    for i, mid in enumerate(ODD_IDS):
        thread = "a" if i % 3 else "b"
        make = Message.user if i % 2 == 0 else Message.assistant
        text = f"{('Caroline', 'Mel')[i % 2]}: line {i}" if i % 4 else f"no label {i}"
        out.append(make(text, id=mid or "empty-id", thread_id=thread, resource_id="u",
                        created_at=T0 + timedelta(minutes=10 * (i // 2))))  # pairs share a time: ties by id
    return out


def test_thread_order_equals_the_shared_read(pg_url: str):
    store = open_store(pg_url)
    try:
        store.memory.create_thread(thread_id="a", resource_id="u")
        store.memory.create_thread(thread_id="b", resource_id="u")
        msgs = _messages()
        store.memory.save_messages(msgs)
        with store.db.write() as conn:  # a plain-text content and a malformed one, as other writers leave
            conn.exec_driver_sql("UPDATE mastra_messages SET content = 'Mel: plain text' WHERE id = ?", (msgs[1].id,))
            conn.exec_driver_sql("UPDATE mastra_messages SET content = '{broken' WHERE id = ?", (msgs[2].id,))
        ids = [m.id for m in msgs] + ["not-stored"]
        with store.db.read() as conn:
            for labels in (True, False):
                keys_ours: dict[str, tuple[object, object]] = {}
                keys_shared: dict[str, tuple[object, object]] = {}
                ours = pg_order.thread_order(conn, ids, labels=labels, keys=keys_ours)
                shared = pipeline.thread_order(conn, ids, labels=labels, keys=keys_shared)
                assert ours == shared and keys_ours == keys_shared
                assert len(ours) == len(msgs) and any(nxt is not None for nxt, _, _ in ours.values())
            assert pg_order.thread_order(conn, [], labels=True) == {}
            assert RecallIndex.for_store(store, HashingEmbedder(16)).order.read(conn, ids, labels=True) == \
                pipeline.thread_order(conn, ids, labels=True)
    finally:
        store.close()


def test_text_arrays_read_back_as_the_same_strings(pg_url: str):
    store = open_store(pg_url)
    try:
        with store.db.read() as conn:
            assert cursor.scalar(conn, "SELECT CAST(? AS text[])", (pg_order.text_array(ODD_IDS),)) == ODD_IDS
            assert cursor.scalar(conn, "SELECT CAST(? AS text[])", (pg_order.text_array([]),)) == []
    finally:
        store.close()


def test_written_keyword_docs_leave_no_pending_gin_entries(pg_url: str):
    store = open_store(pg_url)
    try:
        index = RecallIndex.for_store(store, HashingEmbedder(16))
        store.memory.create_thread(thread_id="t", resource_id="u")
        msgs = [Message.user(f"garden note {i} about tomatoes", id=f"m{i}", thread_id="t", resource_id="u",
                             created_at=T0 + timedelta(minutes=i)) for i in range(300)]
        store.memory.save_messages(msgs)
        assert not index.index_messages(msgs).failed
        with store.db.write() as conn:  # pages it had to merge: none left
            assert conn.exec_driver_sql("SELECT gin_clean_pending_list(to_regclass(?))", (GIN_INDEX,)).scalar() == 0
        hits = index.search("tomatoes", resource_id="u", mode="keyword", top_k=5).hits
        assert len(hits) == 5
    finally:
        store.close()


def test_hnsw_settings_are_the_ones_a_search_asks_for(pg_url: str):
    store = open_store(pg_url)
    try:
        index = RecallIndex.for_store(store, HashingEmbedder(16))
        store.memory.create_thread(thread_id="t", resource_id="u")
        msgs = [Message.user(f"message {i}", id=f"m{i}", thread_id="t", resource_id="u",
                             created_at=T0 + timedelta(minutes=i)) for i in range(80)]
        store.memory.save_messages(msgs)
        index.index_messages(msgs)
        qvec = index.embedder.embed(["message 3"], kind="query")[0]
        setting = "SELECT current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan')"
        with store.db.read() as conn:
            view = index.vector_set(conn, "u", None)
            assert view is not None
            assert len(view.ranked(qvec, 50, None)) == 50  # the depth every connection is set up for
            assert cursor.rows(conn, setting) == [("100", "relaxed_order")]
            assert len(view.ranked(qvec, 70, None)) == 70  # another depth: set for this transaction
            assert cursor.rows(conn, setting) == [("140", "relaxed_order")]
            view.ranked(qvec, 50, None)  # back to the connection's depth in the same transaction
            assert cursor.rows(conn, setting) == [("100", "relaxed_order")]
        with store.db.read() as conn:
            assert cursor.rows(conn, setting) == [("100", "relaxed_order")]
    finally:
        store.close()
