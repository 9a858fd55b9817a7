"""What changed in a Postgres database's recall sources, told to every process in commit order.

libSQL's in-process readers (the vector matrix, keyword memory, the order cache) see other processes'
writes through markers SQLite gives for free: ``max(rowid)`` for appends, trigger-kept counters for
rewrites. Postgres has no commit-ordered rowid (a ``SERIAL`` is drawn at insert, not at commit, so
"rows above the last id seen" misses a slower writer's rows), and a counter row that every writer
bumps would serialise a fleet's writes. This is the Postgres form: a change log.

- **Writers** (any process, Mastra included): statement-level triggers with transition tables append
  one row per statement to ``LOG_TABLE``: its source (``messages``, ``docs`` or a vector table's
  name), whether it only added rows (``append``) or changed or removed some (``rewrite``), and the
  message and thread ids it touched. Each row carries the writer's transaction id (``xid8``,
  ``pg_current_xact_id()``), so a transaction's rows appear together, when it commits.
- **Readers** tail the log by transaction id. A snapshot's ``xmin`` is the oldest transaction still
  running when it was taken: every transaction below it has ended, so its rows are visible now or
  never. A reader keeps the ``xmin`` of its last read (its horizon) and the transactions at or above
  it whose rows it has applied; the next read takes the rows at or above the horizon from
  transactions it has not applied. A transaction running during one read has an id at or above that
  read's ``xmin`` (or gets one later, above every id given out so far), so it is read when it commits.
- **Pruning.** Rows older than ``KEEP`` whose transaction lies below every running one are deleted by
  the triggers themselves (about one statement in a hundred, one pruner at a time), and the state
  table keeps the id below which rows may be gone: a reader whose horizon is under it reloads
  whatever it keeps.

One ``ChangeLog`` per database (``log_for``) reads the log at most once per read transaction
(``database.read_token``) and hands the changes to its listeners (``pg_vector_cache``, ``pg_order``,
``pg_keyword_cache``), which apply them on their next use, in that read. A listener's own reads may be
newer than the log rows it has seen; a change it already holds is told again later, so applying a
change twice must be harmless (an append of a row already kept is skipped, a rewrite reloads).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar

import sqlalchemy as sa

from core.recall.tables import DOCS_TABLE, QUEUE_TABLE, STATE_TABLE
from core.storage import catalog
from core.storage.database import read_token
from core.storage.pg import cursor

if TYPE_CHECKING:  # pragma: no cover
    from core.storage.database import Database

T = TypeVar("T")

LOG_TABLE = "memory_studio_recall_log"
PRUNED_KEY = "log:pruned_below"  # state key: log rows of transactions below this id may have been deleted
KEEP = "10 minutes"  # how long a row stays at least (a reader idle for longer reloads what it keeps)
PRUNE_CHANCE = 0.01  # share of logged statements that also prune

_FN = "memory_studio_recall_log_changes"
_PRUNE_LOCK = "hashtext('memory_studio_recall_log')"

# Each source's ids: the message id and thread id columns of its rows.
_MESSAGES_KEYS = ("id", "thread_id")
_DOCS_KEYS = ("message_id", "thread_id")
_VECTOR_KEYS = ("metadata->>'message_id'", "metadata->>'thread_id'")


def _function(name: str, source: str, keys: tuple[str, str]) -> str:
    """A trigger function logging one row per statement of its table (``source``: a literal or
    ``TG_TABLE_NAME``), pruning now and then."""
    mid, tid = keys
    return f"""CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO {LOG_TABLE} (source, op, message_ids, thread_ids)
                SELECT {source}, 'append', array_agg({mid}), array_agg(DISTINCT {tid}) FROM new_rows HAVING count(*) > 0;
        ELSIF TG_OP = 'UPDATE' THEN
            INSERT INTO {LOG_TABLE} (source, op, message_ids, thread_ids)
                SELECT {source}, 'rewrite', array_agg(DISTINCT m), array_agg(DISTINCT t) FROM (
                    SELECT {mid} AS m, {tid} AS t FROM old_rows UNION ALL SELECT {mid}, {tid} FROM new_rows) c
                HAVING count(*) > 0;
        ELSIF TG_OP = 'DELETE' THEN
            INSERT INTO {LOG_TABLE} (source, op, message_ids, thread_ids)
                SELECT {source}, 'rewrite', array_agg({mid}), array_agg(DISTINCT {tid}) FROM old_rows HAVING count(*) > 0;
        ELSE  -- TRUNCATE: every row went (no ids: a reader drops all it keeps of this source)
            INSERT INTO {LOG_TABLE} (source, op) VALUES ({source}, 'rewrite');
        END IF;
        IF random() < {PRUNE_CHANCE} AND pg_try_advisory_xact_lock({_PRUNE_LOCK}) THEN
            PERFORM memory_studio_recall_log_prune();
        END IF;
        RETURN NULL; END $$"""


_PRUNE_FN = f"""CREATE OR REPLACE FUNCTION memory_studio_recall_log_prune() RETURNS void LANGUAGE plpgsql AS $$
    DECLARE below xid8;
    BEGIN
        WITH gone AS (DELETE FROM {LOG_TABLE} WHERE at < now() - interval '{KEEP}'
                      AND xid < pg_snapshot_xmin(pg_current_snapshot()) RETURNING xid)
        SELECT max(xid) INTO below FROM gone;
        IF below IS NOT NULL THEN
            INSERT INTO {STATE_TABLE} (key, value) VALUES ('{PRUNED_KEY}', below::text::bigint + 1)
                ON CONFLICT (key) DO UPDATE SET value = greatest({STATE_TABLE}.value, EXCLUDED.value);
        END IF;
    END $$"""


def _triggers(table: str, function: str) -> tuple[str, ...]:
    """The four statement triggers logging ``table``'s changes through ``function``."""
    q = f'"{table}"'
    out: list[str] = []
    for op, short, refs in (("INSERT", "i", "REFERENCING NEW TABLE AS new_rows"),
                            ("UPDATE", "u", "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows"),
                            ("DELETE", "d", "REFERENCING OLD TABLE AS old_rows"),
                            ("TRUNCATE", "t", "")):
        name = f'"{table}_ms_log_{short}"'
        out.append(f"DROP TRIGGER IF EXISTS {name} ON {q}")
        out.append(f"CREATE TRIGGER {name} AFTER {op} ON {q} {refs} FOR EACH STATEMENT EXECUTE FUNCTION {function}()")
    return tuple(out)


