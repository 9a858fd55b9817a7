"""Keyword docs written by saves without semantic recall.

A memory without recall (a notes agent, the Studio, a clone or fork made without it) has no embedder,
but a keyword doc needs none: its save keys its own messages' docs in its own transaction, with the
statements a recall writer's drain uses (``KeywordBackend.key_saved``), when the database has the keyword
index. Before, its messages waited for the next save with recall (2,000 a save, Known problems) and every
keyword or hybrid search of any resource read around that backlog meanwhile. Their vectors still wait for
a writer with the model (``memory-studio reindex``), as before.

A database without the keyword index (a Mastra file not migrated) gets nothing: the check is made once per
store and kept until a migration runs in this process (``Database.migrations_run``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Sequence

import sqlalchemy as sa

from core.recall import passages
from core.recall.backends import KeywordBackend
from core.recall.index import keyword_backend
from core.recall.passages import INDEXED_ROLES
from core.recall.schema import RECALL_MIGRATIONS, count_and_previous
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
    """What ``store.extensions`` keeps: the keyword backend to write with (None: no keyword index), and the
    migration count it was found at."""

    def __init__(self, keywords: KeywordBackend | None, migrations_run: int) -> None:
        self.keywords = keywords
        self.migrations_run = migrations_run

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


def docs_of(conn: sa.Connection, saved: Sequence["Message"]) -> list[DocRow]:
    """The keyword doc of each saved message (an empty text for a role recall does not index, which removes
    a doc a re-save left), its context chained through the save as a recall writer chains a batch: per
    thread in (createdAt, id) order, the first taking the stored user/assistant message before it; one
    statement a thread (``count_and_previous``), and the stored contexts read instead when the thread's
    span holds messages the save did not write (another writer's, or earlier ones it fell among)."""
    by_thread: dict[str, list["Message"]] = {}
    for m in saved:
        by_thread.setdefault(m.thread_id or "", []).append(m)
    docs: list[DocRow] = []
    for thread_id, msgs in by_thread.items():
        msgs.sort(key=lambda m: (to_iso(m.created_at), m.id))
        indexed = [m for m in msgs if m.role in INDEXED_ROLES]
        if not indexed:
            docs.extend((m.id, m.thread_id, m.resource_id, "", "") for m in msgs)
            continue
        first, last = to_iso(msgs[0].created_at), to_iso(msgs[-1].created_at)
        stored, previous, _after = (count_and_previous(conn, thread_id, first, last, msgs[0].id, msgs[-1].id)
                                    if thread_id else (len(msgs), "", None))
        contexts = passages.contexts(conn, [m.id for m in indexed]) if stored != len(msgs) else None
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
    driver_sql.execute(conn, "SAVEPOINT recall_own_docs")
    try:
        kept.keywords.key_saved(conn, docs_of(conn, saved))
        driver_sql.execute(conn, "RELEASE SAVEPOINT recall_own_docs")
    except Exception:  # (the save must never fail for its keyword docs: a recall writer's drain keys them)
        log.warning("keyword docs of %d saved message(s) not written; the next save with recall writes them",
                    len(saved), exc_info=True)
        conn.exec_driver_sql("ROLLBACK TO SAVEPOINT recall_own_docs")
        conn.exec_driver_sql("RELEASE SAVEPOINT recall_own_docs")
