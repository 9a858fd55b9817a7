"""Reading and writing ``memory_studio_recall_pieces_<dim>`` on Postgres: the piece vectors of long
messages (``core.recall.pieces``), beside the vector table ``memory_messages_<dim>`` and never read by
Mastra or by the scans. The Postgres side of what ``piece_table`` does on libSQL.

The table is made in Mastra's PgVector style (quoted name, a ``vector(<dim>)`` column) with the same
columns as on libSQL, so forget's and copies' plain SQL reads both; no HNSW index (it is read by message
id only). Only what is missing is made (as ``pg_vectors.ensure_table``): Postgres takes a table's lock
before an ``IF NOT EXISTS`` finds there is nothing to do.

Vectors go to the server as one binary ``real[]`` parameter per statement (``Float4s``), cut into rows
by the statement: pgvector's text form costs ~0.6 ms of client CPU for a 512-dimension vector, and a
save of a hundred long messages writes several hundred pieces. They come back in pgvector's binary
form (``vector_send``), in a result sent in binary (a ``bytea`` as hex text is twice the bytes), and
only those the process does not hold already at the row's version (``VectorCache``): a vector-only
search reads its best 200 messages' pieces and passages, ~870 vectors (1.8 MB at 512-d) on LoCoMo-length
messages, and the searches of one conversation keep finding the same messages. The cache keeps each
message's answer too, reused while the server's rows of it are the ones it was made from.
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from typing import Any, NamedTuple, Sequence

import numpy as np
import psycopg
import sqlalchemy as sa
from psycopg.adapt import Dumper
from psycopg.pq import Format

from core.recall import pieces
from core.recall.pg_order import text_array
from core.recall.schema import quoted
from core.recall.types import MessagePieces, PieceRow
from core.recall.vector_table import unit_rows
from core.storage import catalog
from core.storage.pg import cursor

KEYS = ("message_id", "thread_id", "resource_id")
IN_CHUNK = 500  # message ids per read statement
NAMESPACE = "default"  # (``pg_vectors.NAMESPACE``: the passage rows' namespace, Mastra's default)


class Float4s:
    """A flat float32 array sent as one binary ``real[]`` (``_Float4sDumper``)."""

    __slots__ = ("values",)

    def __init__(self, values: np.ndarray) -> None:
        self.values = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)


_FLOAT4_OID, _FLOAT4_ARRAY_OID = 700, 1021


class _Float4sDumper(Dumper):
    """Postgres's binary array form (``array_recv``): dimensions, no nulls, element type float4, one
    dimension of ``n`` from 1, then each element as its length (4) and big-endian value."""

    format = Format.BINARY
    oid = _FLOAT4_ARRAY_OID

    def dump(self, obj: Any) -> bytes:
        values: np.ndarray = obj.values
        body = np.empty(len(values), dtype=[("n", ">i4"), ("v", ">f4")])
        body["n"] = 4
        body["v"] = values
        return struct.pack(">iiIii", 1, 0, _FLOAT4_OID, len(values), 1) + body.tobytes()


def _registered(conn: sa.Connection) -> None:
    """Have the connection's driver send ``Float4s`` (registered once per psycopg connection)."""
    raw = conn.connection.driver_connection
    assert isinstance(raw, psycopg.Connection)
    try:
        if raw.adapters.get_dumper(Float4s, psycopg.adapt.PyFormat.BINARY) is _Float4sDumper:
            return
    except psycopg.ProgrammingError:  # (none registered yet)
        pass
    raw.adapters.register_dumper(Float4s, _Float4sDumper)


def _missing(conn: sa.Connection, name: str) -> bool:
    return bool(cursor.rows(conn, "SELECT to_regclass(?) IS NULL", (quoted(name),))[0][0])


def ensure(conn: sa.Connection, dim: int) -> str:
    """Make the pieces table of a dimension and its indexes, each only when missing."""
    table = pieces.table_name(dim)
    q = quoted(table)
    if _missing(conn, table):
        conn.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {q} (message_id TEXT NOT NULL, model_id TEXT NOT NULL, piece INTEGER NOT NULL, "
            "span_start INTEGER NOT NULL, span_end INTEGER NOT NULL, text_hash TEXT NOT NULL, thread_id TEXT, "
            f"resource_id TEXT, embedding vector({int(dim)}) NOT NULL, PRIMARY KEY (message_id, model_id, piece))"
        )
        # Kept in the row (compressed only if that gains, out of line only if the row would not fit a
        # page): a 512-d vector is just over the size at which Postgres moves a value out of line, and
        # a search reads a few hundred pieces at a time (1,000 of them out of line: ~3 buffer reads each).
        conn.exec_driver_sql(f"ALTER TABLE {q} ALTER COLUMN embedding SET STORAGE MAIN")
    for key in ("thread_id", "resource_id"):
        name = f"{table}_{key}"
        if _missing(conn, name):
            conn.exec_driver_sql(f"CREATE INDEX IF NOT EXISTS {quoted(name)} ON {q} ({key})")
    return table