VECTOR_FN = "memory_studio_recall_log_vectors"

DDL: tuple[str, ...] = (
    f"CREATE TABLE IF NOT EXISTS {LOG_TABLE} (xid xid8 NOT NULL DEFAULT pg_current_xact_id(), "
    "at timestamptz NOT NULL DEFAULT now(), source TEXT NOT NULL, op TEXT NOT NULL, "
    "message_ids TEXT[], thread_ids TEXT[])",
    f"CREATE INDEX IF NOT EXISTS {LOG_TABLE}_xid ON {LOG_TABLE} (xid)",
    f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (key TEXT NOT NULL PRIMARY KEY, value BIGINT NOT NULL)",
    _PRUNE_FN,
    _function("memory_studio_recall_log_messages", "'messages'", _MESSAGES_KEYS),
    _function("memory_studio_recall_log_docs", "'docs'", _DOCS_KEYS),
    _function(VECTOR_FN, "TG_TABLE_NAME", _VECTOR_KEYS),
    *_triggers("mastra_messages", "memory_studio_recall_log_messages"),
    *_triggers(DOCS_TABLE, "memory_studio_recall_log_docs"),
)


def vector_table_ddl(table: str) -> tuple[str, ...]:
    """The triggers that log a vector table's changes (made with the table, or by the migration for
    tables that existed before it)."""
    return _triggers(table, VECTOR_FN)


PIECES_FN = "memory_studio_recall_log_pieces"
_PIECES_KEYS = ("message_id", "thread_id")


def log_pieces_writes(conn: sa.Connection, table: str) -> None:
    """Have a pieces table's writes (``pg_pieces``) told in the log, as a vector table's are, when the
    database has the log and they are not yet: the function when missing (made after the log's
    migration, by the first write that makes a pieces table; the caller holds ``PIECES_LOCK``), then
    the table's triggers."""
    if not catalog.has_table(conn, LOG_TABLE) or has_log(conn, table):
        return
    if cursor.rows(conn, "SELECT to_regproc(?) IS NULL", (PIECES_FN,))[0][0]:
        conn.exec_driver_sql(_function(PIECES_FN, "TG_TABLE_NAME", _PIECES_KEYS))
    for sql in _triggers(table, PIECES_FN):
        conn.exec_driver_sql(sql)


PIECES_LOCK = "recall:pieces-log"  # (``Database.lock``: one process at a time makes the pieces' log function)


