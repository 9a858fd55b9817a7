"""Postgres's change log (``pg_changes``) and the recall reads it keeps in process.

Two stores on one database stand for two processes. What one writes (saves, edits, deletes, a
truncated table) the other's kept vectors and thread order follow, and they then answer exactly what
reads from scratch answer. The log is read in commit order: a transaction that commits after a later
one is told all the same, an open one only once it commits. Pruned rows make a reader start over. A
vector table whose writes are not logged (made by Mastra before the log) is searched by the server,
until our first write logs it; the migration logs the vector tables already there.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from core import Memory, MemoryOptions
from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex, pg_changes, pg_keywords, pg_order, pg_vector_cache
from core.recall.matrix import VectorSet
from core.recall.pg_changes import LOG_TABLE, Change
from core.recall.pg_schema import KEYWORD_CONFIG
from core.recall.pg_vectors import PgVectorSet
from core.recall.schema import CHANGE_LOG_MIGRATION
from core.storage import Store, open_store

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
WORDS = ("garden", "tomatoes", "Lisbon", "bicycle", "concert", "violin", "harbour")


def _msg(i: int, thread: str = "t", text: str | None = None, **kw: object) -> Message:
    make = Message.user if i % 2 == 0 else Message.assistant
    return make(text or f"{('Caroline', 'Mel')[i % 2]}: note {i} about {WORDS[i % len(WORDS)]}",
                id=f"m{i:03d}", thread_id=thread, resource_id="u", created_at=T0 + timedelta(minutes=i), **kw)


@pytest.fixture
def two(pg_url: str) -> Iterator[tuple[Store, Store]]:
    """Two stores over one fresh database (two processes), with 40 indexed messages in threads t and s."""
    a, b = open_store(pg_url), open_store(pg_url)
    try:
        for t in ("t", "s"):
            b.memory.create_thread(thread_id=t, resource_id="u")
        msgs = [_msg(i, "ts"[i % 2]) for i in range(40)]
        b.memory.save_messages(msgs)
        assert not _index(b).index_messages(msgs).failed
        yield a, b
    finally:
        a.close()
        b.close()


def _index(store: Store) -> RecallIndex:
    return RecallIndex.for_store(store, HashingEmbedder(16))


def _answers(store: Store, query: str, mode: str = "hybrid") -> list[tuple[str, float]]:
    return [(h.message_id, round(h.score, 6)) for h in _index(store).search(query, resource_id="u", top_k=8, mode=mode).hits]  # type: ignore[arg-type]


def _fresh(url: str, query: str, mode: str = "hybrid") -> list[tuple[str, float]]:
    """What a process that kept nothing yet answers."""
    store = open_store(url)
    try:
        return _answers(store, query, mode)
    finally:
        store.close()


QUERIES = ("garden note", "Mel violin", "harbour zebra", "note 41", "Caroline Lisbon bicycle")


def _same_as_fresh(a: Store, url: str) -> None:
    for query in QUERIES:
        for mode in ("vector", "hybrid"):
            assert _answers(a, query, mode) == _fresh(url, query, mode), (query, mode)


def test_kept_vectors_and_order_follow_another_process_writes(two: tuple[Store, Store], pg_url: str) -> None:
    a, b = two
    ia = _index(a)
    with a.db.read() as conn:
        assert isinstance(ia.vector_set(conn, "u", None), VectorSet)  # kept in process
    _same_as_fresh(a, pg_url)
    # Appended by the other process: found by the next search, in place in its thread.
    new = [_msg(i, "t", text=f"Caroline: a zebra at the harbour {i}") for i in (41, 43)]
    new.append(_msg(45, "s", text="Mel: note 45 the harbour zebra again", ))
    b.memory.save_messages(new)
    assert not _index(b).index_messages(new).failed
    assert _answers(a, "harbour zebra", "vector")[0][0] in {"m041", "m043", "m045"}
    _same_as_fresh(a, pg_url)
    # Edited (a new vector and keyword doc), then deleted, by the other process.
    memory_b = Memory(b, MemoryOptions(semantic_recall=True), embedder=HashingEmbedder(16))
    memory_b.edit_message("m010", resource_id="u", text="Caroline: the violin concert is on Friday")
    _same_as_fresh(a, pg_url)
    assert "m010" in [m for m, _ in _answers(a, "violin concert Friday", "vector")][:3]
    memory_b.delete_messages(["m041", "m012"], resource_id="u")
    assert "m041" not in [m for m, _ in _answers(a, "harbour zebra", "hybrid")]
    _same_as_fresh(a, pg_url)


def test_kept_thread_order_answers_what_the_read_answers(two: tuple[Store, Store]) -> None:
    """After appends (also before older messages, and at equal times where ids decide by code point),
    a message of another role, an edit that moves a message and deletes, the kept answers equal ``thread_order``."""
    a, b = two
    ia = _index(a)
    ids = [f"m{i:03d}" for i in range(40)]

    def check() -> None:
        with a.db.read() as conn:
            every = [r[0] for r in conn.exec_driver_sql("SELECT id FROM mastra_messages ORDER BY id")]
            threads = dict(conn.exec_driver_sql("SELECT id, thread_id FROM mastra_messages").all())
            kept = ia.order.read(conn, every, labels=True, threads=lambda: threads)
            assert kept == pg_order.thread_order(conn, every, labels=True)
            assert ia.order.read(conn, every, labels=False, threads=lambda: threads) == pg_order.thread_order(conn, every, labels=False)

    check()
    assert ids  # (the threads are kept now)
    late = T0 + timedelta(minutes=5)
    b.memory.save_messages([
        Message.user("Mel: slipped in early", id="early", thread_id="t", resource_id="u", created_at=T0 - timedelta(days=1)),
        Message.user("Caroline: same time, upper", id="B-tie", thread_id="t", resource_id="u", created_at=late),
        Message.assistant("Mel: same time, lower", id="a-tie", thread_id="t", resource_id="u", created_at=late),
        Message.create("signal", [{"type": "text", "text": "a signal"}], id="signal1", thread_id="t",
                       resource_id="u", created_at=T0 + timedelta(minutes=7)),
        Message.user("a new thread", id="n1", thread_id="s", resource_id="u", created_at=T0 + timedelta(hours=9)),
    ])
    check()
    with b.db.write() as conn:  # moved in time and deleted, as another writer (Mastra) may do
        conn.exec_driver_sql('UPDATE mastra_messages SET "createdAt" = ? WHERE id = ?', ("2026-03-01T08:00:00.000Z", "m020"))
        conn.exec_driver_sql("DELETE FROM mastra_messages WHERE id IN ('m002', 'B-tie')")
    check()


class _Recorder:
    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.resets = 0

    def changed(self, changes: list[Change]) -> None:
        self.changes.extend(changes)

    def reset(self) -> None:
        self.resets += 1


def _doc(conn: sa.Connection, mid: str) -> None:
    conn.exec_driver_sql("INSERT INTO memory_studio_fts_docs (message_id, thread_id, resource_id, terms, keyed_with) "
                         "VALUES (?, 't', 'u', to_tsvector('simple', 'x'), ?)", (mid, KEYWORD_CONFIG))


def _told(a: Store, log: pg_changes.ChangeLog, rec: _Recorder) -> set[str]:
    with a.db.read() as conn:
        assert log.sync(conn)
    out = {m for c in rec.changes if c.source == "docs" for m in c.message_ids or ()}
    rec.changes.clear()
    return out


def _listening(a: Store) -> tuple[pg_changes.ChangeLog, _Recorder]:
    """``a``'s log with a recorder listening, after a first read (which starts listeners over)."""
    log = pg_changes.log_for(a.db)
    rec = _Recorder()
    log.listen(rec)
    _told(a, log, rec)
    rec.resets = 0
    return log, rec


