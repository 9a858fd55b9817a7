"""The keyword doc in its FTS5 row (migration ``0031_recall_keyword_rows``, issue 20 item 3b).

A keyword row's rowid is its message's ``mastra_messages`` rowid and its passage hash an ``UNINDEXED``
column; the message, thread and resource are read through the message. An older database is migrated
once, in one transaction, keeping every doc of a stored message with the same text, context, hash and
ranking; a database migrated so and opened by an older build is refused for writes and reads the same
docs through a view. Rows follow their messages whoever deletes them, and a reused rowid never carries
a deleted message's words.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import libsql_experimental as libsql
import pytest

from core import Memory, MemoryOptions
from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import keyword, reindex
from core.recall.schema import KEYWORD_ROWS_MIGRATION
from core.recall.tables import DOCS_TABLE, FTS_TABLE, STATE_TABLE
from core.storage import migrations, open_store, schema
from core.storage.errors import SchemaError

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
CONTENT = '{"format":2,"parts":[{"type":"text","text":"%s"}],"content":"%s"}'
WORDS = ["peanuts", "allergy", "Lyon", "sister", "garden", "violin", "coffee", "train", "winter", "花生"]
# What an older build's keyword search ran: the FTS5 row joined to its doc by the doc's own id.
OLD_SEARCH = (f"SELECT d.message_id, d.thread_id, d.resource_id, -bm25({FTS_TABLE}, 1.0, 0.5) AS s FROM {FTS_TABLE} "
              f"JOIN {DOCS_TABLE} d ON d.doc_id = {FTS_TABLE}.rowid WHERE {FTS_TABLE} MATCH ? ORDER BY s DESC, d.message_id")
QUERIES = ['"peanuts"', '"sister" OR "lyon"', '"garden" OR "violin" OR "coffee"', '"花" OR "生"', '"winter"']


def _older_database(path: Path, n: int = 40) -> Any:
    """A Mastra file with ``n`` messages, migrated up to (not including) ``0031``: the older layout, its
    docs written by ``0004``'s backfill and given hashes."""
    conn = libsql.connect(str(path))
    for ddl in schema.MASTRA_MEMORY_DDL:
        conn.execute(ddl)
    for tid, rid in (("t1", "u1"), ("t2", "u2")):
        conn.execute('INSERT INTO mastra_threads (id, "resourceId", title, "createdAt", "updatedAt") VALUES (?, ?, ?, ?, ?)',
                     (tid, rid, "", "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:00.000Z"))
    for i in range(n):
        text = f"{WORDS[i % len(WORDS)]} and {WORDS[(i * 3 + 1) % len(WORDS)]} number {i}"
        conn.execute('INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
                     "VALUES (?, ?, ?, ?, 'v2', ?, ?)",
                     (f"m{i:02d}", "t1" if i % 3 else "t2", CONTENT % (text, text), "user" if i % 2 else "assistant",
                      (T0 + timedelta(seconds=i)).isoformat().replace("+00:00", "Z"), None if i % 4 == 0 else
                      ("u1" if i % 3 else "u2")))
    conn.commit()
    conn.close()
    store = open_store(path)
    store.db.migrate([name for name in store.db.pending_migrations() if name != KEYWORD_ROWS_MIGRATION])
    with store.db.write() as c:
        c.exec_driver_sql(f"UPDATE {DOCS_TABLE} SET content_hash = 'hash of ' || message_id")
    return store


def _old_rows(store: Any) -> dict[str, tuple[Any, ...]]:
    with store.db.read() as conn:
        return {r[0]: tuple(r[1:]) for r in conn.exec_driver_sql(
            f"SELECT d.message_id, d.thread_id, d.resource_id, f.body, f.context, d.content_hash FROM {DOCS_TABLE} d "
            f"JOIN {FTS_TABLE} f ON f.rowid = d.doc_id")}


def _searches(store: Any, sql: str = OLD_SEARCH) -> list[list[tuple[Any, ...]]]:
    with store.db.read() as conn:
        return [[tuple(r) for r in conn.exec_driver_sql(sql, (q,))] for q in QUERIES]


def _new_searches(store: Any) -> list[list[tuple[Any, ...]]]:
    with store.db.read() as conn:
        return [[(h[0], h[1], h[2], h[3]) for h in keyword.search(conn, q, resource_id=None, thread_id=None, limit=1000,
                                                                 terms=[t for t in q.split(" OR ")])]
                for q in QUERIES]


def _kind(store: Any, name: str) -> str | None:
    with store.db.read() as conn:
        row = conn.exec_driver_sql("SELECT type FROM sqlite_master WHERE name = ?", (name,)).first()
    return None if row is None else str(row[0])


