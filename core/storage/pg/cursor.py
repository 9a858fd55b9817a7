"""Hand-written SQL run on psycopg's own cursor, for the statements every recall search runs.

``Connection.exec_driver_sql`` costs SQLAlchemy's execution context, result metadata and row
processors per statement; a Postgres hybrid search runs about six statements, and that machinery
was a large share of the client's CPU per search. ``rows`` takes the same SQLAlchemy connection
(the search's transaction), the same SQL (``?`` placeholders, rewritten once per statement text by
``adapt.qmark_to_format``) and the same parameters, and returns the rows as psycopg's tuples: the
values are the same (the loaders and dumpers of ``adapt`` are registered on the psycopg connection
itself). Listeners of SQLAlchemy's ``before_cursor_execute`` event still see every statement (tests
and benches count statements with it). psycopg's errors arrive unwrapped; ``Database.read()`` /
``write()`` translate server and connection faults as they always did.
"""

from __future__ import annotations

from typing import Any, Sequence

import sqlalchemy as sa
from psycopg import pq

from core.storage.pg.adapt import qmark_to_format


def rows(conn: sa.Connection, sql: str, params: Sequence[Any] = (), binary: bool = False) -> list[tuple[Any, ...]]:
    """Every row of ``sql`` (empty for a statement that returns none). ``binary``: the server sends the
    values in their binary form (a ``bytea`` as its bytes, not hex text: a read of many vectors)."""
    statement = qmark_to_format(sql)
    values = tuple(params)
    raw = conn.connection.driver_connection
    assert raw is not None
    with raw.cursor() as cursor:
        listeners = conn.dispatch.before_cursor_execute
        if listeners:
            for listener in listeners:
                listener(conn, cursor, statement, values, None, False)
        cursor.execute(statement, values, binary=binary or None)  # () too: psycopg then reads the doubled ``%`` as one
        return cursor.fetchall() if cursor.description is not None else []


def scalar(conn: sa.Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the first row of ``sql`` (None: no row)."""
    found = rows(conn, sql, params)
    return found[0][0] if found else None


def in_transaction(conn: sa.Connection) -> bool:
    """Whether ``conn`` is open with a transaction begun, by SQLAlchemy or by a statement of ``rows``
    (psycopg begins one itself; SQLAlchemy does not know of it)."""
    if conn.closed:
        return False
    if conn.in_transaction():
        return True
    raw = conn.connection.driver_connection
    return raw is not None and raw.info.transaction_status in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR)
