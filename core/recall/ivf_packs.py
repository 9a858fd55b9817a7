"""Each persisted IVF list's vectors kept in list order (libSQL), so a restarted process reads a probed
list with one range scan instead of one random row read per vector.

Measured on a 1M-row resource (1,000 lists, 31 probed, ~30k rows): the rows read one by one from the
4 GB vector table cost 0.75–1.3 s; the same lists copied row per vector (a WITHOUT ROWID table keyed
by list, embedding inline) 280–620 ms CPU, and twice the disk (each 2 KB vector spills to its own
overflow page); packed, one blob per list, 56–65 ms CPU (figures in docs/ARCHITECTURE.md).

A *pack* (``memory_studio_ivf_packs``, one row per list and chunk) holds a list's rows sorted by
row id: their row ids (int64), vectors (float32, as stored: scores are the exact ones), and JSON arrays of
their message ids, thread ids, created_at and which were written without a model id. The partition's list
entries (``memory_studio_ivf_rows``) say where each row's current copy is: ``chunk`` = the pack that
holds it, NULL = read the row from the vector table (a row assigned since the last pack, or one a
trigger sent back because it was rewritten or deleted, by us or by another program). So the packs
never answer for a row that changed: the entry is the truth, the pack only a faster copy.

Upkeep (the writer's ``maintain``, outside its write transaction): when a partition's unpacked
entries pass ``DELTA_SHARE`` of its rows, each list with such entries gets one more chunk holding
them; a list with more than ``MAX_CHUNKS`` chunks is merged into one. Migration
``0021_recall_ivf_packs`` packs the partitions built before it (a one-time read of their rows).
Derived data, like the partition: dropping it loses nothing but speed.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Literal, Sequence, overload

import numpy as np
import sqlalchemy as sa

from core.recall.schema import PACKS_MIGRATION, ensure_pack_triggers, quoted
from core.recall.tables import IVF_PACKS, IVF_ROWS, IVF_TABLE
from core.recall.vector_table import RawRow, TableInfo, decode_stored, inspect, row_columns, unit_rows
from core.storage import catalog, migrations
from core.stored_text import json_text

MAX_CHUNKS = 8  # a list with more chunks than this is merged into one
DELTA_SHARE = 1 / 50  # pack a partition's unpacked entries once they are this share of its rows
DELTA_MIN = 1_000  # ... and at least this many
LIST_GROUP = 64  # lists read and packed together (bounds memory: ~64 MB of 512-d vectors)


@dataclass
class PackRows:
    """Rows of one scope and model, aligned: row ids, vectors and what a search shows of each."""

    rowids: np.ndarray  # int64
    vectors: np.ndarray  # [n, dim] float32
    message_ids: list[str]
    thread_ids: list[str | None]
    created_at: list[str | None]
    unknown: list[bool]  # written without a model id (Mastra's rows)

    def take(self, idx: np.ndarray | list[int]) -> "PackRows":
        pos = np.asarray(idx, dtype=np.int64)
        ids = pos.tolist()
        return PackRows(self.rowids[pos], self.vectors[pos], [self.message_ids[i] for i in ids],
                        [self.thread_ids[i] for i in ids], [self.created_at[i] for i in ids],
                        [self.unknown[i] for i in ids])

    @staticmethod
    def concat(parts: Sequence["PackRows"], dim: int) -> "PackRows":
        if not parts:
            return PackRows(np.empty(0, np.int64), np.empty((0, dim), np.float32), [], [], [], [])
        return PackRows(np.concatenate([p.rowids for p in parts]), np.concatenate([p.vectors for p in parts]),
                        [m for p in parts for m in p.message_ids], [t for p in parts for t in p.thread_ids],
                        [c for p in parts for c in p.created_at], [u for p in parts for u in p.unknown])

    def sorted(self) -> "PackRows":
        order = np.argsort(self.rowids, kind="stable")
        return self if bool(np.all(order == np.arange(len(order)))) else self.take(order)


def usable(rows: Iterable[RawRow], model_id: str, dim: int, resource_id: str) -> PackRows:
    """The rows a search of this scope would keep (``VectorSet.extend``'s rules: this model's or no
    model's, a finite vector of this size, a message id; and of this resource), as ``PackRows``."""
    keep: list[tuple[RawRow, np.ndarray]] = []
    for row in rows:
        if row.model_id is not None and row.model_id != model_id:
            continue
        if not row.message_id or row.resource_id != resource_id:
            continue
        vec = decode_stored(row.blob, dim)
        if vec is not None:
            keep.append((row, vec))
    if not keep:
        return PackRows.concat([], dim)
    return PackRows(np.fromiter((r.rowid for r, _ in keep), np.int64, len(keep)),
                    unit_rows(np.stack([v for _, v in keep])),  # another program's rows scaled to unit length
                    [r.message_id or "" for r, _ in keep], [r.thread_id for r, _ in keep],
                    [r.created_at for r, _ in keep], [r.model_id is None for r, _ in keep])


def write_pack(conn: sa.Connection, ivf_id: int, list_no: int, chunk: int, rows: PackRows, *, mark: bool = True) -> None:
    """Store one chunk of a list (``rows`` sorted by row id); ``mark``: point the rows' list entries
    at it (the caller inserted them pointing there already otherwise)."""
    # Flat arrays: parsed three times faster than one array per row (the pack is read on a search).
    meta = json_text({"message_ids": rows.message_ids, "thread_ids": rows.thread_ids, "created_at": rows.created_at,
                       "unknown_model": [i for i, u in enumerate(rows.unknown) if u]}, ensure_ascii=False)
    conn.exec_driver_sql(
        f"INSERT INTO {IVF_PACKS} (ivf_id, list, chunk, n, row_ids, meta, vectors) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (ivf_id, list_no, chunk, len(rows.rowids), np.ascontiguousarray(rows.rowids, dtype="<i8").tobytes(), meta,
         np.ascontiguousarray(rows.vectors, dtype="<f4").tobytes()))
    if mark:
        ids = rows.rowids.tolist()
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            conn.exec_driver_sql(
                f"UPDATE {IVF_ROWS} SET chunk = ? WHERE ivf_id = ? AND list = ? AND row_id IN ({','.join('?' * len(part))})",
                (chunk, ivf_id, list_no, *part))


