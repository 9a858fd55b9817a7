"""A Postgres vector table's scopes searched in process, kept up to date by the change log.

On libSQL every scope's vectors are a ``matrix.VectorSet`` kept in the process (``matrix_vectors``).
On Postgres the server searched them (HNSW, ``pg_vectors.PgVectorSet``), which cost a hybrid search
about a millisecond of server time and a round trip more than reading them here. This keeps each scope
searched (a resource, or a thread) as a ``VectorSet`` too, loaded on first use and told of every
write by ``pg_changes``: rows appended to the table are read and appended to the scopes that hold
them; a row changed or removed drops every kept scope (reloaded on its next search, as on libSQL).
The search is then exact, where HNSW lists approximately.

At most ``MAX_CACHED_SETS`` scopes and ``MAX_BYTES`` are kept (the least recently searched go first).
A scope of more than ``MAX_ROWS`` rows, a table whose writes are not logged (made by Mastra before the
log's migration, in a database opened read-only) or a database without the log is searched by the
server as before (``scope`` returns None).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np
import sqlalchemy as sa

from core.recall.matrix import VectorSet
from core.recall.pg_changes import ChangeLog, Inbox, Scope as Key, has_log, scope_of
from core.recall.schema import quoted
from core.recall.vector_table import RawRow
from core.storage.pg import cursor

MAX_ROWS = 100_000  # a larger scope is searched by the server (its HNSW index)
MAX_CACHED_SETS = 64
MAX_BYTES = 512 * 2**20  # kept sets' memory in all (the least recently searched go first)

_COLUMNS = ("id, vector_send(embedding), metadata->>'message_id', metadata->>'thread_id', "
            "metadata->>'resource_id', model_id, metadata->>'created_at'")


def _raw(rows: list[tuple[Any, ...]]) -> list[RawRow]:
    """Rows of ``_COLUMNS`` as the matrix takes them: pgvector's binary form (dimension, unused, then
    big-endian float4) as little-endian float32 bytes; a NULL vector stays None (counted as corrupt)."""
    out: list[RawRow] = []
    for rowid, sent, mid, tid, rid, model, created in rows:
        blob = None
        if sent is not None:
            blob = np.frombuffer(bytes(sent), dtype=">f4", offset=4).astype("<f4").tobytes()
        out.append(RawRow(int(rowid), blob, mid, tid, rid, model, created))
    return out


class PgVectorCache:
    """The kept scopes of one vector table (one dimension). Thread-safe: changes wait in an ``Inbox`` and
    are applied by the next ``scope`` under the cache's lock, held across its reads (as ``MatrixVectors``)."""

    def __init__(self, table: str, dim: int, model_id: str, log: ChangeLog) -> None:
        self.table, self.dim, self.model_id = table, dim, model_id
        self._log = log
        self._lock = threading.Lock()
        self._sets: OrderedDict[Key, VectorSet] = OrderedDict()
        self._rowids: dict[Key, set[int]] = {}  # the table rows each kept scope holds
        self._large: set[Key] = set()  # scopes of more than MAX_ROWS rows (searched by the server)
        self._logged: bool | None = None  # the table's writes are logged (None: not looked yet)
        self._inbox = Inbox(log, lambda source: source == table)

    def _take(self) -> tuple[bool, bool, set[str]]:
        """(whether the log said to start over, whether rows were changed or removed, the message ids
        appended) since the last call."""
        reset, inbox = self._inbox.take()
        rewritten = False
        appended: set[str] = set()
        for change in inbox:
            if change.op == "append" and change.message_ids is not None:
                appended.update(m for m in change.message_ids if m is not None)
            else:
                rewritten = True
        return reset, rewritten, appended

    # -- reading -------------------------------------------------------------------------------
    def scope(self, conn: sa.Connection, resource_id: str | None, thread_id: str | None) -> VectorSet | None:
        """The scope's vectors, up to date as of this read; None: the server searches this scope."""
        key = scope_of(resource_id, thread_id)
        with self._lock:
            if not self._log.sync(conn):
                return None
            reset, rewritten, appended = self._take()
            if reset or rewritten:  # (rows changed or gone: reloaded when next searched, as on libSQL)
                self._sets.clear()
                self._rowids.clear()
            if reset:  # (also when a vector table went or came: whether this one is logged is looked again)
                self._large.clear()
                self._logged = None
            if self._logged is None:
                self._logged = has_log(conn, self.table)
            if not self._logged:
                return None
            if appended and self._sets:
                self._append(conn, sorted(appended))
            if key in self._large:
                return None
            vset = self._sets.get(key)
            if vset is not None:
                self._sets.move_to_end(key)
                return vset
            where, params = _where(key)
            table = quoted(self.table)
            if cursor.scalar(conn, f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {where} LIMIT ?) s",
                             (*params, MAX_ROWS + 1)) > MAX_ROWS:
                self._large.add(key)  # (until the log says to start over: scopes grow, they rarely shrink)
                return None
            raw = _raw(cursor.rows(conn, f"SELECT {_COLUMNS} FROM {table} WHERE {where} ORDER BY id", params))
            vset = VectorSet(self.dim, self.model_id)
            vset.extend(raw)
            self._sets[key] = vset
            self._rowids[key] = {r.rowid for r in raw}
            while len(self._sets) > 1 and (len(self._sets) > MAX_CACHED_SETS
                                           or sum(v.nbytes() for v in self._sets.values()) > MAX_BYTES):
                old, _ = self._sets.popitem(last=False)
                del self._rowids[old]
            return vset

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"cached_sets": len(self._sets), "cached_bytes": sum(v.nbytes() for v in self._sets.values())}

    def close(self) -> None:
        with self._lock:
            self._sets.clear()
            self._rowids.clear()
            self._large.clear()

    def _append(self, conn: sa.Connection, message_ids: list[str]) -> None:
        """Read the rows of messages appended since the last search and add them to the kept scopes
        they belong to (a row a scope holds already, read by a load newer than its log row, is skipped;
        Mastra may write several chunk rows per message, so rows are told apart by their id)."""
        rows = _raw(cursor.rows(
            conn, f"SELECT {_COLUMNS} FROM {quoted(self.table)} WHERE metadata->>'message_id' = ANY(CAST(? AS text[])) "
            "ORDER BY id", (message_ids,)))
        for key, vset in self._sets.items():
            have = self._rowids[key]
            mine = [r for r in rows if r.rowid not in have and _in_scope(key, r)]
            if mine:
                vset.extend(mine)
                have.update(r.rowid for r in mine)


def _where(key: Key) -> tuple[str, tuple[str, ...]]:
    kind, value = key
    return (f"metadata->>'{'resource_id' if kind == 'resource' else 'thread_id'}' = ?", (value,))


def _in_scope(key: Key, row: RawRow) -> bool:
    kind, value = key
    return (row.resource_id if kind == "resource" else row.thread_id) == value
