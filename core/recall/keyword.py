"""Keyword search: BM25 over the FTS5 table, and draining the trigger-fed change queue into it.

Cost of a search is about one microsecond per *matching* row: FTS5 computes bm25() for every row the
MATCH expression selects before it can sort them, and a query word found in most messages ("like",
"time", a speaker's name) selects most of the table. ``TermStats`` therefore drops query terms found
in more than ``COMMON_SHARE`` of the rows. BM25 gives such terms almost no weight anyway (FTS5's IDF
is ``ln((N - n + 0.5) / (n + 0.5))``, clamped to ~0 above half the rows), so rankings barely move while
the rows to score shrink by an order of magnitude (bench/recall_speed.py).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Collection

import sqlalchemy as sa

from core.recall.schema import (
    DOCS_TABLE,
    FTS_TABLE,
    FTS_WATERMARK,
    QUEUE_TABLE,
    STATE_TABLE,
    delete_docs,
    doc_state,
    keyword_rows_ready,
    upsert_docs,
)
from core.recall import passages
from core.recall.keyword_memory import KeywordMemory
from core.recall.types import DocRow, Ranked
from core.recall.text import keyword_terms
from core.storage import driver_sql

DRAIN_BATCH = 2000
# BM25 weight of the previous-message column against the message's own (1.0); tuned on LoCoMo public.
CONTEXT_WEIGHT = 0.5
# Query terms found in more rows than this share are dropped (unless every term is that common).
# LoCoMo public split, keyword / hybrid recall@10: all terms .710 / .717; share .3 .710 / .717;
# .2 .708 / .717; .1 .702 / .710. Synthetic 10k messages (bench/recall_speed.py), keyword p50:
# all terms 8.8 ms, .5 3.1 ms, .3 2.0 ms, .2 1.4 ms, .1 0.9 ms. Below PRUNE_MIN_DOCS rows every term
# is kept (scoring is cheap there, and document frequencies are noisy). Frequencies are counted over
# the whole table, like FTS5's own IDF: in a database shared by many resources, a word common
# elsewhere is dropped for a small resource too (its vectors still find such messages).
COMMON_SHARE = 0.2
PRUNE_MIN_DOCS = 200
STATS_GROWTH = 0.1  # recount the rows (and forget frequencies) once the index grew by this share
STATS_MAX_AGE_S = 60.0  # ... or after this long, so deletions are noticed too
STATS_MAX_TERMS = 50_000
STATS_CHECK_S = 1.0  # how often a search looks at the index size at all


# A keyword search's hit: (message, thread, resource, score = -bm25: higher is better, unbounded,
# comparable only within one query). The candidate type of every ranking, so the fusion takes the
# keyword list as it comes.
KeywordHit = Ranked


class TermStats:
    """Document frequencies of query terms in one database's keyword index, cached between searches.

    Counted per term with an FTS5 count (a posting-list scan, no scoring), once per term until the
    index has grown by ``STATS_GROWTH`` or ``STATS_MAX_AGE_S`` has passed. Staleness only decides
    whether a very common word is searched, never which messages exist. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._df: OrderedDict[str, int] = OrderedDict()
        self.rows = 0
        self._mark = -1
        self._at = 0.0
        self._checked = 0.0

    def _refresh(self, conn: sa.Connection) -> None:
        now = time.monotonic()
        with self._lock:
            if self._mark >= 0 and now - self._checked < STATS_CHECK_S:
                return
            self._checked = now
        mark = self._mark_of(conn)
        with self._lock:
            fresh = (
                self._mark >= 0 and self._mark <= mark <= self._mark * (1 + STATS_GROWTH) + 10
                and now - self._at < STATS_MAX_AGE_S
            )
            if fresh:
                return
        rows = self._rows_of(conn)
        with self._lock:
            self._df.clear()
            self.rows, self._mark, self._at = rows, mark, now

    # -- how the index is counted (Postgres: ``pg_keywords.PgTermStats``) -----------------------
    def _mark_of(self, conn: sa.Connection) -> int:
        """A number that grows with the index (its newest document id; Postgres's docs table)."""
        return int(conn.exec_driver_sql(f"SELECT coalesce(max(doc_id), 0) FROM {DOCS_TABLE}").scalar() or 0)

    def _rows_of(self, conn: sa.Connection) -> int:
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {DOCS_TABLE}").scalar() or 0)

    def _frequency_of(self, conn: sa.Connection, term: str) -> int:
        """Documents matching one FTS5-quoted term."""
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ?", (term,)).scalar() or 0)

    def frequencies(self, conn: sa.Connection, terms: list[str]) -> list[int]:
        out: list[int] = []
        for term in terms:
            with self._lock:
                df = self._df.get(term)
                if df is not None:
                    self._df.move_to_end(term)
            if df is None:
                df = self._frequency_of(conn, term)
                with self._lock:
                    self._df[term] = df
                    while len(self._df) > STATS_MAX_TERMS:
                        self._df.popitem(last=False)
            out.append(df)
        return out

    def select(self, conn: sa.Connection, terms: list[str], share: float | None = None) -> list[str]:
        """The terms worth matching: all of them in a small index, else those in at most ``share``
        (default ``COMMON_SHARE``) of the rows; if every term is that common, the rarest one."""
        share = COMMON_SHARE if share is None else share
        if len(terms) < 2 or share >= 1.0:
            return terms
        self._refresh(conn)
        if self.rows < PRUNE_MIN_DOCS:
            return terms
        dfs = self.frequencies(conn, terms)
        cap = share * self.rows
        kept = [t for t, df in zip(terms, dfs) if df <= cap]
        if kept:
            return kept
        return [terms[min(range(len(terms)), key=dfs.__getitem__)]]

    def clear(self) -> None:
        with self._lock:
            self._df.clear()
            self._mark = -1


