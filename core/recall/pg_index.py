"""``RecallIndex`` on Postgres: pgvector for vectors, ``tsvector`` for keywords.

The same object to every caller — indexing, ``search`` (``core.recall.search``: the same fusion and
re-rank), ``unindexed``, deletes, ``sync_keywords`` — with the storage calls swapped for
``pg_vectors`` and ``pg_keywords``. Nothing is cached per process: the server answers each query, so
a fleet of processes sees one index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import sqlalchemy as sa

from core.messages import Message
from core.recall import pg_keywords, pg_vectors
from core.recall import keyword
from core.recall.index import DRAIN_PER_SEARCH, RecallIndex
from core.recall.schema import DOCS_TABLE, RECALL_MIGRATIONS, doc_state, has_table
from core.recall.vector_table import VectorState
from core.storage import migrations as storage_migrations

if TYPE_CHECKING:  # pragma: no cover
    from core.storage import Store


@dataclass(frozen=True)
class PgTableInfo:
    name: str
    dim: int
    has_model_id: bool = True
    has_our_indexes: bool = True


class PgRecallIndex(RecallIndex):
    def _prepare(self) -> None:
        self.term_stats = pg_keywords.PgTermStats()
        db = self.store.db
        with db.read() as conn:
            pending = [n for n in storage_migrations.pending(conn) if n in RECALL_MIGRATIONS]
        if pending and db.owned and not db.read_only:
            db.migrate(pending)
        with db.read() as conn:
            self.migrated = not [n for n in storage_migrations.pending(conn) if n in RECALL_MIGRATIONS]
            self.has_fts = has_table(conn, DOCS_TABLE)
            exists = pg_vectors.table_exists(conn, self.table)
        self.writable = bool(self.migrated and not db.read_only)
        if self.writable and not exists:
            with db.write() as conn:
                db.lock(conn, f"recall:{self.table}")
                pg_vectors.ensure_table(conn, self.table, self.dim)
            exists = True
        self.info = PgTableInfo(self.table, self.dim) if exists else None  # type: ignore[assignment]

    def _write(
        self, todo: list[tuple[Message, str]], contexts: list[str], vectors: np.ndarray | None, report: Any
    ) -> None:
        docs, rows = self._rows(todo, contexts, vectors, report)
        with self.store.db.write() as conn:
            if self.has_fts:
                pg_keywords.upsert_docs(conn, docs)
                report.keyword_indexed.extend(m.id for m, _ in todo)
                # Writers apply the change queue (searches never write), one batch per save.
                _applied, gone = pg_keywords.drain_queue(conn)
                if gone:
                    pg_vectors.delete_where(conn, self.table, "message_id", gone)
            if rows:
                pg_vectors.upsert(conn, self.table, rows)
        report.indexed.extend(r[0] for r in rows)

    def indexed_state(
        self, conn: sa.Connection, ids: list[str]
    ) -> tuple[dict[str, tuple[str | None, str | None]], dict[str, VectorState]]:
        docs = doc_state(conn, ids) if self.has_fts else {}
        vecs = pg_vectors.stored_state(conn, self.table, self.model_id, ids) if self.info is not None else {}
        return docs, vecs

    def _replace(
        self, remove: list[str], docs: list[tuple[str, str | None, str | None, str, str]],
        rows: list[tuple[str, np.ndarray, dict[str, Any], str]], drop: list[str],
    ) -> None:
        with self.store.db.write() as conn:
            if self.has_fts:
                pg_keywords.delete_docs(conn, remove)
                pg_keywords.upsert_docs(conn, docs)
            if self.info is not None:
                pg_vectors.delete_where(conn, self.table, "message_id", [*remove, *drop])
                if rows:
                    pg_vectors.upsert(conn, self.table, rows)

    def unindexed(self, messages: Sequence[Message]) -> list[Message]:
        if self.info is None or not messages:
            return list(messages)
        with self.store.db.read() as conn:
            have = pg_vectors.indexed_ids(conn, self.table, self.model_id, [m.id for m in messages])
        return [m for m in messages if m.id not in have]

    def delete_thread(self, thread_id: str) -> None:
        if not self.writable or self.info is None:
            return
        with self.store.db.write() as conn:
            pg_vectors.delete_where(conn, self.table, "thread_id", [thread_id])
            if self.has_fts:
                pg_keywords.delete_thread(conn, thread_id)

    def backlog(self) -> tuple[str | None, set[str]]:
        """Changes not yet applied to the keyword index, read without applying them (see RecallIndex)."""
        if not self.has_fts:
            return None, set()
        with self.store.db.read() as conn:
            if not pg_keywords.has_pending(conn):
                return None, set()
            gone = pg_keywords.pending_deletes(conn)
        how = ("open this database with writes allowed to index them" if not self.writable
               else "the next save with recall indexes them (or run `memory-studio reindex`)")
        return f"some recent message changes are not keyword-indexed yet; {how}", gone

    def sync_keywords(self, limit: int = DRAIN_PER_SEARCH) -> str | None:
        if not self.has_fts:
            return None
        with self.store.db.read() as conn:
            if not pg_keywords.has_pending(conn):
                return None
        if not self.writable:
            return "some recent messages are not keyword-indexed yet (database open read-only)"
        done = 0
        while done < limit:
            with self.store.db.write() as conn:
                applied, gone = pg_keywords.drain_queue(conn)
                if gone and self.info is not None:
                    pg_vectors.delete_where(conn, self.table, "message_id", gone)
            if not applied:
                return None
            done += applied
        return f"more than {limit} message changes waited for keyword indexing; the rest are applied on later searches"

    def keyword_search(
        self, conn: sa.Connection, query: str, *, resource_id: str | None, thread_id: str | None, limit: int,
        until: str | None = None,
    ) -> list[keyword.KeywordHit]:
        return pg_keywords.search(conn, query, resource_id=resource_id, thread_id=thread_id, limit=limit,
                                  stats=self.term_stats, until=until)

    def vector_set(self, conn: sa.Connection, resource_id: str | None, thread_id: str | None) -> Any:
        if self.info is None:
            return None
        return pg_vectors.PgVectorSet(self.store, self.table, self.model_id, resource_id, thread_id)

    def status(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "dim": self.dim, "table": self.table, "writable": self.writable,
                "keyword_index": self.has_fts, "backend": "pgvector"}


def delete_thread_everywhere(store: "Store", thread_id: str) -> None:
    """Postgres form of ``index.delete_thread_everywhere``: every vector table, and the keyword docs."""
    from core.storage import dialect

    with store.db.read() as conn:
        if [n for n in storage_migrations.pending(conn) if n in RECALL_MIGRATIONS]:
            return
        tables = dialect.table_names(conn, "memory_messages")
        has_fts = has_table(conn, DOCS_TABLE)
    with store.db.write() as conn:
        for table in tables:
            pg_vectors.delete_where(conn, table, "thread_id", [thread_id])
        if has_fts:
            pg_keywords.delete_thread(conn, thread_id)
