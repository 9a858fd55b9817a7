"""Reading and writing ``memory_studio_recall_pieces_<dim>`` on libSQL: the piece vectors of long
messages (``core.recall.pieces``), beside the vector table ``memory_messages_<dim>`` and never read by
Mastra or by the scans.

Every write (``write``, ``delete_where``) bumps the recall state key ``<table>:writes`` once, which a
search reads in the statement that reads the vector table's change counters (``counters``): a process
knows without reading the table whether a scope it found without pieces may have gained some. Triggers
bump ``<table>:rewrites`` on every update and delete of a row, whoever runs it (as the vector table's):
with the table's ``max(rowid)`` it tells a process's piece cache (``piece_cache``) which writes were
only inserts.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import sqlalchemy as sa

from core.recall import pieces
from core.recall.schema import quoted
from core.recall.tables import STATE_TABLE
from core.recall.types import MessagePieces, PieceRow
from core.recall.vector_table import TableInfo, unit_rows
from core.storage import bulk, driver_sql
from core.storage.bulk import json_rows_param
from core.storage.catalog import has_table, table_columns, table_names

KEYS = ("message_id", "thread_id", "resource_id")
_COLUMNS = {"message_id", "model_id", "piece", "text_hash", "embedding"}


def writes_key(table: str) -> str:
    return f"{table}:writes"


def rewrites_key(table: str) -> str:
    return f"{table}:rewrites"


def ensure(conn: sa.Connection, dim: int) -> str:
    """Create the pieces table of a dimension (its write counter, its rewrite triggers) when missing."""
    table = pieces.table_name(dim)
    q = quoted(table)
    conn.exec_driver_sql(
        f"CREATE TABLE IF NOT EXISTS {q} (message_id TEXT NOT NULL, model_id TEXT NOT NULL, piece INTEGER NOT NULL, "
        "span_start INTEGER NOT NULL, span_end INTEGER NOT NULL, text_hash TEXT NOT NULL, thread_id TEXT, "
        "resource_id TEXT, embedding BLOB NOT NULL, PRIMARY KEY (message_id, model_id, piece))"
    )
    for key in ("thread_id", "resource_id"):
        conn.exec_driver_sql(f"CREATE INDEX IF NOT EXISTS {quoted(table + '_' + key)} ON {q} ({key})")
    if has_table(conn, STATE_TABLE):
        conn.exec_driver_sql(f"INSERT OR IGNORE INTO {STATE_TABLE} (key, value) VALUES (?, 0)", (writes_key(table),))
        conn.exec_driver_sql(f"INSERT OR IGNORE INTO {STATE_TABLE} (key, value) VALUES (?, 0)", (rewrites_key(table),))
        for event, suffix in (("UPDATE", "au"), ("DELETE", "ad")):  # (not ``_ms_``: that names a vector table's)
            conn.exec_driver_sql(
                f"CREATE TRIGGER IF NOT EXISTS {quoted(table + '_rewrites_' + suffix)} AFTER {event} ON {q} "
                f"BEGIN UPDATE {STATE_TABLE} SET value = value + 1 WHERE key = '{rewrites_key(table)}'; END"
            )
    return table


def has_rewrite_counter(conn: sa.Connection, table: str) -> bool:
    """Whether the table's updates and deletes are counted (``ensure`` of this version made it or came by)."""
    return has_table(conn, STATE_TABLE) and driver_sql.first(
        conn, f"SELECT 1 FROM {STATE_TABLE} WHERE key = ?", (rewrites_key(table),)) is not None


def added_since(conn: sa.Connection, table: str, vector_table: str, newest: tuple[int, int]) -> set[str]:
    """The messages of the vector table's rows (by ``vector_id``) and of the pieces' rows inserted since
    ``newest`` (each table's ``max(rowid)`` then): rows above them, both tables' rowids being handed out
    above every row present while no row was deleted (``piece_cache``)."""
    return {str(r[0]) for r in driver_sql.rows(
        conn, f"SELECT vector_id FROM {quoted(vector_table)} WHERE rowid > ? "
              f"UNION SELECT message_id FROM {quoted(table)} WHERE rowid > ?", newest)}


def exists(conn: sa.Connection, dim: int) -> bool:
    return has_table(conn, pieces.table_name(dim))


def every_table(conn: sa.Connection) -> list[str]:
    """Every pieces table of the database (one per dimension), on either backend."""
    return [t for t in table_names(conn, pieces.TABLE_PREFIX)
            if _COLUMNS <= {c[0] for c in table_columns(conn, t)}]


def _bump(conn: sa.Connection, table: str) -> None:
    conn.exec_driver_sql(f"UPDATE {STATE_TABLE} SET value = value + 1 WHERE key = ?", (writes_key(table),))


