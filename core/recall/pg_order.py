"""The hybrid re-rank's read of its candidates on Postgres: ``search.thread_order``'s answers.

For each candidate the re-rank needs the next user/assistant message of its thread, the UTC day it
was written and the speaker its text starts with. ``search.thread_order`` asks with ``id IN (?, ?,
…)``: one statement text per number of candidates, so on Postgres every search paid psycopg's query
parsing and the server's planning again, and SQLAlchemy's per-statement machinery. Here the ids go as
one ``text[]`` parameter: one statement text whatever the count (psycopg keeps it parsed; connections
prepare nothing on the server, so a transaction-mode pooler works: ``pg.database``), run on psycopg's own cursor
(``core.storage.pg.cursor``). The same subquery, the same decoding (``order_cache.day_of``,
``text_of_raw``, ``speaker_label``), so the answers are the same (test).

Kept between searches (``PgOrderCache``), as libSQL's ``order_cache.OrderCache`` keeps them: the
candidates' threads are read whole once (their user/assistant messages in (createdAt, id) order, each
with its day and speaker label) and answer every later search from memory. The change log
(``pg_changes``) tells every process of each write to the messages table: messages appended to a kept
thread are read and put in their place; a message changed or deleted drops its threads. A database
without the log reads every time (``thread_order``).
"""

from __future__ import annotations

import sys
import threading
from bisect import bisect_left
from collections import OrderedDict
from datetime import date
from typing import Any, Callable, Mapping

import sqlalchemy as sa

from core.recall.pg_changes import ChangeLog, Inbox
from core.recall.schema import text_of_raw
from core.recall.order_cache import day_of
from core.recall.text import speaker_label
from core.storage.pg import cursor

Order = tuple[str | None, date | None, str | None]  # (next message id, UTC day, speaker label)