def read_packs(conn: sa.Connection, ivf_id: int, lists: Sequence[int], dim: int) -> dict[tuple[int, int], PackRows]:
    """The chunks of these lists, by (list, chunk)."""
    out: dict[tuple[int, int], PackRows] = {}
    if not lists:
        return out
    for li, chunk, n, rid, meta, vec in conn.exec_driver_sql(
        f"SELECT list, chunk, n, row_ids, meta, vectors FROM {IVF_PACKS} "
        f"WHERE ivf_id = ? AND list IN ({','.join('?' * len(lists))})", (ivf_id, *lists),
    ).all():
        cols = json.loads(meta)
        unknown = [False] * int(n)
        for i in cols["unknown_model"]:
            unknown[i] = True
        out[(int(li), int(chunk))] = PackRows(
            np.frombuffer(bytes(rid), dtype="<i8"), np.frombuffer(bytes(vec), dtype="<f4").reshape(int(n), dim),
            cols["message_ids"], cols["thread_ids"], cols["created_at"], unknown)
    return out


def read_lists(conn: sa.Connection, info: TableInfo, ivf_id: int, model_id: str, resource_id: str,
               lists: Sequence[int]) -> tuple[dict[int, PackRows], dict[int, list[RawRow]]]:
    """These lists' rows in row-id order (the order their entries are stored in), each from the chunk
    its entry names or, for an entry that names none, from the vector table; and per list the rows
    read from the table (a search counts the ones it skips).

    A chunk whose entries all still point at it (counted in SQL) is taken whole; only a list with a
    row moved or sent back to the table has its entries read one by one."""
    marks = ",".join("?" * len(lists))
    counts: dict[int, dict[int | None, int]] = {li: {} for li in lists}
    for li, chunk, n in conn.exec_driver_sql(
        f"SELECT list, chunk, count(*) FROM {IVF_ROWS} WHERE ivf_id = ? AND list IN ({marks}) GROUP BY list, chunk",
        (ivf_id, *lists),
    ).all():
        counts[int(li)][None if chunk is None else int(chunk)] = int(n)
    packs = read_packs(conn, ivf_id, lists, info.dim)
    loose: dict[int, list[RawRow]] = {li: [] for li in lists}
    if any(None in c for c in counts.values()):
        for r in _table_rows(conn, info, ivf_id, [li for li, c in counts.items() if None in c], with_list=True):
            if r[1].resource_id == resource_id:  # a reused rowid of another scope is not ours
                loose[r[0]].append(r[1])
    partial = [li for li, c in counts.items()
               if any(ch is not None and ((li, ch) not in packs or len(packs[(li, ch)].rowids) != n) for ch, n in c.items())]
    entries: dict[int, list[tuple[int, int | None]]] = defaultdict(list)
    if partial:
        for li, row_id, chunk in conn.exec_driver_sql(
            f"SELECT list, row_id, chunk FROM {IVF_ROWS} WHERE ivf_id = ? AND list IN ({','.join('?' * len(partial))})",
            (ivf_id, *partial),
        ).all():
            entries[int(li)].append((int(row_id), None if chunk is None else int(chunk)))
    out: dict[int, PackRows] = {}
    for li in lists:
        fresh = usable(loose[li], model_id, info.dim, resource_id)
        if li in entries:
            out[li] = _pick(entries[li], {c: p for (l, c), p in packs.items() if l == li}, fresh, info.dim)
        else:
            parts = [packs[(li, c)] for c in sorted(ch for ch in counts[li] if ch is not None)]
            if len(fresh.rowids):
                parts.append(fresh)
            out[li] = parts[0] if len(parts) == 1 else PackRows.concat(parts, info.dim).sorted()
    return out, loose


