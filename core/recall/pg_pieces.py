"""Reading and writing ``memory_studio_recall_pieces_<dim>`` on Postgres: the piece vectors of long
messages (``core.recall.pieces``), beside the vector table ``memory_messages_<dim>`` and never read by
Mastra or by the scans. The Postgres side of what ``piece_table`` does on libSQL.

The table is made in Mastra's PgVector style (quoted name, a ``vector(<dim>)`` column) with the same
columns as on libSQL, so forget's and copies' plain SQL reads both; no HNSW index (it is read by message
id only). Only what is missing is made (as ``pg_vectors.ensure_table``): Postgres takes a table's lock
before an ``IF NOT EXISTS`` finds there is nothing to do.

Vectors go to the server as one binary ``real[]`` parameter per statement (``Float4s``), cut into rows
by the statement: pgvector's text form costs ~0.6 ms of client CPU for a 512-dimension vector, and a
save of a hundred long messages writes several hundred pieces.

A vector-only search re-scores its best 200 messages by their pieces: ~880 vectors (1.8 MB at 512-d) on
LoCoMo-length messages, which cost most of such a search to send. The server scores them instead
(``estimate``: a row per message, its best mixed row and what bounds the difference from the search's own
float32 arithmetic), and the search reads (``read``: vectors in pgvector's binary form, in a result sent
in binary) only the messages that could be among its best, whose exact scores it then computes as it
would with all of them (``search._with_pieces``): the answers are those of reading every message.
"""

from __future__ import annotations

import struct
from typing import Any, Sequence

import numpy as np
import psycopg
import sqlalchemy as sa
from psycopg.adapt import Dumper
from psycopg.pq import Format

from core.recall import pieces
from core.recall.pg_order import text_array
from core.recall.schema import quoted
from core.recall.types import MessagePieces, PieceEstimate, PieceRow
from core.recall.vector_table import UNIT_TOLERANCE, unit_rows
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
    _kept_in_row(conn, table)
    for key in ("thread_id", "resource_id"):
        name = f"{table}_{key}"
        if _missing(conn, name):
            conn.exec_driver_sql(f"CREATE INDEX IF NOT EXISTS {quoted(name)} ON {q} ({key})")
    return table


_IN_ROW = ("embedding", "text_hash", "message_id", "model_id", "thread_id", "resource_id")


def _kept_in_row(conn: sa.Connection, table: str) -> None:
    """Every column kept in the row (``STORAGE MAIN``: compressed only if that gains, out of line only if
    the row would not fit a page), set where it is not (a change of the catalog alone; rows written before
    keep their layout until rewritten). A 512-d vector is just over the size at which Postgres moves a
    value out of line, and a search reads a few hundred pieces at a time (1,000 vectors out of line: ~3
    buffer reads each). With only the vector kept in, the row was still over that size, so Postgres
    moved the next largest value out instead: every row's ``text_hash`` (24 bytes) sat in the TOAST
    table, ~3 buffer reads and half of a search's server time to read them (found 2026-12-06)."""
    plain = not_in_row(conn, table)
    if plain:
        conn.exec_driver_sql(f"ALTER TABLE {quoted(table)} "
                             + ", ".join(f"ALTER COLUMN {c} SET STORAGE MAIN" for c in plain))


def not_in_row(conn: sa.Connection, table: str) -> list[str]:
    """The columns of a pieces table that Postgres may move out of its rows (read only; ``_kept_in_row``)."""
    return [str(c) for c, s in cursor.rows(
        conn, "SELECT attname, attstorage FROM pg_attribute WHERE attrelid = CAST(? AS regclass) "
              "AND attname = ANY(CAST(? AS text[]))", (quoted(table), list(_IN_ROW))) if s != "m"]


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


def _usable(content: Any, hashes: tuple[Any, Any], vectors_ok: bool) -> bool:
    """Whether a message's pieces are read (``read``) and estimated (``estimate``): its passage row's vector
    and every piece's are of the table's dimension, its pieces were cut together (one text hash) and from
    the text its passage row holds now."""
    text = content if isinstance(content, str) else ""
    return bool(vectors_ok) and hashes[0] == hashes[1] and pieces.text_hash(text) == hashes[0]


