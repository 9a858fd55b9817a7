"""``RecallIndex``: vectors and keywords of one store, for one embedder model.

An index is composed of a keyword backend and a vector backend, chosen by what the store's database
can do (``store.capabilities``), never by its name:

- keywords (``full_text``): FTS5 and BM25 on libSQL (``keyword.Fts5Keywords``), ``tsvector`` and
  ``ts_rank`` on Postgres (``pg_keywords.TsvectorKeywords``);
- vectors (``vectors``): float32 blobs searched in process, per scope (``matrix_vectors.MatrixVectors``),
  or pgvector searched by the server (``pg_vectors.PgVectors``).

Everything else is the index's own and the same on both: which messages are indexed and how
(passages, ``passages``), one write transaction per batch, the edit hook (``refresh_messages``), and
one search pipeline (``core.recall.search``) that the playground's explanation runs too. Every empty
or degraded answer carries a ``reason`` a person can act on.
"""

from __future__ import annotations

import logging
import operator
from datetime import datetime, timezone
from functools import lru_cache, partial
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Generator, Iterable, Sequence

import numpy as np
import sqlalchemy as sa

from core.background import BackgroundLoads
from core.messages import Message
from core.recall import pg_changes, copies, keyword, passages, pg_hybrid, pg_keywords, pieces, search as pipeline
from core.recall.backends import KeywordBackend, VectorBackend
from core.recall.matrix import ScopeVectors
from core.recall.matrix_vectors import MatrixVectors
from core.recall.pieces import Cut
from core.recall.order_cache import OrderCache
from core.recall.pg_keyword_cache import PgKeywordCache
from core.recall.pg_order import PgOrderCache
from core.recall.pg_vectors import PgVectors
from core.recall.schema import (
    DOCS_TABLE, QUEUE_TABLE, RECALL_MIGRATIONS, STATE_TABLE, batch_passage_hash, count_and_previous, ids_in_span, previous_text,
    span_and_next, vector_table_name,
)
from core.storage.catalog import has_table
from core.recall.text import passage_text, recall_text
from core.recall.types import (
    CANDIDATES as CANDIDATES,
    MIGRATE_HINT as MIGRATE_HINT,
    MODES as MODES,
    DocRow,
    IndexReport as IndexReport,
    Mode as Mode,
    PieceRow,
    RecallError as RecallError,
    SearchHit as SearchHit,
    SearchResult as SearchResult,
    VectorRow,
)
from core.recall.vector_table import VectorState
from core.storage import bulk, driver_sql, migrations as storage_migrations
from core.storage.capabilities import Capabilities
from core.timeutil import to_iso as _to_iso

if TYPE_CHECKING:  # pragma: no cover
    from core.embedding import Embedder
    from core.storage import Store

INDEXED_ROLES = passages.INDEXED_ROLES
DRAIN_PER_SEARCH = 20_000
# Messages a write re-embeds at most because the drain found their vector of another passage
# (``RecallIndex.stale_vectors``); ``refresh_messages`` checks their next messages on top.
STALE_PER_WRITE = 100

log = logging.getLogger(__name__)


