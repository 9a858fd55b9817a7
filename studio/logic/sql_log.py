"""Every SQL statement the Studio runs on a memory database, kept for View > SQL Log (no Qt).

A DB inspector's table stakes (DB Browser for SQLite's SQL log): the user sees what the app ran, so "browsing
changes nothing" is something they can check, statement by statement, not take on trust. One listener on
SQLAlchemy's ``before_cursor_execute`` of every engine of the process (the engine's own statements and the
hand-written ones of ``core.storage.driver_sql``, which fire the same event) appends to a bounded ring; the log
view copies what is new on a timer. Appending is a few microseconds on the thread that runs the statement and
never blocks it on the UI. The trace file (DuckDB) is read without SQLAlchemy and is not listed.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections import deque
from contextlib import contextmanager
from typing import Any, Iterator, Literal, NamedTuple

Kind = Literal["read", "write", "transaction", "setting"]

CAPACITY = 5_000  # statements kept; older ones are dropped (counted in ``dropped``)
PARAMS_SHOWN = 300  # characters of a statement's parameters kept (a message's whole text is not)

_FIRST_WORD = re.compile(r"\s*(?:--[^\n]*\n\s*|/\*.*?\*/\s*)*(\w+)", re.S)
_READS = {"SELECT", "EXPLAIN", "VALUES", "SHOW"}
_TRANSACTION = {"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "END", "START"}
_DML = re.compile(r"\b(INSERT|UPDATE|DELETE|REPLACE)\b", re.I)
_FAST: dict[str, Kind] = {"SELECT": "read", "INSERT": "write", "UPDATE": "write", "DELETE": "write", "COMMIT": "transaction"}
_PRAGMA_WRITES = re.compile(r"PRAGMA\s+(?:\w+\.)?(wal_checkpoint|optimize|incremental_vacuum|user_version\s*=)", re.I)


def kind_of(statement: str) -> Kind:
    """What a statement does to the data: ``read``, ``write``, ``transaction`` (BEGIN, COMMIT, savepoints) or
    ``setting`` (a connection's own settings: PRAGMA x = y, SET). A WITH runs as a write when its body writes;
    a statement not known here counts as a write (never assumed harmless)."""
    fast = _FAST.get(statement[:6].upper())  # (most statements: no comment, no WITH, no PRAGMA)
    if fast is not None:
        return fast
    m = _FIRST_WORD.match(statement)
    word = m.group(1).upper() if m else ""
    if word in _TRANSACTION:
        return "transaction"
    if word == "WITH":
        return "write" if _DML.search(statement) else "read"
    if word == "PRAGMA":
        if _PRAGMA_WRITES.search(statement):
            return "write"
        return "setting" if "=" in statement else "read"
    if word in ("SET", "RESET"):
        return "setting"
    return "read" if word in _READS else "write"


def one_line(statement: str) -> str:
    return " ".join(statement.split())


def _value_text(v: Any) -> str:
    if v is None or isinstance(v, (bool, int, float)):
        return repr(v)
    if isinstance(v, str):
        return repr(v) if len(v) <= 120 else repr(v[:120]) + f"…({len(v):,} characters)"
    if isinstance(v, (bytes, bytearray, memoryview)):
        return f"<{len(v):,} bytes>"
    if isinstance(v, (tuple, list)):
        return f"[{len(v):,} values]"
    return f"<{type(v).__name__}>"


def _params_text(params: Any) -> str:
    """A short text of a statement's parameters, made without writing out a long one (a save's batch holds
    whole messages): each value cut, at most 12 listed. Never more than a few microseconds a statement."""
    if params is None or (isinstance(params, (tuple, list, dict)) and not params):
        return ""
    if isinstance(params, dict):
        items = list(params.items())
        text = ", ".join(f"{k}={_value_text(v)}" for k, v in items[:12])
        more = len(items) - 12
    elif isinstance(params, (tuple, list)):
        text = ", ".join(_value_text(v) for v in params[:12])
        more = len(params) - 12
    else:
        return _value_text(params)
    text = f"({text}{f', … {more:,} more' if more > 0 else ''})"
    return text if len(text) <= PARAMS_SHOWN else text[:PARAMS_SHOWN] + "…"


_purpose = threading.local()


@contextmanager
def purpose(what: str) -> Iterator[None]:
    """Statements run inside are marked with ``what`` (the session's change check: the log can hide them)."""
    before = getattr(_purpose, "what", "")
    _purpose.what = what
    try:
        yield
    finally:
        _purpose.what = before


CHANGE_CHECK = "change check"  # the session's poll of the database's change marks, once a second


class Statement(NamedTuple):
    seq: int  # 1, 2, … in the order they ran (across threads)
    at: float  # time.time() when it was sent
    thread: str  # "UI" or "worker"
    kind: Kind
    sql: str  # as sent
    params: str  # a short text of its parameters ("" for none)
    database: str  # the engine's database (a file name, or a Postgres host/database)
    purpose: str = ""  # what ran it, when marked (``purpose``): CHANGE_CHECK

    @property
    def line(self) -> str:
        return one_line(self.sql)


class SqlLog:
    """The ring of statements. ``since(seq)`` gives what came after ``seq``; ``clear()`` empties it."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._rows: deque[Statement] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self._main = threading.main_thread()
        self.dropped = 0  # statements that fell off the ring's end
        self.total = 0
        self._kinds: dict[Kind, int] = {"read": 0, "write": 0, "transaction": 0, "setting": 0}

    def add(self, sql: str, params: Any, database: str) -> None:
        thread = "UI" if threading.current_thread() is self._main else "worker"
        at, kind, shown = time.time(), kind_of(sql), _params_text(params)
        with self._lock:
            row = Statement(next(self._seq), at, thread, kind, sql, shown, database, getattr(_purpose, "what", ""))
            if len(self._rows) == self._rows.maxlen:
                self.dropped += 1
            self._rows.append(row)
            self.total += 1
            self._kinds[kind] += 1

    def since(self, seq: int) -> list[Statement]:
        with self._lock:
            if not self._rows or self._rows[-1].seq <= seq:
                return []
            return [r for r in self._rows if r.seq > seq]

    def rows(self) -> list[Statement]:
        with self._lock:
            return list(self._rows)

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()
            self.dropped = 0
            self.total = 0
            self._kinds = dict.fromkeys(self._kinds, 0)

    def counts(self) -> dict[Kind, int]:
        """Statements of each kind since the log was cleared (those dropped off the ring too)."""
        with self._lock:
            return dict(self._kinds)


_shared: SqlLog | None = None
_shared_lock = threading.Lock()


def _database_of(conn: Any) -> str:
    try:
        url = conn.engine.url
    except Exception:  # noqa: BLE001 - a log line must never fail a statement
        return ""
    if url.database and not url.host:
        return str(url.database).rsplit("/", 1)[-1]
    return f"{url.host or ''}/{url.database or ''}"


def shared_log() -> SqlLog:
    """The process's log, its listener installed on the first call (once: every engine, made before or after)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            import sqlalchemy as sa

            log = SqlLog()

            def listener(conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any,
                         _executemany: bool) -> None:
                try:
                    log.add(statement, parameters, _database_of(conn))
                except Exception:  # noqa: BLE001 - never fail the statement for its log line
                    pass

            sa.event.listen(sa.engine.Engine, "before_cursor_execute", listener)
            _shared = log
        return _shared


__all__ = ["CAPACITY", "CHANGE_CHECK", "Kind", "SqlLog", "Statement", "kind_of", "one_line", "purpose", "shared_log"]
