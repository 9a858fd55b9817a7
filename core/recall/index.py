"""``RecallIndex``: vectors and keywords of one store, for one embedder model.

Writes go to libSQL (vectors in ``memory_messages_<dim>``, keywords in FTS5); queries are answered by
an in-process ``VectorSet`` per resource (exact dot product) plus FTS5 BM25, fused by normalised
scores (``hybrid.combine``). Every empty
or degraded answer carries a ``reason`` a person can act on.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterable, Literal, Sequence

import numpy as np
import sqlalchemy as sa

from core.errors import MemoryStudioError
from core.messages import Message
from core.storage import migrations as storage_migrations
from core.timeutil import to_iso
from core.recall import keyword, passages, vector_table
from core.recall.matrix import VectorSet
from core.recall.schema import (
    DOCS_TABLE,
    RECALL_MIGRATIONS,
    delete_docs,
    doc_state,
    ensure_vector_table,
    has_table,
    previous_text,
    upsert_docs,
    vector_table_name,
)
from core.recall.text import passage_hash, passage_text, recall_text

if TYPE_CHECKING:  # pragma: no cover
    from core.embedding import Embedder
    from core.storage import Store

Mode = Literal["vector", "keyword", "hybrid"]
MODES = ("vector", "keyword", "hybrid")
INDEXED_ROLES = passages.INDEXED_ROLES
CANDIDATES = 50  # depth of each list fed to the fusion; more than top_k so fusion can promote
MAX_CACHED_SETS = 64
DRAIN_PER_SEARCH = 20_000
MIGRATE_HINT = "run `memory-studio migrate` on this database"

log = logging.getLogger(__name__)


class RecallError(MemoryStudioError, RuntimeError):
    """Recall cannot work on this store with this embedder; the message says what to do."""


@dataclass(frozen=True)
class SearchHit:
    message_id: str
    thread_id: str | None
    resource_id: str | None
    score: float  # cosine (vector mode), -BM25 (keyword mode) or fused score in [0, 1] (hybrid mode)
    source: Literal["vector", "keyword", "hybrid"]  # which ranking(s) found it
    vector_score: float | None = None
    keyword_score: float | None = None


@dataclass
class SearchResult:
    hits: list[SearchHit]
    reason: str | None = None  # why the answer is empty or degraded; None when all went well
    mode: Mode = "hybrid"
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class IndexReport:
    indexed: list[str] = field(default_factory=list)  # message ids with a vector written
    keyword_indexed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # id -> why it is not indexed (system, empty)
    failed: dict[str, str] = field(default_factory=dict)  # id -> error (embedding or write failure)
    removed: list[str] = field(default_factory=list)  # refresh: ids whose rows were dropped (deleted, no text)
    unchanged: list[str] = field(default_factory=list)  # refresh: ids whose rows already matched

    @property
    def ok(self) -> bool:
        return not self.failed


class RecallIndex:
    def __init__(self, store: "Store", embedder: "Embedder") -> None:
        self.store = store
        self.embedder = embedder
        self.model_id = embedder.model_id
        self.dim = int(embedder.dim)
        self.table = vector_table_name(self.dim)
        self._lock = threading.RLock()
        self._sets: OrderedDict[tuple[str, str], VectorSet] = OrderedDict()
        self._counters: tuple[int, int] | None = None
        self._stale: set[tuple[str, str]] = set()
        self.term_stats = keyword.TermStats()  # document frequencies for dropping very common query words
        self._prepare()

    @classmethod
    def for_store(cls, store: "Store", embedder: "Embedder") -> "RecallIndex":
        """One index per store and embedder model, kept in ``store.extensions``."""
        key = f"recall-index:{embedder.model_id}"
        index = store.extensions.get(key)
        if index is None:
            if cls is RecallIndex and store.db.engine.dialect.name == "postgresql":
                from core.recall.pg_index import PgRecallIndex

                index = PgRecallIndex(store, embedder)
            else:
                index = cls(store, embedder)
            store.extensions[key] = index
        return index

    # -- setup ---------------------------------------------------------------------------------
    def _prepare(self) -> None:
        db = self.store.db
        with db.read() as conn:
            pending = [n for n in storage_migrations.pending(conn) if n in RECALL_MIGRATIONS]
        if pending and db.owned and not db.read_only:
            db.migrate(pending)  # our own database: our migrations apply, like at open time
        with db.read() as conn:
            self.migrated = not [n for n in storage_migrations.pending(conn) if n in RECALL_MIGRATIONS]
            self.has_fts = has_table(conn, DOCS_TABLE)
        self.writable = bool(self.migrated and not db.read_only)
        with db.read() as conn:
            self.info = vector_table.inspect(conn, self.table, self.dim)
        # Only take the write lock when the table is missing or not yet in our shape: an index built
        # for a preview or a search of an existing table must not write (nor wait on a busy writer).
        if self.writable and (self.info is None or not (self.info.has_model_id and self.info.has_our_indexes)):
            with db.write() as conn:
                ensure_vector_table(conn, self.dim)
                self.info = vector_table.inspect(conn, self.table, self.dim)

    def check(self) -> None:
        """Raise ``RecallError`` now if recall could not work (called when Memory is constructed)."""
        probe = getattr(self.embedder, "check", None)
        if callable(probe):
            probe()
        if self.info is None:
            where = self.store.location.display
            # One way forward per case: allowing writes creates nothing in a database we did not create
            # (only a migration does), so a foreign file is sent straight to the migration.
            if self.store.db.owned and self.store.db.read_only:
                raise RecallError(
                    f"Semantic recall needs the vector table {self.table}, which {where} does not have yet, and "
                    "the database is open read-only. Allow writes (Studio: File > Allow Writes) so it can be "
                    "created, or turn semantic recall off."
                )
            raise RecallError(
                f"Semantic recall needs the vector table {self.table}, which {where} does not have: it was not "
                f"created by Memory Studio. To use recall, {MIGRATE_HINT} (Studio: File > Migrate Database…); "
                "it adds the recall tables and leaves Mastra's data as it is. Or turn semantic recall off."
            )

    def status(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id, "dim": self.dim, "table": self.table, "writable": self.writable,
            "keyword_index": self.has_fts, "cached_sets": len(self._sets),
            "cached_bytes": sum(s.nbytes() for s in self._sets.values()),
        }

    # -- writing -------------------------------------------------------------------------------
    def index_messages(self, messages: Sequence[Message]) -> IndexReport:
        """Embed (as passages) and store user/assistant messages. Never raises for embedding failures."""
        report = IndexReport()
        todo: list[tuple[Message, str]] = []
        for m in messages:
            text = recall_text(m)
            if m.role not in INDEXED_ROLES:
                report.skipped[m.id] = f"{m.role} messages are not indexed"
            elif not text.strip():
                report.skipped[m.id] = "no text to index"
            else:
                todo.append((m, text))
        if not todo:
            return report
        if not self.writable:
            why = "the database is open read-only" if self.store.db.read_only else f"recall tables missing; {MIGRATE_HINT}"
            report.failed.update((m.id, f"not indexed: {why}") for m, _ in todo)
            return report
        vectors: np.ndarray | None = None
        try:
            contexts = self._contexts(todo)
        except Exception as exc:  # reported per message, never raised (spec §2.4 output)
            log.warning("recall indexing of %d message(s) failed reading their context", len(todo), exc_info=True)
            report.failed.update((m.id, f"reading the previous messages failed: {exc}") for m, _ in todo)
            return report
        try:
            texts = [passage_text(c, t) for c, (_, t) in zip(contexts, todo)]
            vectors = np.asarray(self.embedder.embed(texts, kind="passage"), dtype=np.float32)
            if vectors.shape != (len(todo), self.dim):
                raise ValueError(f"embedder returned shape {vectors.shape}, expected ({len(todo)}, {self.dim})")
        except Exception as exc:  # any embedder failure is reported, never raised (spec §2.4 output)
            log.warning("recall embedding of %d message(s) failed; keyword-indexed only", len(todo), exc_info=True)
            report.failed.update((m.id, f"embedding failed: {exc}") for m, _ in todo)
            vectors = None
        try:
            self._write(todo, contexts, vectors, report)
        except Exception as exc:
            log.warning("recall index write of %d message(s) failed", len(todo), exc_info=True)
            report.failed.update((m.id, f"write failed: {exc}") for m, _ in todo)
            report.indexed.clear()
            report.keyword_indexed.clear()
        return report

    def _contexts(self, todo: list[tuple[Message, str]]) -> list[str]:
        """The previous message's text for each message (``passages.contexts``: from storage, one
        statement per batch; for a message not stored, from the batch before it, else from storage).

        Embedded (and keyword-indexed, at a lower weight) together with the message: a reply such as
        "Yes, last Tuesday!" says nothing by itself; with the turn it answers it does. Measured on
        LoCoMo (public split, USE): vector recall@10 .333 for the message alone, .485 with the previous
        message, .434 with the next one, .464 with both. Only the previous message is known when a
        message is indexed live, so that is the recipe. The metadata keeps the bare text.
        """
        with self.store.db.read() as conn:
            stored = passages.contexts(conn, [m.id for m, _ in todo])
            loose = [(m, t) for m, t in todo if m.id not in stored]
            previous: dict[str, str] = {}
            for thread_id, first in self._first_per_thread(loose).items():
                previous[thread_id] = previous_text(conn, thread_id, to_iso(first.created_at), first.id)
        for m, text in sorted(loose, key=lambda mt: (mt[0].created_at, mt[0].id)):
            key = m.thread_id or ""
            stored[m.id] = previous.get(key, "")
            previous[key] = text
        return [stored[m.id] for m, _ in todo]

    @staticmethod
    def _first_per_thread(todo: list[tuple[Message, str]]) -> dict[str, Message]:
        first: dict[str, Message] = {}
        for m, _ in todo:
            if m.thread_id and (m.thread_id not in first or (m.created_at, m.id) < (first[m.thread_id].created_at, first[m.thread_id].id)):
                first[m.thread_id] = m
        return first

    def _write(
        self, todo: list[tuple[Message, str]], contexts: list[str], vectors: np.ndarray | None, report: IndexReport
    ) -> None:
        assert self.info is not None
        docs, rows = self._rows(todo, contexts, vectors, report)
        with self.store.db.write() as conn:
            if self.has_fts:
                upsert_docs(conn, docs)
                report.keyword_indexed.extend(m.id for m, _ in todo)
                # Writers apply the change queue (searches never write): the rows just saved, plus
                # whatever other processes changed since, up to one batch per save.
                _applied, gone = keyword.drain_queue(conn, indexed={m.id for m, _ in todo})
                if gone:
                    vector_table.delete_where(conn, self.info, "message_id", gone)
            if rows:
                vector_table.upsert(conn, self.info, rows)
        report.indexed.extend(r[0] for r in rows)

    def _rows(
        self, todo: list[tuple[Message, str]], contexts: list[str], vectors: np.ndarray | None, report: IndexReport
    ) -> tuple[list[tuple[str, str | None, str | None, str, str]], list[tuple[str, np.ndarray, dict[str, Any], str]]]:
        """What a batch writes, whatever the backend: keyword docs (id, thread, resource, text,
        context) and vector rows (id, vector, metadata, model id). A vector that is not finite is
        reported as failed and not written."""
        resources = self._resources_of(m for m, _ in todo)
        docs = [(m.id, m.thread_id, m.resource_id or resources.get(m.thread_id or ""), text, contexts[i])
                for i, (m, text) in enumerate(todo)]
        rows: list[tuple[str, np.ndarray, dict[str, Any], str]] = []
        for i, (m, text) in enumerate(todo if vectors is not None else ()):
            assert vectors is not None
            vec = vectors[i]
            if not np.all(np.isfinite(vec)):
                report.failed[m.id] = "embedding failed: vector is not finite"
                continue
            meta = {
                "message_id": m.id, "thread_id": m.thread_id, "resource_id": docs[i][2] or "",
                "role": m.role, "content": text, "created_at": to_iso(m.created_at),
                "content_hash": passage_hash(contexts[i], text),
            }
            rows.append((m.id, vec, meta, self.model_id))
        return docs, rows

    def unindexed(self, messages: Sequence[Message]) -> list[Message]:
        """The messages that have no vector from this model yet (so nothing is embedded twice)."""
        if self.info is None or not messages:
            return list(messages)
        with self.store.db.read() as conn:
            have = vector_table.indexed_message_ids(conn, self.info, self.model_id, [m.id for m in messages])
        return [m for m in messages if m.id not in have]

    def refresh_messages(self, message_ids: Sequence[str]) -> IndexReport:
        """Bring the index in line with these messages after they were edited or deleted.

        For each id: a message that no longer exists (or no longer has text to index) loses its
        vector rows and keyword doc; one whose passage — its text with the previous message's —
        hashes differently from what was indexed is re-embedded and its keyword doc re-keyed;
        otherwise nothing is written. The next message of the thread embeds this one as its
        context, so its passage is checked the same way (for a deleted message too).

        Never raises for embedding failures: a message whose new vector could not be made loses its
        stale one and is listed in ``failed`` (``reindex`` embeds it later).
        """
        if isinstance(message_ids, str):
            raise TypeError("refresh_messages() takes a sequence of message ids, not a single str")
        report = IndexReport()
        ids = list(dict.fromkeys(message_ids))
        if not ids:
            return report
        if not self.writable:
            why = "the database is open read-only" if self.store.db.read_only else f"recall tables missing; {MIGRATE_HINT}"
            report.failed.update((mid, f"not refreshed: {why}") for mid in ids)
            return report
        try:
            plan = self._refresh_plan(ids, report)
        except Exception as exc:
            log.warning("recall refresh of %d message(s) failed reading them", len(ids), exc_info=True)
            report.failed.update((mid, f"reading the messages failed: {exc}") for mid in ids)
            return report
        remove, docs, embed = plan
        rows: list[tuple[str, np.ndarray, dict[str, Any], str]] = []
        drop: list[str] = []
        if embed:
            try:
                vectors = np.asarray(
                    self.embedder.embed([passage_text(p.context, p.text) for p in embed], kind="passage"), dtype=np.float32
                )
                if vectors.shape != (len(embed), self.dim):
                    raise ValueError(f"embedder returned shape {vectors.shape}, expected ({len(embed)}, {self.dim})")
            except Exception as exc:  # reported, never raised; the stale vectors go (a wrong answer is worse)
                log.warning("recall re-embedding of %d message(s) failed", len(embed), exc_info=True)
                report.failed.update((p.message_id, f"embedding failed: {exc}") for p in embed)
                drop = [p.message_id for p in embed]
            else:
                for p, vec in zip(embed, vectors):
                    if not np.all(np.isfinite(vec)):
                        report.failed[p.message_id] = "embedding failed: vector is not finite"
                        drop.append(p.message_id)
                        continue
                    meta = {
                        "message_id": p.message_id, "thread_id": p.thread_id, "resource_id": p.resource_id or "",
                        "role": p.role, "content": p.text, "created_at": p.created_iso, "content_hash": p.hash,
                    }
                    rows.append((p.message_id, vec, meta, self.model_id))
        try:
            self._replace(remove, [(p.message_id, p.thread_id, p.resource_id, p.text, p.context) for p in docs],
                          rows, drop)
        except Exception as exc:
            log.warning("recall refresh write of %d message(s) failed", len(ids), exc_info=True)
            report.failed.update((mid, f"write failed: {exc}") for mid in ids)
            return report
        report.removed.extend(remove)
        report.keyword_indexed.extend(p.message_id for p in docs if self.has_fts)
        report.indexed.extend(r[0] for r in rows)
        touched = set(remove) | {p.message_id for p in docs} | {p.message_id for p in embed}
        report.unchanged.extend(mid for mid in ids if mid not in touched and mid not in report.skipped)
        return report

    def _refresh_plan(
        self, ids: list[str], report: IndexReport
    ) -> tuple[list[str], list[passages.StoredPassage], list[passages.StoredPassage]]:
        """(ids whose rows go, passages whose keyword doc is rewritten, passages to re-embed)."""
        with self.store.db.read() as conn:
            current = passages.load(conn, ids)
            docs_of, vecs_of = self.indexed_state(conn, ids)
            # Positions whose next message embeds the changed one: where it is now, and where the
            # index saw it (a deleted message is only known there).
            anchors: list[tuple[str, Any, str]] = []
            whole_threads: set[str] = set()
            for mid in ids:
                now = current.get(mid)
                if now is not None and now.thread_id:
                    anchors.append((now.thread_id, now.created_at, mid))
                was = vecs_of.get(mid)
                if was is not None and was.thread_id and was.created_at:
                    anchors.append((was.thread_id, was.created_at, mid))
                elif now is None and docs_of.get(mid, (None, None))[1]:
                    whole_threads.add(str(docs_of[mid][1]))  # position unknown: check its whole thread
            neighbours = passages.next_ids(conn, anchors)
            for thread_id in whole_threads:
                neighbours.update(passages.load_thread(conn, thread_id))
            neighbours -= set(ids)
            others = passages.load(conn, neighbours)
            more_docs, more_vecs = self.indexed_state(conn, list(others))
        docs_of.update(more_docs)
        vecs_of.update(more_vecs)
        remove: list[str] = []
        docs: list[passages.StoredPassage] = []
        embed: list[passages.StoredPassage] = []
        asked = set(ids)
        for mid in [*ids, *others]:
            p = current.get(mid) or others.get(mid)
            held = mid in docs_of or mid in vecs_of
            if p is None or not p.indexable:
                if p is not None and mid in asked:
                    report.skipped[mid] = (f"{p.role} messages are not indexed" if p.role not in INDEXED_ROLES
                                           else "no text to index")
                if held:
                    remove.append(mid)
                continue
            digest = p.hash
            doc = docs_of.get(mid)
            vec = vecs_of.get(mid)
            if self.has_fts and (doc[0] != digest if doc is not None else mid in asked):
                docs.append(p)
            if vec is not None:
                ours = vec.model_id in (None, self.model_id)
                if (mid in asked or ours) and vec.content_hash != digest:
                    embed.append(p)
            elif mid in asked:
                embed.append(p)
        return remove, docs, embed

    # -- storage of one backend (``PgRecallIndex`` overrides) -------------------------------------
    def indexed_state(
        self, conn: sa.Connection, ids: list[str]
    ) -> tuple[dict[str, tuple[str | None, str | None]], dict[str, vector_table.VectorState]]:
        """(keyword doc: hash and thread, vector row state) of each message the index holds."""
        docs = doc_state(conn, ids) if self.has_fts else {}
        vecs = vector_table.stored_state(conn, self.info, self.model_id, ids) if self.info is not None else {}
        return docs, vecs

    def _replace(
        self, remove: list[str], docs: list[tuple[str, str | None, str | None, str, str]],
        rows: list[tuple[str, np.ndarray, dict[str, Any], str]], drop: list[str],
    ) -> None:
        """One write: rows of ``remove`` go, ``docs`` are rewritten, ``rows`` upserted, ``drop``'s vectors go."""
        with self.store.db.write() as conn:
            if self.has_fts:
                delete_docs(conn, remove)
                upsert_docs(conn, docs)
            if self.info is not None:
                if remove or drop:
                    vector_table.delete_where(conn, self.info, "message_id", [*remove, *drop])
                if rows:
                    vector_table.upsert(conn, self.info, rows)

    def _resources_of(self, messages: Iterable[Message]) -> dict[str, str]:
        threads = {m.thread_id for m in messages if not m.resource_id and m.thread_id}
        if not threads:
            return {}
        marks = ",".join("?" * len(threads))
        with self.store.db.read() as conn:
            rows = conn.exec_driver_sql(f'SELECT id, "resourceId" FROM mastra_threads WHERE id IN ({marks})', tuple(threads))
            return {r[0]: r[1] for r in rows}

    def delete_thread(self, thread_id: str) -> None:
        if not self.writable or self.info is None:
            return
        with self.store.db.write() as conn:
            vector_table.delete_where(conn, self.info, "thread_id", [thread_id])
            if self.has_fts:
                keyword.delete_thread(conn, thread_id)

    def sync_keywords(self, limit: int = DRAIN_PER_SEARCH) -> str | None:
        """Apply queued message changes (from any process) to the keyword index; drop deleted messages' vectors.

        A writer's job (``reindex``; every ``index_messages`` drains one batch too), never a search's.
        Returns a reason when changes remain unapplied (read-only database, or a backlog over ``limit``).
        """
        if not self.has_fts:
            return None
        with self.store.db.read() as conn:
            if not keyword.has_pending(conn):
                return None
        if not self.writable:
            return "some recent messages are not keyword-indexed yet (database open read-only)"
        done = 0
        while done < limit:
            try:
                with self.store.db.write() as conn:
                    applied, gone = keyword.drain_queue(conn)
                    if gone and self.info is not None:
                        vector_table.delete_where(conn, self.info, "message_id", gone)
            except sa.exc.DBAPIError as exc:  # e.g. another process draining at the same moment
                log.warning("keyword index queue not applied: %s", exc)
                return f"keyword index not brought up to date ({exc.__class__.__name__}); retried on the next search"
            if not applied:
                return None
            done += applied
        return f"more than {limit} message changes waited for keyword indexing; the rest are applied on later searches"

    def backlog(self) -> tuple[str | None, set[str]]:
        """What a search must know about changes not yet applied to the index, without applying them.

        Returns (a note for the search's reason, or None; ids of messages deleted since they were
        indexed, which the search leaves out). Read-only: looking never writes.
        """
        if not self.has_fts:
            return None, set()
        with self.store.db.read() as conn:
            if not keyword.has_pending(conn):
                return None, set()
            gone = keyword.pending_deletes(conn)
        how = ("open this database with writes allowed to index them" if not self.writable
               else "the next save with recall indexes them (or run `memory-studio reindex`)")
        return f"some recent message changes are not keyword-indexed yet; {how}", gone

    # -- reading -------------------------------------------------------------------------------
    def keyword_search(
        self, conn: sa.Connection, query: str, *, resource_id: str | None, thread_id: str | None, limit: int,
        until: str | None = None,
    ) -> list[keyword.KeywordHit]:
        """``until``: only messages created before it (ISO text), for a past turn's view."""
        return keyword.search(conn, query, resource_id=resource_id, thread_id=thread_id, limit=limit,
                              stats=self.term_stats, until=until)

    def vector_set(self, conn: sa.Connection, resource_id: str | None, thread_id: str | None) -> VectorSet | None:
        """The cached vectors of a scope, refreshed against the table's change counters."""
        if self.info is None:
            return None
        key = ("resource", resource_id) if resource_id is not None else ("thread", thread_id or "")
        with self._lock:
            counters = vector_table.change_counters(conn, self.info)
            if self._counters is not None and counters != self._counters:
                if counters[1] != self._counters[1] or not self.info.has_our_indexes:
                    self._sets.clear()  # rows updated or deleted: reload from the store of record
                else:
                    self._stale.update(self._sets)
            self._counters = counters
            vset = self._sets.get(key)
            if vset is None:
                vset = VectorSet(self.dim, self.model_id)
                vset.extend(vector_table.load_rows(conn, self.info, resource_id=resource_id, thread_id=thread_id))
                self._sets[key] = vset
                self._stale.discard(key)
                while len(self._sets) > MAX_CACHED_SETS:
                    old, _ = self._sets.popitem(last=False)
                    self._stale.discard(old)
            elif key in self._stale:
                vset.extend(
                    vector_table.load_rows(
                        conn, self.info, resource_id=resource_id, thread_id=thread_id, after_rowid=vset.max_rowid
                    )
                )
                self._stale.discard(key)
            self._sets.move_to_end(key)
            return vset

    def search(
        self,
        query: str,
        *,
        resource_id: str | None,
        thread_id: str | None = None,
        top_k: int = 20,
        mode: Mode = "hybrid",
        threshold: float | None = None,
        until: datetime | None = None,
    ) -> SearchResult:
        """``until``: only messages created strictly before this time are scored (a past turn's view)."""
        from core.recall.search import run_search

        return run_search(self, query, resource_id=resource_id, thread_id=thread_id, top_k=top_k, mode=mode,
                          threshold=threshold, until=until)

    def close(self) -> None:
        with self._lock:
            self._sets.clear()


def delete_thread_everywhere(store: "Store", thread_id: str) -> None:
    """Drop a deleted thread's vectors from every vector table and its keyword rows, whatever the model.

    Used when recall is off in this process: another process (or a later run) may have indexed the
    thread, and its vectors must not outlive it (Mastra #12225).
    """
    db = store.db
    if db.read_only:
        return
    if db.engine.dialect.name == "postgresql":
        from core.recall.pg_index import delete_thread_everywhere as on_postgres

        on_postgres(store, thread_id)
        return
    with db.read() as conn:
        if [n for n in storage_migrations.pending(conn) if n in RECALL_MIGRATIONS]:
            return
        tables = [
            r[0] for r in conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND (name = 'memory_messages' OR name LIKE 'memory_messages\\_%' ESCAPE '\\')"
            )
        ]
        infos = [i for i in (vector_table.inspect(conn, t, 0) for t in tables) if i is not None and i.has_our_indexes]
        has_fts = has_table(conn, DOCS_TABLE)
    with db.write() as conn:
        for info in infos:
            vector_table.delete_where(conn, info, "thread_id", [thread_id])
        if has_fts:
            keyword.delete_thread(conn, thread_id)
