"""Recall windows: each hit of a search with the ``before`` messages older than it and the ``after``
newer ones in its own thread (Mastra's ``include`` with ``withPreviousMessages`` /
``withNextMessages``), for every hit of a turn at once.

``MemoryStore.message_windows`` / ``messages_with_context`` call ``read``. The rules (spec §2.4):

* A hit is the stored message with that id, whatever its role; a hit that does not exist, or belongs
  to another resource than ``resource_id`` (a NULL ``resourceId`` belongs to every resource), has an
  empty window. The include's thread id is not consulted: the window is in the hit's own thread.
* Its neighbours are the nearest messages of the same thread in (createdAt, id) order that are not
  ``system`` and (with ``resource_id``) not another resource's: such a row, written before ownership
  was checked per message, never comes along, nor counts towards ``before`` / ``after``.

Two statements for the whole list (which messages are in which window, then those messages by key),
so a turn's recall costs two round trips whatever its top-k (it was three statements per hit: the
hit, then each side). SQLite has no LATERAL join and no correlated LIMIT/OFFSET, so each side is a
recursive walk: every step finds the next eligible message from the previous one with an
index seek (``LIMIT 1``), as the per-hit ``LIMIT n`` read did, for at most ``before`` (``after``)
steps. Postgres runs the same text.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from core.storage import dialect, driver_sql, message_pages
from core.storage.message_pages import MessageRows

# Hits per statement: four parameters each stays under SQLite's oldest limit of 999 parameters; a
# turn's top-k is far below it. Rows read by key per statement, likewise.
HITS = 200
ROWS = 500

_FIELDS = ("id", "thread_id", "content", "role", "type", "createdAt", "resourceId")


def _step(direction: str, owned: str) -> str:
    """The recursive term: from the window's last message ``w.id``, the next eligible message of its
    thread towards ``direction`` ("<": older, ">": newer). The last message's time is looked up by
    its key inside the subquery rather than joined: a join would make Postgres sort every message of
    the thread on that side instead of reading its (thread_id, createdAt) index in order."""
    order = "DESC" if direction == "<" else "ASC"
    bound = "<=" if direction == "<" else ">="
    at = '(SELECT c."createdAt" FROM mastra_messages c WHERE c.id = w.id)'
    return (
        "SELECT w.n, (SELECT q.id FROM mastra_messages q"
        f' WHERE q.thread_id = w.thread_id AND q."createdAt" {bound} {at}'
        f' AND (q."createdAt", q.id) {direction} ({at}, w.id)'
        f" AND q.role != 'system'{owned.format(t='q')}"
        f' ORDER BY q."createdAt" {order}, q.id {order} LIMIT 1), w.thread_id, w.todo - 1'
        " FROM {name} w WHERE w.todo > 0 AND w.id IS NOT NULL"
    )


def _sql(hits: int, scoped: bool) -> str:
    """(include number, message id) of every message of every window of ``hits`` includes."""
    owned = ' AND ({t}."resourceId" IS NULL OR {t}."resourceId" = ?)' if scoped else ""
    values = ", ".join(["(CAST(? AS INTEGER), CAST(? AS TEXT), CAST(? AS INTEGER), CAST(? AS INTEGER))"] * hits)
    return (
        "WITH RECURSIVE"
        f" inc(n, id, back_n, ahead_n) AS (VALUES {values}),"
        " hit(n, id, thread_id, back_n, ahead_n) AS (SELECT inc.n, m.id, m.thread_id, inc.back_n, inc.ahead_n"
        f" FROM inc JOIN mastra_messages m ON m.id = inc.id WHERE 1 = 1{owned.format(t='m')}),"
        " older(n, id, thread_id, todo) AS (SELECT n, id, thread_id, back_n FROM hit WHERE back_n > 0"
        f" UNION ALL {_step('<', owned).format(name='older')}),"
        " newer(n, id, thread_id, todo) AS (SELECT n, id, thread_id, ahead_n FROM hit WHERE ahead_n > 0"
        f" UNION ALL {_step('>', owned).format(name='newer')})"
        " SELECT n, id FROM hit"
        " UNION SELECT n, id FROM older WHERE id IS NOT NULL"
        " UNION SELECT n, id FROM newer WHERE id IS NOT NULL"
    )


def read(conn: sa.Connection, includes: Sequence[tuple[str, int, int]], resource_id: str | None) -> list[MessageRows]:
    """The window of each ``(id, before, after)`` of ``includes``, in the same order: the hit and its
    neighbours, each once, oldest first ((createdAt, id)); empty for a hit that is missing or not
    ``resource_id``'s. A row that does not parse is left out and listed in ``unreadable``, as every
    engine read does; it still takes its place among the ``before`` / ``after`` it was counted in."""
    members: list[tuple[int, str]] = []
    for start in range(0, len(includes), HITS):
        chunk = includes[start:start + HITS]
        params: list[object] = []
        for n, (message_id, before, after) in enumerate(chunk, start):
            params.extend((n, message_id, before, after))
        if resource_id is not None:
            params.extend([resource_id] * 3)  # the hit's own check, then each side's step
        sql = _sql(len(chunk), resource_id is not None)
        members.extend((int(n), str(i)) for n, i in driver_sql.rows(conn, sql, params))
    # The rows in a second statement, by key: joined in the first, Postgres's planner (which cannot
    # tell how many rows a recursive walk yields) chose to read the whole table in key order at top-k 100.
    wanted = list(dict.fromkeys(i for _, i in members))
    select = ", ".join(dialect.stored_text_sql(conn, '"content"') if f == "content" else f'"{f}"' for f in _FIELDS)
    found: dict[str, MessageRows] = {}
    for start in range(0, len(wanted), ROWS):
        chunk_ids = wanted[start:start + ROWS]
        sql = f"SELECT {select} FROM mastra_messages WHERE id IN ({','.join('?' * len(chunk_ids))})"
        for row in driver_sql.rows(conn, sql, chunk_ids):
            found[row[0]] = message_pages.readable([dict(zip(_FIELDS, row))])  # parsed once, shared by windows
    windows = [MessageRows() for _ in includes]
    for n, message_id in members:
        one = found.get(message_id)
        if one is not None:  # (deleted between the two statements: gone, as if read a moment later)
            windows[n].extend(one)
            windows[n].unreadable.extend(one.unreadable)
    for window in windows:
        window.sort(key=lambda m: (m.created_at, m.id))
    return windows


__all__ = ["HITS", "ROWS", "read"]
