"""The observability domain: agent-run spans in a DuckDB file shaped like Mastra's ``mastra_ai_spans``.

The file is derived data (seed 001: deleting ``observability.duckdb`` loses no conversation), so
the store recreates its schema whenever it finds the file gone. Column names are Mastra's; types
are DuckDB's: jsonb columns are ``JSON``, timestamps are ``TIMESTAMP`` holding UTC to the
microsecond (Mastra's text has milliseconds), ``isEvent`` is ``BOOLEAN``. Every connection is short-lived (see
``core.traces.locking``) because an agent process writes while the Studio reads.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy

from core.errors import MemoryStudioError
from core.traces.locking import (
    StoreBusy,
    StoreMissing,
    WaitStats,
    gated,
    holds_lease,
    open_duckdb,
    release_if_wanted,
)
from core.traces.spans import (
    COLUMN_NAMES,
    COLUMNS,
    SPANS_TABLE,
    PruneResult,
    ReadCount,
    ReadResult,
    SpanRecord,
    SpanType,
    TraceFilters,
    TraceSummary,
)
from core.traces.live import writer_alive
from core.traces.reader import DEFAULT_READ_BUDGET_S, SpanReader, iter_chunks
from core.timeutil import as_utc, utc_now_ms
from core.traces.recovery import is_broken_file_error, set_aside_if_broken
from core.stored_text import json_text

DEFAULT_OBSERVABILITY_PATH = Path(".temp") / "observability.duckdb"
SCHEMA_VERSION_TABLE = "observability_schema_version"
DEFAULT_WRITE_BUDGET_S = 0.5
INSERT_CHUNK = 2000
#: DuckDB threads of the span writer's connection (see ``_insert``).
WRITER_THREADS = 1
_FLOOR_BLOCKS = 5

_NOT_NULL = {"traceId", "spanId", "name", "spanType", "isEvent", "startedAt", "createdAt"}
_DUCK_TYPES = {"text": "VARCHAR", "bool": "BOOLEAN", "ts": "TIMESTAMP", "json": "JSON"}


_QUOTED_COLUMNS = ", ".join(f'"{c}"' for c in COLUMN_NAMES)
_KEY_COLUMNS = ("spanId", "traceId")
# A stored span is a fact and stays as it is (a spill imported twice changes nothing), with one
# exception: a running row (no end, not a point event: a span written while it ran, core.traces.live)
# gives way to the same span finished. A running row never replaces anything, whenever it arrives.
_INSERT_SQL = (
    f"INSERT INTO {SPANS_TABLE} SELECT {_QUOTED_COLUMNS} FROM span_batch "
    'ON CONFLICT ("spanId", "traceId") DO UPDATE SET '
    + ", ".join(f'"{c}" = excluded."{c}"' for c in COLUMN_NAMES if c not in _KEY_COLUMNS)
    + f' WHERE {SPANS_TABLE}."endedAt" IS NULL AND NOT {SPANS_TABLE}."isEvent" '
    'AND (excluded."endedAt" IS NOT NULL OR excluded."isEvent")'
)


def _finished(span: SpanRecord) -> bool:
    return span.ended_at is not None or bool(span.is_event)


def one_per_span(spans: Sequence[SpanRecord]) -> list[SpanRecord]:
    """One record per (trace, span): the finished one when a batch holds the span running and finished
    (whatever their order), else the last."""
    unique: dict[tuple[str, str], SpanRecord] = {}
    for span in spans:
        key = (span.trace_id, span.span_id)
        kept = unique.get(key)
        if kept is not None and _finished(kept) and not _finished(span):
            continue
        unique[key] = span
    return list(unique.values())


def _spans_ddl() -> str:
    cols = ", ".join(
        f'"{name}" {_DUCK_TYPES[kind]}{" NOT NULL" if name in _NOT_NULL else ""}'
        for name, _, kind in COLUMNS
    )
    # Mastra's secondary indexes are left out on purpose: DuckDB prunes range scans with
    # zone maps, and ART indexes would only slow inserts and pin memory.
    return f'CREATE TABLE IF NOT EXISTS {SPANS_TABLE} ({cols}, UNIQUE ("spanId", "traceId"))'


class TraceStoreReadOnlyError(MemoryStudioError, PermissionError):
    """A write (spans, pruning) was asked of a trace store opened read-only."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "create_mastra_ai_spans", (_spans_ddl(),)),
)


