"""The read API the Studio uses, shared by the DuckDB store and the Mastra libSQL reader.

The SQL is written once, in the subset both DuckDB and SQLite understand (quoted camelCase
identifiers, ``?`` parameters, ``instr``); each backend supplies how to connect, how a jsonb column
is selected, and how a timestamp parameter is spelled. Aggregates that need JSON (token usage) are
computed in Python over the page's traces only, so they cost the same on both backends.
"""

from __future__ import annotations

import json
import logging
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from datetime import datetime
from typing import Any, Literal, NamedTuple

from core.traces.live import running_writer
from core.traces.locking import StoreBusy, StoreMissing
from core.traces.spans import (
    COLUMNS,
    SPANS_TABLE,
    ModelUsage,
    ReadCount,
    ReadResult,
    SpanRecord,
    TokenTotals,
    TraceFilters,
    TraceSummary,
    UsageByModel,
    input_words,
    order_for_tree,
    root_base_urls,
)

# Readers wait at most this long for a writer before answering from their cache.
DEFAULT_READ_BUDGET_S = 0.5
_CACHE_SIZE = 64
log = logging.getLogger(__name__)


class ThreadTraceKey(NamedTuple):
    """A run of a thread, as ``thread_trace_keys`` lists it: the keyset of its paging."""

    thread_id: str
    started_at: object  # the root's ``startedAt`` as the backend returns it (handed back as a parameter)
    trace_id: str


