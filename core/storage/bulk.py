"""Many rows in one statement: ``INSERT ... VALUES (?, ...), (?, ...), ...``.

The write path's batches (a save's messages, their vectors and keyword docs) used the driver's
``executemany``. libsql-experimental runs that as one full statement execution per row, and that
execution, not SQLite's b-tree work, was most of the cost: 10,000 message rows in batches of 100 took
~40 µs per row that way and ~26 µs as one multi-row statement per batch (vector rows ~60 → ~29 µs;
measured with the driver alone; docs/ARCHITECTURE.md Figures). Postgres takes the same statement.

The statement is atomic where ``executemany`` stopped at the failing row: every caller runs inside a
transaction (or a savepoint) that is rolled back on any error, so what is stored is the same.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator, Sequence

import sqlalchemy as sa

from core.storage import dialect, driver_sql

# Parameters per statement: under SQLite's SQLITE_MAX_VARIABLE_NUMBER (32,766) and Postgres' 65,535,
# and small enough that a statement's text stays cheap to parse.
MAX_PARAMS = 4_000


def insert_rows(conn: sa.Connection, head: str, rows: Sequence[tuple[Any, ...]], tail: str = "") -> None:
    """Run ``{head} VALUES (?, ...), ... {tail}`` over ``rows`` (tuples of one width), in as few
    statements as ``MAX_PARAMS`` allows. ``tail``: what follows the values (``ON CONFLICT ...``).

    Rows are applied in order, as ``executemany`` applies them. On Postgres an ``ON CONFLICT DO
    UPDATE`` statement may not touch one key twice: give such a statement distinct keys.
    """
    if not rows:
        return
    width = len(rows[0])
    group = "(" + ", ".join("?" * width) + ")"
    per = max(1, MAX_PARAMS // width)
    full = ""
    for start in range(0, len(rows), per):
        chunk = rows[start:start + per]
        if len(chunk) == per and full:
            sql = full
        else:
            sql = f"{head} VALUES {', '.join([group] * len(chunk))}{' ' + tail if tail else ''}"
            if len(chunk) == per:
                full = sql
        params: list[Any] = []
        for row in chunk:
            if len(row) != width:
                raise ValueError(f"insert_rows: a row of {len(row)} values among rows of {width}")
            params.extend(row)
        driver_sql.execute(conn, sql, params)  # the driver's own cursor where it takes ``?`` (no SQLAlchemy result)


# What a JSON parameter does not carry unchanged into SQLite's json_each: NUL (json_each's strings
# end at it) and lone surrogates (no UTF-8 text holds them; the driver refuses them either way).
_NOT_JSON_SAFE = re.compile("[\x00\ud800-\udfff]")
IN_CHUNK = 500  # placeholders per statement when the list goes as placeholders


def in_lists(conn: sa.Connection, values: Sequence[Any], chunk: int = IN_CHUNK) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """The ``IN (...)`` lists of a statement run over ``values`` (ids), each as (SQL inside the
    parentheses, its parameters): on SQLite one list for every value, a single JSON parameter read by
    ``json_each`` (one statement whatever the count, one bound value instead of one per id: binding
    and parsing a hundred placeholders cost more than the lookups of a batch of new ids); elsewhere,
    or when a value is not a str/int that JSON carries unchanged (a NUL), placeholders ``chunk`` at
    a time. Nothing for no values."""
    if not values:
        return
    if not dialect.is_postgres(conn) and _json_safe(values):
        yield "SELECT value FROM json_each(?)", (json.dumps(list(values), ensure_ascii=False),)
        return
    for start in range(0, len(values), chunk):
        part = tuple(values[start:start + chunk])
        yield ",".join("?" * len(part)), part


def _json_safe(values: Sequence[Any]) -> bool:
    texts = [v for v in values if type(v) is str]
    if len(texts) != len(values):
        return all(type(v) is int or type(v) is str for v in values) and not _NOT_JSON_SAFE.search("".join(texts))
    return not _NOT_JSON_SAFE.search("".join(texts))


__all__ = ["IN_CHUNK", "MAX_PARAMS", "in_lists", "insert_rows"]
