"""Each vector-set row's thread-order answer as arrays by row, kept right under writes.

The hybrid re-rank needs, per candidate, what ``search.thread_order`` answers: its next message, the
day it was written and the speaker its text starts with. The order cache (``order_cache.OrderCache``)
keeps those answers by message id; ``OrderRows`` keeps the same answers by row of one ``VectorSet``
(its next message as a row, its day as an ordinal, its label as a code), so that a search fed the
scan's rows gathers them with numpy instead of looking ids up (issue 20 item 4, the rows-first route:
docs/ARCHITECTURE.md, Known problems, the s31-rows2 row).

Rebuilding the arrays for a whole set costs more than two hybrid searches (3.4-6.5 ms at 10k rows), and
an agent writes every turn, so they change with what changes, as the order cache's answers do:

- each row starts unknown, and a search fills the unknown rows among its candidates from the order
  cache (``fill``: a few rows a search after a write);
- a filled row remembers the thread the order cache placed its message in (the messages table's, not
  the vector row's) and whether it is a user or assistant message, and each change the order cache
  sees is told by its change log (``OrderCache.changes_since``, ``order_cache.Change``): an append to
  a thread kept whole marks the row of the message before the appended one (the only user/assistant
  message whose next message changed; an append never changes a day or a label) and the thread's
  rows of other roles; an append to another thread marks all that thread's rows; a rewrite (any
  update or delete) marks every row;
- a row is only filled from an answer read at the change-log position the arrays were marked up to,
  and only when no change was logged since (else it stays unknown and the next search fills it).

A next message without exactly one row in the set (not embedded yet, a keyword-only message, or one
with several chunk vectors) is kept by id for that row (``NEXT_BY_ID``), not as a row.
"""

from __future__ import annotations

import threading
from datetime import date
from typing import TYPE_CHECKING, Callable, Mapping, NamedTuple, Protocol

import numpy as np

from core.recall.order_cache import Changes

if TYPE_CHECKING:  # pragma: no cover
    import sqlalchemy as sa

    from core.recall.order_cache import Order, OrderCache, Reader

NO_NEXT = -1  # ``next_row``: the message is its thread's last (no next message)
NEXT_BY_ID = -2  # ``next_row``: the next message has no single row in this set; its id is in ``next_ids``
NO_DAY = 0  # ``day``: unreadable (``thread_order``'s None)
NO_LABEL = -1  # ``label``: none


_NONE = Changes(set(), set(), set())  # (``changes_since`` when nothing changed)


class Rows(Protocol):
    """What ``OrderRows`` reads of its set (``matrix.VectorSet``)."""

    n: int
    message_ids: list[str]
    layout: int  # changes when the rows move (``VectorSet.build_partition``)

    def row_of(self, message_id: str) -> int | None: ...

    def positions_of(self, message_id: str) -> list[int]: ...


class Gathered(NamedTuple):
    """``OrderRows.gather``'s answers of some rows, in their order: each one's next message (a row,
    ``NO_NEXT`` or ``NEXT_BY_ID``), day (an ordinal, ``NO_DAY``: None) and label (a code of ``labels``,
    ``NO_LABEL``: None); by place, the next message's id of those whose next is ``NEXT_BY_ID``."""

    next_row: np.ndarray
    day: np.ndarray
    label: np.ndarray
    next_ids: dict[int, str]
    labels: list[str]


#: A set of at most this many rows with no answer known is filled whole by its first search (``filled``).
WHOLE_FILL_ROWS = 50_000