def _pick(entries: Sequence[tuple[int, int | None]], packs: dict[int, PackRows], loose: PackRows, dim: int) -> PackRows:
    """One list's rows: each entry's copy from the chunk it names, or from ``loose`` when it names none."""
    by_chunk: dict[int | None, list[int]] = defaultdict(list)
    for row_id, chunk in entries:
        by_chunk[chunk].append(row_id)
    parts: list[PackRows] = []
    for chunk, ids in by_chunk.items():
        source = loose if chunk is None else packs.get(chunk)
        if source is None or not len(source.rowids):
            continue
        want = np.asarray(ids, dtype=np.int64)
        pos = np.minimum(np.searchsorted(source.rowids, want), len(source.rowids) - 1)
        parts.append(source.take(pos[source.rowids[pos] == want]))
    return PackRows.concat(parts, dim).sorted()


def due(conn: sa.Connection, ivf_id: int) -> bool:
    row = conn.exec_driver_sql(f"SELECT unpacked, rows_now FROM {IVF_TABLE} WHERE ivf_id = ?", (ivf_id,)).first()
    return row is not None and int(row[0]) >= max(DELTA_MIN, int(row[1]) * DELTA_SHARE)


def pack_pending(conn: sa.Connection, info: TableInfo, ivf_id: int, model_id: str, resource_id: str) -> int:
    """Give every list with unpacked entries one more chunk holding them (merging a list that then has
    more than ``MAX_CHUNKS``). Entries whose row is gone from the table are dropped; rows a search
    would skip (another model's, corrupt) stay unpacked, read and counted as before. Returns the
    rows packed."""
    pending: dict[int, list[int]] = defaultdict(list)
    for li, row_id in conn.exec_driver_sql(
        f"SELECT list, row_id FROM {IVF_ROWS} WHERE ivf_id = ? AND chunk IS NULL", (ivf_id,)
    ):
        pending[int(li)].append(int(row_id))
    lists = sorted(pending)
    packed = 0
    for start in range(0, len(lists), LIST_GROUP):
        group = lists[start : start + LIST_GROUP]
        rows = _table_rows(conn, info, ivf_id, group)
        found = {r.rowid for r in rows}
        gone = [rid for li in group for rid in pending[li] if rid not in found]
        for s in range(0, len(gone), 500):
            part = gone[s : s + 500]
            conn.exec_driver_sql(f"DELETE FROM {IVF_ROWS} WHERE ivf_id = ? AND row_id IN ({','.join('?' * len(part))})",
                                 (ivf_id, *part))
        by_list: dict[int, list[RawRow]] = defaultdict(list)
        list_of = {rid: li for li in group for rid in pending[li]}
        for r in rows:
            by_list[list_of[r.rowid]].append(r)
        chunks = _chunk_counts(conn, ivf_id, group)
        for li in group:
            fresh = usable(by_list[li], model_id, info.dim, resource_id).sorted()
            if not len(fresh.rowids):
                continue
            top, count = chunks.get(li, (-1, 0))
            write_pack(conn, ivf_id, li, top + 1, fresh)
            packed += len(fresh.rowids)
            if count + 1 > MAX_CHUNKS:
                merge_list(conn, ivf_id, li, info.dim)
    conn.exec_driver_sql(f"UPDATE {IVF_TABLE} SET unpacked = 0 WHERE ivf_id = ?", (ivf_id,))
    return packed


