"""The keyword half of hybrid recall on Postgres: ``tsvector`` documents, GIN index, ``ts_rank``.

A document is the message (weight A) and the previous message of its thread (weight B), both run
through ``text.segment`` first — the same CJK character expansion the FTS5 index stores — so a
Chinese or Japanese query finds its characters and bigrams (as phrases). The ``english``
configuration stems Latin words as FTS5's porter tokenizer does and leaves the spaced CJK
characters alone. Queries use ``text.keyword_terms``, each term a phrase, OR-ed.

Very common query terms are dropped first, by the same rule and numbers as on libSQL
(``keyword.TermStats``, ``COMMON_SHARE``): ``ts_rank`` is computed for every row the query matches
before the best can be picked, so a word found in most messages made a Postgres search cost as much
as ranking the whole resource (bench/scale.py: 168 ms at 10k messages before, see ARCHITECTURE).
"""

from __future__ import annotations

import sqlalchemy as sa

from core.recall.keyword import CONTEXT_WEIGHT, KeywordHit, TermStats
from core.recall.schema import DOCS_TABLE, QUEUE_TABLE, previous_text, text_of_raw
from core.recall.text import keyword_terms, passage_hash, segment

CONFIG = "english"
DRAIN_BATCH = 2000
_DOC = f"setweight(to_tsvector('{CONFIG}', ?), 'A') || setweight(to_tsvector('{CONFIG}', ?), 'B')"


class PgTermStats(TermStats):
    """``TermStats`` counted in the ``tsvector`` documents: a GIN lookup per term, no ranking."""

    def _frequency_of(self, conn: sa.Connection, term: str) -> int:
        return int(conn.exec_driver_sql(
            f"SELECT count(*) FROM {DOCS_TABLE} WHERE terms @@ phraseto_tsquery('{CONFIG}', ?)", (_unquote(term),)
        ).scalar() or 0)


def _unquote(term: str) -> str:
    """An FTS5-quoted term (``text.keyword_terms``) as the plain phrase Postgres parses."""
    return term[1:-1].replace('""', '"')


def upsert_docs(conn: sa.Connection, docs: list[tuple[str, str | None, str | None, str, str]]) -> None:
    """(message_id, thread_id, resource_id, text, context) rows; empty text removes the document."""
    delete_docs(conn, [d[0] for d in docs if not d[3].strip()])
    keep = [d for d in docs if d[3].strip()]
    if not keep:
        return
    conn.exec_driver_sql(
        f"INSERT INTO {DOCS_TABLE} (message_id, thread_id, resource_id, content_hash, terms) VALUES (?, ?, ?, ?, {_DOC}) "
        "ON CONFLICT (message_id) DO UPDATE SET thread_id = EXCLUDED.thread_id, "
        "resource_id = EXCLUDED.resource_id, content_hash = EXCLUDED.content_hash, terms = EXCLUDED.terms",
        [(mid, tid, rid, passage_hash(ctx, text), segment(text), segment(ctx)) for mid, tid, rid, text, ctx in keep],
    )


def delete_docs(conn: sa.Connection, message_ids: list[str]) -> int:
    if not message_ids:
        return 0
    return int(conn.exec_driver_sql(
        f"DELETE FROM {DOCS_TABLE} WHERE message_id = ANY(CAST(? AS text[]))", (message_ids,)
    ).rowcount or 0)


def delete_thread(conn: sa.Connection, thread_id: str) -> int:
    return int(conn.exec_driver_sql(f"DELETE FROM {DOCS_TABLE} WHERE thread_id = ?", (thread_id,)).rowcount or 0)


def has_pending(conn: sa.Connection) -> bool:
    return conn.exec_driver_sql(f"SELECT 1 FROM {QUEUE_TABLE} LIMIT 1").first() is not None


def pending_deletes(conn: sa.Connection, limit: int = 20_000) -> set[str]:
    """Queued messages that no longer exist: still in the index, gone from the store (read-only)."""
    rows = conn.exec_driver_sql(
        f"SELECT DISTINCT q.message_id FROM (SELECT message_id FROM {QUEUE_TABLE} ORDER BY seq LIMIT ?) q "
        "WHERE NOT EXISTS (SELECT 1 FROM mastra_messages m WHERE m.id = q.message_id)", (limit,)
    ).all()
    return {r[0] for r in rows}


