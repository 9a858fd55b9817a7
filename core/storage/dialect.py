"""The few SQL pieces that differ between libSQL and Postgres, each with one home.

SQLAlchemy compiles these constructs for whichever engine runs the statement, so a query written
once with them is right on both. Raw driver SQL asks ``name(conn)`` and picks its fragment here.
What tables a database has is read in ``catalog.py``; what each backend can do is declared in
``capabilities.py``.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ColumnElement, FunctionElement

from core.stored_text import decode_stored_text

POSTGRES = "postgresql"
SQLITE = "sqlite"


def name(conn: sa.Connection) -> str:
    return str(conn.dialect.name)


def is_postgres(conn: sa.Connection) -> bool:
    return name(conn) == POSTGRES


class json_text(FunctionElement[Any]):
    """A JSON column as JSON text: Mastra's libSQL writes JSONB blobs; Postgres has ``jsonb``.

    On libSQL the text is selected as a blob and decoded in Python (``DecodedText``), like
    ``stored_text``: metadata holding invalid UTF-8 would otherwise make the driver panic and lose
    the whole result set (a thread list, a working-memory read)."""

    inherit_cache = True
    name = "json_text"

    def __init__(self, column: ColumnElement[Any]) -> None:
        super().__init__(column)
        self.type = DecodedText()


@compiles(json_text)
def _json_text_sqlite(element: json_text, compiler: Any, **kw: Any) -> str:
    col = compiler.process(list(element.clauses)[0], **kw)
    return f"CAST(CASE WHEN typeof({col}) = 'blob' THEN json({col}) ELSE {col} END AS BLOB)"


@compiles(json_text, POSTGRES)
def _json_text_pg(element: json_text, compiler: Any, **kw: Any) -> str:
    return f"CAST({compiler.process(list(element.clauses)[0], **kw)} AS TEXT)"


class DecodedText(sa.types.TypeDecorator[Any]):
    """The result side of ``stored_text`` (``schema.SafeText``): a blob decoded to text (SQLAlchemy
    types a CAST by its target)."""

    impl = sa.LargeBinary
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return decode_stored_text(value)


class stored_text(FunctionElement[Any]):
    """A free-text column read so that invalid UTF-8 cannot break the result set.

    libSQL's driver panics on a TEXT value that is not valid UTF-8 (see ``core.stored_text``), so on
    libSQL the value is selected as a blob and decoded in Python. Postgres never stores invalid
    UTF-8 in a text column, so there the column is read as it is.
    """

    inherit_cache = True
    name = "stored_text"

    def __init__(self, column: ColumnElement[Any]) -> None:
        super().__init__(column)
        self.type = DecodedText()


@compiles(stored_text)
def _stored_text_sqlite(element: stored_text, compiler: Any, **kw: Any) -> str:
    return f"CAST({compiler.process(list(element.clauses)[0], **kw)} AS BLOB)"


@compiles(stored_text, POSTGRES)
def _stored_text_pg(element: stored_text, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(list(element.clauses)[0], **kw))


def stored_text_sql(conn: sa.Connection, expr: str) -> str:
    """The same as ``stored_text`` for hand-written driver SQL."""
    return expr if is_postgres(conn) else f"CAST({expr} AS BLOB)"


def json_string_head_sql(conn: sa.Connection, column: str, key: str, chars: int) -> str | None:
    """Hand-written SQL for the first ``chars`` characters of the string stored under the top-level
    ``key`` of a text column holding a JSON object, selected as a blob (decode it like
    ``stored_text``), so a caller needing only the start of a stored message's text skips reading
    and decoding the whole document. NULL whenever that is not certainly the value Python's
    ``json.loads(column)[key]`` would give: the column is a blob, or not valid RFC 8259 JSON, or
    ``key`` maps to no string, or ``"key"`` appears twice in the text (SQLite would take the first
    of duplicate keys, Python the last); the caller then reads the column itself.
    None: this backend has no such expression (Postgres: its ``->>`` fails the whole statement on a
    ``\\u0000`` escape), read the column."""
    if is_postgres(conn):
        return None
    if not key.isidentifier():
        raise ValueError(f"unsafe JSON key {key!r}")
    quoted = f'"{key}"'
    return (
        f"CASE WHEN typeof({column}) = 'text' AND json_valid({column}) "
        f"AND json_type({column}, '$.{key}') = 'text' "
        f"AND instr(substr({column}, instr({column}, '{quoted}') + {len(quoted)}), '{quoted}') = 0 "
        f"THEN CAST(substr(json_extract({column}, '$.{key}'), 1, {int(chars)}) AS BLOB) END"
    )


def json_text_sql(conn: sa.Connection, column: str) -> str:
    """The same as ``json_text`` for hand-written driver SQL: on libSQL a blob, so decode the value
    (``core.stored_text.decode_stored_text``; ``memory_store.load_json`` does)."""
    if is_postgres(conn):
        return f"CAST({column} AS TEXT)"
    return f"CAST(CASE WHEN typeof({column}) = 'blob' THEN json({column}) ELSE {column} END AS BLOB)"


class json_path(FunctionElement[Any]):
    """The value at a path of keys in a JSON document (text or JSONB), or NULL.

    On Postgres a text column that does not hold JSON yields NULL instead of failing the query, as
    SQLite's ``json_extract`` does for a row it cannot read.
    """

    inherit_cache = True
    name = "json_path"

    def __init__(self, column: ColumnElement[Any], *keys: str) -> None:
        self.keys = tuple(keys)
        super().__init__(column)


@compiles(json_path)
def _json_path_sqlite(element: json_path, compiler: Any, **kw: Any) -> str:
    path = "$" + "".join("." + json.dumps(k) for k in element.keys)
    col = compiler.process(list(element.clauses)[0], **kw)
    return f"json_extract(CASE WHEN typeof({col}) = 'blob' THEN json({col}) ELSE {col} END, '{path}')"


@compiles(json_path, POSTGRES)
def _json_path_pg(element: json_path, compiler: Any, **kw: Any) -> str:
    col = compiler.process(list(element.clauses)[0], **kw)
    keys = ",".join('"' + k.replace("\\", "\\\\").replace('"', '\\"') + '"' for k in element.keys)
    path = "'{" + keys.replace("'", "''") + "}'"
    return (f"(CASE WHEN pg_input_is_valid(CAST({col} AS TEXT), 'jsonb') "
            f"THEN CAST({col} AS TEXT)::jsonb #>> {path} END)")


def json_value_equals(column: ColumnElement[Any], key: str, value: Any) -> ColumnElement[bool]:
    """``document[key] == value`` for a plain JSON value, compared the way each engine stores it."""
    return _JsonEquals(column, key, value)


class _JsonEquals(ColumnElement[bool]):
    inherit_cache = False
    type = sa.Boolean()

    def __init__(self, column: ColumnElement[Any], key: str, value: Any) -> None:
        self.column, self.json_key, self.value = column, key, value


@compiles(_JsonEquals)
def _json_equals_sqlite(element: _JsonEquals, compiler: Any, **kw: Any) -> str:
    # The key among the document's own members (``json_each``), not in a JSON path: a path is SQL text that a
    # key with an apostrophe broke ("near s: syntax error") and one with a double quote cannot name. The value is
    # compared with its JSON type, as Postgres's ``jsonb`` equality does: true is not 1, null matches a stored
    # null (``json_extract`` gave 1 for true and NULL for both a null and a missing key).
    col = compiler.process(element.column, **kw)
    key = compiler.process(sa.literal(element.json_key), **kw)
    value = element.value
    if value is None:
        match = "j.type = 'null'"
    elif isinstance(value, bool):
        match = "j.type = 'true'" if value else "j.type = 'false'"
    elif isinstance(value, (int, float)):
        match = f"j.type IN ('integer', 'real') AND j.value = {compiler.process(sa.literal(value), **kw)}"
    else:
        match = f"j.type = 'text' AND j.value = {compiler.process(sa.literal(str(value)), **kw)}"
    doc = f"CASE WHEN typeof({col}) = 'blob' THEN json({col}) ELSE {col} END"
    return f"EXISTS (SELECT 1 FROM json_each({doc}) AS j WHERE j.key = {key} AND {match})"


@compiles(_JsonEquals, POSTGRES)
def _json_equals_pg(element: _JsonEquals, compiler: Any, **kw: Any) -> str:
    col = compiler.process(element.column, **kw)
    doc = compiler.process(sa.literal(json.dumps(element.value)), **kw)
    key = compiler.process(sa.literal(element.json_key), **kw)
    return f"(CAST({col} AS TEXT)::jsonb -> CAST({key} AS TEXT)) = CAST({doc} AS TEXT)::jsonb"


class Flag(sa.types.TypeDecorator[int]):
    """A 0/1 flag: ``INTEGER`` in Mastra's libSQL layout, ``BOOLEAN`` in its PgStore layout."""

    impl = sa.Integer
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        if value is None:
            return None
        return bool(value) if dialect.name == POSTGRES else int(bool(value))

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return None if value is None else int(bool(value))