class OrderRows:
    """The thread-order answers of one set's rows (capacity grows with the set; ``known`` says which
    rows hold their answer). Thread-safe: the arrays change under ``_lock``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.next_row = np.empty(0, dtype=np.int32)
        self.day = np.empty(0, dtype=np.int32)  # ``date.toordinal()``; ``NO_DAY``: None
        self.label = np.empty(0, dtype=np.int32)  # a code of ``labels``; ``NO_LABEL``: None
        self.known = np.zeros(0, dtype=bool)
        self.thread = np.empty(0, dtype=np.int32)  # the order cache's thread of the row's message (a code of ``_threads``)
        self.ua = np.zeros(0, dtype=bool)  # the row's message is a user or assistant message (``OrderCache.threads_of``)
        self.next_ids: dict[int, str] = {}  # the rows whose ``next_row`` is ``NEXT_BY_ID``: their next message's id
        self.labels: list[str] = []
        self._label_codes: dict[str, int] = {}
        self._threads: dict[str, int] = {}
        # By thread code, the rows filled with a message of another role (a row filled again stays listed: at
        # worst it is marked unknown once more; emptied with everything on a rewrite).
        self._others: dict[int, set[int]] = {}
        self._position: int | None = None  # the order cache's change-log position marked up to (None: never)

    def _grow(self, n: int) -> None:
        have = len(self.known)
        if n <= have:
            return
        size = max(n, 2 * have, 256)
        for name in ("next_row", "day", "label", "thread"):
            grown = np.empty(size, dtype=np.int32)
            grown[:have] = getattr(self, name)
            setattr(self, name, grown)
        for name in ("known", "ua"):
            flags = np.zeros(size, dtype=bool)
            flags[:have] = getattr(self, name)
            setattr(self, name, flags)

    def mark(self, cache: "OrderCache", vset: Rows) -> int:
        """Mark unknown the rows the order cache's changes since the last mark may have changed; returns
        the change-log position marked up to."""
        with self._lock:
            position, changes = cache.changes_since(self._position)
            have = len(self.known)
            if changes is None:
                self.known[:] = False
                self.next_ids.clear()
                self._others.clear()
            elif changes.messages or changes.threads or changes.others:
                codes = self._threads.get
                every = [c for t in changes.threads if (c := codes(t)) is not None]
                if every:
                    self.known[:have] &= ~np.isin(self.thread[:have], every)
                for t in changes.others:
                    for row in self._others.get(codes(t, -1), ()):
                        self.known[row] = False
                for mid in changes.messages:
                    for row in vset.positions_of(mid):
                        if row < have:
                            self.known[row] = False
            self._position = position
            return position

    def fill(self, conn: "sa.Connection", cache: "OrderCache", vset: Rows, rows: np.ndarray, *, reader: "Reader",
             threads: Callable[[], Mapping[str, str | None]] | None = None, synced: bool | None = None) -> bool:
        """Give ``rows`` (of ``vset``) their answers: ``mark`` first, then the unknown ones among them read
        from the order cache (``OrderCache.read`` with labels) and kept. False: this database's order
        is not kept (``OrderCache.sync`` said so): the arrays are not usable, read every time.
        ``synced``: what ``OrderCache.sync`` said in this search (None: sync now)."""
        if not (cache.sync(conn) if synced is None else synced):
            return False
        position = self.mark(cache, vset)
        with self._lock:
            self._grow(vset.n)
            unknown = rows[~self.known[rows]]
        self._read(conn, cache, vset, unknown, position, reader, threads)
        return True

    def filled(self, conn: "sa.Connection", cache: "OrderCache", vset: Rows, rows: np.ndarray, *, reader: "Reader",
               threads: Callable[[], Mapping[str, str | None]] | None = None,
               synced: bool | None = None) -> "Gathered | None":
        """``fill`` then ``gather`` in one pass (a search's way): the answers of ``rows``, or None when this
        database's order is not kept or one of them was left unknown. When every row already holds its
        answer (the usual case), they are gathered under the lock that found them known."""
        if not (cache.sync(conn) if synced is None else synced):
            return None
        position = self.mark(cache, vset)
        with self._lock:
            self._grow(vset.n)
            known = self.known[rows]
            if known.all():
                return self._gathered(rows)
            unknown = rows[~known]
            if vset.n <= WHOLE_FILL_ROWS and not self.known[:vset.n].any():
                # Nothing known yet (a set just loaded, or the order rewritten): every row at once, ~4 ms at
                # 10k, instead of each of the next ~100 searches paying for its own candidates' (~0.3 ms more
                # a search than the kept arrays save: `bench/recall_speed.py`'s single pass).
                unknown = np.arange(vset.n)
        self._read(conn, cache, vset, unknown, position, reader, threads)
        return self.gather(rows)

    def _read(self, conn: "sa.Connection", cache: "OrderCache", vset: Rows, unknown: np.ndarray, position: int,
              reader: "Reader", threads: Callable[[], Mapping[str, str | None]] | None) -> None:
        """Read the answers of the ``unknown`` rows from the order cache and keep them, unless the order
        changed since ``position`` (then they stay unknown: the next search fills them)."""
        if not len(unknown):
            return
        unknown = np.unique(unknown)
        mids = [vset.message_ids[r] for r in unknown.tolist()]
        answers = cache.read(conn, list(dict.fromkeys(mids)), labels=True, reader=reader, threads=threads, synced=True)
        placed = cache.threads_of(mids)
        with self._lock:
            if self._position != position or cache.changes_since(position)[1] != _NONE:
                return  # changed meanwhile: left unknown, the next search fills them
            self._grow(vset.n)
            for row, mid in zip(unknown.tolist(), mids):
                answer = answers.get(mid)
                thread = placed.get(mid)
                if answer is None or thread is None:  # (not kept by the order cache: read every time)
                    continue
                self._put(row, answer, *thread, vset)

    def _put(self, row: int, answer: "Order", thread: str, ua: bool, vset: Rows) -> None:
        nxt, day, label = answer
        self.next_ids.pop(row, None)
        if nxt is None:
            self.next_row[row] = NO_NEXT
        else:
            at = vset.row_of(nxt)
            if at is None:
                self.next_row[row] = NEXT_BY_ID
                self.next_ids[row] = nxt
            else:
                self.next_row[row] = at
        self.day[row] = day.toordinal() if day is not None else NO_DAY
        if label is None:
            self.label[row] = NO_LABEL
        else:
            code = self._label_codes.get(label)
            if code is None:
                code = self._label_codes[label] = len(self.labels)
                self.labels.append(label)
            self.label[row] = code
        code = self._threads.get(thread)
        if code is None:
            code = self._threads[thread] = len(self._threads)
        self.thread[row] = code
        self.ua[row] = ua
        if not ua:
            self._others.setdefault(code, set()).add(row)
        self.known[row] = True

    def gather(self, rows: np.ndarray) -> "Gathered | None":
        """The kept answers of ``rows`` as arrays (``Gathered``); None when one of them is unknown (``fill``
        left it so)."""
        with self._lock:
            if len(rows) and (int(rows.max()) >= len(self.known) or not self.known[rows].all()):
                return None
            return self._gathered(rows)

    def _gathered(self, rows: np.ndarray) -> Gathered:
        """The answers of ``rows``, every one known (under ``_lock``)."""
        nxt = self.next_row[rows]
        next_ids: dict[int, str] = {}
        if self.next_ids:  # (a known row is ``NEXT_BY_ID`` only with its id there: ``_put``)
            by_id = np.flatnonzero(nxt == NEXT_BY_ID)
            next_ids = {i: self.next_ids[int(rows[i])] for i in by_id.tolist()}
        return Gathered(nxt, self.day[rows], self.label[rows], next_ids, self.labels)

    def answers(self, vset: Rows, rows: np.ndarray) -> dict[int, "Order"] | None:
        """The kept answers of ``rows`` as ``thread_order`` gives them (next message id, day, label), by row;
        None when one of them is unknown (``fill`` left it so)."""
        with self._lock:
            if len(rows) and (int(rows.max()) >= len(self.known) or not self.known[rows].all()):
                return None
            out: dict[int, Order] = {}
            for row in rows.tolist():
                at = int(self.next_row[row])
                nxt = None if at == NO_NEXT else self.next_ids[row] if at == NEXT_BY_ID else vset.message_ids[at]
                day = int(self.day[row])
                label = int(self.label[row])
                out[row] = (nxt, date.fromordinal(day) if day != NO_DAY else None,
                            self.labels[label] if label != NO_LABEL else None)
            return out
