"""A Postgres keyword list answered in process, per scope, kept up to date by the change log.

``pg_keywords.search`` asks the server for ``ts_rank`` of every doc of the scope that matches: at 10k
messages the largest part of a Postgres hybrid search (the rank is computed for each of ~1,600
matches before the best can be picked). ``pg_rank.TsIndex`` answers the same statement from the docs
held in memory, to the bit; this keeps one per scope searched (a resource, or a thread), loaded on
first use and told of every docs write by ``pg_changes`` (any process's): the docs of the messages
written are read again and put in place of the old, or dropped.

Each query's parsed form comes from the server once (``pg_rank.query_sql``: Postgres's own parser and
stemmer) and is kept by its terms. At most ``MAX_CACHED_SCOPES`` scopes and ``MAX_KEPT_DOCS`` docs are
kept (the least recently searched go first). A scope of more than ``MAX_DOCS`` docs, a search ``as of`` a past
turn (``until``) and a database without the log are answered by the statement (``search`` returns None).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import sqlalchemy as sa

from core.recall.keyword import KeywordHit
from core.recall.pg_changes import ChangeLog, Inbox, Scope as Key, scope_of
from core.recall import pg_keywords
from core.recall.pg_rank import LOAD_SQL, TsIndex, TsQuery, Unsupported, parse_tsquery
from core.recall.tables import DOCS_TABLE
from core.storage.pg import cursor

MAX_DOCS = 100_000  # a larger scope is searched by the server
MAX_CACHED_SCOPES = 64
MAX_KEPT_DOCS = 300_000  # docs kept in all (~1.3 kB each; the least recently searched scopes go first)
MAX_QUERIES = 1024  # parsed queries kept, by their terms


class PgKeywordCache:
    """The kept keyword docs of one database, by scope. Thread-safe: changes wait in an ``Inbox`` and are
    applied by the next search, under the lock held across its reads."""

    def __init__(self, log: ChangeLog) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._scopes: OrderedDict[Key, TsIndex] = OrderedDict()
        self._large: set[Key] = set()
        self._queries: OrderedDict[tuple[str, ...], TsQuery] = OrderedDict()  # by (configuration, *terms)
        self._inbox = Inbox(log, lambda source: source == "docs")

    # -- reading -------------------------------------------------------------------------------
    def search(self, conn: sa.Connection, terms: list[str], *, resource_id: str | None, thread_id: str | None,
               limit: int, config: str = pg_keywords.CONFIG, exclude_thread: str | None = None) -> list[KeywordHit] | None:
        """``pg_keywords.search_sql``'s rows for these selected (quoted) terms, from memory; None: the
        statement answers (no log, a scope too large, a query this cannot answer). ``config``: the
        docs' text search configuration, which parses the terms."""
        key = scope_of(resource_id, thread_id)
        with self._lock:
            if not self._log.sync(conn):
                return None
            self._apply(conn)
            if key in self._large:
                return None
            index = self._scopes.get(key)
            if index is None:
                index = self._load(conn, key)
                if index is None:
                    return None
            else:
                self._scopes.move_to_end(key)
            query = self._query(conn, terms, config)
            try:
                rows = index.search(query, resource_id=resource_id, thread_id=thread_id, limit=limit,
                                    exclude_thread=exclude_thread)
            except Unsupported:
                return None
        return [KeywordHit(mid, tid, rid, score) for mid, tid, rid, score in rows]

    def _query(self, conn: sa.Connection, terms: list[str], config: str) -> TsQuery:
        """These terms' query as ``search_sql`` makes it (``phraseto_tsquery`` of each, OR-ed with
        ``||``), from the server's parse of each term (``pg_keywords.parsed``: read with the terms'
        counts), kept by the terms. ``||`` of a query and an empty one (a term of stop words only) is
        the other; the OR of several is the same operands under one OR, whatever the grouping."""
        key = (config, *terms)
        found = self._queries.get(key)
        if found is not None:
            self._queries.move_to_end(key)
            return found
        parts = [p for p in pg_keywords.parsed(conn, terms, config=config) if p.strip()]
        query = parse_tsquery(" | ".join(f"( {p} )" for p in parts) if len(parts) > 1 else "".join(parts))
        self._queries[key] = query
        while len(self._queries) > MAX_QUERIES:
            self._queries.popitem(last=False)
        return query

    def _load(self, conn: sa.Connection, key: Key) -> TsIndex | None:
        kind, value = key
        where = f"{'resource_id' if kind == 'resource' else 'thread_id'} = ?"
        if cursor.scalar(conn, f"SELECT count(*) FROM (SELECT 1 FROM {DOCS_TABLE} WHERE {where} LIMIT ?) s",
                         (value, MAX_DOCS + 1)) > MAX_DOCS:
            self._large.add(key)  # (until the log says to start over: scopes grow, they rarely shrink)
            return None
        rows = cursor.rows(conn, f"{LOAD_SQL} WHERE {where}", (value,))
        index = TsIndex()
        index.put(rows)
        self._scopes[key] = index
        while len(self._scopes) > 1 and (len(self._scopes) > MAX_CACHED_SCOPES
                                         or sum(len(i) for i in self._scopes.values()) > MAX_KEPT_DOCS):
            self._scopes.popitem(last=False)
        return index

    def _apply(self, conn: sa.Connection) -> None:
        """The inbox's changes (under ``_lock``): the docs of the messages written read again, each put
        in the kept scopes it belongs to and dropped from the others."""
        reset, inbox = self._inbox.take()
        if any(c.message_ids is None for c in inbox):  # (a TRUNCATE: every doc went)
            reset = True
        if reset:
            self._scopes.clear()
            self._large.clear()
            return
        ids = sorted({m for c in inbox for m in c.message_ids or () if m is not None})
        if not ids or not self._scopes:
            return
        rows = cursor.rows(conn, f"{LOAD_SQL} WHERE message_id = ANY(CAST(? AS text[]))", (ids,))
        for (kind, value), index in self._scopes.items():
            index.drop(ids)
            index.put(r for r in rows if (r[2] if kind == "resource" else r[1]) == value)

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"keyword_scopes": len(self._scopes), "keyword_docs": sum(len(i) for i in self._scopes.values())}

    def close(self) -> None:
        with self._lock:
            self._scopes.clear()
            self._large.clear()
