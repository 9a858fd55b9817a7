"""Which connection serves a ``Database.read()``, and how a libSQL file's statements wait for a lock.

libsql-experimental keeps the GIL while SQLite's busy handler waits, so a statement waiting there for
another process's lock (a write's ``BEGIN IMMEDIATE``; a read of a file in a rollback journal mode while
another process holds its EXCLUSIVE lock, e.g. during a ``BEGIN EXCLUSIVE`` or a VACUUM) freezes every
other thread of the process, the Studio's UI thread among them, for up to the busy timeout. So those
statements run with busy timeout 0 and wait here instead: ``wait_while_busy`` retries with sleeps that
release the GIL, until the same overall deadline, then lets SQLite's "database is locked" through
(``Database`` turns it into ``DatabaseBusyError``).

A read's statements are retried one by one, which is safe: a statement that failed with SQLITE_BUSY did
nothing, and a read holds no lock that a retry could lose (in a rollback journal a read in a transaction
holds its SHARED lock from its first statement on, and no writer can then take the file away from it).
Statements of a write transaction are not retried here (SQLite says to roll such a transaction back);
``BEGIN IMMEDIATE`` is, before the transaction exists.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, TypeVar

import sqlalchemy as sa

BUSY_TIMEOUT_MS = 10_000
"""How long a statement waits for another connection's lock before "database is locked"."""

T = TypeVar("T")

# ``read()`` numbers every read (``read_token``): held beside the connection object, never in it, so
# ending a read touches nothing of a connection a driver fault has just invalidated.
_READ_TOKENS: "weakref.WeakKeyDictionary[sa.Connection, int]" = weakref.WeakKeyDictionary()
_READS = itertools.count(1)


def read_token(conn: sa.Connection) -> int | None:
    """Which ``Database.read()`` ``conn`` is serving: a number no other read gets, also when one kept
    connection serves many reads (``reads()``), so a cache may keep an answer for the rest of one read
    and never past it. None for a connection outside ``read()`` (a write, or one made elsewhere)."""
    return _READ_TOKENS.get(conn)


def start_read(conn: sa.Connection) -> None:
    """``conn`` serves a new read from now on (its own ``read_token``)."""
    _READ_TOKENS[conn] = next(_READS)


def end_read(conn: sa.Connection) -> None:
    _READ_TOKENS.pop(conn, None)


def is_busy(exc: BaseException) -> bool:
    """Whether a driver error is SQLite's SQLITE_BUSY ("database is locked"): another connection held
    the lock the statement needed, and the statement did nothing."""
    text = str(exc)
    return "locked" in text or "busy" in text.lower()


_watchers = threading.local()  # ``tell``, ``stop``: this thread's ``telling_waits`` listener


def _never() -> bool:
    return False


@contextmanager
def telling_waits(tell: Callable[[float], None], stop: Callable[[], bool] = _never) -> Iterator[None]:
    """While the block runs, on this thread, ``tell(seconds)`` each time a statement begins to wait for
    another process's lock (``seconds``: how long it waits at most), and give the wait up, as at its
    deadline, as soon as ``stop()`` is true (the Studio says what its open waits for, and the user may stop
    it). Both must be quick and must not raise."""
    outer = getattr(_watchers, "tell", None), getattr(_watchers, "stop", _never)
    _watchers.tell, _watchers.stop = tell, stop
    try:
        yield
    finally:
        _watchers.tell, _watchers.stop = outer


def wait_while_busy(attempt: Callable[[], T], budget_s: float | None = None) -> T:
    """``attempt()``, tried again while it fails with SQLITE_BUSY, sleeping between tries (the GIL is
    free meanwhile), until ``budget_s`` (None: ``BUSY_TIMEOUT_MS``) has passed since the first try; then
    its last error."""
    budget = BUSY_TIMEOUT_MS / 1000 if budget_s is None else budget_s
    deadline = time.monotonic() + budget
    delay = 0.001
    told = False
    stop = getattr(_watchers, "stop", _never)
    while True:
        try:
            return attempt()
        except (ValueError, sa.exc.DBAPIError) as exc:
            if not is_busy(exc) or time.monotonic() >= deadline or stop():
                raise
        if not told:
            told = True
            tell = getattr(_watchers, "tell", None)
            if tell is not None:
                tell(max(deadline - time.monotonic(), 0.0))
        time.sleep(delay * random.uniform(0.5, 1.5))  # jitter: waiting processes do not retry in step
        delay = min(delay * 2, 0.05)