def _utc_iso(dt: datetime) -> str:
    """``timeutil.to_iso``: for the UTC times messages carry, the fields put in one ``%`` template (half
    the cost of ``isoformat``, which formats the offset too, and a third of to_iso's timezone check and
    ``replace``); any other time through ``to_iso`` itself."""
    if dt.tzinfo is timezone.utc:
        return _ISO % (dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second, dt.microsecond // 1000)
    return _to_iso(dt)


_ISO = "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ"  # what ``isoformat(timespec="milliseconds")`` + "Z" writes


# A batch's times are written as text several times over (ordering, the re-check inside the save,
# metadata): each distinct time is formatted once. Equal datetimes are the same instant, and the text
# depends on nothing else.
to_iso = lru_cache(maxsize=4096)(_utc_iso)


def keyword_backend(caps: Capabilities, available: bool, log: pg_changes.ChangeLog | None = None) -> KeywordBackend:
    """The keyword backend for a database that can do ``caps.full_text`` (``log``: Postgres's change log)."""
    if caps.full_text == "fts5":
        return keyword.Fts5Keywords(available)
    kept = log.shared("keywords", lambda: PgKeywordCache(log)) if log is not None else None
    return pg_keywords.TsvectorKeywords(available, log, kept)


def vector_backend(caps: Capabilities, dim: int, model_id: str) -> VectorBackend:
    """The vector backend for a database whose vectors are ``caps.vectors``."""
    if caps.vectors == "blob-matrix":
        return MatrixVectors(dim, model_id)
    return PgVectors(dim, model_id)


def write_failure(exc: BaseException) -> str:
    """Why a recall write failed, as a report says it per message: the server's or driver's own first line,
    not SQLAlchemy's text of the error, which carries the statement and its parameters (message ids,
    texts) into the reindex summary and the log."""
    orig = getattr(exc, "orig", None) if isinstance(exc, sa.exc.StatementError) else None
    text = str(orig if orig is not None else exc).strip()
    return "write failed: " + ((text.splitlines() or [type(exc).__name__])[0])


class RecallIndex:
    def __init__(self, store: "Store", embedder: "Embedder") -> None:
        self.store = store
        self.embedder = embedder
        self.model_id = embedder.model_id
        self.dim = int(embedder.dim)
        self.table = vector_table_name(self.dim)
        caps = store.capabilities
        log = None if caps.implicit_rowid else pg_changes.log_for(store.db)  # Postgres's change log
        self.keywords = keyword_backend(caps, available=False, log=log)
        self.vectors = vector_backend(caps, self.dim, self.model_id)
        # The hybrid re-rank's reads, kept while messages do not change (appends told by ``rowid`` on
        # libSQL, by the change log on Postgres: ``pg_changes``).
        self.order: OrderCache | PgOrderCache = (OrderCache() if log is None
                                                 else log.shared("order", lambda: PgOrderCache(log)))
        # A hybrid search's lists, cosines and thread order in one statement, where the server answers
        # both halves (``pg_hybrid``); else each step reads its own (``search.run``).
        self.read_hybrid = (partial(pg_hybrid.read, keywords=self.keywords)
                            if isinstance(self.keywords, pg_keywords.TsvectorKeywords) and caps.vectors == "pgvector"
                            else None)
        # A large database's keyword memory and threads' order are loaded on threads of their own, while
        # the searches that need them answer by statements (the same hits); ``Store.close`` stops them.
        self.loads = BackgroundLoads(f"recall index of {store.location.display}")
        store.register_background(self.loads)
        if store.db.concurrent_reads:  # (a long read of the in-memory database would hold up every search)
            if isinstance(self.keywords, keyword.Fts5Keywords):
                self.keywords.memory.attach(store.db.snapshot, self.loads)
            if isinstance(self.order, OrderCache):
                self.order.attach(store.db.snapshot, self.loads)
        self._prepare()

    @classmethod
    def for_store(cls, store: "Store", embedder: "Embedder") -> "RecallIndex":
        """One index per store and embedder model, kept in ``store.extensions``."""
        key = f"recall-index:{embedder.model_id}"
        index = store.extensions.get(key)
        if index is None:
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
            self.keywords.open(conn)
        self.writable = bool(self.migrated and not db.read_only)
        self.vectors.open(db)  # (reads only: the vector table is made by the first write, ``ensure_tables``)
        with db.read() as conn:
            self.vectors.reads_pieces = self._pieces_setting(conn)

    @property
    def pieces(self) -> bool:
        """Whether this index writes and reads piece vectors (``core.recall.pieces``): held by its vector
        backend (``reads_pieces``), whose scans read the pieces' write counter only then."""
        return self.vectors.reads_pieces

    @pieces.setter
    def pieces(self, on: bool) -> None:
        self.vectors.reads_pieces = on

    def _pieces_setting(self, conn: sa.Connection) -> bool:
        """Whether this index writes and reads piece vectors (``core.recall.pieces``): the database's own
        setting for this model (``set_pieces``) when it has one, else the model's default; never over a
        vector backend that keeps none (nothing embedded for nothing)."""
        if not self.vectors.keeps_pieces:
            return False
        if has_table(conn, STATE_TABLE):
            row = conn.exec_driver_sql(f"SELECT value FROM {STATE_TABLE} WHERE key = ?",
                                       (pieces.setting_key(self.model_id),)).first()
            if row is not None and row[0] is not None:
                return bool(int(row[0]))
        return pieces.pieces_for(self.model_id)

    def set_pieces(self, on: bool | None) -> None:
        """Turn this model's piece vectors on or off for this database (None: back to the model's default,
        ``pieces.pieces_for``). Kept in the recall state table; ``memory-studio reindex`` then embeds the
        pieces that are missing, or drops them all. Saves from now on follow it."""
        if not self.writable:
            raise RecallError(f"{self.store.location.display} is open read-only; changing the pieces setting needs writes.")
        key = pieces.setting_key(self.model_id)
        with self.store.db.write() as conn:
            conn.exec_driver_sql(f"DELETE FROM {STATE_TABLE} WHERE key = ?", (key,))
            if on is not None:
                conn.exec_driver_sql(f"INSERT INTO {STATE_TABLE} (key, value) VALUES (?, ?)", (key, int(on)))
            self.pieces = self._pieces_setting(conn)

    def ensure_tables(self) -> None:
        """Before a write: the vector table for this model's dimension, made now if missing (in a write
        transaction of its own). A search or a preview never makes it: looking writes nothing."""
        if self.writable:
            self.vectors.ensure(self.store.db)

    @property
    def has_fts(self) -> bool:
        """Whether the keyword index exists (on either backend)."""
        return self.keywords.available

    @property
    def info(self) -> Any:
        """The vector table's description, or None when this database has none for this dimension."""
        return self.vectors.info

    @property
    def term_stats(self) -> keyword.TermStats:
        """Document frequencies for dropping very common query words."""
        return self.keywords.stats

    def check(self) -> None:
        """Raise ``RecallError`` now if recall could not work (called when Memory is constructed)."""
        probe = getattr(self.embedder, "check", None)
        if callable(probe):
            probe()
        if self.info is None and not self.writable:  # (writable: the first write makes the table)
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
            "keyword_index": self.has_fts, "pieces": self.pieces, **self.vectors.status(),
        }

    def piece_counts(self) -> dict[str, int]:
        """Messages with piece vectors in this dimension's table, per model (read now)."""
        with self.store.db.read() as conn:
            return self.vectors.piece_counts(conn)

    # -- writing -------------------------------------------------------------------------------
    def index_messages(self, messages: Sequence[Message]) -> IndexReport:
        """Embed (as passages) and store user/assistant messages already saved. Never raises for
        embedding or write failures: they are reported per message."""
        return self._write(self.stage(messages))

    def index_batches(self, batches: Iterable[Sequence[Message]]) -> Generator[IndexReport, None, None]:
        """``index_messages`` for each batch, in order, one report each (bulk ingest, ``reindex``).

        Pipelined: while a batch is written (the caller's thread), the next one is staged on a helper
        thread (its contexts read, its passages embedded), so the model's workers are not idle during
        the writes. Batches are taken from ``batches`` one ahead, in the caller's thread. The rows
        written are those ``index_messages`` writes batch after batch: a batch's contexts come from
        stored messages, which the index's writes do not change (contexts chained through unsaved
        messages are checked again at the write, as for a save).
        """
        source = iter(batches)
        with ThreadPoolExecutor(1, thread_name_prefix="recall-stage") as pool:

            def ahead() -> Future[StagedIndex] | None:
                batch = next(source, None)
                return None if batch is None else pool.submit(self.stage, batch)

            pending = ahead()
            while pending is not None:
                staged = pending.result()
                pending = ahead()
                yield self._write(staged)

    def _write(self, staged: "StagedIndex") -> IndexReport:
        """Commit a staged batch in its own write transaction and finish it."""
        if staged.pending:
            try:
                with self.store.db.write() as conn:
                    staged.commit(conn)
            except Exception as exc:  # the write transaction itself failed (lock, disk): reported
                staged.fail(write_failure(exc))
        return staged.finish()

    def stage(self, messages: Sequence[Message]) -> "StagedIndex":
        """Everything of indexing that needs no write lock, done now: which messages are indexed,
        their passages' contexts (read from storage, or chained through the batch for messages not
        saved yet) and their vectors. ``StagedIndex.commit`` then writes them inside the caller's
        write transaction — the one that saves the messages (``Memory.save_messages``), so a save
        with recall is one transaction, and the model never runs while the write lock is held."""
        report = IndexReport()
        todo: list[tuple[Message, str]] = []
        texts: dict[str, tuple[Any, str]] = {}
        for m in messages:
            text = recall_text(m)
            texts[m.id] = (m.content, text)
            if m.role not in INDEXED_ROLES:
                report.skipped[m.id] = f"{m.role} messages are not indexed"
            elif not text.strip():
                report.skipped[m.id] = "no text to index"
            else:
                todo.append((m, text))
        staged = StagedIndex(self, todo, report, [m for m in messages if m.role in INDEXED_ROLES])
        staged.texts = texts
        if not todo:
            return staged
        if not self.writable:
            why = "the database is open read-only" if self.store.db.read_only else f"recall tables missing; {MIGRATE_HINT}"
            staged.fail(f"not indexed: {why}")
            return staged
        try:
            self.ensure_tables()
        except Exception as exc:  # reported per message, never raised (spec §2.4 output)
            log.warning("recall indexing of %d message(s) failed making the vector table", len(todo), exc_info=True)
            staged.fail(f"making the vector table failed: {exc}")
            return staged
        try:
            staged.contexts, staged.loose = self._contexts(todo, staged.batch, texts, staged.ordered)
        except Exception as exc:  # reported per message, never raised (spec §2.4 output)
            log.warning("recall indexing of %d message(s) failed reading their context", len(todo), exc_info=True)
            staged.fail(f"reading the previous messages failed: {exc}")
            return staged
        if self.pieces:
            staged.cuts = [pieces.cut(t) for _, t in todo]
        staged.vectors = self._embed(todo, staged.contexts, report, staged.cuts)
        if staged.cuts and staged.vectors is not None:
            staged.vectors, staged.piece_vectors = self._split_pieces(staged.vectors, len(todo), staged.cuts)
        return staged

    @staticmethod
    def _split_pieces(vectors: np.ndarray, n: int, cuts: list[Cut]) -> tuple[np.ndarray, list[np.ndarray]]:
        """An embed call's passages (the first ``n``) and each message's piece vectors (after them, in order)."""
        return vectors[:n], pieces.split_vectors(vectors[n:], cuts)

    def _embed(self, todo: list[tuple[Message, str]], contexts: list[str], report: IndexReport,
               cuts: list[Cut] | None = None) -> np.ndarray | None:
        """The passages' vectors, or None (reported) when the embedder failed: keyword-indexed only.
        ``cuts``: each message's pieces, embedded in the same call after the passages (their vectors
        follow the passages' rows, in order: ``_split_pieces``)."""
        try:
            texts = [passage_text(c, t) for c, (_, t) in zip(contexts, todo)]
            extra = [p for c, (_, t) in zip(cuts, todo) for p in c.texts(t)] if cuts else []
            vectors = np.asarray(self.embedder.embed([*texts, *extra] if extra else texts, kind="passage"),
                                 dtype=np.float32)
            if vectors.shape != (len(todo) + len(extra), self.dim):
                raise ValueError(f"embedder returned shape {vectors.shape}, expected ({len(todo) + len(extra)}, {self.dim})")
            return vectors
        except Exception as exc:  # any embedder failure is reported, never raised (spec §2.4 output)
            log.warning("recall embedding of %d message(s) failed; keyword-indexed only", len(todo), exc_info=True)
            report.failed.update((m.id, f"embedding failed: {exc}") for m, _ in todo)
            return None

    def _maintain(self, resources: set[str]) -> None:
        """Keep large scopes' persisted partitions up to date; a failure costs speed, never the write."""
        if not resources:
            return
        try:
            self.vectors.maintain(self.store.db, sorted(resources))
        except Exception:
            log.warning("recall partition upkeep failed; searches of large resources scan them instead", exc_info=True)

    def _contexts(
        self, todo: list[tuple[Message, str]], batch: Sequence[Message], texts: "Texts | None" = None,
        ordered: "dict[str, list[Message]] | None" = None,
    ) -> tuple[list[str], set[str]]:
        """The previous message's text for each message, and the ids whose context was chained
        through ``batch`` (its user/assistant messages, in (createdAt, id) order) because they are not
        stored yet; stored messages' contexts come from storage (``passages.contexts``, one statement
        per batch); the first unsaved message of a thread takes the stored message before it.

        Embedded (and keyword-indexed, at a lower weight) together with the message: a reply such as
        "Yes, last Tuesday!" says nothing by itself; with the turn it answers it does. Measured on
        LoCoMo (public split, USE): vector recall@10 .333 for the message alone, .485 with the previous
        message, .434 with the next one, .464 with both. Only the previous message is known when a
        message is indexed live, so that is the recipe. The metadata keeps the bare text. ``ordered``:
        filled with each thread's chained messages in order (``_chain``).
        """
        ids = [m.id for m, _ in todo]
        with self.store.db.read() as conn:
            # The usual batch, one thread's new messages: whether any is stored and the text before its
            # first one in one read (``contexts_and_previous``); that text is the chain's start when none is.
            threads = {m.thread_id for m in batch}
            thread_id = threads.pop() if len(threads) == 1 else None
            both = None
            if thread_id:
                in_order = sorted(batch, key=_order_key)
                first = in_order[0]
                both = passages.contexts_and_previous(conn, ids, thread_id, to_iso(first.created_at), first.id)
            stored, before = both if both is not None else (passages.contexts(conn, ids), None)
            loose_ids = {m.id for m, _ in todo if m.id not in stored}
            if loose_ids and before is not None and thread_id and not stored:  # the whole batch, in order
                stored.update(self._chain(conn, in_order, loose_ids, texts, ordered, {thread_id: before}))
            elif loose_ids:
                chain = [m for m in batch if m.id not in stored or m.id in loose_ids]
                stored.update(self._chain(conn, chain, loose_ids, texts, ordered))
        return [stored[m.id] for m, _ in todo], loose_ids

    @staticmethod
    def _chain(conn: sa.Connection, chain: Sequence[Message], wanted: set[str], texts: "Texts | None" = None,
               ordered: "dict[str, list[Message]] | None" = None, start: dict[str, str] | None = None) -> dict[str, str]:
        """Contexts of ``wanted`` messages chained through ``chain`` (per thread, by (createdAt, id)),
        the first of each thread taking the stored message before it. ``texts``: recall texts already
        computed (``StagedIndex.texts``); ``ordered``: filled with each thread's messages in that order;
        ``start``: the stored text before the first message of ``chain``, already read, when ``chain`` is
        one thread's messages already in that order."""
        out: dict[str, str] = {}
        by_thread: dict[str, list[Message]] = {}
        for m in chain:
            by_thread.setdefault(m.thread_id or "", []).append(m)
        for thread_id, msgs in by_thread.items():
            if start is None or thread_id not in start:
                msgs.sort(key=_order_key)
            if ordered is not None:
                ordered[thread_id] = msgs
            first = msgs[0]
            if start is not None and thread_id in start:
                previous = start[thread_id]
            else:
                previous = previous_text(conn, thread_id or None, to_iso(first.created_at), first.id) if thread_id else ""
            for m in msgs:
                if m.id in wanted:
                    out[m.id] = previous
                previous = _text_of(m, texts)
        return out

    def _recheck(self, conn: sa.Connection, staged: "StagedIndex") -> dict[int, str]:
        """Inside the save transaction: the contexts chained before the save, compared with what is
        stored now (the save may have moved messages in time, another writer may have saved between).
        Returns {position in ``todo``: the right context} for those that differ (rare)."""
        batch = {m.id: m for m in staged.batch}
        by_thread: dict[str, list[int]] = {}
        for i, (m, _) in enumerate(staged.todo):
            if m.id in staged.loose:
                by_thread.setdefault(m.thread_id or "", []).append(i)
        right: dict[str, str] = {}
        # The save stored the staged user/assistant messages unmoved and nothing else: the saved
        # messages in a thread's span are its batch messages. Stored as staged (the very objects, in
        # order): each thread's are in the order the stage chained them, when it chained all of them.
        only_batch = staged.unmoved and len(staged.saved) == len(staged.batch)
        for thread_id, positions in by_thread.items():
            mine = [m for m in staged.batch if (m.thread_id or "") == thread_id]
            chained = staged.ordered.get(thread_id) if staged.as_staged else None
            mine = chained if chained is not None and len(chained) == len(mine) else sorted(mine, key=_order_key)
            wanted = {staged.todo[i][0].id for i in positions}
            # Another message stored among the batch's (in its span of time) would be the context of
            # one of them: counted on the (thread_id, createdAt) index alone, every role included.
            first, last = to_iso(mine[0].created_at), to_iso(mine[-1].created_at)
            saved_here = len(mine) if only_batch else sum(
                1 for m in staged.saved if (m.thread_id or "") == thread_id and first <= to_iso(m.created_at) <= last)
            head = mine[0]
            # The count, the first message's stored previous text and the message after the last, in
            # one read per thread (the last for ``_followers``).
            stored, head_previous, after = (count_and_previous(conn, thread_id, first, last, head.id, mine[-1].id)
                                            if thread_id else (saved_here, "", None))
            staged.spans[thread_id] = (stored != saved_here, after)
            if stored != saved_here:  # read every context from storage
                right.update(passages.contexts(conn, sorted(wanted)))
            elif staged.unmoved:
                # The save kept every message as staged (same times, same content), so the chain
                # through the batch is the staged one: only its first message's stored previous
                # message may have changed since (another writer).
                if head.id in wanted:
                    right[head.id] = head_previous
            else:
                right.update(self._chain(conn, mine, wanted, staged.texts))
        return {i: right[m.id] for i, (m, _) in enumerate(staged.todo)
                if m.id in right and m.id in batch and right[m.id] != staged.contexts[i]}

    def _followers(self, conn: sa.Connection, staged: "StagedIndex") -> list[str]:
        """Messages stored after a batch just written whose passage may now hold one of its messages as
        context: the next user/assistant message after each thread's batch, and, when other messages
        lie among the batch's (a turn saved after a turn that began later, two processes on one
        thread), every one of those; each only if it has a vector. One statement per thread (none for a
        thread the save's re-check read: ``staged.spans``), a second only when the span holds messages
        not in the batch. ``StagedIndex.finish`` refreshes them (``refresh_messages`` rewrites only
        those whose passage hash changed)."""
        ids = {m.id for m in staged.batch}
        by_thread: dict[str, list[Message]] = {}
        for m in staged.batch:
            if m.thread_id:
                by_thread.setdefault(m.thread_id, []).append(m)
        out: list[str] = []
        for thread_id, msgs in by_thread.items():
            chained = staged.ordered.get(thread_id) if staged.as_staged else None
            # (stored as staged: the stage's order of the thread's messages, when it chained all of them)
            msgs = chained if chained is not None and len(chained) == len(msgs) else sorted(msgs, key=_order_key)
            first, last = to_iso(msgs[0].created_at), to_iso(msgs[-1].created_at)
            known = staged.spans.get(thread_id)
            if known is None:
                stored, after = span_and_next(conn, thread_id, first, last, msgs[-1].id)
                known = (stored != len(msgs), after)
            others_among, after = known
            if after is not None and after not in ids:
                out.append(after)
            if others_among:
                out.extend(mid for mid in ids_in_span(conn, thread_id, first, last) if mid not in ids)
        if not out:
            return out
        # Only those with a vector: one without is waiting for its own indexing (a save's next step, the
        # next batch of a reindex), which reads its passage then; a drain may have written its doc already.
        _docs, vectors = self.indexed_state(conn, out)
        return [mid for mid in dict.fromkeys(out) if mid in vectors]

    def _write_staged(self, conn: sa.Connection, staged: "StagedIndex") -> set[str]:
        """Write a batch's keyword docs and vectors in the caller's transaction; returns the resources written."""
        todo, report = staged.todo, staged.report
        docs, rows = self._rows(todo, staged.contexts, staged.vectors, report, conn)
        if self.has_fts:
            self.keywords.write_docs(conn, docs)
            # Writers apply the change queue (searches never write): the rows just saved, plus
            # whatever other processes changed since, up to one batch per save.
            changed: dict[str, passages.StoredPassage] = {}
            _applied, gone = self.keywords.drain(conn, indexed={m.id for m, _ in todo}, changed=changed)
            self.vectors.delete(conn, "message_id", gone)
            if changed:  # only when other processes' updates were queued: a plain save reads nothing more
                staged.stale = self.stale_vectors(conn, changed)
        if rows:
            self.vectors.upsert(conn, rows)
            if staged.cuts:
                self.vectors.write_pieces(conn, [r[0] for r in rows], self._piece_rows(staged, rows))
        if self.has_fts:
            report.keyword_indexed.extend([m.id for m, _ in todo])
        report.indexed.extend([r[0] for r in rows])
        return {str(r[2]["resource_id"]) for r in rows if r[2].get("resource_id")}

    @staticmethod
    def _piece_rows(staged: "StagedIndex", rows: list[VectorRow]) -> list[PieceRow]:
        """The piece rows of a batch's messages whose passage row is written (``rows``)."""
        by_id = {r[0]: r for r in rows}
        out: list[PieceRow] = []
        for (m, text), cut, vecs in zip(staged.todo, staged.cuts, staged.piece_vectors):
            row = by_id.get(m.id)
            if row is None or not cut.spans:
                continue
            out.extend(pieces.rows_of(m.id, m.thread_id, row[2].get("resource_id"), text, cut, vecs) or [])
        return out

    def stale_vectors(self, conn: sa.Connection, changed: dict[str, passages.StoredPassage]) -> list[str]:
        """Of the messages a drain just re-keyed for a queued change (``changed``: their passages now),
        those whose vector of this model was embedded from another passage: a row rewritten by a program
        that left our vector in place (an SQL ``UPDATE``; a delete and a re-insert under the same id).
        Also the next message of each changed message that has no vector of ours (a ``Memory`` with recall
        off drops an edited message's vectors at once) when the next one's vector was embedded from
        another passage (its context, the changed message's text, moved). ``StagedIndex.finish`` hands
        them to ``refresh_messages`` after the commit, which re-embeds them (and checks the next message
        of each), never under the write lock.

        At most ``STALE_PER_WRITE`` changed messages of each kind a write, so one save never embeds
        thousands; the other stale ones are queued again (an ``upsert``: their docs are current) for the
        next writes. Reads one vector state per changed message (one statement; per 500 on Postgres), then a
        seek per changed message without a vector for its next one; a plain save (nothing queued) none."""
        held = self.vectors.stored_state(conn, list(changed))
        ours = {mid for mid, v in held.items() if v.model_id in (None, self.model_id)}
        stale = [mid for mid, p in changed.items()
                 if mid in ours and (not p.indexable or held[mid].stale(p.hash, p.text))]
        bare = [mid for mid, p in changed.items() if mid not in ours and p.thread_id]
        stale, later = stale[:STALE_PER_WRITE], stale[STALE_PER_WRITE:]
        if later:
            conn.exec_driver_sql(f"INSERT INTO {QUEUE_TABLE} (message_id, op) VALUES (?, 'upsert')",
                                 [(mid,) for mid in later])
        # Not queued again: a message without our vector may be any other program's re-save, or one a
        # model change left unembedded, so many of them would keep coming back; past the bound their
        # next messages wait for ``memory-studio reindex``, as before.
        bare = bare[:STALE_PER_WRITE]
        after = passages.next_ids(conn, [(str(changed[mid].thread_id), changed[mid].created_at, mid) for mid in bare])
        after -= set(changed)
        if after:
            nexts = passages.load(conn, after)
            states = self.vectors.stored_state(conn, list(nexts))
            stale.extend(mid for mid, p in nexts.items()
                         if (v := states.get(mid)) is not None and v.model_id in (None, self.model_id)
                         and p.indexable and v.stale(p.hash, p.text))
        return stale

    def _rows(
        self, todo: list[tuple[Message, str]], contexts: list[str], vectors: np.ndarray | None, report: IndexReport,
        conn: sa.Connection | None = None,
    ) -> tuple[list[DocRow], list[VectorRow]]:
        """What a batch writes, whatever the backend: keyword docs (id, thread, resource, text,
        context) and vector rows (id, vector, metadata, model id). A vector that is not finite is
        reported as failed and not written."""
        resources = self._resources_of((m for m, _ in todo), conn)
        docs = [(m.id, m.thread_id, m.resource_id or resources.get(m.thread_id or ""), text, contexts[i])
                for i, (m, text) in enumerate(todo)]
        rows: list[VectorRow] = []
        if vectors is None:
            return docs, rows
        finite = np.isfinite(vectors).all(axis=1).tolist()  # one pass per batch
        model_id = self.model_id
        for (m, text), doc, context, vec, ok in zip(todo, docs, contexts, vectors, finite):
            if not ok:
                report.failed[m.id] = "embedding failed: vector is not finite"
                continue
            meta = {
                "message_id": m.id, "thread_id": m.thread_id, "resource_id": doc[2] or "",
                "role": m.role, "content": text, "created_at": to_iso(m.created_at),
                "content_hash": batch_passage_hash(context, text),  # its keyword doc's too (remembered)
            }
            rows.append((m.id, vec, meta, model_id))
        return docs, rows

    def index_pieces(self, message_ids: Sequence[str], batch_size: int = 64) -> tuple[int, dict[str, str]]:
        """Bring these messages' piece vectors in line with their text now and the pieces setting, without
        touching their passage rows (``reindex``: messages indexed before pieces, or whose pieces are of
        another text): with pieces on, each message that cuts into pieces gets them (embedded now, a batch
        at a time, each batch written in a transaction of its own) and any other loses its own; with them
        off, every one loses them. Only messages with a passage row of this model are given pieces.
        Returns (messages whose pieces were rewritten or dropped, failures by message id)."""
        done = 0
        failed: dict[str, str] = {}
        ids = list(dict.fromkeys(message_ids))
        for start in range(0, len(ids), batch_size):
            chunk = ids[start:start + batch_size]
            with self.store.db.read() as conn:
                now = passages.load(conn, chunk)
                have = self.vectors.indexed_ids(conn, chunk) if self.info is not None else set()
            cuts = {mid: c for mid, p in now.items()
                    if self.pieces and mid in have and p.indexable and (c := pieces.cut(p.text)).spans}
            rows: list[PieceRow] = []
            if cuts:
                order = list(cuts)
                try:
                    texts = [t for mid in order for t in cuts[mid].texts(now[mid].text)]
                    vecs = np.asarray(self.embedder.embed(texts, kind="passage"), dtype=np.float32)
                    if vecs.shape != (len(texts), self.dim):
                        raise ValueError(f"embedder returned shape {vecs.shape}, expected ({len(texts)}, {self.dim})")
                except Exception as exc:  # reported per message; their pieces wait for the next run
                    log.warning("recall embedding of %d message(s)' pieces failed", len(order), exc_info=True)
                    failed.update((mid, f"embedding pieces failed: {exc}") for mid in order)
                    chunk = [mid for mid in chunk if mid not in cuts]
                    cuts = {}
                else:
                    for mid, part in zip(order, pieces.split_vectors(vecs, [cuts[mid] for mid in order])):
                        p = now[mid]
                        got = pieces.rows_of(mid, p.thread_id, p.resource_id, p.text, cuts[mid], part)
                        if got is None:
                            failed[mid] = "embedding pieces failed: vector is not finite"
                        else:
                            rows.extend(got)
            if not chunk:
                continue
            with self.store.db.write() as conn:
                self.vectors.write_pieces(conn, [mid for mid in chunk if mid not in failed], rows)
            done += len([mid for mid in chunk if mid not in failed])
        return done, failed

    def unindexed(self, messages: Sequence[Message]) -> list[Message]:
        """The messages that have no vector from this model yet (so nothing is embedded twice)."""
        if self.info is None or not messages:
            return list(messages)
        with self.store.db.read() as conn:
            have = self.vectors.indexed_ids(conn, [m.id for m in messages])
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
            self.ensure_tables()
            plan = self._refresh_plan(ids, report)
        except Exception as exc:
            log.warning("recall refresh of %d message(s) failed reading them", len(ids), exc_info=True)
            report.failed.update((mid, f"reading the messages failed: {exc}") for mid in ids)
            return report
        remove, docs, embed, texts = plan
        rows: list[VectorRow] = []
        drop: list[str] = []
        # Pieces depend on a message's own text alone: re-embedded only for a message whose text changed
        # (its pieces' text hash differs) or that has none yet; one whose context alone moved keeps them.
        cuts: dict[str, Cut] = {}
        piece_ids: list[str] = []  # messages whose pieces are replaced (with none, when the cut has none)
        if embed and self.pieces:
            try:
                with self.store.db.read() as conn:
                    held = self.vectors.piece_hashes(conn, [p.message_id for p in embed])
            except Exception:  # (the pieces wait for ``reindex``; the passages are refreshed anyway)
                log.warning("recall refresh could not read pieces of %d message(s)", len(embed), exc_info=True)
            else:
                for p in embed:
                    digest = held.get(p.message_id)
                    if digest is not None and digest == pieces.text_hash(p.text):
                        continue
                    cut = pieces.cut(p.text)
                    if cut.spans or digest is not None:
                        piece_ids.append(p.message_id)
                    if cut.spans:
                        cuts[p.message_id] = cut
        piece_rows: list[PieceRow] = []
        if embed:
            try:
                extra = [(p, c) for p in embed if (c := cuts.get(p.message_id)) is not None]
                texts_in = [passage_text(p.context, p.text) for p in embed]
                texts_in += [t for p, c in extra for t in c.texts(p.text)]
                vectors = np.asarray(self.embedder.embed(texts_in, kind="passage"), dtype=np.float32)
                if vectors.shape != (len(texts_in), self.dim):
                    raise ValueError(f"embedder returned shape {vectors.shape}, expected ({len(texts_in)}, {self.dim})")
                vectors, split = self._split_pieces(vectors, len(embed), [c for _, c in extra])
                for (p, c), vecs in zip(extra, split):
                    piece_rows.extend(pieces.rows_of(p.message_id, p.thread_id, p.resource_id, p.text, c, vecs) or [])
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
            written = {r[0] for r in rows}
            self._replace(remove, [(p.message_id, p.thread_id, p.resource_id, p.text, p.context) for p in docs],
                          rows, drop, texts, [mid for mid in piece_ids if mid in written],
                          [r for r in piece_rows if r.message_id in written])
        except Exception as exc:
            log.warning("recall refresh of %d message(s): %s", len(ids), write_failure(exc))
            log.debug("recall refresh write failed", exc_info=True)
            report.failed.update((mid, write_failure(exc)) for mid in ids)
            return report
        report.removed.extend(remove)
        report.keyword_indexed.extend(p.message_id for p in docs if self.has_fts)
        report.indexed.extend(r[0] for r in rows)
        touched = set(remove) | {p.message_id for p in docs} | {p.message_id for p in embed}
        report.unchanged.extend(mid for mid in ids if mid not in touched and mid not in report.skipped)
        return report

    def _refresh_plan(
        self, ids: list[str], report: IndexReport
    ) -> tuple[list[str], list[passages.StoredPassage], list[passages.StoredPassage], dict[str, str | None]]:
        """(ids whose rows go, passages whose keyword doc is rewritten, passages to re-embed, each asked
        message's recall text now: None when it is gone or has no text)."""
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
        texts: dict[str, str | None] = {}
        for mid in ids:
            now = current.get(mid)
            texts[mid] = now.text if now is not None and now.text.strip() else None
        return remove, docs, embed, texts

    def indexed_state(
        self, conn: sa.Connection, ids: list[str]
    ) -> tuple[dict[str, tuple[str | None, str | None]], dict[str, VectorState]]:
        """(keyword doc: passage hash and thread, vector row state) of each message the index holds."""
        docs = self.keywords.doc_state(conn, ids) if self.has_fts else {}
        return docs, self.vectors.stored_state(conn, ids)

    def _replace(self, remove: list[str], docs: list[DocRow], rows: list[VectorRow], drop: list[str],
                 texts: dict[str, str | None] | None = None, piece_ids: Sequence[str] = (),
                 piece_rows: Sequence[PieceRow] = ()) -> None:
        """One write: rows of ``remove`` go, ``docs`` are rewritten, ``rows`` upserted, ``drop``'s vectors go;
        ``texts`` (message id: its text now, None when gone): their other vector rows holding another
        text (Mastra's, any table) go too (``copies.drop_stale_copies``)."""
        with self.store.db.write() as conn:
            if self.has_fts:
                self.keywords.delete_docs(conn, remove)
                self.keywords.write_docs(conn, docs)
            if texts:
                copies.drop_stale_copies(conn, texts, self.info.name if self.info is not None else None)
            self.vectors.delete(conn, "message_id", [*remove, *drop])
            if rows:
                self.vectors.upsert(conn, rows)
            if piece_ids:
                self.vectors.write_pieces(conn, piece_ids, piece_rows)

    def _resources_of(self, messages: Iterable[Message], conn: sa.Connection | None = None) -> dict[str, str]:
        """The resource of each message's thread, for messages saved without one (``conn``: read in
        the caller's transaction, which may have just created the thread)."""
        threads = {m.thread_id for m in messages if not m.resource_id and m.thread_id}
        if not threads:
            return {}
        if conn is None:
            with self.store.db.read() as own:
                return self._thread_resources(own, threads)
        return self._thread_resources(conn, threads)

    @staticmethod
    def _thread_resources(conn: sa.Connection, threads: set[str]) -> dict[str, str]:
        marks = ",".join("?" * len(threads))
        rows = conn.exec_driver_sql(f'SELECT id, "resourceId" FROM mastra_threads WHERE id IN ({marks})', tuple(threads))
        return {r[0]: r[1] for r in rows}

    def delete_thread(self, thread_id: str) -> None:
        if self.store.db.read_only:
            return
        with self.store.db.write() as conn:
            # Every vector table, not only this model's, and before any migration: Mastra's rows of the
            # thread (its embedder, maybe another dimension) would otherwise keep its text for Mastra to recall.
            vector_backend_class(self.store.capabilities).delete_thread_everywhere(conn, thread_id)
            if self.writable and self.has_fts:
                self.keywords.delete_thread(conn, thread_id)

    def sync_keywords(self, limit: int = DRAIN_PER_SEARCH, touched: dict[str, str | None] | None = None) -> str | None:
        """Apply queued message changes (from any process) to the keyword index; drop deleted messages' vectors.

        A writer's job (``reindex``; every ``index_messages`` drains one batch too), never a search's.
        Returns a reason when changes remain unapplied (read-only database, or a backlog over ``limit``).
        ``touched``: filled with every message whose keyword doc was written or dropped, and its resource
        (None: the message is gone). The queue is the whole database's, whichever resource a caller is for.
        """
        if not self.has_fts:
            return None
        with self.store.db.read() as conn:
            if not self.keywords.has_pending(conn):
                return None
        if not self.writable:
            return "some recent messages are not keyword-indexed yet (database open read-only)"
        done = 0
        while done < limit:
            try:
                with self.store.db.write() as conn:
                    drained: dict[str, str | None] = {}  # (kept only once its transaction commits)
                    applied, gone = self.keywords.drain(conn, touched=drained)
                    self.vectors.delete(conn, "message_id", gone)
                if touched is not None:
                    touched.update(drained)
            except (sa.exc.DBAPIError, ValueError) as exc:  # e.g. another process draining at the same moment (libSQL's
                # driver errors arrive as bare ValueErrors through the driver's cursor)
                log.warning("keyword index queue not applied: %s", exc)
                return f"keyword index not brought up to date ({exc.__class__.__name__}); retried on the next search"
            if not applied:
                return None
            done += applied
        return f"more than {limit} message changes waited for keyword indexing; the rest are applied on later searches"

    def backlog(self, conn: sa.Connection | None = None) -> tuple[str | None, set[str], set[str] | None]:
        """What a search must know about changes not yet applied to the index, without applying them.

        Returns (a note for the search's reason, or None; ids of messages deleted since they were
        indexed, which the search leaves out; ids of messages updated since, whose keyword hits
        ``edited_since_indexed`` checks, or None: check every hit). Read-only: looking never writes.
        ``conn``: a read connection the caller holds (else one is opened).
        """
        if not self.has_fts:
            return None, set(), set()
        if conn is None:
            with self.store.db.read() as own:
                return self.backlog(own)
        if not self.keywords.has_pending(conn):
            return None, set(), set()
        gone, updated = self.keywords.pending_changes(conn)
        how = ("open this database with writes allowed to index them" if not self.writable
               else "the next save with recall indexes them (or run `memory-studio reindex`)")
        return f"some recent message changes are not keyword-indexed yet; {how}", gone, updated

    def edited_since_indexed(self, conn: sa.Connection, message_ids: Sequence[str], *, queued: bool = True) -> set[str]:
        """Of these messages, those with an update queued whose keyword doc holds another passage than
        the message has now: edited (or emptied) since indexed by a process without recall or by another
        program. ``queued``: each id is known to have an update queued (libSQL lists them:
        ``KeywordBackend.pending_changes``); else only those the queue holds an update of are checked
        (Postgres). Read-only: their docs' passage hashes against their passages now, two statements
        (none when no id is given). A doc whose hash is equal (an edit undone, a re-save of the same text,
        a re-key queued by ``pg_schema`` 0026) stands; a message without a doc (written by another
        program, never keyword-indexed) is not one. The passage holds the previous message's text too:
        a message re-saved with its own text unchanged after its previous message was edited, both before
        a recall write, is left out as well (until that write)."""
        ids = list(dict.fromkeys(message_ids))
        if not ids or not self.has_fts:
            return set()
        docs: dict[str, tuple[str | None, str | None]] = {}
        if queued:
            docs = self.keywords.doc_state(conn, ids)
        else:  # (the queue's ``message_id`` index, migration ``0025_recall_queue_by_message``, finds them)
            for marks, params in bulk.in_lists(conn, ids):
                docs.update((mid, (digest, None)) for mid, digest in conn.exec_driver_sql(
                    f"SELECT d.message_id, d.content_hash FROM {DOCS_TABLE} d WHERE d.message_id IN ({marks}) "
                    f"AND EXISTS (SELECT 1 FROM {QUEUE_TABLE} q WHERE q.message_id = d.message_id "
                    "AND q.op IN ('upsert', 'delete'))",  # a delete of a message stored now: written again since
                    params))
        if not docs:
            return set()
        now = passages.load(conn, list(docs))
        return {mid for mid, (digest, _thread) in docs.items()
                if (p := now.get(mid)) is None or not p.indexable or p.hash != digest}

    def edited_note(self, count: int) -> str:
        """The search's reason for ``count`` keyword candidates left out as edited since indexed."""
        one = count == 1
        until = ("this database is opened with writes allowed" if not self.writable
                 else "the next save with recall or `memory-studio reindex`")
        return (f"{count} message{'' if one else 's'} edited since {'it was' if one else 'they were'} keyword-indexed "
                f"{'is' if one else 'are'} left out of keyword results until {until} indexes "
                f"{'its' if one else 'their'} new text (the keyword index still holds the text before the edit)")

    # -- reading -------------------------------------------------------------------------------
    def keyword_search(
        self, conn: sa.Connection, query: str, *, resource_id: str | None, thread_id: str | None, limit: int,
        until: str | None = None,
    ) -> list[keyword.KeywordHit]:
        """``until``: only messages created before it (ISO text), for a past turn's view."""
        return self.keywords.search(conn, query, resource_id=resource_id, thread_id=thread_id, limit=limit, until=until)

    def vector_set(self, conn: sa.Connection, resource_id: str | None, thread_id: str | None) -> ScopeVectors | None:
        """The vectors of a scope as a search reads them (None: no vector table for this model's dimension)."""
        return self.vectors.scope(conn, resource_id, thread_id)

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
        unstored: frozenset[str] = frozenset(),
        exclude_thread: str | None = None,
    ) -> SearchResult:
        """``until``: only messages created strictly before this time are scored (a past turn's view);
        ``unstored``: messages searched as if not indexed (that view's messages stored after it);
        ``exclude_thread``: a thread whose messages are never candidates, as if not indexed in this
        scope (an SDK session's own thread: its model receives it anyway)."""
        return pipeline.run_search(self, query, resource_id=resource_id, thread_id=thread_id, top_k=top_k, mode=mode,
                                   threshold=threshold, until=until, unstored=unstored, exclude_thread=exclude_thread)

    def close(self) -> None:
        self.vectors.close()


