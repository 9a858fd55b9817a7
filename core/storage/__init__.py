"""The composite store: the default domain (libSQL file) and the observability domain (DuckDB file).

Conversations are user data that cannot be rebuilt; traces are derived data. So they live in two
files and two engines (seed 001): deleting ``observability.duckdb`` never loses a conversation.
On Postgres both live in the one database, since a fleet of hosts shares no folder: traces go to
Mastra's ``mastra_ai_spans`` table there (``core.traces.pg_store``).
"""

from __future__ import annotations

import os
import weakref
from typing import TYPE_CHECKING, Any, Protocol

from core.storage.capabilities import Capabilities
from core.storage.database import (
    CorruptDatabaseError,
    Database,
    DatabaseOpenError,
    DiskFullError,
    InvalidValueError,
    ReadOnlyError,
    ReadOnlyFileError,
    SchemaError,
    StorageError,
    StorageUnavailableError,
    UnreadableValueError,
)
from core.storage.memory_store import AlreadyExistsError, InvalidArgumentError, MemoryStore, NotFoundError
from core.storage.paths import DatabaseLocationError, ResolvedPath, caller_file, resolve_db_path

if TYPE_CHECKING:  # pragma: no cover
    from core.traces.pg_store import PgSpanStore
    from core.traces.store import ObservabilityStore
    from core.traces.tracer import Tracer


class _Closable(Protocol):
    def close(self, timeout: float | None = ...) -> bool: ...


class Store:
    """What the engine and the Studio hold: one database location, both domains."""

    def __init__(self, db: Database, *, observability_path: os.PathLike[str] | str | None = None) -> None:
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
        """The DuckDB trace store beside the database (None for in-memory databases); on Postgres, the
        database's own ``mastra_ai_spans`` table, since a fleet of hosts shares no folder."""
        if self._observability is None and self.db.engine.dialect.name == "postgresql" \
                and self._observability_path is None:
            from core.traces.pg_store import PgSpanStore

            self._observability = PgSpanStore(self.db, read_only=self.read_only, retention=retention_from_env())
        if self._observability is None:
            path = self._observability_path or self.location.observability_path
            if path is None:
                return None
            from core.traces.store import ObservabilityStore

            self._observability = ObservabilityStore(path, read_only=self.read_only, retention=retention_from_env())
        return self._observability  # type: ignore[no-any-return]

    def tracer(self, **kwargs: Any) -> "Tracer":
        """A tracer whose spans go to this store's DuckDB file, or on Postgres to the database's
        ``mastra_ai_spans`` table (one per store, created on first use).

        In-memory databases have no trace file; their tracer keeps spans in memory.
        """
        existing = self.extensions.get("tracer")
        if existing is not None:
            return existing.tracer  # type: ignore[no-any-return]
        from core.traces.otel_config import with_env_exporters
        from core.traces.tracer import InMemorySpanExporter, Tracer

        obs = self.observability
        if obs is None or self.read_only:
            tracer = Tracer(with_env_exporters(InMemorySpanExporter()), **kwargs)
        else:
            from core.traces.exporter import DuckDBSpanExporter

            # Plus an OpenTelemetry backend when MEMORY_STUDIO_OTEL_ENDPOINT (or OTEL_*) names one.
            tracer = Tracer(with_env_exporters(DuckDBSpanExporter(obs)), **kwargs)
        self.extensions["tracer"] = _TracerHandle(tracer)
        return tracer

    def pending_migrations(self) -> list[str]:
        """Migrations not yet applied (read-only)."""
        return self.db.pending_migrations()

    def migrate(self) -> list[str]:
        return self.db.migrate()

    def vacuum(self) -> int:
        """Give the space freed by deletes back to the disk; returns the bytes reclaimed."""
        return self.db.vacuum()

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


RETENTION_DAYS_ENV = "MEMORY_STUDIO_TRACES_KEEP_DAYS"
RETENTION_MB_ENV = "MEMORY_STUDIO_TRACES_KEEP_MB"
DEFAULT_KEEP_DAYS = 30.0
DEFAULT_KEEP_MB = 1024.0


def retention_from_env(env: "os._Environ[str] | dict[str, str] | None" = None) -> Any:
    """Trace retention: keep 30 days and at most 1 GB unless the environment says otherwise.

    Unbounded span tables were a real complaint against Mastra (23 GB, no pruning); a value of
    ``0`` or ``off`` disables that limit.
    """
    from core.traces.store import RetentionSettings

    env = os.environ if env is None else env

    def read(name: str, default: float) -> float | None:
        raw = str(env.get(name, "")).strip().lower()
        if not raw:
            return default
        if raw in ("0", "off", "none"):
            return None
        try:
            value = float(raw)
        except ValueError:
            raise StorageError(f"{name} must be a number (or 'off'), got {raw!r}.") from None
        from core.traces.store import retention_limit

        try:  # the same rule as `memory-studio traces prune`: 0 is no limit, negative is refused
            return retention_limit(value, name)
        except ValueError as exc:
            raise StorageError(str(exc)) from None

    return RetentionSettings(keep_days=read(RETENTION_DAYS_ENV, DEFAULT_KEEP_DAYS),
                             keep_mb=read(RETENTION_MB_ENV, DEFAULT_KEEP_MB))


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
    location = resolve_db_path(target, caller=caller_file() if target is None or str(target) == "" else None)
    db: Database
    if getattr(location, "is_postgres", False):
        from core.storage.pg.database import PgDatabase

        db = PgDatabase(location, read_only=read_only, create=create)  # type: ignore[arg-type]
    else:
        db = Database(location, read_only=read_only, create=create)
    return Store(db, observability_path=observability_path)


__all__ = [
    "AlreadyExistsError",
    "Capabilities",
    "CorruptDatabaseError",
    "Database",
    "DatabaseLocationError",
    "DatabaseOpenError",
    "DiskFullError",
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
