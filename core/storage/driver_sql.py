"""Hand-written SQL run straight on the driver's cursor, for the statements every agent turn runs.

``Connection.exec_driver_sql`` costs 60–140 µs of Python per statement in SQLAlchemy (execution
context, result metadata, row processors) against 15–20 µs for the libSQL driver's own cursor, and an
agent turn runs about a dozen such statements. These helpers take the same connection, the same SQL
(``?`` placeholders) and the same parameters, and return plain tuples (what the driver gives and what
SQLAlchemy's rows hold for untyped driver SQL, so callers read them by position either way).

A backend whose driver needs its SQL adapted at the cursor (Postgres: ``?`` → ``%s``, its errors
translated, see ``core.storage.pg``) goes through ``exec_driver_sql`` as before: the capability
``Capabilities.driver_qmark`` says which. Listeners of SQLAlchemy's ``before_cursor_execute`` event
still see every statement (tests and benches count statements with it). Driver errors arrive
unwrapped (libSQL's ``ValueError``), which ``Database.read()``/``write()`` translate as they always did.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import sqlalchemy as sa

from core.storage.capabilities import capabilities_of


def _cursor(conn: sa.Connection, sql: str, params: Any) -> Any:
    """The driver's cursor with ``sql`` executed, or None when this backend takes SQLAlchemy's path."""
    if not capabilities_of(conn).driver_qmark:
        return None
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    listeners = conn.dispatch.before_cursor_execute
    if listeners:
        for listener in listeners:
            listener(conn, cursor, sql, params, None, False)
    cursor.execute(sql, params)
    return cursor


# Rows fetched per call of the driver. libsql-experimental keeps the GIL for the whole of a fetch (its
# statement steps inside it), so one ``fetchall`` of a 100,000-message thread held every other thread of
# the process for ~0.2-0.5 s: the Studio's UI thread froze while a worker read. A fetch of this many
# rows takes ~1-2 ms; between two the interpreter hands the GIL to whoever waits.
FETCH_ROWS = 500


def rows(conn: sa.Connection, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Every row of ``sql`` as tuples (fetched ``FETCH_ROWS`` at a time)."""
    out: list[tuple[Any, ...]] = []
    for chunk in chunks(conn, sql, params):
        out.extend(chunk)
    return out


def chunks(conn: sa.Connection, sql: str, params: Sequence[Any] = ()) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of ``sql`` as tuples, ``FETCH_ROWS`` at a time (a reader that may stop early, or that
    works on each part while the GIL is free for others between two; the statement ends when the
    generator does)."""
    cursor = _cursor(conn, sql, tuple(params))
    if cursor is None:
        every = [tuple(r) for r in conn.exec_driver_sql(sql, tuple(params)).all()]
        for start in range(0, len(every), FETCH_ROWS):
            yield every[start : start + FETCH_ROWS]
        return
    try:
        while True:
            chunk = cursor.fetchmany(FETCH_ROWS)
            if chunk:
                yield chunk
            if len(chunk) < FETCH_ROWS:
                return
    finally:
        cursor.close()


def first(conn: sa.Connection, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
    """The first row of ``sql`` as a tuple (None: no row)."""
    cursor = _cursor(conn, sql, tuple(params))
    if cursor is None:
        row = conn.exec_driver_sql(sql, tuple(params)).first()
        return tuple(row) if row is not None else None
    try:
        found = cursor.fetchone()
        return tuple(found) if found is not None else None
    finally:
        cursor.close()


def scalar(conn: sa.Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the first row of ``sql`` (None: no row)."""
    row = first(conn, sql, params)
    return row[0] if row else None


def execute(conn: sa.Connection, sql: str, params: Sequence[Any] = ()) -> None:
    """Run a statement whose rows (if any) are not wanted."""
    cursor = _cursor(conn, sql, tuple(params))
    if cursor is None:
        conn.exec_driver_sql(sql, tuple(params))
    else:
        cursor.close()


__all__ = ["execute", "first", "rows", "scalar"]
