"""A hybrid search's reads on Postgres as one statement: keyword list, vector list, the keyword list's
cosines, the re-rank's thread order of every candidate, and whether the recall queue waits.

Read one by one (``search.run``'s general path) these are four statements after the check-out's
``BEGIN``: the queue check, the keyword list, the vector list with the keyword list's cosines, and the
thread order of the fusion's candidates. The server's work for each is small at 10k messages (0.03,
1.2, 1.2 and 0.3 ms of execution, ``EXPLAIN ANALYZE``), so each statement's fixed costs (the round
trip, psycopg's execute and fetch, the server's parse, plan and executor start, and on a busy machine
the wait for the server process to be scheduled) were a large share. Here the same statements are
common table expressions of one: the keyword list and the vector list are read once
(``MATERIALIZED``), the cosines are of the keyword list's ids, and the thread order is read for every
id the fusion may re-rank (the keyword list's, and the vector list's best ``depth`` messages, ties
included); the fusion itself stays in Python. One snapshot for all of it (a read-committed read took
one per statement).

The SQL of each part is the general path's own (``pg_keywords.search_sql``, ``PgVectorSet.listing``,
``pg_vectors._COSINES``'s expression, ``pg_order.NEXT_ID``), so the rows are the same: ``ts_rank``
comes back as the same ``real``, the cosines as the same ``double precision``. Thread order rows are
decoded only for the ids the re-rank asks for (``PrefetchedOrder``); the server reads about a third
more of them than the re-rank asks for (0.3 ms more at 10k), which the saved round trips pay for.

New query terms are still counted first, in a statement of their own (``PgTermStats.frequencies``):
which terms are searched depends on the counts. Counting them in this statement while searching as if
each new term were rare was tried and dropped: a new term that is in most messages (once per term and
whenever ``TermStats`` refreshes) then costs a ``ts_rank`` of every message it matches, a larger loss
than the round trip saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import sqlalchemy as sa

from core.recall import hybrid, pg_order
from core.recall.keyword import KeywordHit
from core.recall.pg_keywords import CONFIG, TsvectorKeywords, search_sql
from core.recall.pg_vectors import PgVectorSet, literal
from core.recall.schema import QUEUE_TABLE, quoted, text_of_raw
from core.recall.order_cache import day_of
from core.recall.text import speaker_label
from core.storage.pg import cursor

_ORDER, _KEYWORD, _VECTOR, _COSINE, _QUEUED = 0, 1, 2, 3, 4  # the first column of each row: which part

_NO_KEYWORDS = "SELECT NULL::text, NULL::text, NULL::text, NULL::real WHERE false"


@dataclass
class HybridRead:
    keyword: list[KeywordHit]
    vector: list[hybrid.Ranked]
    cosines: dict[str, float]  # of the keyword list's messages that have a vector
    order: "PrefetchedOrder"
    queued: bool  # the recall queue holds changes (``index.backlog`` says which)


def statement(vset: PgVectorSet, q: str, terms: list[str], *, resource_id: str | None, thread_id: str | None,
              depth: int, narrowed: str | None, labels: bool, config: str = CONFIG,
              exclude_thread: str | None = None, keyword_depth: int | None = None) -> tuple[str, list[Any], int] | None:
    """(SQL, parameters, the ``hnsw.ef_search`` it needs); None when the vector list is an exact scan
    (a depth HNSW may not list: the general path reads it). ``config``: the keyword docs' text search
    configuration; ``exclude_thread``: neither list has a message of that thread."""
    listing, vparams, ef_search, exact = vset.listing(q, depth, narrowed, None, exclude_thread)
    if exact:
        return None
    if terms:
        kw_sql, kparams = search_sql(terms, resource_id=resource_id, thread_id=thread_id,
                                     limit=depth if keyword_depth is None else keyword_depth, config=config,
                                     exclude_thread=exclude_thread)
    else:
        kw_sql, kparams = _NO_KEYWORDS, []
    table = quoted(vset.table)
    content = "m.content" if labels else "NULL"
    sql = (
        f"WITH kw (mid, tid, rid, s) AS MATERIALIZED ({kw_sql}), "
        f"vl (mid, tid, rid, score) AS MATERIALIZED ({listing}) "
        # The thread order first: its columns give the union its types (createdAt as Mastra's table has it).
        f"SELECT {_ORDER}, m.id, {pg_order.NEXT_ID}, m.thread_id, NULL::real, NULL::float8, m.\"createdAt\", {content} "
        "FROM mastra_messages m WHERE m.id = ANY(ARRAY(SELECT mid FROM kw UNION (SELECT mid FROM vl GROUP BY mid "
        "ORDER BY max(score) DESC FETCH FIRST ? ROWS WITH TIES))) "
        f"UNION ALL SELECT {_KEYWORD}, mid, tid, rid, s, NULL, NULL, NULL FROM kw "
        f"UNION ALL SELECT {_VECTOR}, mid, tid, rid, NULL, score, NULL, NULL FROM vl "
        f"UNION ALL SELECT {_COSINE}, metadata->>'message_id', NULL, NULL, NULL, "
        f"max(1 - (embedding <=> CAST(? AS vector))), NULL, NULL FROM {table} "
        "WHERE metadata->>'message_id' = ANY(ARRAY(SELECT mid FROM kw)) AND model_id = ? GROUP BY 2 "
        f"UNION ALL SELECT {_QUEUED}, NULL, NULL, NULL, NULL, NULL, NULL, NULL "
        f"WHERE EXISTS (SELECT 1 FROM {QUEUE_TABLE})"
    )
    return sql, [*kparams, *vparams, depth, q, vset.model_id], ef_search


def read(conn: sa.Connection, vset: PgVectorSet, qvec: np.ndarray, terms: list[str], *, resource_id: str | None,
         thread_id: str | None, depth: int, narrowed: str | None, labels: bool,
         keywords: TsvectorKeywords | None = None, exclude_thread: str | None = None,
         keyword_depth: int | None = None) -> HybridRead | None:
    """Every read of a hybrid search over this scope, in ``conn``'s transaction (None: not possible in
    one statement, see ``statement``, or the scope's vectors are kept in process: ``pg_vector_cache``).
    ``terms``: the selected quoted keyword terms (may be empty); ``keywords``: the index's keyword
    backend, whose docs' configuration parses them."""
    if not isinstance(vset, PgVectorSet):
        return None
    q = literal(qvec)
    built = statement(vset, q, terms, resource_id=resource_id, thread_id=thread_id, depth=depth,
                      narrowed=narrowed, labels=labels, config=keywords.config if keywords is not None else CONFIG,
                      exclude_thread=exclude_thread, keyword_depth=keyword_depth)
    if built is None:
        return None
    sql, params, ef_search = built
    vset.set_ef_search(conn, ef_search)
    rows = cursor.rows(conn, sql, params)
    keyword = [KeywordHit(r[1], r[2], r[3], float(r[4])) for r in rows if r[0] == _KEYWORD]
    vector = vset.best([(r[1], r[2], r[3], r[5]) for r in rows if r[0] == _VECTOR], depth)
    cosines = {r[1]: float(r[5]) for r in rows if r[0] == _COSINE}
    vset.keep_cosines(qvec, [h.message_id for h in keyword], cosines)
    # The vector list's ids read: its best ``depth`` messages by their best cosine (ties included), the
    # same as ``best`` keeps (its rows are the same ``double precision`` values).
    asked = {h.message_id for h in keyword}.union(r.message_id for r in vector)
    order = PrefetchedOrder({r[1]: r for r in rows if r[0] == _ORDER}, asked, labels)
    return HybridRead(keyword, vector, cosines, order, any(r[0] == _QUEUED for r in rows))