# Each passage row is found by its message id through the vector table's unique (namespace, vector_id)
# index, for the ids that have pieces (a probe of the pieces' primary key each); the lookup is a LATERAL
# subquery with LIMIT 1 so that it stays a probe: planned as a join, it was a scan of the vector table (22
# ms at 10k), and as an EXISTS against the pieces, a probe per piece (160 ms for 200 messages of 1,000).
_PASSAGE = ("CROSS JOIN LATERAL (SELECT metadata->>'content' AS content, {columns} FROM {v} "
            f"WHERE namespace = '{NAMESPACE}' AND vector_id = d.m AND model_id = ? LIMIT 1) v")


def read(conn: sa.Connection, table: str, vector_table: str, dim: int, model_id: str,
         message_ids: Sequence[str]) -> dict[str, MessagePieces]:
    """``model_id``'s pieces of these messages with each one's passage vector and text, one statement per
    ``IN_CHUNK`` ids: the pieces' rows, then (``UNION ALL``) each of those messages' passage row once
    (piece -1), every vector in pgvector's binary form in a binary result. Messages whose passage row is
    missing, of another model, or holds another text than the pieces were cut from are left out (as on
    libSQL). A search reads only the messages its ``estimate`` cannot rule out (``search._with_pieces``)."""
    ids = list(dict.fromkeys(message_ids))
    q, v = quoted(table), quoted(vector_table)
    sql = (
        f"SELECT message_id, piece, span_start, span_end, text_hash, vector_send(embedding) FROM {q} "
        "WHERE model_id = ? AND message_id = ANY(CAST(? AS text[])) "
        "UNION ALL SELECT d.m, -1, 0, 0, v.content, v.sent FROM unnest(CAST(? AS text[])) AS d(m) "
        + _PASSAGE.format(columns="vector_send(embedding) AS sent", v=v)
        + f" WHERE EXISTS (SELECT 1 FROM {q} e WHERE e.message_id = d.m AND e.model_id = ?)"
    )
    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(ids), IN_CHUNK):
        listed = text_array(ids[start:start + IN_CHUNK])
        rows += cursor.rows(conn, sql, (model_id, listed, listed, model_id, model_id), binary=True)
    if not rows:
        return {}
    # Every row's vector in one matrix (zero where none: not finite, or not of ``dim``), decoded together;
    # each message's pieces are then one fancy index of it.
    matrix, ok = _floats([r[5] for r in rows], dim)
    matrix = unit_rows(matrix)
    found: dict[str, list[tuple[int, int, int, str, int]]] = {}  # message -> its pieces (..., row)
    passages: dict[str, tuple[int, str]] = {}  # message -> (row, its text)
    for i, (mid, piece, a, b, digest, _) in enumerate(rows):
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
        hashes = (min(r[3] for r in pieces_of), max(r[3] for r in pieces_of))
        if _usable(content, hashes, usable[at] and all(usable[r[4]] for r in pieces_of)):
            pieces_of.sort(key=lambda r: r[0])
            made.append((mid, at, pieces_of))
    if not made:
        return {}
    # The answers' arrays: each message's pieces in one matrix, its passage row once per piece beside them
    # for p·v (one product for all, as ``search._with_pieces`` would compute it stacked: the same bits where
    # ``pieces.dots_by_row`` holds).
    picks = [r[4] for _, _, pieces_of in made for r in pieces_of]
    counts = [len(pieces_of) for _, _, pieces_of in made]
    vectors = matrix[picks]
    passage_rows = matrix[[at for _, at, _ in made]]
    dots = (pieces.passage_dots(vectors, np.repeat(passage_rows, counts, axis=0))
            if pieces.dots_by_row(dim) else None)
    out: dict[str, MessagePieces] = {}
    start = 0
    for k, (mid, at, pieces_of) in enumerate(made):
        end = start + counts[k]
        out[mid] = MessagePieces(mid, passage_rows[k], vectors[start:end], tuple((r[1], r[2]) for r in pieces_of),
                                 passages[mid][1], None if dots is None else dots[start:end])
        start = end
    return out


def _length(x: str) -> str:
    """A vector's length as the server divides by it (1 when zero: the search leaves a zero row zero)."""
    return f"COALESCE(NULLIF({x}, 0), 1)"


