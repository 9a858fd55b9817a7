"""The keyword half of hybrid recall on Postgres: ``tsvector`` documents, GIN index, ``ts_rank``.

A document is the message (weight A) and the previous message of its thread (weight B), both run
through ``text.segment`` first — the same CJK character expansion the FTS5 index stores — so a
Chinese or Japanese query finds its characters and bigrams (as phrases). The engine's text search
configuration (``CONFIG``, ``pg_schema``: ``english`` with a snowball stemmer that has no stop-word list)
stems Latin words as FTS5's porter tokenizer does, keeps every word as it does, and leaves the spaced
CJK characters alone. Queries use ``text.keyword_terms``, each term a phrase, OR-ed, parsed with the
configuration the docs were keyed with: a database whose migration ``0026_recall_keyword_config`` has not
run (opened read-only) is searched with ``english`` (``LEGACY_CONFIG``), as its docs were keyed.

Very common query terms are dropped first, by the same rule and numbers as on libSQL
(``keyword.TermStats``, ``COMMON_SHARE``): ``ts_rank`` is computed for every row the query matches
before the best can be picked, so a word found in most messages made a Postgres search cost as much
as ranking the whole resource (bench/scale.py: 168 ms at 10k messages before, see ARCHITECTURE).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

import sqlalchemy as sa

from core.recall.keyword import CONTEXT_WEIGHT, STATS_MAX_TERMS, KeywordHit, TermStats, select_terms
from core.recall import passages
from core.recall.pg_changes import ChangeLog
from core.recall.pg_schema import KEYWORD_CONFIG, LEGACY_CONFIG
from core.recall.schema import DOCS_TABLE, QUEUE_TABLE
from core.recall.text import passage_hash, segment
from core.recall.types import DocRow
from core.storage import bulk, catalog
from core.storage.pg import cursor

if TYPE_CHECKING:  # pragma: no cover
    from core.recall.pg_keyword_cache import PgKeywordCache

CONFIG = KEYWORD_CONFIG  # what every doc is keyed with (writers run only once its migration has)
DRAIN_BATCH = 2000


def _count_sql(config: str) -> str:
    return f"(SELECT count(*) FROM {DOCS_TABLE} WHERE terms @@ phraseto_tsquery('{config}', ?))"


def keyed_with(conn: sa.Connection) -> str:
    """The configuration this database's docs are keyed with (read only): ``CONFIG`` once migration
    ``0026_recall_keyword_config`` has run (its ``keyed_with`` column is there), else ``english``."""
    columns = {c[0] for c in catalog.table_columns(conn, DOCS_TABLE)}
    return CONFIG if "keyed_with" in columns else LEGACY_CONFIG


class PgTermStats(TermStats):
    """``TermStats`` counted in the ``tsvector`` documents: a GIN lookup per term, no ranking. The
    terms of one query not counted yet are counted in one statement (one round trip, not one each),
    which also parses them as a search's query does (``parsed``: kept for ``pg_keyword_cache``)."""

    def __init__(self, log: ChangeLog | None = None, config: str = CONFIG) -> None:
        super().__init__()
        self.log = log  # a search's first statement reads the change log: new terms' counts go with it
        self.config = config  # the docs' text search configuration (``keyed_with``)

    def _frequency_of(self, conn: sa.Connection, term: str) -> int:
        return self._count(conn, [term])[0]

    def _count(self, conn: sa.Connection, terms: list[str]) -> list[int]:
        plain = [_unquote(t) for t in terms]
        columns = [f"({_count_sql(self.config)})::text"] * len(terms) + [_parse_sql(self.config)] * len(terms)
        row = self.log.sync_with(conn, "ARRAY[" + ", ".join(columns) + "]", plain + plain) if self.log else None
        if row is None:
            row = list(cursor.rows(conn, "SELECT " + ", ".join(columns), plain + plain)[0])
        _keep_parsed(self.config, zip(terms, row[len(terms):]))
        return [int(c or 0) for c in row[: len(terms)]]

    def frequencies(self, conn: sa.Connection, terms: list[str]) -> list[int]:
        with self._lock:
            unknown = [t for t in dict.fromkeys(terms) if t not in self._df]
        if len(unknown) > 1:
            counts = self._count(conn, unknown)
            with self._lock:
                for term, count in zip(unknown, counts):
                    self._df[term] = count
                while len(self._df) > STATS_MAX_TERMS:
                    self._df.popitem(last=False)
        return super().frequencies(conn, terms)


