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


JSON_LIST = "SELECT value FROM json_each(?)"  # the one-parameter list ``in_lists`` gives on SQLite
# What a JSON string must escape, and what json_each would not give back (NUL, lone surrogates).
_NOT_PLAIN = re.compile('["\\\\\x00-\x1f\ud800-\udfff]')


def takes_json_lists(conn: sa.Connection) -> bool:
    """Whether ``conn``'s database reads a JSON list with ``json_each`` (SQLite; Postgres binds each value)."""
    return not dialect.is_postgres(conn)


def in_lists(conn: sa.Connection, values: Sequence[Any], chunk: int = IN_CHUNK) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """The ``IN (...)`` lists of a statement run over ``values`` (ids), each as (SQL inside the
    parentheses, its parameters): on SQLite one list for every value, a single JSON parameter read by
    ``json_each`` (``JSON_LIST``: one statement whatever the count, one bound value instead of one per
    id: binding and parsing a hundred placeholders cost more than the lookups of a batch of new ids);
    elsewhere, or when a value is not a str/int that JSON carries unchanged (a NUL), placeholders
    ``chunk`` at a time. Nothing for no values. Ids that need no JSON escaping (the usual id: no quote,
    backslash or control character) are joined into the list by hand, a fifth of ``json.dumps``'s
    cost with its check (~25 µs a batch of a hundred, twice per save with recall)."""
    if not values:
        return
    if takes_json_lists(conn):
        if _plain_strs(values):
            yield JSON_LIST, ('["' + '","'.join(values) + '"]',)
            return
        if _json_safe(values):
            yield JSON_LIST, (json.dumps(list(values), ensure_ascii=False),)
            return
    for start in range(0, len(values), chunk):
        part = tuple(values[start:start + chunk])
        yield ",".join("?" * len(part)), part


def _plain_strs(values: Sequence[Any]) -> bool:
    try:
        return not _NOT_PLAIN.search("".join(values))
    except TypeError:  # a value that is not a str: ``_json_safe``'s rules
        return False


def _json_safe(values: Sequence[Any]) -> bool:
    texts = [v for v in values if type(v) is str]
    if len(texts) != len(values):
        return all(type(v) is int or type(v) is str for v in values) and not _NOT_JSON_SAFE.search("".join(texts))
    return not _NOT_JSON_SAFE.search("".join(texts))


# What a JSON document does not carry unchanged into SQLite's json_each: NUL (its strings end there;
# the encoder writes it as the escape ``\u0000``) and lone surrogates (no UTF-8 text holds them; the
# driver refuses them either way). A text holding a backslash then "u0000" is refused too (encoded
# ``\\u0000``): such rows are bound one by one, which stores the same.
_SURROGATE = re.compile("[\ud800-\udfff]")
_json_rows = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def plain_text(text: str) -> bool:
    """Whether JSON writes ``text`` as it is between its quotes (ASCII without a control character, a
    quote or a backslash: nothing to escape), so ``'"' + text + '"'`` is its JSON. In C: the ASCII
    flag, then every plain byte deleted by one ``translate`` (a few times cheaper than ``isprintable``)."""
    return text.isascii() and not text.encode("ascii").translate(None, _PLAIN_BYTES)


_PLAIN_BYTES = bytes(c for c in range(0x20, 0x80) if c not in b'"\\')  # what JSON writes unescaped (DEL too)


def _plain_rows(rows: Sequence[Any]) -> str | None:
    """``_json_rows(rows)`` written by one ``%`` per row, when ``rows`` are tuples of one width whose
    every column holds only ints or only strings JSON writes as they are (``plain_text``): the usual
    batch of the recall writes. None otherwise (the encoder writes them)."""
    if not rows or type(rows[0]) is not tuple:
        return None
    columns = list(zip(*rows))
    if len(columns) != len(rows[0]) or len(set(map(len, rows))) != 1:
        return None
    marks = []
    for column in columns:
        kinds = set(map(type, column))
        if len(kinds) != 1 or not kinds <= {int, str}:
            return None
        if str in kinds:
            if not plain_text("".join(column)):
                return None
            marks.append('"%s"')
        else:
            marks.append("%d")
    return "[" + ",".join(map(("[" + ",".join(marks) + "]").__mod__, rows)) + "]"


def json_rows_param(rows: Sequence[Any]) -> str | None:
    """``rows`` (tuples, or single values) as one JSON array for ``json_each``, or None when a value
    would not come back from it as it went in (a NUL, a lone surrogate). Values: str, int (SQLite's
    range) or None only, which the callers' rows are (a float or a bool would come back as another type).
    Rows of plain ints and strings are written by hand (``_plain_rows``: the same text)."""
    doc = _plain_rows(rows)
    if doc is not None:
        return doc
    doc = _json_rows(rows)
    if "\\u0000" in doc or (not doc.isascii() and _SURROGATE.search(doc)):  # (a find and an ASCII check: C speed)
        return None
    return doc


def insert_json_rows(conn: sa.Connection, head: str, rows: list[tuple[Any, ...]]) -> None:
    """``insert_rows(conn, head, rows)`` on SQLite with the rows bound as one JSON parameter read by
    ``json_each`` (``INSERT ... SELECT value->>0, ... ORDER BY key``): the same rows, stored in the
    same order with the same types (a JSON string comes back as TEXT, an integer as INTEGER, null as
    NULL), but one bound value per batch. The driver's binding, not SQLite, was most of such a
    statement's cost: a keyword doc row ~3.4 µs with five placeholders, ~2.1 µs this way (FTS rows
    ~3.4 -> ~2.8). Elsewhere (Postgres) or for values JSON would change, ``insert_rows``."""
    if not rows:
        return
    doc = json_rows_param(rows) if takes_json_lists(conn) else None
    if doc is None:
        insert_rows(conn, head, rows)
        return
    cols = ", ".join(f"value->>{i}" for i in range(len(rows[0])))
    driver_sql.execute(conn, f"{head} SELECT {cols} FROM json_each(?) ORDER BY key", (doc,))


__all__ = ["IN_CHUNK", "JSON_LIST", "MAX_PARAMS", "in_lists", "insert_json_rows", "insert_rows", "json_rows_param",
           "takes_json_lists"]
