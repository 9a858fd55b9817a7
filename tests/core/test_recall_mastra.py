"""A database written by Mastra: its ``memory_messages_384`` index is read, never silently migrated."""

from __future__ import annotations

import json
from pathlib import Path

import libsql_experimental as libsql
import pytest

from core.embedding import HashingEmbedder
from core.messages import Message
from core.storage import open_store, schema
from core.recall import RecallError, RecallIndex, reindex

CONTENT = '{"format":2,"parts":[{"type":"text","text":"%s"}],"content":"%s"}'
ROWS = [("m1", "t1", "user", "I am allergic to peanuts"), ("m2", "t1", "assistant", "Got it, no peanuts"),
        ("m3", "t2", "user", "My sister lives in Lyon")]


def make_mastra_db(path: Path, *, with_vector_idx: bool = False) -> None:
    emb = HashingEmbedder(384)
    conn = libsql.connect(str(path))
    for ddl in schema.MASTRA_MEMORY_DDL:
        conn.execute(ddl)
    for tid in ("t1", "t2"):
        conn.execute(
            'INSERT INTO mastra_threads (id, "resourceId", title, "createdAt", "updatedAt") VALUES (?, ?, ?, ?, ?)',
            (tid, "u1", "", "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:00.000Z"),
        )
    conn.execute(
        "CREATE TABLE memory_messages_384 (id INTEGER PRIMARY KEY, vector_id TEXT UNIQUE NOT NULL, "
        "embedding F32_BLOB(384), metadata TEXT DEFAULT '{}')"
    )
    if with_vector_idx:
        conn.execute("CREATE INDEX memory_messages_384_vector_idx ON memory_messages_384 (libsql_vector_idx(embedding))")
    for i, (mid, tid, role, text) in enumerate(ROWS):
        created = f"2026-01-01T00:00:0{i}.000Z"
        conn.execute(
            'INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
            "VALUES (?, ?, ?, ?, 'v2', ?, 'u1')",
            (mid, tid, CONTENT % (text, text), role, created),
        )
        vec = emb.embed([text])[0]
        meta = {"message_id": mid, "thread_id": tid, "resource_id": "u1", "role": role, "content": text, "created_at": created}
        conn.execute(
            "INSERT INTO memory_messages_384 (vector_id, embedding, metadata) VALUES (?, vector32(?), ?)",
            (f"random-{i}", json.dumps([float(x) for x in vec]), json.dumps(meta)),
        )
    conn.commit()
    conn.close()


@pytest.mark.parametrize("with_vector_idx", [False, True])
def test_mastra_vector_table_is_readable_without_migrating(tmp_path: Path, with_vector_idx: bool):
    path = tmp_path / "mastra.db"
    make_mastra_db(path, with_vector_idx=with_vector_idx)
    store = open_store(path)
    try:
        assert not store.db.owned
        index = RecallIndex.for_store(store, HashingEmbedder(384))
        index.check()  # the table exists: recall can read
        result = index.search("peanuts allergy", resource_id="u1", mode="vector", top_k=3)
        assert result.hits[0].message_id == "m1" and result.hits[0].thread_id == "t1"
        assert "no model id (written by Mastra)" in (result.reason or "")
        kw = index.search("peanuts", resource_id="u1", mode="keyword")
        assert kw.hits == [] and "memory-studio migrate" in (kw.reason or "")
        # Writes would need our columns: refused with the command to run, nothing changed.
        report = index.index_messages([Message.user("new fact", id="m9", thread_id="t1", resource_id="u1")])
        assert "memory-studio migrate" in report.failed["m9"]
        assert "memory_studio_message_fts" not in _tables(path)
    finally:
        store.close()


def test_missing_vector_table_on_foreign_db_fails_at_check(tmp_path: Path):
    path = tmp_path / "mastra.db"
    make_mastra_db(path)
    store = open_store(path)
    try:
        with pytest.raises(RecallError, match="memory-studio migrate"):
            RecallIndex.for_store(store, HashingEmbedder(512)).check()
    finally:
        store.close()


def test_after_explicit_migrate_the_mastra_index_is_adopted_and_reindexed(tmp_path: Path):
    path = tmp_path / "mastra.db"
    make_mastra_db(path)
    store = open_store(path)
    try:
        store.migrate()  # the explicit step; registers the recall tables too (imported above)
        progress: list[tuple[int, int]] = []
        report = reindex(store, HashingEmbedder(384), progress=lambda d, t: progress.append((d, t)))
        assert report.total == 3 and report.indexed == 3 and progress[-1] == (3, 3)
        index = RecallIndex.for_store(store, HashingEmbedder(384))
        hybrid = index.search("Lyon sister", resource_id="u1", mode="hybrid")
        assert hybrid.hits[0].message_id == "m3"
        assert reindex(store, HashingEmbedder(384)).total == 0  # nothing indexed twice
    finally:
        store.close()


def _tables(path: Path) -> set[str]:
    conn = libsql.connect(str(path))
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
    finally:
        conn.close()


def test_a_read_only_foreign_db_is_sent_to_the_migration_not_to_allow_writes(tmp_path: Path):
    """Allowing writes on a Mastra file creates no recall table, so "allow writes" then "migrate" was a
    detour: both a read-only and a writable foreign file get the one path that works."""
    path = tmp_path / "mastra.db"
    make_mastra_db(path)
    for read_only in (True, False):
        store = open_store(path, read_only=read_only, create=False)
        try:
            with pytest.raises(RecallError) as caught:
                RecallIndex.for_store(store, HashingEmbedder(512)).check()
            message = str(caught.value)
            assert "memory-studio migrate" in message and "File > Migrate Database" in message
            assert "Allow" not in message
        finally:
            store.close()
