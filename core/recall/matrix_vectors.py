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

from core.recall import vector_table
from core.recall.matrix import VectorSet
from core.recall.schema import ensure_vector_table, quoted, vector_table_name
from core.recall.vector_table import TableInfo, VectorState

if TYPE_CHECKING:  # pragma: no cover
    from core.storage.database import Database

MAX_CACHED_SETS = 64


class MatrixVectors:
    def __init__(self, dim: int, model_id: str) -> None:
        self.dim = dim
        self.model_id = model_id
        self.table = vector_table_name(dim)
        self.info: TableInfo | None = None
        self._lock = threading.RLock()
        self._sets: OrderedDict[tuple[str, str], VectorSet] = OrderedDict()
        self._counters: tuple[int, int] | None = None
        self._stale: set[tuple[str, str]] = set()

    def open(self, db: "Database", writable: bool) -> None:
        """Find the table; create it (or adopt Mastra's) when writable and not yet in our shape.

        Only then is the write lock taken: an index built for a preview or a search of an existing
        table must not write (nor wait on a busy writer).
        """
        with db.read() as conn:
            self.info = vector_table.inspect(conn, self.table, self.dim)
        if writable and (self.info is None or not (self.info.has_model_id and self.info.has_our_indexes)):
            with db.write() as conn:
                ensure_vector_table(conn, self.dim)
                self.info = vector_table.inspect(conn, self.table, self.dim)

    # -- writing (inside the caller's write transaction) -------------------------------------------
    def upsert(self, conn: sa.Connection, rows: Sequence[tuple[str, np.ndarray, dict[str, Any], str]]) -> None:
        assert self.info is not None
        vector_table.upsert(conn, self.info, rows)

    def delete(self, conn: sa.Connection, key: str, values: list[str]) -> None:
        if self.info is not None and values:
            vector_table.delete_where(conn, self.info, key, values)

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

    def scope(self, conn: sa.Connection, resource_id: str | None, thread_id: str | None) -> VectorSet | None:
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

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"cached_sets": len(self._sets), "cached_bytes": sum(s.nbytes() for s in self._sets.values())}

    def close(self) -> None:
        with self._lock:
            self._sets.clear()

    # -- every vector table of a database (a thread deleted while recall is off) -------------------
    @staticmethod
    def delete_thread_everywhere(conn: sa.Connection, thread_id: str) -> None:
        tables = [
            r[0] for r in conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND (name = 'memory_messages' OR name LIKE 'memory_messages\\_%' ESCAPE '\\')"
            )
        ]
        for info in (vector_table.inspect(conn, t, 0) for t in tables):
            if info is not None and info.has_our_indexes:
                vector_table.delete_where(conn, info, "thread_id", [thread_id])