def retention_limit(value: float | None, name: str) -> float | None:
    """A retention limit as given by a person: ``None`` or ``0`` mean no limit on that axis (as in
    ``MEMORY_STUDIO_TRACES_KEEP_DAYS``/``_MB``); a negative or non-finite number is refused, because
    as a cutoff it would delete every trace."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must not be negative: give a positive number, or 0 (0 means no limit); got {value!r}.")
    return None if value == 0 else float(value)


@dataclass(frozen=True)
class RetentionSettings:
    """How much trace history to keep; ``None`` means no limit on that axis."""

    keep_days: float | None = None
    keep_mb: float | None = None


def age_cutoff(now: datetime, keep_days: float) -> datetime | None:
    """When a trace that started before it is older than ``keep_days``; ``None`` when that reaches back
    past the first date there is (``--keep-days 1e9``): then no trace is that old."""
    try:
        return now - timedelta(days=keep_days)
    except OverflowError:
        return None


def _ts_param(value: datetime) -> datetime:
    # DuckDB TIMESTAMP is naive, microsecond precision; we always store UTC.
    return as_utc(value).replace(tzinfo=None)


_log = logging.getLogger(__name__)


def _quietly(call: Callable[[str], object], arg: str) -> None:
    """Clean-up after a failed insert: its own failure (the transaction is already aborted) must not
    hide the error that says what went wrong (a span that cannot be converted, say)."""
    try:
        call(arg)
    except duckdb.Error:
        _log.debug("clean-up after a failed span insert failed too", exc_info=True)


def _column_values(spans: Sequence[SpanRecord], column: str, attr: str, kind: str, now: datetime) -> list[object]:
    """One column of a batch, each value as ``_row_params`` converts it (built column by column: the
    writer's Python work per span, done holding the GIL, without a row list to transpose)."""
    values = [getattr(span, attr) for span in spans]
    if column == "createdAt":
        values = [now if v is None else v for v in values]
    if kind == "ts":
        return [None if v is None else _ts_param(v) for v in values]
    if kind == "json":
        dumps = json_text
        return [None if v is None else dumps(v, ensure_ascii=False, default=str) for v in values]
    if kind == "bool":
        return [None if v is None else bool(v) for v in values]
    return [None if v is None else v if type(v) is str else str(v) for v in values]


def _row_params(span: SpanRecord, now: datetime) -> list[object]:
    """One span's row, value by value (what ``_column_values`` gives column by column; kept as its
    reference in the tests)."""
    params: list[object] = []
    for column, attr, kind in COLUMNS:
        value = getattr(span, attr)
        if column == "createdAt" and value is None:
            value = now
        if value is None:
            params.append(None)
        elif kind == "ts":
            params.append(_ts_param(value))
        elif kind == "json":
            params.append(json_text(value, ensure_ascii=False, default=str))
        elif kind == "bool":
            params.append(bool(value))
        else:
            params.append(str(value))
    return params


class DuckDBObservabilityStore(SpanReader):
    """Writes and reads spans in one DuckDB file; safe to use from two processes at once."""

    #: A running row (``endedAt`` null, ``core.traces.live``) gives way to its finished span (``_insert``).
    running_rows = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        retention: RetentionSettings | None = None,
        read_only: bool = False,
        read_budget_s: float = DEFAULT_READ_BUDGET_S,
        write_budget_s: float = DEFAULT_WRITE_BUDGET_S,
        claim: Callable[[], tuple[Path, str | None]] | None = None,
    ) -> None:
        super().__init__(read_budget_s)
        self.path = Path(path)
        self.read_only = read_only
        # Where spans go is settled at the first span written (``claim``): the folder's shared trace
        # file is claimed for a database only by a process that writes spans (``core.traces.home``).
        self._claim = claim
        self._claim_lock = threading.Lock()
        self.retention = retention or RetentionSettings()
        self.write_budget_s = write_budget_s
        self.wait_stats = WaitStats()
        #: Set by the span writer (``DuckDBSpanExporter``), which then calls ``release_connection``
        #: while it waits between writes: the connection of a write stays open for the next one
        #: unless someone waits for the file (``core.traces.locking``, ``keep``).
        self.keep_connection = False
        # The file (device, inode) this object last found fully migrated: later writes to the same
        # file skip the schema check (a catalog query that cost as much as the insert itself).
        self._migrated_file: tuple[int, int] | None = None

    def __repr__(self) -> str:
        return f"DuckDBObservabilityStore({str(self.path)!r})"

    def close(self) -> None:
        """Close the connection a write left open (``keep_connection``), if any; no other outlives its
        batch or query."""
        self.release_connection(force=True)

    def holds_connection(self) -> bool:
        """Whether this process keeps the file open after a write (``keep_connection``)."""
        return holds_lease(self.path)

    def release_connection(self, *, force: bool = False) -> bool:
        """Close the kept connection when another process (or a compaction) waits for the file, or
        in any case with ``force``; True when none is left open."""
        return release_if_wanted(self.path, force=force)

    def _check_writable(self) -> None:
        if self.read_only:
            raise TraceStoreReadOnlyError(f"{self.path} was opened read-only")

    @property
    def claim_pending(self) -> bool:
        """Whether the file spans go to is settled only at the first span (``claim``)."""
        return self._claim is not None

    def claim(self) -> str | None:
        """Settle the file this store writes spans to, before its first span (``write_spans`` calls it;
        the span writer calls it before spilling or taking a lease beside the file). Until then ``path``
        is where the database's traces are read from: the folder's shared ``observability.duckdb`` when
        nobody owns it. Claiming it names this database its owner; when another database of the folder
        claimed it meanwhile, spans go to this database's own ``<file name>.observability.duckdb``.

        Returns a sentence for the person when the outcome is not the file shown so far (that other
        file, or a shared file that could not be claimed); None otherwise, and on every later call."""
        if self._claim is None:
            return None
        with self._claim_lock:
            claim, self._claim = self._claim, None
            if claim is None:
                return None
            before = self.path
            after, why = claim()
            if after != before:
                self.release_connection(force=True)
                self.path = after
                self._migrated_file = None
                with self._cache_lock:
                    self._cache.clear()
                why = (f"{before.name} was claimed by another database of this folder meanwhile; "
                       f"this database's traces go to {after.name}")
        if why is not None:
            _log.warning("traces: %s", why)
        return why

    # -- schema --------------------------------------------------------------------------------

    def _applied_versions(self, con: duckdb.DuckDBPyConnection) -> set[int]:
        exists = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?",
            [SCHEMA_VERSION_TABLE],
        ).fetchone()
        if not exists or not exists[0]:
            return set()
        return {int(r[0]) for r in con.execute(f"SELECT version FROM {SCHEMA_VERSION_TABLE}").fetchall()}

    def _file_identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def _migrate(self, con: duckdb.DuckDBPyConnection) -> None:
        identity = self._file_identity()
        if identity is not None and identity == self._migrated_file:
            return  # the same file this object migrated (a replaced or set-aside file has another inode)
        self._migrated_file = None
        applied = self._applied_versions(con)
        pending = [m for m in MIGRATIONS if m.version not in applied]
        if not pending:
            self._migrated_file = identity
            return
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(
                f"CREATE TABLE IF NOT EXISTS {SCHEMA_VERSION_TABLE} "
                "(version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, appliedAt TIMESTAMP NOT NULL)"
            )
            for migration in pending:
                for statement in migration.statements:
                    con.execute(statement)
                con.execute(
                    f"INSERT INTO {SCHEMA_VERSION_TABLE} VALUES (?, ?, ?)",
                    [migration.version, migration.name, _ts_param(utc_now_ms())],
                )
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        self._migrated_file = identity

    def pending_migrations(self) -> list[str]:
        """Names of migrations not yet applied; opens read-only and changes nothing."""
        try:
            with self._read_connection() as con:
                applied = self._applied_versions(con)
        except StoreMissing:
            applied = set()
        return [m.name for m in MIGRATIONS if m.version not in applied]

    # -- SpanReader hooks ----------------------------------------------------------------------

    def _read_connection(self) -> AbstractContextManager[Any]:
        return open_duckdb(
            self.path, read_only=True, budget_s=self.read_budget_s, stats=self.wait_stats
        )

    def _ts_param(self, value: datetime) -> object:
        return _ts_param(value)

    def _writer_alive(self, writer: str) -> bool | None:
        return writer_alive(self.path, writer)

    def _table_exists(self, con: Any) -> bool:
        row = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [SPANS_TABLE]
        ).fetchone()
        return bool(row and row[0])

    # -- writing -------------------------------------------------------------------------------

    def write_spans(self, spans: Sequence[SpanRecord], budget_s: float | None = None) -> int:
        """Insert spans in one transaction; a span already stored is left as it is, unless it is a
        running row and the new one is the same span finished (``_INSERT_SQL``).

        Returns the number of spans handed in. Raises ``StoreBusy`` if the file stays locked
        for ``budget_s``; the caller keeps the spans and tries again later. With ``keep_connection``
        set, the connection stays open for the next write unless someone waits for the file.
        """
        keep = self.keep_connection
        self._check_writable()
        if not spans:
            return 0
        if self._claim is not None:
            self.claim()
        unique = one_per_span(spans)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        budget = self.write_budget_s if budget_s is None else budget_s
        trusted = self._migrated_file is not None
        try:
            self._insert(unique, budget, keep)
        except duckdb.CatalogException:
            if not trusted:
                raise
            # A file deleted and made again under the same inode: check its schema and write again.
            self._migrated_file = None
            self._insert(unique, budget, keep)
        except duckdb.Error as exc:
            self._migrated_file = None  # check the schema again next time
            # A broken file (left by a full disk) would fail every write forever: start a new one.
            if not is_broken_file_error(exc) or not set_aside_if_broken(self.path, budget):
                raise
            self._insert(unique, budget, keep)
        return len(spans)

    def _insert(self, unique: list[SpanRecord], budget: float, keep: bool = False) -> None:
        now = utc_now_ms()
        # One DuckDB thread: a batch of spans is small work, and a second thread on these two cores
        # cost more CPU than it saved (~40% of the insert) while the agent's turns want the cores.
        with open_duckdb(self.path, read_only=False, budget_s=budget, stats=self.wait_stats,
                         threads=WRITER_THREADS, keep=keep) as con:
            self._migrate(con)
            con.execute("BEGIN TRANSACTION")
            try:
                for chunk in iter_chunks(unique, INSERT_CHUNK):
                    # A dict of object arrays is scanned natively: ~20x faster than a VALUES
                    # list of 42 x 500 bound parameters, and far faster than executemany.
                    batch = {
                        column: numpy.array(_column_values(chunk, column, attr, kind, now), dtype=object)
                        for column, attr, kind in COLUMNS
                    }
                    con.register("span_batch", batch)
                    try:
                        con.execute(_INSERT_SQL)
                    finally:
                        _quietly(con.unregister, "span_batch")
                con.execute("COMMIT")
            except BaseException:
                _quietly(con.execute, "ROLLBACK")
                raise

    # -- retention -----------------------------------------------------------------------------

    def file_size(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def prune(
        self,
        keep_days: float | None = None,
        keep_mb: float | None = None,
        *,
        compact: bool = True,
        budget_s: float = 10.0,
        now: datetime | None = None,
    ) -> PruneResult:
        """Delete whole traces, oldest first, until both limits hold; then shrink the file.

        With no limits given, the store's ``retention`` settings apply; ``0`` means no limit on that
        axis and a negative limit raises ``ValueError``. ``compact`` rewrites the
        file so it actually shrinks (DuckDB only reuses freed blocks; it does not give them back).
        """
        self._check_writable()
        if keep_days is None and keep_mb is None:
            keep_days, keep_mb = self.retention.keep_days, self.retention.keep_mb
        else:
            keep_days, keep_mb = retention_limit(keep_days, "keep_days"), retention_limit(keep_mb, "keep_mb")
        before = self.file_size()
        if (keep_days is None and keep_mb is None) or not self.path.exists():
            return PruneResult(bytes_before=before, bytes_after=before)
        traces = spans = 0
        compacted = False
        try:
            gate = gated(self.path, exclusive=True, budget_s=budget_s) if compact else nullcontext()
            with gate:
                # Passes repeat because the size estimate is only an estimate; three is plenty.
                for _ in range(3):
                    t, s, size_ok = self._prune_pass(keep_days, keep_mb, compact, budget_s, now)
                    traces, spans = traces + t, spans + s
                    compacted = compacted or (compact and t > 0)
                    keep_days = None  # age limit is exact; only the size limit may need another pass
                    if size_ok or t == 0:
                        break
        except StoreBusy:
            return PruneResult(traces, spans, before, self.file_size(), compacted, busy=True)
        return PruneResult(traces, spans, before, self.file_size(), compacted)

    def _prune_pass(
        self,
        keep_days: float | None,
        keep_mb: float | None,
        compact: bool,
        budget_s: float,
        now: datetime | None,
    ) -> tuple[int, int, bool]:
        doomed: set[str] = set()
        tmp = self.path.with_name(self.path.name + ".compact")
        with open_duckdb(
            self.path, read_only=False, budget_s=budget_s, stats=self.wait_stats, hold_gate=not compact
        ) as con:
            self._migrate(con)
            per_trace = con.execute(
                'SELECT "traceId", min("startedAt") AS s, '
                "sum(256 + " + " + ".join(
                    f'coalesce(strlen(CAST("{c}" AS VARCHAR)), 0)' for c, _, k in COLUMNS if k == "json"
                ) + f') FROM {SPANS_TABLE} GROUP BY 1 ORDER BY s DESC, 1'
            ).fetchall()
            cutoff = age_cutoff(now or utc_now_ms(), keep_days) if keep_days is not None else None
            if cutoff is not None:
                doomed |= {tid for tid, started, _ in per_trace if started < _ts_param(cutoff)}
            if keep_mb is not None:
                doomed |= self._over_size(con, per_trace, keep_mb * 1024 * 1024)
            if doomed:
                spans = self._delete_traces(con, sorted(doomed))
            else:
                spans = 0
            con.execute("CHECKPOINT")
            if compact and doomed:
                _copy_into(con, tmp)
        if compact and doomed:
            # Still under the exclusive sidecar lock: nobody can open the old file in between.
            os.replace(tmp, self.path)
        size_ok = keep_mb is None or self.file_size() <= keep_mb * 1024 * 1024
        return len(doomed), spans, size_ok

    def _over_size(
        self, con: duckdb.DuckDBPyConnection, per_trace: list[tuple[Any, ...]], target: float
    ) -> set[str]:
        raw_total = sum(int(r[2]) for r in per_trace) or 1
        size = self.file_size()
        if size <= target:
            return set()
        info = con.execute("PRAGMA database_size").fetchone()
        block_size, total_blocks, used_blocks = int(info[2]), int(info[3]), int(info[4])  # type: ignore[index]
        # A file holding one tiny trace already uses about five blocks (catalog, one segment per
        # column group); that floor is paid whatever is kept, so it is not part of the ratio.
        floor = _FLOOR_BLOCKS * block_size
        # Used blocks, not file size, give the bytes per raw byte: freed blocks would inflate it.
        ratio = max(block_size * used_blocks - floor, block_size) / raw_total
        headers = max(size - block_size * total_blocks, 0)
        budget = max(target * 0.9 - headers - floor, 0)
        kept = 0.0
        doomed: set[str] = set()
        for trace_id, _, raw in per_trace:  # newest first
            kept += int(raw) * ratio
            if kept > budget:
                doomed.add(trace_id)
        return doomed

    def forget(
        self, thread_ids: Sequence[str], resource_ids: Sequence[str], *, dry_run: bool = False,
        budget_s: float = 10.0, then: Callable[[Any], None] | None = None,
    ) -> tuple[int, int]:
        """Delete (``dry_run``: count) every trace one of whose spans names one of the threads or
        resources: the whole trace, since its other spans carry the same conversation. Returns
        (traces, spans). Raises ``StoreBusy`` when the file stays locked for ``budget_s``. ``then``: called
        with the connection after the deletes, while the file is still held (the check after a forget takes
        what was left then: ``spans_naming``); not called when there is no file or no spans table."""
        if not dry_run:
            self._check_writable()
        if not self.path.exists() or not (thread_ids or resource_ids):
            return 0, 0
        opener = self._read_connection() if dry_run else open_duckdb(
            self.path, read_only=False, budget_s=budget_s, stats=self.wait_stats)
        with opener as con:
            if not self._table_exists(con):
                return 0, 0
            counted = self._forget_in(con, thread_ids, resource_ids, dry_run)
            if then is not None and not dry_run:
                then(con)
        return counted

    def _forget_in(self, con: Any, thread_ids: Sequence[str], resource_ids: Sequence[str],
                   dry_run: bool) -> tuple[int, int]:
        doomed: set[str] = set()
        for column, values in (("threadId", list(thread_ids)), ("resourceId", list(resource_ids))):
            for chunk in iter_chunks(values, 1000):
                marks = ", ".join("?" for _ in chunk)
                doomed.update(r[0] for r in con.execute(
                    f'SELECT DISTINCT "traceId" FROM {SPANS_TABLE} WHERE "{column}" IN ({marks})', list(chunk)
                ).fetchall())
        if not doomed:
            return 0, 0
        if dry_run:
            spans = 0
            for chunk in iter_chunks(sorted(doomed), 1000):
                marks = ", ".join("?" for _ in chunk)
                row = con.execute(f'SELECT count(*) FROM {SPANS_TABLE} WHERE "traceId" IN ({marks})',
                                  list(chunk)).fetchone()
                spans += int(row[0]) if row else 0
            return len(doomed), spans
        spans = self._delete_traces(con, sorted(doomed))
        con.execute("CHECKPOINT")
        return len(doomed), spans

    def spans_naming(self, values: Sequence[str], con: Any = None) -> set[tuple[str, str]]:
        """(traceId, spanId) of the spans naming one of ``values``: a text or JSON column equal to it or holding it
        as a JSON string (``"value"``), as the check after a forget reads the database's tables. Reads only
        (``con``: one already open, else a read-only one); no file or no spans table: none."""
        if not values:
            return set()
        if con is None:
            if not self.path.exists():
                return set()
            with self._read_connection() as own:
                return self.spans_naming(values, own)
        if not self._table_exists(con):
            return set()
        columns = [name for name, _, kind in COLUMNS if kind in ("text", "json")]
        per = max(1, 200 // len(columns))
        found: set[tuple[str, str]] = set()
        for chunk in iter_chunks(list(values), per):
            tests, params = [], []
            for column in columns:
                for value in chunk:
                    tests.append(f'(CAST("{column}" AS VARCHAR) = ? OR contains(CAST("{column}" AS VARCHAR), ?))')
                    params += [value, json.dumps(value, ensure_ascii=False)]
            found.update((str(t), str(s)) for t, s in con.execute(
                f'SELECT "traceId", "spanId" FROM {SPANS_TABLE} WHERE {" OR ".join(tests)}', params).fetchall())
        return found

    def compact(self, budget_s: float = 10.0) -> int:
        """Rewrite the file without its free blocks (DuckDB reuses them but never gives them back, and
        they still hold deleted spans' bytes); returns the bytes given back."""
        self._check_writable()
        before = self.file_size()
        if not self.path.exists():
            return 0
        tmp = self.path.with_name(self.path.name + ".compact")
        with gated(self.path, exclusive=True, budget_s=budget_s):
            with open_duckdb(self.path, read_only=False, budget_s=budget_s, stats=self.wait_stats,
                             hold_gate=False) as con:
                con.execute("CHECKPOINT")
                _copy_into(con, tmp)
            os.replace(tmp, self.path)
        return max(before - self.file_size(), 0)

    def _delete_traces(self, con: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> int:
        deleted = 0
        con.execute("BEGIN TRANSACTION")
        try:
            for chunk in iter_chunks(trace_ids, 1000):
                marks = ", ".join("?" for _ in chunk)
                row = con.execute(
                    f'DELETE FROM {SPANS_TABLE} WHERE "traceId" IN ({marks})', list(chunk)
                ).fetchone()
                deleted += int(row[0]) if row else 0
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return deleted


# The name the composite store (core/storage/__init__.py) imports.
ObservabilityStore = DuckDBObservabilityStore


def _copy_into(con: duckdb.DuckDBPyConnection, tmp: Path) -> None:
    """Copy the open database into a new file ``tmp`` (which then holds no free blocks)."""
    for stale in (tmp, tmp.with_name(tmp.name + ".wal")):
        stale.unlink(missing_ok=True)
    db_name = con.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
    con.execute(f"ATTACH '{_sql_str(tmp)}' AS compacted")
    con.execute(f'COPY FROM DATABASE "{db_name}" TO compacted')
    con.execute("DETACH compacted")


def _sql_str(path: Path) -> str:
    return str(path).replace("'", "''")


def prune_main(argv: Sequence[str] | None = None) -> int:
    """``memory-studio traces prune [--db PATH] [--keep-days N] [--keep-mb M] [--no-compact]``."""
    parser = argparse.ArgumentParser(prog="memory-studio traces prune")
    parser.add_argument("--db", type=Path, default=DEFAULT_OBSERVABILITY_PATH)
    parser.add_argument("--keep-days", type=float, default=None)
    parser.add_argument("--keep-mb", type=float, default=None)
    parser.add_argument("--no-compact", action="store_true", help="delete only; do not shrink")
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.keep_days is None and args.keep_mb is None:
        parser.print_usage(sys.stderr)
        print("give --keep-days and/or --keep-mb", file=sys.stderr)
        return 2
    try:
        keep_days = retention_limit(args.keep_days, "--keep-days")
        keep_mb = retention_limit(args.keep_mb, "--keep-mb")
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if keep_days is None and keep_mb is None:
        print(f"{args.db}: no limit given (0 means no limit); nothing pruned")
        return 0
    store = DuckDBObservabilityStore(args.db)
    try:
        result = store.prune(keep_days, keep_mb, compact=not args.no_compact)
    except duckdb.IOException as exc:
        why = str(exc).splitlines()[0]
        if is_broken_file_error(exc):
            print(f"{args.db} is not a readable trace file ({why}); nothing was pruned. It holds traces only (no "
                  f"conversation): the next traced turn moves it aside as {args.db.name}.broken-<time> and starts a "
                  "new one, or delete it.", file=sys.stderr)
        else:
            print(f"{args.db} could not be opened for writing ({why}); nothing was pruned. Fix its permissions "
                  "and try again.", file=sys.stderr)
        return 1
    if result.busy:
        print(f"{args.db}: busy (another process holds it); try again", file=sys.stderr)
        return 1
    print(
        f"{args.db}: deleted {result.traces_deleted} traces ({result.spans_deleted} spans); "
        f"{result.bytes_before / 1e6:.1f} MB -> {result.bytes_after / 1e6:.1f} MB"
    )
    return 0


__all__ = [
    "DEFAULT_OBSERVABILITY_PATH",
    "MIGRATIONS",
    "DuckDBObservabilityStore",
    "Migration",
    "ObservabilityStore",
    "RetentionSettings",
    "PruneResult",
    "ReadCount",
    "ReadResult",
    "SpanRecord",
    "SpanType",
    "StoreBusy",
    "TraceFilters",
    "TraceSummary",
    "age_cutoff",
    "prune_main",
    "retention_limit",
]
