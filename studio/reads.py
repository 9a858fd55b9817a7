"""The reads the browsing panes run on worker threads. Plain functions: store in, plain data out.

They read only (browsing never writes). Two reads are not in ``MemoryStore`` yet and are done here
with SQLAlchemy Core over the engine's own table definitions: a page reader that survives a corrupt
row (``list_messages_page`` raises for the whole page) and stays fast deep into a long thread, and a
message's position in its thread (to jump to a search hit in a 100,000-message thread without
loading the rows before it). Both order by (createdAt, rowid): the same order as the engine's
(createdAt, id) except between messages stored in the same millisecond.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from core import Store
from core.messages import Message
from core.storage import dialect
from core.storage import schema as t
from core.storage.memory_store import ResourceSummary, ThreadSummary
from core.timeutil import parse_iso
from studio.logic.message_format import MessageRow, summarize, unreadable_row


@dataclass(frozen=True)
class TreeData:
    resources: list[ResourceSummary]
    threads: dict[str, list[ThreadSummary]]  # resource id -> its threads


def load_tree(store: Store) -> TreeData:
    resources = store.memory.list_resources()
    threads: dict[str, list[ThreadSummary]] = {}
    for summary in store.memory.thread_summaries(None):
        threads.setdefault(summary.thread.resource_id, []).append(summary)
    return TreeData(resources, threads)


def load_page(store: Store, thread_id: str, offset: int, limit: int) -> list[MessageRow]:
    """Rows ``offset``..``offset+limit`` in (createdAt, rowid) order.

    The rowid tie-break keeps the whole ORDER BY inside the (thread_id, createdAt) index (an index
    entry ends with the rowid), so skipping 99,800 rows is an index walk of a few milliseconds; with
    ``id`` as the tie-break SQLite sorts in a temporary B-tree and a deep page takes ~10x longer.
    The inner select finds the page's rowids from the index alone; only those rows are read.
    """
    msg = t.messages.c
    rowid = dialect.row_key()
    page = (
        sa.select(rowid).select_from(t.messages).where(msg.thread_id == thread_id)
        .order_by(msg.createdAt.asc(), rowid.asc()).limit(limit).offset(offset)
    )
    stmt = sa.select(t.messages).where(rowid.in_(page)).order_by(msg.createdAt.asc(), rowid.asc())
    with store.db.read() as conn:
        rows = conn.execute(stmt).mappings().all()
    return [_row(r) for r in rows]


def _row(r: Any) -> MessageRow:
    try:
        return summarize(Message.from_row(r))
    except (ValueError, TypeError) as exc:  # a corrupt row must not hide its neighbours
        try:
            when = parse_iso(r["createdAt"])
        except (ValueError, TypeError, AttributeError):
            when = parse_iso("1970-01-01T00:00:00.000Z")
        return unreadable_row(str(r["id"]), str(r["role"]), when, str(exc))


def count_messages(store: Store, thread_id: str) -> int:
    return store.memory.count_messages(thread_id)


def message_position(store: Store, thread_id: str, message_id: str) -> int | None:
    """The row index of a message in its thread's chronological order, or None if it is gone."""
    msg = t.messages.c
    rowid = dialect.row_key()
    with store.db.read() as conn:
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


@dataclass(frozen=True)
class SearchHit:
    message_id: str
    thread_id: str
    resource_id: str
    thread_title: str
    role: str
    text: str
    created_at: Any


def search_messages(store: Store, text: str, limit: int = 200) -> list[SearchHit]:
    hits = store.memory.search_text(text, limit=limit)
    titles: dict[str, tuple[str, str]] = {}
    out = []
    for m in hits:
        tid = m.thread_id or ""
        if tid not in titles:
            thread = store.memory.get_thread(tid)
            titles[tid] = (thread.title, thread.resource_id) if thread else ("", m.resource_id or "")
        title, resource = titles[tid]
        body = summarize(m).preview
        out.append(SearchHit(m.id, tid, resource, title, m.role, body, m.created_at))
    return out
