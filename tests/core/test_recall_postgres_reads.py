"""Postgres's own reads of a recall search answer what the shared ones answer.

The re-rank's read of its candidates (``pg_order.thread_order``: one ``text[]`` parameter on
psycopg's cursor) equals ``search.thread_order`` for ids and contents of every shape; a ``text[]``
sent as text reads back as the same strings; keyword docs written by the index leave no entries in
the GIN pending list (which made the planner scan every doc); the HNSW settings a search runs with are
the ones it asked for (scopes the server searches: those too large to keep in process); a pooled connection begins its transaction as it is checked out (the check
that it is alive), and one the server closed is replaced; a hybrid search reads the keyword list's
cosines with its vector list, the same values as their own statement; the uncounted terms of a query
are counted in one statement, the same counts as one by one; "why not this message?" ranks a scope of
more vectors than HNSW may list, exactly.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import psycopg
import sqlalchemy as sa
from psycopg import pq

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex, pg_keyword_cache, pg_order, pg_vector_cache
from core.recall import search as pipeline
from core.recall.pg_keywords import GIN_INDEX, PgTermStats
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


def _indexed(store, texts: list[str], dim: int = 16) -> tuple[RecallIndex, list[Message]]:  # type: ignore[no-untyped-def]
    """A recall index (hashing embedder) over thread "t" of resource "u" holding ``texts`` as user
    messages m0, m1, … a minute apart, saved and indexed."""
    index = RecallIndex.for_store(store, HashingEmbedder(dim))
    store.memory.create_thread(thread_id="t", resource_id="u")
    msgs = [Message.user(text, id=f"m{i}", thread_id="t", resource_id="u", created_at=T0 + timedelta(minutes=i))
            for i, text in enumerate(texts)]
    store.memory.save_messages(msgs)
    assert not index.index_messages(msgs).failed
    return index, msgs


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
        index, _ = _indexed(store, [f"garden note {i} about tomatoes" for i in range(300)])
        with store.db.write() as conn:  # pages it had to merge: none left
            assert conn.exec_driver_sql("SELECT gin_clean_pending_list(to_regclass(?))", (GIN_INDEX,)).scalar() == 0
        hits = index.search("tomatoes", resource_id="u", mode="keyword", top_k=5).hits
        assert len(hits) == 5
    finally:
        store.close()


def _on_the_server(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Scopes searched by the server (as those too large to keep in process are), not from memory."""
    monkeypatch.setattr(pg_vector_cache, "MAX_ROWS", 0)
    monkeypatch.setattr(pg_keyword_cache, "MAX_DOCS", 0)


def test_hnsw_settings_are_the_ones_a_search_asks_for(pg_url: str, monkeypatch):  # type: ignore[no-untyped-def]
    _on_the_server(monkeypatch)
    store = open_store(pg_url)
    try:
        index, _ = _indexed(store, [f"message {i}" for i in range(80)])
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


def _statements(store) -> list[str]:
    seen: list[str] = []
    sa.event.listen(store.db.engine, "before_cursor_execute",
                    lambda conn, cur, sql, params, ctx, many: seen.append(sql))
    return seen


def test_a_checked_out_connection_is_begun_and_a_dead_one_replaced(pg_url: str):
    store = open_store(pg_url)
    try:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            with store.db.read() as conn:
                raw = conn.connection.driver_connection
                assert raw.info.transaction_status == pq.TransactionStatus.INTRANS  # before any statement
                pid = raw.info.backend_pid
                # begun, and holding no snapshot (nothing for vacuum to wait for) until a statement runs
                assert admin.execute("SELECT state, backend_xmin FROM pg_stat_activity WHERE pid = %s",
                                     (pid,)).fetchall() == [("idle in transaction", None)]
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))  # the server closes the idle pooled connection
        with store.db.read() as conn:  # replaced at check-out, not failing the read
            assert cursor.scalar(conn, "SELECT pg_backend_pid()") != pid
        with store.db.engine.connect() as conn:  # autocommit (VACUUM) on a connection begun at check-out
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql("VACUUM mastra_messages")
        with store.db.write() as conn:  # and a later check-out of it is a transaction again
            conn.exec_driver_sql("CREATE TEMP TABLE scratch (x int)")
            assert conn.connection.driver_connection.info.transaction_status == pq.TransactionStatus.INTRANS
    finally:
        store.close()