def merge_list(conn: sa.Connection, ivf_id: int, list_no: int, dim: int) -> None:
    """Rewrite a list's chunks as one, holding just the rows its entries still point at."""
    entries = [(int(r), None if c is None else int(c)) for r, c in conn.exec_driver_sql(
        f"SELECT row_id, chunk FROM {IVF_ROWS} WHERE ivf_id = ? AND list = ? AND chunk IS NOT NULL", (ivf_id, list_no))]
    packs = {c: rows for (_, c), rows in read_packs(conn, ivf_id, [list_no], dim).items()}
    merged = _pick(entries, packs, PackRows.concat([], dim), dim)
    conn.exec_driver_sql(f"DELETE FROM {IVF_PACKS} WHERE ivf_id = ? AND list = ?", (ivf_id, list_no))
    chunk = max(packs, default=-1) + 1
    if len(merged.rowids):
        write_pack(conn, ivf_id, list_no, chunk, merged)


def _chunk_counts(conn: sa.Connection, ivf_id: int, lists: Sequence[int]) -> dict[int, tuple[int, int]]:
    """Per list: its highest chunk number and how many chunks it has."""
    return {int(li): (int(top), int(n)) for li, top, n in conn.exec_driver_sql(
        f"SELECT list, max(chunk), count(*) FROM {IVF_PACKS} WHERE ivf_id = ? AND list IN ({','.join('?' * len(lists))}) "
        "GROUP BY list", (ivf_id, *lists))}


@overload
def _table_rows(conn: sa.Connection, info: TableInfo, ivf_id: int, lists: Sequence[int]) -> list[RawRow]: ...
@overload
def _table_rows(conn: sa.Connection, info: TableInfo, ivf_id: int, lists: Sequence[int], with_list: Literal[True]
                ) -> list[tuple[int, RawRow]]: ...
def _table_rows(conn: sa.Connection, info: TableInfo, ivf_id: int, lists: Sequence[int], with_list: bool = False
                ) -> list[RawRow] | list[tuple[int, RawRow]]:
    """The vector rows of these lists' unpacked entries (``with_list``: each with its list)."""
    rows = [
        (int(r[0]), RawRow(int(r[1]), r[2], r[3] or r[7], r[4], r[5], r[6], r[8]))
        for r in conn.exec_driver_sql(
            # CROSS JOIN keeps this order: the lists' entries first, then each row by its rowid.
            f"SELECT r.list, {row_columns(info)} FROM {IVF_ROWS} r CROSS JOIN {quoted(info.name)} v "
            f"ON v.rowid = r.row_id WHERE r.ivf_id = ? AND r.list IN ({','.join('?' * len(lists))}) AND r.chunk IS NULL",
            (ivf_id, *lists)).all()
    ]
    return rows if with_list else [row for _, row in rows]


def drop(conn: sa.Connection, ivf_id: int) -> None:
    """A partition's packs (with its entries and centroids, dropped by the caller)."""
    conn.exec_driver_sql(f"DELETE FROM {IVF_PACKS} WHERE ivf_id = ?", (ivf_id,))


_DDL = (
    f"ALTER TABLE {IVF_ROWS} ADD COLUMN chunk INTEGER",
    f"ALTER TABLE {IVF_TABLE} ADD COLUMN unpacked INTEGER NOT NULL DEFAULT 0",
    # A rowid table with a separate index: a WITHOUT ROWID key lookup reads a cell's whole payload to
    # compare it, which for a 2 MB pack made reading the probed lists ×5 slower (measured).
    f"CREATE TABLE IF NOT EXISTS {IVF_PACKS} (pack_id INTEGER PRIMARY KEY, ivf_id INTEGER NOT NULL, "
    "list INTEGER NOT NULL, chunk INTEGER NOT NULL, n INTEGER NOT NULL, row_ids BLOB NOT NULL, meta TEXT NOT NULL, "
    "vectors BLOB NOT NULL)",
    f"CREATE UNIQUE INDEX IF NOT EXISTS {IVF_PACKS}_list ON {IVF_PACKS} (ivf_id, list, chunk)",
)


def _upgrade(conn: sa.Connection) -> None:
    """Pack the partitions persisted before this migration, and put the triggers on every vector
    table of ours (the ones with the rewrite trigger ``<table>_ms_au``)."""
    for name, table in catalog.triggers(conn):
        if name == table + "_ms_au":
            ensure_pack_triggers(conn, table)
    for ivf_id, table, model_id, scope, dim in conn.exec_driver_sql(
        f"SELECT ivf_id, vector_table, model_id, scope, dim FROM {IVF_TABLE}"
    ).all():
        info = inspect(conn, str(table), int(dim))
        if info is None or not str(scope).startswith("resource:"):
            continue
        pack_pending(conn, info, int(ivf_id), str(model_id), str(scope)[len("resource:"):])


migrations.register(
    migrations.Migration(
        PACKS_MIGRATION, "Each persisted IVF list's vectors in list order, read by one range scan", _DDL, _upgrade,
        postgres=(),  # pgvector's HNSW index is the server's own
    )
)
