"""Keyword search: BM25 over the FTS5 table, and draining the trigger-fed change queue into it."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from core.vector.schema import DOCS_TABLE, FTS_TABLE, QUEUE_TABLE, delete_docs, previous_text, text_of_raw, upsert_doc
from core.vector.text import keyword_query

DRAIN_BATCH = 2000
# BM25 weight of the previous-message column against the message's own (1.0); tuned on LoCoMo public.
CONTEXT_WEIGHT = 0.5


@dataclass(frozen=True)
class KeywordHit:
    message_id: str
    thread_id: str | None
    resource_id: str | None
    score: float  # -bm25: higher is better, unbounded, comparable only within one query


def pending_count(conn: sa.Connection) -> int:
    return int(conn.exec_driver_sql(f"SELECT count(*) FROM {QUEUE_TABLE}").scalar() or 0)


def drain_queue(conn: sa.Connection, limit: int = DRAIN_BATCH) -> tuple[int, list[str]]:
    """Apply up to ``limit`` queued message changes to the keyword index.

    Returns (changes applied, ids of messages that no longer exist), so the caller can drop their
    vectors too: a thread deleted by any process loses its vectors at the next drain.
    """
    rows = conn.exec_driver_sql(
        f"SELECT seq, message_id, op FROM {QUEUE_TABLE} ORDER BY seq LIMIT ?", (limit,)
    ).all()
    if not rows:
        return 0, []
    last_op: dict[str, str] = {}
    for _seq, mid, op in rows:
        last_op[mid] = op  # only the newest change of a message matters
    upserts = [m for m, op in last_op.items() if op == "upsert"]
    gone = [m for m, op in last_op.items() if op == "delete"]
    found: set[str] = set()
    for start in range(0, len(upserts), 500):
        chunk = upserts[start : start + 500]
        marks = ",".join("?" * len(chunk))
        stored = conn.exec_driver_sql(
            'SELECT m.id, m.thread_id, coalesce(m."resourceId", t."resourceId"), m.content, m.role, m."createdAt" '
            f"FROM mastra_messages m LEFT JOIN mastra_threads t ON t.id = m.thread_id WHERE m.id IN ({marks})",
            tuple(chunk),
        ).all()
        for mid, thread_id, resource_id, raw, role, created in stored:
            found.add(mid)
            text = "" if role == "system" else text_of_raw(raw)
            context = previous_text(conn, thread_id, created, mid) if text else ""
            upsert_doc(conn, mid, thread_id, resource_id, text, context)
    # An upsert whose row has vanished since (deleted in a later, not yet drained change) is a delete.
    gone.extend(m for m in upserts if m not in found)
    delete_docs(conn, gone)
    conn.exec_driver_sql(f"DELETE FROM {QUEUE_TABLE} WHERE seq <= ?", (rows[-1][0],))
    return len(rows), gone


def search(
    conn: sa.Connection, query: str, *, resource_id: str | None, thread_id: str | None, limit: int,
    context_weight: float | None = None,
) -> list[KeywordHit]:
    weight = CONTEXT_WEIGHT if context_weight is None else context_weight
    expr = keyword_query(query)
    if expr is None:
        return []
    where = [f"{FTS_TABLE} MATCH ?"]
    params: list[object] = [expr]
    if resource_id is not None:
        where.append("d.resource_id = ?")
        params.append(resource_id)
    if thread_id is not None:
        where.append("d.thread_id = ?")
        params.append(thread_id)
    params.append(limit)
    rows = conn.exec_driver_sql(
        f"SELECT d.message_id, d.thread_id, d.resource_id, bm25({FTS_TABLE}, 1.0, {float(weight)}) AS s "
        f"FROM {FTS_TABLE} "
        f"JOIN {DOCS_TABLE} d ON d.doc_id = {FTS_TABLE}.rowid WHERE {' AND '.join(where)} "
        "ORDER BY s, d.message_id LIMIT ?",
        tuple(params),
    ).all()
    return [KeywordHit(r[0], r[1], r[2], -float(r[3])) for r in rows]


def indexed_ids(conn: sa.Connection, message_ids: list[str]) -> set[str]:
    out: set[str] = set()
    for start in range(0, len(message_ids), 500):
        chunk = message_ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        out.update(
            r[0] for r in conn.exec_driver_sql(f"SELECT message_id FROM {DOCS_TABLE} WHERE message_id IN ({marks})", tuple(chunk))
        )
    return out


def delete_thread(conn: sa.Connection, thread_id: str) -> int:
    ids = [r[0] for r in conn.exec_driver_sql(f"SELECT message_id FROM {DOCS_TABLE} WHERE thread_id = ?", (thread_id,))]
    return delete_docs(conn, ids)