# A batch's recall texts by message id, with the content each was computed from.
Texts = dict[str, tuple[Any, str]]


def _text_of(m: Message, texts: Texts | None) -> str:
    """``recall_text(m)``, from ``texts`` when it was computed from this very content."""
    known = texts.get(m.id) if texts else None
    return known[1] if known is not None and known[0] is m.content else recall_text(m)


def _order_key(m: Message) -> tuple[str, str]:
    """A message's place in its thread as storage orders it: (createdAt as stored, id)."""
    return (to_iso(m.created_at), m.id)


class StagedIndex:
    """A batch made ready by ``RecallIndex.stage``: contexts and vectors computed, nothing written.

    ``commit(conn)`` writes it inside the caller's write transaction, under a savepoint: a failing
    index write is reported per message and rolled back alone, never taking the save with it.
    ``finish()`` then does what follows a commit (partition upkeep) and returns the report.
    """

    def __init__(self, index: RecallIndex, todo: list[tuple[Message, str]], report: IndexReport,
                 batch: list[Message]) -> None:
        self.index = index
        self.todo = todo
        self.report = report
        self.batch = batch  # the batch's user/assistant messages (contexts chain through them)
        self.saved: list[Message] = list(batch)  # every message the save stored (any role)
        self.contexts: list[str] = []
        self.loose: set[str] = set()  # ids whose context was chained through the batch
        self.ordered: dict[str, list[Message]] = {}  # each thread's chained messages in (createdAt, id) order
        self.vectors: np.ndarray | None = None
        self.cuts: list[Cut] = []  # each staged message's pieces (empty: the index writes none)
        self.piece_vectors: list[np.ndarray] = []  # ... and their vectors (``RecallIndex._split_pieces``)
        self.texts: Texts = {}  # recall text of each staged message (``_text_of``)
        self.unmoved = False  # the save stored every staged message as it was staged (``commit``)
        self.as_staged = False  # ... and nothing else: the very objects staged, in order
        self.pending = bool(todo)
        self._written: set[str] = set()
        self.followers: list[str] = []  # stored after the batch, their passages to check (``finish``)
        self.stale: list[str] = []  # re-keyed by the drain, their vectors of another passage (``finish``)
        # thread id: (other messages stored among the batch's, the message after its last), read by ``_recheck``
        self.spans: dict[str, tuple[bool, str | None]] = {}

    def fail(self, why: str) -> None:
        """Nothing of this batch gets indexed; every message says why."""
        self.report.failed.update((m.id, why) for m, _ in self.todo)
        self.report.indexed.clear()
        self.report.keyword_indexed.clear()
        self.pending = False

    def commit(self, conn: sa.Connection, saved: Sequence[Message] | None = None) -> None:
        """Write the batch in ``conn``'s transaction. ``saved``: the messages as the save stored them
        (times may have moved); messages staged but not saved are left out."""
        if not self.pending:
            return
        self.pending = False
        index = self.index
        if saved is not None and self._stored_as_staged(saved):
            self.unmoved = self.as_staged = True  # nothing left out, nothing moved: todo and batch stay
            self.saved = list(saved)
        elif saved is not None:
            final = {m.id: m for m in saved}
            kept = [i for i, (m, _) in enumerate(self.todo) if m.id in final]
            if len(kept) < len(self.todo):
                for m, _ in self.todo:
                    if m.id not in final:
                        self.report.skipped[m.id] = "not saved"
                self.contexts = [self.contexts[i] for i in kept]
                self.vectors = self.vectors[kept] if self.vectors is not None else None
                if self.cuts:
                    self.cuts = [self.cuts[i] for i in kept]
                    self.piece_vectors = [self.piece_vectors[i] for i in kept] if self.piece_vectors else []
            self.todo = [(final[self.todo[i][0].id], self.todo[i][1]) for i in kept]
            # The save may have moved messages in time (copies): then the re-check chains again.
            self.unmoved = all(final.get(m.id) is m for m in self.batch)
            self.batch = [final.get(m.id, m) for m in self.batch if m.id in final]
            self.saved = list(saved)
        if not self.todo:
            return
        driver_sql.execute(conn, "SAVEPOINT recall_index")
        try:
            if self.loose:
                moved = index._recheck(conn, self)
                if moved:  # rare: re-embed those whose context changed, inside the transaction
                    for i, ctx in moved.items():
                        self.contexts[i] = ctx
                    if self.vectors is not None:
                        part = [self.todo[i] for i in moved]
                        again = index._embed(part, [self.contexts[i] for i in moved], self.report)
                        if again is None:
                            self.vectors = None
                        else:
                            self.vectors[list(moved)] = again
            self._written = index._write_staged(conn, self)
            self.followers = index._followers(conn, self)
            if self.stale:
                self.followers = list(dict.fromkeys([*self.followers, *self.stale]))
            driver_sql.execute(conn, "RELEASE SAVEPOINT recall_index")
        except Exception as exc:
            log.warning("recall index of %d message(s): %s", len(self.todo), write_failure(exc))
            log.debug("recall index write failed", exc_info=True)
            conn.exec_driver_sql("ROLLBACK TO SAVEPOINT recall_index")
            conn.exec_driver_sql("RELEASE SAVEPOINT recall_index")
            self.fail(write_failure(exc))
            self._written = set()
            self.stale = []

    def _stored_as_staged(self, saved: Sequence[Message]) -> bool:
        """Whether the save stored the very messages staged, in order, and no other (the usual save)."""
        return len(saved) == len(self.saved) and all(map(operator.is_, saved, self.saved))

    def finish(self) -> IndexReport:
        """After the transaction committed: partition upkeep of the resources written, the passages of
        the messages the batch became the context of (``RecallIndex._followers``); the report."""
        self.index._maintain(self._written)
        self._written = set()
        followers, self.followers = self.followers, []
        if followers:
            try:
                self.index.refresh_messages(followers)
            except Exception:  # a stale context costs recall a little, never the save (reindex finds it)
                log.warning("recall refresh of %d message(s) after the batch failed", len(followers), exc_info=True)
        return self.report


