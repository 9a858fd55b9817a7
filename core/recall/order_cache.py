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

Whole threads. Reading the candidates one search at a time cost ~40 rows a search (tens of µs each)
at 10k messages: the read of a thread's user/assistant messages, done once (``_Thread``, up to
``MAX_WHOLE_ROWS`` rows kept in all), answers every later candidate of that thread from memory, like
the vector matrix; when a new thread needs the room, the least recently asked threads go (asked since
the kept threads filled half their room; the others in the order they were read). A
user/assistant message's next message is the one after it in the thread's
(createdAt, id) order, which is the read's subquery's order when every time and id is text (a thread
with any other value is not kept whole); its day and label come from the same columns and the same
decoding as ``search.thread_order`` (a text whose start the database could not cut out is read by
``thread_order``, like any message of another role). An append to a kept thread is applied in place
(it becomes the next message of the one before it); an update or delete drops everything.
"""

from __future__ import annotations

import sys
import threading
from bisect import bisect_left
from collections import OrderedDict
from datetime import date, timezone
from typing import Any, Callable, ContextManager, Literal, Mapping, NamedTuple, cast

import sqlalchemy as sa

from core.background import BackgroundLoads, CancelToken
from core.recall.tables import STATE_TABLE
from core.recall.text import LABEL_CHARS, speaker_label
from core.storage import dialect, driver_sql
from core.storage.catalog import has_table
from core.timeutil import parse_iso

MESSAGES_REWRITES = "messages:rewrites"  # state key bumped by triggers on message updates and deletes
MAX_KEPT = 200_000
# From this many messages (of a search's threads not kept yet) they are read whole in the background when
# attached (``OrderCache.attach``): ~0.4 s at 100,000 messages, which the search that needed them used to wait for.
BACKGROUND_ROWS = 20_000
MAX_CHANGES = 4096  # change-log entries kept for ``changes_since`` (arrays marked less often start over)
MAX_WHOLE_ROWS = 100_000  # messages of whole threads kept (the least recently asked go first; a larger thread is read per candidate)

_STATE_SQL = (f"SELECT (SELECT max(rowid) FROM mastra_messages), "
              f"(SELECT value FROM {STATE_TABLE} WHERE key = '{MESSAGES_REWRITES}')")

Order = tuple[str | None, date | None, str | None]  # (next message id, UTC day, speaker label)
Reader = Callable[..., dict[str, Order]]
_UA = ("user", "assistant")


class Change(NamedTuple):
    """One entry of the change log ``OrderCache.changes_since`` reads: ``messages``: this message's answer
    changed; ``threads``: any answer of this thread's messages may have; ``others``: any answer of this
    thread's messages other than its user and assistant messages may have (those are told one by one)."""

    kind: Literal["messages", "threads", "others"]
    id: str


class Changes(NamedTuple):
    """Changes since a position of the log, by kind (``Change``): message ids, thread ids, thread ids."""

    messages: set[str]
    threads: set[str]
    others: set[str]


class _Thread:
    """The user/assistant messages of one thread: (createdAt, id) ascending, and per message
    [next message id, createdAt, the start of its text as ``dialect.json_string_head_sql`` selects it,
    its answer with a label once decoded]."""

    __slots__ = ("keys", "rows")

    def __init__(self, rows: list[tuple[str, str, object]], every: dict[str, list[Any]],
                 decoded: Mapping[str, tuple[date | None, str | None]] | None = None) -> None:
        """``rows``: (id, createdAt, head); each message's entry also goes into ``every`` (the entries of
        every kept thread by message id: an id is in one thread only). ``decoded``: each message's day and
        label (``decode``), when read already: its entry gets its answer now."""
        rows.sort(key=lambda r: (r[1], r[0]))
        self.keys = [(created, mid) for mid, created, _ in rows]
        self.rows: dict[str, list[Any]] = {}
        nxt: str | None = None
        get = (decoded or {}).get
        for mid, created, head in reversed(rows):
            known = get(mid)
            self.rows[mid] = every[mid] = [nxt, created, head, (nxt, *known) if known is not None else None]
            nxt = mid

    def add(self, mid: str, created: str, head: object, every: dict[str, list[Any]], answers: dict[str, Order]) -> str | None:
        """A message appended to the thread: the next message of the one before it (whose answer in
        ``answers`` is dropped with its entry's); returns that one (None: the appended message is first)."""
        key = (created, mid)
        at = bisect_left(self.keys, key)
        self.keys.insert(at, key)
        self.rows[mid] = every[mid] = [self.keys[at + 1][1] if at + 1 < len(self.keys) else None, created, head, None]
        if not at:
            return None
        before = self.rows[self.keys[at - 1][1]]
        before[0], before[3] = mid, None
        answers.pop(self.keys[at - 1][1], None)
        return self.keys[at - 1][1]


