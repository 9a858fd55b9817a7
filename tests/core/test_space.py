"""Space comes back: ``vacuum`` reclaims what deletes freed, and a deleted thread takes its working-memory
history with it (issue 9, item 20)."""

from __future__ import annotations

import io

import pytest

from core import Memory, MemoryOptions, Message, ReadOnlyError, open_store
from core.cli import main as cli_main


def _fill(store, thread: str, n: int = 400) -> None:
    Memory(store).save_messages(
        [Message.user(f"{i} " + "lorem ipsum dolor " * 40, thread_id=thread, resource_id="r") for i in range(n)]
    )


def _size(path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.suffix != ".duckdb")


def test_vacuum_gives_back_the_space_of_deleted_threads(store, db_path):
    _fill(store, "big")
    _fill(store, "kept", 10)
    Memory(store).delete_thread("big")
    before = _size(db_path)
    reclaimed = store.vacuum()
    after = _size(db_path)
    assert reclaimed > 200_000 and before - after == reclaimed
    assert [t.id for t in Memory(store).list_threads()] == ["kept"]
    assert len(Memory(store).recall(thread_id="kept", last_messages=100).messages) == 10
    assert store.vacuum() < 50_000  # nothing more to give back


def test_vacuum_refuses_a_read_only_store(db_path):
    with open_store(db_path) as s:
        _fill(s, "t", 2)
    with open_store(db_path, read_only=True) as ro:
        with pytest.raises(ReadOnlyError):
            ro.vacuum()


def test_vacuum_command(db_path):
    with open_store(db_path) as s:
        _fill(s, "big")
        Memory(s).delete_thread("big")
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["vacuum", "--db", str(db_path)], out=out, err=err) == 0, err.getvalue()
    assert "reclaimed" in out.getvalue() and str(db_path) in out.getvalue()


def test_deleting_a_thread_deletes_its_working_memory_history(store):
    thread_wm = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "thread"}))
    resource_wm = Memory(store, MemoryOptions(working_memory={"enabled": True}))
    for tid in ("t1", "t2"):
        thread_wm.create_thread(resource_id="r", thread_id=tid)
        thread_wm.update_working_memory(thread_id=tid, working_memory=f"# {tid} v1")
        thread_wm.update_working_memory(thread_id=tid, working_memory=f"# {tid} v2")
    resource_wm.update_working_memory(resource_id="r", working_memory="# resource")
    service = thread_wm.working_memory_service
    assert len(service.versions("thread", "t1")) == 2
    thread_wm.delete_thread("t1")
    assert service.versions("thread", "t1") == []
    assert len(service.versions("thread", "t2")) == 2
    assert len(service.versions("resource", "r")) == 1


def _memory_tables_bytes(store) -> int:  # type: ignore[no-untyped-def]
    with store.db.read() as conn:
        return int(conn.exec_driver_sql(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c WHERE c.relkind = 'r' "
            "AND pg_table_is_visible(c.oid) AND (c.relname LIKE 'mastra\\_%' OR c.relname LIKE 'memory\\_%')").scalar())


def test_vacuum_gives_back_the_space_of_deleted_threads_on_postgres(pg_url: str) -> None:
    # Postgres's vacuum returned 0 and did nothing (there is no file), while forget's note told the user to
    # run it to drop the deleted rows' bytes, which stay in the tables' pages until a rewrite.
    with open_store(pg_url) as store:
        _fill(store, "big")
        _fill(store, "kept", 10)
        Memory(store).delete_thread("big")
        before = _memory_tables_bytes(store)
        reclaimed = store.vacuum()
        assert reclaimed > 200_000 and before - _memory_tables_bytes(store) == reclaimed
        assert [t.id for t in Memory(store).list_threads()] == ["kept"]
        assert len(Memory(store).recall(thread_id="kept", last_messages=100).messages) == 10
        assert store.vacuum() < 50_000  # nothing more to give back
    with open_store(pg_url, read_only=True) as ro:
        with pytest.raises(ReadOnlyError):
            ro.vacuum()


def test_forget_and_vacuum_on_postgres_speak_of_its_tables_not_a_file(pg_url: str) -> None:
    with open_store(pg_url) as s:
        Memory(s).save_messages([Message.user("my address is …", thread_id="t", resource_id="ada@example.com")])
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["forget", "--db", pg_url, "--resource", "ada@example.com", "--yes", "--vacuum"],
                    out=out, err=err) == 0, err.getvalue()
    text = out.getvalue()
    assert "deleted rows keep their bytes in the tables' pages on the server until they are vacuumed" in text
    assert "file" not in text.lower()
    assert "vacuumed: " in text and "MB from the database (its traces included)" in text
