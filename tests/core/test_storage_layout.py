"""Storage speaks Mastra's layout, is path-anchored, and never migrates a foreign database silently."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import libsql_experimental as libsql
import pytest
import sqlalchemy as sa

from core import Memory, MemoryOptions, Message, open_store
from core.storage import DatabaseOpenError, ReadOnlyError
from core.storage.paths import DatabaseLocationError, resolve_db_path

MASTRA_DDL = [
    'CREATE TABLE mastra_threads ("id" TEXT NOT NULL PRIMARY KEY, "resourceId" TEXT NOT NULL, "title" TEXT NOT NULL, '
    '"metadata" TEXT, "createdAt" TEXT NOT NULL, "updatedAt" TEXT NOT NULL)',
    'CREATE TABLE mastra_messages ("id" TEXT NOT NULL PRIMARY KEY, "thread_id" TEXT NOT NULL, "content" TEXT NOT NULL, '
    '"role" TEXT NOT NULL, "type" TEXT NOT NULL, "createdAt" TEXT NOT NULL, "resourceId" TEXT)',
    'CREATE TABLE mastra_resources ("id" TEXT NOT NULL PRIMARY KEY, "workingMemory" TEXT, "metadata" TEXT, '
    '"createdAt" TEXT NOT NULL, "updatedAt" TEXT NOT NULL)',
]


def make_mastra_db(path: Path) -> None:
    """A database shaped exactly as Mastra's LibSQLStore writes it, metadata as JSONB blobs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = libsql.connect(str(path))
    for ddl in MASTRA_DDL:
        conn.execute(ddl)
    conn.execute(
        "INSERT INTO mastra_threads VALUES (?, ?, ?, jsonb(?), ?, ?)",
        ("mt1", "user-1", "From Mastra", json.dumps({"workingMemory": "# Notes\n- a", "custom": True}),
         "2025-01-02T03:04:05.000Z", "2025-01-02T03:04:06.000Z"),
    )
    rows = [
        ("m1", "mt1", json.dumps({"format": 2, "parts": [{"type": "text", "text": "My name is Ada",
                                                          "createdAt": 1795973922787}], "content": "My name is Ada"}),
         "user", "v2", "2025-01-02T03:04:05.100Z", "user-1"),
        ("m2", "mt1", json.dumps({"format": 2, "parts": [{"type": "step-start", "model": "mock/mock-model"},
                                                         {"type": "text", "text": "Got it"}],
                                  "metadata": {"modelId": "mock-model"}, "content": "Got it"}),
         "assistant", "v2", "2025-01-02T03:04:05.200Z", "user-1"),
        ("m3", "mt1", "plain legacy text", "user", "v1", "2025-01-02T03:04:05.300Z", None),
    ]
    conn.executemany("INSERT INTO mastra_messages VALUES (?,?,?,?,?,?,?)", rows)
    conn.execute(
        "INSERT INTO mastra_resources VALUES (?, ?, jsonb(?), ?, ?)",
        ("user-1", "# User\n- Name: Ada", json.dumps({"plan": "pro"}), "2025-01-02T03:04:05.000Z",
         "2025-01-02T03:04:05.000Z"),
    )
    conn.commit()


