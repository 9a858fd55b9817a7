"""Reading and writing ``memory_messages_<dim>`` rows: the vectors' store of record.

Works on tables we created (with ``model_id`` and expression indexes) and on tables Mastra created
(DiskANN index, no ``model_id``). On the latter the planner would pick the DiskANN b-tree, which plain
SQLite sees as empty, so scans there say ``NOT INDEXED`` (spec §1.5 gotchas).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import chain
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import sqlalchemy as sa

from core.recall.schema import STATE_TABLE, columns, quoted
from core.storage import bulk, driver_sql
from core.storage.bulk import json_rows_param, plain_text
from core.storage.catalog import has_table
from core.stored_text import json_text


@dataclass(frozen=True)
class TableInfo:
    name: str
    dim: int
    has_model_id: bool  # False: written by Mastra; the model is unknown
    has_our_indexes: bool
    utf8: bool = True  # the database's text encoding is UTF-8 (what ``_upsert_packed``'s CAST reads)


@dataclass
class RawRow:
    rowid: int
    blob: Any
    message_id: str | None
    thread_id: str | None
    resource_id: str | None
    model_id: str | None
    created_at: str | None = None  # the message's createdAt (ISO text), for "as of" searches


@dataclass(frozen=True)
class VectorState:
    """What a vector table holds for one message: the passage hash it was embedded from (None:
    written before hashes were kept, or by Mastra), its model, and where the message stood."""

    content_hash: str | None
    model_id: str | None
    thread_id: str | None
    created_at: str | None
    content: str | None = None  # the message text it was embedded from (our rows), for rows without a hash

    def stale(self, digest: str, text: str) -> bool:
        """Whether this row was embedded from another passage than ``digest`` (rows without a hash:
        from another text than ``text``; an unknown text counts as unchanged)."""
        if self.content_hash is not None:
            return self.content_hash != digest
        return self.content is not None and self.content != text


def inspect(conn: sa.Connection, name: str, dim: int) -> TableInfo | None:
    if not has_table(conn, name):
        return None
    cols = columns(conn, name)
    indexes = {r[1] for r in conn.exec_driver_sql(f"PRAGMA index_list({quoted(name)})")}
    encoding = str(conn.exec_driver_sql("PRAGMA encoding").scalar() or "")
    return TableInfo(name, dim, "model_id" in cols, f"{name}_resource_id" in indexes, encoding.upper() == "UTF-8")


def _scan_hint(info: TableInfo, key: str | None) -> str:
    if info.has_our_indexes and key is not None:
        return f"INDEXED BY {quoted(info.name + '_' + key)}"
    return "NOT INDEXED"


scan_hint = _scan_hint  # for the other modules of this package that read a table by message or thread


def row_columns(info: TableInfo) -> str:
    """The columns of a ``RawRow`` (rowid, embedding, message_id, thread_id, resource_id, model id,
    vector_id, created_at) of the table aliased ``v``."""
    model = "v.model_id" if info.has_model_id else "NULL"
    return (
        "v.rowid, v.embedding, json_extract(v.metadata, '$.message_id'), json_extract(v.metadata, '$.thread_id'), "
        f"json_extract(v.metadata, '$.resource_id'), {model}, v.vector_id, "
        # Our rows carry the message's time; Mastra's do not, so theirs are looked up (coalesce stops early).
        "coalesce(json_extract(v.metadata, '$.created_at'), (SELECT m.\"createdAt\" FROM mastra_messages m "
        "WHERE m.id = coalesce(json_extract(v.metadata, '$.message_id'), v.vector_id)))"
    )


def load_rows(
    conn: sa.Connection, info: TableInfo, *, resource_id: str | None, thread_id: str | None, after_rowid: int = 0
) -> list[RawRow]:
    """Rows for one resource, one thread, or one thread within a resource (both given), newer than
    ``after_rowid``."""
    return [row for chunk in row_chunks(conn, info, resource_id=resource_id, thread_id=thread_id,
                                        after_rowid=after_rowid) for row in chunk]


def row_chunks(
    conn: sa.Connection, info: TableInfo, *, resource_id: str | None, thread_id: str | None, after_rowid: int = 0,
    size: int = 4_096,
) -> Iterator[list[RawRow]]:
    """``load_rows`` a piece at a time (``size`` rows), so a large scope's blobs need not all be held
    as Python objects at once while they are copied into a matrix."""
    scope, params, key = _scope_where(resource_id, thread_id)
    hint = _scan_hint(info, key) if after_rowid == 0 else "NOT INDEXED" if not info.has_our_indexes else ""
    where = " AND ".join(["v.rowid > ?", *scope])
    sql = f"SELECT {row_columns(info)} FROM {quoted(info.name)} v {hint} WHERE {where} ORDER BY v.rowid"
    result = conn.exec_driver_sql(sql, (after_rowid, *params))
    while True:
        got = result.fetchmany(size)
        if not got:
            return
        # Rows written by Mastra's SemanticRecall processor use vector_id = message id.
        yield [RawRow(int(r[0]), r[1], r[2] or r[6], r[3], r[4], r[5], r[7]) for r in got]


def count_rows(conn: sa.Connection, info: TableInfo, *, resource_id: str | None, thread_id: str | None) -> int:
    """At least as many rows as ``load_rows`` reads (every model's), counted from one index alone: the
    thread's when one is given (its rows of any resource), else the resource's."""
    scope, params, key = _scope_where(None if thread_id is not None else resource_id, thread_id)
    sql = f"SELECT count(*) FROM {quoted(info.name)} {_scan_hint(info, key)} WHERE {' AND '.join(scope) or '1'}"
    return int(conn.exec_driver_sql(sql, tuple(params)).scalar() or 0)


def _scope_where(resource_id: str | None, thread_id: str | None) -> tuple[list[str], list[object], str | None]:
    """A scope's conditions on the metadata, their values, and the index that narrows it most."""
    where: list[str] = []
    params: list[object] = []
    key = None
    if resource_id is not None:
        where.append("json_extract(metadata, '$.resource_id') = ?")
        params.append(resource_id)
        key = "resource_id"
    if thread_id is not None:  # (within a resource too: the thread's index is the narrower)
        where.append("json_extract(metadata, '$.thread_id') = ?")
        params.append(thread_id)
        key = "thread_id"
    return where, params, key


def decode(blob: Any, dim: int) -> np.ndarray | None:
    """A float32 vector from an F32_BLOB, of unit length (``unit_rows``), or None if it is the wrong size
    or not finite."""
    vec = decode_stored(blob, dim)
    return None if vec is None else unit_rows(vec.reshape(1, dim)).reshape(dim)


def decode_stored(blob: Any, dim: int) -> np.ndarray | None:
    """``decode`` without the scaling: the vector as stored. For a caller that reads many rows and scales
    them together (``unit_rows`` over the stack): one row at a time costs ~7 µs a row more, which a 1M-row
    partition build would pay a million times."""
    if not isinstance(blob, (bytes, bytearray, memoryview)) or len(blob) != dim * 4:
        return None
    vec = np.frombuffer(bytes(blob), dtype="<f4")
    if not np.all(np.isfinite(vec)):
        return None
    return vec


#: How far from 1 a stored vector's length may be and still be taken as it is. Our embedders write unit
#: vectors (float32 rounding keeps them within ~1e-6); another program's may not be (an embedder that does
#: not normalise, a row written to be found).
UNIT_TOLERANCE = 1e-4


def unit_rows(vecs: np.ndarray) -> np.ndarray:
    """``vecs`` (rows of float32) with every row whose length is off 1 by more than ``UNIT_TOLERANCE``
    scaled to unit length, so that a dot product with a unit query is the cosine Mastra's libSQL
    (``vector_distance_cos``) and pgvector (``<=>``) score: a longer row must not outrank every other by
    its length alone. Rows of unit length are kept bit for bit (every search answer over our own vectors
    stays the same), and ``vecs`` itself is returned when none is off; a zero row stays zero (a cosine
    of 0 with everything)."""
    norms = np.sqrt(np.einsum("ij,ij->i", vecs, vecs, dtype=np.float64))
    off = np.abs(norms - 1.0) > UNIT_TOLERANCE
    if not off.any():
        return vecs
    out = np.array(vecs, dtype=np.float32)
    scale = off & (norms > 0)
    out[scale] = (vecs[scale].astype(np.float64) / norms[scale, None]).astype(np.float32)
    return out


_quote = json.encoder.encode_basestring  # json's own string quoting (C)


def _metadata_json(meta: dict[str, Any]) -> str:
    """``json.dumps(meta, ensure_ascii=False)``, the metadata bytes Mastra reads: written here for a
    dict of strings (every row the index writes) with json's own string quoting, several times
    cheaper than the encoder, which takes any other value. The keys and punctuation come from one
    template per key order (the same few every row)."""
    try:
        keys = tuple(meta)
        templates = _TEMPLATES.get(keys) or _templates(keys)
        return templates[0] % tuple(map(_quote, meta.values()))
    except TypeError:  # a value or key that is not a string (None, a number): the encoder says it
        return json_text(meta, ensure_ascii=False)


def _metadata_texts(metas: Sequence[dict[str, Any]]) -> list[str]:
    """``_metadata_json`` of each of a batch's metadata. The usual batch (one key order, every value a
    string JSON writes as it is: ``bulk.plain_text`` over all of them at once) by one ``%`` a row with
    the values put between the template's quotes; any other batch row by row."""
    if not metas:
        return []
    keys = tuple(metas[0])
    try:
        if all(map(keys.__eq__, map(tuple, metas))):  # (map over C callables: no Python frame a row)
            rows = [tuple(meta.values()) for meta in metas]
            values = list(chain.from_iterable(rows))
            if not set(map(type, values)) - _STR and plain_text("".join(values)):
                plain = (_TEMPLATES.get(keys) or _templates(keys))[1]
                return [plain % row for row in rows]
    except TypeError:  # a key that is not a string
        pass
    return [_metadata_json(meta) for meta in metas]


_STR = {str}
# A key order's templates: values quoted by the caller ('{"k": %s, ...}'), values written between quotes
# ('{"k": "%s", ...}'). The same few key orders every row.
_TEMPLATES: dict[tuple[str, ...], tuple[str, str]] = {}


def _templates(keys: tuple[str, ...]) -> tuple[str, str]:
    if set(map(type, keys)) - _STR:
        raise TypeError("a key that is not a string")  # the encoder's rules for other keys
    heads = [_quote(k).replace("%", "%%") + ": " for k in keys]
    found = ("{" + ", ".join(h + "%s" for h in heads) + "}", "{" + ", ".join(h + '"%s"' for h in heads) + "}")
    if len(_TEMPLATES) < 64:
        _TEMPLATES[keys] = found
    return found


def upsert(conn: sa.Connection, info: TableInfo, rows: Sequence[tuple[str, np.ndarray, dict[str, Any], str]]) -> None:
    """Write (vector_id, vector, metadata, model_id) rows; an existing vector_id is replaced."""
    q = quoted(info.name)
    if info.has_model_id:
        head = f"INSERT INTO {q} (vector_id, embedding, metadata, model_id)"
        tail = (
            "ON CONFLICT(vector_id) DO UPDATE SET embedding = excluded.embedding, metadata = excluded.metadata, "
            "model_id = excluded.model_id WHERE embedding IS NOT excluded.embedding "
            "OR metadata IS NOT excluded.metadata OR model_id IS NOT excluded.model_id"
        )  # an identical re-write is a no-op, so it does not fire the rewrite trigger (a cache reload)
    else:
        head = f"INSERT INTO {q} (vector_id, embedding, metadata)"
        tail = "ON CONFLICT(vector_id) DO UPDATE SET embedding = excluded.embedding, metadata = excluded.metadata"
    metas = _metadata_texts([meta for _, _, meta, _ in rows])
    if info.utf8 and _upsert_packed(conn, head, tail, rows, metas, info.has_model_id):
        return
    params: list[tuple[Any, ...]] = [
        (vid, np.asarray(vec, dtype="<f4").tobytes(), meta, *((model,) if info.has_model_id else ()))
        for (vid, vec, _, model), meta in zip(rows, metas)
    ]
    bulk.insert_rows(conn, head, params, tail)  # one statement per batch (libSQL only: pgvector has its own)


def _upsert_packed(conn: sa.Connection, head: str, tail: str, rows: Sequence[tuple[str, np.ndarray, dict[str, Any], str]],
                   metas: list[str], with_model: bool) -> bool:
    """``upsert``'s rows in one statement with three bound values, whatever their number: the vectors
    as one blob and the metadata texts as one UTF-8 blob, each row's cut by ``substr`` (a blob's is
    by byte, O(1)) and read back with ``CAST(... AS TEXT)`` (the same bytes, as TEXT); the ids, cuts
    and model ids as one JSON document read by ``json_each``, in order. The same rows as the
    placeholders write (same values, types, order, so the same rowids), for a quarter of the binding
    that was most of the statement's cost (a UTF-8 database only: the CAST reads the bytes in the
    database's encoding). False (nothing written) when the rows do not all have one
    vector size, or an id or model id would not come back from JSON as it went in: the caller binds
    them one by one."""
    try:
        matrix = np.asarray([vec for _, vec, _, _ in rows], dtype="<f4")
        encoded = [m.encode("utf-8") for m in metas]
    except (ValueError, UnicodeEncodeError):  # ragged vectors; a lone surrogate (the driver refuses it too)
        return False
    if matrix.ndim != 2 or not matrix.shape[1]:
        return False
    size = matrix.shape[1] * 4
    cuts: list[tuple[Any, ...]] = []
    at = 1
    for (vid, _, _, model), blob in zip(rows, encoded):
        cuts.append((vid, at, len(blob), model) if with_model else (vid, at, len(blob)))
        at += len(blob)
    doc = json_rows_param(cuts)
    if doc is None:
        return False
    model_sql = ", value->>3" if with_model else ""
    driver_sql.execute(
        conn,
        f"{head} SELECT value->>0, substr(?2, key * {size} + 1, {size}), CAST(substr(?3, value->>1, value->>2) AS TEXT)"
        f"{model_sql} FROM json_each(?1) WHERE true ORDER BY key {tail}",
        (doc, matrix.tobytes(), b"".join(encoded)),
    )
    return True


def delete_where(conn: sa.Connection, info: TableInfo, key: str, values: Iterable[str]) -> int:
    """Delete rows whose metadata ``key`` (message_id / thread_id) is one of ``values``."""
    wanted = list(values)
    removed = 0
    q = quoted(info.name)
    for marks, chunk in bulk.in_lists(conn, wanted):
        hint = _scan_hint(info, key)
        removed += int(
            conn.exec_driver_sql(
                f"DELETE FROM {q} WHERE rowid IN (SELECT rowid FROM {q} {hint} "
                f"WHERE json_extract(metadata, '$.{key}') IN ({marks}))",
                chunk,
            ).rowcount or 0
        )
        if key == "message_id":  # rows with no message_id in metadata: vector_id is the message id
            removed += int(conn.exec_driver_sql(f"DELETE FROM {q} WHERE vector_id IN ({marks})", chunk).rowcount or 0)
    return removed


def stored_state(conn: sa.Connection, info: TableInfo, model_id: str, message_ids: Sequence[str]) -> dict[str, VectorState]:
    """Each message's row (the one from ``model_id`` when it has several), for comparing hashes."""
    q = quoted(info.name)
    model = "model_id" if info.has_model_id else "NULL"
    cols = (f"coalesce(json_extract(metadata, '$.message_id'), vector_id), json_extract(metadata, '$.content_hash'), "
            f"{model}, json_extract(metadata, '$.thread_id'), json_extract(metadata, '$.created_at'), "
            "json_extract(metadata, '$.content')")
    out: dict[str, VectorState] = {}
    for marks, chunk in bulk.in_lists(conn, list(message_ids)):
        rows = [
            *conn.exec_driver_sql(
                f"SELECT {cols} FROM {q} {_scan_hint(info, 'message_id')} "
                f"WHERE json_extract(metadata, '$.message_id') IN ({marks})", chunk),
            *conn.exec_driver_sql(
                f"SELECT {cols} FROM {q} WHERE vector_id IN ({marks}) AND json_extract(metadata, '$.message_id') IS NULL",
                chunk),
        ]
        for mid, digest, model_of, thread_id, created, content in rows:
            if mid not in out or model_of == model_id:
                out[mid] = VectorState(digest, model_of, thread_id, created, content)
    return out


def triggered_counters(conn: sa.Connection, table: str) -> tuple[int, int | None]:
    """A vector table's newest rowid (a new row always gets a rowid above the others) and the count its
    update/delete triggers bump in the recall state table (None: no such count is kept)."""
    # On the driver's cursor: this runs before every vector search (SQLAlchemy's result costs more).
    row = driver_sql.first(
        conn,
        f"SELECT (SELECT max(rowid) FROM {quoted(table)} NOT INDEXED), (SELECT value FROM {STATE_TABLE} WHERE key = ?)",
        (f"{table}:rewrites",),
    )
    newest, rewrites = row if row is not None else (0, None)
    return int(newest or 0), None if rewrites is None else int(rewrites)


def change_counters(conn: sa.Connection, info: TableInfo, has_state: bool | None = None,
                    marks: list[int | None] | None = None, mark_keys: Sequence[str] = (),
                    newest_of: str | None = None) -> tuple[int, int]:
    """(appends, rewrites): the newest rowid (a new row always gets a rowid above the others) and the
    count the table's update/delete triggers bump; a Mastra table without triggers is scanned.
    ``has_state``: whether the recall state table exists, when the caller knows (else looked up).
    ``mark_keys``: other recall state values read in the same statement, then ``newest_of``'s (another
    table's) ``max(rowid)``, appended to ``marks`` in that order (None when not read: a scanned table,
    or no such value)."""
    extra = len(mark_keys) + (newest_of is not None)
    if info.has_our_indexes and (has_table(conn, STATE_TABLE) if has_state is None else has_state):
        if extra and marks is not None:
            values = "".join(f", (SELECT value FROM {STATE_TABLE} WHERE key = ?)" for _ in mark_keys)
            newest = f", coalesce((SELECT max(rowid) FROM {quoted(newest_of)} NOT INDEXED), 0)" if newest_of is not None else ""
            row = driver_sql.first(
                conn,
                f"SELECT (SELECT max(rowid) FROM {quoted(info.name)} NOT INDEXED), "
                f"(SELECT value FROM {STATE_TABLE} WHERE key = ?){values}{newest}",
                (f"{info.name}:rewrites", *mark_keys),
            )
            got = tuple(row) if row is not None else (0, None) + (None,) * extra
            marks.extend(None if v is None else int(v) for v in got[2:])
            return int(got[0] or 0), int(got[1] or 0)
        newest_row, rewrites = triggered_counters(conn, info.name)
        return newest_row, rewrites or 0
    if marks is not None:
        marks.extend([None] * extra)
    # No triggers: max(rowid) sees appends, count sees deletes; an in-place update is missed until restart.
    row = conn.exec_driver_sql(f"SELECT max(rowid), count(vector_id) FROM {quoted(info.name)} NOT INDEXED").first()
    return (int(row[0] or 0), int(row[1] or 0)) if row else (0, 0)


def indexed_message_ids(conn: sa.Connection, info: TableInfo, model_id: str, message_ids: Sequence[str]) -> set[str]:
    """Which of these messages already have a vector from ``model_id`` (so reindex skips them)."""
    out: set[str] = set()
    q = quoted(info.name)
    cond = "model_id = ?" if info.has_model_id else "0"
    for marks, chunk in bulk.in_lists(conn, list(message_ids)):
        out.update(
            r[0] for r in conn.exec_driver_sql(f"SELECT vector_id FROM {q} WHERE vector_id IN ({marks}) AND {cond}", (*chunk, model_id) if info.has_model_id else chunk)
        )
    return out