def log_vector_tables(conn: sa.Connection) -> None:
    """The migration's step: every vector table already there gets its triggers (the tables
    ``copies.vector_tables`` finds; that module imports the schema, which imports this one)."""
    for table in catalog.table_names(conn, "memory_messages"):
        if {"vector_id", "embedding", "metadata"} <= {c[0] for c in catalog.table_columns(conn, table)}:
            for sql in vector_table_ddl(table):
                conn.exec_driver_sql(sql)


def has_log(conn: sa.Connection, table: str | None = None) -> bool:
    """Whether the log exists, and (``table``) whether that vector table's changes go into it."""
    name = table if table is not None else "mastra_messages"
    found = cursor.rows(
        conn,
        "SELECT to_regclass(?) IS NOT NULL, (SELECT count(*) FROM pg_trigger "
        "WHERE tgrelid = to_regclass(?) AND tgname = ANY(CAST(? AS text[])))",
        (LOG_TABLE, f'"{name}"', [f"{name}_ms_log_{op}" for op in "iudt"]),
    )[0]
    return bool(found[0]) and int(found[1]) == 4


@dataclass(frozen=True)
class Change:
    """One logged statement: ``source`` (``messages``, ``docs`` or a vector table), ``op`` (``append``:
    rows added; ``rewrite``: rows changed or removed), the message and thread ids it touched (None:
    every row of the source, e.g. a TRUNCATE)."""

    source: str
    op: str
    message_ids: tuple[str, ...] | None
    thread_ids: tuple[str | None, ...] | None


class Listener(Protocol):
    def changed(self, changes: list[Change]) -> None:
        """Changes since the last call, oldest transaction first (applied on the next use)."""

    def reset(self) -> None:
        """What was kept may be out of date in ways the log no longer says: drop it."""


# The log's rows from ``?`` on (its first read: from this snapshot's xmin), after a head row: the
# snapshot's xmin, the pruned-below id, whether the recall queue holds changes, and which vector tables
# log their writes (their oids: a table dropped, or made again without our triggers, changes it). One
# statement, so one snapshot for all of it.
# ``{extra}``: a ``text[]`` a caller reads in the same statement (``sync_with``), else NULL.
_SYNC = (
    f"SELECT 0, pg_snapshot_xmin(pg_current_snapshot())::text, (SELECT value FROM {STATE_TABLE} "
    f"WHERE key = '{PRUNED_KEY}')::text, EXISTS (SELECT 1 FROM {QUEUE_TABLE})::text, "
    f"ARRAY(SELECT tgrelid::text FROM pg_trigger WHERE tgfoid = to_regproc('{VECTOR_FN}') ORDER BY 1), "
    "{extra} "
    f"UNION ALL SELECT 1, l.xid::text, l.source, l.op, l.message_ids, l.thread_ids FROM {LOG_TABLE} l "
    "WHERE l.xid >= coalesce(CAST(? AS xid8), pg_snapshot_xmin(pg_current_snapshot()))"
)
_PLAIN_SYNC = _SYNC.format(extra="NULL::text[]")