def exists(conn: sa.Connection, dim: int) -> bool:
    return catalog.has_table(conn, pieces.table_name(dim))


def write(conn: sa.Connection, table: str, model_id: str, message_ids: Sequence[str], rows: Sequence[PieceRow]) -> None:
    """Replace ``model_id``'s pieces of ``message_ids`` with ``rows``: one delete, one insert (the rows'
    fields as arrays read by ``unnest``, their vectors as one ``real[]`` cut by the statement)."""
    ids = list(dict.fromkeys([*message_ids, *(r.message_id for r in rows)]))
    if not ids:
        return
    q = quoted(table)
    cursor.rows(conn, f"DELETE FROM {q} WHERE model_id = ? AND message_id = ANY(CAST(? AS text[]))",
                (model_id, text_array(ids)))
    if not rows:
        return
    matrix = np.asarray([r.vector for r in rows], dtype=np.float32)
    dim = int(matrix.shape[1])
    _registered(conn)
    cursor.rows(
        conn,
        f"INSERT INTO {q} (message_id, model_id, piece, span_start, span_end, text_hash, thread_id, resource_id, "
        f"embedding) SELECT u.m, ?, u.p, u.a, u.b, u.h, u.t, u.r, CAST(e.v[(u.k - 1) * {dim} + 1 : u.k * {dim}] AS vector) "
        "FROM (SELECT CAST(? AS real[]) AS v) e, unnest(CAST(? AS text[]), CAST(? AS integer[]), CAST(? AS integer[]), "
        "CAST(? AS integer[]), CAST(? AS text[]), CAST(? AS text[]), CAST(? AS text[])) WITH ORDINALITY AS u(m, p, a, b, h, t, r, k)",
        (model_id, Float4s(matrix), [r.message_id for r in rows], [int(r.piece) for r in rows],
         [int(r.start) for r in rows], [int(r.end) for r in rows], [r.text_hash for r in rows],
         [r.thread_id for r in rows], [r.resource_id for r in rows]),
    )


def delete_where(conn: sa.Connection, table: str, key: str, values: Sequence[str]) -> int:
    """Delete every model's pieces whose ``key`` is one of ``values``."""
    if key not in KEYS:
        raise ValueError(f"pieces are deleted by {', '.join(KEYS)}, not {key!r}")
    if not values:
        return 0
    return int(conn.exec_driver_sql(f"DELETE FROM {quoted(table)} WHERE {key} = ANY(CAST(? AS text[]))",
                                    (list(dict.fromkeys(values)),)).rowcount or 0)


