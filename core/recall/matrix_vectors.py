"""The vector half of a ``RecallIndex`` on libSQL: float32 blobs in ``memory_messages_<dim>``
(``vector_table``), searched in process.

Each scope (a resource, or a thread) is answered by a ``VectorSet`` (``matrix``) loaded from the table
on first use and kept: extended with rows appended since, dropped when rows were rewritten or deleted,
both told by the change counters the table's triggers keep, so vectors written by another process
appear without polling the table.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import sqlalchemy as sa

from core.recall import copies, ivf_packs, ivf_store, matrix, piece_table, pieces, vector_table
from core.recall.piece_cache import Generation, PieceCache
from core.recall.ivf_store import IvfMeta, IvfScope
from core.recall.matrix import ScopeVectors, VectorSet
from core.recall.schema import ensure_vector_table, quoted, vector_table_name
from core.storage.catalog import has_table
from core.recall.tables import IVF_TABLE, STATE_TABLE
from core.recall.types import MessagePieces, PieceEstimate, PieceRow
from core.recall.vector_table import TableInfo, VectorState

if TYPE_CHECKING:  # pragma: no cover
    from core.storage.database import Database

MAX_CACHED_SETS = 64


class MatrixVectors:
    keeps_pieces = True  # (``piece_table``)
    estimates_pieces = False  # (its pieces are read from the file, in process: nothing to spare sending)

    def __init__(self, dim: int, model_id: str) -> None:
        self.dim = dim
        self.model_id = model_id
        self.table = vector_table_name(dim)
        self.info: TableInfo | None = None
        self._lock = threading.RLock()
        self._sets: OrderedDict[tuple[str, ...], VectorSet] = OrderedDict()
        self._counters: tuple[int, int] | None = None
        self._stale: set[tuple[str, ...]] = set()
        self.has_ivf = False  # the partition tables exist (migration 0017_recall_ivf)
        self._has_state: bool | None = None  # the recall state table exists (None: look each time)
        self._partitioned: dict[str, IvfScope] = {}  # resource -> its persisted partition, as searched
        self._metas: dict[str, IvfMeta] = {}  # resource -> partition metadata (centroids), for writers
        self._sizes: dict[str, int] = {}  # resource -> rows, counted once per process, then kept up to date
        self.pieces_table: str | None = None  # the pieces table (``piece_table``), once found or made
        self._pieces_counted = False  # its updates and deletes are counted (its rewrite triggers)
        # Whether this index reads pieces (the index sets it: ``RecallIndex.pieces``); then each scope's
        # "has pieces" answer is kept while the pieces table's write counter stands still.
        self.reads_pieces = False
        self._piece_mark: int | None = None  # the counter as the last scope read saw it (None: not read)
        self._piece_scopes: dict[tuple[str | None, str | None], bool] = {}
        self._piece_scopes_mark: int | None = None
        # What ``read_pieces`` answered per message, kept while the counters ``scope`` reads stand (``piece_cache``).
        self._piece_cache = PieceCache()

    def open(self, db: "Database") -> None:
        """Find the table. Reads only: an index built for a preview or a search must not write (nor wait
        on a busy writer), even where the table is still missing (``ensure``, at the first write)."""
        with db.read() as conn:
            self.info = vector_table.inspect(conn, self.table, self.dim)
            self.has_ivf = has_table(conn, IVF_TABLE)
            # The change counters' table, once found (a search checks the counters every time; a
            # migration may create it later).
            self._has_state = True if has_table(conn, STATE_TABLE) else None
            self.pieces_table = pieces.table_name(self.dim) if piece_table.exists(conn, self.dim) else None
            self._pieces_counted = (self.pieces_table is not None
                                    and piece_table.has_rewrite_counter(conn, self.pieces_table))

    def ensure(self, db: "Database") -> None:
        """Create the table (or adopt Mastra's) when missing or not yet in our shape, in a transaction
        of its own that commits before the caller's write uses it."""
        if (self.info is not None and self.info.has_model_id and self.info.has_our_indexes
                and self.pieces_table is not None and self._pieces_counted):
            return
        with db.write() as conn:
            ensure_vector_table(conn, self.dim)
            self.info = vector_table.inspect(conn, self.table, self.dim)
            self.pieces_table = piece_table.ensure(conn, self.dim)
            self._pieces_counted = piece_table.has_rewrite_counter(conn, self.pieces_table)

    # -- writing (inside the caller's write transaction) -------------------------------------------
    def upsert(self, conn: sa.Connection, rows: Sequence[tuple[str, np.ndarray, dict[str, Any], str]]) -> None:
        """Write rows; rows of a partitioned scope join their nearest list in the same transaction."""
        assert self.info is not None
        vector_table.upsert(conn, self.info, rows)
        if not self.has_ivf:
            return
        resources = [meta.get("resource_id") for _, _, meta, _ in rows]
        by_scope: dict[str, list[tuple[str, np.ndarray]]] = {}
        if resources and resources[0] and resources.count(resources[0]) == len(resources):  # the usual: one resource
            by_scope[str(resources[0])] = [(vid, vec) for vid, vec, _, _ in rows]
        else:
            for (vid, vec, _, _), resource in zip(rows, resources):
                if resource:
                    by_scope.setdefault(str(resource), []).append((vid, vec))
        for resource, written in by_scope.items():
            known = self._sizes.get(resource)
            if known is not None:
                self._sizes[resource] = known + len(written)
                if known < matrix.IVF_MIN_ROWS and resource not in self._metas:
                    continue  # small and unpartitioned, as counted: no read (another process's partition
                    # of it, if any, scans rows without an assignment exactly)
            part = self._meta(conn, resource)
            if part is None:
                continue
            rowids: dict[str, int] = dict(conn.exec_driver_sql(
                f"SELECT vector_id, rowid FROM {quoted(self.info.name)} WHERE vector_id IN ({','.join('?' * len(written))})",
                tuple(v for v, _ in written)).all())
            kept = [(rowids[v], vec) for v, vec in written if v in rowids]
            if kept:
                ivf_store.assign(conn, part, [r for r, _ in kept], np.stack([vec for _, vec in kept]), self.info, resource)

    def _meta(self, conn: sa.Connection, resource: str) -> IvfMeta | None:
        """A scope's partition (centroids cached until another one is built)."""
        row = conn.exec_driver_sql(
            f"SELECT ivf_id, built_at FROM {IVF_TABLE} WHERE vector_table = ? AND model_id = ? AND scope = ?",
            (self.table, self.model_id, ivf_store.scope_key(resource)),
        ).first()
        if row is None:
            self._metas.pop(resource, None)
            return None
        cached = self._metas.get(resource)
        if cached is None or (cached.ivf_id, cached.built_at) != (int(row[0]), str(row[1])):
            found = ivf_store.find(conn, self.table, self.model_id, ivf_store.scope_key(resource))
            if found is None:
                return None
            self._metas[resource] = cached = found
        return cached

    def maintain(self, db: "Database", resources: Sequence[str]) -> list[str]:
        """Partition the scopes written to that reached ``IVF_MIN_ROWS`` (or grew ``REBUILD_GROWTH``
        times since their partition was built). The k-means runs on a read snapshot, outside any
        write transaction; rows written meanwhile are assigned when the partition is saved.
        A partition whose lists gained enough rows since they were packed gets them packed
        (``ivf_packs.pack_pending``). Returns the resources partitioned."""
        if not self.has_ivf or self.info is None:
            return []
        done: list[str] = []
        for resource in dict.fromkeys(resources):
            known = self._sizes.get(resource)
            if known is not None and known < matrix.IVF_MIN_ROWS and resource not in self._metas:
                continue  # small and unpartitioned, as counted before: no read at all
            with db.read() as conn:
                part = self._meta(conn, resource)
                size = self._sizes.get(resource)
                if size is None:
                    size = self._sizes[resource] = self._count(conn, resource)
                due = size >= matrix.IVF_MIN_ROWS if part is None else size >= ivf_store.REBUILD_GROWTH * part.built_rows
                repack = not due and part is not None and ivf_packs.due(conn, part.ivf_id)
                built = ivf_store.build(conn, self.info, self.model_id, resource) if due else None
            if repack and part is not None:  # rows assigned since the lists were packed: pack them too
                with db.write() as conn:
                    ivf_packs.pack_pending(conn, self.info, part.ivf_id, self.model_id, resource)
            if not due:
                continue
            if built is None:  # fewer usable rows than counted (other models' rows): count again later
                self._sizes.pop(resource, None)
                continue
            partition, rowids, max_rowid = built
            with db.write() as conn:
                meta = ivf_store.save(conn, self.table, self.model_id, ivf_store.scope_key(resource), partition,
                                      rowids, max_rowid)
                newer = [r for r in vector_table.load_rows(conn, self.info, resource_id=resource, thread_id=None,
                                                           after_rowid=max_rowid)
                         if r.model_id in (None, self.model_id)]
                vecs = [(r.rowid, vector_table.decode_stored(r.blob, self.dim)) for r in newer]
                kept = [(rid, v) for rid, v in vecs if v is not None]
                if kept:
                    vecs_kept = vector_table.unit_rows(np.stack([v for _, v in kept]))
                    ivf_store.assign(conn, meta, [r for r, _ in kept], vecs_kept, self.info, resource)
            self._metas.pop(resource, None)
            self._sizes[resource] = partition.size + len(kept)
            done.append(resource)
        return done

    def _count(self, conn: sa.Connection, resource: str) -> int:
        assert self.info is not None
        hint = f"INDEXED BY {quoted(self.info.name + '_resource_id')}" if self.info.has_our_indexes else ""
        return int(conn.exec_driver_sql(
            f"SELECT count(*) FROM {quoted(self.info.name)} {hint} WHERE json_extract(metadata, '$.resource_id') = ?",
            (resource,)).scalar() or 0)

    def delete(self, conn: sa.Connection, key: str, values: list[str]) -> None:
        if self.info is not None and values:
            vector_table.delete_where(conn, self.info, key, values)
        self.delete_pieces(conn, key, values)

    # -- pieces (``piece_table``) --------------------------------------------------------------------
    def write_pieces(self, conn: sa.Connection, message_ids: Sequence[str], rows: Sequence[PieceRow]) -> None:
        if self.pieces_table is not None and (message_ids or rows):
            piece_table.write(conn, self.pieces_table, self.model_id, message_ids, rows)

    def delete_pieces(self, conn: sa.Connection, key: str, values: Sequence[str]) -> None:
        if self.pieces_table is not None and values:
            piece_table.delete_where(conn, self.pieces_table, key, values)

    def read_pieces(self, conn: sa.Connection, message_ids: Sequence[str]) -> dict[str, MessagePieces]:
        if self.pieces_table is None or self.info is None or not message_ids:
            return {}
        table, info = self.pieces_table, self.info
        return self._piece_cache.read(conn, message_ids,
                                      lambda ids: piece_table.read(conn, table, info, self.model_id, ids))

    def estimate_pieces(self, conn: sa.Connection, message_ids: Sequence[str],
                        qvec: np.ndarray) -> dict[str, PieceEstimate]:
        return {}

    def has_pieces(self, conn: sa.Connection, resource_id: str | None, thread_id: str | None) -> bool:
        """Kept per scope while the write counter read by the last ``scope`` stands (no read); else one
        ``EXISTS``."""
        if self.pieces_table is None:
            return False
        key = (resource_id, thread_id if resource_id is None else None)
        with self._lock:
            mark = self._piece_mark
            if mark is None or mark != self._piece_scopes_mark:
                self._piece_scopes.clear()
                self._piece_scopes_mark = mark
            known = self._piece_scopes.get(key) if mark is not None else None
            if known is not None:
                return known
            found = piece_table.any_in_scope(conn, self.pieces_table, self.model_id, *key)
            if mark is not None:
                self._piece_scopes[key] = found
            return found

    def piece_hashes(self, conn: sa.Connection, message_ids: Sequence[str]) -> dict[str, str]:
        if self.pieces_table is None or not message_ids:
            return {}
        return piece_table.hashes(conn, self.pieces_table, self.model_id, message_ids)

    def piece_counts(self, conn: sa.Connection) -> dict[str, int]:
        return piece_table.counts(conn, self.pieces_table) if self.pieces_table is not None else {}

    # -- reading ---------------------------------------------------------------------------------
    def indexed_ids(self, conn: sa.Connection, message_ids: Sequence[str]) -> set[str]:
        assert self.info is not None
        return vector_table.indexed_message_ids(conn, self.info, self.model_id, message_ids)

    def stored_state(self, conn: sa.Connection, message_ids: Sequence[str]) -> dict[str, VectorState]:
        if self.info is None:
            return {}
        return vector_table.stored_state(conn, self.info, self.model_id, message_ids)

    def models_of(self, conn: sa.Connection, message_id: str) -> set[str | None]:
        """The models that have a vector of this message here (None: written without a model id)."""
        if self.info is None:
            return set()
        model = "model_id" if self.info.has_model_id else "NULL"
        return {r[0] for r in conn.exec_driver_sql(
            f"SELECT {model} FROM {quoted(self.info.name)} WHERE vector_id = ? "
            "OR json_extract(metadata, '$.message_id') = ?", (message_id, message_id))}

    def scope(self, conn: sa.Connection, resource_id: str | None, thread_id: str | None) -> ScopeVectors | None:
        """The vectors of a scope, refreshed against the table's change counters: a resource with a
        persisted partition is read list by list (``IvfScope``), any other scope is loaded whole
        and cached (``VectorSet``), a thread of a partitioned resource too."""
        if self.info is None:
            return None
        # What a scope's set holds: a resource's rows, or a thread's (of any resource, or of one).
        key: tuple[str, ...] = ("resource", resource_id) if resource_id is not None else ("thread", thread_id or "")
        load: tuple[str | None, str | None] = (resource_id, None) if resource_id is not None else (None, thread_id)
        with self._lock:
            if self.reads_pieces and self.pieces_table is not None:
                table, info = self.pieces_table, self.info
                marks: list[int | None] = []
                counters = vector_table.change_counters(
                    conn, info, self._has_state, marks,
                    (piece_table.writes_key(table), piece_table.rewrites_key(table)), newest_of=table)
                self._piece_mark, piece_rewrites, piece_newest = marks
                # The pieces' cache: exact for this connection by ``piece_cache``'s rule.
                if self._piece_mark is None or piece_newest is None:
                    self._piece_cache.saw(conn, None)
                else:
                    newest = (counters[0], piece_newest)
                    stands = ((counters[1], piece_rewrites) if piece_rewrites is not None
                              else (counters[1], self._piece_mark, newest))  # (no rewrite triggers: any write)
                    self._piece_cache.saw(conn, Generation(stands, newest),
                                          lambda since: piece_table.added_since(conn, table, info.name, since))
            else:
                counters = vector_table.change_counters(conn, self.info, self._has_state)
                self._piece_cache.saw(conn, None)
            if self._counters is not None and counters != self._counters:
                if counters[1] != self._counters[1] or not self.info.has_our_indexes:
                    self._sets.clear()  # rows updated or deleted: reload from the store of record
                    self._partitioned.clear()
                else:
                    self._stale.update(self._sets)
                    views = {r: p.refreshed(conn) for r, p in self._partitioned.items()}
                    self._partitioned = {r: p for r, p in views.items() if p is not None}
            self._counters = counters
            if resource_id is not None and key not in self._sets and self.has_ivf:
                part = self._partitioned.get(resource_id)
                if part is None:
                    meta = ivf_store.find(conn, self.table, self.model_id, ivf_store.scope_key(resource_id))
                    if meta is not None:
                        part = self._partitioned[resource_id] = IvfScope(self.info, self.model_id, resource_id, meta)
                if part is not None and thread_id is None:
                    part.conn = conn
                    return part
                if part is not None:
                    # One thread of a partitioned resource: its rows exactly (not the probed lists), kept as
                    # a set of their own like a thread's, not read again by every search.
                    key, load = ("thread", thread_id or "", resource_id), (resource_id, thread_id)
            vset = self._sets.get(key)
            if vset is None:
                vset = VectorSet(self.dim, self.model_id)
                vset.reserve(vector_table.count_rows(conn, self.info, resource_id=load[0], thread_id=load[1]))
                for chunk in vector_table.row_chunks(conn, self.info, resource_id=load[0], thread_id=load[1]):
                    vset.extend(chunk)
                self._sets[key] = vset
                self._stale.discard(key)
                while len(self._sets) > MAX_CACHED_SETS:
                    old, _ = self._sets.popitem(last=False)
                    self._stale.discard(old)
            elif key in self._stale:
                vset.extend(vector_table.load_rows(conn, self.info, resource_id=load[0], thread_id=load[1],
                                                   after_rowid=vset.max_rowid))
                self._stale.discard(key)
            self._sets.move_to_end(key)
            return vset

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"cached_sets": len(self._sets), "cached_bytes": sum(s.nbytes() for s in self._sets.values())}

    def close(self) -> None:
        with self._lock:
            self._sets.clear()
            self._partitioned.clear()
            self._piece_cache.clear()

    # -- every vector table of a database (a thread deleted while recall is off) -------------------
    @staticmethod
    def delete_thread_everywhere(conn: sa.Connection, thread_id: str) -> None:
        # Mastra's tables too (no indexes of ours: scanned), as Mastra's deleteThread does: a deleted
        # thread's text must not stay in a vector row's metadata, to be recalled by Mastra later.
        for info in (vector_table.inspect(conn, t, 0) for t in copies.vector_tables(conn)):
            if info is not None:
                vector_table.delete_where(conn, info, "thread_id", [thread_id])
        for table in piece_table.every_table(conn):
            piece_table.delete_where(conn, table, "thread_id", [thread_id])