def table_sql(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        return {name: sql for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()


def test_tables_follow_mastra_layout(store, db_path):
    sql = table_sql(db_path)
    for name in ("mastra_threads", "mastra_messages", "mastra_resources", "mastra_observational_memory"):
        assert name in sql
    assert '"resourceId" TEXT NOT NULL' in sql["mastra_threads"]
    assert '"thread_id" TEXT NOT NULL' in sql["mastra_messages"]
    assert '"workingMemory" TEXT' in sql["mastra_resources"]


def test_written_rows_use_mastra_encodings(store, db_path):
    mem = Memory(store)
    mem.create_thread(resource_id="u1", thread_id="t1", metadata={"k": 1})
    mem.save_messages([Message.user("hello", thread_id="t1", resource_id="u1")])
    conn = sqlite3.connect(db_path)
    thread = conn.execute('SELECT title, metadata, typeof(metadata), "createdAt" FROM mastra_threads').fetchone()
    msg = conn.execute('SELECT content, type, role, "createdAt", "resourceId" FROM mastra_messages').fetchone()
    conn.close()
    assert thread[0] == "" and json.loads(thread[1]) == {"k": 1} and thread[2] == "text"
    assert len(thread[3]) == 24 and thread[3].endswith("Z") and thread[3][19] == "."
    content = json.loads(msg[0])
    assert content["format"] == 2 and content["parts"] == [{"type": "text", "text": "hello"}]
    assert content["content"] == "hello"
    assert msg[1] == "v2" and msg[2] == "user" and msg[4] == "u1" and msg[3].endswith("Z")


def test_thread_without_metadata_stores_null(store, db_path):
    Memory(store).create_thread(resource_id="u1", thread_id="t1")
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT metadata FROM mastra_threads").fetchone()[0] is None
    conn.close()


def test_mastra_written_database_reads_correctly_and_is_not_migrated(tmp_path):
    path = tmp_path / "mastra.db"
    make_mastra_db(path)
    before = table_sql(path)
    store = open_store(path)
    try:
        assert not store.db.owned
        assert "0003_studio_tables" in store.pending_migrations()
        assert table_sql(path) == before  # opening changed no schema
        mem = Memory(store, MemoryOptions(working_memory={"enabled": True}))
        thread = mem.get_thread("mt1")
        assert thread is not None and thread.metadata == {"workingMemory": "# Notes\n- a", "custom": True}
        msgs = mem.recall(thread_id="mt1", resource_id="user-1").messages
        assert [m.text for m in msgs] == ["My name is Ada", "Got it", "plain legacy text"]
        assert msgs[1].parts[0]["type"] == "step-start"
        assert store.memory.get_resource("user-1").metadata == {"plan": "pro"}
        assert mem.get_working_memory(resource_id="user-1") == "# User\n- Name: Ada"
        # Writing our rows into Mastra's tables works without our extra tables.
        mem.save_messages([Message.user("still here", thread_id="mt1", resource_id="user-1")])
        assert "memory_studio_migrations" not in table_sql(path)
        # Migration only on an explicit call.
        applied = store.migrate()
        assert "0003_studio_tables" in applied and store.pending_migrations() == []
    finally:
        store.close()


def test_malformed_content_json_is_skipped_with_a_clear_report(store, db_path):
    # Issue 17 item 4: one bad row never breaks a thread; reading skips it and says why.
    Memory(store).create_thread(resource_id="u1", thread_id="t1")
    conn = sqlite3.connect(db_path)
    conn.execute(
        "INSERT INTO mastra_messages VALUES ('bad', 't1', '{\"format\": 2, \"parts\": [', 'user', 'v2', "
        "'2025-01-01T00:00:00.000Z', 'u1')"
    )
    conn.commit()
    conn.close()
    result = Memory(store).recall(thread_id="t1", resource_id="u1")
    assert result.messages == [] and [u.id for u in result.unreadable] == ["bad"]
    assert "Stored message bad has malformed content JSON" in result.unreadable[0].error


def test_resolution_order(tmp_path):
    project = tmp_path / "proj"
    (project / "src" / "deep").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname='x'\n")
    deep = project / "src" / "deep"
    explicit = resolve_db_path(str(tmp_path / "x.db"), env={"MEMORY_STUDIO_DB": "/nowhere/y.db"}, cwd=deep)
    assert explicit.path == tmp_path / "x.db" and explicit.how == "explicit"
    assert resolve_db_path("file:rel.db", env={}, cwd=deep).path == deep / "rel.db"
    from_env = resolve_db_path(None, env={"MEMORY_STUDIO_DB": str(tmp_path / "env.db")}, cwd=deep)
    assert from_env.path == tmp_path / "env.db" and from_env.how == "environment"
    anchored = resolve_db_path(None, env={}, cwd=deep)
    assert anchored.path == project / ".temp" / "memory.db" and anchored.how == "project"
    # Two processes started in different folders of one project resolve the same file.
    assert resolve_db_path(None, env={}, cwd=project).path == anchored.path
    git_root = tmp_path / "repo"
    (git_root / ".git").mkdir(parents=True)
    assert resolve_db_path(None, env={}, cwd=git_root).path == git_root / ".temp" / "memory.db"
    loose = Path("/")
    assert resolve_db_path(None, env={}, cwd=loose).how == "user-data"


def test_parent_folder_is_created(tmp_path):
    target = tmp_path / "a" / "b" / "memory.db"
    with open_store(target) as s:
        assert s.location.path == target
    assert target.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere; permissions cannot be tested")
def test_unwritable_folder_names_the_path(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    with pytest.raises(DatabaseLocationError, match=str(locked)):
        open_store(locked / "sub" / "memory.db")


def test_unwritable_parent_names_the_path(tmp_path):
    # A parent that is a file cannot be created as a folder, even for root.
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    with pytest.raises(DatabaseLocationError, match="blocker"):
        open_store(blocker / "memory.db")


def test_not_a_database_is_refused_and_untouched(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("hello, I am a text file")
    before = path.read_bytes()
    with pytest.raises(DatabaseOpenError, match="not a SQLite"):
        open_store(path)
    assert path.read_bytes() == before


def test_wal_mode_and_busy_timeout(store, db_path):
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    with store.db.read() as c:
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 5000


def test_read_only_store_refuses_writes(db_path):
    with open_store(db_path) as s:
        Memory(s).create_thread(resource_id="u", thread_id="t")
    with open_store(db_path, read_only=True) as ro:
        with pytest.raises(ReadOnlyError):
            Memory(ro).create_thread(resource_id="u", thread_id="t2")
        assert Memory(ro).get_thread("t") is not None


def test_pending_is_read_only_and_migrations_are_named(tmp_path):
    path = tmp_path / "m.db"
    make_mastra_db(path)
    with open_store(path, read_only=True) as s:
        pending = s.pending_migrations()
    assert pending == sorted(pending) and all(p[:4].isdigit() for p in pending)
    assert "memory_studio_migrations" not in table_sql(path)


def test_newer_schema_is_never_written(db_path):
    with open_store(db_path) as s:
        with s.db.write() as conn:
            conn.exec_driver_sql(
                "INSERT INTO memory_studio_migrations (name, \"appliedAt\") VALUES ('9999_future', 'x')"
            )
    from core.storage import SchemaError

    with open_store(db_path) as s:
        assert s.db.unknown_migrations() == ["9999_future"]
        with pytest.raises(SchemaError, match="newer"):
            Memory(s).create_thread(resource_id="u", thread_id="t")


def test_concurrent_writer_and_reader_processes(db_path):
    """One process writes while another reads: "database is locked" never reaches either side.

    They overlap by construction: halfway, the writer waits (marker files) until the reader has read
    a half-written thread, and the reader keeps reading until it has seen all 200 messages.
    """
    import json
    import subprocess
    import sys
    import textwrap

    half, reader_saw = db_path.parent / "writer-half", db_path.parent / "reader-saw"
    with open_store(db_path) as s:
        Memory(s).create_thread(resource_id="u", thread_id="t")
    writer = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from core import Memory, Message, open_store
        m = Memory(open_store({str(db_path)!r}))
        waited = False
        for i in range(200):
            if i == 100:
                Path({str(half)!r}).touch()
                deadline = time.monotonic() + 120
                while not Path({str(reader_saw)!r}).exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
                waited = Path({str(reader_saw)!r}).exists()
            m.save_messages([Message.user(f"w{{i}}", thread_id="t", resource_id="u")])
        print(waited)
    """)
    reader = textwrap.dedent(f"""
        import json, time
        from pathlib import Path
        from core import Memory, open_store
        m = Memory(open_store({str(db_path)!r}))
        seen, partial, reads = 0, [], 0
        deadline = time.monotonic() + 120
        while seen < 200 and time.monotonic() < deadline:
            n = len(m.recall(thread_id="t", per_page=False).messages)
            reads += 1
            seen = max(seen, n)
            if 0 < n < 200:
                partial.append(n)
                if Path({str(half)!r}).exists():
                    Path({str(reader_saw)!r}).touch()
        print(json.dumps({{"seen": seen, "partial": partial[:5], "reads": reads}}))
    """)
    pw = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pr = subprocess.Popen([sys.executable, "-c", reader], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wout, werr = pw.communicate(timeout=300)
    rout, rerr = pr.communicate(timeout=300)
    assert pw.returncode == 0, werr
    assert pr.returncode == 0, rerr
    assert "locked" not in werr + rerr
    r = json.loads(rout)
    assert wout.strip() == "True"  # the writer paused until the reader had read a half-written thread
    assert r["partial"] and r["seen"] == 200  # reads overlapped the writes, then saw every message
    with open_store(db_path) as s:
        assert s.memory.count_messages("t") == 200


def test_trace_retention_setting_from_environment():
    from core.storage import StorageError
    from core.traces.home import retention_from_env

    default = retention_from_env({})
    assert default.keep_days == 30 and default.keep_mb == 1024
    custom = retention_from_env({"MEMORY_STUDIO_TRACES_KEEP_DAYS": "7", "MEMORY_STUDIO_TRACES_KEEP_MB": "off"})
    assert custom.keep_days == 7 and custom.keep_mb is None
    with pytest.raises(StorageError, match="KEEP_DAYS"):
        retention_from_env({"MEMORY_STUDIO_TRACES_KEEP_DAYS": "soon"})


def test_deleting_the_trace_file_loses_no_conversation(db_path):
    from core.agent import Agent
    from core.llm import ScriptedModel

    with open_store(db_path) as s:
        m = Memory(s, tracer=s.tracer())
        Agent("a", instructions="I", model=ScriptedModel(["hello"]), memory=m).generate(
            "hi", memory={"resource": "u", "thread": "t"})
        s.tracer().flush(5.0)
    obs = db_path.with_name("observability.duckdb")
    assert obs.exists()
    obs.unlink()
    with open_store(db_path) as s:
        assert [x.text for x in Memory(s).recall(thread_id="t").messages] == ["hi", "hello"]


def test_browsing_pages_keep_a_corrupt_row_in_place_and_find_positions(store, db_path):
    """The viewer's pager: (createdAt, rowid) order, a corrupt row returned in its place, positions."""
    from datetime import datetime, timedelta, timezone

    from core.storage.message_pages import UnreadableMessage

    t0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
    Memory(store).create_thread(resource_id="u1", thread_id="t1")
    # Two messages in the same millisecond, "z" stored first: rowid order keeps them as stored.
    store.memory.save_messages([
        Message.user(f"m{i}", id=mid, thread_id="t1", resource_id="u1", created_at=t0 + timedelta(seconds=s))
        for i, (mid, s) in enumerate([("a", 0), ("z", 1), ("b", 1), ("c", 2), ("d", 3)])
    ])
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE mastra_messages SET content = '{broken' WHERE id = 'c'")
    conn.commit()
    conn.close()

    page = store.memory.browse_messages("t1", 1, 3)
    assert [m.id for m in page] == ["z", "b", "c"]
    assert isinstance(page[2], UnreadableMessage) and page[2].role == "user"
    assert page[2].created_at == t0 + timedelta(seconds=2) and "malformed" in page[2].error
    assert [m.id for m in store.memory.browse_messages("t1", 4, 10)] == ["d"]
    assert [store.memory.message_position("t1", mid) for mid in ("a", "z", "b", "c", "d")] == [0, 1, 2, 3, 4]
    assert store.memory.message_position("t1", "missing") is None
    assert store.memory.message_position("other-thread", "a") is None


@pytest.mark.parametrize("count", [0, 1, 499, 500, 501, 1000, 1001, 2345])
def test_rows_reads_every_row_fetched_in_pieces(store, count):
    # (read a few hundred at a time: libSQL's driver keeps the GIL for a whole fetch, so one fetch of a
    # large thread froze every other thread of the process, the Studio's UI among them)
    from core.storage import driver_sql

    with store.db.read() as conn:
        got = driver_sql.rows(conn, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                              "SELECT i, 'row ' || i FROM n WHERE ? > 0", (max(count, 1), count))
    assert got == [(i, f"row {i}") for i in range(1, count + 1)]
    assert driver_sql.FETCH_ROWS == 500  # (the sizes above straddle it)


@pytest.mark.backends
def test_tree_summaries_are_list_resources_and_thread_summaries_from_one_read(store, tmp_path):
    from datetime import datetime, timedelta, timezone

    t0 = datetime(2026, 5, 1, 9, tzinfo=timezone.utc)
    mem = store.memory
    mem.create_thread(thread_id="a1", resource_id="ada", title="with messages")
    mem.create_thread(thread_id="a2", resource_id="ada", title="empty")
    mem.create_thread(thread_id="c1", resource_id="cy", title="no messages either")
    mem.create_thread(thread_id="d1", resource_id="dee", title="later")
    mem.save_messages([Message.user(f"m{i}", thread_id="a1", resource_id="ada", created_at=t0 + timedelta(minutes=i))
                       for i in range(3)]
                      + [Message.user("late", thread_id="d1", resource_id="dee", created_at=t0 + timedelta(days=1))])
    mem.update_resource("bo", working_memory="# Notes\n- likes tea")  # a resource row, no thread
    mem.update_resource("ada", working_memory="")  # an empty working memory is none
    resources, threads = mem.tree_summaries()
    assert resources == mem.list_resources()
    assert threads == mem.thread_summaries(None)
    ids = [r.id for r in resources]
    # (a thread without messages counts its update: "cy"'s is now; "bo" has no activity at all: last)
    assert ids == ["cy", "dee", "ada", "bo"]
    bo = next(r for r in resources if r.id == "bo")
    assert (bo.thread_count, bo.message_count, bo.has_working_memory) == (0, 0, True)


@pytest.mark.backends
def test_tree_summaries_read_each_untitled_threads_first_user_message_in_the_same_statement(store):
    """The Studio's tree names an untitled thread by the first words of its first user message (it named it by when it
    started): ``openings=True`` reads the start of that message's stored content with the thread list, in the one
    statement (no read per thread), for untitled threads only, cut to ``OPENING_CHARS`` characters."""
    from datetime import datetime, timedelta, timezone

    from core.storage.memory_store import OPENING_CHARS

    t0 = datetime(2026, 5, 1, 9, tzinfo=timezone.utc)
    mem = store.memory
    for tid, title in (("u1", None), ("u2", "  "), ("titled", "Groceries"), ("u-empty", None), ("u-bot", None)):
        mem.create_thread(thread_id=tid, resource_id="ada", title=title)
    long = "Plan a trip to Lisbon in May — café, trams and é " + "x" * 3000
    mem.save_messages([
        Message.assistant("Hello! How can I help?", thread_id="u1", resource_id="ada", created_at=t0),
        Message.user(long, thread_id="u1", resource_id="ada", created_at=t0 + timedelta(seconds=1)),
        Message.user("a later question", thread_id="u1", resource_id="ada", created_at=t0 + timedelta(seconds=2)),
        Message.user("What did I buy?", thread_id="u2", resource_id="ada", created_at=t0),
        Message.user("milk", thread_id="titled", resource_id="ada", created_at=t0),
        Message.assistant("only the assistant spoke", thread_id="u-bot", resource_id="ada", created_at=t0)])
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    sa.event.listen(store.db.engine, "before_cursor_execute", count)
    try:
        plain = mem.tree_summaries()
        sent = len(statements)
        resources, threads = mem.tree_summaries(openings=True)
    finally:
        sa.event.remove(store.db.engine, "before_cursor_execute", count)
    assert len(statements) - sent == sent  # the same statements: the openings come with the thread list
    assert resources == plain[0] and [s.thread for s in threads] == [s.thread for s in plain[1]]
    assert all(s.opening is None for s in plain[1])
    opening = {s.thread.id: s.opening for s in threads}
    assert opening["titled"] is None and opening["u-empty"] is None and opening["u-bot"] is None
    assert Message.from_row({"id": "x", "role": "user", "content": opening["u2"], "createdAt": t0.isoformat(),
                             "thread_id": "u2"}).text == "What did I buy?"
    assert len(opening["u1"]) == OPENING_CHARS and "Plan a trip to Lisbon in May — café, trams and é" in opening["u1"]


def test_tree_summaries_of_a_database_mastra_wrote(tmp_path):
    path = tmp_path / "mastra.db"
    make_mastra_db(path)
    store = open_store(path)
    try:
        assert store.memory.tree_summaries() == (store.memory.list_resources(), store.memory.thread_summaries(None))
    finally:
        store.close()


@pytest.mark.backends
def test_has_memory_is_whether_list_resources_has_any(store):
    mem = store.memory
    assert mem.has_memory() is False and mem.list_resources() == []
    mem.update_resource("bo", working_memory="# Notes")  # a resource row alone
    assert mem.has_memory() is True and [r.id for r in mem.list_resources()] == ["bo"]
    mem.create_thread(thread_id="t1", resource_id="ada")
    assert mem.has_memory() is True and {r.id for r in mem.list_resources()} == {"ada", "bo"}