# Each quoted term's ``phraseto_tsquery`` as text (Postgres's parser and stemmer: what a search's
# query is made of), kept for the in-process keyword list (``pg_keyword_cache``), by configuration.
def _parse_sql(config: str) -> str:
    return f"phraseto_tsquery('{config}', ?)::text"


_PARSED: "OrderedDict[tuple[str, str], str]" = OrderedDict()
_PARSED_LOCK = threading.Lock()


def _keep_parsed(config: str, pairs: Iterable[tuple[str, object]]) -> None:
    with _PARSED_LOCK:
        for term, text in pairs:
            _PARSED[config, term] = str(text or "")
            _PARSED.move_to_end((config, term))
        while len(_PARSED) > STATS_MAX_TERMS:
            _PARSED.popitem(last=False)


def parsed(conn: sa.Connection, terms: list[str], log: ChangeLog | None = None, config: str = CONFIG) -> list[str]:
    """Each quoted term's query as Postgres parses it with ``config`` (text; empty: nothing to search,
    e.g. punctuation), from what was kept, the others read in one statement (with the change log's
    read when this read has not synced yet: ``log``)."""
    with _PARSED_LOCK:
        found = {t: _PARSED[config, t] for t in terms if (config, t) in _PARSED}
    missing = [t for t in dict.fromkeys(terms) if t not in found]
    if missing:
        plain = [_unquote(t) for t in missing]
        parse = _parse_sql(config)
        row = log.sync_with(conn, "ARRAY[" + ", ".join([parse] * len(missing)) + "]", plain) if log else None
        if row is None:
            row = list(cursor.rows(conn, "SELECT " + ", ".join([parse] * len(missing)), plain)[0])
        _keep_parsed(config, zip(missing, row))
        found.update((t, str(text or "")) for t, text in zip(missing, row))
    return [found[t] for t in terms]


def _unquote(term: str) -> str:
    """An FTS5-quoted term (``text.keyword_terms``) as the plain phrase Postgres parses."""
    return term[1:-1].replace('""', '"')


def upsert_docs(conn: sa.Connection, docs: list[DocRow]) -> None:
    """(message_id, thread_id, resource_id, text, context) rows; empty text removes the document (of a
    message listed twice, the last row counts).

    One statement for the batch: its columns go as six arrays read by ``unnest`` in their order (one
    round trip; ``executemany`` sent a statement a row, ~0.45 ms a doc of a 500-message save)."""
    last = {d[0]: d for d in docs}
    delete_docs(conn, [mid for mid, d in last.items() if not d[3].strip()])
    keep = [d for d in last.values() if d[3].strip()]
    if not keep:
        return
    columns: list[list[str | None]] = [[], [], [], [], [], []]
    for mid, tid, rid, text, ctx in keep:
        for column, value in zip(columns, (mid, tid, rid, passage_hash(ctx, text), segment(text), segment(ctx))):
            column.append(value)
    conn.exec_driver_sql(
        f"INSERT INTO {DOCS_TABLE} (message_id, thread_id, resource_id, content_hash, terms, keyed_with) "
        f"SELECT u.mid, u.tid, u.rid, u.digest, setweight(to_tsvector('{CONFIG}', u.body), 'A') || "
        f"setweight(to_tsvector('{CONFIG}', u.ctx), 'B'), '{CONFIG}' FROM unnest(CAST(? AS text[]), CAST(? AS text[]), "
        "CAST(? AS text[]), CAST(? AS text[]), CAST(? AS text[]), CAST(? AS text[])) WITH ORDINALITY "
        "AS u(mid, tid, rid, digest, body, ctx, n) ORDER BY u.n "
        "ON CONFLICT (message_id) DO UPDATE SET thread_id = EXCLUDED.thread_id, "
        "resource_id = EXCLUDED.resource_id, content_hash = EXCLUDED.content_hash, terms = EXCLUDED.terms, "
        "keyed_with = EXCLUDED.keyed_with",
        tuple(columns),
    )
    merge_pending(conn)


