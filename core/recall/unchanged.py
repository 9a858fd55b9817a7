"""A search's state statements answered again from what the same connection read before, while nothing changed.

A libSQL search reads small state statements before it answers: the keyword memory's state
(``keyword_memory``), the backlog check (``keyword.has_pending``) and the order cache's state
(``order_cache``). On caches the vector scan has just streamed 20 MB through, each costs ~50-70 µs of
SQLite's work, however small its answer. ``PRAGMA data_version`` costs about half of one, and says
whether any *other* connection (of this process or another) committed to the file since this connection
last asked. It does not move on the connection's own commits, so ``total_changes()`` (the rows this
connection inserted, updated or deleted, triggers' included, committed or rolled back) is read with it:
the pair is the connection's *stamp*.

A statement's answer kept with the stamp read before it is its answer again as long as the stamp is
equal: the file is as it was when the answer was read. So each answer is kept per connection, in the
pool's record of it (``Connection.info``, emptied whenever the record opens a new driver connection: a
new connection's ``data_version`` starts over), and the stamp is read once per read
(``Database.read()``, its ``read_token``), before the first statement that uses it.

Not used (every statement runs, as before): a connection outside ``read()`` (a write transaction, or one
made elsewhere), an in-memory database (its one connection is shared by every thread and also writes),
and any other database than a libSQL file (Postgres).
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import sqlalchemy as sa

from core.storage.database import read_token

T = TypeVar("T")

_STAMP_SQL = "SELECT data_version, total_changes() FROM pragma_data_version"
_STAMP = "recall:stamp"  # ``Connection.info`` key: (read token, stamp or None)
KEYWORD_STATE = "recall:keyword-state"  # ``Connection.info`` keys of the kept answers: (stamp, answer)
PENDING = "recall:pending"
ORDER_STATE = "recall:order-state"


def stamp(conn: sa.Connection) -> tuple[int, int] | None:
    """This read's stamp of ``conn`` (data_version, total_changes), read by its first caller in the read;
    None: answers are not kept for this connection (see the module's note)."""
    token = read_token(conn)
    if token is None:
        return None
    info = conn.info
    kept = info.get(_STAMP)
    if kept is not None and kept[0] == token:
        return kept[1]  # type: ignore[no-any-return]
    now: tuple[int, int] | None = None
    if _a_file(conn):
        version, changes = conn.connection.driver_connection.execute(_STAMP_SQL).fetchone()  # type: ignore[union-attr]
        now = (int(version), int(changes))
    info[_STAMP] = (token, now)
    return now


def _a_file(conn: sa.Connection) -> bool:
    return conn.dialect.name == "sqlite" and conn.engine.url.database not in (None, "", ":memory:")


def answer(conn: sa.Connection, key: str, read: Callable[[], T]) -> T:
    """``read()``'s answer (a statement on ``conn``, whose answer only the file's contents decide), or
    the one ``conn`` read for ``key`` before, while its stamp has not moved since."""
    now = stamp(conn)
    if now is None:
        return read()
    info = conn.info
    kept: Any = info.get(key)
    if kept is not None and kept[0] == now:
        return kept[1]  # type: ignore[no-any-return]
    value = read()
    info[key] = (now, value)
    return value