def drain_queue(conn: sa.Connection, limit: int = DRAIN_BATCH) -> tuple[int, list[str]]:
    """Apply queued message changes (from any process). Returns (entries applied, ids deleted).

    Runs in the caller's write transaction; ``SKIP LOCKED`` lets two processes drain at once
    without waiting on each other or applying one change twice.
    """
    queued = conn.exec_driver_sql(
        f"SELECT seq, message_id, op FROM {QUEUE_TABLE} ORDER BY seq LIMIT ? FOR UPDATE SKIP LOCKED", (limit,)
    ).all()
    if not queued:
        return 0, []
    last: dict[str, str] = {}
    for _seq, mid, op in queued:
        last[mid] = op
    ids = list(last)
    rows = {
        r[0]: r for r in conn.exec_driver_sql(
            'SELECT m.id, m.thread_id, coalesce(m."resourceId", t."resourceId"), m.content, m."createdAt", m.role '
            "FROM mastra_messages m LEFT JOIN mastra_threads t ON t.id = m.thread_id WHERE m.id = ANY(CAST(? AS text[]))",
            (ids,),
        ).all()
    }
    have = {r[0] for r in conn.exec_driver_sql(
        f"SELECT message_id FROM {DOCS_TABLE} WHERE message_id = ANY(CAST(? AS text[]))", (ids,)
    )}
    gone = [mid for mid in ids if mid not in rows]
    docs = []
    for mid, op in last.items():
        row = rows.get(mid)
        if row is None or row[5] not in ("user", "assistant"):
            continue
        if op == "insert" and mid in have:
            continue  # indexed by the process that saved it, with its context
        docs.append((mid, row[1], row[2], text_of_raw(row[3]), previous_text(conn, row[1], row[4], mid)))
    delete_docs(conn, gone)
    upsert_docs(conn, docs)
    conn.exec_driver_sql(f"DELETE FROM {QUEUE_TABLE} WHERE seq = ANY(CAST(? AS bigint[]))", ([q[0] for q in queued],))
    return len(queued), gone


def search(
    conn: sa.Connection, query: str, *, resource_id: str | None, thread_id: str | None, limit: int,
    context_weight: float | None = None, stats: TermStats | None = None, until: str | None = None,
) -> list[KeywordHit]:
    """Best ``limit`` documents of the scope by ``ts_rank``. With ``stats``, very common terms are
    dropped first. ``until``: only messages created before it (ISO text), for a past turn's view."""
    quoted = keyword_terms(query)
    if not quoted:
        return []
    if stats is not None:
        quoted = stats.select(conn, quoted)
    terms = [_unquote(t) for t in quoted]
    weight = CONTEXT_WEIGHT if context_weight is None else context_weight
    tsquery = " || ".join([f"phraseto_tsquery('{CONFIG}', ?)"] * len(terms))
    where = ["d.terms @@ q.q"]
    params: list[object] = list(terms)
    if resource_id is not None:
        where.append("d.resource_id = ?")
        params.append(resource_id)
    if thread_id is not None:
        where.append("d.thread_id = ?")
        params.append(thread_id)
    if until is not None:
        where.append('EXISTS (SELECT 1 FROM mastra_messages m WHERE m.id = d.message_id AND m."createdAt" < ?)')
        params.append(until)
    params.append(limit)
    rows = conn.exec_driver_sql(
        f"SELECT d.message_id, d.thread_id, d.resource_id, "
        f"ts_rank('{{0, 0, {float(weight)}, 1}}', d.terms, q.q) AS s "
        f"FROM {DOCS_TABLE} d, (SELECT {tsquery} AS q) q WHERE {' AND '.join(where)} "
        "ORDER BY s DESC, d.message_id LIMIT ?",
        tuple(params),
    ).all()
    return [KeywordHit(r[0], r[1], r[2], float(r[3])) for r in rows]
