"""What a database backend can do, declared once per backend.

Callers outside ``core/storage`` ask these flags what the backend can do, never what it is called
(conventions §20, in the manner of SQLAlchemy's ``supports_*`` dialect flags). A new backend is a new
``Capabilities`` value; code that branches on a flag keeps working for it.

``Database.capabilities`` (and ``Store.capabilities``) says it for an open database; code that only
holds a connection uses ``capabilities_of(conn)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # pragma: no cover - the Studio imports this before first paint: no SQLAlchemy
    import sqlalchemy as sa

FullText = Literal["fts5", "tsvector"]
Vectors = Literal["blob-matrix", "pgvector"]
Catalog = Literal["sqlite_master", "pg_catalog"]
JsonType = Literal["text", "jsonb"]


@dataclass(frozen=True)
class Capabilities:
    """One backend's abilities. Every field is a fact about the engine, not a preference."""

    label: str
    """How messages name the backend to a user ("libSQL", "PostgreSQL"). Never branch on it."""
    full_text: FullText
    """Keyword search: SQLite FTS5 tables with BM25, or Postgres ``tsvector`` columns with ``ts_rank``."""
    vectors: Vectors
    """Where vectors are searched: float32 blobs scored in-process (matrices, IVF), or pgvector on the
    server (HNSW)."""
    advisory_locks: bool
    """Transaction-scoped named locks exist (``Database.lock`` takes them); without them every writer
    is serialised instead."""
    serialized_writers: bool
    """One write transaction at a time for the whole database (``BEGIN IMMEDIATE``)."""
    returning: bool
    """``INSERT ... RETURNING`` is available."""
    implicit_rowid: bool
    """Every table has a hidden integer ``rowid`` (a key for rows without one, and a paging tie-break)."""
    json_type: JsonType
    """How JSON columns are typed: JSON text (Mastra's libSQL; some rows JSONB blobs) or ``jsonb``."""
    native_boolean: bool
    """Flags are ``BOOLEAN`` (true/false) rather than 0/1 integers."""
    catalog: Catalog
    """Where the list of tables is read from (``core.storage.catalog`` asks SQLAlchemy's inspector,
    which reads this catalog)."""
    traces_in_database: bool
    """Spans are kept in the database's own ``mastra_ai_spans`` table (a fleet shares no folder),
    rather than in a DuckDB file beside the database file."""
    server_enforces_read_only: bool
    """A read-only open is enforced by the server, not only by this process."""
    transactional_ddl: bool
    """``CREATE``/``ALTER`` roll back with their transaction."""
    server: bool
    """The database is a server reached by URL and shared with other programs, not a file this
    process opens (the Studio opens it read-only until the user allows writes; no trace file)."""
    json_blobs: bool
    """A JSON value may be stored as a SQLite JSONB blob in any column (Mastra's libSQL writes some);
    ``json()`` reads it back as JSON text."""
    strict_column_types: bool
    """A bound value must suit its column's type (a 0/1 flag bound as a boolean, JSON as text); SQLite
    takes any value in any column."""
    timestamp_mirrors: bool
    """Mastra's layout keeps a ``"<column>Z"`` ``TIMESTAMPTZ`` mirror beside each timestamp column,
    kept equal by the server (an export leaves them out; an import lets the server fill them)."""
    key_sequences: bool
    """An integer key's next value comes from a sequence that explicitly inserted ids do not move
    (it must be set past them); SQLite's rowid simply follows the largest."""
    driver_qmark: bool
    """The driver's own cursor takes hand-written SQL as written (``?`` placeholders) and needs nothing
    adapted around it, so ``core.storage.driver_sql`` may run hot statements on it directly instead of
    through SQLAlchemy (Postgres' psycopg needs ``%s`` and has its errors translated at SQLAlchemy's
    cursor hooks)."""


LIBSQL = Capabilities(
    label="libSQL",
    full_text="fts5",
    vectors="blob-matrix",
    advisory_locks=False,
    serialized_writers=True,
    returning=True,
    implicit_rowid=True,
    json_type="text",
    native_boolean=False,
    catalog="sqlite_master",
    traces_in_database=False,
    server_enforces_read_only=False,
    transactional_ddl=True,
    server=False,
    json_blobs=True,
    strict_column_types=False,
    timestamp_mirrors=False,
    key_sequences=False,
    driver_qmark=True,
)

POSTGRES = Capabilities(
    label="PostgreSQL",
    full_text="tsvector",
    vectors="pgvector",
    advisory_locks=True,
    serialized_writers=False,
    returning=True,
    implicit_rowid=False,
    json_type="jsonb",
    native_boolean=True,
    catalog="pg_catalog",
    traces_in_database=True,
    server_enforces_read_only=True,
    transactional_ddl=True,
    server=True,
    json_blobs=False,
    strict_column_types=True,
    timestamp_mirrors=True,
    key_sequences=True,
    driver_qmark=False,
)

_BY_DIALECT = {"sqlite": LIBSQL, "postgresql": POSTGRES}


def capabilities_of(conn: sa.Connection | sa.Engine) -> Capabilities:
    """The capabilities of the backend behind a connection or engine."""
    name = str(conn.dialect.name)
    try:
        return _BY_DIALECT[name]
    except KeyError:
        raise ValueError(f"no capabilities are declared for the {name!r} SQL dialect") from None
