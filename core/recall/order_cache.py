"""What the hybrid re-rank read of each candidate (``search.thread_order``), kept between searches.

The re-rank needs, per candidate, the next message of its thread, the day it was written and the
speaker its text starts with: one batched read of ~70 rows per search, a third of a hybrid search's
time at 10k messages. The answers only change when messages change, so they are kept per message and
dropped exactly when they may have changed:

- a message updated or deleted (by any process): triggers bump ``messages:rewrites`` in the recall
  state table (migration ``0023_recall_keyword_memory``), and everything kept is dropped;
- a message appended: it can only become the next message of a message of its own thread that comes
  before it and whose next message came after it (or that had none); exactly those are dropped.

Appends are told by ``max(rowid)`` of the messages table (a new row always gets a rowid above the
others unless the top one was deleted, which bumps the counter). Checked with one statement before
each re-rank. A database without the counter (not migrated, or Postgres) reads every time.
"""

from __future__ import annotations

import threading
from datetime import date
from typing import Callable, NamedTuple

import sqlalchemy as sa

from core.recall.tables import STATE_TABLE

MESSAGES_REWRITES = "messages:rewrites"  # state key bumped by triggers on message updates and deletes
MAX_KEPT = 200_000

Order = tuple[str | None, date | None, str | None]  # (next message id, UTC day, speaker label)
Reader = Callable[..., dict[str, Order]]


class _Kept(NamedTuple):
    thread_id: str
    key: tuple[str, str]  # (createdAt, id): the order of a thread, as the read's subquery compares
    next_key: tuple[str, str] | None  # the next message's, None when it had none
    order: Order
    labelled: bool  # read with labels (else the label is unknown, not None)


class OrderCache:
    """Kept ``thread_order`` answers of one database. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._usable: bool | None = None
        self._state: tuple[int, int] | None = None
        self._kept: dict[str, _Kept] = {}
        self._by_thread: dict[str, set[str]] = {}

    def read(self, conn: sa.Connection, message_ids: list[str], *, labels: bool, reader: Reader) -> dict[str, Order]:
        """``reader(conn, ids, labels=labels)`` for the messages not kept, the kept answers for the others."""
        if not self._sync(conn):
            return reader(conn, message_ids, labels=labels)
        out: dict[str, Order] = {}
        missing: list[str] = []
        with self._lock:
            for mid in message_ids:
                kept = self._kept.get(mid)
                if kept is not None and (kept.labelled or not labels):
                    out[mid] = kept.order
                else:
                    missing.append(mid)
        if not missing:
            return out
        state = self._state
        fresh = reader(conn, missing, labels=labels)
        out.update(fresh)
        keys = _keys(conn, [*fresh, *(o[0] for o in fresh.values() if o[0] is not None)])
        with self._lock:
            if self._state != state:  # changed while reading: keep nothing of this read
                return out
            if len(self._kept) > MAX_KEPT:
                self._clear()
            for mid, order in fresh.items():
                own = keys.get(mid)
                nxt = keys.get(order[0]) if order[0] is not None else None
                if own is None or (order[0] is not None and nxt is None):
                    continue  # a time that is not text: not kept (its order cannot be compared here)
                self._forget(mid)
                self._kept[mid] = _Kept(own[0], own[1], nxt[1] if nxt else None, order, labels)
                self._by_thread.setdefault(own[0], set()).add(mid)
        return out

    def _sync(self, conn: sa.Connection) -> bool:
        if self._usable is None:
            found = conn.exec_driver_sql(f"SELECT value FROM {STATE_TABLE} WHERE key = ?", (MESSAGES_REWRITES,)).first()
            self._usable = found is not None
        if not self._usable:
            return False
        top, rewrites = conn.exec_driver_sql(
            f"SELECT (SELECT max(rowid) FROM mastra_messages), (SELECT value FROM {STATE_TABLE} WHERE key = ?)",
            (MESSAGES_REWRITES,)).one()
        state = (int(top or 0), int(rewrites or 0))
        with self._lock:
            if state == self._state:
                return True
            before = self._state
            if before is None or before[1] != state[1] or state[0] < before[0]:
                self._clear()
                self._state = state
                return True
        appended = conn.exec_driver_sql(
            'SELECT id, thread_id, "createdAt", role FROM mastra_messages WHERE rowid > ? AND rowid <= ?',
            (before[0], state[0])).all()
        with self._lock:
            if self._state != before:
                return self._state == state
            for mid, thread_id, created, role in appended:
                if role not in ("user", "assistant"):
                    continue  # never anyone's next message
                if not isinstance(created, str) or not isinstance(mid, str):
                    self._clear()
                    break
                key = (created, mid)
                for other in list(self._by_thread.get(thread_id, ())):
                    kept = self._kept[other]
                    if kept.key < key and (kept.next_key is None or key < kept.next_key):
                        self._forget(other)
            self._state = state
        return True

    def _forget(self, mid: str) -> None:
        kept = self._kept.pop(mid, None)
        if kept is not None:
            mates = self._by_thread.get(kept.thread_id)
            if mates is not None:
                mates.discard(mid)
                if not mates:
                    del self._by_thread[kept.thread_id]

    def _clear(self) -> None:
        self._kept.clear()
        self._by_thread.clear()


def _keys(conn: sa.Connection, message_ids: list[str]) -> dict[str, tuple[str, tuple[str, str]]]:
    """(thread id, (createdAt, id)) of these messages, for those whose thread and time are text."""
    out: dict[str, tuple[str, tuple[str, str]]] = {}
    ids = list(dict.fromkeys(message_ids))
    for start in range(0, len(ids), 500):
        chunk = tuple(ids[start : start + 500])
        for mid, thread_id, created in conn.exec_driver_sql(
            f'SELECT id, thread_id, "createdAt" FROM mastra_messages WHERE id IN ({",".join("?" * len(chunk))})', chunk
        ).all():
            if isinstance(thread_id, str) and isinstance(created, str) and isinstance(mid, str):
                out[mid] = (thread_id, (created, mid))
    return out