def test_an_older_database_is_migrated_once_keeping_every_doc_and_every_ranking(tmp_path: Path) -> None:
    store = _older_database(tmp_path / "old.db")
    try:
        before, ranked = _old_rows(store), _searches(store)
        assert len(before) == 40 and all(ranked)
        assert store.db.migrate() == [KEYWORD_ROWS_MIGRATION]
        assert store.db.migrate() == []  # once
        assert _kind(store, DOCS_TABLE) == "view"
        with store.db.read() as conn:
            rows = {r[0]: tuple(r[1:]) for r in conn.exec_driver_sql(
                f'SELECT m.id, m.thread_id, coalesce(m."resourceId", t."resourceId"), f.body, f.context, f.content_hash '
                f"FROM {FTS_TABLE} f JOIN mastra_messages m ON m.rowid = f.rowid "
                "LEFT JOIN mastra_threads t ON t.id = m.thread_id")}
            assert conn.exec_driver_sql(f"SELECT count(*) FROM {FTS_TABLE}").scalar() == 40
        assert rows == before  # the same text, context, hash, thread and resource for every message
        # The same hits with the same scores, to the bit: by this version's statement and by an older
        # build's statement reading the view.
        assert _new_searches(store) == ranked
        assert _searches(store) == ranked
    finally:
        store.close()


def test_a_doc_whose_message_was_deleted_before_the_migration_is_dropped_and_its_delete_still_applies(
        tmp_path: Path) -> None:
    store = _older_database(tmp_path / "old.db")
    try:
        with store.db.write() as conn:  # (the older delete trigger queues it and leaves its doc)
            conn.exec_driver_sql("DELETE FROM mastra_messages WHERE id = 'm05'")
        assert "m05" in _old_rows(store)
        store.db.migrate()
        with store.db.read() as conn:
            assert conn.exec_driver_sql(f"SELECT count(*) FROM {FTS_TABLE}").scalar() == 39
            assert "m05" not in {h.message_id for q in QUERIES
                                 for h in keyword.search(conn, q, resource_id=None, thread_id=None, limit=100)}
            assert conn.exec_driver_sql("SELECT op FROM memory_studio_recall_queue WHERE message_id = 'm05'").all() \
                == [("delete",)]
    finally:
        store.close()


def test_a_migration_that_fails_leaves_the_older_layout_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _older_database(tmp_path / "old.db")
    try:
        before, ranked = _old_rows(store), _searches(store)
        real = next(m for m in migrations.MIGRATIONS if m.name == KEYWORD_ROWS_MIGRATION)

        def fails_at_the_end(conn: Any) -> None:
            assert real.run is not None
            real.run(conn)
            raise RuntimeError("disk full")

        broken = [m if m is not real else migrations.Migration(real.name, real.description, real.statements,
                                                                fails_at_the_end, real.postgres)
                  for m in migrations.MIGRATIONS]
        monkeypatch.setattr(migrations, "MIGRATIONS", broken)
        with pytest.raises(RuntimeError, match="disk full"):
            store.db.migrate()
        assert _kind(store, DOCS_TABLE) == "table" and store.db.pending_migrations() == [KEYWORD_ROWS_MIGRATION]
        assert _old_rows(store) == before and _searches(store) == ranked
        monkeypatch.undo()
        assert store.db.migrate() == [KEYWORD_ROWS_MIGRATION]
        assert _new_searches(store) == ranked
    finally:
        store.close()


def test_an_older_build_refuses_to_write_the_migrated_file_and_reads_the_same_docs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _older_database(tmp_path / "old.db")
    store.db.migrate()
    ranked = _new_searches(store)
    store.close()
    older = [m for m in migrations.MIGRATIONS if m.name != KEYWORD_ROWS_MIGRATION]
    monkeypatch.setattr(migrations, "MIGRATIONS", older)  # what a build before this migration knows
    store = open_store(tmp_path / "old.db")
    try:
        assert store.db.unknown_migrations() == [KEYWORD_ROWS_MIGRATION]
        with pytest.raises(SchemaError, match="newer Memory Studio"):
            with store.db.write():
                pass
        assert _searches(store) == ranked  # an older build's statement, through the view
        with store.db.read() as conn:  # an older build's keyword-memory load, through the view
            docs = conn.exec_driver_sql(f"SELECT doc_id, message_id FROM {DOCS_TABLE} ORDER BY doc_id").all()
            assert [r[1] for r in docs] == [f"m{i:02d}" for i in range(40)]
            assert [r[0] for r in docs] == [r[0] for r in conn.exec_driver_sql(
                "SELECT rowid FROM mastra_messages ORDER BY rowid")]
    finally:
        store.close()


# -- the layout at work -----------------------------------------------------------------------------


def _memory(path: Path) -> tuple[Any, Memory]:
    store = open_store(path)
    memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=True), embedder=HashingEmbedder(64))
    memory.create_thread(resource_id="u", thread_id="t")
    return store, memory


def _say(i: int, text: str) -> Message:
    return Message.user(text, id=f"m{i}", thread_id="t", resource_id="u", created_at=T0 + timedelta(seconds=i))


