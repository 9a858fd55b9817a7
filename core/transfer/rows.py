"""Rows of any table as plain JSON-ready dicts, and back, on libSQL and on Postgres.

Export and import treat every table the same way: the columns a table has (``catalog.table_columns``),
each value as stored. Mastra writes some JSON columns as SQLite JSONB blobs; those are read as JSON
text (``json()``), so an export is plain JSON and a file written by either side can be compared with
the other. A blob that is not JSONB (none are known today) is kept as ``{"$base64": ...}`` rather
than dropped. On Postgres, ``JSONB`` and ``TIMESTAMP`` columns read as the same JSON and ISO text
(``core.storage.pg.adapt``), Mastra's ``"<col>Z"`` timestamp mirrors are left out (the server keeps
them), and values are bound as each column's type wants them (a 0/1 flag as a boolean).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Sequence

import sqlalchemy as sa

from core.storage import catalog
from core.storage.capabilities import capabilities_of
from core.storage.errors import UnreadableValueError
from core.stored_text import json_text

BLOB_KEY = "$base64"
_CACHE_KEY = "memory-studio:transfer-columns"
#: ``iter_rows(stream=True)``: rows the driver fetches at a time (what it holds: a page of messages of the largest
#: size allowed is still tens of megabytes, never the history).
STREAM_PAGE = 64


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def forget_columns(conn: sa.Connection) -> None:
    """Drop remembered table shapes: called when an export or import starts (a migration may have run)."""
    conn.info.pop(_CACHE_KEY, None)


def columns(conn: sa.Connection, table: str) -> list[tuple[str, str, bool]]:
    """(name, declared type, is primary key) for each column, in table order."""
    cache: dict[str, list[tuple[str, str, bool]]] = conn.info.setdefault(_CACHE_KEY, {})
    if table not in cache:
        found = catalog.table_columns(conn, table)
        if capabilities_of(conn).timestamp_mirrors:
            names = {n for n, _t, _p in found}
            found = [c for c in found if not (c[0].endswith("Z") and c[0][:-1] in names and "TIME" in c[1])]
        cache[table] = found
    return cache[table]


def primary_key(conn: sa.Connection, table: str) -> list[str]:
    return [name for name, _type, pk in columns(conn, table) if pk]


def row_order(conn: sa.Connection, table: str) -> str | None:
    """Insertion order where the engine has it (SQLite's ``rowid``), else the primary key."""
    if capabilities_of(conn).implicit_rowid:
        return "rowid"
    key = primary_key(conn, table)
    return ", ".join(quote(k) for k in key) if key else None


def select_rows(
    conn: sa.Connection, table: str, where: str = "", params: Sequence[Any] = (), order: str | None = None
) -> list[dict[str, Any]]:
    """Every column of the matching rows (``iter_rows``), as a list."""
    return list(iter_rows(conn, table, where, params, order))


def iter_rows(
    conn: sa.Connection, table: str, where: str = "", params: Sequence[Any] = (), order: str | None = None,
    *, stream: bool = False,
) -> Iterator[dict[str, Any]]:
    """Every column of the matching rows, one at a time as the statement gives them (an export spools a long
    history as it reads it), JSONB read as JSON text, blobs made JSON-safe.

    ``stream``: the driver holds a page of ``STREAM_PAGE`` rows at a time, not the result (SQLAlchemy's
    ``stream_results``): on Postgres a server-side cursor, which needs the transaction the caller is in (an
    export's snapshot); psycopg's ordinary cursor takes the whole result into memory before the first row. libSQL's
    cursor steps the statement as rows are asked for, and is asked for a page at a time.

    On libSQL text is selected as a blob and decoded here: the driver panics on a TEXT value that is
    not valid UTF-8 and loses the whole result set, so such a value is reported as
    ``UnreadableValueError`` naming the table, the row and the column instead. One more column marks
    which values are real blobs (not JSONB), kept as ``{"$base64": ...}``."""
    names = [c[0] for c in columns(conn, table)]
    order = order or row_order(conn, table)
    tail = f" FROM {quote(table)}" + (f" WHERE {where}" if where else "") + (f" ORDER BY {order}" if order else "")
    options = {"stream_results": True, "max_row_buffer": STREAM_PAGE} if stream else None
    if not capabilities_of(conn).json_blobs:
        sql = f"SELECT {', '.join(quote(n) for n in names)}{tail}"
        for row in conn.exec_driver_sql(sql, tuple(params), execution_options=options):
            yield {n: to_json_value(v) for n, v in zip(names, row)}
        return
    cols = [
        f"CASE WHEN typeof({q}) = 'blob' AND json_valid({q}, 8) THEN CAST(json({q}) AS BLOB) "
        f"WHEN typeof({q}) = 'text' THEN CAST({q} AS BLOB) ELSE {q} END"
        for q in map(quote, names)
    ]
    blobs = " || ".join(
        f"(CASE WHEN typeof({q}) = 'blob' AND NOT json_valid({q}, 8) THEN '1' ELSE '0' END)" for q in map(quote, names)
    )
    sql = f"SELECT {', '.join(cols)}, {blobs}{tail}"
    key = primary_key(conn, table) or names[:1]
    for row in conn.exec_driver_sql(sql, tuple(params), execution_options=options):
        marks = row[-1]
        values: dict[str, Any] = {}
        for i, (name, value) in enumerate(zip(names, row)):
            if isinstance(value, (bytes, bytearray, memoryview)) and marks[i] == "0":
                try:
                    value = bytes(value).decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise _unreadable_row(conn, table, name, key, names, row, exc) from None
            values[name] = to_json_value(value)
        yield values


def _unreadable_row(
    conn: sa.Connection, table: str, column: str, key: list[str], names: list[str], row: Sequence[Any],
    exc: UnicodeDecodeError,
) -> UnreadableValueError:
    def shown(value: Any) -> str:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return repr(bytes(value).decode("utf-8", errors="replace"))
        return repr(value)

    which = ", ".join(f"{k} = {shown(row[names.index(k)])}" for k in key)
    where = " AND ".join(f"{quote(k)} = ..." for k in key)
    db = getattr(conn.engine.url, "database", None) or "the database"
    return UnreadableValueError(
        f"{db}: the {table} row with {which} holds text that is not valid UTF-8 in its {column} column "
        f"(byte {exc.start + 1} of {len(exc.object)}), so it cannot be exported as it is; nothing was written. "
        f"Repair that value with the sqlite3 shell (e.g. SELECT hex({quote(column)}) FROM {quote(table)} WHERE "
        f"{where}; then UPDATE it to valid text), or delete the row; a backup of the file first is wise."
    )


def to_json_value(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {BLOB_KEY: base64.b64encode(bytes(value)).decode("ascii")}
    return value


def from_json_value(value: Any) -> Any:
    if isinstance(value, Mapping) and set(value) == {BLOB_KEY}:
        return base64.b64decode(str(value[BLOB_KEY]))
    return value


def bind_values(conn: sa.Connection, table: str, row: Mapping[str, Any]) -> tuple[Any, ...]:
    """``row``'s values as this table's columns take them.

    SQLite takes any value in any column. Postgres binds a Python int as an integer, so a 0/1 flag
    (how Mastra's libSQL layout stores a boolean) becomes a boolean, a number bound to a text column
    becomes its text, and a JSON value bound to a JSONB column becomes JSON text.
    """
    values = [from_json_value(row[n]) for n in row]
    if not capabilities_of(conn).strict_column_types:
        return tuple(values)
    types = {n: t for n, t, _pk in columns(conn, table)}
    return tuple(_for_postgres(v, types.get(n, "")) for n, v in zip(row, values))


def _for_postgres(value: Any, declared: str) -> Any:
    if value is None or isinstance(value, (bytes, str)) and "BOOL" not in declared:
        return value
    if "BOOL" in declared:
        return value.strip().lower() in ("1", "true", "t") if isinstance(value, str) else bool(value)
    if "JSON" in declared:
        return json_text(value, ensure_ascii=False)
    if ("TEXT" in declared or "CHAR" in declared) and not isinstance(value, (bytes, str)):
        return str(value)
    return value


@dataclass(frozen=True)
class Where:
    """A ``WHERE`` clause (``?`` placeholders) and its parameters."""

    sql: str
    params: tuple[Any, ...] = ()


@dataclass(frozen=True)
class ThreadScope:
    """The threads an export is about, as a clause on ``mastra_threads`` (``id = ?``, ``"resourceId" = ?``), so a
    table's rows of those threads are one statement with a subquery (read as of the same snapshot): no list of ids
    bound, however many threads a resource has."""

    threads: Where

    def rows_of(self, column: str) -> Where:
        """The rows whose ``column`` names one of the threads."""
        return Where(f"{quote(column)} IN (SELECT id FROM mastra_threads WHERE {self.threads.sql})",
                     self.threads.params)


def in_clause(values: Iterable[Any]) -> tuple[str, list[Any]]:
    items = list(values)
    return "(" + ",".join("?" * len(items)) + ")", items


def insert_row(conn: sa.Connection, table: str, row: Mapping[str, Any], *, replace_key: Sequence[str] = (),
               returning: str | None = None) -> Any:
    """Insert ``row``; with ``replace_key``, a row with the same key is replaced. Returns the
    ``returning`` column of the new row (``rowid`` on SQLite), or None."""
    names = list(row)
    sql = (f"INSERT INTO {quote(table)} ({', '.join(quote(n) for n in names)}) "
           f"VALUES ({', '.join('?' * len(names))})")
    if replace_key:
        others = [n for n in names if n not in replace_key]
        update = ", ".join(f"{quote(n)} = excluded.{quote(n)}" for n in others)
        keys = ", ".join(quote(k) for k in replace_key)
        sql += f" ON CONFLICT ({keys}) DO " + (f"UPDATE SET {update}" if update else "NOTHING")
    if returning is not None and capabilities_of(conn).returning:
        return conn.exec_driver_sql(sql + f" RETURNING {quote(returning)}", bind_values(conn, table, row)).scalar()
    conn.exec_driver_sql(sql, bind_values(conn, table, row))
    if returning is not None:
        return conn.exec_driver_sql("SELECT last_insert_rowid()").scalar()
    return None


def next_free_id(conn: sa.Connection, table: str, key: str) -> int:
    return int(conn.exec_driver_sql(f"SELECT coalesce(max({quote(key)}), 0) + 1 FROM {quote(table)}").scalar() or 1)


def after_explicit_ids(conn: sa.Connection, table: str, key: str) -> None:
    """Postgres: move the key's sequence past ids inserted explicitly, so the next row the engine
    writes does not collide with one (SQLite's rowid needs nothing)."""
    if not capabilities_of(conn).key_sequences:
        return
    conn.exec_driver_sql(
        "SELECT setval(pg_get_serial_sequence(?, ?), GREATEST((SELECT max(" + quote(key) + ") FROM "
        + quote(table) + "), nextval(pg_get_serial_sequence(?, ?))))", (table, key, table, key))


def same_value_sql(conn: sa.Connection, column: str) -> str:
    """``column`` equals the bound value, NULL matching NULL (SQLAlchemy's ``is_not_distinct_from``,
    compiled for this engine: ``IS`` on SQLite, ``IS NOT DISTINCT FROM`` on Postgres)."""
    same = sa.literal_column(quote(column)).is_not_distinct_from(sa.literal_column("?"))
    return str(same.compile(dialect=conn.dialect))
