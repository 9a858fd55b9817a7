"""A Postgres database behind the default storage domain: a pooled engine with libSQL's contract.

``PgDatabase`` is a ``Database``: the same ``read()`` / ``write()`` / migrations API, the same
ownership rules (a database we did not create is never migrated implicitly, one with migrations we
do not know is never written). What differs is how a write is made safe. libSQL serialises every
write transaction (``BEGIN IMMEDIATE``); Postgres runs them concurrently, so each read-modify-write
names what it changes with ``lock(conn, key)`` — a transaction-scoped advisory lock — and writers
of the same thread, resource or working memory queue while everyone else proceeds.

Connections come from SQLAlchemy's ``QueuePool`` over psycopg 3. Every check-out begins the
connection's transaction at once (``_begin_on_checkout``): that ``BEGIN`` is the liveness check, so a
connection a managed server closed while idle is replaced instead of failing a turn, as SQLAlchemy's
``pool_pre_ping`` did, and it is the ``BEGIN`` psycopg would have sent before the first statement
anyway: one round trip per check-out instead of two.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, ClassVar, Iterator, Sequence

import psycopg
import sqlalchemy as sa
from psycopg import pq
from sqlalchemy.engine.interfaces import BindTyping

from core.storage import catalog, engine_watch, locks, migrations
from core.storage.capabilities import POSTGRES, Capabilities
from core.storage.database import (Database, DatabaseOpenError, ReadOnlyError, StorageError, StorageUnavailableError,
                                   no_memory_tables)
from core.storage.errors import SchemaError
from core.storage.pg import adapt, grants
from core.storage.pg.location import PgLocation

log = logging.getLogger(__name__)

POOL_SIZE_ENV = "MEMORY_STUDIO_PG_POOL_SIZE"
DEFAULT_POOL_SIZE = 5
CONNECT_TIMEOUT_S = 10
#: How long a new connection waits for a slot when the server or the role is at its connection limit. A
#: connection this process just closed still holds its slot until its server process has exited, a moment
#: later: the open's own first connection, closed just before the pool's, was refused for a role limited to
#: one connection on a loaded machine. Past this wait the refusal is the caller's (``_what_to_do``).
SLOT_WAIT_S = 1.0
MIGRATION_LOCK = "memory-studio:migrations"

# ``change_fingerprint``: counting a large messages table every second would cost a scan. The recall
# queue's sequence moves with every message write of any process (a trigger), at once; the server's
# change counters (reported some seconds after each writer's commit) also cover databases without our
# tables.
FINGERPRINT_SQL = """
SELECT (SELECT max("updatedAt") FROM mastra_threads),
       (SELECT max("updatedAt") FROM mastra_resources),
       pg_sequence_last_value(to_regclass('memory_studio_recall_queue_seq_seq')),
       (SELECT n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_all_tables
         WHERE relid = to_regclass('mastra_messages')),
       (SELECT n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_all_tables
         WHERE relid = to_regclass('mastra_threads'))