class ChangeLog:
    """The log of one database, read for its listeners. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._horizon: int | None = None  # the xmin of the last read (None: nothing read yet)
        self._applied: set[int] = set()  # transactions at or above the horizon already told
        self._token: int | None = None  # the read transaction the last sync served
        self._queued = False
        self._tables: list[str] | None = None  # the oids of the vector tables whose writes are logged
        self._shared: dict[str, Any] = {}  # readers every index over the database shares (``shared``)
        self.available: bool | None = None  # the log table exists (None: not looked yet)

    def listen(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.add(listener)

    def shared(self, name: str, make: Callable[[], T]) -> T:
        """The one reader named ``name`` of this database, made on first ask: every recall index over
        the database (one per embedding model) shares its keyword docs and thread order."""
        with self._lock:
            found = self._shared.get(name)
        if found is None:
            made = make()  # (outside the lock: a reader listens to this log as it is made)
            with self._lock:
                found = self._shared.setdefault(name, made)
        return found  # type: ignore[no-any-return]

    def queued(self, conn: sa.Connection) -> bool | None:
        """Whether the recall queue held changes as of this read's sync (None: not synced in this read)."""
        token = read_token(conn)
        with self._lock:
            return self._queued if token is not None and token == self._token else None

    def sync(self, conn: sa.Connection) -> bool:
        """Tell the listeners every change committed since the last sync (once per read transaction);
        False: this database has no log (not migrated), so nothing kept can be trusted."""
        return self._sync(conn, None) is not None

    def sync_with(self, conn: sa.Connection, extra: str, params: Sequence[Any]) -> list[Any] | None:
        """``sync``, reading ``extra`` (a ``text[]`` expression with ``params``) in the same statement,
        when this read has not synced yet: its value; None when it had (or there is no log), then the
        caller reads it itself. A search's first read of new terms' counts rides along this way."""
        got = self._sync(conn, (extra, params))
        return got if isinstance(got, list) else None

    def _sync(self, conn: sa.Connection, extra: tuple[str, Sequence[Any]] | None) -> list[Any] | bool | None:
        """None: no log; True: synced already in this read; else the extra's value (a list)."""
        if self.available is None:
            self.available = has_log(conn)
        if not self.available:
            return None
        token = read_token(conn)
        with self._lock:
            if token is not None and token == self._token:
                return True
            horizon = self._horizon
        start = str(horizon) if horizon is not None else None
        if extra is None:
            rows = cursor.rows(conn, _PLAIN_SYNC, (start,))
        else:
            rows = cursor.rows(conn, _SYNC.format(extra=f"CAST({extra[0]} AS text[])"), (*extra[1], start))
        head = next(r for r in rows if r[0] == 0)
        xmin, pruned, queued, tables = int(head[1]), head[2], head[3] == "true", list(head[4] or ())
        logged = [(int(r[1]), r) for r in rows if r[0] == 1]
        changes: list[Change] = []
        with self._lock:
            if self._horizon != horizon:  # another thread synced meanwhile: its answer stands
                return list(head[5] or ()) if extra is not None else True
            # Rows this reader has not seen may be pruned, or a vector table went or came without our
            # triggers: what is kept may be out of date in ways the log does not say.
            reset = horizon is None or (pruned is not None and int(pruned) > horizon) or tables != self._tables
            if not reset:
                changes = [Change(r[2], r[3], tuple(r[4]) if r[4] is not None else None,
                                  tuple(r[5]) if r[5] is not None else None)
                           for xid, r in logged if xid not in self._applied]
            # Snapshots' xmin never goes back; the transactions at or above it whose rows were read (all
            # of them: a transaction's rows appear together) are not told again.
            self._horizon = xmin if horizon is None or reset else max(xmin, horizon)
            self._applied = {x for x in ({xid for xid, _ in logged} | (set() if reset else self._applied))
                             if x >= self._horizon}
            self._token = token
            self._queued = queued
            self._tables = tables
            listeners = list(self._listeners)
        for listener in listeners:
            if reset:
                listener.reset()
            elif changes:
                listener.changed(changes)
        return list(head[5] or ()) if extra is not None else True


Scope = tuple[str, str]  # what a reader keeps apart: ("resource", id) or ("thread", id)


def scope_of(resource_id: str | None, thread_id: str | None) -> Scope:
    """The scope a search reads: its resource (narrowed to a thread or not), else its thread."""
    return ("resource", resource_id) if resource_id is not None else ("thread", thread_id or "")


class Inbox:
    """A reader's share of the log: the changes of the sources it keeps, waiting for its next use.

    The log only appends here (under this inbox's own lock, never held across anything else); the
    reader takes them under its own lock, which it may hold across its reads. A listener that waited
    on such a lock could deadlock with another reader syncing the log from inside its own."""

    def __init__(self, log: ChangeLog, keeps: Callable[[str], bool]) -> None:
        self._keeps = keeps  # which sources the reader keeps
        self._lock = threading.Lock()
        self._changes: list[Change] = []
        self._reset = False
        log.listen(self)

    def changed(self, changes: list[Change]) -> None:
        mine = [c for c in changes if self._keeps(c.source)]
        if mine:
            with self._lock:
                self._changes.extend(mine)

    def reset(self) -> None:
        with self._lock:
            self._changes.clear()
            self._reset = True

    def take(self) -> tuple[bool, list[Change]]:
        """(whether to start over, the changes since) the last call."""
        with self._lock:
            changes, self._changes = self._changes, []
            reset, self._reset = self._reset, False
        return reset, changes


_LOGS: "weakref.WeakKeyDictionary[Database, ChangeLog]" = weakref.WeakKeyDictionary()
_LOGS_LOCK = threading.Lock()


def log_for(db: "Database") -> ChangeLog:
    """The one ``ChangeLog`` of ``db`` (shared by every index over it)."""
    with _LOGS_LOCK:
        found = _LOGS.get(db)
        if found is None:
            found = _LOGS[db] = ChangeLog()
        return found