def _floats(sent: Sequence[Any], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Vectors in pgvector's binary form (dimension, unused, then big-endian float4) as the rows of one
    float32 matrix, decoded together, and which rows are finite vectors of ``dim`` (the others zero)."""
    size = 4 + 4 * dim
    ok = np.array([s is not None and len(s) == size for s in sent], dtype=bool)
    out = np.zeros((len(sent), dim), dtype=np.float32)
    if ok.any():
        raw = np.frombuffer(b"".join(bytes(s) for s, good in zip(sent, ok) if good), dtype=np.uint8)
        out[ok] = raw.reshape(-1, size)[:, 4:].copy().view(">f4").astype(np.float32)
        ok &= np.isfinite(out).all(axis=1)
    return out, ok


class Built(NamedTuple):
    """A message's answer as ``read`` made it, and the rows it was made from: each (piece, span start, span
    end, text hash or the passage row's text, version); the passage row's piece is -1. Its vectors are
    those the cache holds of the message (the same arrays)."""

    rows: frozenset[tuple[Any, ...]]
    answer: MessagePieces


# What the cache holds of a message: piece (-1: the passage row) -> (version, unit vector), and its answer
# as ``read`` last made it (None: none made, e.g. its passage row holds another text).
Entry = tuple[dict[int, tuple[str, np.ndarray]], Built | None]


class VectorCache:
    """The piece and passage vectors this process read, each with its row's version (``xmin``, which
    every insert or update of the row changes): a read names the versions it holds, and the server
    sends only the vectors of rows it does not hold at their version now, so a search that re-scores
    messages an earlier search read moves their ids and versions, not their vectors. Which version is
    current is the server's answer in the read's own snapshot, so a write by any process (or a
    snapshot older than the cache's) never makes an answer stale. Beside a message's vectors, the
    answer ``read`` made of them (``MessagePieces``, with its pieces' p·v) and the rows it was made from
    (``Built``): a later read whose rows of that message are the same rows at the same versions, none
    sent, answers it as it is (no rebuild, no hash of its text). The least recently read messages go
    first past ``max_bytes``. Thread-safe."""

    def __init__(self, max_bytes: int = 0) -> None:
        self.max_bytes = max_bytes or CACHE_BYTES
        self._lock = threading.Lock()
        self._held: OrderedDict[str, Entry] = OrderedDict()
        self._bytes = 0

    def held(self, message_ids: Sequence[str]) -> dict[str, Entry]:
        with self._lock:
            out = {}
            for mid in message_ids:
                found = self._held.get(mid)
                if found is not None:
                    self._held.move_to_end(mid)
                    out[mid] = found
            return out

    def keep(self, asked: Sequence[str], read: dict[str, Entry]) -> None:
        """What a read found of the messages it asked for (one it found nothing of is dropped)."""
        with self._lock:
            for mid in asked:
                gone = self._held.pop(mid, None)
                if gone is not None:
                    self._bytes -= _size(gone)
                entry = read.get(mid)
                if entry is not None and entry[0]:
                    self._held[mid] = entry
                    self._bytes += _size(entry)
            while self._bytes > self.max_bytes and self._held:
                _, old = self._held.popitem(last=False)
                self._bytes -= _size(old)

    def status(self) -> dict[str, int]:
        with self._lock:
            return {"piece_cache_messages": len(self._held), "piece_cache_bytes": self._bytes}

    def clear(self) -> None:
        with self._lock:
            self._held.clear()
            self._bytes = 0


def _size(entry: Entry) -> int:
    rows, built = entry
    dots = built.answer.passage_dots if built is not None else None
    return sum(v.nbytes for _, v in rows.values()) + (dots.nbytes if dots is not None else 0)


def _signature(rows: list[tuple[Any, ...]]) -> frozenset[tuple[Any, ...]]:
    """A message's rows as ``Built.rows`` names them (in any order: piece numbers are unique within a
    message)."""
    return frozenset(r[1:6] for r in rows)


CACHE_BYTES = 64 * 2**20  # a ``VectorCache``'s vectors at most (10k LoCoMo-length messages at 512-d: ~90 MB)


def read(conn: sa.Connection, table: str, vector_table: str, dim: int, model_id: str,
         message_ids: Sequence[str], cache: VectorCache | None = None) -> dict[str, MessagePieces]:
    """``model_id``'s pieces of these messages with each one's passage vector and text, one statement per
    ``IN_CHUNK`` ids: the pieces' rows, then (``UNION ALL``) each of those messages' passage row once
    (piece -1), each row's vector only when ``cache`` does not hold it at the row's version. Messages
    whose passage row is missing, of another model, or holds another text than the pieces were cut
    from are left out (as on libSQL)."""
    ids = list(dict.fromkeys(message_ids))
    rows: list[tuple[Any, ...]] = []
    q, v = quoted(table), quoted(vector_table)
    # (Each passage row found by its message id through the vector table's unique (namespace, vector_id)
    # index, for the ids that have pieces (a probe of the pieces' primary key each); the lookup is a
    # LATERAL subquery with LIMIT 1 so that it stays a probe: planned as a join, it was a scan of the
    # vector table (22 ms at 10k), and as an EXISTS against the pieces, a probe per piece (160 ms for 200
    # messages of 1,000). A vector is read, by its row's ctid, only when sent. ``d``: the ids with the
    # versions the cache holds of their pieces (one transaction writes all of a message's pieces) and
    # of their passage row; as a table joined by (id, piece, version) it was planned as a nested loop.)
    sql = (
        "SELECT p.message_id, p.piece, p.span_start, p.span_end, p.text_hash, p.x, "
        f"CASE WHEN p.x IS DISTINCT FROM d.kx THEN (SELECT vector_send(t.embedding) FROM {q} t WHERE t.ctid = p.ctid) END "
        f"FROM (SELECT message_id, piece, span_start, span_end, text_hash, xmin::text AS x, ctid FROM {q} "
        "WHERE model_id = ? AND message_id = ANY(CAST(? AS text[])) OFFSET 0) p "
        "JOIN unnest(CAST(? AS text[]), CAST(? AS text[])) AS d(m, kx) ON d.m = p.message_id "
        "UNION ALL SELECT v.vector_id, -1, 0, 0, v.content, v.x, "
        f"CASE WHEN v.x IS DISTINCT FROM d.kv THEN (SELECT vector_send(t.embedding) FROM {v} t WHERE t.ctid = v.ctid) END "
        "FROM unnest(CAST(? AS text[]), CAST(? AS text[])) AS d(m, kv) "
        f"CROSS JOIN LATERAL (SELECT vector_id, metadata->>'content' AS content, xmin::text AS x, ctid FROM {v} "
        f"WHERE namespace = '{NAMESPACE}' AND vector_id = d.m AND model_id = ? LIMIT 1) v "
        f"WHERE EXISTS (SELECT 1 FROM {q} e WHERE e.message_id = d.m AND e.model_id = ?)"
    )
    held: dict[str, dict[int, tuple[str, np.ndarray]]] = {}
    built: dict[str, Built] = {}
    for start in range(0, len(ids), IN_CHUNK):
        part = ids[start:start + IN_CHUNK]
        mine = cache.held(part) if cache is not None else {}
        for mid, (vectors_of, answer_of) in mine.items():
            held[mid] = vectors_of
            if answer_of is not None:
                built[mid] = answer_of
        kx: list[str | None] = []
        kv: list[str | None] = []
        for mid in part:
            kept = held.get(mid, {})
            versions = {x for n, (x, _) in kept.items() if n >= 0}
            kx.append(versions.pop() if len(versions) == 1 else None)
            kv.append(kept[-1][0] if -1 in kept else None)
        listed = text_array(part)
        rows += cursor.rows(conn, sql, (model_id, listed, listed, kx, listed, kv, model_id, model_id), binary=True)
    # A message whose rows are those its kept answer was made from, at the same versions (so none sent),
    # is answered by it; the rest are made below.
    out: dict[str, MessagePieces] = {}
    read_now: dict[str, Entry] = {}
    if built:
        of_built: dict[str, list[tuple[Any, ...]]] = {}
        for r in rows:
            if r[0] in built:
                of_built.setdefault(r[0], []).append(r)
        for mid, its in of_built.items():
            before = built[mid]
            if all(r[6] is None for r in its) and _signature(its) == before.rows:
                out[mid] = before.answer
                read_now[mid] = (held[mid], before)
        if out:
            rows = [r for r in rows if r[0] not in out]
    if not rows and not out:
        if cache is not None:
            cache.keep(ids, {})
        return {}
    # Every row's vector in one matrix (zero where none: not finite, or not of ``dim``), new ones decoded
    # together; each message's pieces are then one fancy index of it.
    fresh = [i for i, r in enumerate(rows) if r[6] is not None]
    decoded, finite = _floats([rows[i][6] for i in fresh], dim)
    decoded = unit_rows(decoded)
    matrix = np.zeros((len(rows), dim), dtype=np.float32)
    ok = np.zeros(len(rows), dtype=bool)
    matrix[fresh] = decoded
    ok[fresh] = finite
    # (held, at this version; a piece the cache lacks at its message's version leaves the row out)
    kept_at = [i for i, r in enumerate(rows) if r[6] is None and int(r[1]) in held.get(r[0], {})]
    if kept_at:
        matrix[kept_at] = np.stack([held[rows[i][0]][int(rows[i][1])][1] for i in kept_at])
        ok[kept_at] = True
    found: dict[str, list[tuple[int, int, int, str, int]]] = {}  # message -> its pieces (..., row)
    passages: dict[str, tuple[int, str]] = {}  # message -> (row, its text)
    of_message: dict[str, list[int]] = {}  # message -> its rows
    for i, (mid, piece, a, b, digest, _, _) in enumerate(rows):
        of_message.setdefault(mid, []).append(i)
        if piece < 0:
            passages[mid] = (i, digest if isinstance(digest, str) else "")
        else:
            found.setdefault(mid, []).append((int(piece), int(a), int(b), digest, i))
    made: list[tuple[str, int, list[tuple[int, int, int, str, int]]]] = []  # (message, passage row, pieces)
    usable = ok.tolist()
    for mid, pieces_of in found.items():
        passage = passages.get(mid)
        if passage is None:
            continue
        at, content = passage
        if not usable[at] or any(r[3] != pieces_of[0][3] for r in pieces_of) or pieces.text_hash(content) != pieces_of[0][3]:
            continue
        pieces_of.sort(key=lambda r: r[0])
        if all(usable[r[4]] for r in pieces_of):
            made.append((mid, at, pieces_of))
    # The answers' arrays: each message's pieces in one matrix, its passage row once per piece beside them
    # for p·v (one product for all, as ``search._with_pieces`` would compute it stacked: the same bits where
    # ``pieces.dots_by_row`` holds), each answer's arrays a copy of its slice (kept alone, an answer holds
    # nothing of the others).
    if made:
        picks = [r[4] for _, _, pieces_of in made for r in pieces_of]
        counts = [len(pieces_of) for _, _, pieces_of in made]
        vectors = matrix[picks]
        passage_rows = matrix[[at for _, at, _ in made]]
        dots = (pieces.passage_dots(vectors, np.repeat(passage_rows, counts, axis=0))
                if pieces.dots_by_row(dim) else None)
        start = 0
        for k, (mid, at, pieces_of) in enumerate(made):
            end = start + counts[k]
            arrays = [passage_rows[k].copy(), vectors[start:end].copy(), *([] if dots is None else [dots[start:end].copy()])]
            for array in arrays:  # (kept and answered again: read-only)
                array.flags.writeable = False
            answer = MessagePieces(mid, arrays[0], arrays[1], tuple((r[1], r[2]) for r in pieces_of),
                                   passages[mid][1], arrays[2] if dots is not None else None)
            out[mid] = answer
            # (the cache holds the answer's own arrays: its vectors once)
            kept = {-1: (rows[at][5], answer.passage)}
            kept.update((r[0], (rows[r[4]][5], answer.vectors[j])) for j, r in enumerate(pieces_of))
            read_now[mid] = (kept, Built(_signature([rows[i] for i in of_message[mid]]), answer))
            start = end
    for mid, at_rows in of_message.items():  # (what else was read: its vectors, as read)
        if mid not in read_now:
            kept = {int(rows[i][1]): (rows[i][5], matrix[i].copy() if rows[i][6] is not None
                                      else held[mid][int(rows[i][1])][1]) for i in at_rows if usable[i]}
            if kept:
                read_now[mid] = (kept, None)
    if cache is not None:
        cache.keep(ids, read_now)
    return out


def hashes(conn: sa.Connection, table: str, model_id: str, message_ids: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    ids = list(dict.fromkeys(message_ids))
    for start in range(0, len(ids), IN_CHUNK):
        out.update((str(m), str(h)) for m, h in cursor.rows(
            conn, f"SELECT message_id, min(text_hash) FROM {quoted(table)} WHERE model_id = ? "
                  "AND message_id = ANY(CAST(? AS text[])) GROUP BY message_id",
            (model_id, text_array(ids[start:start + IN_CHUNK]))))
    return out


def any_in_scope(conn: sa.Connection, table: str, model_id: str, resource_id: str | None, thread_id: str | None) -> bool:
    key, value = ("thread_id", thread_id) if resource_id is None else ("resource_id", resource_id)
    return bool(cursor.scalar(
        conn, f"SELECT EXISTS (SELECT 1 FROM {quoted(table)} WHERE {key} = ? AND model_id = ?)", (value, model_id)))


def counts(conn: sa.Connection, table: str) -> dict[str, int]:
    return {str(m): int(n) for m, n in cursor.rows(
        conn, f"SELECT model_id, count(DISTINCT message_id) FROM {quoted(table)} GROUP BY model_id")}


def every_table(conn: sa.Connection) -> list[str]:
    """Every pieces table of the database (one per dimension)."""
    return [t for t in catalog.table_names(conn, pieces.TABLE_PREFIX)
            if {"message_id", "model_id", "piece", "text_hash", "embedding"} <= {c[0] for c in catalog.table_columns(conn, t)}]