def write(conn: sa.Connection, table: str, model_id: str, message_ids: Sequence[str], rows: Sequence[PieceRow],
          bump: bool = True) -> None:
    """Replace ``model_id``'s pieces of ``message_ids`` with ``rows``: one delete, one insert (the rows'
    fields as one JSON document read by ``json_each``, the vectors as one blob cut by ``substr``)."""
    ids = list(dict.fromkeys(message_ids))
    if not ids and not rows:
        return
    q = quoted(table)
    removed = 0
    for marks, params in bulk.in_lists(conn, ids):
        removed += int(conn.exec_driver_sql(
            f"DELETE FROM {q} WHERE model_id = ? AND message_id IN ({marks})", (model_id, *params)).rowcount or 0)
    if rows:
        matrix = np.asarray([r.vector for r in rows], dtype="<f4")
        size = matrix.shape[1] * 4
        doc = json_rows_param([(r.message_id, r.piece, r.start, r.end, r.text_hash, r.thread_id, r.resource_id)
                               for r in rows])
        if doc is not None:
            driver_sql.execute(
                conn,
                f"INSERT INTO {q} (message_id, model_id, piece, span_start, span_end, text_hash, thread_id, resource_id, "
                f"embedding) SELECT value->>0, ?2, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6, "
                f"substr(?3, key * {size} + 1, {size}) FROM json_each(?1) WHERE true ORDER BY key",
                (doc, model_id, matrix.tobytes()),
            )
        else:  # an id JSON would not give back as it went in: bound row by row
            conn.exec_driver_sql(
                f"INSERT INTO {q} (message_id, model_id, piece, span_start, span_end, text_hash, thread_id, resource_id, "
                "embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(r.message_id, model_id, r.piece, r.start, r.end, r.text_hash, r.thread_id, r.resource_id,
                  np.asarray(r.vector, dtype="<f4").tobytes()) for r in rows],
            )
    if bump and (rows or removed) and has_table(conn, STATE_TABLE):
        _bump(conn, table)


def delete_where(conn: sa.Connection, table: str, key: str, values: Sequence[str]) -> int:
    """Delete every model's pieces whose ``key`` is one of ``values``."""
    if key not in KEYS:
        raise ValueError(f"pieces are deleted by {', '.join(KEYS)}, not {key!r}")
    removed = 0
    for marks, params in bulk.in_lists(conn, list(dict.fromkeys(values))):
        removed += int(conn.exec_driver_sql(f"DELETE FROM {quoted(table)} WHERE {key} IN ({marks})", params).rowcount or 0)
    if removed and has_table(conn, STATE_TABLE):
        _bump(conn, table)
    return removed


def read(conn: sa.Connection, table: str, info: TableInfo, model_id: str, message_ids: Sequence[str]) -> dict[str, MessagePieces]:
    """``model_id``'s pieces of these messages with each one's passage vector and text, one statement:
    the pieces' rows, then (``UNION ALL``) each of those messages' passage row once (piece -1). Messages
    whose passage row is missing, of another model, or holds another text than the pieces were cut from
    are left out."""
    ids = list(dict.fromkeys(message_ids))
    if not ids:
        return {}
    q, v = quoted(table), quoted(info.name)
    model = "AND v.model_id = ?" if info.has_model_id else ""
    dim = info.dim
    found: dict[str, list[Any]] = {}
    passages: dict[str, tuple[Any, str]] = {}
    for marks, params in bulk.in_lists(conn, ids):
        sql = (
            f"SELECT p.message_id, p.piece, p.span_start, p.span_end, p.text_hash, p.embedding FROM {q} p "
            f"WHERE p.model_id = ? AND p.message_id IN ({marks}) "
            f"UNION ALL SELECT v.vector_id, -1, 0, 0, json_extract(v.metadata, '$.content'), v.embedding FROM {v} v "
            f"WHERE v.vector_id IN (SELECT DISTINCT message_id FROM {q} WHERE model_id = ? AND message_id IN ({marks})) {model}"
        )
        args = (model_id, *params, model_id, *params, *((model_id,) if info.has_model_id else ()))
        for mid, piece, start, end, digest, blob in driver_sql.rows(conn, sql, args):
            if piece < 0:
                passages[mid] = (blob, digest if isinstance(digest, str) else "")
            else:
                found.setdefault(mid, []).append((piece, start, end, digest, blob))
    # Every vector decoded at once (one buffer, one check, one scaling), each message's pieces a slice.
    size = dim * 4
    kept: list[tuple[str, list[Any], str]] = []
    blobs: list[bytes] = []
    for mid, rows in found.items():
        held = passages.get(mid)
        if held is None:
            continue
        blob, content = held
        digest = rows[0][3]
        if any(r[3] != digest for r in rows) or pieces.text_hash(content) != digest:
            continue  # cut from another text than the passage row holds: scored by the passage alone
        parts = [blob, *(r[4] for r in sorted(rows, key=lambda r: r[0]))]
        if not all(isinstance(x, (bytes, bytearray, memoryview)) and len(x) == size for x in parts):
            continue
        rows.sort(key=lambda r: r[0])
        kept.append((mid, rows, content))
        blobs.extend(bytes(x) for x in parts)
    if not kept:
        return {}
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(-1, dim)
    finite = np.isfinite(matrix).all(axis=1)
    matrix = unit_rows(matrix)
    # Each piece's p . v with its passage, for the search's scoring, computed here once (kept with the entry
    # by ``piece_cache``), where the formula's rows do not depend on each other (``pieces.dots_by_row``).
    dots: np.ndarray | None = None
    if pieces.dots_by_row(dim):
        lengths = np.fromiter((len(rows) + 1 for _, rows, _ in kept), dtype=np.intp, count=len(kept))
        firsts = np.cumsum(lengths) - lengths  # each message's passage row
        piece_rows = np.ones(len(matrix), dtype=bool)
        piece_rows[firsts] = False
        dots = np.empty(len(matrix), dtype=np.float64)
        dots[piece_rows] = pieces.passage_dots(matrix[piece_rows], matrix[np.repeat(firsts, lengths - 1)])
    out: dict[str, MessagePieces] = {}
    at = 0
    for mid, rows, content in kept:
        n = len(rows) + 1
        if finite[at:at + n].all():
            out[mid] = MessagePieces(mid, matrix[at], matrix[at + 1:at + n],
                                     tuple((int(r[1]), int(r[2])) for r in rows), content,
                                     dots[at + 1:at + n] if dots is not None else None)
        at += n
    return out


