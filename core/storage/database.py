"""The libSQL database file behind the default storage domain.

SQLAlchemy Core over ``libsql-experimental`` (SQLite 3.45 inside, so ``json()`` reads Mastra's JSONB
blobs). Every connection gets a busy timeout; files we own run in WAL mode so one process can write
while another reads. Opening a database never changes it unless it is ours (or empty) — a Mastra
database is migrated only by an explicit ``migrate()`` call.
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, ClassVar, Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.pool import StaticPool

from core.storage import catalog, driver_sql, engine_watch, frozen_file, migrations, reading
from core.storage.capabilities import LIBSQL, Capabilities
from core.storage.errors import (  # re-exported: the errors were defined here first
    CorruptDatabaseError as CorruptDatabaseError,
    DatabaseBusyError as DatabaseBusyError,
    DatabaseOpenError as DatabaseOpenError,
    DiskFullError as DiskFullError,
    InvalidValueError as InvalidValueError,
    ReadOnlyError as ReadOnlyError,
    ReadOnlyFileError as ReadOnlyFileError,
    SchemaError as SchemaError,
    StorageError as StorageError,
    StorageUnavailableError as StorageUnavailableError,
    UnreadableValueError as UnreadableValueError,
)
from core.storage.paths import DatabaseLocationError, ResolvedPath, ensure_parent
from core.storage.reading import read_token as read_token  # re-exported: defined here first

log = logging.getLogger(__name__)

#: Read connections ``reads()`` keeps between blocks (more threads reading at once use the pool).
_KEPT_READ_CONNECTIONS = 4

# ``change_fingerprint``: the newest thread and resource changes, and the messages' count and rowid.
FINGERPRINT_SQL = """
SELECT (SELECT max("updatedAt") FROM mastra_threads),
       (SELECT max("updatedAt") FROM mastra_resources),
       (SELECT count(*) FROM mastra_messages),
       (SELECT max(rowid) FROM mastra_messages),
       (SELECT count(*) FROM mastra_threads)
