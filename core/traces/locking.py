"""Short-lived DuckDB connections that wait politely for another process's lock.

DuckDB lets one process open a file for writing, and while it does no other process can open the
file at all, not even read-only (checked with DuckDB 2.0: "Conflicting lock is held"). The agent
process writes spans and the Studio reads them, so both sides open a connection only for one
batch or one query, close it at once, and retry with backoff when the other side holds it.

Two extra locks sit in front of DuckDB's own:

* an in-process lock per file, because DuckDB refuses a read-only and a read-write connection to
  the same file inside one process ("different configuration"), and because threads of one process
  would otherwise spin against each other;
* a sidecar ``<file>.lock`` taken shared by every open and exclusively by compaction, which
  replaces the file by a rewritten copy: without it a writer could slip in between the copy and
  the rename and lose its batch;
* a write-intent flag ``<file>.write-intent`` that a waiting writer raises so readers step aside
  (see ``open_duckdb``);
* a wanted flag ``<file>.wanted`` that anyone waiting for the file holds (shared) while it waits:
  the span writer keeps its connection open between writes (``keep=True``, a *lease*: opening the
  file cost ~30–40 ms of CPU and closing it ~20–30 ms, once a second under a steady stream of turns)
  only while nobody raises it, and checks it every few milliseconds (``release_if_wanted``), so a
  reader, another writer or a compaction waits about that long, as it would for one write.

The sidecars are locked with ``portalocker``: ``flock`` on POSIX, ``LockFileEx`` on Windows (shared
and exclusive alike), so compaction's copy-and-rename is gated and writers go first on every platform.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import duckdb
import portalocker

from core.errors import MemoryStudioError

log = logging.getLogger(__name__)


class StoreBusy(MemoryStudioError):
    """The trace file stayed locked by someone else for the whole retry budget."""

    def __init__(self, path: Path | str, waited_s: float) -> None:  # str: a Postgres table
        super().__init__(f"{path} is locked by another process (waited {waited_s:.3f}s)")
        self.path = path
        self.waited_s = waited_s


class StoreMissing(MemoryStudioError):
    """A read-only open found no file, or one another process is creating this moment (``_unborn``):
    there is no trace store yet."""


#: DuckDB's file starts with three 4 KiB headers (the main one and two database headers): a new file is
#: 12,288 bytes once DuckDB has written them, and shorter only while it is being created or when its
#: creation was cut short (checked with DuckDB 2.0).
HEADERS_BYTES = 3 * 4096
#: How recently a short file must have been written to be taken for one being created: DuckDB writes the
#: headers within milliseconds of creating the file.
BEING_CREATED_S = 2.0
_MAGIC = b"DUCK"  # at offset 8 of the main header, after its checksum


def _unborn(path: Path, exc: BaseException) -> bool:
    """Whether a read-only open failed because another process is creating the file this moment: DuckDB
    says it is not a valid database file (or could not read a header), and the file is shorter than the
    headers by whole 4 KiB blocks, was written in the last ``BEING_CREATED_S`` and holds nothing but zeros
    or the start of DuckDB's headers (the writer's ``open`` makes the file before it writes them, and no lock
    covers the gap). An older short file, one cut elsewhere or one holding other bytes is a broken file,
    reported as such (a crash while creating it or a full disk; the writer sets it aside,
    ``core.traces.recovery``)."""
    said = str(exc).lower()
    if "not a valid duckdb database file" not in said and "could not read enough bytes" not in said:
        return False
    try:
        with path.open("rb") as f:
            info = os.fstat(f.fileno())
            head = f.read(HEADERS_BYTES)
    except FileNotFoundError:
        return True  # gone meanwhile: nothing to read either
    except OSError:
        return False
    if info.st_size >= HEADERS_BYTES or info.st_size % 4096 or time.time() - info.st_mtime > BEING_CREATED_S:
        return False  # (DuckDB writes whole 4 KiB blocks: a file cut elsewhere was cut, not being written)
    return not head.strip(b"\0") or head[8:12] == _MAGIC


@dataclass
class WaitStats:
    """How long opens had to wait; filled in for reports and benchmarks, never asserted on."""

    opens: int = 0
    conflicts: int = 0
    busy_failures: int = 0
    max_wait_s: float = 0.0

    def record(self, waited_s: float) -> None:
        self.opens += 1
        self.max_wait_s = max(self.max_wait_s, waited_s)


_registry_lock = threading.Lock()
_process_locks: dict[str, threading.Lock] = {}
#: How long an open may wait behind this process's own opens of the same file, on top of its budget.
IN_PROCESS_QUEUE_S = 30.0


def _process_lock(path: Path) -> threading.Lock:
    key = str(path.resolve())
    with _registry_lock:
        return _process_locks.setdefault(key, threading.Lock())


def is_lock_conflict(exc: BaseException) -> bool:
    """Whether an open failed because someone holds the file, which ends when they close it: another
    process's lock, or a connection of this process opened with other settings (DuckDB's ConnectionException
    "... with a different configuration than existing connections": read-only against read-write, or
    another ``threads``), such as one a program embedding the engine keeps open outside ``open_duckdb``."""
    message = str(exc).lower()
    if "different configuration" in message:
        return True
    return "lock" in message and ("conflict" in message or "could not set" in message)


#: Told of each statement run on a connection ``open_duckdb`` hands out: (file, statement, parameters,
#: read_only, in_database), on the thread that runs it, just before it runs (``observe_statements``).
#: ``in_database``: the file is the memory database itself, not a trace file (a Mastra database's own spans
#: table, read by ``core.traces.libsql_reader`` on a connection of its own).
StatementObserver = Callable[[Path, str, Any, bool, bool], None]
_observers: tuple[StatementObserver, ...] = ()  # replaced whole, never changed in place: no lock to read it
_observers_lock = threading.Lock()


def observe_statements(observer: StatementObserver) -> Callable[[], None]:
    """Tell ``observer`` of every statement run from now on through a connection ``open_duckdb`` hands out (the
    Studio's SQL Log lists the trace file's reads with its memory database's). Returns the call that stops it.
    A connection opened while nobody observes is the plain DuckDB one and stays unobserved; an observer that
    raises is ignored, never the statement's failure."""
    global _observers
    with _observers_lock:
        _observers = (*_observers, observer)

    def stop() -> None:
        global _observers
        with _observers_lock:
            _observers = tuple(o for o in _observers if o is not observer)

    return stop


class _Observed:
    """A connection (DuckDB's, or libSQL's for a database's spans table) whose statements (``execute``,
    ``executemany``, ``sql``, ``query``) are told to the observers before they run; everything else is the
    connection's own."""

    __slots__ = ("_con", "_in_database", "_path", "_read_only")

    def __init__(self, con: Any, path: Path, read_only: bool, in_database: bool = False) -> None:
        self._con = con
        self._path = path
        self._read_only = read_only
        self._in_database = in_database

    def _tell(self, statement: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        params = args[0] if args else kwargs.get("parameters", kwargs.get("params"))
        for observer in _observers:
            try:
                observer(self._path, str(statement), params, self._read_only, self._in_database)
            except Exception:  # noqa: BLE001 - a log line must never fail the statement
                log.debug("a statement observer failed", exc_info=True)

    def _run(self, method: str, statement: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self._tell(statement, args, kwargs)
        # (``execute`` returns the plain connection: a statement chained onto it, ``execute(a).execute(b)``,
        # would go untold; nothing here chains one. Handing this wrapper back instead cost ~10 µs a statement.)
        return getattr(self._con, method)(statement, *args, **kwargs)

    def execute(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
        return self._run("execute", statement, args, kwargs)

    def executemany(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
        return self._run("executemany", statement, args, kwargs)

    def sql(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
        return self._run("sql", statement, args, kwargs)

    def query(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
        return self._run("query", statement, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def _observed(con: duckdb.DuckDBPyConnection, path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    return cast(duckdb.DuckDBPyConnection, _Observed(con, path, read_only)) if _observers else con


def observed_database_reader(con: Any, path: Path) -> Any:
    """A connection that only reads the memory database ``path`` itself (a Mastra database's spans table), its
    statements told to the observers like a trace file's (``in_database``), so the SQL Log lists them too."""
    return _Observed(con, path, True, in_database=True) if _observers else con


_GATE = ".lock"
_WRITE_INTENT = ".write-intent"
_WANTED = ".wanted"


@dataclass
class _Lease:
    """A writer's connection kept open between writes, with the shared gate it was opened under.
    Used and ended only under the file's in-process lock."""

    con: duckdb.DuckDBPyConnection
    gate: IO[bytes] | None
    identity: tuple[int, int]  # the file's (device, inode) when opened: a replaced file ends the lease
    threads: int | None
    pid: int


_leases: dict[str, _Lease] = {}


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _end_lease(key: str) -> None:
    """Close a kept connection (DuckDB checkpoints on close). The caller holds the in-process lock."""
    lease = _leases.pop(key, None)
    if lease is None or lease.pid != os.getpid():
        return  # none, or the parent's copy in a forked child: the parent closes its own
    try:
        lease.con.close()
    except duckdb.Error:
        log.warning("closing the kept trace-file connection failed", exc_info=True)
    finally:
        _release(lease.gate)


def _wanted(path: Path) -> bool:
    """Whether anyone (another process, or a compaction) is waiting for the file."""
    free, probe = _try_lock(path, _WANTED, exclusive=True)
    _release(probe)
    return not free


def release_if_wanted(path: Path, *, force: bool = False) -> bool:
    """End this process's lease on ``path`` when someone waits for the file (``force``: in any
    case, after this process's own use of the file in progress). True when no lease is left.
    Without ``force`` it never waits behind this process's own use of the file."""
    key = str(path.resolve())
    if key not in _leases:
        return True
    plock = _process_lock(path)
    if not plock.acquire(blocking=force):
        return False  # in use right now; the user keeps or ends it when done
    try:
        if key in _leases and (force or _wanted(path)):
            _end_lease(key)
        return key not in _leases
    finally:
        plock.release()


def holds_lease(path: Path) -> bool:
    return str(path.resolve()) in _leases


def _try_lock(path: Path, suffix: str, exclusive: bool) -> tuple[bool, IO[bytes] | None]:
    """Take a sidecar lock without blocking: (acquired, handle to release when done)."""
    try:
        handle = open(path.with_name(path.name + suffix), "ab")
    except OSError:
        return True, None  # read-only directory: fall back to DuckDB's own lock alone
    mode = portalocker.LOCK_EX if exclusive else portalocker.LOCK_SH
    try:
        portalocker.lock(handle, mode | portalocker.LOCK_NB)
    except portalocker.AlreadyLocked:
        handle.close()
        return False, None
    except portalocker.LockException:  # a file system without locks: DuckDB's own lock alone
        log.warning("cannot lock %s; trace compaction is not gated on this file system", handle.name, exc_info=True)
        handle.close()
        return True, None
    return True, handle


def _release(handle: IO[bytes] | None) -> None:
    if handle is not None:
        try:
            portalocker.unlock(handle)
        finally:
            handle.close()


def _writer_waiting(path: Path) -> bool:
    free, probe = _try_lock(path, _WRITE_INTENT, exclusive=False)
    _release(probe)
    return not free


@contextmanager
def gated(path: Path, *, exclusive: bool, budget_s: float) -> Iterator[None]:
    """Hold only the sidecar lock (used by compaction around close-and-rename)."""
    start = time.monotonic()
    delay = 0.002
    wanted: IO[bytes] | None = None
    try:
        while True:
            if exclusive and str(path.resolve()) in _leases:
                with _process_lock(path):  # this process's own kept connection holds the gate shared
                    _end_lease(str(path.resolve()))
            acquired, handle = _try_lock(path, _GATE, exclusive)
            if acquired:
                break
            if wanted is None:  # another process's kept connection lets go when it sees this
                _, wanted = _try_lock(path, _WANTED, exclusive=False)
            if time.monotonic() - start >= budget_s:
                raise StoreBusy(path, time.monotonic() - start)
            time.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, 0.05)
    finally:
        _release(wanted)
    try:
        yield
    finally:
        _release(handle)


@contextmanager
def open_duckdb(
    path: Path,
    *,
    read_only: bool,
    budget_s: float,
    stats: WaitStats | None = None,
    hold_gate: bool = True,
    threads: int | None = None,
    keep: bool = False,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open ``path``, retrying lock conflicts until ``budget_s``; closes on exit.

    Writers go first: a writer that finds the file busy raises a write-intent flag (an exclusive
    lock on ``<file>.write-intent``) and readers start no new query while it is up. Without it a
    Studio polling back to back can starve the agent's flusher indefinitely, because each open
    costs DuckDB tens of milliseconds and the gaps between a reader's queries are tiny.

    ``hold_gate=False`` is for compaction, which already holds the sidecar lock exclusively.
    ``threads``: DuckDB's worker threads for this connection (default: one per core).
    ``keep`` (a writer's): the connection stays open after the block as this process's lease on the
    file, unless someone is waiting for it, and the next ``keep`` open of the same file reuses it;
    any other open of the file in this process ends it first. A block that raises ends it.
    Raises ``StoreBusy`` when the budget runs out, ``StoreMissing`` for a read-only open of a file
    that does not exist.
    """
    start = time.monotonic()
    delay = 0.002
    max_delay = 0.05 if read_only else 0.01  # a waiting writer grabs the first gap
    plock = _process_lock(path)
    key = str(path.resolve())
    intent: IO[bytes] | None = None
    wanted: IO[bytes] | None = None
    # Time spent queued behind this process's own opens is not "busy": each holder keeps the lock only
    # while it opens the file and runs its query (never while it sleeps between retries), so the wait
    # always ends. The budget measures other processes' locks; under a loaded machine several reads of
    # one pane used to spend it queued behind each other and came back empty.
    queued = 0.0

    def spent() -> float:
        return time.monotonic() - start - queued

    if read_only and not path.exists() and not path.with_name(path.name + _GATE).exists():
        # No file and no writer ever here (one leaves its gate file; so does a recovery that moves a
        # broken file aside): nothing to wait for, and looking leaves no lock files beside the database.
        raise StoreMissing(str(path))
    try:
        while True:
            remaining = budget_s - spent()
            asked = time.monotonic()
            if not plock.acquire(timeout=max(remaining, 0.0) + IN_PROCESS_QUEUE_S):
                break
            queued += time.monotonic() - asked
            gate: IO[bytes] | None = None
            try:
                lease = _leases.get(key)
                if lease is not None:
                    if (keep and not read_only and hold_gate and lease.threads == threads
                            and lease.pid == os.getpid() and _identity(path) == lease.identity):
                        _release(intent)
                        intent = None
                        _release(wanted)
                        wanted = None
                        if stats is not None:
                            stats.record(time.monotonic() - start)
                        try:
                            yield _observed(lease.con, path, False)
                        except BaseException:
                            _end_lease(key)
                            raise
                        if _wanted(path):
                            _end_lease(key)
                        return
                    _end_lease(key)
                acquired, gate = _try_lock(path, _GATE, exclusive=False) if hold_gate else (True, None)
                if acquired and read_only and _writer_waiting(path):
                    acquired = False
                if acquired:
                    if read_only and not path.exists():
                        raise StoreMissing(str(path))
                    try:
                        con = duckdb.connect(str(path), read_only=read_only,
                                             config={"threads": threads} if threads else {})
                    except (duckdb.IOException, duckdb.ConnectionException) as exc:
                        if read_only and isinstance(exc, duckdb.IOException) and _unborn(path, exc):
                            raise StoreMissing(str(path)) from exc
                        if not is_lock_conflict(exc):
                            raise
                    else:
                        _release(intent)  # we hold DuckDB's lock now; readers wait on that
                        intent = None
                        _release(wanted)
                        wanted = None
                        if stats is not None:
                            stats.record(time.monotonic() - start)
                        identity = _identity(path) if keep and not read_only and hold_gate else None
                        try:
                            yield _observed(con, path, read_only)
                        except BaseException:
                            con.close()
                            raise
                        if identity is not None and not _wanted(path):
                            _leases[key] = _Lease(con, gate, identity, threads, os.getpid())
                            gate = None  # the lease holds it now
                        else:
                            con.close()
                        return
            finally:
                _release(gate)
                plock.release()
            if not read_only and intent is None:
                # A second writer may hold the flag already; then we just keep trying.
                _, intent = _try_lock(path, _WRITE_INTENT, exclusive=True)
            if wanted is None:  # another process's kept connection lets go when it sees this
                _, wanted = _try_lock(path, _WANTED, exclusive=False)
            if stats is not None:
                stats.conflicts += 1
            if spent() >= budget_s:
                break
            # Jitter keeps two pollers from retrying in lockstep forever.
            pause = delay * random.uniform(0.5, 1.5)
            time.sleep(min(pause, max(budget_s - spent(), 0)))
            delay = min(delay * 2, max_delay)
    finally:
        _release(intent)
        _release(wanted)
    if stats is not None:
        stats.busy_failures += 1
    raise StoreBusy(path, time.monotonic() - start)
