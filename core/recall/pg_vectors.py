"""Vectors in pgvector, in Mastra's PgVector layout, and the scope view a search reads.

``memory_messages_<dim>`` as ``@mastra/pg``'s ``PgVector.createIndex`` makes it: ``id SERIAL``,
``vector_id TEXT``, ``embedding vector(<dim>)``, ``metadata JSONB``, ``namespace`` with a unique
``(namespace, vector_id)`` index, and an HNSW index ``<table>_vector_idx`` with ``vector_cosine_ops``
(m 8, ef_construction 32, Mastra's defaults; none above ``HNSW_MAX_DIM`` dimensions). We add ``model_id`` (as on libSQL) and expression
indexes on the metadata keys a scope filters by.

Unlike libSQL, nothing is cached in the process: Postgres answers the nearest-neighbour query itself,
so every process of a fleet sees every other's vectors at once.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np
import sqlalchemy as sa

from core.recall import hybrid, pg_changes, pg_keywords, pg_pieces, pieces
from core.recall.matrix import ScopeVectors, SkipCounts
from core.recall.pg_order import text_array
from core.recall.pg_vector_cache import PgVectorCache
from core.recall.schema import DOCS_TABLE, quoted, vector_table_name
from core.recall.types import MessagePieces, PieceEstimate, PieceRow
from core.recall.vector_table import VectorState
from core.storage import catalog
from core.storage.pg import cursor
from core.storage.pg.adapt import HNSW_SESSION
from core.stored_text import json_text

if TYPE_CHECKING:  # pragma: no cover
    from core.storage.database import Database

log = logging.getLogger(__name__)

NAMESPACE = "default"  # Mastra's DEFAULT_NAMESPACE
HNSW_M, HNSW_EF_CONSTRUCTION = 8, 32
EF_SEARCH_MIN = 40
# pgvector refuses an HNSW index on a ``vector`` column of more dimensions ("column cannot have more than
# 2000 dimensions for hnsw index"): OpenAI's text-embedding-3-large has 3072. Without this limit the vector
# table was never made and recall found nothing, a traceback logged for every indexed batch.
HNSW_MAX_DIM = 2000
EF_SEARCH_MAX = 1000  # pgvector's upper bound for ``hnsw.ef_search``
EF_SEARCH_SESSION = int(HNSW_SESSION["hnsw.ef_search"])  # what every connection starts with
META_KEYS = ("resource_id", "thread_id", "message_id")


def ensure_table(conn: sa.Connection, table: str, dim: int) -> None:
    """Make the vector table, or finish one made without our column and indexes (Mastra's), then have its
    writes logged. Only what is missing is run: Postgres takes a table's lock before an ``IF NOT EXISTS``
    finds there is nothing to do (``ALTER TABLE`` its strongest), and a process whose first write comes
    after another process made the table would queue that lock behind every open read of the table,
    with every later read and write of it queued behind the lock."""
    q = quoted(table)
    conn.exec_driver_sql(
        f"CREATE TABLE IF NOT EXISTS {q} (id SERIAL PRIMARY KEY, vector_id TEXT NOT NULL, "
        f"embedding vector({int(dim)}), metadata JSONB DEFAULT '{{}}'::jsonb, "
        f"namespace VARCHAR(255) NOT NULL DEFAULT '{NAMESPACE}')"
    )
    if "model_id" not in {c[0] for c in catalog.table_columns(conn, table)}:
        conn.exec_driver_sql(f"ALTER TABLE {q} ADD COLUMN IF NOT EXISTS model_id TEXT")
    indexes = [(f"{table}_namespace_vector_id_idx", f"CREATE UNIQUE INDEX IF NOT EXISTS {{}} ON {q} (namespace, vector_id)")]
    if dim <= HNSW_MAX_DIM:
        indexes.append((f"{table}_vector_idx", f"CREATE INDEX IF NOT EXISTS {{}} ON {q} USING hnsw "
                                               f"(embedding vector_cosine_ops) WITH (m = {HNSW_M}, "
                                               f"ef_construction = {HNSW_EF_CONSTRUCTION})"))
    else:  # an exact scan answers the same statements (as for a ranking deeper than HNSW lists)
        log.info("%s: %d dimensions are more than pgvector's HNSW index takes (%d); searches scan the table",
                 table, dim, HNSW_MAX_DIM)
    indexes += [(f"{table}_{key}", f"CREATE INDEX IF NOT EXISTS {{}} ON {q} ((metadata->>'{key}'))")
                for key in META_KEYS]
    for name, sql in indexes:
        if cursor.rows(conn, "SELECT to_regclass(?) IS NULL", (quoted(name),))[0][0]:
            conn.exec_driver_sql(sql.format(quoted(name)))
    log_table_writes(conn, table)


def log_table_writes(conn: sa.Connection, table: str) -> None:
    """Have the table's writes told in the change log (``pg_changes``), when the database has one and
    they are not yet (a table made by Mastra after the log's migration gets them at our first write)."""
    if catalog.has_table(conn, pg_changes.LOG_TABLE) and not pg_changes.has_log(conn, table):
        for sql in pg_changes.vector_table_ddl(table):
            conn.exec_driver_sql(sql)


def literal(vec: np.ndarray) -> str:
    """pgvector's text form of one vector (sent untyped and cast with ``::vector``)."""
    return "[" + ",".join(map(repr, np.asarray(vec).tolist())) + "]"


def upsert(conn: sa.Connection, table: str, rows: Sequence[tuple[str, np.ndarray, dict[str, Any], str]]) -> None:
    conn.exec_driver_sql(
        f"INSERT INTO {quoted(table)} (vector_id, embedding, metadata, namespace, model_id) "
        "VALUES (?, CAST(? AS vector), CAST(? AS jsonb), ?, ?) ON CONFLICT (namespace, vector_id) DO UPDATE SET "
        "embedding = EXCLUDED.embedding, metadata = EXCLUDED.metadata, model_id = EXCLUDED.model_id",
        [(vid, literal(vec), _jsonb(meta), NAMESPACE, model) for vid, vec, meta, model in rows],
    )


def _jsonb(meta: dict[str, Any]) -> str:
    """A row's metadata as JSON that ``jsonb`` takes: it refuses ``\\u0000``, so a NUL in a value (a
    message's text may hold one; ids cannot) is stored as U+FFFD in this copy of the text. The message
    itself keeps its NUL, and the row's ``content_hash`` is of the text as it is."""
    if any(type(v) is str and "\x00" in v for v in meta.values()):
        meta = {k: v.replace("\x00", "\ufffd") if type(v) is str else v for k, v in meta.items()}
    return json_text(meta, ensure_ascii=False)


def delete_where(conn: sa.Connection, table: str, key: str, values: list[str]) -> int:
    if key not in META_KEYS or not values:
        return 0
    return int(conn.exec_driver_sql(
        f"DELETE FROM {quoted(table)} WHERE metadata->>'{key}' = ANY(CAST(? AS text[]))", (values,)
    ).rowcount or 0)


def indexed_ids(conn: sa.Connection, table: str, model_id: str, message_ids: list[str]) -> set[str]:
    rows = conn.exec_driver_sql(
        f"SELECT metadata->>'message_id' FROM {quoted(table)} WHERE metadata->>'message_id' = ANY(CAST(? AS text[])) "
        "AND model_id = ?", (message_ids, model_id),
    )
    return {r[0] for r in rows}


def stored_state(conn: sa.Connection, table: str, model_id: str, message_ids: list[str]) -> dict[str, VectorState]:
    """Each message's row (the one from ``model_id`` when it has several), for comparing hashes."""
    out: dict[str, VectorState] = {}
    if not message_ids:
        return out
    rows = conn.exec_driver_sql(
        f"SELECT metadata->>'message_id', metadata->>'content_hash', model_id, metadata->>'thread_id', "
        f"metadata->>'created_at', metadata->>'content' FROM {quoted(table)} WHERE metadata->>'message_id' = ANY(CAST(? AS text[]))",
        (message_ids,),
    )
    for mid, digest, model_of, thread_id, created, content in rows:
        if mid not in out or model_of == model_id:
            out[mid] = VectorState(digest, model_of, thread_id, created, content)
    return out


class PgVectorSet:
    """The vectors of one scope as ``core.recall.search`` reads them (the ``VectorSet`` interface).

    ``ranked`` asks Postgres (HNSW, iterative scan for filtered queries); ``cosines`` computes exact
    similarities of named messages in the server. ``n`` is counted only when a search needs it.
    """

    def __init__(self, db: "Database", table: str, model_id: str, resource_id: str | None, thread_id: str | None) -> None:
        self.db, self.table, self.model_id = db, table, model_id
        self.resource_id, self.thread_id = resource_id, thread_id
        self.skips = SkipCounts()
        self._n: int | None = None
        # The searching read connection (``PgVectors.scope``): its transaction answers ``ranked`` and
        # ``cosines`` too, instead of a connection of their own each (a pool check-out with its ping,
        # BEGIN and ROLLBACK: three round trips, most of a hybrid search's time on a busy server).
        self.conn: sa.Connection | None = None
        self._ef_local: int | None = None  # ``hnsw.ef_search`` set for ``conn``'s transaction by ``ranked``
        # Cosines ``ranked`` read with its list (of the keyword list's messages), for ``cosines``:
        # (the query vector, the ids asked for, their cosines).
        self._early: tuple[np.ndarray, set[str], dict[str, float]] | None = None

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        """The search's connection while its transaction is open, else one of our own (a view kept
        after its search, e.g. by the recall playground)."""
        if self.conn is not None and cursor.in_transaction(self.conn):
            yield self.conn
        else:
            with self.db.read() as conn:
                yield conn

    def _scope(self, thread_id: str | None) -> tuple[str, list[Any]]:
        where: list[str] = ["model_id = ?"]
        params: list[Any] = [self.model_id]
        if self.resource_id is not None:
            where.append("metadata->>'resource_id' = ?")
            params.append(self.resource_id)
        if self.thread_id is not None or thread_id is not None:
            where.append("metadata->>'thread_id' = ?")
            params.append(thread_id if thread_id is not None else self.thread_id)
        return " AND ".join(where), params

    @property
    def n(self) -> int:
        if self._n is None:
            where, params = self._scope(None)
            with self._read() as conn:
                self._n = int(conn.exec_driver_sql(f"SELECT count(*) FROM {quoted(self.table)} WHERE {where}", tuple(params)).scalar() or 0)
                other = conn.exec_driver_sql(
                    f"SELECT model_id, count(*) FROM {quoted(self.table)} WHERE {where.replace('model_id = ?', 'model_id IS DISTINCT FROM ?')} "
                    "GROUP BY model_id", tuple(params),
                ).all()
            for model, count in other:
                self.skips.other_model[str(model)] += int(count)
        return self._n

    def listing(self, q: str, depth: int, thread_id: str | None, until: str | None,
                exclude_thread: str | None = None) -> tuple[str, list[Any], int, bool]:
        """``ranked``'s statement: (SQL, parameters, the ``hnsw.ef_search`` it needs, whether it is an
        exact scan). Rows: (message id, thread id, resource id, cosine), nearest first, ``2 * depth``
        of them (several chunk vectors of one message are possible). ``q``: the query's ``literal``;
        ``exclude_thread``: no row of that thread (the iterative scan goes on past them)."""
        where, params = self._scope(thread_id)
        if until is not None:  # a past turn's view: only messages created before it (ISO text order)
            where += " AND metadata->>'created_at' < ?"
            params = [*params, until]
        if exclude_thread is not None:  # (rows without a thread are kept, as on libSQL)
            where += " AND metadata->>'thread_id' IS DISTINCT FROM ?"
            params = [*params, exclude_thread]
        ef_search = max(EF_SEARCH_MIN, 2 * depth)
        # More rows than HNSW may list (explain's ranking of a whole scope above 500 vectors): an exact
        # scan, by an order the index cannot serve (the distance plus zero), no HNSW settings needed.
        exact = ef_search > EF_SEARCH_MAX
        distance = "(embedding <=> CAST(? AS vector)) + 0" if exact else "embedding <=> CAST(? AS vector)"
        return (f"SELECT metadata->>'message_id', metadata->>'thread_id', metadata->>'resource_id', "
                f"1 - (embedding <=> CAST(? AS vector)) AS score FROM {quoted(self.table)} WHERE {where} "
                f"ORDER BY {distance} LIMIT ?", [q, *params, q, depth * 2], ef_search, exact)

    def set_ef_search(self, conn: sa.Connection, ef_search: int) -> None:
        """Every connection starts with the iterative scan (a filtered HNSW scan keeps going until it
        has enough rows of the scope, pgvector 0.8) and ``EF_SEARCH_SESSION`` candidates
        (``adapt.HNSW_SESSION``); another depth sets its own for this transaction (SET LOCAL), both
        settings in one statement, as every search did before. Nothing is sent when ``conn`` (the
        search's transaction, or any at the session's value) already has it."""
        mine = conn is self.conn  # the search's transaction: what an earlier call set in it still holds
        if ef_search != (self._ef_local if mine and self._ef_local is not None else EF_SEARCH_SESSION):
            cursor.rows(conn, "SELECT set_config('hnsw.ef_search', ?, true), "
                              "set_config('hnsw.iterative_scan', 'relaxed_order', true)", (str(ef_search),))
            if mine:
                self._ef_local = ef_search

    def ranked(self, qvec: np.ndarray, depth: int, thread_id: str | None,
               until: str | None = None, exclude_thread: str | None = None) -> list[hybrid.Ranked]:
        q = literal(qvec)
        listing, params, ef_search, exact = self.listing(q, depth, thread_id, until, exclude_thread)
        with self._read() as conn:
            mine = conn is self.conn
            if not exact:
                self.set_ef_search(conn, ef_search)
            listed = pg_keywords.listed(conn) if mine else None
            if not listed:
                rows = cursor.rows(conn, listing, params)
            else:
                # A hybrid search: the keyword list was read in this transaction, and the fusion will
                # want the cosines of those not in this list (``cosines``). The same two statements as
                # one (the first column says which), one round trip instead of two.
                both = cursor.rows(
                    conn,
                    f"SELECT 0, l.* FROM ({listing}) l UNION ALL "
                    f"SELECT 1, c.* FROM ({_COSINES.format(table=quoted(self.table))}) c",
                    (*params, q, text_array(listed), self.model_id),
                )
                rows = [r[1:] for r in both if r[0] == 0]
                self.keep_cosines(qvec, listed, {r[1]: float(r[4]) for r in both if r[0] == 1})
        return self.best(rows, depth)

    def keep_cosines(self, qvec: np.ndarray, asked: list[str], found: dict[str, float]) -> None:
        """Cosines read with a list (of ``asked``, ``found`` those with a vector), for ``cosines``."""
        self._early = (qvec, set(asked), found)

    def best(self, rows: Sequence[tuple[Any, ...]], depth: int) -> list[hybrid.Ranked]:
        """``listing``'s rows as the ranked list: each message once (its best vector), ``depth`` at most."""
        out: list[hybrid.Ranked] = []
        seen: set[str] = set()
        for mid, tid, rid, score in sorted(rows, key=lambda r: -float(r[3])):
            if mid in seen:  # Mastra may store several chunk vectors per message: keep the best
                continue
            seen.add(mid)
            out.append(hybrid.Ranked(mid, tid, rid, float(score)))
            if len(out) == depth:
                break
        if out and self._n is None:
            self._n = len(out)  # a lower bound is enough to say the scope is not empty
        return out

    def cosines(self, qvec: np.ndarray, message_ids: list[str]) -> dict[str, float]:
        if not message_ids:
            return {}
        early = self._early
        if early is not None and early[1].issuperset(message_ids) and np.array_equal(early[0], qvec):
            return {mid: early[2][mid] for mid in message_ids if mid in early[2]}
        with self._read() as conn:
            rows = cursor.rows(conn, _COSINES.format(table=quoted(self.table)),
                               (literal(qvec), text_array(message_ids), self.model_id))
        return {r[0]: float(r[3]) for r in rows}


# The best cosine of each named message (Mastra may store several chunk vectors per message).
_COSINES = ("SELECT metadata->>'message_id', NULL, NULL, max(1 - (embedding <=> CAST(? AS vector))) FROM {table} "
            "WHERE metadata->>'message_id' = ANY(CAST(? AS text[])) AND model_id = ? GROUP BY 1")


ANALYZE_THRESHOLD, ANALYZE_SCALE = 50, 0.1  # autovacuum's defaults (autovacuum_analyze_threshold / _scale_factor)


def _analyze_due(conn: sa.Connection, table: str) -> bool:
    """Whether ``table`` changed by more rows since its last analyze than autovacuum waits for."""
    row = conn.exec_driver_sql(
        "SELECT s.n_mod_since_analyze, c.reltuples FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
        "WHERE s.relid = to_regclass(?)", (quoted(table),),
    ).first()
    return row is not None and int(row[0] or 0) > ANALYZE_THRESHOLD + ANALYZE_SCALE * max(float(row[1] or 0), 0.0)


@dataclass(frozen=True)
class PgTableInfo:
    name: str
    dim: int
    has_model_id: bool = True
    has_our_indexes: bool = True


class _Moved:
    """Whether a table's writes were told by the change log since the last ``take`` (a ``pg_changes``
    listener: a flag, not the changes, so nothing piles up while no search asks)."""

    def __init__(self, log: pg_changes.ChangeLog, table: str) -> None:
        self.table = table
        self._lock = threading.Lock()
        self._moved = True
        log.listen(self)

    def changed(self, changes: list[pg_changes.Change]) -> None:
        if any(c.source == self.table for c in changes):
            with self._lock:
                self._moved = True

    def reset(self) -> None:
        with self._lock:
            self._moved = True

    def take(self) -> bool:
        with self._lock:
            moved, self._moved = self._moved, False
        return moved


class PgVectors:
    """The vector half of a ``RecallIndex`` on Postgres: pgvector in Mastra's layout. Scopes are searched
    in process (``pg_vector_cache``), every process told of every other's writes by the change log;
    a scope the cache does not take is searched by the server (HNSW). Long messages' piece vectors
    (``core.recall.pieces``) are in a side table (``pg_pieces``), whose writes the log tells too: a
    scope found without pieces is not looked at again until a pieces write is told."""

    keeps_pieces = True  # (``pg_pieces``)
    estimates_pieces = True  # (the server scores the pieces: ``pg_pieces.estimate``)

    def __init__(self, dim: int, model_id: str) -> None:
        self.dim = dim
        self.model_id = model_id
        self.table = vector_table_name(dim)
        self.info: PgTableInfo | None = None
        self._db: "Database | None" = None
        self._cache: PgVectorCache | None = None
        self._log_table = False  # the database has the change log (migration ``0024_recall_change_log``)
        self._logged = False  # this table's writes go into it
        self.pieces_table: str | None = None  # the pieces table (``pg_pieces``), once found or made
        self._pieces_logged = False  # its writes go into the change log
        self._pieces_in_row = False  # its columns are kept in the row (``pg_pieces.not_in_row``)
        self.reads_pieces = False  # (set by the index: whether its searches read pieces)
        self._piece_lock = threading.Lock()
        self._piece_scopes: dict[tuple[str | None, str | None], bool] = {}  # scope -> has pieces
        self._pieces_moved: _Moved | None = None  # the log's listener for the pieces table

    def open(self, db: "Database") -> None:
        self._db = db
        with db.read() as conn:
            exists = catalog.has_table(conn, self.table)
            self._log_table = catalog.has_table(conn, pg_changes.LOG_TABLE)
            self._logged = exists and self._log_table and pg_changes.has_log(conn, self.table)
            found = pg_pieces.exists(conn, self.dim)
            self._pieces_logged = found and self._log_table and pg_changes.has_log(conn, pieces.table_name(self.dim))
            self._pieces_in_row = found and not pg_pieces.not_in_row(conn, pieces.table_name(self.dim))
        self.info = PgTableInfo(self.table, self.dim) if exists else None
        self.pieces_table = pieces.table_name(self.dim) if found else None
        if self._cache is None:
            self._cache = PgVectorCache(self.table, self.dim, self.model_id, pg_changes.log_for(db))
        if self._pieces_moved is None:
            self._pieces_moved = _Moved(pg_changes.log_for(db), pieces.table_name(self.dim))

    def ensure(self, db: "Database") -> None:
        """The vector table and the pieces table, each with its writes logged; only what is missing is
        made (an existing database gets its pieces table at its next write)."""
        done = (self._logged or not self._log_table) and self.pieces_table is not None and (
            self._pieces_logged or not self._log_table) and self._pieces_in_row
        if self.info is not None and (done or db.read_only):
            return
        with db.write() as conn:
            db.lock(conn, f"recall:{self.table}", pg_changes.PIECES_LOCK)
            if self.info is None:
                ensure_table(conn, self.table, self.dim)
            else:  # a table made without our triggers (by Mastra): its writes are logged from now on
                log_table_writes(conn, self.table)
            self._logged = pg_changes.has_log(conn, self.table)
            table = pg_pieces.ensure(conn, self.dim)
            pg_changes.log_pieces_writes(conn, table)
            self._pieces_logged = pg_changes.has_log(conn, table)
        self._pieces_in_row = True
        self.info = PgTableInfo(self.table, self.dim)
        self.pieces_table = table

    def upsert(self, conn: sa.Connection, rows: Sequence[tuple[str, np.ndarray, dict[str, Any], str]]) -> None:
        upsert(conn, self.table, rows)

    def delete(self, conn: sa.Connection, key: str, values: list[str]) -> None:
        if self.info is not None and values:
            delete_where(conn, self.table, key, values)
        self.delete_pieces(conn, key, values)

    # -- pieces (``pg_pieces``) ----------------------------------------------------------------------
    def write_pieces(self, conn: sa.Connection, message_ids: Sequence[str], rows: Sequence[PieceRow]) -> None:
        if self.pieces_table is not None and (message_ids or rows):
            pg_pieces.write(conn, self.pieces_table, self.model_id, message_ids, rows)

    def delete_pieces(self, conn: sa.Connection, key: str, values: Sequence[str]) -> None:
        if self.pieces_table is not None and values:
            pg_pieces.delete_where(conn, self.pieces_table, key, values)

    def read_pieces(self, conn: sa.Connection, message_ids: Sequence[str]) -> dict[str, MessagePieces]:
        if self.pieces_table is None or self.info is None or not message_ids:
            return {}
        return pg_pieces.read(conn, self.pieces_table, self.table, self.dim, self.model_id, message_ids)

    def estimate_pieces(self, conn: sa.Connection, message_ids: Sequence[str],
                        qvec: np.ndarray) -> dict[str, PieceEstimate]:
        if self.pieces_table is None or self.info is None or not message_ids:
            return {}
        return pg_pieces.estimate(conn, self.pieces_table, self.table, self.dim, self.model_id, message_ids, qvec)

    def has_pieces(self, conn: sa.Connection, resource_id: str | None, thread_id: str | None) -> bool:
        """Kept per scope until the change log tells a write of the pieces table (no read); a database
        without the log, or a pieces table whose writes it does not get, is asked every time (one
        ``EXISTS``)."""
        if self.pieces_table is None:
            return False
        key = (resource_id, thread_id if resource_id is None else None)
        moved = self._pieces_moved
        kept = (moved is not None and self._pieces_logged and self._db is not None
                and pg_changes.log_for(self._db).sync(conn))
        with self._piece_lock:
            if not kept or moved is None:
                return pg_pieces.any_in_scope(conn, self.pieces_table, self.model_id, *key)
            if moved.take():
                self._piece_scopes.clear()
            known = self._piece_scopes.get(key)
            if known is None:
                known = self._piece_scopes[key] = pg_pieces.any_in_scope(conn, self.pieces_table, self.model_id, *key)
            return known

    def piece_hashes(self, conn: sa.Connection, message_ids: Sequence[str]) -> dict[str, str]:
        if self.pieces_table is None or not message_ids:
            return {}
        return pg_pieces.hashes(conn, self.pieces_table, self.model_id, message_ids)

    def piece_counts(self, conn: sa.Connection) -> dict[str, int]:
        return pg_pieces.counts(conn, self.pieces_table) if self.pieces_table is not None else {}

    def indexed_ids(self, conn: sa.Connection, message_ids: Sequence[str]) -> set[str]:
        return indexed_ids(conn, self.table, self.model_id, list(message_ids))

    def stored_state(self, conn: sa.Connection, message_ids: Sequence[str]) -> dict[str, VectorState]:
        if self.info is None:
            return {}
        return stored_state(conn, self.table, self.model_id, list(message_ids))

    def models_of(self, conn: sa.Connection, message_id: str) -> set[str | None]:
        if self.info is None:
            return set()
        return {r[0] for r in conn.exec_driver_sql(
            f"SELECT model_id FROM {quoted(self.table)} WHERE metadata->>'message_id' = ? OR vector_id = ?",
            (message_id, message_id))}

    def scope(self, conn: sa.Connection, resource_id: str | None, thread_id: str | None) -> ScopeVectors | None:
        if self.info is None or self._db is None:
            return None
        if self._cache is not None:
            kept = self._cache.scope(conn, resource_id, thread_id)
            if kept is not None:
                return kept
        view = PgVectorSet(self._db, self.table, self.model_id, resource_id, thread_id)
        view.conn = conn
        return view

    def maintain(self, db: "Database", resources: Sequence[str]) -> list[str]:
        """The server keeps its HNSW index up to date itself; what it does not do at once is refresh
        the planner's statistics of the tables a search reads (autovacuum's analyze comes up to a
        minute later). Until then a freshly filled table was planned as an exact sort of every row
        (vector list 11.3 ms of server CPU at 10k instead of 0.7 ms through HNSW; the thread-order
        read 16.7 instead of 2.3), so the writer analyzes them once they changed as much as
        autovacuum waits for. Returns no partitions (there are none on Postgres)."""
        if self.info is None:
            return []
        with db.read() as conn:
            tables = (self.table, DOCS_TABLE, "mastra_messages", *((self.pieces_table,) if self.pieces_table else ()))
            stale = [t for t in tables if _analyze_due(conn, t)]
        if stale:
            with db.write() as conn:
                for table in stale:
                    conn.exec_driver_sql(f"ANALYZE {quoted(table)}")
        return []

    def status(self) -> dict[str, Any]:
        return {"backend": "pgvector", **(self._cache.status() if self._cache is not None else {})}

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()

    @staticmethod
    def delete_thread_everywhere(conn: sa.Connection, thread_id: str) -> None:
        for table in catalog.table_names(conn, "memory_messages"):
            delete_where(conn, table, "thread_id", [thread_id])
        for table in pg_pieces.every_table(conn):
            pg_pieces.delete_where(conn, table, "thread_id", [thread_id])