class SpanReader(ABC):
    """``list_traces`` / ``get_trace`` / ``count_traces`` over a ``mastra_ai_spans`` table, and the
    batched reads of an export (``thread_trace_keys``, ``get_traces``)."""

    def __init__(self, read_budget_s: float = DEFAULT_READ_BUDGET_S) -> None:
        self.read_budget_s = read_budget_s
        self._cache: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._cache_lock = threading.Lock()  # Studio workers read from several threads
        self._shared = threading.local()  # ``reading``: this thread's one connection (or why there is none)

    # -- backend hooks -------------------------------------------------------------------------

    @abstractmethod
    def _read_connection(self) -> AbstractContextManager[Any]:
        """A connection for one query; raises StoreBusy / StoreMissing."""

    def _statements(self) -> AbstractContextManager[Any]:
        """Around one read's statements. A backend whose statements, not only its open, can meet another
        process's lock (a libSQL file in a rollback journal mode) raises StoreBusy from here, so a read
        inside a ``reading`` block answers as a busy read, not as a failed block."""
        return nullcontext()

    @abstractmethod
    def _ts_param(self, value: datetime) -> object:
        """How a timestamp is compared against the ``startedAt`` column."""

    def _select_column(self, column: str, kind: str, alias: str = "") -> str:
        return f'{alias + "." if alias else ""}"{column}"'

    def _error_present(self, alias: str) -> str:
        return f'{alias}."error" IS NOT NULL'

    def _table_exists(self, con: Any) -> bool:
        return True

    def _writer_alive(self, writer: str) -> bool | None:
        """Whether the process writing running rows as ``writer`` lives (``core.traces.live``); None:
        cannot be told here, so such a span shows as running."""
        return None

    def _gone(self, spans: Sequence[SpanRecord]) -> frozenset[str]:
        """The ids of ``spans`` that are running rows of a writer known to be gone: never finished."""
        alive: dict[str, bool | None] = {}
        gone: set[str] = set()
        for span in spans:
            writer = running_writer(span.metadata) if span.running else None
            if writer is None:
                continue
            if writer not in alive:
                alive[writer] = self._writer_alive(writer)
            if alive[writer] is False:
                gone.add(span.span_id)
        return frozenset(gone)

    def _contains(self, haystack: str, needle: str) -> str:
        """SQL: ``needle`` occurs in ``haystack`` (Postgres has no ``instr``)."""
        return f"instr({haystack}, {needle}) > 0"

    # -- public API ----------------------------------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[None]:
        """The reads made in this block, on this thread, share one connection: one open of the file
        instead of one per read (for DuckDB ~12–20 ms of CPU each, the better part of a small read).

        Safe with writers in other processes: the file is held while the block's reads run, as it is
        during one read, and for less time than separate opens would hold it, since each open holds
        the file too. A busy or missing store answers every read of the block as its own open would
        have (the last good answer, flagged), after one wait, not one wait per read. Nested blocks
        share the outer one's connection."""
        if getattr(self._shared, "depth", 0):
            self._shared.depth += 1
            try:
                yield
            finally:
                self._shared.depth -= 1
            return
        with ExitStack() as stack:
            try:
                self._shared.con = stack.enter_context(self._read_connection())
            except (StoreBusy, StoreMissing) as exc:
                self._shared.con, self._shared.failed = None, exc
            self._shared.depth = 1
            try:
                yield
            finally:
                self._shared.con = self._shared.failed = None
                self._shared.depth = 0

    def list_traces(
        self, limit: int = 50, offset: int = 0, filters: TraceFilters | None = None
    ) -> ReadResult[TraceSummary]:
        filters = filters or TraceFilters()
        key = ("list", limit, offset, filters)
        return self._cached_read(key, lambda con: self._list_traces(con, limit, offset, filters))

    def get_trace(self, trace_id: str) -> ReadResult[SpanRecord]:
        """All spans of a trace in tree order (depth-first, siblings by start time); ``unfinished``
        names those that never ended because their writer is gone (asked at each call, cached or not)."""
        spans: ReadResult[SpanRecord] = self._cached_read(("trace", trace_id), lambda con: self._get_trace(con, trace_id))
        spans.unfinished = self._gone(spans)
        return spans

    def thread_trace_keys(
        self, thread_ids: Sequence[str], *, limit: int, after: ThreadTraceKey | None = None
    ) -> ReadResult[ThreadTraceKey]:
        """One keyset page of the runs of these threads: a trace is a thread's run when one of its
        spans names the thread (``TraceFilters(thread_id=...)``). Ordered by thread id, then as
        ``list_traces`` orders a thread's runs (newest root first, then trace id); a trace with two
        roots is listed once per root. ``after``: the last key of the previous page. Not cached."""
        return self._read(lambda con: self._thread_trace_keys(con, list(thread_ids), limit, after))

    def get_traces(self, trace_ids: Sequence[str]) -> ReadResult[SpanRecord]:
        """The spans of many traces in one query: each trace in tree order (as ``get_trace`` gives
        it), the traces in the order asked, an id asked twice given once. Not cached: an export
        reads each batch once."""
        return self._read(lambda con: self._get_traces(con, list(dict.fromkeys(trace_ids))))

    def usage_by_model(self, filters: TraceFilters | None = None) -> ReadResult[ModelUsage]:
        """Token usage per model over every trace the filters match (a thread's whole history)."""
        filters = filters or TraceFilters()
        return self._cached_read(("usage", filters), lambda con: self._usage_by_model(con, filters))

    def count_traces(self, filters: TraceFilters | None = None) -> ReadCount:
        filters = filters or TraceFilters()
        result = self._cached_read(("count", filters), lambda con: [self._count(con, filters)])
        value = result[0] if result else 0
        return ReadCount(
            value,
            busy=result.busy,
            stale=result.stale,
            missing=result.missing,
            waited_s=result.waited_s,
        )

    # -- implementation ------------------------------------------------------------------------

    def _read(self, query: Any) -> ReadResult[Any]:
        """A read whose answer is not kept: a busy store answers empty (``busy``)."""
        return self._cached_read(None, query)

    def _connection(self) -> AbstractContextManager[Any]:
        """This thread's connection of a ``reading`` block, else one for this read alone."""
        failed = getattr(self._shared, "failed", None)
        if failed is not None:
            raise failed
        con = getattr(self._shared, "con", None)
        return nullcontext(con) if con is not None else self._read_connection()

    def _cached_read(self, key: tuple[Any, ...] | None, query: Any) -> ReadResult[Any]:
        try:
            with self._connection() as con, self._statements():
                if not self._table_exists(con):
                    return ReadResult(missing=True)
                rows = list(query(con))
        except StoreMissing:
            return ReadResult(missing=True)
        except StoreBusy as busy:
            if getattr(self._shared, "depth", 0):
                self._shared.failed = busy  # the block's other reads answer at once: one wait, not one per read
            with self._cache_lock:
                cached = self._cache.get(key) if key is not None else None
            # The last good answer beats an empty screen while the agent is writing.
            log.info("trace read answered from %s: %s", "the last good answer" if cached is not None else "nothing",
                     busy)
            return ReadResult(
                cached or [], busy=True, stale=cached is not None, waited_s=busy.waited_s
            )
        if key is None:
            return ReadResult(rows)
        with self._cache_lock:
            self._cache[key] = rows
            self._cache.move_to_end(key)
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return ReadResult(rows)

    def _select_list(self, alias: str) -> str:
        return ", ".join(self._select_column(c, k, alias) for c, _, k in COLUMNS)

    def _where(self, filters: TraceFilters) -> tuple[str, list[object]]:
        clauses = ['r."parentSpanId" IS NULL']
        params: list[object] = []
        table = SPANS_TABLE
        if filters.resource_id is not None:
            clauses.append(
                f'(r."resourceId" = ? OR r."traceId" IN '
                f'(SELECT "traceId" FROM {table} WHERE "resourceId" = ?))'
            )
            params += [filters.resource_id, filters.resource_id]
        if filters.thread_id is not None:
            clauses.append(
                f'(r."threadId" = ? OR r."traceId" IN '
                f'(SELECT "traceId" FROM {table} WHERE "threadId" = ?))'
            )
            params += [filters.thread_id, filters.thread_id]
        if filters.name:
            name, entity = 'lower(r."name")', 'lower(coalesce(r."entityName", \'\'))'
            clauses.append(f'({self._contains(name, "lower(?)")} OR {self._contains(entity, "lower(?)")})')
            params += [filters.name, filters.name]
        if filters.since is not None:
            clauses.append('r."startedAt" >= ?')
            params.append(self._ts_param(filters.since))
        errored = (
            f'(r."traceId" IN (SELECT e."traceId" FROM {table} e WHERE {self._error_present("e")}))'
        )
        # A point event (isEvent; Mastra leaves endedAt null) is finished, never running.
        ended = '(r."endedAt" IS NOT NULL OR coalesce(r."isEvent", FALSE))'
        if filters.status == "error":
            clauses.append(errored)
        elif filters.status == "ok":
            clauses.append(f"{ended} AND NOT {errored}")
        elif filters.status == "running":
            clauses.append(f"NOT {ended} AND NOT {errored}")
        return " AND ".join(clauses), params

    def _count(self, con: Any, filters: TraceFilters) -> int:
        where, params = self._where(filters)
        row = con.execute(f"SELECT count(*) FROM {SPANS_TABLE} r WHERE {where}", tuple(params)).fetchone()
        return int(row[0]) if row else 0

    def _list_traces(
        self, con: Any, limit: int, offset: int, filters: TraceFilters
    ) -> list[TraceSummary]:
        where, params = self._where(filters)
        sql = (
            f"SELECT {self._select_list('r')} FROM {SPANS_TABLE} r WHERE {where} "
            'ORDER BY r."startedAt" DESC, r."traceId" LIMIT ? OFFSET ?'
        )
        roots = [SpanRecord.from_row(row) for row in con.execute(sql, (*params, limit, offset)).fetchall()]
        if not roots:
            return []
        ids = [r.trace_id for r in roots]
        marks = ", ".join("?" for _ in ids)
        counts: dict[str, tuple[int, int, str | None, str | None]] = {}
        agg_sql = (
            f'SELECT "traceId", count(*), '
            f'sum(CASE WHEN {self._error_present(SPANS_TABLE)} THEN 1 ELSE 0 END), '
            f'max("threadId"), max("resourceId") '
            f'FROM {SPANS_TABLE} WHERE "traceId" IN ({marks}) GROUP BY "traceId"'
        )
        for trace_id, n, errors, thread_id, resource_id in con.execute(agg_sql, tuple(ids)).fetchall():
            counts[trace_id] = (int(n), int(errors or 0), thread_id, resource_id)
        tokens: dict[str, TokenTotals] = {t: TokenTotals() for t in ids}
        by_model: dict[str, UsageByModel] = {t: UsageByModel() for t in ids}
        urls = {r.trace_id: root_base_urls(r.attributes) for r in roots}
        usage_sql = (
            f'SELECT "traceId", {self._select_column("attributes", "json")} FROM {SPANS_TABLE} '
            f"WHERE \"spanType\" = 'model_generation' AND \"traceId\" IN ({marks})"
        )
        for trace_id, attributes in con.execute(usage_sql, tuple(ids)).fetchall():
            attrs = _loads(attributes)
            tokens[trace_id].add_usage(attrs)
            by_model[trace_id].add(attrs, urls.get(trace_id))
        gone = self._gone(roots)
        return [_summary(root, counts.get(root.trace_id), tokens[root.trace_id], by_model[root.trace_id].result(),
                         unfinished=root.span_id in gone)
                for root in roots]

    def _usage_by_model(self, con: Any, filters: TraceFilters) -> list[ModelUsage]:
        where, params = self._where(filters)
        roots_sql = (f'SELECT r."traceId", {self._select_column("attributes", "json", "r")} '
                     f"FROM {SPANS_TABLE} r WHERE {where}")
        urls = {trace_id: root_base_urls(_loads(attrs))
                for trace_id, attrs in con.execute(roots_sql, tuple(params)).fetchall()}
        usage_sql = (
            f'SELECT s."traceId", {self._select_column("attributes", "json", "s")} FROM {SPANS_TABLE} s '
            f"WHERE s.\"spanType\" = 'model_generation' AND s.\"traceId\" IN "
            f'(SELECT r."traceId" FROM {SPANS_TABLE} r WHERE {where})'
        )
        totals = UsageByModel()
        for trace_id, attributes in con.execute(usage_sql, tuple(params)).fetchall():
            totals.add(_loads(attributes), urls.get(trace_id))
        return list(totals.result())

    def _get_trace(self, con: Any, trace_id: str) -> list[SpanRecord]:
        sql = f'SELECT {self._select_list("s")} FROM {SPANS_TABLE} s WHERE s."traceId" = ?'
        return order_for_tree(SpanRecord.from_row(row) for row in con.execute(sql, (trace_id,)).fetchall())

    def _get_traces(self, con: Any, trace_ids: list[str]) -> list[SpanRecord]:
        if not trace_ids:
            return []
        marks = ", ".join("?" for _ in trace_ids)
        sql = f'SELECT {self._select_list("s")} FROM {SPANS_TABLE} s WHERE s."traceId" IN ({marks})'
        by_trace: dict[str, list[SpanRecord]] = {t: [] for t in trace_ids}
        for row in con.execute(sql, tuple(trace_ids)).fetchall():
            span = SpanRecord.from_row(row)
            by_trace.setdefault(span.trace_id, []).append(span)
        return [span for spans in by_trace.values() for span in order_for_tree(spans)]

    def _thread_trace_keys(
        self, con: Any, thread_ids: list[str], limit: int, after: ThreadTraceKey | None
    ) -> list[ThreadTraceKey]:
        if not thread_ids:
            return []
        marks = ", ".join("?" for _ in thread_ids)
        params: list[object] = list(thread_ids)
        # The thread of a run is any of its spans' (``_where``: the root's own threadId is one of them).
        where = f'r."parentSpanId" IS NULL AND m."threadId" IN ({marks})'
        if after is not None:
            # The raw startedAt handed back: equal to the stored value on every backend, however it is stored.
            where += (' AND (m."threadId" > ? OR (m."threadId" = ? AND (r."startedAt" < ? '
                      'OR (r."startedAt" = ? AND r."traceId" > ?))))')
            params += [after.thread_id, after.thread_id, after.started_at, after.started_at, after.trace_id]
        sql = (
            f'SELECT m."threadId", r."startedAt", r."traceId" FROM {SPANS_TABLE} r '
            f'JOIN {SPANS_TABLE} m ON m."traceId" = r."traceId" WHERE {where} '
            'GROUP BY m."threadId", r."startedAt", r."traceId" '
            'ORDER BY m."threadId", r."startedAt" DESC, r."traceId" LIMIT ?'
        )
        return [ThreadTraceKey(str(t), s, str(i)) for t, s, i in con.execute(sql, (*params, limit)).fetchall()]