class MemoryTermStats(TermStats):
    """``TermStats`` whose frequencies come from the in-process keyword index when it is up to date
    (the same counts as FTS5's, without a statement per new term)."""

    def __init__(self, memory: KeywordMemory) -> None:
        super().__init__()
        self._memory = memory

    def _mark_of(self, conn: sa.Connection) -> int:
        """The newest keyword row's rowid (FTS5's per-row sizes: a doc is its FTS5 row, ``0031``)."""
        return int(conn.exec_driver_sql(f"SELECT coalesce(max(id), 0) FROM {FTS_TABLE}_docsize").scalar() or 0)

    def _rows_of(self, conn: sa.Connection) -> int:
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {FTS_TABLE}_docsize").scalar() or 0)

    def _frequency_of(self, conn: sa.Connection, term: str) -> int:
        known = self._memory.frequency(conn, term)
        return known if known is not None else super()._frequency_of(conn, term)


def has_pending(conn: sa.Connection) -> bool:
    """Whether any message change waits for the keyword index: one statement, run before every search."""
    # The driver's cursor (``driver_sql``): SQLAlchemy's result machinery cost more than the statement.
    return bool(driver_sql.scalar(conn, _PENDING_SQL, (FTS_WATERMARK,)))


_PENDING_SQL = (
    f"SELECT EXISTS (SELECT 1 FROM {QUEUE_TABLE}) OR EXISTS (SELECT 1 FROM mastra_messages WHERE rowid > "
    f"coalesce((SELECT value FROM {STATE_TABLE} WHERE key = ?), 0))"
)


def pending_changes(conn: sa.Connection, limit: int = 20_000) -> tuple[set[str], set[str]]:
    """(messages whose newest queued change is a delete: still in the index, gone from the store;
    messages whose newest queued change is an update: their keyword doc may hold an older text).

    Read-only, so a search can leave them out without applying the queue (only writers apply it).
    """
    rows = conn.exec_driver_sql(
        f"SELECT message_id, op FROM {QUEUE_TABLE} ORDER BY seq LIMIT ?", (limit,)
    ).all()
    last: dict[str, str] = {}
    for mid, op in rows:
        last[mid] = op
    return {mid for mid, op in last.items() if op == "delete"}, {mid for mid, op in last.items() if op == "upsert"}