# The next user/assistant message of ``m``'s thread (``pg_hybrid`` reads it in its own statement too).
# Ids compare by code point (``COLLATE "C"``), as SQLite and Python compare them, whatever the
# database's collation: ``PgOrderCache`` answers from memory and must order a thread the same way.
NEXT_ID = (
    '(SELECT n.id FROM mastra_messages n WHERE n.thread_id = m.thread_id '
    "AND n.role IN ('user', 'assistant') AND n.\"createdAt\" >= m.\"createdAt\" "
    'AND (n."createdAt" > m."createdAt" OR n.id COLLATE "C" > m.id) ORDER BY n."createdAt", n.id COLLATE "C" LIMIT 1)'
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


MAX_WHOLE_ROWS = 100_000  # messages of whole threads kept (the least recently asked go first; a larger thread is read per search)

# A thread's user/assistant messages: id, createdAt in microseconds (the order's key: the text form
# keeps milliseconds only), createdAt as read (its day), content (its speaker label).
_THREAD_ROWS = (
    'SELECT thread_id, id, CAST(extract(epoch FROM "createdAt") * 1000000 AS bigint), "createdAt", content '
    "FROM mastra_messages WHERE thread_id = ANY(CAST(? AS text[])) AND role IN ('user', 'assistant')"
)
_APPENDED_ROWS = (
    'SELECT thread_id, id, CAST(extract(epoch FROM "createdAt") * 1000000 AS bigint), "createdAt", content '
    "FROM mastra_messages WHERE id = ANY(CAST(? AS text[])) AND thread_id = ANY(CAST(? AS text[])) "
    "AND role IN ('user', 'assistant')"
)


class _Thread:
    """A kept thread: (createdAt µs, id) ascending (ids by code point, as ``NEXT_ID`` compares them),
    and each message's answer as ``thread_order`` gives it (with its label)."""

    __slots__ = ("thread_id", "keys", "answers")

    def __init__(self, thread_id: str, rows: list[tuple[str, int, Any, Any]]) -> None:
        self.thread_id = thread_id
        rows.sort(key=lambda r: (r[1], r[0]))
        self.keys = [(micros, mid) for mid, micros, _, _ in rows]
        self.answers: dict[str, Order] = {}
        nxt: str | None = None
        for mid, _, created, content in reversed(rows):
            self.answers[mid] = (nxt, day_of(created), speaker_label(text_of_raw(content)))
            nxt = mid

    def add(self, mid: str, micros: int, created: Any, content: Any) -> None:
        """A message appended: it goes in its place and becomes the next message of the one before it."""
        key = (micros, mid)
        at = bisect_left(self.keys, key)
        self.keys.insert(at, key)
        nxt = self.keys[at + 1][1] if at + 1 < len(self.keys) else None
        self.answers[mid] = (nxt, day_of(created), speaker_label(text_of_raw(content)))
        if at:
            before = self.keys[at - 1][1]
            _, day, label = self.answers[before]
            self.answers[before] = (mid, day, label)


class PgOrderCache:
    """``thread_order``'s answers kept per whole thread, told of writes by the change log. Thread-safe:
    changes wait in an ``Inbox`` and are applied by the next search."""

    def __init__(self, log: ChangeLog) -> None:
        self._log = log
        self._lock = threading.Lock()  # held across a search's reads (``sync``, ``read``)
        self._threads: OrderedDict[str, _Thread] = OrderedDict()  # least recently asked first
        self._of: dict[str, _Thread] = {}  # message id -> its kept thread
        self._whole_rows = 0
        self._too_large: set[str] = set()  # threads larger than MAX_WHOLE_ROWS (read per search)
        self._inbox = Inbox(log, lambda source: source == "messages")

    # -- reading -------------------------------------------------------------------------------
    def sync(self, conn: sa.Connection) -> bool:
        """Apply the writes told since the last search; False: no log, every search reads."""
        if not self._log.sync(conn):
            return False
        with self._lock:
            self._apply(conn)
        return True

    def read(self, conn: sa.Connection, message_ids: list[str], *, labels: bool, reader: Any = None,
             threads: Callable[[], Mapping[str, str | None]] | None = None, synced: bool | None = None,
             ) -> dict[str, Order]:
        """The answers of ``thread_order`` (``reader``, the libSQL read, is not used): from kept threads,
        reading the candidates' threads whole first (``threads``: each candidate's thread as its index
        rows say; a wrong guess only costs the read), the rest by ``thread_order``."""
        if not (self.sync(conn) if synced is None else synced):
            return thread_order(conn, message_ids, labels=labels)
        out: dict[str, Order] = {}
        with self._lock:
            self._apply(conn)
            missing = self._known(message_ids, labels, out)
            if missing and threads is not None:
                hints = threads()
                wanted = sorted({t for m in missing if (t := hints.get(m)) is not None
                                 and t not in self._threads and t not in self._too_large})
                if wanted:
                    self._load(conn, wanted)
                    missing = self._known(missing, labels, out)
        if missing:
            out.update(thread_order(conn, missing, labels=labels))
        return out

    def _known(self, message_ids: list[str], labels: bool, out: dict[str, Order]) -> list[str]:
        missing: list[str] = []
        of = self._of
        used: set[_Thread] = set()
        for mid in message_ids:
            thread = of.get(mid)
            if thread is None:
                missing.append(mid)
            else:
                used.add(thread)
                found = thread.answers[mid]
                out[mid] = found if labels else (found[0], found[1], None)
        for thread in used:  # (recently asked: kept longest)
            self._threads.move_to_end(thread.thread_id)
        return missing

    def _load(self, conn: sa.Connection, thread_ids: list[str]) -> None:
        sizes = dict(cursor.rows(conn, "SELECT thread_id, count(*) FROM mastra_messages "
                                       "WHERE thread_id = ANY(CAST(? AS text[])) GROUP BY thread_id", (text_array(thread_ids),)))
        fit: list[str] = []
        need = 0
        for t in thread_ids:
            size = int(sizes.get(t, 0))
            if size > MAX_WHOLE_ROWS:
                self._too_large.add(t)  # never kept whole: read per search
                continue
            if need + size > MAX_WHOLE_ROWS:
                continue  # (this search's other threads take the room: read per search this time)
            fit.append(t)
            need += size
        if not fit:
            return
        while self._threads and self._whole_rows + need > MAX_WHOLE_ROWS:  # the least recently asked go
            self._drop(next(iter(self._threads)))
        rows: dict[str, list[tuple[str, int, Any, Any]]] = {t: [] for t in fit}
        for thread_id, mid, micros, created, content in cursor.rows(conn, _THREAD_ROWS, (text_array(fit),)):
            rows[thread_id].append((sys.intern(mid), int(micros), created, content))
        for thread_id, found in rows.items():
            thread = self._threads[thread_id] = _Thread(thread_id, found)
            for mid in thread.answers:
                self._of[mid] = thread
            self._whole_rows += len(found)

    def _apply(self, conn: sa.Connection) -> None:
        """The inbox's changes (under ``_lock``): appends read and put in place, rewrites drop threads."""
        reset, inbox = self._inbox.take()
        appended: set[str] = set()
        threads: set[str] = set()
        for change in inbox:
            if change.op == "append" and change.message_ids is not None and change.thread_ids is not None:
                kept = [t for t in change.thread_ids if t is not None and t in self._threads]
                if kept:
                    appended.update(m for m in change.message_ids if m is not None)
                    threads.update(kept)
                self._too_large.difference_update(t for t in change.thread_ids if t is not None)
            elif change.thread_ids is None:
                reset = True
            else:
                for t in change.thread_ids:
                    if t is not None:
                        self._drop(t)
                        self._too_large.discard(t)
        if reset:
            self._threads.clear()
            self._of.clear()
            self._whole_rows = 0
            self._too_large.clear()
            return
        if not appended:
            return
        rows = cursor.rows(conn, _APPENDED_ROWS, (text_array(sorted(appended)), text_array(sorted(threads))))
        for thread_id, mid, micros, created, content in rows:
            thread = self._threads.get(thread_id)
            if thread is None:
                continue  # dropped by a rewrite in the same batch
            if mid in thread.answers:  # held already (its load read it): not an append after all, or a
                self._drop(thread_id)  # rewrite told later; read the thread again when needed
                continue
            mid = sys.intern(mid)
            thread.add(mid, int(micros), created, content)
            self._of[mid] = thread
            self._whole_rows += 1

    def _drop(self, thread_id: str) -> None:
        thread = self._threads.pop(thread_id, None)
        if thread is not None:
            for mid in thread.answers:
                self._of.pop(mid, None)
            self._whole_rows -= len(thread.keys)
