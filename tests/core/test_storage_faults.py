"""Faults of the file, the disk and the input each give an error that names the file and says what
to do, never a raw driver error (issue 9, item 15); a file we must not write is not written (item 19).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Iterator

import pytest
import sqlalchemy as sa

from core import Memory, Message, open_store
from core.storage import InvalidArgumentError, StorageError
from core.storage.database import CorruptDatabaseError, DiskFullError, ReadOnlyFileError


def _save(store, *texts: str, thread: str = "t") -> None:
    Memory(store).save_messages([Message.user(t, thread_id=thread, resource_id="r") for t in texts])


# -- bad input ------------------------------------------------------------------------------------

def test_a_lone_surrogate_is_refused_by_name_before_anything_is_written(store):
    good = Message.user("fine", thread_id="t", resource_id="r")
    bad = Message.user("broken \ud800 text", id="m-bad", thread_id="t", resource_id="r")
    with pytest.raises(InvalidArgumentError, match=r"m-bad.*surrogate.*U\+D800") as info:
        Memory(store).save_messages([good, bad])
    assert "UTF-8" in str(info.value)
    assert store.memory.get_thread("t") is None  # nothing of the batch was written
    with pytest.raises(InvalidArgumentError, match="title.*surrogate"):
        Memory(store).create_thread(resource_id="r", thread_id="t2", title="x\udc80")
    with pytest.raises(InvalidArgumentError, match="metadata.*surrogate"):
        Memory(store).create_thread(resource_id="r", thread_id="t3", metadata={"k": "\ud83d"})


# -- the disk -------------------------------------------------------------------------------------

def _limit_pages(store, extra: int) -> None:
    """A full disk, reproducibly: SQLite's own page limit fails writes with SQLITE_FULL."""
    with store.db.read() as conn:
        pages = int(conn.exec_driver_sql("PRAGMA page_count").scalar())

    def on_connect(dbapi_conn, _record) -> None:
        dbapi_conn.cursor().execute(f"PRAGMA max_page_count = {pages + extra}")

    sa.event.listen(store.db.engine, "connect", on_connect)
    store.db.engine.dispose()


def test_a_full_disk_is_a_clear_error_and_loses_nothing_committed(store, db_path):
    _save(store, "kept")
    _limit_pages(store, 1)
    with pytest.raises(DiskFullError) as info:
        _save(store, "x" * 200_000)
    text = str(info.value)
    assert str(db_path) in text and "full" in text and "free" in text.lower()
    assert isinstance(info.value, StorageError)
    assert [m.text for m in Memory(store).recall(thread_id="t").messages] == ["kept"]


def test_a_corrupt_data_page_is_a_clear_error_naming_the_file(db_path):
    with open_store(db_path) as store:
        _save(store, *[f"message {i} " + "words " * 200 for i in range(60)])
        with store.db.read() as conn:
            page = int(conn.exec_driver_sql("PRAGMA page_size").scalar())
            root = int(conn.exec_driver_sql(
                "SELECT rootpage FROM sqlite_master WHERE name = 'mastra_messages'").scalar())
    with open(db_path, "r+b") as fh:  # overwrite the messages table's root page with garbage
        fh.seek((root - 1) * page)
        fh.write(b"\xa5" * page)
    with open_store(db_path) as store:
        with pytest.raises(CorruptDatabaseError) as info:
            Memory(store).recall(thread_id="t")
    text = str(info.value)
    assert str(db_path) in text and "damaged" in text and ".recover" in text


# -- permissions (root ignores them, so the probe drops to "nobody" in a child process) ------------

PROBE = """
import json, os, sys
from core import Memory, Message, open_store
import core.recall, core.processors, core.storage.database  # imported before privileges are dropped
if os.geteuid() == 0:
    os.setgid(65534)
    os.setuid(65534)
out = {}
try:
    with open_store(sys.argv[1], read_only=sys.argv[2] == "ro", create=False) as store:
        Memory(store).save_messages([Message.user("more", thread_id="t", resource_id="r")])
    out["ok"] = True
except BaseException as exc:
    out["type"] = type(exc).__name__
    out["mro"] = [k.__name__ for k in type(exc).__mro__]
    out["text"] = str(exc)
print(json.dumps(out))
"""


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    # Outside pytest's private tmp folder, so the unprivileged child can reach it.
    folder = Path(tempfile.mkdtemp(prefix="ms-perm-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for path in folder.rglob("*"):
            path.chmod(0o777) if path.is_dir() else None
        shutil.rmtree(folder, ignore_errors=True)


def _probe(path: Path, mode: str = "rw") -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE), str(path), mode],
                          capture_output=True, text=True, cwd=path.parent.parent, timeout=120)
    assert done.stdout.strip(), done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _seed(path: Path) -> None:
    with open_store(path) as store:
        _save(store, "first")