# Part 1 is one row: how many rows were inserted since the watermark (up to the limit), the newest
# rowid, and their ids as one JSON array (a save's hundred rows, fetched one tuple each, cost more
# than the statement).
_DRAIN_READ_SQL = (
    f"SELECT 0, (SELECT value FROM {STATE_TABLE} WHERE key = ?1), q.seq, q.message_id, q.op, q.row_id "
    f"FROM (SELECT 1) LEFT JOIN (SELECT seq, message_id, op, row_id FROM {QUEUE_TABLE} ORDER BY seq LIMIT ?2) q "
    "UNION ALL "
    "SELECT 1, count(*), max(n.rowid), json_group_array(n.id), NULL, NULL FROM (SELECT rowid, id FROM mastra_messages "
    f"WHERE rowid > coalesce((SELECT value FROM {STATE_TABLE} WHERE key = ?1), 0) ORDER BY rowid LIMIT ?3) n "
    "ORDER BY 1, 3"
)
_FRESH_SQL = "SELECT rowid, id FROM mastra_messages WHERE rowid > ? ORDER BY rowid LIMIT ?"


def drain_queue(
    conn: sa.Connection, limit: int = DRAIN_BATCH, indexed: Collection[str] = (),
    changed: "dict[str, passages.StoredPassage] | None" = None, touched: "dict[str, str | None] | None" = None,
) -> tuple[int, list[str]]:
    """Apply up to ``limit`` message changes to the keyword index: rows inserted since the watermark
    (from any process, Mastra included; up to ``limit`` besides the caller's ``indexed``) and queued
    updates and deletes.

    Returns (changes applied, ids of messages that no longer exist), so the caller can drop their
    vectors too: a thread deleted by any process loses its vectors at the next drain.
    Runs inside the caller's write transaction, so nothing is inserted while it reads the rowids.
    ``indexed``: messages whose keyword rows the caller has just written in this transaction (the
    save that triggered the drain); they are counted as applied without being read again.
    ``changed``: when given, the stored messages whose doc this drain rewrote for a queued change (an
    update, or a delete followed by a re-insert under the same id) are added to it with their passage
    now, so the caller can check their vectors (``RecallIndex.stale_vectors``); new rows are not.
    ``touched``: when given, every message whose doc this drain wrote or dropped is added to it with its
    resource (None: the message is gone), so a caller can say whose docs it wrote (``reindex``).
    """
    # The rows inserted above the watermark are read up to ``limit`` past the caller's own: a save of
    # more than ``limit`` messages otherwise left the watermark inside its own rows, and the next saves'
    # drains rewrote those docs again (thousands of FTS deletes and inserts, and every process's
    # in-process keyword index loaded again: the rewrite counter moved).
    fresh_limit = limit + len(indexed)
    # The watermark, the queue (empty on most saves) and the rows inserted above the watermark, in
    # one statement: part 0 is the watermark and the queue by seq, part 1 the new rows (one row).
    rows = driver_sql.rows(conn, _DRAIN_READ_SQL, (FTS_WATERMARK, limit, fresh_limit))
    mark = int(rows[0][1] or 0) if rows else 0
    queued = [tuple(r[2:6]) for r in rows if r[0] == 0 and r[2] is not None]
    part = next((r for r in rows if r[0] == 1), None)
    fresh_count, newest, listed = (int(part[1] or 0), part[2], str(part[3])) if part is not None else (0, None, "[]")
    if "\\u0000" in listed:  # an id with a NUL (another client's): read as the driver reads it, row by row
        fresh_ids = [mid for _rowid, mid in driver_sql.rows(conn, _FRESH_SQL, (mark, fresh_limit))]
    else:
        fresh_ids = json.loads(listed) if fresh_count else []
    # A deleted row at or below the watermark may have its rowid reused by a later insert: rescan
    # from just below it (re-indexing is idempotent).
    reused = [r[3] for r in queued if r[2] == "delete" and r[3] is not None and r[3] <= mark]
    if reused:
        mark = min(mark, min(reused) - 1)
        fresh = driver_sql.rows(conn, _FRESH_SQL, (mark, fresh_limit))
        fresh_count, newest, fresh_ids = len(fresh), fresh[-1][0] if fresh else None, [mid for _rowid, mid in fresh]
    if not queued and not fresh_count:
        return 0, []
    last_op: dict[str, str] = {}
    for _seq, mid, op, _row in queued:
        last_op[mid] = op  # only the newest change of a message matters
    candidates = {m for m, op in last_op.items() if op == "upsert"} | set(fresh_ids)
    found: set[str] = candidates & set(indexed)
    # One read for every candidate's text and context, one write for every doc (not a few per message).
    stored = passages.load(conn, sorted(candidates - found))
    found.update(stored)
    upsert_docs(conn, [(p.message_id, p.thread_id, p.resource_id, p.text if p.indexable else "", p.context)
                       for p in stored.values()])
    # Deleted (or deleted again after a queued upsert): whatever no longer exists.
    gone = sorted(({m for m, op in last_op.items() if op == "delete"} | candidates) - found)
    delete_docs(conn, gone)
    if changed is not None:
        changed.update((mid, stored[mid]) for mid in last_op if mid in stored)
    if touched is not None:
        touched.update((mid, p.resource_id) for mid, p in stored.items())
        touched.update((mid, None) for mid in gone)
    if queued:
        conn.exec_driver_sql(f"DELETE FROM {QUEUE_TABLE} WHERE seq <= ?", (queued[-1][0],))
    if newest is not None:
        mark = newest
    driver_sql.execute(conn, f"INSERT OR REPLACE INTO {STATE_TABLE} (key, value) VALUES (?, ?)", (FTS_WATERMARK, int(mark)))
    return len(queued) + fresh_count, gone