def test_hybrid_reads_the_keyword_cosines_with_its_vector_list(pg_url: str, monkeypatch):  # type: ignore[no-untyped-def]
    _on_the_server(monkeypatch)
    store = open_store(pg_url)
    try:
        index, _ = _indexed(store, [f"note {i}: {('garden', 'tomatoes', '東京の会議', '旅行')[i % 4]} item{i}"
                                    for i in range(200)])
        seen = _statements(store)
        for query in ("tomatoes item7", "東京 会議", "garden"):
            seen.clear()
            with store.db.read() as conn:
                run = pipeline.run(index, query, resource_id="u", thread_id=None, top_k=5, mode="hybrid")
                assert run.keyword and run.cosines  # keyword hits outside the vector list, with cosines
                assert sum("UNION ALL" in s for s in seen if not s.startswith("SELECT 0, pg_snapshot_xmin(")) == 1
                assert not any(s.startswith("SELECT metadata->>'message_id', NULL") for s in seen)  # none of their own
                fresh = index.vector_set(conn, "u", None)  # no list read: the cosines' own statement
                assert fresh.cosines(run.qvec, list(run.cosines)) == run.cosines
        with store.db.read() as conn:  # asked for other ids or another vector: their own statement
            view = index.vector_set(conn, "u", None)
            qvec = index.embedder.embed(["garden"], kind="query")[0]
            index.keywords.search(conn, "garden", resource_id="u", thread_id=None, limit=20)
            view.ranked(qvec, 10, None)
            seen.clear()
            assert view.cosines(qvec, ["m0", "m3"]) == index.vector_set(conn, "u", None).cosines(qvec, ["m0", "m3"])
            assert len(seen) == 2
    finally:
        store.close()


def test_uncounted_terms_of_a_query_are_counted_in_one_statement(pg_url: str):
    store = open_store(pg_url)
    try:
        index, _ = _indexed(store, [f"{('garden', 'tomatoes')[i % 2]} 東京 {i % 3}" for i in range(30)])
        terms = ['"garden"', '"tomato"', '"東 京"', '"1"', '"absent"', '"garden"']
        seen = _statements(store)
        with store.db.read() as conn:
            stats = PgTermStats()
            counts = stats.frequencies(conn, terms)
            assert len(seen) == 1
            assert counts == [stats._frequency_of(conn, t) for t in terms]
            assert counts[4] == 0 and 0 < counts[3] < counts[2] == 30
            seen.clear()
            assert stats.frequencies(conn, terms) == counts and not seen  # kept
    finally:
        store.close()


def test_why_not_ranks_a_scope_larger_than_hnsw_can_list(pg_url: str):
    """"Why not this message?" ranks the whole scope by cosine. Above 500 vectors that is more rows than
    ``hnsw.ef_search`` may ask for (pgvector allows 1,000); the ranking is then an exact scan, and the
    explained message gets its exact rank."""
    from core.recall.explain import explain_message, inspect_search

    store = open_store(pg_url)
    try:
        words = ["apple", "harbour", "violin", "granite", "meadow", "copper", "lantern", "saffron"]
        index, saved = _indexed(store, [f"{words[i % 8]} {words[(i * 3) % 8]} note {i}" for i in range(620)], dim=32)
        ids = [m.id for m in saved]
        ins = inspect_search(index, "violin lantern", resource_id="u", top_k=3)
        hits = {c.message_id for c in ins.hits("hybrid")}
        target = next(m for m in ids if m not in hits)
        why = explain_message(index, target, ins)
        placed = why.placements["vector"]
        assert placed.ranked == 620  # every vector of the scope
        # its exact rank by cosine (among messages of equal cosine, in any order)
        qvec = np.asarray(index.embedder.embed(["violin lantern"], kind="query"), dtype=np.float32)[0]
        with store.db.read() as conn:
            vset = index.vector_set(conn, "u", None)
            assert vset is not None
            cos = vset.cosines(qvec, ids)
        assert len(cos) == 620
        better = sum(1 for c in cos.values() if c > cos[target] + 1e-6)
        tied = sum(1 for c in cos.values() if abs(c - cos[target]) <= 1e-6)
        assert better < placed.rank <= better + tied
    finally:
        store.close()


def test_an_embedder_of_more_dimensions_than_hnsw_takes_still_recalls(pg_url: str) -> None:
    """pgvector refuses an HNSW index above 2,000 dimensions (OpenAI's text-embedding-3-large has 3,072):
    the vector table was never made, every indexed batch logged a traceback and vector recall found
    nothing. Such a table has no HNSW index and is scanned exactly."""
    from core import Memory, MemoryOptions, Message, open_store
    from core.embedding.hashing import HashingEmbedder

    with open_store(pg_url) as store:
        memory = Memory(store, MemoryOptions(semantic_recall={"top_k": 1, "mode": "vector", "message_range": 0}),
                        embedder=HashingEmbedder(2048))
        saved = memory.save_messages([Message.user("I am allergic to peanuts", thread_id="t1", resource_id="ada"),
                                      Message.user("The train leaves at nine", thread_id="t1", resource_id="ada")])
        found = memory.recall(thread_id="t1", resource_id="ada", vector_search_string="allergic to peanuts",
                              last_messages=0)
        assert [h.hit.message_id for h in found.hits] == [saved[0].id]
        with store.db.read() as conn:
            names = {r[0] for r in conn.exec_driver_sql(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'memory_messages_2048'")}
        assert names and "memory_messages_2048_vector_idx" not in names
