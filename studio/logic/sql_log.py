"""Every SQL statement the Studio runs on a memory database and its trace file, kept for View > SQL Log (no Qt).

A DB inspector's table stakes (DB Browser for SQLite's SQL log): the user sees what the app ran, so "browsing
changes nothing" is something they can check, statement by statement, not take on trust. ``watch(store)``, when
the Studio opens a database, puts a listener on SQLAlchemy's ``before_cursor_execute`` of that store's engine (the
engine's own statements and the hand-written ones of ``core.storage.driver_sql`` fire it) and, while any store is
watched, observes the statements run on DuckDB trace files (``core.traces.observe_trace_statements``: the Traces
pane's reads, Replay's, a tracer's writes, the check of a trace file that may be broken) and on a Mastra
database's own spans table (the Traces pane reads it on a connection of its own: listed as the memory
database's); ``unwatch(store)`` after it closed takes them off again, so a process that opens and closes
databases (tests, a script) keeps no listener on a closed one. A statement is appended to a
bounded ring; the log view copies what is new on a timer. Appending is a few microseconds on the thread that runs
the statement and never blocks it on the UI. The statements a store runs while it opens (the first look at the file,
its journal mode, a migration on open) are listed too: the Studio opens inside ``opening()``, whose engines
(``core.storage.engine_watch``) get their listener before their first statement, and ``watch`` keeps the store's.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Literal, NamedTuple

Kind = Literal["read", "write", "transaction", "setting"]
On = Literal["database", "trace file"]  # what a statement ran on: the memory database, or its DuckDB trace file
DATABASE: On = "database"
TRACE_FILE: On = "trace file"

SPANS_READER = "spans reader"  # the connection a Mastra database's spans table is read on (its own, reads only)
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
    database: str  # the engine's database (a file name, or a Postgres host/database), or the trace file's name
    on: On = DATABASE
    # a trace file's connection: "read-only" or "read-write"; the database's: "" (the store's engine) or
    # SPANS_READER (a Mastra database's spans table, read on a connection of its own)
    connection: str = ""
    purpose: str = ""  # what ran it, when marked (``purpose``): CHANGE_CHECK

    @property
    def line(self) -> str:
        return one_line(self.sql)


def _no_kinds() -> dict[Kind, int]:
    return {"read": 0, "write": 0, "transaction": 0, "setting": 0}


class SqlLog:
    """The ring of statements. ``since(seq)`` gives what came after ``seq``; ``clear()`` empties it.
    ``watch(store)`` / ``unwatch(store)``: what is appended to it."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._rows: deque[Statement] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self._main = threading.main_thread()
        self.dropped = 0  # statements that fell off the ring's end
        self.total = 0
        self._kinds: dict[On, dict[Kind, int]] = {DATABASE: _no_kinds(), TRACE_FILE: _no_kinds()}
        self._watch_lock = threading.Lock()
        # store -> (its engine, the listener on it); weak: a store dropped unclosed does not live on here (nor
        # does an id of it, which a later store could be given and then be taken for watched already)
        self._watched: weakref.WeakKeyDictionary[Any, tuple[Any, Any]] = weakref.WeakKeyDictionary()
        self._stop_traces: Callable[[], None] | None = None  # ends the trace files' observer (while any is watched)
        # engine -> its listener, for the engines made in an ``opening()`` block still open
        self._fresh: weakref.WeakKeyDictionary[Any, _Listener] = weakref.WeakKeyDictionary()

    def add(self, sql: str, params: Any, database: str, on: On = DATABASE, connection: str = "") -> None:
        thread = "UI" if threading.current_thread() is self._main else "worker"
        at, kind, shown = time.time(), kind_of(sql), _params_text(params)
        with self._lock:
            row = Statement(next(self._seq), at, thread, kind, sql, shown, database, on, connection,
                            getattr(_purpose, "what", ""))
            if len(self._rows) == self._rows.maxlen:
                self.dropped += 1
            self._rows.append(row)
            self.total += 1
            self._kinds[on][kind] += 1

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
            self._kinds = {DATABASE: _no_kinds(), TRACE_FILE: _no_kinds()}

    def counts(self, on: On | None = None) -> dict[Kind, int]:
        """Statements of each kind since the log was cleared (those dropped off the ring too): on ``on``, or
        on both."""
        with self._lock:
            if on is not None:
                return dict(self._kinds[on])
            both = _no_kinds()
            for kinds in self._kinds.values():
                for kind, n in kinds.items():
                    both[kind] += n
            return both

    # -- what is listed --------------------------------------------------------------------------
    @contextmanager
    def opening(self) -> Iterator[None]:
        """Open stores inside this block: every engine made here (``core.storage.engine_watch``) is listed from
        its first statement on. ``watch`` of a store opened here keeps its engine's listener; at the block's
        end the listeners of engines no watched store uses (an open that failed, a probe closed, a first engine
        replaced) are taken off again."""
        import sqlalchemy as sa
        from core.storage.engine_watch import engines_made

        made: list[tuple[Any, Any]] = []

        def on_engine(engine: Any) -> None:
            listener = _Listener(self, _engine_name(engine))
            with self._watch_lock:
                sa.event.listen(engine, "before_cursor_execute", listener)
                self._fresh[engine] = listener
            made.append((engine, listener))

        try:
            with engines_made(on_engine):
                yield
        finally:
            with self._watch_lock:
                kept = {id(engine) for engine, _ in self._watched.values()}
                for engine, listener in made:
                    self._fresh.pop(engine, None)
                    if id(engine) not in kept and sa.event.contains(engine, "before_cursor_execute", listener):
                        sa.event.remove(engine, "before_cursor_execute", listener)

    def watch(self, store: Any) -> None:
        """List the statements run on ``store``'s engine from now on, and those run on trace files while it is
        watched. Call it as soon as the store is open (before another thread uses it: adding a listener to an
        engine running a statement is not safe); watching a store twice changes nothing."""
        import sqlalchemy as sa

        engine = store.db.engine
        database = _database_name(store, engine)

        with self._watch_lock:
            if store in self._watched:
                return
            listener = self._fresh.get(engine)
            if listener is not None:  # made in ``opening()``: listed since its first statement; named from now on
                listener.database = database
            else:
                listener = _Listener(self, database)
                sa.event.listen(engine, "before_cursor_execute", listener)
            self._watched[store] = (engine, listener)
            if self._stop_traces is None:
                from core.traces import observe_trace_statements

                self._stop_traces = observe_trace_statements(self._trace_statement)

    def unwatch(self, store: Any) -> None:
        """Stop listing ``store``'s statements (call it once the store is closed: nothing runs on its engine
        any more); the trace files' too when no store is watched. A store not watched: nothing to do."""
        import sqlalchemy as sa

        with self._watch_lock:
            watched = self._watched.pop(store, None)
            if watched is not None:
                engine, listener = watched
                if sa.event.contains(engine, "before_cursor_execute", listener):
                    sa.event.remove(engine, "before_cursor_execute", listener)
            self._stop_traces_when_unwatched()

    def _stop_traces_when_unwatched(self) -> None:
        """(With the watch lock held.)"""
        if not self._watched and self._stop_traces is not None:
            self._stop_traces()
            self._stop_traces = None

    def watching(self, store: Any) -> bool:
        with self._watch_lock:
            return store in self._watched

    def _trace_statement(self, path: Path, statement: str, params: Any, read_only: bool, in_database: bool) -> None:
        if not self._watched:  # every watched store was dropped without ``unwatch``: stop observing
            with self._watch_lock:
                self._stop_traces_when_unwatched()
            return
        if in_database:  # a Mastra database's spans table, read on a connection of the reader's own
            self.add(statement, params, path.name, DATABASE, SPANS_READER)
            return
        self.add(statement, params, path.name, TRACE_FILE, "read-only" if read_only else "read-write")