GIN_INDEX = f"{DOCS_TABLE}_terms"  # the docs' GIN index (``pg_schema.FTS_DDL``)


def merge_pending(conn: sa.Connection) -> None:
    """Move the docs just written from the GIN index's pending list into the index proper, in the
    writer's transaction (one statement; what autovacuum does up to a minute later).

    GIN keeps new entries in an unsorted pending list that every search scans whole, and the planner
    counts those pages into the index's cost: at 10k messages freshly written, 25 pending pages were
    enough for keyword search to run as a sequential scan matching every doc (10–20 ms, bench/scale.py)
    instead of a bitmap scan of the index (2–4 ms). Merging a batch's entries at once is the sorted
    bulk insert the pending list exists for, not one index insert per entry. Only the index's owner
    may; a database whose index another role owns leaves it to autovacuum."""
    conn.exec_driver_sql(
        "SELECT gin_clean_pending_list(c.oid) FROM pg_class c "
        "WHERE c.oid = to_regclass(?) AND pg_has_role(c.relowner, 'USAGE')", (GIN_INDEX,))


def doc_state(conn: sa.Connection, message_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
    """(passage hash, thread id) of each message's keyword doc (``TsvectorKeywords.doc_state``)."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for marks, params in bulk.in_lists(conn, message_ids):
        for mid, digest, thread_id in conn.exec_driver_sql(
            f"SELECT message_id, content_hash, thread_id FROM {DOCS_TABLE} WHERE message_id IN ({marks})", params
        ):
            out[mid] = (digest, thread_id)
    return out


def delete_docs(conn: sa.Connection, message_ids: list[str]) -> int:
    if not message_ids:
        return 0
    return int(conn.exec_driver_sql(
        f"DELETE FROM {DOCS_TABLE} WHERE message_id = ANY(CAST(? AS text[]))", (message_ids,)
    ).rowcount or 0)


def delete_thread(conn: sa.Connection, thread_id: str) -> int:
    return int(conn.exec_driver_sql(f"DELETE FROM {DOCS_TABLE} WHERE thread_id = ?", (thread_id,)).rowcount or 0)


def has_pending(conn: sa.Connection) -> bool:
    return bool(cursor.rows(conn, f"SELECT 1 FROM {QUEUE_TABLE} LIMIT 1"))


def pending_changes(conn: sa.Connection, limit: int = 20_000) -> tuple[set[str], set[str] | None]:
    """(queued messages that no longer exist: still in the index, gone from the store; None when an
    update is queued (or a delete of a message stored again since under the same id), so any keyword
    hit's doc may hold an older text (``RecallIndex.edited_since_indexed``
    checks the hits), else an empty set). One statement, read-only: a row with no id says an update waits
    (the queue holds every doc of a re-key, ``pg_schema`` 0026: their ids are not read on every search)."""
    rows = conn.exec_driver_sql(
        f"SELECT DISTINCT q.message_id FROM (SELECT message_id FROM {QUEUE_TABLE} ORDER BY seq LIMIT ?) q "
        "WHERE NOT EXISTS (SELECT 1 FROM mastra_messages m WHERE m.id = q.message_id) "
        f"UNION ALL SELECT NULL WHERE EXISTS (SELECT 1 FROM {QUEUE_TABLE} u WHERE u.op = 'upsert' OR (u.op = 'delete' "
        "AND EXISTS (SELECT 1 FROM mastra_messages m WHERE m.id = u.message_id)))", (limit,)
    ).all()
    gone = {r[0] for r in rows if r[0] is not None}
    return gone, (None if len(gone) < len(rows) else set())


def claim_queued(conn: sa.Connection, message_ids: list[str]) -> None:
    """Lock the queue rows of the messages this transaction is about to write docs for, before it
    writes them. An agent's turn is indexed in the transaction after its save, so its messages sit
    in the queue meanwhile: another writer's drain would write their docs too, and two writers each
    writing their own docs and then the other's deadlock (Postgres then fails one index write, whose
    messages keep no vector). Claimed rows are skipped by every other drain (``SKIP LOCKED``); a claim
    waits only for a drain that took them first, which waits for nothing of this transaction. In
    ``seq`` order, so two claims of the same messages (a reindex beside a turn) cannot cross. Found
    by the queue's ``message_id`` index (migration ``0025_recall_queue_by_message``), not by reading
    the queue: a backlog of 100,000 made each claim ~12 ms."""
    if message_ids:
        conn.exec_driver_sql(
            f"SELECT seq FROM {QUEUE_TABLE} WHERE message_id = ANY(CAST(? AS text[])) ORDER BY seq FOR UPDATE",
            (message_ids,),
        )


def drain_queue(conn: sa.Connection, limit: int = DRAIN_BATCH,
                changed: "dict[str, passages.StoredPassage] | None" = None,
                touched: "dict[str, str | None] | None" = None) -> tuple[int, list[str]]:
    """Apply queued message changes (from any process). Returns (entries applied, ids deleted).

    Runs in the caller's write transaction; ``SKIP LOCKED`` lets two processes drain at once
    without waiting on each other or applying one change twice. ``changed``: when given, the stored
    messages whose doc this drain rewrote are added to it with their passage, and ``touched`` every message
    whose doc it wrote or dropped, with its resource (``keyword.drain_queue``).
    """
    queued = conn.exec_driver_sql(
        f"SELECT seq, message_id, op FROM {QUEUE_TABLE} ORDER BY seq LIMIT ? FOR UPDATE SKIP LOCKED", (limit,)
    ).all()
    if not queued:
        return 0, []
    last: dict[str, str] = {}
    deleted: set[str] = set()
    for _seq, mid, op in queued:
        last[mid] = op
        if op == "delete":
            deleted.add(mid)
    ids = list(last)
    have = {r[0] for r in conn.exec_driver_sql(
        f"SELECT message_id FROM {DOCS_TABLE} WHERE message_id = ANY(CAST(? AS text[]))", (ids,)
    )}
    # Inserted and indexed by the process that saved them (with their context): nothing to do. Not an
    # insert after a delete of the same id (another program deleted the message and wrote it again,
    # maybe with another text): the doc there is the deleted message's, so it is keyed again.
    skip = {mid for mid, op in last.items() if op == "insert" and mid in have and mid not in deleted}
    todo = [mid for mid in ids if mid not in skip]
    stored = passages.load(conn, todo)
    gone = [mid for mid in todo if mid not in stored]
    delete_docs(conn, gone)
    upsert_docs(conn, [(p.message_id, p.thread_id, p.resource_id, p.text if p.indexable else "", p.context)
                       for p in stored.values()])
    if changed is not None:
        # Updated, or deleted and written again (a new message another program wrote is not one); oldest first.
        changed.update((mid, stored[mid]) for mid in todo if mid in stored and (last[mid] != "insert" or mid in deleted))
    if touched is not None:
        touched.update((mid, p.resource_id) for mid, p in stored.items())
        touched.update((mid, None) for mid in gone)
    conn.exec_driver_sql(f"DELETE FROM {QUEUE_TABLE} WHERE seq = ANY(CAST(? AS bigint[]))", ([q[0] for q in queued],))
    return len(queued), gone


def key_saved(conn: sa.Connection, docs: list[DocRow]) -> None:
    """Write the docs of messages a save without semantic recall has just stored (``own_docs``: built from
    the saved messages), in its write transaction, and take out the ``insert`` rows its trigger queued for
    them: a search then finds them at once and has nothing pending to read around.

    The rows go as a drain's would: for an ``insert`` of a message whose doc is keyed from its passage now,
    that is all a drain does. Kept for a recall writer: an ``upsert`` (its drain checks that message's
    vectors, ``RecallIndex.stale_vectors``) and every row of a message with a ``delete`` queued (deleted
    and written again: the drain keys it again). These messages' queue rows are claimed first
    (``claim_queued``), as a recall writer's are, so no drain writes their docs meanwhile; the rows this
    save's trigger wrote are seen by no other transaction before they are gone."""
    ids = list(dict.fromkeys(d[0] for d in docs))
    if not ids:
        return
    claim_queued(conn, ids)
    upsert_docs(conn, docs)
    conn.exec_driver_sql(
        f"DELETE FROM {QUEUE_TABLE} q WHERE q.message_id = ANY(CAST(? AS text[])) AND q.op = 'insert' "
        f"AND NOT EXISTS (SELECT 1 FROM {QUEUE_TABLE} d WHERE d.message_id = q.message_id AND d.op = 'delete')",
        (ids,))


