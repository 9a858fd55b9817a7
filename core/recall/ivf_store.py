"""Persisted IVF partitions of large scopes (libSQL), so a restarted process answers a big resource's
first query from a few lists instead of loading every vector of it.

A scope (a resource) with at least ``IVF_MIN_ROWS`` vectors from one model gets a partition
(``ivf.build``): its centroids go to ``memory_studio_ivf``, each vector row's list to
``memory_studio_ivf_rows`` (migration ``0017_recall_ivf``). A writer assigns every row it adds to a
partitioned scope to its nearest centroid in the same transaction (``assign``), so the partition
stays complete without a rebuild; it is rebuilt when the scope has grown ``REBUILD_GROWTH`` times
since, to keep the lists balanced. Rows another program added without an assignment (above the
partition's ``max_rowid``) are scanned exactly, like rows appended to an in-memory partition.

A search (``IvfScope``) reads the centroids, probes the nearest lists, and loads just those lists'
rows (kept per list while the table does not change): about 1/32 of the scope.
Derived data: dropping both tables loses nothing but speed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import sqlalchemy as sa

from core.recall import ivf, ivf_packs, matrix
from core.recall.hybrid import Ranked
from core.recall.matrix import DEFAULT_NPROBE_SHARE, SkipCounts, VectorSet
from core.recall.schema import quoted
from core.recall.tables import IVF_ROWS, IVF_TABLE
from core.recall.vector_table import RawRow, TableInfo, decode_stored, load_rows, row_columns, unit_rows
from core.timeutil import iso_now

REBUILD_GROWTH = 4.0  # rebuild a partition once its scope holds this many times the rows it was built on
MAX_CACHED_LISTS = 4096


def scope_key(resource_id: str) -> str:
    return f"resource:{resource_id}"


@dataclass(frozen=True)
class IvfMeta:
    ivf_id: int
    scope: str
    nlist: int
    centroids: np.ndarray  # [nlist, dim] float32
    built_rows: int
    rows_now: int  # built_rows plus rows assigned since
    max_rowid: int  # every row of the scope at or below it was assigned when the partition was built
    built_at: str


def find(conn: sa.Connection, table: str, model_id: str, scope: str) -> IvfMeta | None:
    row = conn.exec_driver_sql(
        f"SELECT ivf_id, nlist, dim, centroids, built_rows, rows_now, max_rowid, built_at FROM {IVF_TABLE} "
        "WHERE vector_table = ? AND model_id = ? AND scope = ?", (table, model_id, scope),
    ).first()
    if row is None:
        return None
    ivf_id, nlist, dim, blob, built, now, max_rowid, built_at = row
    centroids = np.frombuffer(bytes(blob), dtype="<f4").reshape(int(nlist), int(dim))
    return IvfMeta(int(ivf_id), scope, int(nlist), centroids, int(built), int(now), int(max_rowid), str(built_at))


def save(conn: sa.Connection, table: str, model_id: str, scope: str, part: ivf.IvfPartition,
         rows: ivf_packs.PackRows, max_rowid: int) -> IvfMeta:
    """Replace a scope's partition: ``rows`` are the built rows (in the order ``part`` was built on);
    each list's rows are also stored packed, in list order (``ivf_packs``)."""
    old = conn.exec_driver_sql(
        f"SELECT ivf_id FROM {IVF_TABLE} WHERE vector_table = ? AND model_id = ? AND scope = ?", (table, model_id, scope)
    ).first()
    if old is not None:
        conn.exec_driver_sql(f"DELETE FROM {IVF_ROWS} WHERE ivf_id = ?", (old[0],))
        ivf_packs.drop(conn, int(old[0]))
        conn.exec_driver_sql(f"DELETE FROM {IVF_TABLE} WHERE ivf_id = ?", (old[0],))
    centroids = np.ascontiguousarray(part.centroids, dtype="<f4")
    built_at = iso_now()
    ivf_id = int(conn.exec_driver_sql(
        f"INSERT INTO {IVF_TABLE} (vector_table, model_id, scope, dim, nlist, centroids, built_rows, rows_now, "
        "max_rowid, built_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING ivf_id",
        (table, model_id, scope, int(centroids.shape[1]), int(centroids.shape[0]), centroids.tobytes(), part.size,
         part.size, int(max_rowid), built_at),
    ).scalar_one())
    for li in range(len(part.offsets) - 1):
        members = rows.take(part.order[part.offsets[li] : part.offsets[li + 1]]).sorted()
        if not len(members.rowids):
            continue
        conn.exec_driver_sql(f"INSERT INTO {IVF_ROWS} (ivf_id, list, row_id, chunk) VALUES ({ivf_id}, {li}, ?, 0)",
                             [(r,) for r in members.rowids.tolist()])
        ivf_packs.write_pack(conn, ivf_id, li, 0, members, mark=False)
    return IvfMeta(ivf_id, scope, int(centroids.shape[0]), centroids, part.size, part.size, int(max_rowid), built_at)


