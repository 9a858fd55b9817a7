"""Keyword docs written by saves without semantic recall.

A memory without recall (a notes agent, the Studio, a clone or fork made without it) has no embedder,
but a keyword doc needs none: its save keys its own messages' docs in its own transaction, with the
statements a recall writer's drain uses (``KeywordBackend.key_saved``), when the database has the keyword
index. Before, its messages waited for the next save with recall (2,000 a save, Known problems) and every
keyword or hybrid search of any resource read around that backlog meanwhile. Their vectors still wait for
a writer with the model (``memory-studio reindex``), as before.

A database without the keyword index (a Mastra file not migrated) gets nothing: the check is made once per
store and kept until a migration runs in this process (``Database.migrations_run``). Nor does one whose keyword
index holds no doc yet: no writer with recall has used it, so nothing searches it, and a plain save there costs
what it did (the FTS5 insert would slow it ×0.55, issue 20 item 3d's save path); its messages wait for the first
recall writer's drain, as before. The probe is one row's read a save until a doc exists, then none.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Sequence

import sqlalchemy as sa

from core.recall import passages
from core.recall.backends import KeywordBackend
from core.recall.index import keyword_backend
from core.recall.passages import INDEXED_ROLES
from core.recall.schema import RECALL_MIGRATIONS, previous_sql, text_of_raw
from core.recall.text import recall_text
from core.recall.types import DocRow
from core.storage import driver_sql, migrations
from core.timeutil import to_iso

if TYPE_CHECKING:  # pragma: no cover
    from core.messages import Message
    from core.storage import Store

log = logging.getLogger(__name__)

_KEY = "recall-own-docs"


class _Kept:
    """What ``store.extensions`` keeps: the keyword backend to write with (None: no keyword index), the
    migration count it was found at, and whether its index was seen holding a doc (``in_use``)."""

    def __init__(self, keywords: KeywordBackend | None, migrations_run: int) -> None:
        self.keywords = keywords
        self.migrations_run = migrations_run
        self.in_use = False

    def close(self) -> None:
        """(Nothing held: ``Store.close`` calls every extension's.)"""


def _keywords_of(store: "Store", conn: sa.Connection) -> KeywordBackend | None:
    """The keyword backend a save without recall writes docs with, or None when this database has no
    keyword index to write (read only; a recall index's writers need every recall migration applied)."""
    if store.db.read_only or [n for n in migrations.pending(conn) if n in RECALL_MIGRATIONS]:
        return None
    keywords = keyword_backend(store.capabilities, available=False)
    keywords.open(conn)
    return keywords if keywords.available else None


_SPANS_PER_STATEMENT = 100


def _spans(conn: sa.Connection, spans: list[tuple[str, str, str, str]]) -> list[tuple[int, str]]:
    """For each (thread, first createdAt, last createdAt, first message id): the messages of the thread stored
    in that span (every role) and the stored text of the user/assistant message before the first one, as
    ``schema.count_and_previous`` reads them, for every thread of a save in one statement (per 100)."""
    out: list[tuple[int, str]] = []
    previous = previous_sql(conn)
    for start in range(0, len(spans), _SPANS_PER_STATEMENT):
        part = spans[start:start + _SPANS_PER_STATEMENT]
        sql = " UNION ALL ".join(
            f'SELECT {i}, (SELECT count(*) FROM mastra_messages WHERE thread_id = ? AND "createdAt" >= ? '
            f'AND "createdAt" <= ?), {previous}' for i in range(len(part)))
        params = [v for thread_id, first, last, first_id in part for v in (thread_id, first, last, thread_id, first,
                                                                         first, first_id)]
        got = {int(r[0]): (int(r[1] or 0), text_of_raw(r[2]) if r[2] is not None else "")
               for r in driver_sql.rows(conn, sql, params)}
        out.extend(got[i] for i in range(len(part)))
    return out


def docs_of(conn: sa.Connection, saved: Sequence["Message"]) -> list[DocRow]:
    """The keyword doc of each saved message (an empty text for a role recall does not index, which removes
    a doc a re-save left), its context chained through the save as a recall writer chains a batch: per
    thread in (createdAt, id) order, the first taking the stored user/assistant message before it (one
    statement for the save's threads, ``_spans``), and the stored contexts read instead when the thread's
    span holds messages the save did not write (another writer's, or earlier ones it fell among)."""
    by_thread: dict[str, list["Message"]] = {}
    for m in saved:
        by_thread.setdefault(m.thread_id or "", []).append(m)
    docs: list[DocRow] = []
    chained: list[tuple[str, list["Message"], list[str]]] = []
    for thread_id, msgs in by_thread.items():
        keys = sorted(((to_iso(m.created_at), m.id), i) for i, m in enumerate(msgs))
        ordered = [msgs[i] for _, i in keys]
        if thread_id and any(m.role in INDEXED_ROLES for m in ordered):
            chained.append((thread_id, ordered, [keys[0][0][0], keys[-1][0][0]]))
        else:  # (no thread: nothing stored before; no indexed role: no doc)
            chained.append(("", ordered, []))
    spans = _spans(conn, [(t, span[0], span[1], msgs[0].id) for t, msgs, span in chained if span])
    at = iter(spans)
    for thread_id, msgs, span in chained:
        stored, previous = next(at) if span else (len(msgs), "")
        indexed = [m.id for m in msgs if m.role in INDEXED_ROLES]
        contexts = passages.contexts(conn, indexed) if stored != len(msgs) else None
        for m in msgs:
            if m.role not in INDEXED_ROLES:
                docs.append((m.id, m.thread_id, m.resource_id, "", ""))
                continue
            text = recall_text(m)
            context = contexts.get(m.id, "") if contexts is not None else previous
            docs.append((m.id, m.thread_id, m.resource_id, text, context))
            previous = text
    return docs


def key_saved(store: "Store", conn: sa.Connection, saved: Sequence["Message"]) -> None:
    """In the save's write transaction (``conn``): key the keyword docs of ``saved``, the messages a save
    without recall has just stored, under a savepoint. A failure is logged and rolled back alone: the save
    stands, and its messages wait for a recall writer's drain as they did before."""
    if not saved:
        return
    kept = store.extensions.get(_KEY)
    if not isinstance(kept, _Kept) or (kept.keywords is None and kept.migrations_run != store.db.migrations_run):
        kept = store.extensions[_KEY] = _Kept(_keywords_of(store, conn), store.db.migrations_run)
    if kept.keywords is None:
        return
    if not kept.in_use:
        if not kept.keywords.has_docs(conn):
            return  # (no recall writer has used this database's keyword index: it waits for the first one)
        kept.in_use = True
    driver_sql.execute(conn, "SAVEPOINT recall_own_docs")
    try:
        kept.keywords.key_saved(conn, docs_of(conn, saved))
        driver_sql.execute(conn, "RELEASE SAVEPOINT recall_own_docs")
    except Exception:  # (the save must never fail for its keyword docs: a recall writer's drain keys them)
        log.warning("keyword docs of %d saved message(s) not written; the next save with recall writes them",
                    len(saved), exc_info=True)
        conn.exec_driver_sql("ROLLBACK TO SAVEPOINT recall_own_docs")
        conn.exec_driver_sql("RELEASE SAVEPOINT recall_own_docs")
