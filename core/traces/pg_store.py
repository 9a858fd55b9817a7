"""Traces in the same Postgres database as the memory: Mastra's ``mastra_ai_spans``, PgStore layout.

A fleet on one Postgres server has no shared folder for a DuckDB file, so spans go into the
database itself, where the Studio reads them without a file. The table is Mastra's (``@mastra/pg``):
``TEXT`` / ``BOOLEAN`` / ``JSONB`` / ``TIMESTAMP`` columns in ``core.traces.spans.COLUMNS`` order, a
``"<col>Z" TIMESTAMPTZ`` mirror of each timestamp (Mastra reads those), a primary key on
``("traceId", "spanId")`` named as Mastra names it, and Mastra's indexes under Mastra's names, so a
Mastra agent writing spans into the same database finds its table and neither side recreates it.

Writes come from the same background exporter as DuckDB (``core.traces.exporter``): a turn only
queues its spans. A write that would wait on a lock longer than its budget (``lock_timeout``) raises
``StoreBusy`` and the spans stay queued. Readers never wait: Postgres readers see the last commit.
Retention deletes whole traces, oldest first; ``compact`` rewrites the table (``VACUUM FULL``) so the
disk space really goes back, which holds an exclusive lock on the table while it runs.

Runs in progress (``core.traces.live``): a span open for a while is written as a running row that its
end replaces, as in the DuckDB store. The writers of one database share no folder (a fleet on many
hosts), so the proof that a running row's writer lives is a session-level advisory lock held by a
connection of its own (``PgWriterLease``): the server lets go of it when that session ends, which it
does when the process dies, however it dies (its socket closes; a host that vanishes is noticed by TCP
keepalives, set on the session to about a minute). Readers look at ``pg_locks``, which takes nothing.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import psycopg
import sqlalchemy as sa

from core.storage.catalog import has_table, table_columns
from core.timeutil import as_utc, utc_now_ms
from core.traces.live import Lease, new_writer, running_writer
from core.traces.locking import StoreBusy
from core.traces.reader import DEFAULT_READ_BUDGET_S, SpanReader, iter_chunks
from core.traces.spans import COLUMNS, SPANS_TABLE, PruneResult, SpanRecord
from core.traces.store import RetentionSettings, TraceStoreReadOnlyError, age_cutoff, one_per_span, retention_limit
from core.stored_text import json_text

if TYPE_CHECKING:  # pragma: no cover
    from core.storage.database import Database

log = logging.getLogger(__name__)

DEFAULT_WRITE_BUDGET_S = 0.5
DDL_LOCK = "memory-studio:mastra_ai_spans"
PRUNE_LOCK = "memory-studio:traces-prune"
_PG_TYPES = {"text": "TEXT", "bool": "BOOLEAN", "ts": "TIMESTAMP", "json": "JSONB"}
_NOT_NULL = {"traceId", "spanId", "name", "spanType", "isEvent", "startedAt", "createdAt"}
_KEY = ("traceId", "spanId")
_TS_COLUMNS = tuple(c for c, _, k in COLUMNS if k == "ts")
_MIRRORS = tuple(f"{c}Z" for c in _TS_COLUMNS)
_INDEXES = (  # MastraStorage's default span indexes, by name, so ``CREATE INDEX IF NOT EXISTS`` agrees
    ("traceid_startedat_idx", '("traceId", "startedAt" DESC)'),
    ("parentspanid_startedat_idx", '("parentSpanId", "startedAt" DESC)'),
    ("name_idx", '("name")'),
    ("spantype_startedat_idx", '("spanType", "startedAt" DESC)'),
    ("root_spans_idx", '("startedAt" DESC) WHERE "parentSpanId" IS NULL'),
    ("entitytype_entityid_idx", '("entityType", "entityId")'),
    ("entitytype_entityname_idx", '("entityType", "entityName")'),
    ("orgid_userid_idx", '("organizationId", "userId")'),
    ("metadata_gin_idx", 'USING gin ("metadata")'),
    ("tags_gin_idx", 'USING gin ("tags")'),
)
#: The first key of every writer lease's advisory lock (``pg_advisory_lock(int, int)``: ``pg_locks``
#: shows it as ``classid``, the writer's key as ``objid``, ``objsubid`` 2), so no lock of another kind
#: (``Database.lock`` takes one-key locks, ``objsubid`` 1) is ever read as a writer's.
LEASE_SPACE = 0x4D53_5452  # "MSTR"
_LEASE_SQL = (
    "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 "
    f"AND classid = {LEASE_SPACE}::oid AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
# Server-side TCP keepalives of a lease's session (seconds): a writer whose host vanishes without closing
# its connection (power, network) is let go of after about idle + interval * count. Settable by any user.
_LEASE_SESSION = {"tcp_keepalives_idle": 30, "tcp_keepalives_interval": 10, "tcp_keepalives_count": 3,
                  # an idle session limit set on the server must not end a lease while its writer lives
                  "idle_session_timeout": 0, "statement_timeout": 10_000}
# The client's side of the same: a ping of a lease whose server vanished gives up, never hangs the writer.
_LEASE_CONNECT = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3,
                  "tcp_user_timeout": 30_000, "connect_timeout": 10}
# A running row (no end, not a point event) gives way to the same span finished; nothing else is replaced.
_UPSERT_WHERE = (f' WHERE {SPANS_TABLE}."endedAt" IS NULL AND NOT {SPANS_TABLE}."isEvent" '
                 'AND (excluded."endedAt" IS NOT NULL OR excluded."isEvent")')
# A JSON escape of NUL (Postgres's jsonb refuses it), not preceded by an escaping backslash.
_JSON_NUL = re.compile(r'(?<!\\)((?:\\\\)*)\\u0000')


def spans_ddl() -> list[str]:
    cols = [f'"{c}" {_PG_TYPES[k]}{" NOT NULL" if c in _NOT_NULL else ""}' for c, _, k in COLUMNS]
    cols += [f'"{m}" TIMESTAMPTZ DEFAULT NOW()' for m in _MIRRORS]
    # Mastra names the key "<schema>_mastra_ai_spans_traceid_spanid_pk" and adds it only when no
    # constraint of that name exists; a key under another name would make its ALTER fail.
    pk = (
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE contype = 'p' "
        f"AND conrelid = to_regclass('{SPANS_TABLE}')) THEN EXECUTE format('ALTER TABLE {SPANS_TABLE} "
        "ADD CONSTRAINT %I PRIMARY KEY (\"traceId\", \"spanId\")', "
        f"current_schema() || '_{SPANS_TABLE}_traceid_spanid_pk'); END IF; END $$"
    )
    indexes = [f'CREATE INDEX IF NOT EXISTS "{SPANS_TABLE}_{name}" ON {SPANS_TABLE} {how}' for name, how in _INDEXES]
    return [f"CREATE TABLE IF NOT EXISTS {SPANS_TABLE} ({', '.join(cols)})", pk, *indexes]


def spill_folder() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("memory-studio")) / "trace-spill"


class PgSpanStore(SpanReader):
    """Writes and reads spans in the ``mastra_ai_spans`` table of a Postgres ``Database``."""

    #: A running row (``endedAt`` null, ``core.traces.live``) gives way to its finished span (``_insert``);
    #: its writer's lease is an advisory lock (``PgWriterLease``).
    running_rows = True

    def __init__(
        self,
        db: "Database",
        *,
        retention: RetentionSettings | None = None,
        read_only: bool = False,
        read_budget_s: float = DEFAULT_READ_BUDGET_S,
        write_budget_s: float = DEFAULT_WRITE_BUDGET_S,
        spill_dir: Path | None = None,
    ) -> None:
        super().__init__(read_budget_s)
        self.db = db
        self.read_only = read_only or db.read_only
        self.retention = retention or RetentionSettings()
        self.write_budget_s = write_budget_s
        self._columns: tuple[str, ...] | None = None
        # Spans that could not be written in time wait in local files (core.traces.exporter), one
        # set per database, so another process of this machine writing to it imports them too.
        key = db.location.display
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", key)[-60:] + "-" + hashlib.sha1(key.encode()).hexdigest()[:10]
        self.path = (spill_dir or spill_folder()) / f"{name}.spans"

    def __repr__(self) -> str:
        return f"PgSpanStore({self.db.location.display!r})"

    def close(self) -> None:
        """Nothing to release: connections belong to the database's pool."""

    def claim(self) -> str | None:
        """Nothing to settle: a server database's spans always go to its own table."""
        return None

    def writer_lease(self) -> "PgWriterLease":
        """This process's proof of life for its running rows in this database (the span writer's)."""
        return PgWriterLease(self.db)

    def live_writers(self) -> frozenset[str]:
        """The lease keys held now in this database (``PgWriterLease.key``): one read of ``pg_locks``."""
        with self.db.read() as conn:
            return frozenset(str(k) for (k,) in conn.exec_driver_sql(_LEASE_SQL).all())

    def _gone(self, spans: Sequence[SpanRecord]) -> frozenset[str]:
        """Running rows whose writer holds no lease in this database: one look at ``pg_locks`` for all
        of them (none at all when no span is running)."""
        writers = {span.span_id: w for span in spans
                   if span.running and (w := running_writer(span.metadata)) is not None}
        if not writers:
            return frozenset()
        try:
            held = self.live_writers()
        except sa.exc.DBAPIError as exc:  # cannot tell: shown as running, as a reader without leases shows them
            log.info("could not read the span writers' leases of %s: %s", self.db.location.display, exc)
            return frozenset()
        return frozenset(sid for sid, writer in writers.items() if str(lease_key(writer)) not in held)

    # -- SpanReader hooks ----------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[_Cursor]:
        with self.db.read() as conn:
            yield _Cursor(conn)

    def _read_connection(self) -> AbstractContextManager[Any]:
        return self._connection()

    def _ts_param(self, value: datetime) -> object:
        return _naive_utc(value)

    def _select_column(self, column: str, kind: str, alias: str = "") -> str:
        ref = f'{alias + "." if alias else ""}"{column}"'
        if kind == "ts":  # microseconds, as written (the driver's default text keeps milliseconds)
            return f"to_char({ref}, 'YYYY-MM-DD\"T\"HH24:MI:SS.US')"
        return ref

    def _error_present(self, alias: str) -> str:
        return f"({alias}.\"error\" IS NOT NULL AND {alias}.\"error\" <> 'null'::jsonb)"

    def _contains(self, haystack: str, needle: str) -> str:
        return f"strpos({haystack}, {needle}) > 0"

    def _table_exists(self, con: Any) -> bool:
        return has_table(con.conn, SPANS_TABLE)

    def change_mark(self) -> tuple[Any, ...]:
        """Cheap change detection for a poller: the newest root span, and the server's row counters
        for the table (which also move on deletes, some seconds after each writer's commit)."""
        with self.db.read() as conn:
            if not has_table(conn, SPANS_TABLE):
                return (None,)
            # Updates count too (a running row replaced by its end), and so do the writers' leases: a
            # writer dying changes no row, only whether its running rows read as never finished.
            row = conn.exec_driver_sql(
                f'SELECT (SELECT max("startedAt") FROM {SPANS_TABLE} WHERE "parentSpanId" IS NULL), '
                "(SELECT n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_all_tables "
                f"WHERE relid = to_regclass('{SPANS_TABLE}')), "
                f"(SELECT array_agg(k ORDER BY k) FROM ({_LEASE_SQL}) AS leases(k))"
            ).first()
        return tuple(row) if row else (None,)

    # -- writing -------------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if self.read_only:
            raise TraceStoreReadOnlyError(f"{self.db.location.display} was opened read-only")

    @contextmanager
    def _write(self, budget_s: float) -> Iterator[sa.Connection]:
        """A write transaction that gives up (``StoreBusy``) rather than wait on a lock past the budget."""
        try:
            with self.db.write() as conn:
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{max(int(budget_s * 1000), 1)}ms'")
                yield conn
        except sa.exc.OperationalError as exc:
            if isinstance(exc.orig, psycopg.errors.LockNotAvailable):
                raise StoreBusy(f"{SPANS_TABLE} in {self.db.location.display}", budget_s) from exc
            raise

    def _ensure_table(self, conn: sa.Connection) -> tuple[str, ...]:
        if self._columns is None:
            if not has_table(conn, SPANS_TABLE):
                self.db.lock(conn, DDL_LOCK)  # processes starting together must not race on CREATE TABLE
                for statement in spans_ddl():
                    conn.exec_driver_sql(statement)
            have = {name for name, _type, _key in table_columns(conn, SPANS_TABLE)}
            # An older Mastra table may lack newer columns: write the ones it has.
            self._columns = tuple(c for c in (*(c for c, _, _ in COLUMNS), *_MIRRORS) if c in have)
        return self._columns

    def write_spans(self, spans: Sequence[SpanRecord], budget_s: float | None = None) -> int:
        """Insert spans in one transaction; a span already stored is left as it is, unless it is a
        running row and the new one is the same span finished (``_UPSERT_WHERE``).

        Raises ``StoreBusy`` if a lock stays held past ``budget_s``; the caller keeps the spans.
        """
        self._check_writable()
        if not spans:
            return 0
        unique = one_per_span(spans)
        budget = self.write_budget_s if budget_s is None else budget_s
        try:
            self._insert(unique, budget)
        except sa.exc.ProgrammingError as exc:
            if not isinstance(exc.orig, psycopg.errors.UndefinedTable):
                raise
            self._columns = None  # someone dropped the table (derived data): make it again
            self._insert(unique, budget)
        return len(spans)

    def _insert(self, unique: list[SpanRecord], budget: float) -> None:
        now = utc_now_ms()
        with self._write(budget) as conn:
            columns = self._ensure_table(conn)
            update = ", ".join(f"{_quote(c)} = excluded.{_quote(c)}" for c in columns if c not in _KEY)
            sql = (f"INSERT INTO {SPANS_TABLE} ({', '.join(_quote(c) for c in columns)}) "
                   f"VALUES ({', '.join('?' for _ in columns)}) "
                   f'ON CONFLICT ("traceId", "spanId") DO UPDATE SET {update}{_UPSERT_WHERE}')
            rows = [_row(span, columns, now) for span in unique]
            try:
                with conn.begin_nested():
                    conn.exec_driver_sql(sql, rows)
            except (sa.exc.DataError, sa.exc.IntegrityError):
                # One span the server refuses must not hold every later span in the queue forever.
                self._insert_one_by_one(conn, sql, rows)

    def _insert_one_by_one(self, conn: sa.Connection, sql: str, rows: list[tuple[Any, ...]]) -> None:
        for row in rows:
            try:
                with conn.begin_nested():
                    conn.exec_driver_sql(sql, row)
            except (sa.exc.DataError, sa.exc.IntegrityError) as exc:
                log.error("span %s of trace %s refused by %s and dropped: %s", row[1], row[0],
                          self.db.location.display, str(exc.orig).splitlines()[0] if exc.orig else exc)

    # -- retention -----------------------------------------------------------------------------

    def size_bytes(self) -> int:
        """The table with its indexes and TOAST, as it sits on the server's disk."""
        with self.db.read() as conn:
            value = conn.exec_driver_sql(
                f"SELECT coalesce(pg_total_relation_size(to_regclass('{SPANS_TABLE}')), 0)").scalar()
        return int(value or 0)

    file_size = size_bytes  # the name the DuckDB store and its callers use

    def prune(
        self,
        keep_days: float | None = None,
        keep_mb: float | None = None,
        *,
        compact: bool = True,
        budget_s: float = 10.0,
        now: datetime | None = None,
    ) -> PruneResult:
        """Delete whole traces, oldest first, until both limits hold (``retention`` when none given).

        The size limit is met by the traces' stored bytes (their columns as stored, compressed, plus
        their share of the indexes): Postgres reuses freed space rather than giving it back, so the
        table's size on disk only shrinks when ``compact`` rewrites it. Another process pruning at
        the same moment makes this call return ``busy`` without doing the work twice.
        """
        self._check_writable()
        if keep_days is None and keep_mb is None:
            keep_days, keep_mb = self.retention.keep_days, self.retention.keep_mb
        else:
            keep_days, keep_mb = retention_limit(keep_days, "keep_days"), retention_limit(keep_mb, "keep_mb")
        before = self.size_bytes()
        target = None if keep_mb is None else keep_mb * 1024 * 1024
        if (keep_days is None and target is None) or not before:
            return PruneResult(bytes_before=before, bytes_after=before)
        try:
            with self._write(budget_s) as conn:
                if not conn.exec_driver_sql("SELECT pg_try_advisory_xact_lock(hashtextextended(?, 0))",
                                            (PRUNE_LOCK,)).scalar():
                    return PruneResult(bytes_before=before, bytes_after=before, busy=True)
                doomed: set[str] = set()
                cutoff = age_cutoff(now or utc_now_ms(), keep_days) if keep_days is not None else None
                if cutoff is not None:
                    doomed |= {r[0] for r in conn.exec_driver_sql(
                        f'SELECT "traceId" FROM {SPANS_TABLE} GROUP BY "traceId" HAVING min("startedAt") < ?',
                        (_naive_utc(cutoff),))}
                if target is not None and before > target:
                    doomed |= self._over_size(conn, self._ensure_table(conn), target)
                spans = 0
                for chunk in iter_chunks(sorted(doomed), 1000):
                    result = conn.exec_driver_sql(
                        f'DELETE FROM {SPANS_TABLE} WHERE "traceId" = ANY(CAST(? AS text[]))', (list(chunk),))
                    spans += int(result.rowcount or 0)
        except StoreBusy:
            return PruneResult(bytes_before=before, bytes_after=self.size_bytes(), busy=True)
        compacted, not_compacted = False, ""
        if compact and (doomed or (target is not None and before > target)):
            why_not = self._vacuum_full(budget_s)
            compacted = why_not == ""
            not_compacted = "the table was busy" if why_not is None else why_not
        return PruneResult(len(doomed), spans, before, self.size_bytes(), compacted, not_compacted=not_compacted)

    def _over_size(self, conn: sa.Connection, columns: tuple[str, ...], target: float) -> set[str]:
        stored = " + ".join(f"coalesce(pg_column_size({_quote(c)}), 0)" for c in columns)
        table, indexes = conn.exec_driver_sql(
            f"SELECT pg_table_size(to_regclass('{SPANS_TABLE}')), pg_indexes_size(to_regclass('{SPANS_TABLE}'))"
        ).one()
        share = 1 + int(indexes or 0) / max(int(table or 0), 1)  # each row's part of the indexes
        per_trace = conn.exec_driver_sql(
            f'SELECT "traceId", min("startedAt") AS s, sum(24 + {stored}) FROM {SPANS_TABLE} '
            'GROUP BY "traceId" ORDER BY s DESC, "traceId"').all()
        kept, doomed = 0.0, set()
        for trace_id, _started, raw in per_trace:  # newest first
            kept += int(raw) * share
            if kept > target * 0.9:  # a margin, as the DuckDB store keeps, so the next traces fit
                doomed.add(trace_id)
        return doomed

    def _vacuum_full(self, budget_s: float) -> str | None:
        """Rewrite the span table: "" when done, None when it stayed busy, else why this role may not (the
        server skips a table the role may not vacuum with a warning, and the prune said it had compacted)."""
        from core.storage.pg.database import not_vacuumable, vacuum_refused
        from core.storage.pg.location import PgLocation

        try:
            with self.db.engine.connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")  # VACUUM runs outside a transaction
                refused = not_vacuumable(conn, [SPANS_TABLE])
                if refused and isinstance(self.db.location, PgLocation):
                    return vacuum_refused(self.db.location, refused, "`memory-studio traces prune`",
                                          schema=getattr(self.db, "schema", None))
                conn.exec_driver_sql(f"SET lock_timeout = '{max(int(budget_s * 1000), 1)}ms'")
                try:
                    conn.exec_driver_sql(f"VACUUM FULL {SPANS_TABLE}")
                finally:
                    conn.exec_driver_sql("RESET lock_timeout")
        except sa.exc.OperationalError as exc:
            log.warning("traces pruned but not compacted (%s busy): %s", SPANS_TABLE, str(exc.orig).splitlines()[0])
            return None
        return ""


