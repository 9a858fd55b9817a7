"""Rows of any table as plain JSON-ready dicts, and back.

Export and import treat every table the same way: the columns a table has (``PRAGMA table_info``),
each value as stored. Mastra writes some JSON columns as SQLite JSONB blobs; those are read as JSON
text (``json()``), so an export is plain JSON and a file written by either side can be compared with
the other. A blob that is not JSONB (none are known today) is kept as ``{"$base64": ...}`` rather
than dropped.
"""

from __future__ import annotations

import base64
from typing import Any, Iterable, Mapping, Sequence

import sqlalchemy as sa

BLOB_KEY = "$base64"
TURN_TABLES = ("memory_studio_turns",)  # the turn-record table (issue 10); others matching the prefix too
TURN_TABLE_PREFIX = "memory_studio_turn"
THREAD_COLUMNS = ("thread_id", "threadId")


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def has_table(conn: sa.Connection, name: str) -> bool:
    row = conn.exec_driver_sql("SELECT 1 FROM sqlite_master WHERE type='table' AND name = ?", (name,)).first()
    return row is not None


def columns(conn: sa.Connection, table: str) -> list[tuple[str, str, bool]]:
    """(name, declared type, is primary key) for each column, in table order."""
    rows = conn.exec_driver_sql(f"PRAGMA table_info({quote(table)})").all()
    return [(str(r[1]), str(r[2] or "").upper(), bool(r[5])) for r in rows]


def primary_key(conn: sa.Connection, table: str) -> list[str]:
    return [name for name, _type, pk in columns(conn, table) if pk]


def select_rows(
    conn: sa.Connection, table: str, where: str = "", params: Sequence[Any] = (), order: str = "rowid"
) -> list[dict[str, Any]]:
    """Every column of the matching rows, JSONB read as JSON text, blobs made JSON-safe."""
    names = [c[0] for c in columns(conn, table)]
    cols = ", ".join(
        f"CASE WHEN typeof({quote(n)}) = 'blob' AND json_valid({quote(n)}, 8) THEN json({quote(n)}) "
        f"ELSE {quote(n)} END" for n in names
    )
    sql = f"SELECT {cols} FROM {quote(table)}" + (f" WHERE {where}" if where else "") + f" ORDER BY {order}"
    return [{n: to_json_value(v) for n, v in zip(names, row)} for row in conn.exec_driver_sql(sql, tuple(params))]


def to_json_value(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {BLOB_KEY: base64.b64encode(bytes(value)).decode("ascii")}
    return value


def from_json_value(value: Any) -> Any:
    if isinstance(value, Mapping) and set(value) == {BLOB_KEY}:
        return base64.b64decode(str(value[BLOB_KEY]))
    return value


def in_clause(values: Iterable[Any]) -> tuple[str, list[Any]]:
    items = list(values)
    return "(" + ",".join("?" * len(items)) + ")", items


def insert_row(conn: sa.Connection, table: str, row: Mapping[str, Any], *, replace: bool = False) -> None:
    names = list(row)
    verb = "INSERT OR REPLACE" if replace else "INSERT"
    sql = (f"{verb} INTO {quote(table)} ({', '.join(quote(n) for n in names)}) "
           f"VALUES ({', '.join('?' * len(names))})")
    conn.exec_driver_sql(sql, tuple(from_json_value(row[n]) for n in names))


def turn_table(conn: sa.Connection) -> str | None:
    """The turn-record table of this database, if it has one (named ``memory_studio_turns``)."""
    for name in TURN_TABLES:
        if has_table(conn, name):
            return name
    row = conn.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type='table' AND name GLOB ? ORDER BY name LIMIT 1",
        (TURN_TABLE_PREFIX + "*",),
    ).first()
    return str(row[0]) if row else None


def thread_column(conn: sa.Connection, table: str) -> str | None:
    names = {c[0] for c in columns(conn, table)}
    return next((c for c in THREAD_COLUMNS if c in names), None)