def _loads(value: object) -> object:
    if isinstance(value, (str, bytes, bytearray)):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _summary(
    root: SpanRecord,
    agg: tuple[int, int, str | None, str | None] | None,
    tokens: TokenTotals,
    models: tuple[ModelUsage, ...] = (),
    *,
    unfinished: bool = False,
) -> TraceSummary:
    span_count, error_count, thread_id, resource_id = agg or (1, 0, None, None)
    has_error = error_count > 0 or root.error is not None
    status: Literal["ok", "error", "running", "unfinished"] = (
        "error" if has_error else "unfinished" if unfinished else "running" if root.running else "ok")
    return TraceSummary(
        trace_id=root.trace_id,
        name=root.name,
        span_type=root.span_type,
        entity_name=root.entity_name,
        started_at=root.started_at,
        ended_at=root.ended_at,
        duration_ms=root.duration_ms,
        status=status,
        span_count=span_count,
        error_count=error_count,
        input_tokens=tokens.input_tokens,
        output_tokens=tokens.output_tokens,
        total_tokens=tokens.total_tokens,
        thread_id=root.thread_id or thread_id,
        resource_id=root.resource_id or resource_id,
        models=models,
        failed_itself=root.error is not None,
        input_text=input_words(root.input),
    )


def iter_chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