def test_the_log_is_read_in_commit_order(two: tuple[Store, Store]) -> None:
    """A transaction that started first but commits last is told once it commits, and never twice."""
    a, b = two
    log, rec = _listening(a)
    first, second = b.db.engine.connect(), b.db.engine.connect()
    try:
        first.begin()
        _doc(first, "x-first")  # the older transaction id
        second.begin()
        _doc(second, "x-second")
        second.commit()
        assert _told(a, log, rec) == {"x-second"}  # the first is still running
        first.commit()
        assert _told(a, log, rec) == {"x-first"}
        assert _told(a, log, rec) == set()
    finally:
        first.close()
        second.close()
    assert rec.resets == 0


def test_a_reader_behind_pruned_rows_starts_over(two: tuple[Store, Store]) -> None:
    a, b = two
    log, rec = _listening(a)
    with b.db.write() as conn:
        _doc(conn, "x-old")
    with b.db.write() as conn:
        conn.exec_driver_sql(f"UPDATE {LOG_TABLE} SET at = now() - interval '1 hour'")
    with b.db.write() as conn:  # (the prune's horizon is a later transaction's snapshot)
        conn.exec_driver_sql("SELECT memory_studio_recall_log_prune()")
        assert conn.exec_driver_sql(f"SELECT count(*) FROM {LOG_TABLE}").scalar() == 0
    with a.db.read() as conn:
        assert log.sync(conn)
    assert rec.resets == 1 and not rec.changes
    # What was kept is read again: the search still answers what a fresh one does.
    ia = _index(a)
    assert ia.search("garden", resource_id="u", mode="vector").hits


