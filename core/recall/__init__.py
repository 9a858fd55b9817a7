"""The recall index: message vectors in libSQL (Mastra's ``memory_messages_<dim>`` layout), keyword search
over FTS5, and hybrid ranking.

Vocabulary: a *vector set* is the in-process matrix of one resource's (or thread's) vectors; the
*store of record* is the libSQL table it is loaded from; *hybrid* means vector and keyword rankings
fused by normalised scores (``hybrid.combine``).
"""

from __future__ import annotations

from core.recall.index import (
    IndexReport, RecallError, RecallIndex, SearchHit, SearchResult, delete_thread_everywhere,
    drop_stale_vectors_everywhere,
)
from core.recall.reindex import ReindexReport, reindex
from core.recall.schema import RECALL_MIGRATIONS, vector_table_name
from core.recall.text import keyword_query, recall_text, segment

__all__ = [
    "RECALL_MIGRATIONS",
    "IndexReport",
    "RecallError",
    "RecallIndex",
    "ReindexReport",
    "SearchHit",
    "SearchResult",
    "keyword_query",
    "recall_text",
    "reindex",
    "delete_thread_everywhere",
    "drop_stale_vectors_everywhere",
    "segment",
    "vector_table_name",
]
