"""One open database in the Studio: the store, the worker pool, and change detection.

Panes get a ``StudioSession`` and never open their own connections. All I/O goes through
``session.pool``. ``changed`` fires when the file changed on disk (another process, or our own
save), detected by a cheap fingerprint query polled every second in a worker — so writes by an agent
process show up within two seconds without a manual refresh.

The same poll watches the file itself. A database file deleted (or replaced by another file) while
it is open would otherwise go on taking writes into a file nobody can see again: the session then
emits ``file_lost`` with a message, refuses every further write (``read_only`` turns True, and
``read_only_changed`` fires), and stops polling. ``check_file()`` asks the same question on demand,
so a save can say it was lost instead of reporting success.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from PySide6.QtCore import QObject, QTimer, Signal

from core import DatabaseOpenError, SchemaError, StorageError, open_store
from core.storage.errors import FileChangedError
from studio.workers import WorkerPool

if TYPE_CHECKING:  # pragma: no cover - the engine loads on the worker that first builds a Memory
    from core import Memory, MemoryOptions, Store

POLL_MS = 1000


class EmptyFileError(DatabaseOpenError):
    """The file exists but is empty (0 bytes): making it a database is the user's decision."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path} is an empty file (0 bytes), not a memory database yet.")
        self.path = path


def open_for_studio(path: str | Path | None, *, allow_writes: bool | None = None,
                    create_missing: bool = True, init_empty: bool = False) -> Store:
    """Open a database the way the Studio does: ours read-write, anything else read-only.

    The decision needs a look at the file first; that look uses a read-only connection, so a
    foreign database is never touched unless the user allows writes. ``create_missing=False`` (a
    path the user typed) reports a missing file instead of creating an empty database there. An
    existing empty file raises ``EmptyFileError`` unless ``init_empty`` (the user said yes). View > SQL Log
    lists the store's statements (``sql_log.watch``) until it is closed by ``sql_log.close_watched`` (a
    ``StudioSession`` closes it so), from its first statement on (``SqlLog.opening``: the look at the file too).
    """
    from studio.logic.sql_log import shared_log

    with shared_log().opening():
        return _open_for_studio(path, allow_writes=allow_writes, create_missing=create_missing, init_empty=init_empty)


def _open_for_studio(path: str | Path | None, *, allow_writes: bool | None,
                     create_missing: bool, init_empty: bool) -> Store:
    from core.storage.paths import resolve_db_path
    from studio.logic.sql_log import close_watched, watch

    def opened(store: Store) -> Store:
        watch(store)  # View > SQL Log lists its statements from here until it closes (``StudioSession``)
        return store

    resolved = resolve_db_path(path)
    if resolved.capabilities.server:
        # A server database is shared with other programs: look first, write only when allowed.
        return opened(open_store(path, read_only=not allow_writes, create=False))
    if resolved.path is not None and not create_missing and not resolved.path.exists():
        raise DatabaseOpenError(f"{resolved.path} does not exist.")
    if resolved.path is not None and resolved.path.is_file() and resolved.path.stat().st_size == 0:
        if not init_empty:
            raise EmptyFileError(resolved.path)
        return opened(open_store(path))
    if allow_writes is None:
        probe = opened(open_store(path, read_only=True, create=False)) if _exists(path) else None
        if probe is None:
            return opened(open_store(path))  # a new file is ours
        owned = probe.db.owned
        try:
            newer = probe.db.unknown_migrations()
        except BaseException:
            close_watched(probe)  # (a damaged file: its -wal and -shm go with the connections, as after any look)
            raise
        if owned and not newer and probe.db.refusal is None:  # (a refusal: its folder cannot be written)
            close_watched(probe)
            return opened(open_store(path))
        return probe
    return opened(open_store(path, read_only=not allow_writes, create=allow_writes))


@dataclass
class OpenedDatabase:
    """What the Studio learns when it opens a file (on a worker thread)."""

    store: Store
    newer_migrations: list[str]  # non-empty: written by a newer version, so open read-only
    has_data: bool  # any resource or thread (an empty default database gets demo data)
    baseline: "Baseline | None" = None  # what the change poll compares its first answer with


@dataclass(frozen=True)
class Baseline:
    """The file's identity and the change fingerprint when the database was opened, before any pane
    read it: a write or a replaced file between the open and the session's first poll is then seen
    as a change (the first poll used to take whatever it found as the starting point)."""

    identity: tuple[int, int] | None
    fingerprint: Any


def _file_of(store: Store) -> Path | None:
    """The database file the change poll watches (None: a server or an in-memory database)."""
    path = store.location.path
    return path if path is not None and str(path) != ":memory:" else None


def _identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def read_baseline(store: Store) -> Baseline | None:
    """``Baseline`` of an open store (on a worker thread); None for a database without memory tables."""
    if not store.db.is_mastra:
        return None
    path = _file_of(store)
    identity = None
    if path is not None:
        try:
            identity = _identity(os.stat(path))
        except OSError:
            identity = None
    try:
        fingerprint = store.db.change_fingerprint()
    except StorageError:  # (a damaged file still opens to show what is readable: the first poll starts it)
        fingerprint = None
    return Baseline(identity, fingerprint)