def prune_command(spans: "PgSpanStore", keep_days: float | None, keep_mb: float | None, out: TextIO,
                  err: TextIO) -> int:
    """``memory-studio traces prune --db postgresql://...``: the span table of that open database."""
    where = f"{spans.db.location.display} ({SPANS_TABLE})"
    if not spans.size_bytes():
        out.write(f"no traces yet in {where}; nothing to prune\n")
        return 0
    result = spans.prune(keep_days, keep_mb, compact=True)
    if result.busy:
        err.write(f"{where}: busy (another process is pruning it or holds a lock on it); try again\n")
        return 1
    note = f" (not compacted: {result.not_compacted})" if result.not_compacted else ""
    out.write(f"{where}: deleted {result.traces_deleted} traces ({result.spans_deleted} spans); "
              f"{result.bytes_before / 1e6:.1f} MB -> {result.bytes_after / 1e6:.1f} MB{note}\n")
    return 0


def lease_key(writer: str) -> int:
    """The advisory lock key of a writer id: 31 bits of its hash (``pg_locks`` shows it as ``objid``)."""
    return int.from_bytes(hashlib.sha256(writer.encode()).digest()[:4], "big") & 0x7FFF_FFFF


class PgWriterLease:
    """A writing process's proof of life in one Postgres database: a session-level advisory lock
    (``LEASE_SPACE``, ``lease_key(writer)``) held by a connection of its own from its first running
    row until its span writer shuts down. The server lets go of it when the session ends: the process
    exited or was killed (its socket closes at once), or its host vanished (the session's TCP
    keepalives notice within about a minute). No clock is read: a writer waiting for a busy table, or
    paused, still holds it. One connection a writing process, and only while it has written running rows."""

    def __init__(self, db: "Database") -> None:
        self.db = db
        self.writer, self.mark = new_writer()
        self.key = lease_key(self.writer)
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    @property
    def held(self) -> bool:
        return self._conn is not None

    def acquire(self) -> bool:
        """Take the lease (once); False when it cannot be taken (the server refused a connection): then
        no running rows are written, since nothing could tell a reader that this writer died."""
        with self._lock:
            if self._conn is not None:
                return True
            return self._take()

    def keep(self) -> None:
        """While running rows of this writer are open: make sure the lock is still held (one round trip:
        taking it again is a no-op for the session holding it, and takes it back if the server had let go
        of it, behind a pooler that closed the session it was taken on), and if the connection was lost,
        take it again on a new one under the same key, so those rows read as running again rather than
        never finished."""
        with self._lock:
            conn = self._conn
            if conn is None:
                return
            try:
                conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (LEASE_SPACE, self.key))
                return
            except psycopg.Error as exc:
                log.warning("the trace writer's lease connection to %s was lost (%s); taking it again",
                            self.db.location.display, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                self._drop()
            self._take()

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _take(self) -> bool:
        connect = getattr(self.db, "dedicated_connection", None)
        if not callable(connect):
            return False
        try:
            conn = connect(**_LEASE_CONNECT)
            for name, value in _LEASE_SESSION.items():
                conn.execute(f"SET {name} = {int(value)}")
            for _attempt in range(3):
                if conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (LEASE_SPACE, self.key)).fetchone() == (True,):
                    self._conn = conn
                    return True
                # Another live writer's key (a 31-bit hash): vanishingly rare; a fresh id settles it.
                self.writer, self.mark = new_writer()
                self.key = lease_key(self.writer)
            conn.close()
            log.warning("no free trace writer lease in %s; runs in progress are not shown until they end",
                        self.db.location.display)
        except psycopg.Error as exc:
            log.warning("cannot take a trace writer lease in %s (%s); runs in progress are not shown until "
                        "they end", self.db.location.display, str(exc).splitlines()[0] if str(exc) else exc)
        return False

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()  # the session ends, and with it the lock
            except psycopg.Error:
                log.debug("closing the lease connection failed", exc_info=True)


