"""Running spans: what a span still open is written as, and whether the process writing it is alive.

A run that takes long (a slow model, a tool that blocks) would show nothing until its root span ends,
because a span is exported when it ends. So the span writer also writes each span that has been
open for a while as a *running row*: the span's values so far, ``endedAt`` null, and in ``metadata``
under ``RUNNING_KEY`` who writes it (``{"writer": <id>, "pid": ..., "host": ...}``). The finished
span replaces that row when it ends (``core.traces.store``: a running row gives way to a finished
one, never the other way round), so the mark never outlives the run.

If the writing process dies first, the running row stays. The evidence that it died is a lock, not
a clock: every writing process holds an exclusive lock on ``<trace file>.live-<writer id>`` for as
long as it lives (``WriterLease``), and the operating system lets go of it when the process ends,
however it ends. A reader probes that lock with a shared, non-blocking attempt that creates nothing
(``writer_alive``): taken means nobody holds it, so the run never finished. A process id alone could
be reused by another program; a heartbeat would call a writer dead while it waits for a busy file.

A Postgres span table has no folder its writers share, so there the lease is a session-level advisory
lock instead (``core.traces.pg_store.PgWriterLease``): the same ``Lease`` shape, the same mark.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from pathlib import Path
from typing import IO, Any, Protocol

import portalocker

log = logging.getLogger(__name__)

#: The ``metadata`` key of a running row; its value names the writer (never present on a finished span).
RUNNING_KEY = "memoryStudio.running"
_LIVE_INFIX = ".live-"


class Lease(Protocol):
    """A writing process's proof of life, as the span writer uses it: ``mark`` goes into each running
    row's ``metadata``; ``acquire`` takes it (once; False: no running rows, nobody could tell this
    writer died); ``keep``, called while running rows of it are open, makes sure it still holds (taking
    it again if it was lost); ``close`` ends it, so its running rows read as never finished."""

    writer: str
    mark: dict[str, Any]

    def acquire(self) -> bool: ...

    def keep(self) -> None: ...

    def close(self) -> None: ...


def new_writer() -> tuple[str, dict[str, Any]]:
    """A fresh writer id and the mark its running rows carry."""
    writer = f"{os.getpid()}-{secrets.token_hex(6)}"
    return writer, {RUNNING_KEY: {"writer": writer, "pid": os.getpid(), "host": socket.gethostname()}}


def live_file(trace_file: Path, writer: str) -> Path:
    return trace_file.with_name(f"{trace_file.name}{_LIVE_INFIX}{writer}")


def running_writer(metadata: object) -> str | None:
    """The writer id of a running row's ``metadata``; None for any other span (Mastra's own running
    spans included: nothing says who writes them)."""
    if not isinstance(metadata, dict):
        return None
    mark = metadata.get(RUNNING_KEY)
    writer = mark.get("writer") if isinstance(mark, dict) else None
    return writer if isinstance(writer, str) and writer else None


def writer_alive(trace_file: Path, writer: str) -> bool | None:
    """True while the writer's process holds its lease, False once it is gone (its lock free, or its
    file removed), None when this cannot be told (a file system without locks, no permission).

    Opens the file read-only and takes a shared lock for an instant: looking creates and changes
    nothing, and two readers probing at once do not disturb each other."""
    if not writer or "/" in writer or os.sep in writer:
        return None
    try:
        handle = open(live_file(trace_file, writer), "rb")  # noqa: SIM115 - released below
    except FileNotFoundError:
        return False
    except OSError:
        return None
    try:
        portalocker.lock(handle, portalocker.LOCK_SH | portalocker.LOCK_NB)
    except portalocker.AlreadyLocked:
        return True
    except portalocker.LockException:
        return None
    else:
        portalocker.unlock(handle)
        return False
    finally:
        handle.close()


def live_writers(trace_file: Path) -> tuple[tuple[str, bool | None], ...]:
    """(writer id, alive) of every lease file beside ``trace_file``: part of what the Studio's poll
    compares, so a writer dying (or leaving) makes its running rows be read again. No DuckDB open."""
    try:
        names = sorted(p.name for p in trace_file.parent.glob(f"{trace_file.name}{_LIVE_INFIX}*"))
    except OSError:
        return ()
    prefix = len(trace_file.name) + len(_LIVE_INFIX)
    return tuple((name[prefix:], writer_alive(trace_file, name[prefix:])) for name in names)


class WriterLease:
    """This process's proof of life for one trace file, held from its first running row to shutdown.

    ``mark`` is what its running rows carry. ``close`` removes the file (a clean end); a killed
    process leaves it unlocked, which says the same, and the next lease taken beside it removes it."""

    def __init__(self, trace_file: Path) -> None:
        self.trace_file = trace_file
        self.writer, self.mark = new_writer()
        self._handle: IO[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def held(self) -> bool:
        return self._handle is not None

    def acquire(self) -> bool:
        """Take the lease (once); False when no lease file can be locked here: then no running rows
        are written, since nothing could ever tell a reader that this writer died."""
        with self._lock:
            if self._handle is not None:
                return True
            _remove_dead_leases(self.trace_file)
            path = live_file(self.trace_file, self.writer)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                handle = open(path, "ab")  # noqa: SIM115 - held for the life of the process
            except OSError as exc:
                log.warning("cannot create %s (%s); runs in progress are not shown until they end", path, exc)
                return False
            try:
                portalocker.lock(handle, portalocker.LOCK_EX | portalocker.LOCK_NB)
            except portalocker.LockException as exc:
                handle.close()
                log.warning("cannot lock %s (%s); runs in progress are not shown until they end", path, exc)
                return False
            self._handle = handle
            return True

    def keep(self) -> None:
        """Nothing to do: the operating system keeps a file lock for as long as the process lives."""

    def close(self) -> None:
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is None:
                return
            try:
                live_file(self.trace_file, self.writer).unlink(missing_ok=True)
            except OSError:
                log.debug("could not remove this writer's lease file", exc_info=True)
            try:
                portalocker.unlock(handle)
            finally:
                handle.close()


def _remove_dead_leases(trace_file: Path) -> None:
    """Remove the lease files of writers that are gone (writers may change files; readers never do)."""
    try:
        paths = list(trace_file.parent.glob(f"{trace_file.name}{_LIVE_INFIX}*"))
    except OSError:
        return
    for path in paths:
        try:
            handle = open(path, "rb")  # noqa: SIM115 - released below
        except OSError:
            continue
        try:
            portalocker.lock(handle, portalocker.LOCK_EX | portalocker.LOCK_NB)
        except portalocker.LockException:
            handle.close()
            continue  # alive (or cannot tell): leave it
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass
        finally:
            portalocker.unlock(handle)
            handle.close()


__all__ = ["RUNNING_KEY", "Lease", "WriterLease", "new_writer", "live_file", "live_writers", "running_writer", "writer_alive"]