def open_studio_database(path: str | Path | None, *, allow_writes: bool | None = None,
                         create_missing: bool = True, init_empty: bool = False) -> OpenedDatabase:
    """Open, then check the file really is a memory database. Never changes a file it rejects."""
    store = open_for_studio(path, allow_writes=allow_writes, create_missing=create_missing, init_empty=init_empty)
    try:
        if not store.db.is_mastra and not store.db.is_empty:
            kind = "PostgreSQL" if store.capabilities.server else "SQLite"
            raise SchemaError(
                f"{store.location.display} is a {kind} database, but it has no memory tables (mastra_threads, "
                "mastra_messages). It was not written by Memory Studio or Mastra."
            )
        newer = store.db.unknown_migrations() if store.db.has_table("memory_studio_migrations") else []
        has_data = bool(store.db.is_mastra and store.memory.has_memory())  # (not counting: ~0.7 s at 1M messages)
        baseline = read_baseline(store)
    except BaseException:
        from studio.logic.sql_log import close_watched

        close_watched(store)
        raise
    return OpenedDatabase(store, newer, has_data, baseline)


def _exists(path: str | Path | None) -> bool:
    from core.storage.paths import resolve_db_path

    resolved = resolve_db_path(path)
    return resolved.path is not None and resolved.path.exists() and resolved.path.stat().st_size > 0


class DatabaseFileLostError(StorageError):
    """The open database file was deleted or replaced: what was just written went to a file nobody
    can open again."""


@dataclass(frozen=True)
class _FileLost:
    message: str