class WaitingConnection:
    """A libsql-experimental connection whose statements, while ``reading`` is set (``Database.read()``
    sets it for the read's duration, with the connection's busy timeout at 0), wait for another
    process's lock in ``wait_while_busy``, each at most ``budget_s`` (None: ``BUSY_TIMEOUT_MS``; the
    reader of a Mastra database's spans table gives its read budget). Everything else is the driver's
    own connection."""

    __slots__ = ("_raw", "reading", "busy_timeout_zero", "budget_s")

    def __init__(self, raw: Any, *, budget_s: float | None = None) -> None:
        object.__setattr__(self, "_raw", raw)
        object.__setattr__(self, "reading", False)
        object.__setattr__(self, "budget_s", budget_s)
        #: Its busy timeout is 0, as ``Database._on_connect`` and every read set it; what takes the
        #: connection for anything else sets ``BUSY_TIMEOUT_MS`` and this false (``Database`` keeps it true).
        object.__setattr__(self, "busy_timeout_zero", False)

    def set_busy_timeout(self, ms: int) -> None:
        """On the driver's own cursor, like the connection's other settings: plumbing, not a statement
        anyone ran (View > SQL Log does not list it)."""
        self._raw.execute(f"PRAGMA busy_timeout = {int(ms)}")
        object.__setattr__(self, "busy_timeout_zero", ms == 0)

    def cursor(self) -> "WaitingCursor":
        return WaitingCursor(self._raw.cursor(), self)

    def execute(self, sql: str, parameters: Any = ()) -> "WaitingCursor":
        return self.cursor().execute(sql, parameters)

    def create_function(self, *_args: Any, **_kwargs: Any) -> None:
        """libSQL has none: SQLAlchemy's libSQL dialect skips this for the driver's own class only."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("reading", "busy_timeout_zero"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._raw, name, value)


class WaitingCursor:
    """The driver's cursor. libsql-experimental steps a statement that returns rows only when its rows
    are fetched, so that is where a lock is met: a read's ``execute`` fetches the first row at once,
    under ``wait_while_busy`` (after its first step a read holds its SHARED lock until the statement
    ends, so no later fetch meets a lock), and hands it out first."""

    __slots__ = ("_raw", "_owner", "_ahead")

    def __init__(self, raw: Any, owner: WaitingConnection) -> None:
        self._raw, self._owner = raw, owner
        self._ahead: list[Any] | None = None  # the row fetched ahead (``[None]``: there was none)

    def execute(self, sql: str, parameters: Any = ()) -> "WaitingCursor":
        raw = self._raw
        self._ahead = None
        if not self._owner.reading:
            raw.execute(sql, parameters)
            return self

        def attempt() -> None:
            raw.execute(sql, parameters)
            if raw.description is not None:
                self._ahead = [raw.fetchone()]

        try:
            attempt()
        except (ValueError, sa.exc.DBAPIError) as exc:
            if not is_busy(exc):
                raise
            wait_while_busy(attempt, self._owner.budget_s)
        return self

    def fetchone(self) -> Any:
        ahead = self._ahead
        if ahead is None:
            return self._raw.fetchone()
        self._ahead = None
        return ahead[0]

    def fetchmany(self, size: int | None = None) -> list[Any]:
        size = self._raw.arraysize if size is None else size
        ahead = self._ahead
        if ahead is None:
            return self._raw.fetchmany(size)  # type: ignore[no-any-return]
        self._ahead = None
        if ahead[0] is None:
            return []
        return [ahead[0], *self._raw.fetchmany(size - 1)] if size > 1 else [ahead[0]]

    def fetchall(self) -> list[Any]:
        ahead = self._ahead
        if ahead is None:
            return self._raw.fetchall()  # type: ignore[no-any-return]
        self._ahead = None
        return [] if ahead[0] is None else [ahead[0], *self._raw.fetchall()]

    def __getattr__(self, name: str) -> Any:  # description, rowcount, lastrowid, close, executemany, ...
        return getattr(self._raw, name)
