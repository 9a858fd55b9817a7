"""The composite store: the memory database and its observability domain.

``Store`` holds the database (``Database``: a libSQL file, or ``PgDatabase``: a Postgres server) and
opens, on first use, the trace store that ``core.traces.home`` says belongs to it.
"""

from __future__ import annotations

import os
import weakref
from typing import TYPE_CHECKING, Any, Callable, Protocol

from core.lazy_names import lazy_names
from core.storage.errors import (
    CorruptDatabaseError,
    DatabaseBusyError,
    DatabaseOpenError,
    DiskFullError,
    FileChangedError,
    InvalidValueError,
    ReadOnlyError,
    ReadOnlyFileError,
    SchemaError,
    StorageError,
    StorageUnavailableError,
    UnreadableValueError,
)

if TYPE_CHECKING:  # pragma: no cover
    from core.storage.capabilities import Capabilities
    from core.storage.paths import DatabaseLocationError, ResolvedPath, resolve_db_path
    from core.storage.database import Database
    from core.storage.memory_store import AlreadyExistsError, InvalidArgumentError, MemoryStore, NotFoundError
    from core.traces.pg_store import PgSpanStore
    from core.traces.store import ObservabilityStore
    from core.traces.tracer import Tracer


class _Closable(Protocol):
    def close(self, timeout: float | None = ...) -> bool: ...


class Store:
    """What the engine and the Studio hold: one database location, both domains."""

    def __init__(self, db: Database, *, observability_path: os.PathLike[str] | str | None = None) -> None:
        from core.storage.memory_store import MemoryStore

        self.db = db
        self.memory = MemoryStore(db)
        self._observability: Any = None
        self._observability_path = observability_path
        self.extensions: dict[str, Any] = {}  # per-store singletons (vector index, caches)
        # The background work of each memory over this store (``core.background``): finished or
        # cancelled by ``close`` before anything it writes to is closed.
        self._background: "weakref.WeakSet[Any]" = weakref.WeakSet()

    @property
    def location(self) -> ResolvedPath:
        return self.db.location

    @property
    def read_only(self) -> bool:
        return self.db.read_only

    @property
    def capabilities(self) -> Capabilities:
        """What this store's database backend can do (``core.storage.capabilities``)."""
        return self.db.capabilities

    @property
    def observability(self) -> "ObservabilityStore | PgSpanStore | None":
        """The store this database's spans are written to, opened on first use: where it is, is
        ``core.traces.home``'s decision (a trace file beside a database file; a server database's own
        span table); None for an in-memory database."""
        if self._observability is None:
            from core.traces.home import open_trace_store

            self._observability = open_trace_store(self, self._observability_path)
        return self._observability  # type: ignore[no-any-return]

    def tracer(self, **kwargs: Any) -> "Tracer":
        """This store's tracer (one per store, created on first use): spans go to ``observability``,
        or stay in memory when there is none (an in-memory database) or the store is read-only."""
        existing = self.extensions.get("tracer")
        if existing is not None:
            return existing.tracer  # type: ignore[no-any-return]
        from core.traces.home import tracer_for

        tracer = tracer_for(self, **kwargs)
        self.extensions["tracer"] = _TracerHandle(tracer)
        return tracer

    def pending_migrations(self) -> list[str]:
        """Migrations not yet applied (read-only)."""
        return self.db.pending_migrations()

    def migrate(self) -> list[str]:
        return self.db.migrate()

    def vacuum(self, progress: Callable[[str], None] | None = None) -> int:
        """Give the space freed by deletes back to the disk; returns the bytes reclaimed. ``progress``
        is told, in a sentence, what the vacuum waits for whenever it must wait (``Database.vacuum``)."""
        return self.db.vacuum(progress)

    def register_background(self, work: _Closable) -> None:
        """A memory's background work (``Memory.background``); ``close`` finishes it first."""
        self._background.add(work)

    def close(self) -> None:
        # Queued memory work (buffered observations, titles, embeddings) finishes or is cancelled
        # while the database and the tracer it writes to are still open.
        for work in list(self._background):
            work.close()
        for ext in self.extensions.values():
            close = getattr(ext, "close", None)
            if callable(close):
                close()
        self.extensions.clear()
        if self._observability is not None:
            self._observability.close()
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class _TracerHandle:
    """Lets ``Store.close`` shut the exporter down (writing what is queued) like any extension."""

    def __init__(self, tracer: "Tracer") -> None:
        self.tracer = tracer

    def close(self) -> None:
        self.tracer.shutdown()


def open_store(
    target: str | os.PathLike[str] | None = None,
    *,
    read_only: bool = False,
    create: bool = True,
    observability_path: str | os.PathLike[str] | None = None,
) -> Store:
    """Open the memory database.

    ``target`` may be a path, ``file:path``, ``:memory:`` or a ``postgresql://`` URL; without it the
    location is resolved from ``$MEMORY_STUDIO_DB``, then the ``.temp/memory.db`` of the project holding
    the calling code's file, then of the working directory's project, then the user data folder
    (``location.reason`` says which).
    """
    from core.storage.database import Database
    from core.storage.paths import caller_file, resolve_db_path

    location = resolve_db_path(target, caller=caller_file() if target is None or str(target) == "" else None)
    db: Database
    if getattr(location, "is_postgres", False):
        from core.storage.pg.database import PgDatabase

        db = PgDatabase(location, read_only=read_only, create=create)  # type: ignore[arg-type]
    else:
        db = Database(location, read_only=read_only, create=create)
    return Store(db, observability_path=observability_path)


# The database and the memory tables load SQLAlchemy, the path rules platformdirs: they load on first
# access (PEP 562), so that ``import core.storage`` and its errors (what the Studio's window needs
# before its first paint) stay cheap.
_LAZY = {
    "AlreadyExistsError": "core.storage.memory_store",
    "Capabilities": "core.storage.capabilities",
    "Database": "core.storage.database",
    "DatabaseLocationError": "core.storage.paths",
    "InvalidArgumentError": "core.storage.memory_store",
    "MemoryStore": "core.storage.memory_store",
    "NotFoundError": "core.storage.memory_store",
    "ResolvedPath": "core.storage.paths",
    "resolve_db_path": "core.storage.paths",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())


__all__ = [
    "AlreadyExistsError",
    "Capabilities",
    "CorruptDatabaseError",
    "Database",
    "DatabaseBusyError",
    "DatabaseLocationError",
    "DatabaseOpenError",
    "DiskFullError",
    "FileChangedError",
    "InvalidArgumentError",
    "InvalidValueError",
    "MemoryStore",
    "NotFoundError",
    "ReadOnlyError",
    "ReadOnlyFileError",
    "ResolvedPath",
    "SchemaError",
    "StorageError",
    "StorageUnavailableError",
    "Store",
    "UnreadableValueError",
    "open_store",
    "resolve_db_path",
]
