"""Paging through a long thread for a viewer: a page by position, and a message's position.

``MemoryStore.browse_messages`` / ``message_position`` call these. Two differences from the engine's
reads, both for a person scrolling a 100,000-message thread:

* Order is (createdAt, rowid), not (createdAt, id). The rowid tie-break keeps the whole ORDER BY
  inside the (thread_id, createdAt) index (an index entry ends with the rowid), so skipping 99,800
  rows is an index walk of a few milliseconds; with ``id`` SQLite sorts in a temporary B-tree and a
  deep page takes ~10x longer. The two orders differ only between messages stored in the same ms.
* A row that does not parse comes back as an ``UnreadableMessage`` in its place, so one corrupt row
  never hides its neighbours.

The engine's reads (``MemoryStore.list_messages`` and friends) skip such a row instead and say so:
they return ``MessageRows``, a list of the readable messages whose ``unreadable`` names each
skipped row and why, and log it, so a turn goes on without it and its prompt record reports it
(Invariant 15: one bad row never breaks a thread).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from core.messages import Message
from core.storage import dialect
from core.storage import schema as t
from core.storage.database import Database
from core.timeutil import parse_iso

log = logging.getLogger(__name__)

_EPOCH = "1970-01-01T00:00:00.000Z"


@dataclass(frozen=True)
class UnreadableMessage:
    """A stored row that is not a readable message: what is known of it, and why it failed."""

    id: str
    role: str
    created_at: datetime
    error: str
    thread_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "threadId": self.thread_id, "role": self.role, "error": self.error}


class MessageRows(list[Message]):
    """Messages read from storage; ``unreadable`` holds the stored rows skipped because they do not parse."""

    def __init__(self, messages: Iterable[Message] = (), unreadable: Iterable[UnreadableMessage] = ()) -> None:
        super().__init__(messages)
        self.unreadable: list[UnreadableMessage] = list(unreadable)


def readable(rows: Iterable[Any]) -> MessageRows:
    """The messages of ``rows`` (mappings of ``mastra_messages`` columns); a row that does not parse is
    skipped, logged, and listed in ``unreadable``."""
    out = MessageRows()
    for row in rows:
        item = _message_or_unreadable(row)
        if isinstance(item, UnreadableMessage):
            log.warning("skipped stored message %s of thread %s: %s", item.id, item.thread_id, item.error)
            out.unreadable.append(item)
        else:
            out.append(item)
    return out


def read_page(db: Database, thread_id: str, offset: int, limit: int) -> list[Message | UnreadableMessage]:
    """Rows ``offset``..``offset+limit`` of a thread in (createdAt, rowid) order.

    The inner select finds the page's rowids from the index alone; only those rows are read.
    """
    msg = t.messages.c
    rowid = dialect.row_key()  # rowid on libSQL, the message id on Postgres
    page = (
        sa.select(rowid).select_from(t.messages).where(msg.thread_id == thread_id)
        .order_by(msg.createdAt.asc(), rowid.asc()).limit(limit).offset(offset)
    )
    stmt = sa.select(t.messages).where(rowid.in_(page)).order_by(msg.createdAt.asc(), rowid.asc())
    with db.read() as conn:
        rows = conn.execute(stmt).mappings().all()
    return [_message_or_unreadable(r) for r in rows]


@dataclass(frozen=True)
class NewestPage:
    """The newest messages of a thread (oldest first) and the thread's message count."""

    total: int
    messages: list[Message | UnreadableMessage]


def read_newest(db: Database, thread_id: str, limit: int) -> NewestPage:
    """The newest ``limit`` messages of a thread, in page order, and how many the thread holds.

    A keyset read, not an offset: it walks the (thread_id, createdAt) index backwards from the end and
    stops after ``limit`` entries, so the newest rows of a 100,000-message thread cost what those of a
    short one do (an offset walks every entry before the page). The count is the index-only scan
    that gives the viewer its row count; both run on one connection.
    """
    msg = t.messages.c
    rowid = dialect.row_key()  # rowid on libSQL, the message id on Postgres
    newest = (
        sa.select(rowid).select_from(t.messages).where(msg.thread_id == thread_id)
        .order_by(msg.createdAt.desc(), rowid.desc()).limit(limit)
    )
    stmt = sa.select(t.messages).where(rowid.in_(newest)).order_by(msg.createdAt.asc(), rowid.asc())
    with db.read() as conn:
        total = conn.execute(
            sa.select(sa.func.count()).select_from(t.messages).where(msg.thread_id == thread_id)).scalar()
        rows = conn.execute(stmt).mappings().all() if limit > 0 else []
    return NewestPage(int(total or 0), [_message_or_unreadable(r) for r in rows])


def _message_or_unreadable(row: Any) -> Message | UnreadableMessage:
    try:
        return Message.from_row(row)
    except (ValueError, TypeError) as exc:
        try:
            when = parse_iso(row["createdAt"])
        except (ValueError, TypeError, AttributeError):
            when = parse_iso(_EPOCH)
        thread = row.get("thread_id") if hasattr(row, "get") else None
        return UnreadableMessage(str(row["id"]), str(row["role"]), when, str(exc),
                                 str(thread) if thread is not None else None)


def position(db: Database, thread_id: str, message_id: str) -> int | None:
    """How many messages of the thread come before ``message_id`` in page order; None if it is gone.

    Two indexed queries, so a search hit deep in a long thread is found without reading the rows
    before it.
    """
    msg = t.messages.c
    rowid = dialect.row_key()  # rowid on libSQL, the message id on Postgres
    with db.read() as conn:
        target = conn.execute(
            sa.select(msg.createdAt, rowid.label("rid")).where(msg.id == message_id, msg.thread_id == thread_id)
        ).first()
        if target is None:
            return None
        before = conn.execute(
            sa.select(sa.func.count()).select_from(t.messages).where(
                msg.thread_id == thread_id,
                sa.or_(msg.createdAt < target.createdAt,
                       sa.and_(msg.createdAt == target.createdAt, rowid < target.rid)),
            )
        ).scalar()
    return int(before or 0)
