"""The hybrid re-rank's read of its candidates on Postgres: ``search.thread_order``'s answers.

For each candidate the re-rank needs the next user/assistant message of its thread, the UTC day it
was written and the speaker its text starts with. ``search.thread_order`` asks with ``id IN (?, ?,
…)``: one statement text per number of candidates, so on Postgres every search paid psycopg's query
parsing and the server's planning again, and SQLAlchemy's per-statement machinery. Here the ids go as
one ``text[]`` parameter: one statement text whatever the count (psycopg keeps it parsed; connections
prepare nothing on the server, so a transaction-mode pooler works: ``pg.database``), run on psycopg's own cursor
(``core.storage.pg.cursor``). The same subquery, the same decoding (``order_cache.day_of``,
``text_of_raw``, ``speaker_label``), so the answers are the same (test).

Nothing is kept between searches on Postgres (``order_cache.OrderCache`` needs libSQL's append
marker and rewrite counter): ``PgThreadOrder`` stands where a libSQL index keeps its ``OrderCache``.
"""

from __future__ import annotations

from datetime import date
from typing import Any

import sqlalchemy as sa

from core.recall.schema import text_of_raw
from core.recall.order_cache import day_of
from core.recall.text import speaker_label
from core.storage.pg import cursor

Order = tuple[str | None, date | None, str | None]  # (next message id, UTC day, speaker label)

# The next user/assistant message of ``m``'s thread (``pg_hybrid`` reads it in its own statement too).
NEXT_ID = (
    '(SELECT n.id FROM mastra_messages n WHERE n.thread_id = m.thread_id '
    "AND n.role IN ('user', 'assistant') AND n.\"createdAt\" >= m.\"createdAt\" "
    'AND (n."createdAt" > m."createdAt" OR n.id > m.id) ORDER BY n."createdAt", n.id LIMIT 1)'
)
_SQL = (
    'SELECT m.id, m."createdAt", ' + NEXT_ID + ', m.thread_id{text} '
    "FROM mastra_messages m WHERE m.id = ANY(CAST(? AS text[]))"
)
_WITH_TEXT = _SQL.format(text=", m.content")
_WITHOUT_TEXT = _SQL.format(text="")


def text_array(values: list[str]) -> str:
    """Postgres's text form of a ``text[]`` (sent untyped and cast): every element quoted, ``"`` and
    ``\\`` escaped, so any string reads back as itself (cheaper than the driver's list adaptation)."""
    return "{" + ",".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "}"


def thread_order(
    conn: sa.Connection, message_ids: list[str], *, labels: bool = False,
    keys: dict[str, tuple[object, object]] | None = None,
) -> dict[str, Order]:
    """``search.thread_order`` on Postgres: the same answers, in one statement."""
    out: dict[str, Order] = {}
    if not message_ids:
        return out
    for row in cursor.rows(conn, _WITH_TEXT if labels else _WITHOUT_TEXT, (text_array(message_ids),)):
        out[row[0]] = (row[2], day_of(row[1]), speaker_label(text_of_raw(row[4])) if labels else None)
        if keys is not None:
            keys[row[0]] = (row[3], row[1])
    return out


class PgThreadOrder:
    """What a Postgres ``RecallIndex`` has where a libSQL one keeps its ``OrderCache``: the same
    ``read``, answered by ``thread_order`` above every time (``reader``, the libSQL read, is not used)."""

    def sync(self, conn: sa.Connection) -> bool:
        return False  # nothing kept

    def read(self, conn: sa.Connection, message_ids: list[str], *, labels: bool, reader: Any = None,
             threads: Any = None, synced: bool | None = None) -> dict[str, Order]:
        return thread_order(conn, message_ids, labels=labels)