class PrefetchedOrder:
    """The thread order ``read`` fetched, answering the re-rank's ``read`` as ``pg_order.thread_order``
    would (the same rows, decoded the same way), for the ids it asks; ids it did not fetch, or labels
    when it fetched no content, are read as before."""

    def __init__(self, rows: dict[str, tuple[Any, ...]], asked: set[str], labels: bool) -> None:
        self._rows = rows  # message id -> its row (ids asked for that are not stored have none)
        self._asked = asked
        self._labels = labels

    def sync(self, conn: sa.Connection) -> bool:
        return False

    def read(self, conn: sa.Connection, message_ids: list[str], *, labels: bool, reader: Any = None,
             threads: Callable[[], Any] | None = None, synced: bool | None = None) -> dict[str, pg_order.Order]:
        if labels and not self._labels:
            return pg_order.thread_order(conn, message_ids, labels=labels)
        # An id neither list had is read (the fusion's candidates are the lists' ids: none are).
        unknown = [mid for mid in message_ids if mid not in self._asked]
        out = pg_order.thread_order(conn, unknown, labels=labels) if unknown else {}
        wanted = set(message_ids)
        for mid, row in self._rows.items():  # in the server's order, as ``thread_order``'s own read
            if mid in wanted:
                out[mid] = (row[2], day_of(row[6]), speaker_label(text_of_raw(row[7])) if labels else None)
        return out