def _hits(store: Any, query: str) -> list[str]:
    index = store.extensions[next(k for k in store.extensions if k.startswith("recall-index:"))]
    with store.db.read() as conn:
        return [h.message_id for h in index.keywords.search(conn, query, resource_id="u", thread_id=None, limit=10)]


def _rewrites(store: Any) -> int:
    with store.db.read() as conn:
        return int(conn.exec_driver_sql(f"SELECT value FROM {STATE_TABLE} WHERE key = 'fts:rewrites'").scalar())


def test_a_message_deleted_by_another_program_takes_its_keyword_row_with_it(tmp_path: Path) -> None:
    store, memory = _memory(tmp_path / "m.db")
    try:
        memory.save_messages([_say(0, "the violin lesson"), _say(1, "violin strings"), _say(2, "a coffee in Lyon")])
        # (m2 through its context, the message before it; the search loads the in-process keyword index)
        assert sorted(_hits(store, "violin")) == ["m0", "m1", "m2"]
        before = _rewrites(store)
        with store.db.write() as conn:  # as another program would, no recall write after it
            conn.exec_driver_sql("DELETE FROM mastra_messages WHERE id = 'm0'")
        assert _rewrites(store) == before + 1
        assert sorted(_hits(store, "violin")) == ["m1", "m2"]
        with store.db.read() as conn:
            assert conn.exec_driver_sql(f"SELECT count(*) FROM {FTS_TABLE}").scalar() == 2
    finally:
        store.close()


def test_a_reused_rowid_never_carries_the_deleted_messages_words(tmp_path: Path) -> None:
    """SQLite hands a deleted top rowid to the next insert: the new message must not be found by the
    deleted one's words, before or after its own indexing."""
    store, memory = _memory(tmp_path / "m.db")
    try:
        memory.save_messages([_say(0, "garden party"), _say(1, "winter train to Lyon")])
        with store.db.write() as conn:
            top = conn.exec_driver_sql("SELECT rowid FROM mastra_messages WHERE id = 'm1'").scalar()
            conn.exec_driver_sql("DELETE FROM mastra_messages WHERE id = 'm1'")
            conn.exec_driver_sql(
                'INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
                "VALUES ('x', 't', ?, 'user', 'v2', ?, 'u')",
                (CONTENT % ("violin strings", "violin strings"), (T0 + timedelta(seconds=5)).isoformat()))
            assert conn.exec_driver_sql("SELECT rowid FROM mastra_messages WHERE id = 'x'").scalar() == top
        assert _hits(store, "winter train") == []
        memory.save_messages([_say(6, "later words")])  # (its drain indexes 'x')
        # ('m6' through its context, 'x')
        assert _hits(store, "winter train") == [] and _hits(store, "violin") == ["x", "m6"]
    finally:
        store.close()


def test_vacuum_keeps_every_keyword_answer(tmp_path: Path) -> None:
    store, memory = _memory(tmp_path / "m.db")
    try:
        memory.save_messages([_say(i, f"{WORDS[i % len(WORDS)]} number {i}") for i in range(60)])
        with store.db.write() as conn:
            conn.exec_driver_sql("DELETE FROM mastra_messages WHERE id IN ('m3', 'm10', 'm33')")
        memory.save_messages([_say(70, "peanuts again")])
        before = [_hits(store, w) for w in WORDS]
        store.db.vacuum()
        assert [_hits(store, w) for w in WORDS] == before
    finally:
        store.close()


def test_a_row_replaced_by_another_program_leaves_an_orphan_that_reindex_removes(tmp_path: Path) -> None:
    store, memory = _memory(tmp_path / "m.db")
    try:
        memory.save_messages([_say(0, "garden party"), _say(1, "winter train")])
        with store.db.write() as conn:  # (no delete trigger fires for a REPLACE)
            conn.exec_driver_sql(
                'INSERT OR REPLACE INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
                "VALUES ('m0', 't', ?, 'user', 'v2', ?, 'u')",
                (CONTENT % ("violin strings", "violin strings"), T0.isoformat()))
        def rowids() -> tuple[set[int], set[int]]:
            with store.db.read() as conn:
                return ({r[0] for r in conn.exec_driver_sql(f"SELECT rowid FROM {FTS_TABLE}")},
                        {r[0] for r in conn.exec_driver_sql("SELECT rowid FROM mastra_messages")})

        rows, messages = rowids()
        assert len(rows - messages) == 1  # the orphan: the replaced row's rowid, no message holds it
        assert _hits(store, "garden") == ["m1"]  # (m1 through its context); the orphan joins no message
        report = reindex(store, HashingEmbedder(64))
        assert report.keyword_docs_dropped >= 1
        assert rowids()[0] == rowids()[1]
        assert "m0" not in _hits(store, "garden") and _hits(store, "violin")[0] == "m0"
    finally:
        store.close()