"""


#: The tables ``vacuum`` rewrites: Mastra's, ours, and the vector tables (Mastra's PgVector names).
MEMORY_TABLE_PREFIXES = ("mastra_", "memory_studio_", "memory_messages")
VACUUM_LOCK_TIMEOUT_S = 30.0  # how long a vacuum waits for one table, in tries of:
VACUUM_LOCK_TRY_S = 0.2  # the longest a reader or writer of a table queues behind the vacuum's request


class PgDatabase(Database):
    """One Postgres database (the schema on its ``search_path``)."""

    location: PgLocation
    capabilities: ClassVar[Capabilities] = POSTGRES

    def __init__(self, location: PgLocation, *, read_only: bool = False, create: bool = True) -> None:
        self.location = location
        self.read_only = read_only
        self._lock = threading.Lock()
        self._held = threading.local()  # stays empty: ``reads()`` holds nothing here
        self._newer: list[str] | None = None
        self._password = location.password_from_keyring()
        self._given_options, self._connect_defaults = given_settings(location.url)
        size = _pool_size()
        self.engine = sa.create_engine(
            "postgresql+psycopg://", creator=self._connect, pool_size=size, max_overflow=size,
            pool_recycle=1800,
        )
        sa.event.listen(self.engine, "checkout", _begin_on_checkout)
        _end_empty_transaction_before_autocommit(self.engine.dialect)
        # Parameters go untyped (no ``::VARCHAR`` casts), so an ISO string binds to a TIMESTAMP column
        # and JSON text to JSONB, as they do on libSQL.
        self.engine.dialect.bind_typing = BindTyping.NONE
        sa.event.listen(self.engine, "before_cursor_execute", _translate, retval=True)
        engine_watch.made(self.engine)  # (after ``_translate``: a watcher sees the statements Postgres runs)
        try:
            # Before the engine's first connection: SQLAlchemy reads the default schema once, on it.
            with self._connect() as raw:
                new_schema = _ensure_first_schema(raw, location.display, read_only=read_only)
                row = raw.execute("SHOW search_path").fetchone()
                self.schema = grants.memory_schema(raw, first_schema(str(row[0] if row else "")))
            if not self.schema.usable:
                raise DatabaseOpenError(grants.unusable_schema(location, self.schema))
            with self.engine.connect() as conn:
                self.is_empty = new_schema or not catalog.has_user_tables(conn)
                self.owned = self.is_empty or catalog.has_table(conn, migrations.MIGRATIONS_TABLE)
                self.is_mastra = catalog.has_table(conn, "mastra_threads")
        except (sa.exc.DBAPIError, psycopg.Error) as exc:
            self.engine.dispose()
            raise DatabaseOpenError(explain_connect_error(location.display, exc)) from exc
        except DatabaseOpenError:
            self.engine.dispose()
            raise
        if self.owned and not self.read_only and self.pending_migrations():
            self.migrate()

    def _connect(self, **libpq: Any) -> psycopg.Connection[Any]:
        options = self._given_options + adapt.CONNECT_OPTIONS
        if self.read_only:
            # Enforced by the server, like SQLite's query_only: no code path of ours can write by mistake.
            options += " -c default_transaction_read_only=on"
        # ``prepare_threshold=None``: no server-side prepared statements. psycopg prepares a statement
        # run five times on a connection; behind a transaction-mode pooler (PgBouncer before 1.21, which
        # the README suggests for large fleets) the next transaction may run on another server
        # connection, which fails with "prepared statement _pg3_N does not exist / already exists"
        # (recall index writes and span writes failed). Plan caching did not change search times here.
        kwargs: dict[str, Any] = {"options": options, "prepare_threshold": None, **self._connect_defaults, **libpq}
        if self._password is not None:
            kwargs["password"] = self._password
        deadline, pause = time.monotonic() + SLOT_WAIT_S, 0.01
        while True:
            try:
                conn = psycopg.connect(self.location.url, **kwargs)
                break
            except psycopg.OperationalError as exc:
                if not _no_free_slot(exc) or time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.2)
        adapt.configure(conn)
        return conn

    def dedicated_connection(self, **libpq: Any) -> psycopg.Connection[Any]:
        """A connection of the caller's own, outside the pool, in autocommit, opened as the pool's are
        (same options, password, loaders) plus ``libpq`` parameters: for a session that must outlive
        any one transaction (the trace writer's lease, ``core.traces.pg_store.PgWriterLease``). The
        caller closes it."""
        conn = self._connect(**libpq)
        conn.autocommit = True
        return conn

    def _enable_wal(self) -> None:  # a file-only concern
        return None

    @contextmanager
    def reads(self) -> Iterator[None]:
        """Nothing here: a Postgres connection's reads run in a transaction SQLAlchemy opens, and one
        held across a turn's reads would also hold its table locks; each ``read()`` checks one out."""
        yield

    @contextmanager
    def snapshot(self) -> Iterator[sa.Connection]:
        """One read transaction as of one moment: Postgres reads each statement as of its own start
        unless told otherwise (the first statement of the transaction); the connection's rollback
        ends it."""
        with self.read() as conn:
            conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield conn

    def change_fingerprint(self) -> tuple[object, ...]:
        with self.read() as conn:
            return tuple(conn.exec_driver_sql(FINGERPRINT_SQL).first() or ())

    @contextmanager
    def transaction(self) -> Iterator[sa.Connection]:
        try:
            with self.engine.begin() as conn:
                yield conn
        except BaseException as exc:
            self._raise_ours(exc)
            raise

    def _raise_ours(self, exc: BaseException, *, for_read: bool = False) -> None:
        """A server fault becomes a ``StorageError`` naming the database and what to do, never a raw
        driver error carrying SQL text and parameters (``from None``: not even chained). ``for_read``: it
        stopped a read (``Database.read()``, ``reads()``), which changes nothing, so the message says so
        rather than that nothing of it was committed."""
        ours = translate_pg_error(self.location.display, exc, for_read=for_read)
        if ours is None and self.read_only and not self.is_mastra:  # a writer migrated it when it opened
            ours = _no_memory_tables(self.location.display, exc, empty=self.is_empty)
        if ours is None:
            ours = _permission_denied(self.location, exc, self.schema, opened_read_only=self.read_only)
        if ours is not None:
            raise ours from None

    def lock(self, conn: sa.Connection, *keys: str) -> None:
        """Hold these names until the transaction ends, taken in one order (``locks.in_lock_order``), so two
        writers never deadlock."""
        for key in locks.in_lock_order(keys):
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", (key,))

    def migrate(self, names: Sequence[str] | None = None) -> list[str]:
        if self.read_only:
            raise ReadOnlyError(f"{self.location.display} is open read-only; it cannot be migrated.")

        @contextmanager
        def serialized() -> Iterator[sa.Connection]:
            # Several processes starting at once must not race on CREATE TABLE IF NOT EXISTS.
            with self.transaction() as conn:
                self.lock(conn, MIGRATION_LOCK)
                yield conn

        try:
            with self._lock:
                done = migrations.apply(self.read, serialized, names)
        except (sa.exc.DBAPIError, psycopg.Error) as exc:
            ours = explain_extension_error(self.location.display, exc)
            if ours is None:
                raise
            raise ours from None
        self.owned = True
        self._newer = None
        self.migrations_run += 1
        return done

    def _reclaim(self, progress: Callable[[str], None] | None = None) -> int:
        """``VACUUM FULL`` of the memory tables (Mastra's, ours, the vector tables), one at a time; returns
        the bytes their files gave back. A plain delete leaves the rows' bytes in the tables' pages, which
        Postgres reuses and never returns (the note a forget ends with); only a rewrite drops them. Another
        application's tables in the same database are not touched.

        Each table is locked while it is rewritten (its readers and writers wait for that). The lock is
        asked for in tries of ``VACUUM_LOCK_TRY_S``: a request that waits queues every later reader and
        writer of the table behind it, so one wait as long as the longest open transaction on the table
        held every writer for as long (up to 30 s, measured with an idle transaction open). Between tries
        the writers run; ``progress`` is told who holds the table. A table still held after
        ``VACUUM_LOCK_TIMEOUT_S`` stops the vacuum with what it already gave back kept, naming the holder."""
        with self.read() as conn:
            tables = [t for t in catalog.all_tables(conn) if t.startswith(MEMORY_TABLE_PREFIXES)]
            refused = not_vacuumable(conn, tables)
        if not tables:
            return 0
        if refused:  # the server would skip them with a warning no one sees, and the vacuum "reclaim 0 MB"
            raise StorageError(vacuum_refused(self.location, refused, schema=self.schema))
        sizes = ("SELECT coalesce(sum(pg_total_relation_size(to_regclass(quote_ident(t)))), 0) "
                 "FROM unnest(CAST(? AS text[])) t")
        held_by = ""
        try:
            with self._lock, self.engine.connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")  # VACUUM runs outside a transaction
                before = int(conn.exec_driver_sql(sizes, (tables,)).scalar() or 0)
                conn.exec_driver_sql(f"SET lock_timeout = '{int(VACUUM_LOCK_TRY_S * 1000)}ms'")
                try:
                    for table in tables:
                        held_by = self._vacuum_table(conn, table, progress)
                        if held_by:
                            break
                finally:
                    conn.exec_driver_sql("RESET lock_timeout")
                after = int(conn.exec_driver_sql(sizes, (tables,)).scalar() or 0)
        except (sa.exc.DBAPIError, psycopg.Error) as exc:
            self._raise_ours(exc)
            raise
        if held_by:
            raise StorageError(
                f"{self.location.display}: {held_by} for {VACUUM_LOCK_TIMEOUT_S:.0f} s, so the vacuum stopped there "
                f"(the tables rewritten so far keep their gain: {max(before - after, 0) / 1e6:.2f} MB). Try again "
                "when that session has ended, or end it."
            )
        return max(before - after, 0)

    def _vacuum_table(self, conn: sa.Connection, table: str, progress: Callable[[str], None] | None) -> str:
        """Rewrite one table, asking for its lock in short tries; "" when done, else who kept it.

        ``progress`` hears of each holder once (the sessions, not their seconds, which change on every
        try: a line a second while one transaction stayed open), and after a wait that the table was
        rewritten and how long the wait was."""
        start = time.monotonic()
        deadline = start + VACUUM_LOCK_TIMEOUT_S
        pause, said = 0.05, None
        while True:
            try:
                conn.exec_driver_sql('VACUUM FULL "' + table.replace('"', '""') + '"')
                if progress is not None and said is not None:
                    progress(f"table {table} rewritten after waiting {time.monotonic() - start:.1f} s for it")
                return ""
            except sa.exc.DBAPIError as exc:
                if not isinstance(exc.orig, psycopg.errors.LockNotAvailable):
                    raise
            sessions, holders = _table_holders(conn, table)
            if time.monotonic() >= deadline:
                return f"table {table} stayed in use by {holders}"
            if progress is not None and sessions != said:
                progress(f"waiting for table {table}: in use by {holders}; its readers and writers go on "
                         "meanwhile (the vacuum asks again every moment)")
                said = sessions
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    def close(self) -> None:
        self.engine.dispose()


def not_vacuumable(conn: sa.Connection, tables: Sequence[str]) -> list[tuple[str, str, str]]:
    """Which of ``tables`` this role may not ``VACUUM FULL``, with each one's owner and schema. Postgres does not
    refuse such a table: it skips it with a warning (which no one reads), so a role that may write the memory but
    does not own it reclaimed nothing and was told it had. PostgreSQL 17+: the table's MAINTAIN privilege (owners,
    superusers, ``pg_maintain`` and roles granted it); 16: its owner or the database's (superusers are members
    of both)."""
    if not tables:
        return []
    version = int(conn.exec_driver_sql("SELECT current_setting('server_version_num')").scalar() or 0)
    may = ("has_table_privilege(c.oid, 'MAINTAIN')" if version >= 170000 else
           "(pg_has_role(c.relowner, 'MEMBER') OR pg_has_role((SELECT datdba FROM pg_database "
           "WHERE datname = current_database()), 'MEMBER'))")
    rows = conn.exec_driver_sql(
        f"SELECT c.relname, pg_get_userbyid(c.relowner), c.relnamespace::regnamespace::text FROM unnest(CAST(? AS "
        f"text[])) t JOIN pg_class c ON c.oid = to_regclass(quote_ident(t)) WHERE NOT {may} ORDER BY 1", (list(tables),)
    ).fetchall()
    return [(str(name), str(owner), str(schema)) for name, owner, schema in rows]


def vacuum_refused(location: PgLocation, refused: Sequence[tuple[str, str, str]], command: str = "the vacuum", *,
                   schema: grants.MemorySchema | None = None) -> str:
    """Why nothing was rewritten: the tables this role may not vacuum, who owns them, what to do (run
    ``command`` as the owner, or ask for MAINTAIN). ``schema``: the database's, for the role read at open."""
    role = grants.role_of(location, schema)
    more = f" and {len(refused) - 3} more" if len(refused) > 3 else ""
    names = ", ".join(name for name, _, _ in refused[:3]) + more
    owners = ", ".join(repr(o) for o in dict.fromkeys(owner for _, owner, _ in refused))
    schemas = ", ".join(dict.fromkeys(schema for _, _, schema in refused))
    on = (f"TABLE {refused[0][2]}.{refused[0][0]}" if len(refused) == 1 else f"ALL TABLES IN SCHEMA {schemas}")
    return (f"{location.display}: the role {role!r} may not vacuum {len(refused)} of the memory tables ({names}): "
            f"only their owner ({owners}), a superuser or (PostgreSQL 17+) a role granted MAINTAIN on them may "
            f"rewrite a table. Nothing was rewritten, and the deleted rows' bytes are still in the server's files. "
            f"Run {command} as {owners}, or ask the owner to grant it (PostgreSQL 17+): GRANT MAINTAIN ON {on} "
            f"TO {grants.role_sql(role)};")


def _table_holders(conn: sa.Connection, table: str) -> tuple[frozenset[int], str]:
    """The sessions holding a lock on ``table`` (their process ids) and, in words, what each is doing and
    for how long."""
    rows = conn.exec_driver_sql(
        "SELECT DISTINCT a.pid, a.state, coalesce(a.application_name, ''), "
        "extract(epoch FROM now() - coalesce(a.xact_start, a.query_start)), left(a.query, 60) "
        "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.relation = to_regclass(quote_ident(?)) AND l.granted AND a.pid <> pg_backend_pid() "
        "ORDER BY 4 DESC NULLS LAST", (table,)).fetchall()
    if not rows:
        return frozenset(), "another session (it ended meanwhile)"
    parts = []
    for pid, state, app, seconds, query in rows[:3]:
        who = f"session {pid}" + (f" ({app})" if app else "")
        what = ("idle in an open transaction" if state and state.startswith("idle in transaction")
                else f"running {' '.join(str(query or '').split())[:60]!r}")
        parts.append(f"{who}, {what} for {float(seconds or 0):.1f} s")
    more = f" and {len(rows) - 3} more" if len(rows) > 3 else ""
    return frozenset(int(row[0]) for row in rows), "; ".join(parts) + more


def first_schema(search_path: str) -> str | None:
    """The schema a ``search_path`` names first, as the server reads it (unquoted names in lower case,
    ``"..."`` kept as written); None when it names none or starts with ``"$user"`` (the default, which
    the server skips when no schema has the role's name)."""
    name, quoted, i = "", False, 0
    text = search_path.strip()
    while i < len(text):
        ch = text[i]
        if quoted:
            if ch == '"' and text[i + 1:i + 2] == '"':
                name, i = name + '"', i + 2
                continue
            if ch == '"':
                quoted = False
            else:
                name += ch
        elif ch == '"':
            quoted = True
        elif ch == ",":
            break
        elif not ch.isspace():  # blanks outside quotes separate, never belong to a name
            name += ch.lower()
        i += 1
    if not name or name == "$user":
        return None
    return name


def _ensure_first_schema(conn: psycopg.Connection[Any], display: str, *, read_only: bool) -> bool:
    """The memory's tables go to the first schema of the session's ``search_path`` (a URL's
    ``options=-c search_path=memory,public``, ``$PGOPTIONS`` or the role's setting). When that schema
    does not exist the server silently uses the next one (``public``, beside the application's tables),
    so a writer creates it here; a role that may not is refused, naming it. Returns True when it was
    missing (created now, or left to a writer when open read-only): the memory's schema is empty, though
    the application's tables further on the path are visible."""
    row = conn.execute("SHOW search_path").fetchone()
    schema = first_schema(str(row[0] if row else ""))
    if schema is None or schema.startswith("pg_"):
        return False
    if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None:
        return False
    if read_only:
        return True
    quoted = '"' + schema.replace('"', '""') + '"'
    try:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
        conn.commit()
    except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateSchema):
        conn.rollback()  # another process created it at the same moment (and migrates it, as this one may)
    except psycopg.errors.InsufficientPrivilege:
        conn.rollback()
        raise DatabaseOpenError(
            f"{display}: its search_path names the schema {schema!r} first, which does not exist, and this "
            f"role may not create it, so the memory's tables would go to the next schema instead. Ask the "
            f"database's owner to run CREATE SCHEMA {quoted} AUTHORIZATION <this role>; (or correct the "
            f"schema's name in the URL's options or the role's search_path).") from None
    return True


