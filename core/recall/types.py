"""The recall index's value types, settings and errors, shared by the index, the search pipeline, the
playground's explanation and the backends (so none of them imports another for a name)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Literal, NamedTuple

import numpy as np

from core.errors import MemoryStudioError

Mode = Literal["vector", "keyword", "hybrid"]
MODES: tuple[Mode, ...] = ("vector", "keyword", "hybrid")
CANDIDATES = 50  # depth of each list fed to the fusion; more than top_k so fusion can promote
MIGRATE_HINT = "run `memory-studio migrate` on this database"

# A keyword doc: (message_id, thread_id, resource_id, text, context).
DocRow = tuple[str, "str | None", "str | None", str, str]
# A vector row: (vector_id = message id, vector, metadata, model id).
VectorRow = tuple[str, np.ndarray, dict[str, Any], str]


class PieceRow(NamedTuple):
    """One piece vector of a message (``core.recall.pieces``), as a save or ``reindex`` writes it in the
    pieces table of the index's model (the backend adds its model id)."""

    message_id: str
    thread_id: str | None
    resource_id: str | None
    piece: int  # 0, 1, ... in text order
    start: int  # the piece's span in the message's recall text: text[start:end]
    end: int
    text_hash: str  # ``pieces.text_hash`` of the recall text the piece was cut from
    vector: np.ndarray  # (dim,) float32 of unit length: the embedding of the piece's text (``pieces.Cut.texts``)


class MessagePieces(NamedTuple):
    """What a vector search reads of one message with pieces: its passage vector as stored now, and its
    pieces (only when the passage row holds the very text the pieces were cut from)."""

    message_id: str
    passage: np.ndarray  # (dim,) float32: the message's row in the vector table (this model's)
    vectors: np.ndarray  # (pieces, dim) float32, piece order
    spans: tuple[tuple[int, int], ...]  # each piece's span in ``content``
    content: str  # the recall text the pieces were cut from (the passage row's ``metadata.content``)
    # ``pieces.passage_dots(vectors, passage)`` computed at the read (None: not), so a search whose read is
    # kept (libSQL's ``piece_cache``) does not compute it again; only where ``pieces.dots_by_row`` holds.
    passage_dots: np.ndarray | None = None


class PieceEstimate(NamedTuple):
    """A message's best mixed row as a server computed it (``score``), and how far from it the search's own
    computation (``search._with_pieces``) can be (``bound``, ``pieces.bounds``): its score lies within
    ``score ± bound``. ``pieces``: how many pieces it has (as ``read_pieces`` would answer them)."""

    pieces: int
    score: float
    bound: float


class Ranked(NamedTuple):
    """One candidate of one ranking (vector: cosine; keyword: -BM25, higher is better), best first in its
    list. A named tuple, not a frozen dataclass: a hybrid search builds about a hundred of these, and a
    frozen dataclass's ``__init__`` (``object.__setattr__`` per field) cost twice a tuple's."""

    message_id: str
    thread_id: str | None
    resource_id: str | None
    score: float


# ``Ranked(*fields)`` without the named tuple's ``__new__`` (a Python function: a frame per record): a search
# builds its lists' hundred records this way, from the fields as one tuple.
ranked_of: Callable[[tuple[str, str | None, str | None, float]], Ranked] = partial(tuple.__new__, Ranked)


class Fused(NamedTuple):
    """One hybrid candidate: its fused (or re-ranked) score, its raw scores and its ranks in both lists
    (None where it is not listed). A named tuple for the same reason as ``Ranked``."""

    message_id: str
    thread_id: str | None
    resource_id: str | None
    score: float
    vector_score: float | None
    keyword_score: float | None
    vector_rank: int | None
    keyword_rank: int | None


class RecallError(MemoryStudioError, RuntimeError):
    """Recall cannot work on this store with this embedder; the message says what to do."""


@dataclass(frozen=True)
class SearchHit:
    message_id: str
    thread_id: str | None
    resource_id: str | None
    score: float  # cosine (vector mode), -BM25 (keyword mode) or fused score in [0, 1] (hybrid mode)
    source: Literal["vector", "keyword", "hybrid"]  # which ranking(s) found it
    vector_score: float | None = None
    keyword_score: float | None = None


@dataclass
class SearchResult:
    hits: list[SearchHit]
    reason: str | None = None  # why the answer is empty or degraded; None when all went well
    mode: Mode = "hybrid"
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class IndexReport:
    indexed: list[str] = field(default_factory=list)  # message ids with a vector written
    keyword_indexed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # id -> why it is not indexed (system, empty)
    failed: dict[str, str] = field(default_factory=dict)  # id -> error (embedding or write failure)
    removed: list[str] = field(default_factory=list)  # refresh: ids whose rows were dropped (deleted, no text)
    unchanged: list[str] = field(default_factory=list)  # refresh: ids whose rows already matched

    @property
    def ok(self) -> bool:
        return not self.failed
