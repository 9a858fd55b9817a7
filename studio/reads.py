"""The reads the browsing panes run on worker threads. Plain functions: store in, plain data out.

They read only (browsing never writes), through the engine's stores; no SQL here. The message view
pages with ``MemoryStore.browse_messages`` (fast deep in a long thread, a corrupt row shown in its
place) and jumps to a search hit with ``MemoryStore.message_position``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core import Store
from core.messages import Message
from core.storage.memory_store import ResourceSummary, ThreadSummary
from core.storage.message_pages import UnreadableMessage
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
    """Rows ``offset``..``offset+limit`` of the message view (the store's viewer order)."""
    return [_row(m) for m in store.memory.browse_messages(thread_id, offset, limit)]


def _row(m: Message | UnreadableMessage) -> MessageRow:
    if isinstance(m, UnreadableMessage):  # shown in its place, so it never hides its neighbours
        return unreadable_row(m.id, m.role, m.created_at, m.error)
    return summarize(m)


def count_messages(store: Store, thread_id: str) -> int:
    return store.memory.count_messages(thread_id)


def message_position(store: Store, thread_id: str, message_id: str) -> int | None:
    """The row index of a message in the message view, or None if it is gone."""
    return store.memory.message_position(thread_id, message_id)


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