def search(
    conn: sa.Connection, query: str, *, resource_id: str | None, thread_id: str | None, limit: int,
    context_weight: float | None = None, stats: TermStats | None = None, until: str | None = None,
    terms: list[str] | None = None, config: str = CONFIG, exclude_thread: str | None = None,
) -> list[KeywordHit]:
    """Best ``limit`` documents of the scope by ``ts_rank``. With ``stats``, very common terms are
    dropped first (``terms``: already selected, quoted). ``until``: only messages created before it
    (ISO text), for a past turn's view. ``config``: the docs' configuration (``keyed_with``);
    ``exclude_thread``: no document of that thread."""
    quoted = terms if terms is not None else select_terms(conn, query, stats)[0]
    if not quoted:
        return []
    sql, params = search_sql(quoted, resource_id=resource_id, thread_id=thread_id, limit=limit,
                             context_weight=context_weight, until=until, config=config, exclude_thread=exclude_thread)
    rows = cursor.rows(conn, sql, params)
    _LISTED[conn] = [r[0] for r in rows]
    return [KeywordHit(r[0], r[1], r[2], float(r[3])) for r in rows]


def search_sql(
    quoted: list[str], *, resource_id: str | None, thread_id: str | None, limit: int,
    context_weight: float | None = None, until: str | None = None, config: str = CONFIG,
    exclude_thread: str | None = None,
) -> tuple[str, list[object]]:
    """``search``'s statement for these selected (quoted, non-empty) terms: (SQL, parameters); its rows
    are (message id, thread id, resource id, ``ts_rank`` as ``real``), best first. ``pg_hybrid`` runs
    the same text inside the one statement of a hybrid search."""
    terms = [_unquote(t) for t in quoted]
    weight = CONTEXT_WEIGHT if context_weight is None else context_weight
    tsquery = " || ".join([f"phraseto_tsquery('{config}', ?)"] * len(terms))
    where = ["d.terms @@ q.q"]
    params: list[object] = list(terms)
    if resource_id is not None:
        where.append("d.resource_id = ?")
        params.append(resource_id)
    if thread_id is not None:
        where.append("d.thread_id = ?")
        params.append(thread_id)
    if exclude_thread is not None:  # (documents without a thread are kept)
        where.append("d.thread_id IS DISTINCT FROM ?")
        params.append(exclude_thread)
    if until is not None:
        where.append('EXISTS (SELECT 1 FROM mastra_messages m WHERE m.id = d.message_id AND m."createdAt" < ?)')
        params.append(until)
    params.append(limit)
    return (
        f"SELECT d.message_id, d.thread_id, d.resource_id, "
        f"ts_rank('{{0, 0, {float(weight)}, 1}}', d.terms, q.q) AS s "
        f"FROM {DOCS_TABLE} d, (SELECT {tsquery} AS q) q WHERE {' AND '.join(where)} "
        # Ties in code point order whatever the database's collation (as libSQL's BINARY and ``pg_rank``).
        'ORDER BY s DESC, d.message_id COLLATE "C" LIMIT ?',
        params,
    )


