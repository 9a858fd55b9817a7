"""What tables a database has: the one place that reads the catalog.

``has_table`` is the one answer to "does this table exist", for every caller that holds a
connection (``Database.has_table`` opens one for callers that hold only a store). Table lists come
from SQLAlchemy's inspector, which knows each backend's catalog (``Capabilities.catalog``); only the
column list is read by hand (see ``table_columns``).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from core.storage.dialect import is_postgres


def has_table(conn: sa.Connection | Any, name: str) -> bool:
    """Whether ``name`` is a table (or view) of the database: SQLite's main file, or a schema on
    the search path of a Postgres session.

    ``conn`` is a SQLAlchemy connection (SQLAlchemy's inspector answers), or a bare libSQL driver
    connection, for the reader that opens a Mastra file without SQLAlchemy
    (``core.traces.libsql_reader``), asked with the catalog query the inspector would read.
    """
    if isinstance(conn, sa.Connection):
        return bool(sa.inspect(conn).has_table(name))
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type IN ('table', 'view') AND name = ?", (name,)).fetchone()
    return row is not None


def all_tables(conn: sa.Connection) -> list[str]:
    """Every table of the database (the current schema on Postgres), the engine's own catalog left
    out, sorted. FTS5 shadow tables are included: they hold the indexed text."""
    return sorted(str(n) for n in sa.inspect(conn).get_table_names())


def table_names(conn: sa.Connection, prefix: str) -> list[str]:
    """Tables whose name is ``prefix`` or starts with ``prefix_``, sorted."""
    return [n for n in all_tables(conn) if n == prefix or n.startswith(prefix + "_")]


def has_user_tables(conn: sa.Connection) -> bool:
    """Whether the database holds any table of its user (an empty file, or an empty schema, has none)."""
    return bool(sa.inspect(conn).get_table_names())


def triggers(conn: sa.Connection) -> list[tuple[str, str]]:
    """(trigger name, table name) of every trigger of the database (ours, not the engine's own),
    sorted. SQLAlchemy's inspector has no trigger list, so the catalog is read here."""
    if is_postgres(conn):
        sql = ("SELECT t.tgname, c.relname FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid "
               "WHERE NOT t.tgisinternal AND pg_catalog.pg_table_is_visible(c.oid) ORDER BY 1, 2")
    else:
        sql = "SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger' ORDER BY 1, 2"
    return [(str(r[0]), str(r[1])) for r in conn.exec_driver_sql(sql)]


def virtual_table_sql(conn: sa.Connection, name: str) -> str | None:
    """The ``CREATE VIRTUAL TABLE`` statement SQLite keeps for ``name`` (its module and arguments, e.g.
    an FTS5 table's tokenizer), or None: no such table, or a database without virtual tables (Postgres)."""
    if is_postgres(conn):
        return None
    found = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).scalar()
    return str(found) if found is not None and str(found).upper().startswith("CREATE VIRTUAL TABLE") else None


def byte_equal_text_columns(conn: sa.Connection, table: str) -> frozenset[str]:
    """The columns of ``table`` where ``column IS ?`` (``IS NOT DISTINCT FROM`` on Postgres) with a bound text or NULL
    is true exactly when the stored value is that text, byte for byte, or NULL (and, on SQLite, with a bound blob
    exactly when it is that blob). Postgres: ``text`` and ``varchar`` columns of a deterministic collation.
    SQLite: columns of TEXT or BLOB affinity (no number is converted: a bound text stays text), none when the table
    declares a collation anywhere or the file's text is not UTF-8 (the bytes stored are then not the text's UTF-8)."""
    if is_postgres(conn):
        rows = conn.exec_driver_sql(
            "SELECT a.attname, upper(format_type(a.atttypid, a.atttypmod)) FROM pg_catalog.pg_attribute a "
            "JOIN pg_catalog.pg_collation c ON c.oid = a.attcollation WHERE a.attrelid = to_regclass(quote_ident(?)) "
            "AND a.attnum > 0 AND NOT a.attisdropped AND c.collisdeterministic", (table,))
        return frozenset(str(n) for n, t in rows if t == "TEXT" or str(t).startswith("CHARACTER VARYING"))
    encoding = conn.exec_driver_sql("PRAGMA encoding").scalar()
    ddl = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).scalar()
    if str(encoding).upper() != "UTF-8" or "COLLATE" in str(ddl or "").upper():
        return frozenset()
    return frozenset(n for n, t, _pk in table_columns(conn, table) if _sqlite_affinity(t) in ("TEXT", "BLOB"))


def _sqlite_affinity(declared: str) -> str:
    """SQLite's affinity of a column of this declared type (upper case; datatype3.html, section 3.1)."""
    if "INT" in declared:
        return "INTEGER"
    if any(word in declared for word in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if not declared or "BLOB" in declared:
        return "BLOB"
    if any(word in declared for word in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


def table_columns(conn: sa.Connection, table: str) -> list[tuple[str, str, bool]]:
    """(name, declared type in upper case, part of the primary key) of each column, in table order.

    Read from the catalog directly: SQLAlchemy's Postgres reflection binds its own parameters typed,
    which an engine binding strings untyped (``core.storage.pg.adapt``) cannot run; and the declared
    type text is wanted as written, not as a SQLAlchemy type.
    """
    if is_postgres(conn):
        sql = (
            "SELECT a.attname, upper(format_type(a.atttypid, a.atttypmod)), "
            "coalesce(a.attnum = ANY(c.conkey), false) FROM pg_catalog.pg_attribute a "
            "LEFT JOIN pg_catalog.pg_constraint c ON c.conrelid = a.attrelid AND c.contype = 'p' "
            "WHERE a.attrelid = to_regclass(quote_ident(?)) AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY a.attnum"
        )
        return [(str(r[0]), str(r[1]), bool(r[2])) for r in conn.exec_driver_sql(sql, (table,))]
    quoted = '"' + table.replace('"', '""') + '"'
    return [(str(r[1]), str(r[2] or "").upper(), bool(r[5]))
            for r in conn.exec_driver_sql(f"PRAGMA table_info({quoted})")]


__all__ = ["all_tables", "byte_equal_text_columns", "has_table", "has_user_tables", "table_columns", "table_names",
           "triggers"]
