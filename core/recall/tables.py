"""Names of the recall index's own tables and state keys, the same on every backend."""

from __future__ import annotations

FTS_TABLE = "memory_studio_message_fts"  # libSQL only: the FTS5 table (Postgres keeps a tsvector column)
DOCS_TABLE = "memory_studio_fts_docs"
VOCAB_TABLE = "memory_studio_fts_vocab"  # libSQL only: fts5vocab 'instance' view of FTS_TABLE (``keyword_memory``)
QUEUE_TABLE = "memory_studio_recall_queue"
STATE_TABLE = "memory_studio_recall_state"
FTS_WATERMARK = "fts:rowid"  # highest mastra_messages rowid whose keyword doc is up to date (libSQL)
IVF_TABLE = "memory_studio_ivf"  # libSQL: persisted IVF partitions of large scopes (``ivf_store``)
IVF_ROWS = "memory_studio_ivf_rows"
IVF_PACKS = "memory_studio_ivf_packs"  # libSQL: each IVF list's vectors in list order (``ivf_packs``)