class _Listener:
    """A ``before_cursor_execute`` listener adding each statement to ``log`` under ``database``, the name it holds
    when the statement runs (an engine met while opening is named from its URL until ``watch`` knows its store)."""

    def __init__(self, log: SqlLog, database: str) -> None:
        self.log = log
        self.database = database

    def __call__(self, _conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any,
                 _executemany: bool) -> None:
        try:
            self.log.add(statement, parameters, self.database)
        except Exception:  # noqa: BLE001 - never fail the statement for its log line
            pass


_shared: SqlLog | None = None
_shared_lock = threading.Lock()


def _database_name(store: Any, engine: Any) -> str:
    """A store's database as the log names it: its file's name, else the server's host/database."""
    path = getattr(store.location, "path", None)
    if path is not None:
        return Path(path).name
    url = engine.url
    if url.database and not url.host:
        return str(url.database).rsplit("/", 1)[-1]
    return f"{url.host or ''}/{url.database or ''}"


def _engine_name(engine: Any) -> str:
    """An engine's database as the log names it before its store is known: the file's name (without a URI's
    ``file:`` and query), else the server's host/database."""
    url = engine.url
    if url.database and not url.host:
        return str(url.database).split("?", 1)[0].rsplit("/", 1)[-1]
    if not url.host and not url.database:  # (Postgres connects through its own ``creator``)
        return "database being opened"
    return f"{url.host or ''}/{url.database or ''}"


def shared_log() -> SqlLog:
    """The process's log (what View > SQL Log shows): empty, and fed by nothing until a store is watched."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SqlLog()
        return _shared


def watch(store: Any) -> None:
    """``shared_log().watch(store)``: a store the Studio opened."""
    shared_log().watch(store)


def close_watched(store: Any) -> None:
    """Close a store the Studio opened, then stop listing its statements (its closing writes are listed)."""
    try:
        store.close()
    finally:
        shared_log().unwatch(store)


__all__ = ["CAPACITY", "CHANGE_CHECK", "DATABASE", "SPANS_READER", "TRACE_FILE", "Kind", "On", "SqlLog", "Statement", "close_watched",
           "kind_of", "one_line", "purpose", "shared_log", "watch"]
