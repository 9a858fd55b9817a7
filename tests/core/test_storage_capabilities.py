"""Each backend declares what it can do once; callers read the flags (conventions §20)."""

from __future__ import annotations

import pytest

from core.storage.capabilities import LIBSQL, POSTGRES, capabilities_of

pytestmark = pytest.mark.backends


def test_a_store_declares_its_backends_capabilities(store, backend):
    expected = POSTGRES if backend == "postgres" else LIBSQL
    assert store.capabilities is expected and store.db.capabilities is expected
    with store.db.read() as conn:
        assert capabilities_of(conn) is expected
    assert capabilities_of(store.db.engine) is expected


def test_the_flags_say_what_each_backend_does():
    assert LIBSQL.full_text == "fts5" and LIBSQL.vectors == "blob-matrix"
    assert LIBSQL.serialized_writers and not LIBSQL.advisory_locks and not LIBSQL.traces_in_database
    assert POSTGRES.full_text == "tsvector" and POSTGRES.vectors == "pgvector"
    assert POSTGRES.advisory_locks and not POSTGRES.serialized_writers
    assert POSTGRES.traces_in_database and POSTGRES.native_boolean and not POSTGRES.implicit_rowid


def test_an_unknown_dialect_is_refused_by_name():
    class Fake:
        class dialect:
            name = "oracle"

    with pytest.raises(ValueError, match="oracle"):
        capabilities_of(Fake())  # type: ignore[arg-type]


def test_a_location_says_its_capabilities_before_it_is_opened(db_path, backend):
    from core.storage.paths import resolve_db_path

    expected = POSTGRES if backend == "postgres" else LIBSQL
    location = resolve_db_path(db_path)
    assert location.capabilities is expected
    assert location.capabilities.server == (backend == "postgres")
    assert resolve_db_path(":memory:").capabilities is LIBSQL


def test_the_one_table_existence_check_and_the_table_lists(store):
    from core.storage import catalog

    with store.db.read() as conn:
        assert catalog.has_table(conn, "mastra_threads") and not catalog.has_table(conn, "no_such_table")
        tables = catalog.all_tables(conn)
        assert tables == sorted(tables) and "mastra_messages" in tables
        assert not any(t.startswith("sqlite_") for t in tables)
        assert catalog.table_names(conn, "mastra_threads") == ["mastra_threads"]
        assert catalog.has_user_tables(conn)
        triggers = catalog.triggers(conn)  # our own (the keyword index's, the timestamp mirrors')
        assert triggers and all(table in tables for _name, table in triggers)
        columns = {name: (kind, key) for name, kind, key in catalog.table_columns(conn, "mastra_threads")}
        assert columns["id"][1] and not columns["resourceId"][1] and "TEXT" in columns["resourceId"][0]
    assert store.db.has_table("mastra_threads") and not store.db.has_table("no_such_table")


def test_the_change_fingerprint_moves_with_a_write_and_only_then(store):
    before = store.db.change_fingerprint()
    assert store.db.change_fingerprint() == before  # looking changes nothing
    store.memory.create_thread(thread_id="t-fp", resource_id="r-fp", title="", metadata={})
    assert store.db.change_fingerprint() != before


def test_a_snapshot_sees_one_moment(store):
    count = "SELECT count(*) FROM mastra_threads"
    with store.db.snapshot() as conn:
        assert conn.exec_driver_sql(count).scalar() == 0
        store.memory.create_thread(thread_id="t-later", resource_id="r", title="", metadata={})  # another connection
        assert conn.exec_driver_sql(count).scalar() == 0
    with store.db.read() as conn:
        assert conn.exec_driver_sql(count).scalar() == 1