def upsert(conn: sa.Connection, table: sa.Table, values: dict[str, Any], *, key: str) -> Any:
    """``INSERT ... ON CONFLICT (key) DO UPDATE`` of every other column, in this engine's dialect."""
    if is_postgres(conn):
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        stmt: Any = pg_insert(table).values(**values)
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        stmt = sqlite_insert(table).values(**values)
    return stmt.on_conflict_do_update(
        index_elements=[table.c[key]], set_={c: stmt.excluded[c] for c in values if c != key}
    )


class row_key(ColumnElement[Any]):
    """The tie-break after ``createdAt`` when paging a thread: SQLite's ``rowid`` (the end of every
    index entry, so a deep page stays an index walk), the message ``id`` on Postgres (no rowid)."""

    inherit_cache = True
    type = sa.Text()


@compiles(row_key)
def _row_key_sqlite(element: row_key, compiler: Any, **kw: Any) -> str:
    return "rowid"


@compiles(row_key, POSTGRES)
def _row_key_pg(element: row_key, compiler: Any, **kw: Any) -> str:
    return "id"


def json_path_sql(conn: sa.Connection, column: str, key: str) -> str:
    """``json_path`` as SQL text for a hand-written statement over ``column``."""
    return str(json_path(sa.literal_column(column), key).compile(dialect=conn.dialect))