def decode(created: object, head: object) -> tuple[date | None, str | None] | None:
    """A message's day and speaker label as ``_answer`` decodes them (None: its text's start must be read
    whole)."""
    first = head_text(head)
    return None if first is None else (day_of(created), speaker_label(first))


def _answer(row: list[Any], labels: bool) -> Order | None:
    """``thread_order``'s answer for a kept thread's entry, or None when its text's start must be read whole."""
    if not labels:
        return (row[0], day_of(row[1]), None)
    if row[3] is None:
        known = decode(row[1], row[2])
        if known is None:
            return None
        row[3] = (row[0], *known)
    return row[3]  # type: ignore[no-any-return]


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
        self._threads: OrderedDict[str, _Thread] = OrderedDict()  # threads kept whole, least recently asked first
        self._every: dict[str, list[Any]] = {}  # their entries by message id
        self._of: dict[str, str] = {}  # their messages' thread ids
        # The labelled answers of those entries (each entry's [3]) by message id: a search looks up about a
        # hundred candidates with cold caches, and the entry's list is two more misses than its answer.
        self._answers: dict[str, Order] = {}
        self._whole_rows = 0
        self._not_whole: set[str] = set()  # threads larger than ``MAX_WHOLE_ROWS``, or not all text
        # Reading large threads in the background (``attach``): how to open one read transaction, and the loads.
        self._background: tuple[Callable[[], ContextManager[sa.Connection]], BackgroundLoads] | None = None
        self.background_rows = BACKGROUND_ROWS
        # What changed, in order, for arrays kept by row (``order_rows.OrderRows``), each entry a ``Change``
        # or None when every answer may have changed (a rewrite); ``_changes[0]`` is change number
        # ``_changes_start``, older ones are forgotten (``MAX_CHANGES``).
        self._changes: list[Change | None] = []
        self._changes_start = 0

    def changes_since(self, position: int | None) -> tuple[int, Changes | None]:
        """The change-log position now, and the changes since ``position`` (an earlier answer's position;
        None: never asked), or None when every answer may have changed since (a rewrite, or changes older
        than the log keeps)."""
        with self._lock:
            end = self._changes_start + len(self._changes)
            if position is None or position < self._changes_start:
                return end, None
            out = Changes(set(), set(), set())
            for change in self._changes[position - self._changes_start:]:
                if change is None:
                    return end, None
                getattr(out, change.kind).add(change.id)
            return end, out

    def threads_of(self, message_ids: list[str]) -> dict[str, tuple[str, bool]]:
        """The thread each kept message is in, as the messages table says, and whether it is a user or
        assistant message (whose answer an append changes only when it is the one before the appended
        message: ``Change``); messages not kept are left out."""
        out: dict[str, tuple[str, bool]] = {}
        with self._lock:
            for mid in message_ids:
                thread = self._of.get(mid)
                if thread is not None:
                    out[mid] = (thread, True)
                    continue
                kept = self._kept.get(mid)
                if kept is not None:
                    out[mid] = (kept.thread_id, False)
        return out

    def _changed(self, change: Change | None) -> None:
        """Log a change (under ``_lock``); None: every answer may have changed."""
        self._changes.append(change)
        if len(self._changes) > MAX_CHANGES:
            drop = len(self._changes) // 2
            del self._changes[:drop]
            self._changes_start += drop

    def sync(self, conn: sa.Connection) -> bool:
        """Bring what is kept up to date with the messages table; False: this database reads every time.
        A search calls it early (``synced`` of ``read``): one statement, cheaper while SQLite's pages are
        still in the CPU's caches than after the vector scan."""
        return self._sync(conn)

    def read(self, conn: sa.Connection, message_ids: list[str], *, labels: bool, reader: Reader,
             threads: Callable[[], Mapping[str, str | None]] | None = None, synced: bool | None = None,
             ) -> dict[str, Order]:
        """``reader(conn, ids, labels=labels, keys=...)`` for the messages not kept, the kept answers for
        the others. ``threads``: gives the thread each message is thought to be in (its index rows'),
        asked only when a message is not kept: such a thread is read whole once and kept (a wrong guess
        only costs the read: a message is answered from a kept thread only when that thread's own rows
        hold it). ``synced``: what ``sync`` said in this search (None: sync now)."""
        if not (self._sync(conn) if synced is None else synced):
            return reader(conn, message_ids, labels=labels)
        out: dict[str, Order] = {}
        missing = self._known(message_ids, labels, out)
        if not missing:
            return out
        state = self._state
        if threads is not None:
            hints = threads()
            with self._lock:
                wanted = {t for m in missing if (t := hints.get(m)) is not None
                          and t not in self._threads and t not in self._not_whole}
            if wanted and self._load(conn, sorted(wanted), state):
                missing = self._known(missing, labels, out)
                if not missing:
                    return out
        keys: dict[str, tuple[object, object]] = {}
        fresh = reader(conn, missing, labels=labels, keys=keys)
        out.update(fresh)
        with self._lock:
            if self._state != state:  # changed while reading: keep nothing of this read
                return out
            if len(self._kept) > MAX_KEPT:
                self._kept.clear()
                self._by_thread.clear()
            for mid, order in fresh.items():
                thread_id, created = keys.get(mid, (None, None))
                if not isinstance(thread_id, str) or not isinstance(created, str):
                    continue  # a thread or time that is not text: not kept (its order cannot be compared here)
                self._forget(mid)
                self._kept[mid] = _Kept(thread_id, (created, mid), order, labels)
                self._by_thread.setdefault(thread_id, set()).add(mid)
        return out

    def _known(self, message_ids: list[str], labels: bool, out: dict[str, Order]) -> list[str]:
        """Put the kept answers in ``out``; return the messages without one."""
        missing: list[str] = []
        with self._lock:
            every, answers = self._every, self._answers
            # Which threads were asked is only tracked once the kept threads fill half their room (a
            # tenth of a search's re-rank read at 100 candidates): before, nothing has to make room.
            of = self._of if self._whole_rows > MAX_WHOLE_ROWS // 2 else None
            used: set[str] = set()
            looked = list(map(answers.get, message_ids)) if labels else None
            if looked is not None and None not in looked:
                # (the common case, every labelled answer kept: looked up by C-level maps, not one by one)
                out.update(zip(message_ids, cast("list[Order]", looked)))
                if of is not None:
                    used = set(map(of.__getitem__, message_ids))
                message_ids = []
            for mid in message_ids:
                if labels:
                    found = answers.get(mid)
                    if found is not None:
                        out[mid] = found
                        if of is not None:
                            used.add(of[mid])
                        continue
                row = every.get(mid)
                if row is not None:
                    found = row[3] if labels and row[3] is not None else _answer(row, labels)
                    if found is not None:
                        out[mid] = found
                        if of is not None:
                            used.add(of[mid])
                        if labels:
                            answers[mid] = found
                        continue
                kept = self._kept.get(mid)
                if kept is not None and (kept.labelled or not labels):
                    out[mid] = kept.order
                else:
                    missing.append(mid)
            threads = self._threads
            for thread_id in used:  # (recently asked: kept longest)
                threads.move_to_end(thread_id)
        return missing

    def _load(self, conn: sa.Connection, thread_ids: list[str], state: tuple[int, int] | None,
              cancel: CancelToken | None = None) -> bool:
        """Read these threads whole and keep them, making room by dropping the least recently asked
        threads; False if none was kept. A thread larger than ``MAX_WHOLE_ROWS`` is never kept whole;
        one that does not fit beside this search's other threads is read per candidate this time.
        Threads of ``background_rows`` messages or more are read by a background load when attached
        (False now: this search reads its candidates by id)."""
        sizes: dict[str, int] = {}
        for start in range(0, len(thread_ids), 500):
            chunk = tuple(thread_ids[start : start + 500])
            sizes.update(driver_sql.rows(conn, "SELECT thread_id, count(*) FROM mastra_messages "
                                         f"WHERE thread_id IN ({','.join('?' * len(chunk))}) GROUP BY thread_id", chunk))
        fit: list[str] = []
        too_large: list[str] = []
        need = 0
        for t in thread_ids:
            size = sizes.get(t, 0)
            if size > MAX_WHOLE_ROWS:
                too_large.append(t)
            elif need + size <= MAX_WHOLE_ROWS:
                fit.append(t)
                need += size
        if cancel is None and self._later(fit, need, too_large):
            return False
        rows: dict[str, list[tuple[str, str, object]]] = {t: [] for t in fit}
        bad: set[str] = set()
        head = dialect.json_string_head_sql(conn, "content", "content", LABEL_CHARS)
        intern = sys.intern
        for start in range(0, len(fit), 500):
            chunk = tuple(fit[start : start + 500])
            for part in driver_sql.chunks(
                conn, f'SELECT thread_id, id, "createdAt", {head or "NULL"} FROM mastra_messages '
                f"WHERE thread_id IN ({','.join('?' * len(chunk))}) AND role IN ('user', 'assistant')", chunk,
            ):
                for thread, mid, created, first in part:
                    if isinstance(mid, str) and isinstance(created, str) and thread in rows:
                        rows[thread].append((intern(mid), created, first))  # (as ``VectorSet`` keeps them)
                    else:
                        bad.add(thread)
                if cancel is not None and cancel.cancelled:
                    return False
        # Each message's day and label decoded here, outside the lock, for the whole thread: a search would
        # decode each candidate the first time it is one (~2.5 µs each, ~45 a search over the first few
        # hundred searches at 10k messages, measured 2026-12-06); this load reads every head anyway.
        decoded: dict[str, tuple[date | None, str | None]] = {}
        for t, found in rows.items():
            if t in bad:
                continue
            for mid, created, first in found:
                known = decode(created, first)
                if known is not None:
                    decoded[mid] = known
            if cancel is not None and cancel.cancelled:
                return False
        with self._lock:
            if self._state != state:  # changed while reading: keep nothing of this read
                return False
            self._not_whole.update(too_large)
            self._not_whole.update(bad)
            new = {t: found for t, found in rows.items() if t not in bad and t not in self._threads}
            adding = sum(len(found) for found in new.values())
            while self._threads and self._whole_rows + adding > MAX_WHOLE_ROWS:  # the least recently asked go
                self._drop(next(iter(self._threads)))
            for t, found in new.items():
                self._threads[t] = _Thread(found, self._every, decoded)
                self._of.update(dict.fromkeys(self._threads[t].rows, t))
                self._whole_rows += len(found)
        return len(rows) > len(bad)

    def attach(self, snapshot: Callable[[], ContextManager[sa.Connection]], loads: BackgroundLoads) -> None:
        """Read threads of ``background_rows`` messages or more whole on a thread of ``loads`` (in one
        ``snapshot()``), not inside the search that first needs them: until they are kept, searches
        read their candidates by id (the same answers)."""
        self._background = (snapshot, loads)

    def _later(self, fit: list[str], need: int, too_large: list[str]) -> bool:
        """Whether these threads are read whole by a background load (started now, or one is running)."""
        if self._background is None or need < self.background_rows:
            return False
        snapshot, loads = self._background
        with self._lock:
            self._not_whole.update(too_large)  # (known now; the load may not take them)

        def load(token: CancelToken) -> None:
            with snapshot() as conn:  # (the state and the rows as of one moment)
                top, rewrites = driver_sql.first(conn, _STATE_SQL) or (None, None)
                state = (int(top or 0), int(rewrites or 0))
                with self._lock:
                    if self._state != state:  # (a search synced another state: a later one starts it again)
                        return
                self._load(conn, fit, state, token)

        loads.start("thread-order", load)
        return True

    def _sync(self, conn: sa.Connection) -> bool:
        if self._usable is None:  # (a database Mastra wrote, opened without our migrations, has no state table)
            found = has_table(conn, STATE_TABLE) and conn.exec_driver_sql(
                f"SELECT value FROM {STATE_TABLE} WHERE key = ?", (MESSAGES_REWRITES,)).first()
            self._usable = bool(found)
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
        head = dialect.json_string_head_sql(conn, "content", "content", LABEL_CHARS) or "NULL"
        rows = driver_sql.rows(conn, f'SELECT id, thread_id, "createdAt", role, {head} FROM mastra_messages '
                               "WHERE rowid > ? AND rowid <= ? ORDER BY rowid", (before[0], state[0]))
        # (no other role is a next message)
        appended = [(mid, thread_id, (created, mid)) for mid, thread_id, created, role, _ in rows if role in _UA]
        with self._lock:
            if self._state != before:
                return self._state == state
            if any(not isinstance(c, str) or not isinstance(m, str) for m, _, (c, _) in appended):
                self._clear()
                self._state = state
                return True
            for mid, thread_id, created, role, first in rows:
                if role not in _UA:
                    continue  # (nobody's next message: no answer changes)
                whole = self._threads.get(thread_id)
                if whole is None or mid in whole.rows:
                    if whole is not None:  # (not an append after all: read the thread again when needed)
                        self._drop(thread_id)
                    self._changed(Change("threads", thread_id))  # (which of its messages changed is not known)
                else:
                    mid = sys.intern(mid)
                    prior = whole.add(mid, created, first, self._every, self._answers)
                    self._of[mid] = thread_id
                    self._whole_rows += 1
                    # Of the thread's user/assistant messages only the one before changed; its others (tool
                    # messages, read by id) may all have.
                    if prior is not None:
                        self._changed(Change("messages", prior))
                    self._changed(Change("others", thread_id))
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

    def _drop(self, thread_id: str) -> None:
        """No longer keep this thread whole (under ``_lock``)."""
        whole = self._threads.pop(thread_id, None)
        if whole is not None:
            for gone in whole.rows:
                del self._every[gone]
                self._answers.pop(gone, None)
                self._of.pop(gone, None)
            self._whole_rows -= len(whole.keys)

    def _forget(self, mid: str) -> None:
        kept = self._kept.pop(mid, None)
        if kept is not None:
            mates = self._by_thread.get(kept.thread_id)
            if mates is not None:
                mates.discard(mid)
                if not mates:
                    del self._by_thread[kept.thread_id]

    def _clear(self) -> None:
        self._changed(None)
        self._kept.clear()
        self._by_thread.clear()
        self._threads.clear()
        self._every.clear()
        self._of.clear()
        self._answers.clear()
        self._whole_rows = 0
        self._not_whole.clear()


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


def head_text(head: object) -> str | None:
    """The start of a text as ``json_string_head_sql`` selected it, or None when it may not be the
    start ``text_of_raw`` would give: NULL, bytes that are not valid UTF-8 (Python would decode the
    whole content with replacement characters) or only white space (``text_of_raw`` then reads the
    message's parts instead)."""
    if not isinstance(head, (bytes, bytearray)):
        return None
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.strip() else None


_DAYS: dict[str, date] = {}  # "YYYY-MM-DD" -> its date (a search reads tens of rows, mostly of a few days)


def day_of(created: object) -> date | None:
    """The UTC day a message was written, from its stored ``createdAt`` (None if unreadable)."""
    if isinstance(created, str) and len(created) >= 10 and created[4] == "-" and created.endswith("Z"):
        known = _DAYS.get(created[:10])
        if known is not None:
            return known
        try:
            day = date.fromisoformat(created[:10])  # our and Mastra's format: already UTC
        except ValueError:
            pass
        else:
            if len(_DAYS) < 100_000:
                _DAYS[created[:10]] = day
            return day
    try:
        return parse_iso(created).astimezone(timezone.utc).date()  # type: ignore[arg-type]
    except Exception:
        return None