# The watermark and the rows inserted since, as the drain's part 1 reads them (the queue is not read).
_FRESH_READ_SQL = (
    f"SELECT (SELECT value FROM {STATE_TABLE} WHERE key = ?1), count(*), max(n.rowid), json_group_array(n.id) "
    f"FROM (SELECT rowid, id FROM mastra_messages WHERE rowid > coalesce((SELECT value FROM {STATE_TABLE} "
    "WHERE key = ?1), 0) ORDER BY rowid LIMIT ?2) n"
)


def key_saved(conn: sa.Connection, docs: list[DocRow], limit: int = DRAIN_BATCH) -> None:
    """Write the docs of messages a save without semantic recall has just stored (``own_docs``: built from
    the saved messages), in its write transaction, with the rows inserted since the watermark up to
    ``limit`` besides them (any process's, keyed from storage as a drain keys them), and move the watermark
    past those: a search then finds them at once and has nothing pending to read around.

    The queue (updates and deletes) is left to a recall writer: its drain re-keys a queued update and
    checks that message's vectors (``RecallIndex.stale_vectors``), which a save without the model cannot.
    A message of the save that was stored already (a re-save) is keyed from its text now and keeps its
    queued update. The drain's statements: one read of the new rows (a second, of their passages, only
    for rows another writer left), one insert of the docs, the watermark."""
    fresh_limit = limit + len(docs)
    row = driver_sql.first(conn, _FRESH_READ_SQL, (FTS_WATERMARK, fresh_limit))
    mark, count, newest, listed = (int(row[0] or 0), int(row[1] or 0), row[2], str(row[3])) if row else (0, 0, None, "[]")
    if count and "\\u0000" in listed:  # an id with a NUL (another client's): read as the driver reads it
        fresh_ids = [mid for _rowid, mid in driver_sql.rows(conn, _FRESH_SQL, (mark, fresh_limit))]
    else:
        fresh_ids = json.loads(listed) if count else []
    own = {d[0] for d in docs}
    others = [mid for mid in fresh_ids if mid not in own]
    if others:
        stored = passages.load(conn, others)
        docs = [*docs, *((p.message_id, p.thread_id, p.resource_id, p.text if p.indexable else "", p.context)
                         for p in stored.values())]
    upsert_docs(conn, docs)
    if newest is not None:
        driver_sql.execute(conn, f"INSERT OR REPLACE INTO {STATE_TABLE} (key, value) VALUES (?, ?)",
                           (FTS_WATERMARK, int(newest)))


