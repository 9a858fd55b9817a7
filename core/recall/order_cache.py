"""What the hybrid re-rank read of each candidate (``search.thread_order``), kept between searches.

The re-rank needs, per candidate, the next message of its thread, the day it was written and the
speaker its text starts with: one batched read of ~70 rows per search, a third of a hybrid search's
time at 10k messages. The answers only change when messages change, so they are kept per message and
dropped exactly when they may have changed:

- a message updated or deleted (by any process): triggers bump ``messages:rewrites`` in the recall
  state table (migration ``0023_recall_keyword_memory``), and everything kept is dropped;
- a message appended: it can only become the next message of a message of its own thread that comes
  before it and whose next message came after it (or that had none); exactly those are dropped (the
  next messages' times are read then, on a write, not on every search).

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

_STATE_SQL = (f"SELECT (SELECT max(rowid) FROM mastra_messages), "
              f"(SELECT value FROM {STATE_TABLE} WHERE key = '{MESSAGES_REWRITES}')")

Order = tuple[str | None, date | None, str | None]  # (next message id, UTC day, speaker label)
Reader = Callable[..., dict[str, Order]]


class _Kept(NamedTuple):
    thread_id: str
    key: tuple[str, str]  # (createdAt, id): the order of a thread, as the read's subquery compares
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
        """``reader(conn, ids, labels=labels, keys=...)`` for the messages not kept, the kept answers for
        the others."""
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
        keys: dict[str, tuple[object, object]] = {}
        fresh = reader(conn, missing, labels=labels, keys=keys)
        out.update(fresh)
        with self._lock:
            if self._state != state:  # changed while reading: keep nothing of this read
                return out
            if len(self._kept) > MAX_KEPT:
                self._clear()
            for mid, order in fresh.items():
                thread_id, created = keys.get(mid, (None, None))
                if not isinstance(thread_id, str) or not isinstance(created, str):
                    continue  # a thread or time that is not text: not kept (its order cannot be compared here)
                self._forget(mid)
                self._kept[mid] = _Kept(thread_id, (created, mid), order, labels)
                self._by_thread.setdefault(thread_id, set()).add(mid)
        return out

    def _sync(self, conn: sa.Connection) -> bool:
        if self._usable is None:
            found = conn.exec_driver_sql(f"SELECT value FROM {STATE_TABLE} WHERE key = ?", (MESSAGES_REWRITES,)).first()
            self._usable = found is not None
        if not self._usable:
            return False
        # The driver's own cursor (a database with the counter is libSQL): this runs before every re-rank,
        # and SQLAlchemy's result machinery costs more than the statement.
        top, rewrites = conn.connection.driver_connection.execute(_STATE_SQL).fetchone()  # type: ignore[union-attr]
        state = (int(top or 0), int(rewrites or 0))
        with self._lock:
            if state == self._state:
                return True
            before = self._state
            if before is None or before[1] != state[1] or state[0] < before[0]:
                self._clear()
                self._state = state
                return True
        appended = [(mid, thread_id, (created, mid)) for mid, thread_id, created, role in conn.exec_driver_sql(
            'SELECT id, thread_id, "createdAt", role FROM mastra_messages WHERE rowid > ? AND rowid <= ?',
            (before[0], state[0])).all() if role in ("user", "assistant")]  # (no other role is a next message)
        with self._lock:
            if self._state != before:
                return self._state == state
            if any(not isinstance(c, str) or not isinstance(m, str) for m, _, (c, _) in appended):
                self._clear()
                self._state = state
                return True
            # A kept message before an appended one, in its thread, may now have it as its next message:
            # unless its next message comes before the appended one (then nothing changed for it).
            doubtful = {m: k for _, t, key in appended for m in self._by_thread.get(t, ())
                        if (k := self._kept[m]).key < key}
            nexts = {k.order[0] for k in doubtful.values() if k.order[0] is not None}
            known = {m: self._kept[m].key for m in nexts if m in self._kept}
            known.update(_keys(conn, [m for m in nexts if m not in known]))
            for _, thread_id, key in appended:
                for mid in list(self._by_thread.get(thread_id, ())):
                    kept = self._kept[mid]
                    if kept.key >= key:
                        continue
                    nxt = kept.order[0]
                    if nxt is None or nxt not in known or key < known[nxt]:
                        self._forget(mid)
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


def _keys(conn: sa.Connection, message_ids: list[str]) -> dict[str, tuple[str, str]]:
    """(createdAt, id) of these messages, for those whose time is text."""
    out: dict[str, tuple[str, str]] = {}
    ids = list(dict.fromkeys(message_ids))
    for start in range(0, len(ids), 500):
        chunk = tuple(ids[start : start + 500])
        for mid, created in conn.exec_driver_sql(
            f'SELECT id, "createdAt" FROM mastra_messages WHERE id IN ({",".join("?" * len(chunk))})', chunk
        ).all():
            if isinstance(created, str) and isinstance(mid, str):
                out[mid] = (created, mid)
    return out