# The message ids of the last keyword list each open connection read (its search's transaction):
# ``pg_vectors.PgVectorSet.ranked`` asks for their cosines in the vector list's own statement, so a
# hybrid search needs no round trip of its own for them. Weak keys: gone with the connection.
_LISTED: "weakref.WeakKeyDictionary[sa.Connection, list[str]]" = weakref.WeakKeyDictionary()


def listed(conn: sa.Connection) -> list[str] | None:
    """The message ids of the last keyword list read on ``conn`` (None: none read on it)."""
    return _LISTED.get(conn)


class TsvectorKeywords:
    """The keyword half of a ``RecallIndex`` on Postgres: ``tsvector`` docs and ``ts_rank``, fed by the
    statement-level trigger queue (this module)."""

    def __init__(self, available: bool, log: ChangeLog | None = None, kept: "PgKeywordCache | None" = None) -> None:
        self.available = available
        self.config = CONFIG  # the docs' text search configuration (``open``: the database's)
        self._stats = PgTermStats(log)
        self.stats: TermStats = self._stats
        self.log = log  # the database's change log: its read says whether the queue waits
        self.kept = kept  # the scopes' docs in memory (``pg_keyword_cache``), told of writes by ``log``

    def open(self, conn: sa.Connection) -> None:
        self.available = catalog.has_table(conn, DOCS_TABLE)
        self.config = self._stats.config = keyed_with(conn) if self.available else CONFIG

    def terms(self, conn: sa.Connection, query: str) -> tuple[list[str], list[str]]:
        chosen = select_terms(conn, query, self.stats)
        if self.kept is not None and chosen[0]:  # their parse, for the list in process (with the log's read)
            parsed(conn, chosen[0], self.log, self.config)
        return chosen

    def search(self, conn: sa.Connection, query: str, *, resource_id: str | None, thread_id: str | None,
               limit: int, until: str | None = None, terms: list[str] | None = None,
               exclude_thread: str | None = None) -> list[KeywordHit]:
        if self.kept is not None and until is None:  # (a past turn's view needs the messages' times)
            quoted = terms if terms is not None else select_terms(conn, query, self.stats)[0]
            if not quoted:
                return []
            hits = self.kept.search(conn, quoted, resource_id=resource_id, thread_id=thread_id, limit=limit,
                                    config=self.config, exclude_thread=exclude_thread)
            if hits is not None:
                _LISTED[conn] = [h.message_id for h in hits]
                return hits
            terms = quoted
        return search(conn, query, resource_id=resource_id, thread_id=thread_id, limit=limit, stats=self.stats,
                      until=until, terms=terms, config=self.config, exclude_thread=exclude_thread)

    def write_docs(self, conn: sa.Connection, docs: list[DocRow]) -> None:
        claim_queued(conn, [d[0] for d in docs])
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
        return drain_queue(conn, changed=changed, touched=touched)

    def key_saved(self, conn: sa.Connection, docs: list[DocRow]) -> None:
        key_saved(conn, docs)

    def has_docs(self, conn: sa.Connection) -> bool:
        return conn.exec_driver_sql(f"SELECT 1 FROM {DOCS_TABLE} LIMIT 1").first() is not None

    def has_pending(self, conn: sa.Connection) -> bool:
        if self.log is not None and self.log.sync(conn):
            queued = self.log.queued(conn)  # (read with the log, in this read's one statement)
            if queued is not None:
                return queued
        return has_pending(conn)

    def pending_changes(self, conn: sa.Connection) -> tuple[set[str], set[str] | None]:
        return pending_changes(conn)

    def waiting(self, conn: sa.Connection, resource_id: str | None, thread_id: str | None) -> int:
        """User/assistant messages of a scope whose change waits in the queue."""
        scope_sql, params = (('coalesce(m."resourceId", t."resourceId") = ?', [resource_id]) if resource_id is not None
                             else ("m.thread_id = ?", [thread_id]))
        return int(conn.exec_driver_sql(
            f"SELECT count(DISTINCT m.id) FROM {QUEUE_TABLE} q JOIN mastra_messages m ON m.id = q.message_id "
            f"LEFT JOIN mastra_threads t ON t.id = m.thread_id WHERE {scope_sql} AND m.role IN ('user', 'assistant') "
            "AND NOT (q.op = 'insert' AND EXISTS (SELECT 1 FROM " + DOCS_TABLE + " d WHERE d.message_id = m.id))",
            tuple(params),
        ).scalar() or 0)
