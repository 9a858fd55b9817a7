"""What a ``RecallIndex`` needs of its two backends, whatever the database.

A keyword backend keeps one document per indexed message (its text, and its context at a lower
weight) and ranks them for a query; a vector backend keeps one vector row per message and model and
answers nearest-neighbour queries per scope, and keeps the piece vectors of long messages in a side
table (``core.recall.pieces``) that a vector-only search reads for its best messages. Both write inside the index's one write transaction per
batch (``conn``), so a batch's keyword docs and vectors land together or not at all.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Protocol, Sequence

import numpy as np
import sqlalchemy as sa

from core.recall.keyword import KeywordHit, TermStats
from core.recall.matrix import ScopeVectors
from core.recall.passages import StoredPassage
from core.recall.types import DocRow, MessagePieces, PieceEstimate, PieceRow, VectorRow
from core.recall.vector_table import VectorState

if TYPE_CHECKING:  # pragma: no cover
    from core.storage.database import Database


class KeywordBackend(Protocol):
    available: bool  # the docs table exists (the recall migrations were applied)
    stats: TermStats  # document frequencies, for dropping very common query terms

    def open(self, conn: sa.Connection) -> None:
        """Find the docs table and how its docs were made (reads only): sets ``available``."""

    def terms(self, conn: sa.Connection, query: str) -> tuple[list[str], list[str]]:
        """(the query's quoted terms that are searched, the very common ones dropped)."""

    def search(self, conn: sa.Connection, query: str, *, resource_id: str | None, thread_id: str | None,
               limit: int, until: str | None = None, terms: list[str] | None = None,
               exclude_thread: str | None = None) -> list[KeywordHit]:
        """The scope's best ``limit`` docs for the query; ``until``: of messages created before it (ISO
        text); ``exclude_thread``: none of that thread's (left out before the ``limit``)."""

    def write_docs(self, conn: sa.Connection, docs: list[DocRow]) -> None:
        """Replace these messages' docs (an empty text removes the doc), in one pass per batch."""

    def delete_docs(self, conn: sa.Connection, message_ids: list[str]) -> None: ...

    def doc_state(self, conn: sa.Connection, message_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
        """(passage hash, thread id) of each of these messages that has a keyword doc."""

    def delete_thread(self, conn: sa.Connection, thread_id: str) -> None: ...

    def drain(self, conn: sa.Connection, indexed: Collection[str] = (),
              changed: "dict[str, StoredPassage] | None" = None,
              touched: "dict[str, str | None] | None" = None) -> tuple[int, list[str]]:
        """Apply one batch of queued message changes; (changes applied, ids of messages gone).
        ``changed``: filled with the stored messages whose doc was rewritten for a queued change;
        ``touched``: with every message whose doc was written or dropped, and its resource (None: gone)."""

    def key_saved(self, conn: sa.Connection, docs: list[DocRow]) -> None:
        """Write the docs of messages a save without recall has just stored, in its transaction, so nothing
        of theirs waits for a recall writer (the queue's updates and deletes still do)."""

    def has_docs(self, conn: sa.Connection) -> bool:
        """Whether the index holds a doc (one row's read): a writer with semantic recall has used it."""

    def has_pending(self, conn: sa.Connection) -> bool: ...

    def pending_changes(self, conn: sa.Connection) -> tuple[set[str], set[str] | None]:
        """(ids of queued messages deleted since indexed; ids of queued messages whose newest change
        is an update, or None when the backend does not list them and every keyword hit is checked)."""

    def waiting(self, conn: sa.Connection, resource_id: str | None, thread_id: str | None) -> int:
        """How many messages of a scope wait to be keyword-indexed (read only)."""


class VectorBackend(Protocol):
    table: str
    keeps_pieces: bool  # writes and reads pieces (False: a backend without a pieces table; the index embeds none)
    estimates_pieces: bool  # ``estimate_pieces`` answers (a server that scores pieces where they are stored)
    reads_pieces: bool  # this index's pieces are on (``RecallIndex.pieces``): its scans follow the pieces' writes
    info: Any  # the table's description (``name``, ``has_model_id``...), None when there is no table

    def open(self, db: "Database") -> None:
        """Find the vector table (reads only: an index made for a search or a preview writes nothing)."""

    def ensure(self, db: "Database") -> None:
        """Before the first write: create the vector table (or adopt Mastra's) in a write transaction of
        its own when it is missing or not in our shape; nothing when it is."""

    def upsert(self, conn: sa.Connection, rows: Sequence[VectorRow]) -> None: ...

    def delete(self, conn: sa.Connection, key: str, values: list[str]) -> None:
        """Delete rows whose ``key`` (message_id / thread_id) is one of ``values``, and those messages'
        (threads') pieces of every model (``delete_pieces``)."""

    def indexed_ids(self, conn: sa.Connection, message_ids: Sequence[str]) -> set[str]: ...

    def stored_state(self, conn: sa.Connection, message_ids: Sequence[str]) -> dict[str, VectorState]: ...

    def models_of(self, conn: sa.Connection, message_id: str) -> set[str | None]: ...

    def scope(self, conn: sa.Connection, resource_id: str | None, thread_id: str | None) -> ScopeVectors | None: ...

    def maintain(self, db: "Database", resources: Sequence[str]) -> list[str]:
        """After a write, outside its transaction: keep derived search structures of these scopes up to
        date (persisted partitions); returns the scopes rebuilt."""

    def status(self) -> dict[str, Any]: ...

    def close(self) -> None: ...

    # -- pieces (``core.recall.pieces``): a side table per dimension, ``pieces.table_name(dim)`` ----------
    # Made by ``ensure`` with the vector table (found by ``open``); Mastra and the scans never read it.
    # Without the table every read answers "none" and every write does nothing.

    def write_pieces(self, conn: sa.Connection, message_ids: Sequence[str], rows: Sequence[PieceRow]) -> None:
        """Replace this model's pieces of ``message_ids`` with ``rows`` (every row's message is one of
        them; a message listed without rows is left with none), set-based, in the caller's write
        transaction (the one that writes the messages' passage rows)."""

    def delete_pieces(self, conn: sa.Connection, key: str, values: Sequence[str]) -> None:
        """Delete the pieces, of every model, whose ``key`` (message_id / thread_id / resource_id) is one
        of ``values``."""

    def read_pieces(self, conn: sa.Connection, message_ids: Sequence[str]) -> dict[str, MessagePieces]:
        """This model's pieces of these messages with each one's passage vector, in one statement (per
        500 ids on Postgres). Only messages whose passage row of this model exists and holds the text the
        pieces were cut from (``metadata.content`` hashes to their ``text_hash``): any other message is
        scored by its passage row alone."""

    def estimate_pieces(self, conn: sa.Connection, message_ids: Sequence[str],
                        qvec: np.ndarray) -> dict[str, PieceEstimate]:
        """Where ``estimates_pieces``: for each message ``read_pieces`` would answer, its pieces' count and
        its best mixed row for the unit query ``qvec`` as the server computes it, within a bound of the
        search's own computation (``PieceEstimate``), without sending a vector; else empty."""

    def has_pieces(self, conn: sa.Connection, resource_id: str | None, thread_id: str | None) -> bool:
        """Whether a message of the scope may have pieces of this model (True may be stale, False is
        not): answered without a read when nothing was written since the last answer, so a vector
        search of a scope without pieces reads nothing more."""

    def piece_hashes(self, conn: sa.Connection, message_ids: Sequence[str]) -> dict[str, str]:
        """The ``text_hash`` of this model's pieces of each of these messages that has any (reindex and
        refresh: which messages lack pieces, or hold pieces of another text)."""

    def piece_counts(self, conn: sa.Connection) -> dict[str, int]:
        """How many messages have pieces in this dimension's table, per model id (the Studio's "which
        model indexed what")."""