def assign(conn: sa.Connection, meta: IvfMeta, rowids: Sequence[int], vectors: np.ndarray,
           info: TableInfo | None = None, resource_id: str | None = None) -> None:
    """Put written rows into their nearest lists (a rewritten row leaves its old list). With ``info``
    and ``resource_id``, the partition's ``max_rowid`` then moves up to the table's last row when
    no row of the scope since the old mark is left unassigned (rows another program wrote), so a
    restarted reader's exact tail stays small."""
    if not len(rowids):
        return
    labels = np.argmax(np.asarray(vectors, dtype=np.float32) @ meta.centroids.T, axis=1).tolist()
    ids = [int(r) for r in rowids]
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        conn.exec_driver_sql(
            f"DELETE FROM {IVF_ROWS} WHERE ivf_id = ? AND row_id IN ({','.join('?' * len(chunk))})", (meta.ivf_id, *chunk)
        )
    conn.exec_driver_sql(f"INSERT INTO {IVF_ROWS} (ivf_id, list, row_id) VALUES ({meta.ivf_id}, ?, ?)",
                         list(zip(labels, ids)))
    conn.exec_driver_sql(f"UPDATE {IVF_TABLE} SET rows_now = rows_now + ?, unpacked = unpacked + ? WHERE ivf_id = ?",
                         (len(ids), len(ids), meta.ivf_id))
    if info is None or resource_id is None:
        return
    mark = int(conn.exec_driver_sql(f"SELECT max_rowid FROM {IVF_TABLE} WHERE ivf_id = ?", (meta.ivf_id,)).scalar() or 0)
    top = int(conn.exec_driver_sql(f"SELECT coalesce(max(rowid), 0) FROM {quoted(info.name)}").scalar() or 0)
    loose = conn.exec_driver_sql(
        f"SELECT 1 FROM {quoted(info.name)} v NOT INDEXED WHERE v.rowid > ? AND json_extract(v.metadata, '$.resource_id') = ? "
        f"AND NOT EXISTS (SELECT 1 FROM {IVF_ROWS} r WHERE r.ivf_id = ? AND r.row_id = v.rowid) LIMIT 1",
        (mark, resource_id, meta.ivf_id),
    ).first()
    if loose is None and top > mark:
        conn.exec_driver_sql(f"UPDATE {IVF_TABLE} SET max_rowid = ? WHERE ivf_id = ?", (top, meta.ivf_id))


def build(conn: sa.Connection, info: TableInfo, model_id: str, resource_id: str) -> tuple[ivf.IvfPartition, ivf_packs.PackRows, int] | None:
    """A partition of a scope's vectors from ``model_id`` (None when there are too few): the
    partition, the rows it covers (in build order), and the highest row id read."""
    rows = load_rows(conn, info, resource_id=resource_id, thread_id=None)
    top = max((r.rowid for r in rows), default=0)
    kept = ivf_packs.usable(rows, model_id, info.dim, resource_id)
    del rows
    if len(kept.rowids) < matrix.IVF_MIN_ROWS:
        return None
    return ivf.build(kept.vectors), kept, top