"""
SQLITE_HEADER = b"SQLite format 3\x00"


def no_memory_tables(display: str, *, empty: bool) -> SchemaError:
    """What a database without memory tables is, said when a read needs one (libSQL and Postgres alike;
    the command line refuses such a file before reading, ``core.cli_store``)."""
    if empty:
        return SchemaError(
            f"{display} has no tables yet (an empty database): nothing is stored in it. Check --db or "
            "$MEMORY_STUDIO_DB (`memory-studio where` shows which database is used). A command that writes "
            "(`memory-studio import`, `memory-studio demo`, `memory-studio serve`) or File > Allow Writes in "
            "the Studio makes it a memory database.")
    return SchemaError(
        f"{display} has no memory tables (mastra_threads, mastra_messages): it was not written by Memory "
        "Studio or Mastra. Check --db or $MEMORY_STUDIO_DB (`memory-studio where` shows which database is used).")


def translate_driver_error(location: ResolvedPath, exc: BaseException, *, for_read: bool = False,
                           ) -> StorageError | None:
    """Our error, naming the file and what to do, for a driver error we recognise (else None).
    ``for_read``: it stopped a read (the open's first look, ``Database.read()``), which a lock held by
    another process keeps out in a rollback journal mode: the busy error then says the file could not be
    read, not that nothing was written.

    libsql-experimental raises bare ``ValueError``s carrying SQLite's message; SQLAlchemy may wrap
    them. Only those two shapes are looked at, so a ``ValueError`` of our own passes through.
    """
    if type(exc) is not ValueError and not isinstance(exc, sa.exc.DBAPIError):
        return None
    text = str(getattr(exc, "orig", None) or exc)
    low = text.lower()
    display = location.display
    folder = location.path.parent if location.path is not None else None
    name = location.path.name if location.path is not None else display
    if "readonly database" in low or "read-only" in low or "unable to open database file" in low:
        if folder is not None and not os.access(folder, os.W_OK):
            return ReadOnlyFileError(
                f"{display} cannot be written: its folder {folder} is not writable, and SQLite must create "
                f"{name}-wal and {name}-shm beside the file. Nothing was changed. Make the folder writable, or "
                "copy the file to a writable folder and open the copy. Looking needs no writable folder: the "
                "Studio and the commands that only read (`memory-studio threads`, `prompt`, `export`) open it "
                "read-only."
            )
        return ReadOnlyFileError(
            f"{display} is read-only for this user (permission denied), so nothing was written. Fix its "
            "permissions (e.g. chmod u+w), or open it read-only (the Studio opens files it cannot write "
            "read-only)."
        )
    if ("database is locked" in low or "database table is locked" in low or "database is busy" in low) and for_read:
        return DatabaseBusyError(
            f"{display} is busy: another program (an agent writing, a VACUUM, a BEGIN EXCLUSIVE) held a lock on it "
            f"for longer than the busy timeout ({reading.BUSY_TIMEOUT_MS // 1000} s), so it could not be read; "
            "nothing was changed. Try again when it has finished, or close the other program."
        )
    if "database is locked" in low or "database table is locked" in low or "database is busy" in low:
        return DatabaseBusyError(
            f"{display} is busy: another writer (an agent, the Studio, another command) held its write lock for "
            f"longer than the busy timeout ({reading.BUSY_TIMEOUT_MS // 1000} s), so nothing was written. Try again "
            "when it has finished, or close the other program."
        )
    if "disk is full" in low or "database or disk is full" in low or "no space left" in low:
        return DiskFullError(
            f"{display}: the disk is full (or the database reached its size limit), so this write was rolled "
            f"back and nothing from it was saved; what was saved before is intact. Free space on the disk "
            f"holding {folder or display} and try again."
        )
    if "malformed" in low or "not a database" in low or "corrupt" in low:
        return CorruptDatabaseError(
            f"{display} is damaged ({text}). Nothing was written. Keep a copy of the file, then restore it from a "
            f"backup, or salvage what is readable with: sqlite3 {display} .recover | sqlite3 {display}.recovered"
        )
    if "disk i/o error" in low:
        return StorageError(
            f"Reading or writing {display} failed with a disk I/O error ({text}). Check the disk and the "
            "free space, then try again."
        )
    if "unsupported parameter type" in low:
        return InvalidValueError(
            f"A value could not be stored in {display}: the driver accepts only text, bytes, numbers and None, "
            "and text must be encodable as UTF-8 (a lone surrogate such as \\ud800 is not). Nothing was written."
        )
    return None


def _is_driver_panic(exc: BaseException) -> bool:
    # libsql-experimental raises pyo3's PanicException, a BaseException the driver does not export.
    return type(exc).__name__ == "PanicException"


def _unreadable(display: str, exc: BaseException) -> UnreadableValueError:
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    why = "holds text that is not valid UTF-8" if "utf8" in detail.lower() else "holds a value the driver cannot read"
    return UnreadableValueError(
        f"{display} {why} in a column Memory Studio reads as plain text ({detail}). Message text, titles, "
        "metadata and working memory are read safely where threads and messages are listed and shown, so "
        "the bad value is most likely in another column (an id, role or timestamp). Find it with the sqlite3 "
        "shell (e.g. SELECT rowid, hex(role) FROM mastra_messages) and repair or delete that row; a backup "
        "of the file first is wise."
    )


def _holds_changes(path: Path) -> bool:
    """Whether ``path``'s -wal exists and is not empty (changes not yet copied into the file)."""
    try:
        return path.with_name(path.name + "-wal").stat().st_size > 0
    except OSError:
        return False


def read_only_url(path: Path, **flags: str) -> sa.engine.URL:
    """The SQLAlchemy URL of a database file opened read-only by SQLite (``mode=ro``; ``flags``: more URI
    parameters, e.g. ``immutable``). libsql-experimental hands the URI to ``sqlite3_open_v2``."""
    return sa.engine.URL.create("sqlite+libsql", database=path.resolve().as_uri(),
                                query={"mode": "ro", **flags, "uri": "true"})


class Database:
    """One database file: an engine, its ownership and its migrations."""

    capabilities: ClassVar[Capabilities] = LIBSQL
    migrations_run = 0  # ``migrate`` calls that ended in this process (what a check of the schema found may have moved)
    #: Why writes are refused when ``refuse_writes`` said so, or when the file's folder cannot be
    #: written (None: the usual read-only message); ``_refuse_as`` is the error that says it.
    refusal: str | None = None
    _refuse_as: type[ReadOnlyError] = ReadOnlyError
    #: One connection shared by every thread (an in-memory database): reads queue behind writes.
    _shared_connection: bool = False
    #: Opened as a snapshot (SQLite's ``immutable``) because its folder cannot be written: the file's
    #: state then, which every read checks (``core.storage.frozen_file``). None: an ordinary open.
    frozen_at: "frozen_file.State | None" = None
    #: A file: a read's connection has busy timeout 0 and its statements wait for another process's
    #: lock in ``core.storage.reading`` with the GIL released (libsql-experimental keeps it while
    #: SQLite's busy handler waits). Not for the in-memory database (no other process) nor Postgres.
    _reads_wait_here: bool = False

    def __init__(self, location: ResolvedPath, *, read_only: bool = False, create: bool = True) -> None:
        self.location = location
        self.read_only = read_only
        self._lock = threading.Lock()
        self._writer = threading.RLock()  # see ``transaction``
        self._held = threading.local()  # ``reads()``: this thread's connection for its reads
        # Connections kept out of SQLAlchemy's pool (see ``_writer_conn`` and ``reads``): checking one
        # out and back in costs more Python than an agent turn's statements on it. Owned by this pid.
        self._write_conn: sa.Connection | None = None
        self._write_conn_gen = 0  # ``_dispose_gen`` when it was made
        self._dispose_gen = 0
        self._write_conn_wal = False  # its busy timeout is 0 for good (WAL: nothing after BEGIN waits)
        self._write_depth = 0  # a nested ``transaction()`` of the writing thread takes a pool connection
        self._idle_reads: list[sa.Connection] = []
        self._conn_pid = os.getpid()
        self._newer: list[str] | None = None
        self.write_transactions = 0  # BEGIN IMMEDIATE issued by this process (tests: looking never writes)
        path = location.path
        # An in-memory database is one connection shared by every thread (``StaticPool``): a read's
        # rollback on another thread would end a write transaction in flight, so reads queue on the
        # writers' lock too (a memory's background work reads while a turn writes).
        self._shared_connection = path is None
        self._reads_wait_here = path is not None
        if path is not None:
            _check_file(path, create=create and not read_only)
            if not path.exists():
                ensure_parent(path)
            # Looking at a file whose -wal holds changes (its writer ended without closing it, or still
            # runs): opened read-only by SQLite itself (``mode=ro``), not only with writes refused
            # (``query_only``), as the last connection to close would otherwise checkpoint the -wal into the
            # file and delete it, rewriting the file's bytes just by looking. A file without such a -wal is
            # opened as usual, so the -wal and -shm a look needs are removed again when it closes.
            url: str | sa.engine.URL = (read_only_url(path) if read_only and _holds_changes(path)
                                        else f"sqlite+libsql:///{path}")
            # Autocommit at the driver: we issue BEGIN ourselves, so a write can start with
            # BEGIN IMMEDIATE (see ``write``) instead of upgrading a read snapshot mid-transaction.
            self.engine = sa.create_engine(
                url, pool_size=4, max_overflow=8, connect_args={"isolation_level": None}
            )
        else:
            self.engine = sa.create_engine(
                "sqlite+libsql:///:memory:", poolclass=StaticPool,
                connect_args={"check_same_thread": False, "isolation_level": None},
            )
        self._listen()
        try:
            self._look()
        except (sa.exc.DBAPIError, ValueError) as exc:  # libsql raises bare ValueErrors for some errors
            self.engine.dispose()
            ours = translate_driver_error(location, exc, for_read=True)
            if isinstance(ours, CorruptDatabaseError) and path is not None and path.exists():
                # Its header is SQLite's (``_check_file``), so a malformed image is a damaged (often cut
                # short) database, not another kind of file: say so, and how to salvage what it holds.
                raise ours from exc
            if isinstance(ours, CorruptDatabaseError) or ours is None:
                raise DatabaseOpenError(_explain_open_error(location.display, exc)) from exc
            if not (read_only and isinstance(ours, ReadOnlyFileError) and path is not None
                    and not frozen_file.folder_writable(path)):
                raise ours from exc
            self._open_frozen(path, exc)
        if read_only and path is not None and not frozen_file.folder_writable(path):
            # (A snapshot, or read with the -wal and -shm it found there.) "Allow writes" cannot help.
            self.refusal, self._refuse_as = frozen_file.refusal(path), ReadOnlyFileError
        try:
            self._prepare()
        except BaseException:
            self.engine.dispose()
            raise

    def _listen(self) -> None:
        engine_watch.made(self.engine)  # (before its first statement: a watcher of the open sees them all)
        sa.event.listen(self.engine, "connect", self._on_connect)
        # ``engine.dispose()`` means "new connections from now on": the kept ones follow it.
        sa.event.listen(self.engine, "engine_disposed", self._drop_kept)
        if self._reads_wait_here:  # its driver connections are ``reading.WaitingConnection``s
            sa.event.listen(self.engine, "do_connect", _connect_waiting)

    def _look(self) -> None:
        # The open's first read (a read like any other: it waits for another process's lock GIL-free).
        with self.engine.connect() as conn:
            waiting = self._start_read(conn)
            try:
                conn.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar()
                self.is_empty = not catalog.has_user_tables(conn)
                self.owned = self.is_empty or catalog.has_table(conn, migrations.MIGRATIONS_TABLE)
                self.is_mastra = catalog.has_table(conn, "mastra_threads")
            finally:
                _end_read(conn, waiting)

    def _open_frozen(self, path: Path, cause: BaseException) -> None:
        """Open ``path``, in a folder this user cannot write, as a snapshot when that shows all of it
        (``core.storage.frozen_file``); else raise why not."""
        at_open = frozen_file.state(path)
        problem = frozen_file.unreadable_changes(path)
        if problem is not None:
            raise problem from cause
        self.engine = sa.create_engine(read_only_url(path, immutable="1"), pool_size=4, max_overflow=8,
                                       connect_args={"isolation_level": None})
        self._listen()
        try:
            self._look()
            frozen_file.check(path, at_open)  # (a -wal written meanwhile: not in what was just read)
        except BaseException as exc:
            self.engine.dispose()
            ours = (translate_driver_error(self.location, exc, for_read=True)
                    if isinstance(exc, (sa.exc.DBAPIError, ValueError)) else None)
            if ours is not None:
                raise ours from exc
            raise
        self.frozen_at = at_open

    def _prepare(self) -> None:
        if not self.owned or self.read_only:
            return
        if self._newer_schema():
            # Written by a newer version: reading may still work, but the file is never written, not
            # even to switch its journal mode.
            return
        try:
            self._enable_wal()
        except (sa.exc.DBAPIError, ValueError) as exc:
            ours = translate_driver_error(self.location, exc)
            if ours is None:
                raise
            raise ours from exc
        if self.pending_migrations():  # checked read-only: opening an up-to-date file writes nothing
            self.migrate()

    # -- connections -------------------------------------------------------------------------
    def _on_connect(self, dbapi_conn: object, _record: object) -> None:
        cursor = dbapi_conn.cursor()  # type: ignore[attr-defined]
        # A rollback journal's file (``_connect_waiting``): setting ``synchronous`` reads the file, and
        # another process's EXCLUSIVE lock would keep it (and the GIL) in SQLite's busy handler, so it
        # waits GIL-free like a read, and the connection stays at 0 like a read's (``_busy_timeout_back``).
        waits_here = type(dbapi_conn) is reading.WaitingConnection
        if waits_here:
            dbapi_conn.set_busy_timeout(0)  # type: ignore[attr-defined]
        else:
            cursor.execute(f"PRAGMA busy_timeout = {reading.BUSY_TIMEOUT_MS}")
        # In WAL mode NORMAL keeps the database consistent after a crash and avoids an fsync per commit.
        # It is an optimisation: if another process holds the file for longer than the busy timeout,
        # keep the default.
        try:
            if waits_here:
                reading.wait_while_busy(lambda: cursor.execute("PRAGMA synchronous = NORMAL"))
            else:
                cursor.execute("PRAGMA synchronous = NORMAL")
        except ValueError:
            pass
        if self.read_only:
            # Enforced by SQLite itself, so no code path of ours can write by mistake.
            cursor.execute("PRAGMA query_only = 1")

    def _enable_wal(self) -> None:
        if self.location.path is None:
            return
        with self.engine.connect() as conn:
            _busy_timeout_back(conn)
            mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
            if str(mode).lower() != "wal":
                conn.exec_driver_sql("PRAGMA journal_mode = WAL")
                # Made in a rollback journal mode, it would wrap its reads for nothing: the pool makes
                # a WAL one instead (``_connect_waiting``).
                conn.invalidate()

    @property
    def concurrent_reads(self) -> bool:
        """Whether a read on one thread runs beside reads and writes on others (each takes a connection of
        its own); not for the in-memory database, whose one connection is shared under the writers' lock,
        so a long read there holds every other thread up (a background load waits for a search instead)."""
        return not self._shared_connection

    @contextmanager
    def snapshot(self) -> Iterator[sa.Connection]:
        """One read transaction: every statement in it sees the database as of the same moment, and
        nothing is written (an export reads every table through one).

        Its sorts spill to temporary files (``PRAGMA temp_store = FILE``, set back to the default after it):
        libsql-experimental is built to keep them in memory (``SQLITE_TEMP_STORE=2``), so a statement sorting a
        large result (a resource's messages by time, across its threads) held all of it (a 320 MB history:
        661 MB), however few rows the reader takes at a time. SQLite takes the setting only outside a
        transaction; its files go to ``SQLITE_TMPDIR`` or ``TMPDIR``."""
        with self.read() as conn:
            conn.exec_driver_sql("PRAGMA temp_store = FILE")
            try:
                conn.exec_driver_sql("BEGIN")
                try:
                    yield conn
                except BaseException:
                    # A failed read (a driver panic invalidates the connection) must surface as itself:
                    # ``read()`` turns it into our error and its own rollback ends the transaction.
                    try:
                        conn.exec_driver_sql("ROLLBACK")
                    except Exception:  # noqa: BLE001 - the error being raised says what went wrong
                        pass
                    raise
                conn.exec_driver_sql("ROLLBACK")
            finally:
                try:
                    conn.exec_driver_sql("PRAGMA temp_store = DEFAULT")
                except Exception:  # noqa: BLE001 - a connection a driver panic ended is not pooled again
                    log.debug("temp_store not set back on a failed connection", exc_info=True)

    def change_fingerprint(self) -> tuple[object, ...]:
        """A cheap value that changes whenever another connection (or process) changed threads,
        resources or messages: a viewer polls it to know when to read again."""
        with self.read() as conn:
            return tuple(conn.exec_driver_sql(FINGERPRINT_SQL).first() or ())

    @contextmanager
    def reads(self) -> Iterator[None]:
        """Every ``read()`` of this thread inside the block uses one pooled connection instead of
        checking one out and back in each time (an agent turn reads five times before its model call).

        Each read still ends as before (its rollback): the driver runs in autocommit, so no snapshot
        is held between reads, and a write on another connection in between is seen by the next read.
        A no-op for the in-memory database (its one connection is shared under the writers' lock) and
        when a block of this thread is already open."""
        if self._shared_connection or getattr(self._held, "conn", None) is not None:
            yield
            return
        self._check_pid()
        gen = self._dispose_gen
        try:
            conn = self._idle_reads.pop()  # one kept from an earlier block (list.pop is atomic)
        except IndexError:
            try:
                conn = self.engine.connect()
            except BaseException as exc:
                self._raise_ours(exc, for_read=True)
                raise
        self._held.conn = conn
        ok = False
        try:
            yield
            ok = True
        finally:
            self._held.conn = None
            # Each read in the block ended with its rollback, so the connection holds nothing; one
            # that saw an error is closed rather than kept.
            if ok and len(self._idle_reads) < _KEPT_READ_CONNECTIONS and os.getpid() == self._conn_pid \
                    and gen == self._dispose_gen:
                self._idle_reads.append(conn)
            else:
                _close_quietly(conn)

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        if self.frozen_at is not None:  # a snapshot: what it reads must still be the file (frozen_file)
            self._check_frozen()
        held: sa.Connection | None = getattr(self._held, "conn", None)
        if held is not None:  # inside ``reads()``
            try:
                waiting = None
                try:
                    waiting = self._start_read(held)
                    yield held
                    if self.frozen_at is not None:
                        self._check_frozen()
                finally:
                    _end_read(held, waiting)
                    held.rollback()
            except BaseException as exc:
                self._raise_ours(exc, for_read=True)
                raise
            return
        # Getting the connection and ending the transaction are inside the try too: against a
        # server, either can be where a lost connection shows.
        if self._shared_connection and not self._writer.acquire(timeout=reading.BUSY_TIMEOUT_MS / 1000):
            raise ValueError("database is locked (another thread kept writing for longer than the busy timeout)")
        try:
            with self.engine.connect() as conn:
                waiting = None
                try:
                    waiting = self._start_read(conn)
                    yield conn
                    if self.frozen_at is not None:
                        self._check_frozen()
                finally:
                    _end_read(conn, waiting)
                    conn.rollback()
        except BaseException as exc:
            self._raise_ours(exc, for_read=True)
            raise
        finally:
            if self._shared_connection:
                self._writer.release()

    def _start_read(self, conn: sa.Connection) -> reading.WaitingConnection | None:
        """``conn`` serves a read: its own ``read_token``; on a file, busy timeout 0 and its statements
        waiting for another process's lock GIL-free (``core.storage.reading``). Returns the driver
        connection to tell when the read ends (kept here: the read may end with it invalidated)."""
        reading.start_read(conn)
        if not self._reads_wait_here:
            return None
        waiting = _waiting(conn)
        if waiting is None:  # (WAL)
            return None
        if not waiting.busy_timeout_zero:
            waiting.set_busy_timeout(0)
        waiting.reading = True
        return waiting

    def _check_frozen(self) -> None:
        assert self.frozen_at is not None and self.location.path is not None
        frozen_file.check(self.location.path, self.frozen_at)

    @contextmanager
    def write(self) -> Iterator[sa.Connection]:
        """A write transaction. Refused on read-only or newer-schema databases.

        ``BEGIN IMMEDIATE`` takes the write lock up front (waiting on the busy timeout). A deferred
        transaction that reads first and writes later would fail with SQLITE_BUSY_SNAPSHOT whenever
        another process committed in between — and no busy timeout helps with that.
        """
        if self.read_only:
            raise self._refuse_as(self.refusal or
                f"{self.location.display} is open read-only. Allow writes first (Studio: File > Allow Writes)."
            )
        newer = self._newer_schema()
        if newer:
            raise SchemaError(
                f"{self.location.display} was written by a newer Memory Studio (migrations {', '.join(newer)}). "
                "Upgrade Memory Studio before writing to it."
            )
        with self.transaction() as conn:
            yield conn

    @contextmanager
    def transaction(self) -> Iterator[sa.Connection]:
        # libsql-experimental keeps the GIL while SQLite's busy handler waits, so a thread waiting
        # inside BEGIN IMMEDIATE would freeze every other thread of the process, including the one
        # holding the write lock, until the busy timeout ran out. So writers of this process queue
        # on a Python lock (which releases the GIL), and waiting for another process's writer is a
        # retry loop that sleeps between attempts. SQLite allows one writer per file anyway.
        if not self._writer.acquire(timeout=reading.BUSY_TIMEOUT_MS / 1000):
            raise ValueError("database is locked (another thread kept writing for longer than the busy timeout)")
        try:
            kept = self._write_depth == 0 and not self._shared_connection
            self._write_depth += 1
            try:
                # The writers' one connection, kept while the process runs (writers queue on
                # ``_writer`` anyway); a nested transaction of the same thread gets a pool connection.
                with self._writer_conn() if kept else self.engine.connect() as conn:
                    _begin_immediate(conn, busy_timeout_is_zero=kept and self._write_conn_wal)
                    self.write_transactions += 1
                    try:
                        yield conn
                    except BaseException:
                        _rollback(conn)
                        raise
                    try:
                        driver_sql.execute(conn, "COMMIT")
                    except BaseException:
                        _rollback(conn)  # a failed COMMIT (disk full) leaves the transaction open
                        raise
            finally:
                self._write_depth -= 1
        except BaseException as exc:
            self._raise_ours(exc)
            raise
        finally:
            self._writer.release()

    def _check_pid(self) -> None:
        """After a fork, the kept connections are the parent's: forget them (never close them here:
        closing would touch the parent's SQLite handles)."""
        if os.getpid() != self._conn_pid:
            self._conn_pid = os.getpid()
            self._write_conn = None
            self._idle_reads = []

    def _drop_kept(self, _engine: object) -> None:
        # The write connection may be in a transaction on another thread: it is replaced at its next
        # use (under ``_writer``). Idle read connections are closed now.
        self._dispose_gen += 1
        if os.getpid() == self._conn_pid:
            idle, self._idle_reads = self._idle_reads, []
            for conn in idle:
                _close_quietly(conn)

    @contextmanager
    def _writer_conn(self) -> Iterator[sa.Connection]:
        """The kept write connection (made on first use; called under ``_writer``). In WAL mode its
        busy timeout is 0 for good: only ``BEGIN IMMEDIATE`` can meet another process's lock there,
        and ``_begin_immediate`` retries that itself (statements after it hold the write lock, and a
        WAL commit waits for no reader). A connection that saw an error is closed, not kept."""
        self._check_pid()
        conn = self._write_conn
        if conn is not None and self._write_conn_gen != self._dispose_gen:
            self._write_conn = None
            _close_quietly(conn)
            conn = None
        if conn is None:
            conn = self.engine.connect()
            try:
                _busy_timeout_back(conn)  # (a read may have left it at 0)
                wal = str(driver_sql.scalar(conn, "PRAGMA journal_mode")).lower() == "wal"
                if wal:
                    driver_sql.execute(conn, "PRAGMA busy_timeout = 0")
                    waiting = _waiting(conn)
                    if waiting is not None:  # (made before the file turned WAL)
                        waiting.busy_timeout_zero = True
            except BaseException:
                _close_quietly(conn)
                raise
            self._write_conn, self._write_conn_wal, self._write_conn_gen = conn, wal, self._dispose_gen
        try:
            yield conn
        except BaseException:
            self._write_conn = None
            _close_quietly(conn)
            raise

    def _raise_ours(self, exc: BaseException, *, for_read: bool = False) -> None:
        """Raise the storage error a driver fault inside ``read()``/``write()`` means (naming the file
        and what to do); return when it is not a driver fault, so the caller re-raises it as it is."""
        if _is_driver_panic(exc):
            raise _unreadable(self.location.display, exc) from None
        ours = translate_driver_error(self.location, exc, for_read=for_read)
        if ours is not None:
            raise ours from exc
        # A file without memory tables that was not migrated (another program's file, until `migrate` makes it
        # ours; an empty one opened read-only): a missing table is what the file is, not a fault.
        unmigrated = not self.owned or (self.read_only and self.is_empty)
        if not self.is_mastra and unmigrated and (type(exc) is ValueError or isinstance(exc, sa.exc.DBAPIError)) \
                and "no such table" in str(getattr(exc, "orig", None) or exc).lower():
            raise no_memory_tables(self.location.display, empty=self.is_empty) from None

    def refuse_writes(self, reason: str) -> None:
        """From now on every write raises ``ReadOnlyError(reason)``: for a database that must not be
        written any more (the Studio's, once its file was deleted or replaced under it)."""
        self.refusal, self._refuse_as = reason, ReadOnlyError
        self.read_only = True

    def lock(self, conn: sa.Connection, *keys: str) -> None:
        """Serialise read-modify-writes of the named things until the transaction ends.

        Nothing to do here: ``BEGIN IMMEDIATE`` already holds the file's one write lock. Postgres
        (``core.storage.pg.database``) takes an advisory lock per key.
        """

    # -- schema ------------------------------------------------------------------------------
    def pending_migrations(self) -> list[str]:
        with self.read() as conn:
            return migrations.pending(conn)

    def unknown_migrations(self) -> list[str]:
        with self.read() as conn:
            return migrations.unknown(conn)

    def _newer_schema(self) -> list[str]:
        # Checked once per open (and after a migration), not on every write: a newer version
        # migrating this file while we run is not a case worth a query per transaction.
        if self._newer is None:
            self._newer = self.unknown_migrations()
        return self._newer

    def has_table(self, name: str) -> bool:
        with self.read() as conn:
            return catalog.has_table(conn, name)

    def migrate(self, names: Sequence[str] | None = None) -> list[str]:
        """Apply pending migrations. This is the explicit call a foreign (Mastra) database needs."""
        if self.read_only:
            raise ReadOnlyError(f"{self.location.display} is open read-only; it cannot be migrated.")
        with self._lock:
            done = migrations.apply(self.read, self.transaction, names)
        self.owned = True
        self._newer = None
        self.migrations_run += 1
        return done

    def vacuum(self, progress: Callable[[str], None] | None = None) -> int:
        """Rewrite the file without its free pages; returns the bytes given back to the disk.

        Deleting rows only marks pages free inside the file (SQLite reuses them, never returns them).
        VACUUM needs about the file's size again in free disk space while it runs; the WAL is
        checkpointed and truncated afterwards so the space really leaves the folder. ``progress``: told
        what the vacuum waits for, and that writers wait for it, when they must.
        """
        if self.read_only:
            raise ReadOnlyError(f"{self.location.display} is open read-only; it cannot be vacuumed.")
        newer = self._newer_schema()
        if newer:
            raise SchemaError(
                f"{self.location.display} was written by a newer Memory Studio (migrations {', '.join(newer)}). "
                "Upgrade Memory Studio before vacuuming it."
            )
        return self._reclaim(progress)

    def _reclaim(self, progress: Callable[[str], None] | None = None) -> int:
        """``vacuum``'s work once it may run: the file rewritten (a server database rewrites its tables)."""
        path = self.location.path
        if path is None:
            return 0
        before = _disk_bytes(path)
        if progress is not None:
            progress(f"rewriting {path.name} ({before / 1e6:.1f} MB): it waits for the writer in progress, and "
                     "every other writer of the file waits until it ends")
        try:
            with self._lock, self.engine.connect() as conn:
                _busy_timeout_back(conn)
                conn.exec_driver_sql("VACUUM")
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        except (sa.exc.DBAPIError, ValueError) as exc:
            ours = translate_driver_error(self.location, exc)
            if ours is None:
                raise
            raise ours from exc
        return max(before - _disk_bytes(path), 0)

    def close(self) -> None:
        if os.getpid() == self._conn_pid and self._write_conn is not None:
            _close_quietly(self._write_conn)
            self._write_conn = None
        self.engine.dispose()  # closes the idle read connections too (``_drop_kept``)


def _close_quietly(conn: sa.Connection) -> None:
    """Close a kept connection's driver connection now. ``close()`` alone would hand it back to the
    pool it came from, which after ``engine.dispose()`` is the old pool: the connection (and SQLite's
    WAL, which the last connection to close checkpoints and removes) would live on until garbage
    collection."""
    try:
        conn.invalidate()
        conn.close()
    except Exception:  # noqa: BLE001 - a broken connection is dropped either way
        pass


def _disk_bytes(path: Path) -> int:
    """The database and its WAL: what the file costs on disk."""
    total = 0
    for candidate in (path, path.with_name(path.name + "-wal")):
        try:
            total += candidate.stat().st_size
        except FileNotFoundError:
            pass
    return total


def _rollback(conn: sa.Connection) -> None:
    try:
        driver_sql.execute(conn, "ROLLBACK")
    except (ValueError, sa.exc.DBAPIError):
        pass  # SQLite already rolled back (e.g. after SQLITE_FULL); nothing is left to undo


def _begin_immediate(conn: sa.Connection, *, busy_timeout_is_zero: bool = False) -> None:
    """``BEGIN IMMEDIATE``, waiting for other processes' writers with the GIL released.

    The statements of a transaction's frame (this, COMMIT, ROLLBACK) go straight to the driver's
    cursor (``driver_sql``): every agent turn writes once, and SQLAlchemy's execution path cost more
    than the statements themselves. ``busy_timeout_is_zero``: the connection's timeout is 0 already
    (the kept write connection in WAL mode), so it is neither set nor restored here."""
    if conn.engine.url.database in (None, "", ":memory:"):
        driver_sql.execute(conn, "BEGIN IMMEDIATE")
        return
    if not busy_timeout_is_zero:
        driver_sql.execute(conn, "PRAGMA busy_timeout = 0")
    try:
        reading.wait_while_busy(lambda: driver_sql.execute(conn, "BEGIN IMMEDIATE"))
    finally:
        if not busy_timeout_is_zero:
            driver_sql.execute(conn, f"PRAGMA busy_timeout = {reading.BUSY_TIMEOUT_MS}")
            waiting = _waiting(conn)
            if waiting is not None:
                waiting.busy_timeout_zero = False


def _waiting(conn: sa.Connection) -> reading.WaitingConnection | None:
    """``conn``'s driver connection when its reads wait GIL-free (``_connect_waiting``), else None."""
    driver = conn.connection.driver_connection
    return driver if type(driver) is reading.WaitingConnection else None


def _busy_timeout_back(conn: sa.Connection) -> None:
    """A pooled connection about to run something that is not a read (a VACUUM, the kept writer's
    setup): SQLite's busy handler waits again, as it did before a read set the timeout to 0."""
    waiting = _waiting(conn)
    if waiting is not None and waiting.busy_timeout_zero:
        waiting.set_busy_timeout(reading.BUSY_TIMEOUT_MS)


def _connect_waiting(dialect: sa.engine.Dialect, _record: object, cargs: Sequence[object],
                     cparams: dict[str, object]) -> object:
    """A file's driver connection (SQLAlchemy's ``do_connect``), made as SQLAlchemy would: in a rollback
    journal mode a ``reading.WaitingConnection`` around it, whose reads wait for another process's lock
    GIL-free. In WAL mode the driver's own: a WAL read meets no lock, and no other process can take the
    file out of WAL while this connection is open (SQLite answers "database is locked"), so it costs
    nothing there. (A file locked now, whose mode cannot be read, is taken as not WAL.)"""
    raw = dialect.loaded_dbapi.connect(*cargs, **cparams)
    try:
        wal = str(raw.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"
    except ValueError:  # (libSQL's errors: "database is locked")
        wal = False
    return raw if wal else reading.WaitingConnection(raw)


def _end_read(conn: sa.Connection, waiting: reading.WaitingConnection | None) -> None:
    reading.end_read(conn)
    if waiting is not None:
        waiting.reading = False


def _check_file(path: Path, *, create: bool) -> None:
    if path.exists():
        if path.is_dir():
            raise DatabaseOpenError(f"{path} is a folder, not a database file. Choose a file inside it.")
        if not os.access(path, os.R_OK):
            raise DatabaseOpenError(f"{path} cannot be read (permission denied). Fix its permissions.")
        size = path.stat().st_size
        if size:
            with path.open("rb") as fh:
                header = fh.read(len(SQLITE_HEADER))
            if header != SQLITE_HEADER:
                raise DatabaseOpenError(
                    f"{path} is not a SQLite/libSQL database (its header does not match). "
                    "Open a .db file written by Memory Studio or Mastra."
                )
        return
    if not create:
        raise DatabaseOpenError(f"{path} does not exist. Check the path (`memory-studio where` shows which file is "
                                "used); a new database is made by an agent's first turn, or by `memory-studio demo`.")
    try:
        ensure_parent(path)
    except DatabaseLocationError:
        raise


def _explain_open_error(display: str, exc: Exception) -> str:
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return (
            f"{display} is locked by another process that is holding a long write. "
            "Wait for it to finish, or close the other program, then try again."
        )
    if "not a database" in text or "malformed" in text:
        return f"{display} is not a usable database ({exc.__class__.__name__}: {exc}). It was left unchanged."
    if "unable to open" in text or "cantopen" in text:
        return (
            f"Cannot open {display}: {exc}. SQLite could not open or create the file there: check that its folder "
            "exists, is a folder on an ordinary disk and is writable by this user, or choose another path."
        )
    return f"Cannot open {display}: {exc}"