def delete_models_but(conn: sa.Connection, table: str, keep: str) -> int:
    """Delete the pieces of every model but ``keep`` (``models.drop_other_models``)."""
    removed = int(conn.exec_driver_sql(f"DELETE FROM {quoted(table)} WHERE model_id <> ?", (keep,)).rowcount or 0)
    if removed and has_table(conn, STATE_TABLE):
        _bump(conn, table)
    return removed


def hashes(conn: sa.Connection, table: str, model_id: str, message_ids: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for marks, params in bulk.in_lists(conn, list(dict.fromkeys(message_ids))):
        out.update(conn.exec_driver_sql(
            f"SELECT message_id, min(text_hash) FROM {quoted(table)} WHERE model_id = ? AND message_id IN ({marks}) "
            "GROUP BY message_id", (model_id, *params)).all())
    return out


def any_in_scope(conn: sa.Connection, table: str, model_id: str, resource_id: str | None, thread_id: str | None) -> bool:
    key, value = ("thread_id", thread_id) if thread_id is not None else ("resource_id", resource_id)
    return conn.exec_driver_sql(
        f"SELECT EXISTS (SELECT 1 FROM {quoted(table)} WHERE {key} = ? AND model_id = ?)", (value, model_id)
    ).scalar() == 1


def counts(conn: sa.Connection, table: str) -> dict[str, int]:
    return {str(m): int(n) for m, n in conn.exec_driver_sql(
        f"SELECT model_id, count(DISTINCT message_id) FROM {quoted(table)} GROUP BY model_id").all()}


def writes(conn: sa.Connection, table: str) -> int | None:
    """The table's write counter (None: not kept)."""
    row = driver_sql.first(conn, f"SELECT value FROM {STATE_TABLE} WHERE key = ?", (writes_key(table),))
    return None if row is None or row[0] is None else int(row[0])


def drop_stale(conn: sa.Connection, current: Mapping[str, str | None]) -> int:
    """Every pieces table's pieces of these messages cut from another text than the message has now
    (``current``: its recall text, None when gone or without text). Plain SQL: either backend."""
    if not current:
        return 0
    removed = 0
    for table in every_table(conn):
        q = quoted(table)
        stale: set[str] = set()
        for marks, params in bulk.in_lists(conn, list(current)):
            for mid, digest in conn.exec_driver_sql(
                    f"SELECT DISTINCT message_id, text_hash FROM {q} WHERE message_id IN ({marks})", params).all():
                now = current.get(mid)
                if now is None or pieces.text_hash(now) != digest:
                    stale.add(mid)
        if stale:
            for marks, params in bulk.in_lists(conn, sorted(stale)):
                removed += int(conn.exec_driver_sql(f"DELETE FROM {q} WHERE message_id IN ({marks})", params).rowcount or 0)
            if has_table(conn, STATE_TABLE):
                _bump(conn, table)
    return removed
