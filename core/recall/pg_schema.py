"""The recall index's tables on Postgres, registered under the same named migrations as on libSQL.

- ``0004_message_fts``: keyword documents with a ``tsvector`` (GIN-indexed) in place of FTS5. The
  text is segmented by ``core.recall.text.segment`` — the same CJK character + bigram expansion the
  libSQL index stores — and parsed with a text search configuration (``0026``: the engine's own), so
  Chinese and Japanese are found. Statement-level triggers with transition tables queue every change
  to ``mastra_messages`` by any process (Mastra included), in one row per message, not per statement.
- ``0016_recall_content_hash``: the docs' ``content_hash`` column, as on libSQL.
- ``0025_recall_queue_by_message``: the queue indexed by ``message_id``. A writer claims the queue rows
  of the messages it keys (``pg_keywords.claim_queued``); without the index each claim read the whole
  queue, ~12 ms a write while a backlog of 100,000 drains (``bench/pg_queue_claim.py``). Made in the
  migration's transaction (``CONCURRENTLY`` cannot be): message saves, whose triggers write the queue,
  wait for the build (a backlog of 100,000: well under a second).
- ``0026_recall_keyword_config``: the engine's text search configuration ``KEYWORD_CONFIG``, a copy
  of ``english`` whose words go to a snowball English stemmer without a stop-word list: Postgres's
  ``english`` drops ``any``, ``what``, ``about``, ``you``…, FTS5's porter tokenizer keeps every word, so
  the same query matched other messages on the two engines. Made in the engine's schema (the first
  of the ``search_path``), if missing (a DO block: a second process making it at the same moment
  finds it made). The docs keyed with ``english`` before are re-keyed from their passages through the
  recall queue (the segmentation is Python's): one ``upsert`` per doc, applied by the next writers'
  drains (``memory-studio reindex`` at once). Each doc says which configuration keyed it
  (``keyed_with``); a check refuses a doc written without it, so a process of an older version still
  running fails its recall writes (naming the check: it needs a newer Memory Studio) instead of
  keying docs with ``english`` again; its messages' docs stay queued for a newer writer (their vectors
  wait for ``memory-studio reindex``). The queueing runs under the ALTER's lock (0.44 s at 100,000
  docs, searches waiting), so no doc is written between the two.
- ``0005_vector_index``: pgvector. Vector tables are per dimension in Mastra's PgVector layout
  (``core.recall.pg_vectors``).
"""

from __future__ import annotations

from core.recall.tables import DOCS_TABLE, QUEUE_TABLE, STATE_TABLE

_QUEUE_FN = "memory_studio_queue_messages"

KEYWORD_CONFIG = "memory_studio_english"  # docs and queries (``pg_keywords``), once ``0026`` has run
LEGACY_CONFIG = "english"  # before it: a database opened read-only keeps searching as its docs were keyed
_STEM_DICT = "memory_studio_english_stem"
NEEDS_NEWER = f"{DOCS_TABLE}_need_a_newer_memory_studio"  # the check old versions' doc writes fail

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

QUEUE_INDEX = f"{QUEUE_TABLE}_message"
QUEUE_INDEX_DDL = (f"CREATE INDEX IF NOT EXISTS {QUEUE_INDEX} ON {QUEUE_TABLE} (message_id)",)

HASH_DDL = (f"ALTER TABLE {DOCS_TABLE} ADD COLUMN IF NOT EXISTS content_hash TEXT",)

VECTOR_DDL = (
    "CREATE EXTENSION IF NOT EXISTS vector",
    f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (key TEXT NOT NULL PRIMARY KEY, value BIGINT NOT NULL)",
)


def _if_missing(create: str) -> str:
    """``create`` (statements making one object) in a DO block: an object of that name already there
    (made before, or by another process at the same moment: a duplicate, a unique violation) is kept."""
    return f"DO $$ BEGIN {create}; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"


# In the engine's schema: unqualified names are made in the first schema of the ``search_path``.
KEYWORD_CONFIG_DDL = (
    _if_missing(f"CREATE TEXT SEARCH DICTIONARY {_STEM_DICT} (TEMPLATE = pg_catalog.snowball, Language = english)"),
    _if_missing(
        f"CREATE TEXT SEARCH CONFIGURATION {KEYWORD_CONFIG} (COPY = pg_catalog.english); "
        f"ALTER TEXT SEARCH CONFIGURATION {KEYWORD_CONFIG} ALTER MAPPING REPLACE pg_catalog.english_stem "
        f"WITH {_STEM_DICT}"),
    # Which configuration keyed each doc; NULL: ``english``, before this migration (keyed again below).
    f"ALTER TABLE {DOCS_TABLE} ADD COLUMN IF NOT EXISTS keyed_with TEXT",
    # NOT VALID: the docs already there are not checked; every doc written from now on is.
    _if_missing(f"ALTER TABLE {DOCS_TABLE} ADD CONSTRAINT {NEEDS_NEWER} "
                f"CHECK (keyed_with IS NOT DISTINCT FROM '{KEYWORD_CONFIG}') NOT VALID"),
    # After the ALTER (its lock held to the commit, no doc is written meanwhile): every doc keyed with
    # ``english`` goes through the queue once.
    f"INSERT INTO {QUEUE_TABLE} (message_id, op) SELECT message_id, 'upsert' FROM {DOCS_TABLE} "
    f"WHERE keyed_with IS DISTINCT FROM '{KEYWORD_CONFIG}' ORDER BY doc_id",
)