def test_a_truncated_vector_table_is_not_searched_from_memory(two: tuple[Store, Store]) -> None:
    a, b = two
    assert _answers(a, "garden", "vector")
    with b.db.write() as conn:
        conn.exec_driver_sql(f'TRUNCATE "{_index(b).table}"')
    assert _answers(a, "garden", "vector") == []


def test_a_vector_table_without_logged_writes_is_searched_by_the_server(two: tuple[Store, Store], pg_url: str) -> None:
    """A table made by Mastra after the log's migration has no triggers: searched by the server (so
    nothing kept goes stale) until our first write to it logs its writes."""
    a, b = two
    assert _answers(a, "garden", "vector")  # (a keeps the scope)
    table = _index(b).table
    with b.db.write() as conn:
        for op in "iudt":
            conn.exec_driver_sql(f'DROP TRIGGER "{table}_ms_log_{op}" ON "{table}"')
    with a.db.read() as conn:  # what a keeps is let go: later writes would not be told
        assert isinstance(_index(a).vector_set(conn, "u", None), PgVectorSet)
    fresh = open_store(pg_url)
    try:
        index = _index(fresh)
        with fresh.db.read() as conn:
            assert isinstance(index.vector_set(conn, "u", None), PgVectorSet)
        assert index.search("garden", resource_id="u", mode="vector").hits
        msgs = [_msg(50, "t")]
        fresh.memory.save_messages(msgs)
        assert not index.index_messages(msgs).failed
        with fresh.db.read() as conn:
            assert pg_changes.has_log(conn, table)
    finally:
        fresh.close()
    other = open_store(pg_url)
    try:
        with other.db.read() as conn:
            assert isinstance(_index(other).vector_set(conn, "u", None), VectorSet)
    finally:
        other.close()


def test_the_migration_logs_the_vector_tables_already_there(two: tuple[Store, Store], pg_url: str) -> None:
    a, b = two
    table = _index(b).table
    with b.db.write() as conn:  # the database as it was before the log's migration
        for op in "iudt":
            conn.exec_driver_sql(f'DROP TRIGGER "{table}_ms_log_{op}" ON "{table}"')
            conn.exec_driver_sql(f'DROP TRIGGER "mastra_messages_ms_log_{op}" ON mastra_messages')
            conn.exec_driver_sql(f'DROP TRIGGER "memory_studio_fts_docs_ms_log_{op}" ON memory_studio_fts_docs')
        conn.exec_driver_sql(f"DROP TABLE {LOG_TABLE}")
        conn.exec_driver_sql("DELETE FROM memory_studio_migrations WHERE name = ?", (CHANGE_LOG_MIGRATION,))
    a.close()
    b.close()
    again = open_store(pg_url)
    try:
        with again.db.read() as conn:
            assert pg_changes.has_log(conn) and pg_changes.has_log(conn, table)
    finally:
        again.close()


