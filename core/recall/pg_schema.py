"""The recall index's tables on Postgres, registered under the same named migrations as on libSQL.

- ``0004_message_fts``: keyword documents with a ``tsvector`` (GIN-indexed) in place of FTS5. The
  text is segmented by ``core.recall.text.segment`` — the same CJK character + bigram expansion the
  libSQL index stores — and parsed with the ``simple`` configuration, after the same stemming in
  Python (``text.keyword_terms``), so Chinese and Japanese are found and both engines rank one
  document the same way. Statement-level triggers with transition tables queue every change to
  ``mastra_messages`` by any process (Mastra included), in one row per message, not per statement.
- ``0016_recall_content_hash``: the docs' ``content_hash`` column, as on libSQL.
- ``0005_vector_index``: pgvector. Vector tables are per dimension in Mastra's PgVector layout
  (``core.recall.pg_vectors``).
"""

from __future__ import annotations

from core.recall.tables import DOCS_TABLE, QUEUE_TABLE, STATE_TABLE

_QUEUE_FN = "memory_studio_queue_messages"

FTS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {DOCS_TABLE} (doc_id BIGSERIAL PRIMARY KEY, message_id TEXT NOT NULL UNIQUE, "
    "thread_id TEXT, resource_id TEXT, terms tsvector NOT NULL)",
    f"CREATE INDEX IF NOT EXISTS {DOCS_TABLE}_thread ON {DOCS_TABLE} (thread_id)",
    f"CREATE INDEX IF NOT EXISTS {DOCS_TABLE}_resource ON {DOCS_TABLE} (resource_id)",
    f"CREATE INDEX IF NOT EXISTS {DOCS_TABLE}_terms ON {DOCS_TABLE} USING GIN (terms)",
    f"CREATE TABLE IF NOT EXISTS {QUEUE_TABLE} (seq BIGSERIAL PRIMARY KEY, message_id TEXT NOT NULL, "
    "op TEXT NOT NULL, row_id BIGINT)",
    f"""CREATE OR REPLACE FUNCTION {_QUEUE_FN}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO {QUEUE_TABLE} (message_id, op) SELECT id, 'insert' FROM new_rows WHERE role <> 'system';
        ELSIF TG_OP = 'UPDATE' THEN
            INSERT INTO {QUEUE_TABLE} (message_id, op)
                SELECT o.id, 'delete' FROM old_rows o LEFT JOIN new_rows n ON n.id = o.id WHERE n.id IS NULL;
            INSERT INTO {QUEUE_TABLE} (message_id, op) SELECT id, 'upsert' FROM new_rows;
        ELSE
            INSERT INTO {QUEUE_TABLE} (message_id, op) SELECT id, 'delete' FROM old_rows;
        END IF;
        RETURN NULL; END $$""",
    "DROP TRIGGER IF EXISTS memory_studio_messages_ai ON mastra_messages",
    "CREATE TRIGGER memory_studio_messages_ai AFTER INSERT ON mastra_messages REFERENCING NEW TABLE AS new_rows "
    f"FOR EACH STATEMENT EXECUTE FUNCTION {_QUEUE_FN}()",
    "DROP TRIGGER IF EXISTS memory_studio_messages_au ON mastra_messages",
    "CREATE TRIGGER memory_studio_messages_au AFTER UPDATE ON mastra_messages "
    f"REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {_QUEUE_FN}()",
    "DROP TRIGGER IF EXISTS memory_studio_messages_ad ON mastra_messages",
    "CREATE TRIGGER memory_studio_messages_ad AFTER DELETE ON mastra_messages REFERENCING OLD TABLE AS old_rows "
    f"FOR EACH STATEMENT EXECUTE FUNCTION {_QUEUE_FN}()",
    f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (key TEXT NOT NULL PRIMARY KEY, value BIGINT NOT NULL)",
    # Messages stored before the migration are queued like any later write; the first search drains them.
    f"INSERT INTO {QUEUE_TABLE} (message_id, op) SELECT id, 'insert' FROM mastra_messages WHERE role <> 'system'",
)

HASH_DDL = (f"ALTER TABLE {DOCS_TABLE} ADD COLUMN IF NOT EXISTS content_hash TEXT",)

VECTOR_DDL = (
    "CREATE EXTENSION IF NOT EXISTS vector",
    f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (key TEXT NOT NULL PRIMARY KEY, value BIGINT NOT NULL)",
)