def select_terms(conn: sa.Connection, query: str, stats: TermStats | None,
                 terms: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(the query's quoted terms to match, the very common ones dropped), whatever the backend.
    ``terms``: ``keyword_terms(query)``, when the caller has it."""
    terms = keyword_terms(query) if terms is None else terms
    kept = stats.select(conn, terms) if stats is not None and terms else terms
    chosen = set(kept)
    return kept, [t for t in terms if t not in chosen]


def search(
    conn: sa.Connection, query: str, *, resource_id: str | None, thread_id: str | None, limit: int,
    context_weight: float | None = None, stats: TermStats | None = None, until: str | None = None,
    terms: list[str] | None = None, exclude_thread: str | None = None,
) -> list[KeywordHit]:
    """Best ``limit`` messages of the scope by BM25. With ``stats``, very common terms are dropped first
    (``terms``: already selected). ``until`` (ISO text): only messages created strictly before it;
    ``exclude_thread``: none of that thread's."""
    weight = CONTEXT_WEIGHT if context_weight is None else context_weight
    if terms is None:
        terms, _dropped = select_terms(conn, query, stats)
    if not terms:
        return []
    expr = " OR ".join(terms)
    where = [f"{FTS_TABLE} MATCH ?"]
    params: list[object] = [expr]
    # A row's message, thread and resource are its message's, found by the row's rowid (``0031``).
    if resource_id is not None:
        where.append('coalesce(m."resourceId", t."resourceId") = ?')
        params.append(resource_id)
    if thread_id is not None:
        where.append("m.thread_id = ?")
        params.append(thread_id)
    if exclude_thread is not None:  # (docs without a thread are kept)
        where.append("m.thread_id IS NOT ?")
        params.append(exclude_thread)
    if until is not None:
        where.append('m."createdAt" < ?')
        params.append(until)
    params.append(limit)
    rows = conn.exec_driver_sql(
        f'SELECT m.id, m.thread_id, coalesce(m."resourceId", t."resourceId"), bm25({FTS_TABLE}, 1.0, {float(weight)}) AS s '
        f"FROM {FTS_TABLE} JOIN mastra_messages m ON m.rowid = {FTS_TABLE}.rowid "
        f"LEFT JOIN mastra_threads t ON t.id = m.thread_id WHERE {' AND '.join(where)} "
        "ORDER BY s, m.id LIMIT ?",
        tuple(params),
    ).all()
    return [KeywordHit(r[0], r[1], r[2], -float(r[3])) for r in rows]


def delete_thread(conn: sa.Connection, thread_id: str) -> int:
    """The keyword rows of the thread's messages still stored (a deleted message's row went with it)."""
    ids = [r[0] for r in conn.exec_driver_sql("SELECT id FROM mastra_messages WHERE thread_id = ?", (thread_id,))]
    return delete_docs(conn, ids)


_WAITING_SQL = (
    f"SELECT (SELECT value FROM {STATE_TABLE} WHERE key = ?), (SELECT max(rowid) FROM mastra_messages), "
    f"(SELECT max(seq) FROM {QUEUE_TABLE})"
)


class Fts5Keywords:
    """The keyword half of a ``RecallIndex`` on libSQL: FTS5 and BM25, fed by the rowid watermark and
    the trigger queue (this module). ``available``: the tables exist (migration ``0004_message_fts``)."""

    def __init__(self, available: bool) -> None:
        self.available = available
        self.memory = KeywordMemory()  # BM25 in process, equal to FTS5's (``keyword_memory``)
        self.stats: TermStats = MemoryTermStats(self.memory)
        self._waiting: OrderedDict[tuple[object, ...], int] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, conn: sa.Connection) -> None:
        self.available = keyword_rows_ready(conn)

    def terms(self, conn: sa.Connection, query: str) -> tuple[list[str], list[str]]:
        terms = keyword_terms(query)  # (cut once: the prefetch and the selection read the same terms)
        if self.memory.sync(conn):
            self.memory.prefetch(conn, terms)
        return select_terms(conn, query, self.stats, terms)

    def search(self, conn: sa.Connection, query: str, *, resource_id: str | None, thread_id: str | None,
               limit: int, until: str | None = None, terms: list[str] | None = None,
               exclude_thread: str | None = None) -> list[KeywordHit]:
        """Answered in process (``keyword_memory``) when it can be exactly; else by the FTS5 statement."""
        if terms is None:
            terms = self.terms(conn, query)[0]
        if until is None and terms:
            found = self.memory.search(conn, terms, resource_id=resource_id, thread_id=thread_id, limit=limit,
                                       weight=CONTEXT_WEIGHT, exclude_thread=exclude_thread)
            if found is not None:
                return found
        return search(conn, query, resource_id=resource_id, thread_id=thread_id, limit=limit, stats=self.stats,
                      until=until, terms=terms, exclude_thread=exclude_thread)

    def write_docs(self, conn: sa.Connection, docs: list[DocRow]) -> None:
        upsert_docs(conn, docs)

    def delete_docs(self, conn: sa.Connection, message_ids: list[str]) -> None:
        delete_docs(conn, message_ids)

    def doc_state(self, conn: sa.Connection, message_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
        return doc_state(conn, message_ids)

    def delete_thread(self, conn: sa.Connection, thread_id: str) -> None:
        delete_thread(conn, thread_id)

    def drain(self, conn: sa.Connection, indexed: Collection[str] = (),
              changed: "dict[str, passages.StoredPassage] | None" = None,
              touched: "dict[str, str | None] | None" = None) -> tuple[int, list[str]]:
        return drain_queue(conn, indexed=indexed, changed=changed, touched=touched)

    def key_saved(self, conn: sa.Connection, docs: list[DocRow]) -> None:
        key_saved(conn, docs)

    def has_docs(self, conn: sa.Connection) -> bool:
        return driver_sql.first(conn, f"SELECT 1 FROM {FTS_TABLE} LIMIT 1") is not None

    def has_pending(self, conn: sa.Connection) -> bool:
        return has_pending(conn)

    def pending_changes(self, conn: sa.Connection) -> tuple[set[str], set[str] | None]:
        return pending_changes(conn)

    def waiting(self, conn: sa.Connection, resource_id: str | None, thread_id: str | None) -> int:
        """User/assistant messages of a scope not keyword-indexed yet: new since the watermark without a
        doc, or edited since (queued). Kept until a message or the queue changes: it scans every row
        above the watermark, which lags far behind on a busy database."""
        mark, newest, queued = conn.exec_driver_sql(_WAITING_SQL, (FTS_WATERMARK,)).one()
        if (newest or 0) <= (mark or 0) and queued is None:
            return 0
        key = (id(conn.engine), resource_id, thread_id, mark, newest, queued)
        with self._lock:
            cached = self._waiting.get(key)
        if cached is not None:
            return cached
        scope_sql, params = (('coalesce(m."resourceId", t."resourceId") = ?', [resource_id]) if resource_id is not None
                             else ("m.thread_id = ?", [thread_id]))
        count = int(conn.exec_driver_sql(
            "SELECT count(*) FROM mastra_messages m LEFT JOIN mastra_threads t ON t.id = m.thread_id "
            f"WHERE {scope_sql} AND m.role IN ('user', 'assistant') AND ("
            f"(m.rowid > ? AND NOT EXISTS (SELECT 1 FROM {FTS_TABLE}_docsize d WHERE d.id = m.rowid)) "
            f"OR m.id IN (SELECT message_id FROM {QUEUE_TABLE} WHERE op = 'upsert'))",
            (*params, int(mark or 0)),
        ).scalar() or 0)
        with self._lock:
            self._waiting[key] = count
            while len(self._waiting) > 64:
                self._waiting.popitem(last=False)
        return count