def test_large_scopes_are_searched_by_the_server_with_the_same_answers(two: tuple[Store, Store], pg_url: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    a, _ = two
    kept = {q: _answers(a, q, "vector") for q in QUERIES}
    monkeypatch.setattr(pg_vector_cache, "MAX_ROWS", 10)
    store = open_store(pg_url)
    try:
        with store.db.read() as conn:
            assert isinstance(_index(store).vector_set(conn, "u", None), PgVectorSet)
        for q in QUERIES:  # (HNSW lists these 40 rows exactly; scores agree to the sixth place)
            assert _answers(store, q, "vector") == kept[q]
    finally:
        store.close()


KEYWORD_QUERIES = ("garden note", "Mel", "the and of", "東京の会議", "会議 旅行", "note 41 harbour", "Caroline Lisbon bicycle",
                   "violins concerts", "zzz nothing")
SCOPES = (dict(resource_id="u", thread_id=None), dict(resource_id=None, thread_id="t"), dict(resource_id="u", thread_id="s"))


def _keyword_lists_agree(store: Store) -> None:
    """Every query and scope: the kept keyword list equals the statement's (same ids, ``real`` scores, order)."""
    _keyword_lists_agree_in(store, SCOPES)
    assert _index(store).keywords.kept.status()["keyword_scopes"] == 2  # (resource u, thread t)  # type: ignore[attr-defined]


def _keyword_lists_agree_in(store: Store, scopes: tuple[dict[str, str | None], ...]) -> None:
    index = _index(store)
    assert index.keywords.kept is not None  # type: ignore[attr-defined]
    for query in KEYWORD_QUERIES:
        for scope in scopes:
            for limit in (3, 50):
                with store.db.read() as conn:
                    terms = index.keywords.terms(conn, query)[0]
                    kept = index.keywords.search(conn, query, limit=limit, terms=terms, **scope)  # type: ignore[arg-type]
                    told = pg_keywords.search(conn, query, limit=limit, terms=terms, **scope)  # type: ignore[arg-type]
                assert kept == told, (query, scope, limit)


def test_kept_keyword_lists_answer_what_the_statement_answers(two: tuple[Store, Store]) -> None:
    a, b = two
    b.memory.save_messages([_msg(60, "t", text="Caroline: 東京の会議は月曜日です"),
                            _msg(61, "s", text="Mel: 旅行の会議, and the violins")])
    assert not _index(b).index_messages(list(b.memory.get_messages(["m060", "m061"]))).failed
    _keyword_lists_agree(a)
    new = [_msg(70, "t", text="Mel: the garden note 41 again"), _msg(71, "s", text="Caroline: 会議 in Lisbon")]
    b.memory.save_messages(new)
    assert not _index(b).index_messages(new).failed
    memory_b = Memory(b, MemoryOptions(semantic_recall=True), embedder=HashingEmbedder(16))
    memory_b.edit_message("m004", resource_id="u", text="Caroline: concerts and violins in the garden")
    memory_b.delete_messages(["m006", "m061"], resource_id="u")
    _keyword_lists_agree(a)


def test_a_forgotten_resource_leaves_no_log_row_and_no_kept_copy(two: tuple[Store, Store]) -> None:
    """Forgetting deletes the log's rows naming the resource (its deletes wrote some), so the log cannot
    tell other processes what went: it tells them to start over, and nothing they kept is answered."""
    a, b = two
    for mode in ("vector", "keyword", "hybrid"):
        assert _answers(a, "garden note", mode)
    report = Memory(b).forget_resource("u")
    assert report.complete and report.leftovers == {}
    with b.db.read() as conn:
        assert conn.exec_driver_sql(f"SELECT count(*) FROM {LOG_TABLE}").scalar() == 0
    for mode in ("vector", "keyword", "hybrid"):
        assert _answers(a, "garden note", mode) == [], mode


def test_a_long_query_is_noted_once_when_its_scope_is_kept(two: tuple[Store, Store]) -> None:
    from core.recall import search as pipeline
    from core.recall.text import MAX_QUERY_TERMS

    a, _ = two
    query = " ".join(f"word{i}" for i in range(MAX_QUERY_TERMS + 5))
    run = pipeline.run(_index(a), query, resource_id="u", thread_id=None, top_k=5, mode="hybrid")
    assert sum("keyword terms" in n for n in run.notes) == 1, run.notes


def test_a_search_of_a_kept_scope_is_one_statement_with_its_new_terms_counted(two: tuple[Store, Store]) -> None:
    """The change log's read, the queue's check and the new terms' counts and parses in one statement;
    the lists, cosines and thread order from memory."""
    a, _ = two
    index = _index(a)
    index.search("garden warmup", resource_id="u", mode="hybrid")  # (loads the scope's kept reads)
    seen: list[str] = []
    sa.event.listen(a.db.engine, "before_cursor_execute", lambda conn, cur, sql, params, ctx, many: seen.append(sql))
    for query in ("violin harbour 17", "Caroline bicycle 23", "garden warmup"):
        seen.clear()
        assert index.search(query, resource_id="u", mode="hybrid").hits
        assert len(seen) == 1 and seen[0].startswith("SELECT 0, pg_snapshot_xmin("), (query, seen)


def test_indexes_of_two_models_share_the_kept_keyword_docs_and_threads(two: tuple[Store, Store]) -> None:
    a, _ = two
    first, second = RecallIndex.for_store(a, HashingEmbedder(16)), RecallIndex.for_store(a, HashingEmbedder(32))
    assert first is not second
    assert first.keywords.kept is second.keywords.kept is not None  # type: ignore[attr-defined]
    assert first.order is second.order


def test_kept_scopes_stay_within_their_budget(two: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch) -> None:
    from core.recall import pg_keyword_cache

    a, _ = two
    monkeypatch.setattr(pg_keyword_cache, "MAX_KEPT_DOCS", 30)  # (one scope of the two: 40 docs, then 20)
    monkeypatch.setattr(pg_vector_cache, "MAX_BYTES", 1)
    index = _index(a)
    for scope in (dict(resource_id="u", thread_id=None), dict(resource_id=None, thread_id="t")):
        for mode in ("keyword", "vector"):
            assert index.search("garden note", mode=mode, **scope).hits  # type: ignore[arg-type]
    assert index.keywords.kept.status()["keyword_scopes"] == 1  # type: ignore[attr-defined]
    assert index.vectors.status()["cached_sets"] == 1  # type: ignore[attr-defined]
    _keyword_lists_agree_in(a, SCOPES[:2])


def test_threads_searching_while_another_writes_agree_with_a_fresh_read(two: tuple[Store, Store], pg_url: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """One process's threads search (every mode) while another thread of it writes: no deadlock, no
    error, and afterwards the kept reads answer what a fresh process answers."""
    import threading

    from core.recall import keyword

    monkeypatch.setattr(keyword, "COMMON_SHARE", 1.0)  # (term counts kept a while may differ between processes)
    a, _ = two
    errors: list[BaseException] = []
    done = threading.Event()

    def search() -> None:
        try:
            i = 0
            while not done.is_set():
                for mode in ("vector", "keyword", "hybrid"):
                    _answers(a, QUERIES[i % len(QUERIES)], mode)
                i += 1
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    readers = [threading.Thread(target=search) for _ in range(4)]
    for t in readers:
        t.start()
    memory = Memory(a, MemoryOptions(semantic_recall=True), embedder=HashingEmbedder(16))
    try:
        for b in range(15):
            memory.save_messages([_msg(100 + 2 * b + k, "ts"[b % 2], text=f"Mel: batch {b} harbour zebra {k}") for k in (0, 1)])
            if b % 5 == 4:
                memory.edit_message(f"m{b:03d}", resource_id="u", text=f"Caroline: edited {b} violin garden")
    finally:
        done.set()
        for t in readers:
            t.join(timeout=120)
    assert not errors, errors
    assert not any(t.is_alive() for t in readers)
    _same_as_fresh(a, pg_url)
    for query in QUERIES:
        assert _answers(a, query, "keyword") == _fresh(pg_url, query, "keyword"), query


def test_kept_threads_make_room_for_newly_asked_ones(two: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole threads up to ``MAX_WHOLE_ROWS`` messages in all: a newly asked thread takes the place of the
    least recently asked, and every answer still equals ``thread_order``'s."""
    a, _ = two
    monkeypatch.setattr(pg_order, "MAX_WHOLE_ROWS", 25)  # (threads t and s hold 20 messages each)
    index = _index(a)
    with a.db.read() as conn:
        threads = dict(conn.exec_driver_sql("SELECT id, thread_id FROM mastra_messages").all())
        for thread in ("t", "s", "t"):
            ids = sorted(m for m, t in threads.items() if t == thread)
            assert index.order.read(conn, ids, labels=True, threads=lambda: threads) == \
                pg_order.thread_order(conn, ids, labels=True)
            assert list(index.order._threads) == [thread]  # type: ignore[union-attr]