def given_settings(url: str) -> tuple[str, dict[str, Any]]:
    """(the options to send before ours, the connect keywords to add): what the user's URL (or libpq's
    variables) already says, which a keyword argument of ``psycopg.connect`` would silently replace.
    ``options`` (a ``search_path`` choosing the schema that holds the memory, a ``statement_timeout``;
    else ``$PGOPTIONS``) goes before ours, so ours win only where the engine needs them (UTC, ISO dates);
    ``connect_timeout`` and ``application_name`` keep the URL's (or ``$PGCONNECT_TIMEOUT`` /
    ``$PGAPPNAME``), ours are defaults."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:  # not parseable: psycopg.connect says so, naming what is wrong
        params = {}
    options = str(params.get("options") or os.environ.get("PGOPTIONS") or "").strip()
    defaults: dict[str, Any] = {}
    if not params.get("connect_timeout") and not os.environ.get("PGCONNECT_TIMEOUT"):
        defaults["connect_timeout"] = CONNECT_TIMEOUT_S
    if not params.get("application_name") and not os.environ.get("PGAPPNAME"):
        defaults["application_name"] = "memory-studio"
    return (options + " " if options else ""), defaults


def _begin_on_checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
    """Begin the transaction of a connection as the pool hands it out; a connection that cannot
    (closed by the server, a restart) is replaced, and the pool's older connections with it (what
    ``pool_pre_ping`` did on a failed ping).

    psycopg sends ``BEGIN`` before the first statement of a transaction when the server reports none
    open; begun here, the first statement goes alone. Before, every check-out paid a ping (``;``) and
    then that ``BEGIN``: two round trips of a hybrid search's eight (``core.recall.search``). A
    transaction with no statement takes no snapshot, so a connection checked out and not yet used
    holds nothing back. libpq's own call: psycopg reads the transaction state from it, and
    ``rollback`` / ``commit`` end it as they end one psycopg began."""
    pgconn = dbapi_conn.pgconn
    if pgconn.transaction_status != pq.TransactionStatus.IDLE:
        return
    try:
        result = pgconn.exec_(b"BEGIN")
        ok = result.status == pq.ExecStatus.COMMAND_OK
    except psycopg.Error:
        ok = False
    if not ok:
        raise sa.exc.InvalidatePoolError("the connection could not begin a transaction")


def _end_empty_transaction_before_autocommit(dialect: Any) -> None:
    """A connection switched to autocommit (``isolation_level="AUTOCOMMIT"``, e.g. for ``VACUUM``)
    first ends the empty transaction ``_begin_on_checkout`` began: SQLAlchemy allows the switch
    only before any statement of the connection, and psycopg refuses it while a transaction is open."""
    plain = dialect.set_isolation_level

    def set_isolation_level(dbapi_conn: Any, level: Any) -> None:
        if dbapi_conn.pgconn.transaction_status == pq.TransactionStatus.INTRANS:
            dbapi_conn.rollback()
        plain(dbapi_conn, level)

    dialect.set_isolation_level = set_isolation_level


def _translate(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> Any:
    if context is not None and getattr(context, "compiled", None) is None:
        statement = adapt.qmark_to_format(statement)
    return statement, parameters


# SQLSTATE classes and codes of faults that are the server's or the connection's, not the statement's.
_CONNECTION_CLASSES = ("08",)  # connection exception
_UNAVAILABLE_CODES = {"57P01": "the server is shutting down or restarting (admin shutdown)",
                      "57P02": "the server crashed and is restarting",
                      "57P03": "the server is starting up or shutting down and accepts no connections now",
                      "53300": "the server has too many connections",
                      "40001": "the transaction was ended to resolve a conflict with another one (serialization)",
                      "40P01": "the transaction was ended to resolve a deadlock"}


def translate_pg_error(display: str, exc: BaseException, *, for_read: bool = False) -> StorageError | None:
    """Our error for a Postgres fault that is not the statement's own doing (else None).

    Connection losses and refusals (a restart, a failover, the network), server shutdowns and
    transactions the server ended (serialization failures, deadlocks) are ``StorageUnavailableError``:
    retryable, nothing of the call was committed. The message holds the server's first line and
    SQLSTATE, never the statement or its parameters. ``for_read``: the call was a read, which changed
    nothing (the Studio's reads and change checks, a write's first look), and the message says that instead.
    """
    orig = getattr(exc, "orig", exc)
    if not isinstance(exc, (sa.exc.DBAPIError, psycopg.Error)) or not isinstance(orig, psycopg.Error):
        return None
    state = orig.sqlstate or ""
    lost = isinstance(orig, (psycopg.OperationalError, psycopg.InterfaceError)) and not state
    if not (lost or state.startswith(_CONNECTION_CLASSES) or state in _UNAVAILABLE_CODES
            or getattr(exc, "connection_invalidated", False)):
        return None
    first = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    why = _UNAVAILABLE_CODES.get(state, "the connection to the server failed or was closed")
    code = f", SQLSTATE {state}" if state else ""
    error = StorageUnavailableError(
        f"The Postgres server for {display} could not complete this call: {why} ({first}{code}). "
        f"{'Nothing was changed.' if for_read else 'Nothing of it was committed.'} {_what_to_do(first)}")
    error.sqlstate = state  # type: ignore[attr-defined]
    return error


def _no_free_slot(exc: BaseException) -> bool:
    """Whether the server refused a new connection for want of a slot (SQLSTATE 53300; libpq reports a
    refused connection without the SQLSTATE, so its text is read too)."""
    low = str(exc).lower()
    return (getattr(exc, "sqlstate", None) == "53300" or "too many connections" in low
            or "connection slots are reserved" in low or "too many clients" in low)


def _what_to_do(first: str) -> str:
    """The advice for a connection the server refused or lost: waiting helps when it was down, not when
    it is full."""
    low = first.lower()
    if "too many connections" in low or "connection slots are reserved" in low:  # SQLSTATE 53300
        try:
            size = f" (now {_pool_size()})"
        except DatabaseOpenError:
            size = ""
        return (f"The server has as many connections as it allows. Each process keeps up to {POOL_SIZE_ENV}{size} "
                "connections and as many again when busy: lower it, raise the server's max_connections (or the "
                "role's connection limit), or put PgBouncer (transaction mode, see the README) in front; then try again.")
    return "Try again once the server is back; connections are re-made automatically."


def _permission_denied(location: PgLocation, exc: BaseException, schema: grants.MemorySchema, *,
                       opened_read_only: bool = False) -> StorageError | None:
    """The server refused a statement for a reason of its set-up, not of the statement: the role may not
    read or write a table (42501; enabling pgvector is left to ``explain_extension_error``), the
    database takes no writes (25006), or the role's ``statement_timeout`` cancelled it (57014). Say
    which and what to change, not the driver's error with the statement and its parameters (message
    ids of the resource)."""
    orig = getattr(exc, "orig", exc)
    if not isinstance(orig, psycopg.Error):
        return None
    first = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    role = grants.role_of(location, schema)
    if isinstance(orig, psycopg.errors.ReadOnlySqlTransaction) and opened_read_only:  # our own setting
        return ReadOnlyError(f"{location.display} is open read-only. Allow writes first (Studio: File > Allow Writes).")
    if isinstance(orig, psycopg.errors.ReadOnlySqlTransaction):  # 25006: a standby, or read-only by setting
        return ReadOnlyError(
            f"{location.display} accepts no writes ({first}): it is a read replica (hot standby), or "
            f"default_transaction_read_only is on for the role {role!r} or the database. Point the URL at the "
            "primary server, or ask the database's owner to turn that setting off.")
    if isinstance(orig, psycopg.errors.QueryCanceled) and "statement timeout" in first:  # 57014
        return StorageError(
            f"{location.display}: the server cancelled a statement ({first}): the statement_timeout set for the "
            f"role {role!r} or the database is shorter than this call needs. Raise it (ALTER ROLE "
            f"{grants.role_sql(role)} SET statement_timeout = '60s'), then try again; nothing of the call was committed.")
    if not isinstance(orig, psycopg.errors.InsufficientPrivilege) or "extension" in str(orig):
        return None
    if "permission denied for schema" in first:  # making a table: a first start, a migration, a new dimension
        return StorageError(grants.may_not_create(location, schema, first))
    return StorageError(
        f"{location.display}: the role {role!r} may not do this ({first}). Use a role that may write the memory "
        f"tables (the one that created them), or ask the database's owner to grant them: "
        f"{grants.table_grants(schema, role)}")


def _no_memory_tables(display: str, exc: BaseException, *, empty: bool) -> SchemaError | None:
    """A read of a database that had no memory tables when it was opened (read-only: not migrated),
    failing on a missing table: what the command line says of such a file, not the driver's error with
    the statement (a Postgres database is not checked by ``core.cli_store``, which knows files)."""
    orig = getattr(exc, "orig", exc)
    if not isinstance(orig, psycopg.errors.UndefinedTable):
        return None
    return no_memory_tables(display, empty=empty)


def explain_extension_error(display: str, exc: BaseException) -> DatabaseOpenError | None:
    """What to do when a migration cannot enable pgvector (else None): the role may not create the
    extension (it is not a trusted one), or the server has none installed. Without this, the first start
    on a managed database ended in a driver traceback showing ``CREATE EXTENSION`` and its SQL."""
    orig = getattr(exc, "orig", exc)
    if not isinstance(orig, psycopg.Error):
        return None
    text = str(orig).strip()
    if 'extension "vector"' not in text:
        return None
    first = text.splitlines()[0]
    state = orig.sqlstate or ""
    if state == "42501":  # insufficient_privilege
        return DatabaseOpenError(
            f"{display} needs the pgvector extension, and this role may not create it ({first}). Ask the "
            "database's owner or your provider to run `CREATE EXTENSION vector;` in this database (as a "
            "superuser), then start again: the remaining migrations run then.")
    if state in ("0A000", "58P01"):  # not available / no control file: pgvector is not installed
        return DatabaseOpenError(
            f"{display} needs the pgvector extension, which this server does not have ({first}). Install "
            "pgvector 0.8 or newer on the server (a managed service: enable its `vector` extension), then "
            "start again.")
    return None


def _pool_size() -> int:
    raw = os.environ.get(POOL_SIZE_ENV, "").strip()
    if not raw:
        return DEFAULT_POOL_SIZE
    try:
        value = int(raw)
    except ValueError:
        raise DatabaseOpenError(f"{POOL_SIZE_ENV} must be a whole number, got {raw!r}.") from None
    if value < 1:
        raise DatabaseOpenError(f"{POOL_SIZE_ENV} must be at least 1, got {raw!r}.")
    return value


def explain_connect_error(display: str, exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    low = text.lower()
    if "password authentication failed" in low or "no password supplied" in low:
        return (f"Cannot sign in to {display}: {text.splitlines()[0]}. Set PGPASSWORD, add the password to "
                "~/.pgpass, or keep it in the system keyring (memory-studio never stores it).")
    if "does not exist" in low and "database" in low:
        return f"{display}: {text.splitlines()[0]}. Create the database first (createdb), then try again."
    if "statement timeout" in low:  # the role's statement_timeout, not the network
        return (f"Cannot open {display}: {text.splitlines()[0]}. The statement_timeout set for this role or "
                "database is too short for opening it; raise it (ALTER ROLE ... SET statement_timeout = '60s').")
    if "connection refused" in low or "could not connect" in low or "timeout" in low or "no such file" in low:
        return (f"Cannot reach the Postgres server for {display}: {text.splitlines()[0]}. "
                "Check that it is running and that host and port are right.")
    if "unsupported startup parameter" in low:  # a pooler (PgBouncer) between us and the server
        return (f"Cannot open {display}: {text.splitlines()[0]}. A connection pooler such as PgBouncer refuses the "
                "settings sent at connect: add `options` to its ignore_startup_parameters and set pgvector's "
                "search settings for the role instead (README, Running on PostgreSQL).")
    return f"Cannot open {display}: {text.splitlines()[0] if text else type(exc).__name__}"
