"""Passages: what recall embeds for a message, read from storage in one statement per batch.

A message's *passage* is its recall text together with the text of the previous user/assistant
message of its thread (its *context*): a reply such as "Yes, last Tuesday!" says nothing by itself,
with the turn it answers it does. The keyword doc indexes the same pair (context at a lower weight).

Each keyword doc and vector row stores the *passage hash* of what it was built from, so an index can
tell, without re-embedding, which rows no longer match their message: an edited message changes its
own passage and its next message's (whose context it is); a deleted message changes its next
message's. ``RecallIndex.refresh_messages`` and ``reindex`` compare hashes to find them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Sequence

import sqlalchemy as sa

from core.recall.schema import previous_sql, text_of_raw
from core.recall.text import passage_hash
from core.storage import bulk, dialect, driver_sql
from core.timeutil import to_iso

INDEXED_ROLES = ("user", "assistant")
_ROLES = ",".join(f"'{r}'" for r in INDEXED_ROLES)
CHUNK = 500


@dataclass(frozen=True)
class StoredPassage:
    """One stored message as recall sees it now."""

    message_id: str
    thread_id: str | None
    resource_id: str | None
    role: str
    created_at: Any  # as the column holds it (ISO text on libSQL, a timestamp on Postgres)
    text: str
    context: str

    @property
    def indexable(self) -> bool:
        return self.role in INDEXED_ROLES and bool(self.text.strip())

    @property
    def created_iso(self) -> str:
        return to_iso(self.created_at) if isinstance(self.created_at, datetime) else str(self.created_at)

    @property
    def hash(self) -> str:
        return passage_hash(self.context, self.text)


def _previous_sql(conn: sa.Connection) -> str:
    # The previous user/assistant message of the thread by (createdAt, id); the thread_id/createdAt
    # index answers each correlated subquery with one seek.
    return (
        f"(SELECT {dialect.stored_text_sql(conn, 'p.content')} FROM mastra_messages p "
        f"WHERE p.thread_id = m.thread_id AND p.role IN ({_ROLES}) AND p.\"createdAt\" <= m.\"createdAt\" "
        'AND (p."createdAt" < m."createdAt" OR p.id < m.id) ORDER BY p."createdAt" DESC, p.id DESC LIMIT 1)'
    )


def load(conn: sa.Connection, message_ids: Iterable[str]) -> dict[str, StoredPassage]:
    """The current passage of each stored message (missing ids: deleted), one statement (per 500 on
    Postgres; ``bulk.in_lists``)."""
    wanted = list(dict.fromkeys(message_ids))
    out: dict[str, StoredPassage] = {}
    sql = (
        f'SELECT m.id, m.thread_id, coalesce(m."resourceId", t."resourceId"), m.role, m."createdAt", '
        f"{dialect.stored_text_sql(conn, 'm.content')}, {_previous_sql(conn)} "
        "FROM mastra_messages m LEFT JOIN mastra_threads t ON t.id = m.thread_id WHERE m.id IN ({marks})"
    )
    for marks, params in bulk.in_lists(conn, wanted, CHUNK):
        for mid, tid, rid, role, created, raw, prev in conn.exec_driver_sql(sql.format(marks=marks), params):
            text = text_of_raw(raw)
            out[mid] = StoredPassage(mid, tid, rid, role, created, text, text_of_raw(prev) if prev is not None else "")
    return out


def contexts(conn: sa.Connection, message_ids: Iterable[str]) -> dict[str, str]:
    """The context (previous user/assistant message's text) of each stored message, one statement
    (per 500 messages on Postgres; ``bulk.in_lists``); ids not stored are left out."""
    wanted = list(dict.fromkeys(message_ids))
    out: dict[str, str] = {}
    previous = _previous_sql(conn)
    for marks, params in bulk.in_lists(conn, wanted, CHUNK):
        # One JSON list (libSQL): walked in order with a primary-key seek per id (CROSS JOIN keeps
        # json_each outside), where ``IN (SELECT ...)`` first built a temporary index of the list.
        sql = (f"SELECT m.id, {previous} FROM json_each(?) j CROSS JOIN mastra_messages m ON m.id = j.value"
               if marks == bulk.JSON_LIST else f"SELECT m.id, {previous} FROM mastra_messages m WHERE m.id IN ({marks})")
        for mid, prev in driver_sql.rows(conn, sql, params):
            out[mid] = text_of_raw(prev) if prev is not None else ""
    return out


def contexts_and_previous(
    conn: sa.Connection, message_ids: Sequence[str], thread_id: str, created_at: str, message_id: str,
) -> tuple[dict[str, str], str] | None:
    """``contexts(conn, message_ids)`` and ``schema.previous_text(conn, thread_id, created_at, message_id)``
    in one statement: a batch of one thread's new messages reads whether any is stored already and
    the text before its first message together (a statement a batch less). None when the ids do not
    go as one JSON list (Postgres, an id JSON would change): the caller reads them apart."""
    lists = list(bulk.in_lists(conn, list(dict.fromkeys(message_ids)), CHUNK))
    if len(lists) != 1 or lists[0][0] != bulk.JSON_LIST:
        return None
    # (A message id is never NULL: the row with none is the previous text's.)
    sql = (f"SELECT m.id, {_previous_sql(conn)} FROM json_each(?) j CROSS JOIN mastra_messages m ON m.id = j.value "
           f"UNION ALL SELECT NULL, {previous_sql(conn)}")
    out: dict[str, str] = {}
    previous = ""
    for mid, prev in driver_sql.rows(conn, sql, (*lists[0][1], thread_id, created_at, created_at, message_id)):
        text = text_of_raw(prev) if prev is not None else ""
        if mid is None:
            previous = text
        else:
            out[mid] = text
    return out, previous


def load_thread(conn: sa.Connection, thread_id: str) -> dict[str, StoredPassage]:
    """Every user/assistant message of a thread with its passage (used when a position is unknown)."""
    ids = [r[0] for r in conn.exec_driver_sql(
        f"SELECT id FROM mastra_messages WHERE thread_id = ? AND role IN ({_ROLES})", (thread_id,)
    )]
    return load(conn, ids)


def next_ids(conn: sa.Connection, anchors: Sequence[tuple[str, Any, str]]) -> set[str]:
    """The next user/assistant message after each (thread_id, createdAt, message_id) position: the
    messages whose context is (or was) the message at that position."""
    out: set[str] = set()
    sql = (
        f"SELECT n.id FROM mastra_messages n WHERE n.thread_id = ? AND n.role IN ({_ROLES}) "
        'AND n."createdAt" >= ? AND (n."createdAt" > ? OR n.id > ?) ORDER BY n."createdAt", n.id LIMIT 1'
    )
    for thread_id, created, mid in dict.fromkeys(anchors):
        row = conn.exec_driver_sql(sql, (thread_id, created, created, mid)).first()
        if row is not None:
            out.add(row[0])
    return out