def vector_backend_class(caps: Capabilities) -> type[MatrixVectors] | type[PgVectors]:
    return MatrixVectors if caps.vectors == "blob-matrix" else PgVectors


def drop_stale_vectors_everywhere(store: "Store", message_ids: Sequence[str]) -> int:
    """Recall off in this process: the vector rows of these changed or deleted messages that hold another
    text than the message has now go from every vector table, Mastra's included (Mastra's
    ``updateMessages`` / ``deleteMessages`` remove them), so an edit leaves no copy of the old text for
    a search, ours or Mastra's, to find. Rows of the current text stay; ``reindex`` embeds the rest."""
    db = store.db
    ids = list(dict.fromkeys(message_ids))
    if db.read_only or not ids:
        return 0
    found = store.memory.get_messages(ids)
    now = {m.id: recall_text(m) for m in found if isinstance(m, Message)}
    unread = {m.id for m in found if not isinstance(m, Message)}  # (a row that cannot be read: left alone)
    texts: dict[str, str | None] = {mid: now[mid] if now.get(mid, "").strip() else None
                                    for mid in ids if mid not in unread}
    with db.write() as conn:
        return copies.drop_stale_copies(conn, texts, None)


def delete_thread_everywhere(store: "Store", thread_id: str) -> None:
    """Drop a deleted thread's vectors from every vector table and its keyword rows, whatever the model.

    Used when recall is off in this process: another process (or a later run) may have indexed the
    thread, and its vectors must not outlive it (Mastra #12225).
    """
    db = store.db
    if db.read_only:
        return
    with db.read() as conn:  # (vectors go before any migration too: Mastra's own tables hold them)
        has_fts = has_table(conn, DOCS_TABLE) and not [
            n for n in storage_migrations.pending(conn) if n in RECALL_MIGRATIONS]
    caps = store.capabilities
    with db.write() as conn:
        vector_backend_class(caps).delete_thread_everywhere(conn, thread_id)
        if has_fts:
            keyword_backend(caps, True).delete_thread(conn, thread_id)