def test_a_read_only_file_opened_for_writing_names_the_file(shared_dir):
    folder = shared_dir / "data"
    folder.mkdir()
    folder.chmod(0o777)
    path = folder / "memory.db"
    _seed(path)
    path.chmod(0o444)
    result = _probe(path)
    assert result.get("type") == "ReadOnlyFileError", result
    assert "StorageError" in result["mro"]
    assert str(path) in result["text"] and "read-only" in result["text"] and "permission" in result["text"]


def test_a_read_only_folder_names_the_folder(shared_dir):
    folder = shared_dir / "data"
    folder.mkdir()
    path = folder / "memory.db"
    _seed(path)
    path.chmod(0o666)
    folder.chmod(0o555)
    for mode in ("rw", "ro"):
        result = _probe(path, mode)
        assert result.get("type") in ("ReadOnlyFileError", "DatabaseOpenError"), result
        assert "StorageError" in result["mro"]
        assert str(folder) in result["text"] and "-wal" in result["text"] and "writable" in result["text"]


# -- item 19: a file we must not write is not written at all ---------------------------------------

def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_a_newer_schema_file_is_byte_identical_after_open(tmp_path):
    path = tmp_path / "newer.db"
    with open_store(path) as store:
        _save(store, "hello")
        with store.db.write() as conn:
            conn.exec_driver_sql(
                "INSERT INTO memory_studio_migrations (name, \"appliedAt\") VALUES ('9999_future', 'x')")
            conn.exec_driver_sql("PRAGMA journal_mode = DELETE")
    with open_store(path) as store:  # back to a rollback journal, as a newer version might leave it
        with store.db.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode = DELETE")
    before = _digest(tmp_path)
    assert list(before) == ["newer.db"]
    with open_store(path) as store:
        memory = Memory(store)
        assert [m.text for m in memory.recall(thread_id="t").messages] == ["hello"]
        memory.list_threads()
        with pytest.raises(StorageError, match="newer"):
            _save(store, "refused")
    assert _digest(tmp_path) == before


def test_reading_a_file_without_memory_tables_says_what_the_file_is(tmp_path):
    """``open_store`` opens a SQLite file of another program (it is not migrated: not ours) and an empty file
    read-only; the first read ended in the driver's "no such table: mastra_threads". On Postgres that was
    already the command line's sentence (``pg.database._no_memory_tables``)."""
    import sqlite3

    from core.storage import SchemaError

    app = tmp_path / "app.db"
    conn = sqlite3.connect(app)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.commit()
    conn.close()
    empty = tmp_path / "empty.db"
    empty.touch()
    before = _digest(tmp_path)
    for path, read_only, says in ((app, False, "has no memory tables"), (app, True, "has no memory tables"),
                                  (empty, True, r"has no tables yet \(an empty database\)")):
        with open_store(path, read_only=read_only, create=False) as store:
            with pytest.raises(SchemaError, match=says) as info:
                Memory(store).list_threads(resource_id="r")
        assert str(info.value).startswith(str(path)) and "no such table" not in str(info.value)
    assert _digest(tmp_path) == before
    with open_store(app, create=False) as store:  # migrated on request: a memory database from then on
        store.migrate()
        assert Memory(store).list_threads(resource_id="r").threads == []


def test_looking_at_a_file_whose_writer_ended_without_closing_changes_none_of_its_bytes(tmp_path: Path) -> None:
    """A writer that ends without closing (killed, or ``os._exit``) leaves its changes in the -wal. Opening
    the file read-only, reading and closing must leave the file and its -wal byte for byte as they were:
    the last connection to close would otherwise copy the -wal into the file and delete it. The changes
    are read all the same; a file without such a -wal leaves its folder as it found it."""
    db = tmp_path / "memory.db"
    writer = textwrap.dedent(f"""
        import os
        from core import Memory, Message, open_store
        store = open_store({str(db)!r})
        Memory(store).save_messages([Message.user(f"note {{i}}", thread_id="t", resource_id="r") for i in range(40)])
        os._exit(0)  # no close: the changes stay in the -wal
    """)
    done = subprocess.run([sys.executable, "-c", writer], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    wal = db.with_name(db.name + "-wal")
    assert wal.stat().st_size > 0

    def data() -> dict[str, bytes]:  # (the -shm is SQLite's index of the -wal, rebuilt by any reader)
        return {p.name: p.read_bytes() for p in (db, wal) if p.exists()}

    before = data()
    with open_store(db, read_only=True) as store:
        assert len(store.memory.list_messages_page("t", 0, 100)) == 40
    assert data() == before

    clean = tmp_path / "clean"
    clean.mkdir()
    with open_store(clean / "memory.db") as store:
        Memory(store).save_messages([Message.user("hello", thread_id="t", resource_id="r")])
    files = sorted(p.name for p in clean.iterdir())
    with open_store(clean / "memory.db", read_only=True) as store:
        assert len(store.memory.list_messages_page("t", 0, 10)) == 1
    assert sorted(p.name for p in clean.iterdir()) == files
