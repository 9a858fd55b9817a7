"""A message's vector rows outside the index's own row: other tables, other vector ids.

A database shared with Mastra holds vectors this index did not write: Mastra's rows (a random
``vector_id``, the text it embedded in ``metadata.content``), in the index's table or in a table of
another dimension (Mastra's embedder, ours another). Mastra removes every vector of a message from
every message table when the message changes or goes (``updateMessages`` / ``deleteMessages``) and
every vector of a thread when the thread goes; a change made here must leave no copy either, or the
old text stays in the file and a search for it still finds the message.
"""

from __future__ import annotations

from typing import Mapping

import sqlalchemy as sa

from core.recall import piece_table, vector_table
from core.recall.schema import quoted
from core.storage import bulk, dialect
from core.storage.capabilities import capabilities_of
from core.storage.catalog import table_columns, table_names

PREFIX = "memory_messages"
_COLUMNS = {"vector_id", "embedding", "metadata"}


def vector_tables(conn: sa.Connection) -> list[str]:
    """Every vector table (``memory_messages`` / ``memory_messages_<dim>`` with the vector columns).

    libSQL keeps a vector index's data in a table named after the index
    (``memory_messages_384_vector_idx_shadow``): it shares the prefix but has none of these columns."""
    return [t for t in table_names(conn, PREFIX) if _COLUMNS <= {c[0] for c in table_columns(conn, t)}]


def _blob_rows(conn: sa.Connection) -> bool:
    """Whether vectors are libSQL blob rows (Mastra's LibSQLVector layout), not pgvector columns."""
    return capabilities_of(conn).vectors == "blob-matrix"


def _scan(conn: sa.Connection, table: str) -> str:
    """How a lookup by message id reads ``table``: by our index on it when it has one; on a Mastra table
    ``NOT INDEXED`` (its DiskANN index is a b-tree plain SQLite sees as empty). Postgres plans alone."""
    if not _blob_rows(conn):
        return ""
    info = vector_table.inspect(conn, table, 0)
    return vector_table.scan_hint(info, "message_id") if info is not None else "NOT INDEXED"


def _path(conn: sa.Connection, key: str) -> str:
    # libSQL: the expression of our message_id index (vector metadata is JSON text, whoever wrote it).
    return f"json_extract(metadata, '$.{key}')" if _blob_rows(conn) else dialect.json_path_sql(conn, "metadata", key)


def drop_stale_copies(conn: sa.Connection, current: Mapping[str, str | None], own_table: str | None) -> int:
    """Delete the vector rows of these messages that hold another text than the message has now.

    ``current``: each message's recall text now (None: deleted, or nothing left to index). A row whose
    ``metadata.content`` is that text is still right for its model and stays; in ``own_table`` the row
    whose ``vector_id`` is the message id is the caller's to rewrite and is left alone. Pieces
    (``piece_table``) cut from another text go from every pieces table too."""
    if not current:
        return 0
    piece_table.drop_stale(conn, current)
    message, content = _path(conn, "message_id"), _path(conn, "content")
    removed = 0
    for table in vector_tables(conn):
        q = quoted(table)
        stale: list[tuple[str, str]] = []
        for marks, chunk in bulk.in_lists(conn, list(current)):
            for vector_id, message_id, text in conn.exec_driver_sql(
                f"SELECT vector_id, {message}, {content} FROM {q} {_scan(conn, table)} WHERE {message} IN ({marks})", chunk,
            ):
                if table == own_table and vector_id == message_id:
                    continue
                now = current.get(message_id)
                if now is None or not isinstance(text, str) or text.strip() != now.strip():
                    stale.append((vector_id, message_id))
        for vector_id, message_id in stale:
            removed += int(conn.exec_driver_sql(
                f"DELETE FROM {q} WHERE vector_id = ? AND {message} = ?", (vector_id, message_id)).rowcount or 0)
    return removed
