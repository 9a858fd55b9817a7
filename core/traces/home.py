"""Where a database's traces live: the one answer, for the engine, the CLI and the Studio.

Conversations are user data that cannot be rebuilt; traces are derived data. So for a database file
they live in a second file and engine beside it (seed 001): ``observability.duckdb`` in the same
folder, and deleting it never loses a conversation. A second database in that folder has its own,
``<file name>.observability.duckdb`` (``core.storage.location.trace_file_for``). A database whose backend keeps traces in the
database itself (``Capabilities.traces_in_database``: a server shared by a fleet of hosts that share
no folder) has them in its own ``mastra_ai_spans`` table (``core.traces.pg_store``). An in-memory
database has no trace store: its spans stay in memory.

One case is for readers only: a Mastra database file that holds Mastra's own ``mastra_ai_spans``
table and has no DuckDB file beside it yet is read from that table (``core.traces.libsql_reader``).

``Store.observability`` and ``Store.tracer()`` open what this module names; ``memory-studio traces``
and ``where`` print it; the Studio's Traces pane reads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from core.storage.errors import StorageError
from core.storage.location import trace_file_for, try_claim_trace_file
from core.traces.spans import SPANS_TABLE

if TYPE_CHECKING:  # pragma: no cover
    from core.storage.database import Database
    from core.storage.location import ResolvedPath
    from core.traces.pg_store import PgSpanStore
    from core.traces.store import DuckDBObservabilityStore, RetentionSettings
    from core.traces.tracer import Tracer


class TracedStore(Protocol):
    """What the trace home needs of a store (``core.storage.Store``): where the database is, the open
    database, whether it may be written, and (for a tracer) the trace store it opened."""

    @property
    def location(self) -> "ResolvedPath": ...

    @property
    def read_only(self) -> bool: ...

    db: "Database"

    @property
    def observability(self) -> "DuckDBObservabilityStore | PgSpanStore | None": ...

TraceKind = Literal["duckdb", "libsql", "memory", "postgres"]
"""``duckdb``: the trace file beside the database file. ``postgres``: the database's own
``mastra_ai_spans`` table. ``libsql``: Mastra's own ``mastra_ai_spans`` table inside a database file
(read only). ``memory``: nowhere (an in-memory database)."""


@dataclass(frozen=True)
class TraceHome:
    """Where one database's traces are kept."""

    kind: TraceKind
    display: str
    """Where, as a person is shown it (a Postgres URL without its password)."""
    path: Path | None = None
    """The file that holds them: the DuckDB file (``duckdb``), the database file (``libsql``)."""
    files: tuple[Path, ...] = ()
    """The files whose change on disk means new spans: the file and its write-ahead log (for Mastra's
    table, also the trace file an agent of ours would start); none for a table on a server."""


def trace_home(location: "ResolvedPath", db: "Database | None" = None) -> TraceHome:
    """Where the traces of the database at ``location`` are kept.

    Without ``db``, where they are written. With ``db`` (the open database, for a reader): a
    database file holding Mastra's own ``mastra_ai_spans`` table and no trace file yet is read from
    that table.
    """
    if location.capabilities.traces_in_database:
        return TraceHome("postgres", f"{location.display} ({SPANS_TABLE})")
    duck = location.observability_path
    if duck is None or location.path is None:
        return TraceHome("memory", ":memory:")
    duck_files = (duck, duck.with_name(duck.name + ".wal"))
    if db is not None and not duck.exists() and db.has_table(SPANS_TABLE):
        file = Path(location.path)
        return TraceHome("libsql", f"{file} ({SPANS_TABLE})", file,
                         (*duck_files, file, file.with_name(file.name + "-wal")))
    return TraceHome("duckdb", str(duck), duck, duck_files)


def open_trace_store(
    store: TracedStore, path: "os.PathLike[str] | str | None" = None,
) -> "DuckDBObservabilityStore | PgSpanStore | None":
    """The trace store a store's spans are written to (``Store.observability``): ``path`` when given
    (a DuckDB file), else the one ``trace_home`` names; None when spans stay in memory."""
    home = trace_home(store.location)
    if path is None and home.kind == "postgres":
        from core.traces.pg_store import PgSpanStore

        return PgSpanStore(store.db, read_only=store.read_only, retention=retention_from_env())
    target = path if path is not None else home.path
    if target is None:
        return None
    claim = None
    if path is None and not store.read_only and store.location.path is not None:
        # The folder's shared trace file is claimed for this database (``try_claim_trace_file``) when the
        # store writes its first span, not now: a process with tracing off that never writes one (an
        # agent, a forget, an import without traces) leaves it to another database of the folder. A
        # read-only store (the Studio looking) never claims.
        db_file = Path(store.location.path)
        target = trace_file_for(db_file)

        def claim() -> "tuple[Path, str | None]":
            return try_claim_trace_file(db_file)

    from core.traces.store import DuckDBObservabilityStore

    return DuckDBObservabilityStore(target, read_only=store.read_only, retention=retention_from_env(), claim=claim)


def tracer_for(store: TracedStore, **kwargs: Any) -> "Tracer":
    """A new tracer whose spans go to the store's trace store (``Store.tracer()`` keeps one per
    store). A store without one, or opened read-only, keeps spans in memory. Plus an OpenTelemetry
    backend when ``MEMORY_STUDIO_OTEL_ENDPOINT`` (or ``OTEL_*``) names one."""
    from core.traces.otel_config import with_env_exporters
    from core.traces.tracer import InMemorySpanExporter, Tracer

    obs = store.observability
    if obs is None or store.read_only:
        return Tracer(with_env_exporters(InMemorySpanExporter()), **kwargs)
    from core.traces.exporter import DuckDBSpanExporter

    return Tracer(with_env_exporters(DuckDBSpanExporter(obs)), **kwargs)


RETENTION_DAYS_ENV = "MEMORY_STUDIO_TRACES_KEEP_DAYS"
RETENTION_MB_ENV = "MEMORY_STUDIO_TRACES_KEEP_MB"
DEFAULT_KEEP_DAYS = 30.0
DEFAULT_KEEP_MB = 1024.0


def retention_from_env(env: "os._Environ[str] | dict[str, str] | None" = None) -> "RetentionSettings":
    """Trace retention: keep 30 days and at most 1 GB unless the environment says otherwise.

    Unbounded span tables were a real complaint against Mastra (23 GB, no pruning); a value of
    ``0`` or ``off`` disables that limit.
    """
    from core.traces.store import RetentionSettings, retention_limit

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
        try:  # the same rule as `memory-studio traces prune`: 0 is no limit, negative is refused
            return retention_limit(value, name)
        except ValueError as exc:
            raise StorageError(str(exc)) from None

    return RetentionSettings(keep_days=read(RETENTION_DAYS_ENV, DEFAULT_KEEP_DAYS),
                             keep_mb=read(RETENTION_MB_ENV, DEFAULT_KEEP_MB))


__all__ = ["TraceHome", "TraceKind", "TracedStore", "open_trace_store", "retention_from_env", "trace_home", "tracer_for"]