class StudioSession(QObject):
    changed = Signal()
    read_only_changed = Signal(bool)
    error = Signal(str)
    file_lost = Signal(str)  # the database file was deleted or replaced; the message says what to do
    # A server database stopped answering the change poll (the message says why), and answers again: what
    # the panes show may be out of date meanwhile, and nobody would know from the panes alone.
    server_lost = Signal(str)
    server_back = Signal()

    def __init__(self, store: Store, pool: WorkerPool | None = None, parent: QObject | None = None,
                 baseline: Baseline | None = None) -> None:
        """``baseline``: read when the database was opened (``read_baseline``); without it, the first
        poll's answer is the starting point."""
        super().__init__(parent)
        self.store = store
        self.pool = pool or WorkerPool(self)
        self.lost: str | None = None  # why the file is gone, once it is
        self._path: Path | None = _file_of(store)
        # (device, inode) of the file, and the change fingerprint: from the open, else from the first poll
        self._identity: tuple[int, int] | None = baseline.identity if baseline is not None else None
        self._fingerprint: Any = baseline.fingerprint if baseline is not None else None
        self._memories: dict[str, Memory] = {}
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self.poll)
        self._polling = False
        self.unreachable: str | None = None  # why the server does not answer, while it does not
        # The Mastra-written delegations the data proves, as the thread tree last loaded them
        # (``TreeData.delegations``): every pane's header names a resource as the tree does
        # (``thread_labels.resource_label``).
        self.delegations: Mapping[str, tuple[str, str]] = {}

    # -- identity --------------------------------------------------------------------------------
    @property
    def display_path(self) -> str:
        return self.store.location.display

    @property
    def target(self) -> str:
        """What to reopen this database with: the path, or the full Postgres URL (never shown)."""
        return getattr(self.store.location, "url", None) or self.store.location.display

    @property
    def read_only(self) -> bool:
        return self.store.read_only

    @property
    def owned(self) -> bool:
        return self.store.db.owned

    @property
    def write_refusal(self) -> str | None:
        """Why this database cannot be written whatever the user allows (its folder is not writable,
        or the file is gone), or None."""
        return self.store.db.refusal

    @property
    def write_advice(self) -> str:
        """What to do to change this database: the end of every refusal of an edit. File > Allow Writes…
        helps only a database open read-only by choice; a file whose folder cannot be written (or that was
        deleted or replaced) stays read-only whatever is allowed, so its refusal says what does help."""
        if self.lost is not None:
            return "Reopen the file (File > Open) to change it."
        if self.write_refusal is not None:
            return "Copy the file to a writable folder and open the copy (File > Open) to change it."
        return "Choose File > Allow Writes first."

    @property
    def frozen(self) -> bool:
        """Read as a snapshot of the file (its folder cannot be written): changes end the session."""
        return self.store.db.frozen_at is not None

    def start(self) -> None:
        self._timer.start()
        self.poll()

    def stop(self) -> None:
        self._timer.stop()

    # -- change detection ------------------------------------------------------------------------
    def poll(self) -> None:
        if self._polling:
            return
        self._polling = True
        self.pool.submit(self._read_fingerprint, on_result=self._on_fingerprint, on_error=self._on_poll_error)

    def _read_fingerprint(self) -> Any:
        problem = self._file_problem()
        if problem is not None:
            return _FileLost(problem)
        from studio.logic.sql_log import CHANGE_CHECK, purpose

        try:
            with purpose(CHANGE_CHECK):
                return self.store.db.change_fingerprint()
        except FileChangedError as exc:  # a snapshot whose file moved on: what is shown is not the file
            return _FileLost(str(exc))

    def _file_problem(self) -> str | None:
        """Why the open file is not the file at its path any more, or None (runs on a worker)."""
        if self._path is None:
            return None
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            return (f"The database file {self._path} was deleted while the Studio had it open. The Studio is now "
                    "read-only: anything written would be lost with the deleted file.")
        except OSError:
            return None  # a passing problem (a network folder): the next poll asks again
        identity = _identity(st)
        if self._identity is None:
            self._identity = identity
        elif identity != self._identity:
            return (f"The database file {self._path} was replaced by another file while the Studio had it open. "
                    "The Studio is now read-only: it still shows the old file, and anything written would be "
                    "lost with it. Reopen the file (File > Open) to see the new one.")
        return None

    def check_file(self) -> None:
        """Raise ``DatabaseFileLostError`` when the file was deleted or replaced (call it on a worker,
        after a write, so a save never reports success into a file that is gone)."""
        problem = self.lost or self._file_problem()
        if problem is not None:
            raise DatabaseFileLostError(problem)

    def _on_fingerprint(self, value: Any) -> None:
        self._polling = False
        if self.unreachable is not None:
            self.unreachable = None
            self.server_back.emit()
            self._fingerprint = value
            self.changed.emit()  # whatever was written meanwhile: the panes read again
            return
        if isinstance(value, _FileLost):
            self.mark_lost(value.message)
            return
        if self._fingerprint is not None and value != self._fingerprint:
            self._fingerprint = value
            self.changed.emit()
            return
        self._fingerprint = value

    def _on_poll_error(self, exc: BaseException) -> None:
        self._polling = False  # a busy file or a passing lock: try again on the next tick
        from core.storage.errors import DatabaseBusyError, StorageUnavailableError

        if (self.store.capabilities.server and isinstance(exc, StorageUnavailableError)
                and not isinstance(exc, DatabaseBusyError) and self.unreachable is None):
            self.unreachable = str(exc) or type(exc).__name__
            self.server_lost.emit(self.unreachable)

    def mark_lost(self, message: str) -> None:
        """The file is gone: refuse every further write, stop polling, and tell the window and panes."""
        if self.lost is not None:
            return
        self.lost = message
        self.stop()
        self.store.db.refuse_writes(f"{message} Nothing was written.")
        self.read_only_changed.emit(True)
        self.file_lost.emit(message)

    def notify_local_write(self) -> None:
        """Our own save: refresh now rather than on the next poll."""
        self._fingerprint = None
        self.poll()
        self.changed.emit()

    # -- engine access ---------------------------------------------------------------------------
    def memory(self, options: MemoryOptions | Mapping[str, Any] | None = None, *, name: str = "default",
               embedder: Any = None) -> Memory:
        """A Memory over this store (for previews and edits). Build it on a worker thread: semantic
        recall loads the embedding model."""
        from core import Memory, MemoryOptions

        opts = options if isinstance(options, MemoryOptions) else MemoryOptions(**dict(options or {}))
        key = f"{name}|{opts.to_dict()}|{id(embedder)}"
        mem = self._memories.get(key)
        if mem is None:
            mem = Memory(self.store, opts, name=name, embedder=embedder)
            self._memories[key] = mem
        return mem

    def run(self, fn: Callable[..., Any], on_result: Callable[[Any], None] | None = None,
            on_error: Callable[[BaseException], None] | None = None, key: str | None = None,
            on_progress: Callable[[int, int], None] | None = None) -> int:
        return self.pool.submit(fn, on_result=on_result, on_error=on_error or self._report, key=key,
                                on_progress=on_progress)

    def _report(self, exc: BaseException) -> None:
        self.error.emit(str(exc) or type(exc).__name__)

    def close(self) -> None:
        """Close now, on the calling thread (``begin_close`` then ``finish_close``)."""
        self.begin_close()
        self.finish_close()

    def begin_close(self) -> None:
        """The UI thread's part of closing: no more polls, and no late answer reaches a pane or the
        window (its jobs may still end while ``finish_close`` waits for them: their busy counts and
        errors must not reach widgets that are gone by then)."""
        self.stop()
        self.pool.shutdown()
        self.pool.blockSignals(True)
        self.blockSignals(True)

    def finish_close(self) -> None:
        """The waiting part, for a worker: running jobs end, then the store closes — which finishes
        its background work (a buffered observation may be in a model call) and writes the traces
        still queued. On the UI thread this would freeze the window for as long (``MainWindow``
        runs it on its pool)."""
        self.pool.wait(10_000)
        self._memories.clear()
        from studio.logic.sql_log import close_watched

        close_watched(self.store)  # (View > SQL Log lists the closing writes, then nothing more of this store)