def _off(x: str) -> str:
    """How far a vector of length ``x`` the search uses as it is (``vector_table.unit_rows``) is off unit
    length; 0 for one it scales (at the tolerance's edge either may be: counted as used as it is)."""
    return f"(CASE WHEN abs({x} - 1) <= {UNIT_TOLERANCE * 1.0001!r} THEN abs({x} - 1) ELSE 0 END)"


def estimate(conn: sa.Connection, table: str, vector_table: str, dim: int, model_id: str,
             message_ids: Sequence[str], qvec: np.ndarray) -> dict[str, PieceEstimate]:
    """Each of these messages' best mixed row for the unit query ``qvec`` as the server computes it
    (pgvector's float32 sums; ``pieces.estimate`` bounds how far the search's own computation can be),
    for the messages ``read`` would answer, one statement per ``IN_CHUNK`` ids: a row per message (its
    passage row's text, its pieces' count and hashes, three numbers), no vector sent. A vector search
    re-scores ~880 vectors (1.8 MB at 512-d) for its best 200 LoCoMo-length messages, of which it then
    reads only the few that could be among its best (``pieces.must_read``)."""
    ids = list(dict.fromkeys(message_ids))
    q, v = quoted(table), quoted(vector_table)
    # The passage vector copied once by ``subvector`` (read from its TOAST row at each use otherwise; one
    # longer than ``dim`` stays longer, so the dimension's check is of the row as stored); each piece's two
    # dot products and length computed once (``OFFSET 0``: not merged into the aggregates' expressions).
    pv = f"x.rp / (v.n * {_length('x.n')})"
    sql = (
        "SELECT d.m, v.content, g.n, g.h1, g.h2, COALESCE(vector_dims(v.e) = ?, false) AND g.ok, "
        "g.best, g.least, greatest(v.off, g.off) "
        "FROM (SELECT CAST(CAST(? AS real[]) AS vector) AS q) k, unnest(CAST(? AS text[])) AS d(m) "
        "CROSS JOIN LATERAL (SELECT content, e, " + _length("n") + " AS n, " + _off("n") + " AS off, "
        "-(e <#> k.q) / " + _length("n") + " AS qp FROM (SELECT content, e, vector_norm(e) AS n FROM (SELECT "
        f"metadata->>'content' AS content, subvector(embedding, 1, {int(dim) + 1}) AS e FROM {v} "
        f"WHERE namespace = '{NAMESPACE}' AND vector_id = d.m AND model_id = ? LIMIT 1) v0) v1) v "
        "CROSS JOIN LATERAL (SELECT count(*) AS n, min(x.text_hash) AS h1, max(x.text_hash) AS h2, "
        f"bool_and(x.dims = ?) AS ok, max((v.qp + x.rq / {_length('x.n')}) / sqrt(greatest(2 + 2 * {pv}, 1e-300))) "
        f"AS best, min(2 + 2 * {pv}) AS least, max({_off('x.n')}) AS off "
        "FROM (SELECT p.text_hash, vector_dims(p.embedding) AS dims, -(p.embedding <#> k.q) AS rq, "
        f"-(p.embedding <#> v.e) AS rp, vector_norm(p.embedding) AS n FROM {q} p "
        "WHERE p.message_id = d.m AND p.model_id = ? OFFSET 0) x) g "
        "WHERE g.n > 0"
    )
    _registered(conn)
    query = Float4s(qvec)
    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(ids), IN_CHUNK):
        rows += [r for r in cursor.rows(conn, sql, (dim, query, text_array(ids[start:start + IN_CHUNK]), model_id, dim,
                                                    model_id)) if _usable(r[1], (r[3], r[4]), r[5])]
    numbers = np.array([r[6:9] for r in rows], dtype=np.float64).reshape(-1, 3)  # (None: NaN)
    bound = pieces.bounds(dim, numbers[:, 0], numbers[:, 1], numbers[:, 2])
    return {r[0]: PieceEstimate(int(r[2]), s if b < np.inf else 0.0, b)  # (no score: any, with no bound)
            for r, s, b in zip(rows, numbers[:, 0].tolist(), bound.tolist())}


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