def _as_set(rows: ivf_packs.PackRows, dim: int, model_id: str, resource_id: str, skips: SkipCounts) -> VectorSet:
    """A list's rows as the ``VectorSet`` a search ranks (rows without a model id counted in ``skips``,
    as ``VectorSet.extend`` counts them)."""
    n = len(rows.rowids)
    vset = VectorSet.of_rows(dim, model_id, rows.vectors, list(rows.message_ids), list(rows.thread_ids),
                             [resource_id] * n, list(rows.created_at))
    if n:
        vset.max_rowid = int(rows.rowids.max())
        skips.unknown_model += sum(rows.unknown)
    return vset


class IvfScope:
    """A partitioned scope as a search reads it (the ``ScopeVectors`` interface), from the database:
    the nearest lists' rows are loaded on first use and kept (``MAX_CACHED_LISTS``)."""

    def __init__(self, info: TableInfo, model_id: str, resource_id: str, meta: IvfMeta) -> None:
        self.info, self.model_id, self.resource_id, self.meta = info, model_id, resource_id, meta
        self.skips = SkipCounts()
        self._lists: OrderedDict[int, VectorSet] = OrderedDict()
        self._tail: VectorSet | None = None
        self._seen = 0  # highest row id of the table when the tail was read
        self._lock = threading.RLock()
        self.conn: sa.Connection | None = None  # the searching read connection, set by ``MatrixVectors.scope``

    @property
    def n(self) -> int:
        return self.meta.rows_now + (self._tail.n if self._tail is not None else 0)

    def refreshed(self, conn: sa.Connection) -> "IvfScope | None":
        """After rows were appended: the same view with the new rows added to its exactly scanned tail
        (a writer also put them in their lists; a row found twice counts once), or a fresh view when
        the partition was rebuilt, or None when it was dropped."""
        row = conn.exec_driver_sql(
            f"SELECT ivf_id, built_at, rows_now FROM {IVF_TABLE} WHERE vector_table = ? AND model_id = ? AND scope = ?",
            (self.info.name, self.model_id, self.meta.scope),
        ).first()
        if row is None:
            return None
        if (int(row[0]), str(row[1])) != (self.meta.ivf_id, self.meta.built_at):
            meta = find(conn, self.info.name, self.model_id, self.meta.scope)
            return IvfScope(self.info, self.model_id, self.resource_id, meta) if meta is not None else None
        with self._lock:
            self.meta = replace(self.meta, rows_now=int(row[2]))
            if self._tail is not None:
                newer = self._rows(conn, "v.rowid > ? AND json_extract(v.metadata, '$.resource_id') = ?",
                                   (self._seen, self.resource_id), hint="NOT INDEXED")
                self._tail.extend(newer)
                self._seen = max([self._seen, *(r.rowid for r in newer)])
        return self

    def _rows(self, conn: sa.Connection, where: str, params: tuple[object, ...], hint: str = "") -> list[RawRow]:
        return [
            RawRow(int(r[0]), r[1], r[2] or r[6], r[3], r[4], r[5], r[7])
            for r in conn.exec_driver_sql(
                f"SELECT {row_columns(self.info)} FROM {quoted(self.info.name)} v {hint} WHERE {where}", params)
        ]

    def _load_lists(self, conn: sa.Connection, lists: list[int]) -> list[VectorSet]:
        with self._lock:
            missing = [li for li in lists if li not in self._lists]
        if missing:
            found, loose = ivf_packs.read_lists(conn, self.info, self.meta.ivf_id, self.model_id, self.resource_id, missing)
            with self._lock:
                for li in missing:
                    vset = VectorSet(self.info.dim, self.model_id)
                    vset.extend(loose[li])  # counts the rows a search skips (other models', corrupt)
                    vset.skips.unknown_model = 0  # counted with the list's rows, below
                    self._add_skips(vset.skips)
                    self._lists[li] = _as_set(found[li], self.info.dim, self.model_id, self.resource_id, self.skips)
                while len(self._lists) > MAX_CACHED_LISTS:
                    self._lists.popitem(last=False)
        with self._lock:
            for li in lists:
                if li in self._lists:
                    self._lists.move_to_end(li)
            return [self._lists[li] for li in lists if li in self._lists]

    def _add_skips(self, skips: SkipCounts) -> None:
        self.skips.wrong_dim += skips.wrong_dim
        self.skips.corrupt += skips.corrupt
        self.skips.unknown_model += skips.unknown_model
        self.skips.other_model.update(skips.other_model)

    def tail(self, conn: sa.Connection) -> VectorSet:
        """Rows of the scope above the partition's ``max_rowid`` that no writer assigned to a list,
        then every row appended since this view was made (``refreshed``)."""
        with self._lock:
            if self._tail is None:
                self._seen = int(conn.exec_driver_sql(
                    f"SELECT coalesce(max(rowid), 0) FROM {quoted(self.info.name)}").scalar() or 0)
                rows = self._rows(
                    conn, "v.rowid > ? AND json_extract(v.metadata, '$.resource_id') = ? "
                    f"AND NOT EXISTS (SELECT 1 FROM {IVF_ROWS} r WHERE r.ivf_id = ? AND r.row_id = v.rowid)",
                    (self.meta.max_rowid, self.resource_id, self.meta.ivf_id), hint="NOT INDEXED")
                vset = VectorSet(self.info.dim, self.model_id)
                vset.extend(rows)
                self._add_skips(vset.skips)
                self._tail = vset
            return self._tail

    def ranked(self, qvec: np.ndarray, depth: int, thread_id: str | None, until: str | None = None,
               exclude_thread: str | None = None, nprobe: int | None = None) -> list[Ranked]:
        conn = self.conn
        assert conn is not None, "IvfScope is read through MatrixVectors.scope"
        q = np.asarray(qvec, dtype=np.float32).reshape(-1)
        if thread_id is not None:  # one thread of the resource: its rows exactly, not the probed lists
            rows = [r for r in load_rows(conn, self.info, resource_id=None, thread_id=thread_id)
                    if r.resource_id == self.resource_id]
            vset = VectorSet(self.info.dim, self.model_id)
            vset.extend(rows)
            return vset.ranked(q, depth, None, until, exclude_thread)
        nprobe = nprobe or max(8, int(self.meta.nlist * DEFAULT_NPROBE_SHARE))
        scores = self.meta.centroids @ q
        nearest = np.argsort(-scores)[: min(nprobe, len(scores))].tolist()
        sets = [*self._load_lists(conn, nearest), self.tail(conn)]
        best: dict[str, Ranked] = {}
        for vset in sets:
            for r in vset.ranked(q, depth, thread_id, until, exclude_thread):
                if r.message_id not in best or r.score > best[r.message_id].score:
                    best[r.message_id] = r
        return sorted(best.values(), key=lambda r: (-r.score, r.message_id))[:depth]

    def cosines(self, qvec: np.ndarray, message_ids: list[str]) -> dict[str, float]:
        conn = self.conn
        assert conn is not None, "IvfScope is read through MatrixVectors.scope"
        out: dict[str, float] = {}
        if not message_ids:
            return out
        q = np.asarray(qvec, dtype=np.float32).reshape(-1)
        model = "model_id" if self.info.has_model_id else "NULL"
        marks = ",".join("?" * len(message_ids))
        found: list[tuple[str, np.ndarray]] = []
        for mid, blob, model_of in conn.exec_driver_sql(
            f"SELECT json_extract(metadata, '$.message_id'), embedding, {model} FROM {quoted(self.info.name)} "
            f"INDEXED BY {quoted(self.info.name + '_message_id')} WHERE json_extract(metadata, '$.message_id') IN ({marks})",
            tuple(message_ids),
        ):
            vec = decode_stored(blob, self.info.dim)
            if vec is None or (model_of is not None and model_of != self.model_id):
                continue
            found.append((mid, vec))
        if found:  # scaled to unit length together (``unit_rows``): each score is a cosine
            for (mid, _), vec in zip(found, unit_rows(np.stack([v for _, v in found]))):
                score = float(vec @ q)
                if mid not in out or score > out[mid]:
                    out[mid] = score
        return out