class _Cursor:
    """What ``SpanReader``'s queries call (``execute(sql, params).fetchall()``) over a pooled connection."""

    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.conn.exec_driver_sql(sql, tuple(params))


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _naive_utc(value: datetime) -> str:
    """A ``TIMESTAMP`` value: UTC wall time, microseconds (Mastra writes UTC too)."""
    return as_utc(value).replace(tzinfo=None).isoformat()


def _text(value: Any) -> str:
    """Text the server takes: no NUL (a Postgres text value cannot hold one), no lone surrogate
    (not encodable as UTF-8); either would make the driver refuse the whole batch."""
    text = str(value).replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _row(span: SpanRecord, columns: tuple[str, ...], now: datetime) -> tuple[Any, ...]:
    values: dict[str, Any] = {}
    for column, attr, kind in COLUMNS:
        value = getattr(span, attr)
        if column == "createdAt" and value is None:
            value = now
        if value is None:
            values[column] = None
        elif kind == "ts":
            values[column] = _naive_utc(value)
            values[f"{column}Z"] = as_utc(value).isoformat()
        elif kind == "json":
            values[column] = _text(_JSON_NUL.sub(r"\1\\ufffd", json_text(value, ensure_ascii=False, default=str)))
        elif kind == "bool":
            values[column] = bool(value)
        else:
            values[column] = _text(value)
    return tuple(values.get(c) for c in columns)
