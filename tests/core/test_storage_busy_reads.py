"""Reads of a file in a rollback journal mode while another process holds its EXCLUSIVE lock (a database
another program made, e.g. Mastra's, during that program's ``BEGIN EXCLUSIVE`` or VACUUM).

libsql-experimental keeps the GIL while SQLite's busy handler waits, so a read waiting there froze every
thread of the process (the Studio's UI thread) for the busy timeout. A read now waits with the GIL
released (``core.storage.reading``), as a write's ``BEGIN IMMEDIATE`` does, and ends the same way."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import libsql_experimental as libsql
import pytest
import sqlalchemy as sa

from core.storage import driver_sql, engine_watch, reading
from core.storage.database import Database, DatabaseBusyError
from core.storage.paths import resolve_db_path

ROWS = 30

# Holds the file's EXCLUSIVE lock with a change made (the statement in argv[2]) until told (a line on stdin) to commit it, and says
# whether it was told: a watchdog in another process, so a test whose process stood still (a thread
# waiting in SQLite's busy handler with the GIL) ends, and fails, instead of hanging. 60 s is far beyond
# what the test needs to be told, and far short of the busy timeout the tests set (``patient``).
HOLD_EXCLUSIVE = textwrap.dedent("""
    import select, sqlite3, sys
    con = sqlite3.connect(sys.argv[1], isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")
    con.execute(sys.argv[2])
    print("locked", flush=True)
    told = select.select([sys.stdin], [], [], 60)[0]
    con.execute("COMMIT")
    print("released when told" if told else "released after 60 s: nobody told it", flush=True)
""")


@pytest.fixture
def rollback_journal_db(tmp_path: Path) -> Path:
    """Another program's database, in SQLite's default rollback journal mode (``journal_mode=DELETE``)."""
    path = tmp_path / "other.db"
    con = libsql.connect(str(path))
    assert str(con.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "delete"
    con.execute("CREATE TABLE notes (text TEXT)")
    con.executemany("INSERT INTO notes VALUES (?)", [(f"note {i}",) for i in range(ROWS)])
    con.commit()
    con.close()
    return path


@pytest.fixture
def hold_lock(rollback_journal_db: Path) -> Iterator[Callable[[], subprocess.Popen[str]]]:
    """Starts the other process; it holds the lock once this returns (and commits at the test's end)."""
    procs: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", HOLD_EXCLUSIVE, str(rollback_journal_db),
                                 "INSERT INTO notes VALUES ('added while locked')"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.communicate("\n", timeout=90)


def _release(locker: subprocess.Popen[str]) -> str:
    assert locker.stdin is not None and locker.stdout is not None
    locker.stdin.write("\n")
    locker.stdin.flush()
    said = locker.stdout.readline().strip()
    assert locker.wait(30) == 0
    return said


@pytest.fixture
def patient(monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy timeout longer than the locker's watchdog: a wait in SQLite's busy handler (the GIL held)
    would stop this process until the watchdog let go, a wait here lets the test tell it to."""
    monkeypatch.setattr(reading, "BUSY_TIMEOUT_MS", 300_000)


def _count_sqlalchemy(db: Database) -> int:
    with db.read() as conn:
        return int(conn.exec_driver_sql("SELECT count(*) FROM notes").scalar_one())


def _count_driver(db: Database) -> int:
    with db.read() as conn:
        return int(driver_sql.scalar(conn, "SELECT count(*) FROM notes"))


def _count_kept(db: Database) -> int:
    with db.reads():  # the connection ``reads()`` holds (and keeps between blocks)
        return _count_driver(db)


def _count_snapshot(db: Database) -> int:
    with db.snapshot() as conn:
        return int(conn.exec_driver_sql("SELECT count(*) FROM notes").scalar_one())


READS: dict[str, Callable[[Database], int]] = {
    "sqlalchemy": _count_sqlalchemy, "driver cursor": _count_driver, "kept connection": _count_kept,
    "snapshot": _count_snapshot,
}


@pytest.mark.parametrize("how", [*READS, "open"])
def test_a_read_waits_for_the_lock_with_other_threads_running_then_sees_what_was_committed(
        rollback_journal_db: Path, hold_lock: Callable[[], subprocess.Popen[str]], how: str, patient: None) -> None:
    location = resolve_db_path(str(rollback_journal_db))
    # The read's statement went to the driver (and meets the lock there); for an open, its engine was
    # made (its first connection then meets the lock, setting ``synchronous``, before any statement).
    sent = threading.Event()
    outcome: list[Any] = []
    done = threading.Event()

    statements: list[str] = []  # what View > SQL Log would list

    def seen(_conn: Any, _cursor: Any, statement: str, *_a: Any) -> None:
        statements.append(statement)
        sent.set()

    def watch(engine: sa.Engine) -> None:
        sa.event.listen(engine, "before_cursor_execute", seen)

    db = None
    if how != "open":
        db = Database(location, read_only=True)  # opened before the lock was taken (and warm)
        READS[how](db)
        watch(db.engine)
    locker = hold_lock()

    def run() -> None:
        nonlocal db
        try:
            if db is None:  # the open's first look at the file
                with engine_watch.engines_made(lambda engine: (watch(engine), sent.set())):  # (this thread's)
                    db = Database(location, read_only=True)
                outcome.append(READS["sqlalchemy"](db))
            else:
                outcome.append(READS[how](db))
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)
        finally:
            done.set()

    reader = threading.Thread(target=run)
    reader.start()
    try:
        assert sent.wait(60)
        ticks = 0
        while ticks < 20:  # this thread runs while the read waits (it could not while the GIL was held)
            time.sleep(0.002)
            ticks += 1
        assert not done.is_set(), outcome  # the read is still waiting for the lock: nothing failed
        assert _release(locker) == "released when told"  # (this process never stood still past the watchdog)
    finally:
        reader.join(60)
        if db is not None:
            db.close()
    assert outcome == [ROWS + 1]  # the row the other process committed when it let go
    # Each statement once, however many times it was tried.
    first = "SELECT count(*) FROM sqlite_master" if how == "open" else "SELECT count(*) FROM notes"
    assert statements.count(first) == 1


@pytest.mark.parametrize("how", [*READS, "open"])
def test_a_read_still_locked_at_the_deadline_fails_with_the_busy_error(
        rollback_journal_db: Path, hold_lock: Callable[[], subprocess.Popen[str]], how: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    location = resolve_db_path(str(rollback_journal_db))
    db = None if how == "open" else Database(location, read_only=True)
    locker = hold_lock()
    monkeypatch.setattr(reading, "BUSY_TIMEOUT_MS", 300)
    try:
        with pytest.raises(DatabaseBusyError) as err:
            if db is None:
                Database(location, read_only=True)
            else:
                READS[how](db)
        assert str(rollback_journal_db) in str(err.value) and "busy timeout" in str(err.value)
        assert "Try again when it has finished, or close the other program" in str(err.value)
        # A read: it says the file could not be read (not the write's "nothing was written").
        assert "could not be read; nothing was changed" in str(err.value), str(err.value)
        assert "nothing was written" not in str(err.value)
    finally:
        if db is not None:
            db.close()
    assert locker.poll() is None  # (the lock was held all along)


def test_a_vacuum_after_reads_waits_in_sqlites_busy_handler_as_before(rollback_journal_db: Path) -> None:
    """A read leaves its pooled connection's busy timeout at 0; a VACUUM that takes that connection runs
    with the usual busy timeout again (its wait is not a read's: it is not retried)."""
    db = Database(resolve_db_path(str(rollback_journal_db)))  # not ours: opened writable, left as it is
    seen: list[int] = []

    def check(conn: sa.Connection, _cursor: Any, statement: str, *_a: Any) -> None:
        if statement == "VACUUM":
            seen.append(conn.connection.driver_connection.execute("PRAGMA busy_timeout").fetchone()[0])

    try:
        assert _count_sqlalchemy(db) == ROWS  # a pooled connection served a read
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one() == 0
        sa.event.listen(db.engine, "before_cursor_execute", check)
        db.vacuum()
        assert seen == [reading.BUSY_TIMEOUT_MS]
        assert _count_sqlalchemy(db) == ROWS
    finally:
        db.close()
