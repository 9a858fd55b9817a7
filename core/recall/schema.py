"""Tables of the recall index: keyword index (FTS5), change queue, vector tables in Mastra's layout.

Two named migrations (registered on import):

- ``0004_message_fts``: an FTS5 table over message text, a docs table mapping FTS rows to messages,
  and a queue fed by triggers on ``mastra_messages``. Triggers live in the database, so rows saved by
  *any* process — Mastra included — are queued; the index drains the queue (segmenting CJK text in
  Python, which SQL cannot do) in its next write. Searches never write: they leave out messages
  deleted since they were indexed and say that changes wait.
- ``0016_recall_content_hash``: a ``content_hash`` column on the keyword docs, the passage hash
  (``passages.passage_hash``) of the text and context each doc was built from. Vector rows carry the
  same hash in their metadata (``content_hash``), so an edited message's stale rows are found by
  comparing hashes (``RecallIndex.refresh_messages``, ``reindex``). Rows written before it have none:
  unknown, rebuilt when refreshed.
- ``0017_recall_ivf``: persisted IVF partitions of large scopes (``ivf_store``; libSQL only, Postgres
  has pgvector's HNSW).
- ``0023_recall_keyword_memory``: what keyword search in process (``keyword_memory``) reads: an
  ``fts5vocab`` table over the FTS5 index (each token's rows, columns and offsets; a view, no storage)
  and the docs' rewrite counter ``fts:rewrites``, bumped by triggers on every update or delete of a doc
  (an append is seen in FTS5's own records); and ``messages:rewrites``, bumped on every update or
  delete of a message, for the hybrid re-rank's kept reads (``order_cache``). libSQL only.
- ``0025_recall_queue_by_message``: Postgres only (``pg_schema``): the recall queue indexed by message id,
  for a writer's claim of its messages' rows (``pg_keywords.claim_queued``).
- ``0026_recall_keyword_config``: Postgres only (``pg_schema``): keyword docs keyed with the engine's
  own text search configuration, which keeps stop words as FTS5's porter tokenizer does.
- ``0031_recall_keyword_rows``: the keyword doc moves into its FTS5 row (libSQL; Postgres keeps its docs
  table). The FTS5 row's rowid is the message's ``mastra_messages`` rowid, through which its message,
  thread and resource are read (a message keeps its rowid for its life: an update keeps it, ``VACUUM``
  keeps it; a deleted top rowid handed to the next insert is why a delete queues its rowid), and its
  passage hash is an ``UNINDEXED`` column: no docs row and none of its three b-trees per message
  (issue 20 item 3b). The delete trigger on ``mastra_messages`` now removes the message's FTS5 row itself
  (in the deleting transaction, whoever deletes) and bumps ``fts:rewrites``; the writers here bump it on
  every FTS5 delete (a virtual table has no triggers). The migration copies every doc of a stored message
  into the new table in one transaction (a doc whose message is gone is dropped: its queued delete
  still drops its vectors), and leaves a view under the docs table's name, so an older Memory Studio
  reading this file reads the same docs (it refuses to write: the migration is unknown to it).
- ``0005_vector_index``: a small counters table. Each vector table gets triggers that bump
  ``<table>:rewrites`` on every update and delete; an in-process matrix compares it, and the table's
  ``max(rowid)`` for appends, with what it loaded, so vectors written by another process appear
  without polling the whole table.
- ``0021_recall_ivf_packs`` (registered by ``ivf_packs``): each persisted IVF list's vectors copied
  in list order (``memory_studio_ivf_packs``), and triggers on the vector tables that send a rewritten
  or deleted row back to being read from the table, so a probed list is one range scan.
- ``0018_recall_vector_appends``: drops the per-row ``AFTER INSERT`` trigger that counted appends in
  ``<table>:appends`` (a state-table write per vector row, about a third of the row's insert cost):
  a new row gets a rowid above every row present (the tables have no ``AUTOINCREMENT``; a top rowid is
  only handed out again after a delete, which bumps the rewrite count), so ``max(rowid)`` tells appends.

Vector tables themselves are per dimension (``memory_messages_<dim>``, Mastra's naming), so they cannot
be listed in a static migration. ``ensure_vector_table`` creates one — Mastra's DDL plus a
``model_id`` column — only on a database whose recall migrations have been applied, never on a
foreign (Mastra) database that was not explicitly migrated.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache

import sqlalchemy as sa

from core.storage import bulk, catalog, dialect, driver_sql

from core.storage import migrations
from core.recall import pg_changes, pg_schema  # the same steps on Postgres
from core.recall.tables import DOCS_TABLE as DOCS_TABLE, FTS_TABLE as FTS_TABLE, FTS_WATERMARK as FTS_WATERMARK
from core.recall.tables import QUEUE_TABLE as QUEUE_TABLE, STATE_TABLE as STATE_TABLE
from core.recall.tables import IVF_PACKS, IVF_ROWS, IVF_TABLE, VOCAB_TABLE
from core.recall.text import passage_hash, recall_content_text, segment
FTS_MIGRATION = "0004_message_fts"
VECTOR_MIGRATION = "0005_vector_index"
HASH_MIGRATION = "0016_recall_content_hash"
IVF_MIGRATION = "0017_recall_ivf"
APPENDS_MIGRATION = "0018_recall_vector_appends"
PACKS_MIGRATION = "0021_recall_ivf_packs"  # registered by ``ivf_packs`` (its step reads vector rows)
KEYWORD_MEMORY_MIGRATION = "0023_recall_keyword_memory"
CHANGE_LOG_MIGRATION = "0024_recall_change_log"
QUEUE_INDEX_MIGRATION = "0025_recall_queue_by_message"
KEYWORD_CONFIG_MIGRATION = "0026_recall_keyword_config"
KEYWORD_ROWS_MIGRATION = "0031_recall_keyword_rows"
RECALL_MIGRATIONS = (FTS_MIGRATION, VECTOR_MIGRATION, HASH_MIGRATION, IVF_MIGRATION, APPENDS_MIGRATION, PACKS_MIGRATION,
                     KEYWORD_MEMORY_MIGRATION, CHANGE_LOG_MIGRATION, QUEUE_INDEX_MIGRATION, KEYWORD_CONFIG_MIGRATION,
                     KEYWORD_ROWS_MIGRATION)
_TOKENIZE = "tokenize = 'porter unicode61 remove_diacritics 2'"

_FTS_DDL = (
    f"CREATE TABLE {DOCS_TABLE} (doc_id INTEGER PRIMARY KEY, message_id TEXT NOT NULL UNIQUE, "
    "thread_id TEXT, resource_id TEXT)",
    f"CREATE INDEX {DOCS_TABLE}_thread ON {DOCS_TABLE} (thread_id)",
    f"CREATE INDEX {DOCS_TABLE}_resource ON {DOCS_TABLE} (resource_id)",
    # porter: "allergies" finds "allergy" (both "allergi"), but not "allergic" ("allerg": Known problems);
    # unicode61 leaves the pre-spaced CJK characters alone.
    # body: the message; context: the previous message of its thread (ranked with a lower weight).
    f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5(body, context, {_TOKENIZE})",
    # Inserts are found by rowid (above the watermark in the state table), not by a trigger: a
    # per-row trigger halved the insert rate of every save. Updates and deletes are rare and queued;
    # a delete records its rowid because SQLite may hand a deleted top rowid to the next insert.
    f"CREATE TABLE {QUEUE_TABLE} (seq INTEGER PRIMARY KEY, message_id TEXT NOT NULL, op TEXT NOT NULL, "
    "row_id INTEGER)",
    f"""CREATE TRIGGER memory_studio_messages_au AFTER UPDATE ON mastra_messages BEGIN
        INSERT INTO {QUEUE_TABLE} (message_id, op, row_id) SELECT old.id, 'delete', old.rowid WHERE old.id != new.id;
        INSERT INTO {QUEUE_TABLE} (message_id, op, row_id) VALUES (new.id, 'upsert', new.rowid); END""",
    f"""CREATE TRIGGER memory_studio_messages_ad AFTER DELETE ON mastra_messages BEGIN
        INSERT INTO {QUEUE_TABLE} (message_id, op, row_id) VALUES (old.id, 'delete', old.rowid); END""",
    f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (key TEXT NOT NULL PRIMARY KEY, value INTEGER NOT NULL)",
)

_BUMP_REWRITES = f"UPDATE {STATE_TABLE} SET value = value + 1 WHERE key = 'fts:rewrites'"
_KEYWORD_MEMORY_DDL = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {VOCAB_TABLE} USING fts5vocab({FTS_TABLE}, instance)",
    f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (key TEXT NOT NULL PRIMARY KEY, value INTEGER NOT NULL)",
    f"INSERT OR IGNORE INTO {STATE_TABLE} (key, value) VALUES ('fts:rewrites', 0)",
    f"CREATE TRIGGER IF NOT EXISTS {DOCS_TABLE}_ad AFTER DELETE ON {DOCS_TABLE} BEGIN {_BUMP_REWRITES}; END",
    f"CREATE TRIGGER IF NOT EXISTS {DOCS_TABLE}_au AFTER UPDATE ON {DOCS_TABLE} BEGIN {_BUMP_REWRITES}; END",
    # The hybrid re-rank's kept reads (``order_cache``): dropped when any message changes or goes.
    f"INSERT OR IGNORE INTO {STATE_TABLE} (key, value) VALUES ('messages:rewrites', 0)",
    f"CREATE TRIGGER IF NOT EXISTS memory_studio_messages_order_au AFTER UPDATE ON mastra_messages BEGIN "
    f"UPDATE {STATE_TABLE} SET value = value + 1 WHERE key = 'messages:rewrites'; END",
    f"CREATE TRIGGER IF NOT EXISTS memory_studio_messages_order_ad AFTER DELETE ON mastra_messages BEGIN "
    f"UPDATE {STATE_TABLE} SET value = value + 1 WHERE key = 'messages:rewrites'; END",
)

_STATE_DDL = (f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (key TEXT NOT NULL PRIMARY KEY, value INTEGER NOT NULL)",)
_HASH_DDL = (f"ALTER TABLE {DOCS_TABLE} ADD COLUMN content_hash TEXT",)
_IVF_DDL = (
    f"CREATE TABLE IF NOT EXISTS {IVF_TABLE} (ivf_id INTEGER PRIMARY KEY, vector_table TEXT NOT NULL, "
    "model_id TEXT NOT NULL, scope TEXT NOT NULL, dim INTEGER NOT NULL, nlist INTEGER NOT NULL, "
    "centroids BLOB NOT NULL, built_rows INTEGER NOT NULL, rows_now INTEGER NOT NULL, max_rowid INTEGER NOT NULL, "
    "built_at TEXT NOT NULL, UNIQUE (vector_table, model_id, scope))",
    f"CREATE TABLE IF NOT EXISTS {IVF_ROWS} (ivf_id INTEGER NOT NULL, list INTEGER NOT NULL, "
    "row_id INTEGER NOT NULL, PRIMARY KEY (ivf_id, list, row_id)) WITHOUT ROWID",
    f"CREATE INDEX IF NOT EXISTS {IVF_ROWS}_row ON {IVF_ROWS} (ivf_id, row_id)",
)


def _backfill_fts(conn: sa.Connection) -> None:
    """Index messages that existed before the migration (the triggers only see later writes), in this
    migration's layout (a docs row numbered apart from its FTS5 row's message; ``0031`` moves them)."""
    rows = conn.exec_driver_sql(
        'SELECT m.id, m.thread_id, coalesce(m."resourceId", t."resourceId"), CAST(m.content AS BLOB), m."createdAt" '
        "FROM mastra_messages m LEFT JOIN mastra_threads t ON t.id = m.thread_id WHERE m.role != 'system'"
    ).all()
    for mid, thread_id, resource_id, raw, created in rows:
        text = text_of_raw(raw)
        if not text.strip():
            continue
        context = previous_text(conn, thread_id, created, mid)
        doc_id = conn.exec_driver_sql(
            f"INSERT INTO {DOCS_TABLE} (message_id, thread_id, resource_id) VALUES (?, ?, ?) RETURNING doc_id",
            (mid, thread_id, resource_id)).scalar()
        conn.exec_driver_sql(f"INSERT INTO {FTS_TABLE} (rowid, body, context) VALUES (?, ?, ?)",
                             (doc_id, segment(text), segment(context)))
    top = conn.exec_driver_sql("SELECT coalesce(max(rowid), 0) FROM mastra_messages").scalar()
    conn.exec_driver_sql(
        f"INSERT OR REPLACE INTO {STATE_TABLE} (key, value) VALUES (?, ?)", (FTS_WATERMARK, int(top or 0))
    )


#: The keyword doc's columns an older Memory Studio reads (``0031_recall_keyword_rows``), as a view.
_DOCS_VIEW = (
    f"CREATE VIEW {DOCS_TABLE} AS SELECT f.rowid AS doc_id, m.id AS message_id, m.thread_id AS thread_id, "
    'coalesce(m."resourceId", t."resourceId") AS resource_id, f.content_hash AS content_hash '
    f"FROM {FTS_TABLE} f JOIN mastra_messages m ON m.rowid = f.rowid LEFT JOIN mastra_threads t ON t.id = m.thread_id"
)
#: A deleted message's keyword row goes with it, in the deleting transaction (whoever deletes: its rowid
#: may be handed to the next insert); the rewrite counter tells the in-process keyword index.
_DELETE_TRIGGER = (
    f"""CREATE TRIGGER memory_studio_messages_ad AFTER DELETE ON mastra_messages BEGIN
        UPDATE {STATE_TABLE} SET value = value + 1 WHERE key = 'fts:rewrites'
            AND EXISTS (SELECT 1 FROM {FTS_TABLE}_docsize WHERE id = old.rowid);
        DELETE FROM {FTS_TABLE} WHERE rowid = old.rowid;
        INSERT INTO {QUEUE_TABLE} (message_id, op, row_id) VALUES (old.id, 'delete', old.rowid); END"""
)


def _docs_into_fts(conn: sa.Connection) -> None:
    """``0031_recall_keyword_rows``: each doc of a stored message copied into a new FTS5 table at its
    message's rowid, with its passage hash; the docs table, the old FTS5 table and its vocabulary view
    dropped; the new table renamed to the old name. One transaction (the migration's)."""
    staging = FTS_TABLE + "_next"
    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {VOCAB_TABLE}")
    conn.exec_driver_sql(f"CREATE VIRTUAL TABLE {staging} USING fts5(body, context, content_hash UNINDEXED, {_TOKENIZE})")
    conn.exec_driver_sql(
        f"INSERT INTO {staging} (rowid, body, context, content_hash) SELECT m.rowid, f.body, f.context, d.content_hash "
        f"FROM {DOCS_TABLE} d JOIN {FTS_TABLE} f ON f.rowid = d.doc_id JOIN mastra_messages m ON m.id = d.message_id "
        "ORDER BY m.rowid")
    conn.exec_driver_sql(f"DROP TABLE {FTS_TABLE}")
    conn.exec_driver_sql(f"DROP TABLE {DOCS_TABLE}")  # (its indexes and rewrite triggers with it)
    conn.exec_driver_sql(f"ALTER TABLE {staging} RENAME TO {FTS_TABLE}")
    conn.exec_driver_sql(f"CREATE VIRTUAL TABLE {VOCAB_TABLE} USING fts5vocab({FTS_TABLE}, instance)")
    conn.exec_driver_sql(_DOCS_VIEW)
    conn.exec_driver_sql("DROP TRIGGER IF EXISTS memory_studio_messages_ad")
    conn.exec_driver_sql(_DELETE_TRIGGER)
    conn.exec_driver_sql(f"INSERT OR IGNORE INTO {STATE_TABLE} (key, value) VALUES ('fts:rewrites', 0)")
    # (every row has a new rowid: a process's in-process keyword index must load again)
    conn.exec_driver_sql(f"{_BUMP_REWRITES} AND EXISTS (SELECT 1 FROM {FTS_TABLE}_docsize)")


def keyword_rows_ready(conn: sa.Connection) -> bool:
    """Whether this libSQL database's keyword index has this version's layout (``0031``): the FTS5 table
    with its ``content_hash`` column. An older layout is read by nothing here: it waits for the migration."""
    return catalog.has_table(conn, FTS_TABLE) and "content_hash" in columns(conn, FTS_TABLE)


def _drop_append_triggers(conn: sa.Connection) -> None:
    """Every vector table's per-row append trigger (``<table>_ms_ai``) and its counter go: readers
    compare ``max(rowid)`` instead (``vector_table.change_counters``)."""
    tables = [table for name, table in catalog.triggers(conn) if name == table + "_ms_ai"]
    for table in tables:
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {quoted(table + '_ms_ai')}")
        conn.exec_driver_sql(f"DELETE FROM {STATE_TABLE} WHERE key = ?", (f"{table}:appends",))


def _register() -> None:
    migrations.register(
        migrations.Migration(
            FTS_MIGRATION, "Keyword index (FTS5) over message text, kept in sync by triggers", _FTS_DDL, _backfill_fts,
            postgres=pg_schema.FTS_DDL,
        )
    )
    migrations.register(
        migrations.Migration(
            VECTOR_MIGRATION, "Change counters for the vector tables (memory_messages_<dim>)", _STATE_DDL,
            postgres=pg_schema.VECTOR_DDL,
        )
    )
    migrations.register(
        migrations.Migration(
            HASH_MIGRATION, "Passage hash on the keyword docs, so edited messages' stale recall rows are found",
            _HASH_DDL, postgres=pg_schema.HASH_DDL,
        )
    )
    migrations.register(
        migrations.Migration(
            IVF_MIGRATION, "Persisted IVF partitions of large scopes (centroids and list assignments)", _IVF_DDL,
            postgres=(),  # pgvector's HNSW index is the server's own
        )
    )
    migrations.register(
        migrations.Migration(
            APPENDS_MIGRATION, "Vector tables: appends told by max(rowid), not a per-row trigger", (),
            _drop_append_triggers,
            postgres=(),  # Postgres vector tables never had the trigger (pgvector is searched on the server)
        )
    )
    migrations.register(
        migrations.Migration(
            KEYWORD_MEMORY_MIGRATION, "Keyword search in process: an fts5vocab view of the keyword index and "
            "rewrite counters on its docs and on messages", _KEYWORD_MEMORY_DDL,
            postgres=(),  # Postgres ranks with tsvector on the server
        )
    )
    migrations.register(
        migrations.Migration(
            CHANGE_LOG_MIGRATION, "A change log of messages, keyword docs and vectors, so every process keeps "
            "its recall reads in memory (Postgres)", (),  # libSQL has its markers (0018, 0023)
            postgres=pg_changes.DDL, postgres_run=pg_changes.log_vector_tables,
        )
    )
    migrations.register(
        migrations.Migration(
            QUEUE_INDEX_MIGRATION, "The recall queue indexed by message id, so a writer claims its messages' "
            "rows without reading the whole queue (Postgres)", (),  # libSQL's queue is never read by message
            postgres=pg_schema.QUEUE_INDEX_DDL,
        )
    )
    migrations.register(
        migrations.Migration(
            KEYWORD_CONFIG_MIGRATION, "Keyword docs keyed with a text search configuration that keeps stop words, "
            "as FTS5 does (Postgres; the docs already there are re-keyed through the recall queue)", (),
            postgres=pg_schema.KEYWORD_CONFIG_DDL,
        )
    )
    migrations.register(
        migrations.Migration(
            KEYWORD_ROWS_MIGRATION, "Keyword docs moved into their FTS5 rows, keyed by the message's rowid: one "
            "row a message instead of two and three b-trees (libSQL; a view keeps the old docs readable)", (),
            _docs_into_fts,
            postgres=(),  # Postgres keeps its docs table (its tsvector is the doc's own column)
        )
    )


_register()


def vector_table_name(dim: int) -> str:
    """Mastra's naming (``packages/core/src/memory/memory.ts``): 1536-d keeps the bare name."""
    return "memory_messages" if dim == 1536 else f"memory_messages_{dim}"


_SAFE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def quoted(name: str) -> str:
    if not _SAFE_NAME.match(name):
        raise ValueError(f"unsafe table name {name!r}")
    return f'"{name}"'


def columns(conn: sa.Connection, table: str) -> set[str]:
    return {name for name, _type, _key in catalog.table_columns(conn, table)}


def ensure_vector_table(conn: sa.Connection, dim: int) -> str:
    """Create (or adopt) ``memory_messages_<dim>``: Mastra's columns plus ``model_id``, indexes, the
    rewrite triggers (appends are told by ``max(rowid)``: no per-row insert trigger).

    No ``libsql_vector_idx``: measured, the DiskANN index is what makes Mastra's table 85 KB/message
    and 150 inserts/s; exact search runs in process instead (see ``matrix.py``). A table Mastra
    created keeps its own index; we only add a column, expression indexes and triggers to it.
    """
    table = vector_table_name(dim)
    q = quoted(table)
    conn.exec_driver_sql(
        f"CREATE TABLE IF NOT EXISTS {q} (id INTEGER PRIMARY KEY, vector_id TEXT UNIQUE NOT NULL, "
        f"embedding F32_BLOB({int(dim)}), metadata TEXT DEFAULT '{{}}', model_id TEXT)"
    )
    if "model_id" not in columns(conn, table):
        conn.exec_driver_sql(f"ALTER TABLE {q} ADD COLUMN model_id TEXT")
    for key in ("resource_id", "thread_id", "message_id"):
        conn.exec_driver_sql(
            f"CREATE INDEX IF NOT EXISTS {quoted(table + '_' + key)} ON {q} (json_extract(metadata, '$.{key}'))"
        )
    conn.exec_driver_sql(f"INSERT OR IGNORE INTO {STATE_TABLE} (key, value) VALUES (?, 0)", (f"{table}:rewrites",))
    bump = f"UPDATE {STATE_TABLE} SET value = value + 1 WHERE key = "
    for event, suffix in (("UPDATE", "au"), ("DELETE", "ad")):
        conn.exec_driver_sql(
            f"CREATE TRIGGER IF NOT EXISTS {quoted(table + '_ms_' + suffix)} AFTER {event} ON {q} "
            f"BEGIN {bump}'{table}:rewrites'; END"
        )
    if catalog.has_table(conn, IVF_PACKS):
        ensure_pack_triggers(conn, table)
    return table


def ensure_pack_triggers(conn: sa.Connection, table: str) -> None:
    """A rewritten or deleted row of ``table`` leaves its IVF list's packed copy (``ivf_packs``): its
    list entry is read from the table again (``chunk`` NULL), whoever wrote it, Mastra included."""
    q = quoted(table)
    for event, suffix in (("UPDATE", "ivf_au"), ("DELETE", "ivf_ad")):
        conn.exec_driver_sql(
            f"CREATE TRIGGER IF NOT EXISTS {quoted(table + '_ms_' + suffix)} AFTER {event} ON {q} BEGIN "
            f"UPDATE {IVF_ROWS} SET chunk = NULL WHERE ivf_id IN "
            f"(SELECT ivf_id FROM {IVF_TABLE} WHERE vector_table = '{table}') AND row_id = old.rowid AND chunk IS NOT NULL; END"
        )


def text_of_raw(raw: object) -> str:
    """Indexable text of a stored ``content`` column value (JSON text, JSONB already decoded, or plain)."""
    if isinstance(raw, (bytes, bytearray)):
        raw = raw.decode("utf-8", errors="replace")
    if isinstance(raw, str):
        stripped = raw.lstrip()
        if stripped.startswith("{"):
            try:
                return recall_content_text(json.loads(raw))
            except json.JSONDecodeError:
                return ""  # a malformed row is not indexed; the message store reports it when read
        return raw
    return ""


def previous_text(conn: sa.Connection, thread_id: str | None, created_at: str, message_id: str) -> str:
    """Text of the message before this one in its thread ("" for the first): the context a reply needs.

    Measured on LoCoMo (public split, plain BM25): recall@10 .588 for the message alone, .669 for the
    previous message plus the message. Vectors embed the same pair (see ``RecallIndex._contexts``).
    """
    if not thread_id:
        return ""
    row = driver_sql.first(conn, f"SELECT {previous_sql(conn)}", (thread_id, created_at, created_at, message_id))
    return text_of_raw(row[0]) if row is not None and row[0] is not None else ""


def count_and_previous(
    conn: sa.Connection, thread_id: str, first: str, last: str, message_id: str, last_id: str
) -> tuple[int, str, str | None]:
    """(messages of the thread stored from ``first`` to ``last``, every role; ``previous_text`` of
    the message ``message_id`` at ``first``; the id of the first user/assistant message after the
    message ``last_id`` at ``last``, None at the end), in one statement: a batch's re-check inside its save."""
    row = driver_sql.first(
        conn,
        'SELECT (SELECT count(*) FROM mastra_messages WHERE thread_id = ? AND "createdAt" >= ? AND "createdAt" <= ?), '
        f"{previous_sql(conn)}, {_NEXT_SQL}",
        (thread_id, first, last, thread_id, first, first, message_id, thread_id, last, last, last_id),
    )
    if row is None:
        return 0, "", None
    return (int(row[0] or 0), text_of_raw(row[1]) if row[1] is not None else "",
            str(row[2]) if row[2] is not None else None)


#: A scalar subquery: the id of the user/assistant message after (thread_id, createdAt, id), the
#: inverse of ``previous_sql``'s order.
_NEXT_SQL = (
    "(SELECT id FROM mastra_messages WHERE thread_id = ? AND role IN ('user', 'assistant') AND \"createdAt\" >= ? "
    'AND ("createdAt" > ? OR id > ?) ORDER BY "createdAt", id LIMIT 1)'
)


def span_and_next(conn: sa.Connection, thread_id: str, first: str, last: str, last_id: str) -> tuple[int, str | None]:
    """(user/assistant messages of the thread stored from ``first`` to ``last``; the id of the first one
    after the message ``last_id`` at ``last``, None at the end), in one statement: what a batch just
    written may be the context of (``RecallIndex._followers``)."""
    row = driver_sql.first(
        conn,
        "SELECT (SELECT count(*) FROM mastra_messages WHERE thread_id = ? AND role IN ('user', 'assistant') "
        f'AND "createdAt" >= ? AND "createdAt" <= ?), {_NEXT_SQL}',
        (thread_id, first, last, thread_id, last, last, last_id),
    )
    if row is None:
        return 0, None
    return int(row[0] or 0), (str(row[1]) if row[1] is not None else None)


def ids_in_span(conn: sa.Connection, thread_id: str, first: str, last: str) -> list[str]:
    """The user/assistant messages of the thread stored from ``first`` to ``last``."""
    return [str(r[0]) for r in driver_sql.rows(
        conn,
        "SELECT id FROM mastra_messages WHERE thread_id = ? AND role IN ('user', 'assistant') "
        'AND "createdAt" >= ? AND "createdAt" <= ?',
        (thread_id, first, last),
    )]


def previous_sql(conn: sa.Connection) -> str:
    """A scalar subquery: the stored text of the user/assistant message before (thread_id, createdAt, id)."""
    return (
        f"(SELECT {dialect.stored_text_sql(conn, 'content')} FROM mastra_messages "
        "WHERE thread_id = ? AND role IN ('user', 'assistant') AND \"createdAt\" <= ? "
        'AND ("createdAt" < ? OR id < ?) ORDER BY "createdAt" DESC, id DESC LIMIT 1)'
    )


_MEMO_CHARS = 4_096  # passages longer than this are hashed again rather than kept
_hash_memo = lru_cache(maxsize=512)(passage_hash)


def batch_passage_hash(context: str, text: str) -> str:
    """``passage_hash``, remembered for a while for short passages: a batch's write hashes each
    passage twice (its vector's metadata, its keyword doc)."""
    if len(context) + len(text) > _MEMO_CHARS:
        return passage_hash(context, text)
    return _hash_memo(context, text)


def upsert_docs(conn: sa.Connection, docs: list[tuple[str, str | None, str | None, str, str]]) -> None:
    """(Re)write the keyword rows of (message_id, thread_id, resource_id, text, context) docs; an empty
    text removes the message's row. A row is keyed by its stored message's rowid (``0031``: the thread
    and resource are the message's, read through it), so a message not stored gets none.

    One read (the messages' rowids and which of them have a row) and one insert per batch; a delete
    only when some had rows: the write path's cost is dominated by statement overhead, not by SQLite.
    """
    if not docs:
        return
    rowid_of, present = _rows_of(conn, [d[0] for d in docs])
    _delete_rowids(conn, sorted(present))
    # A message's context is the previous message's text: in a batch of a thread's messages each
    # text is segmented once, for its own row and for the next one's context. An ASCII text without
    # a NUL is its own segmentation (NFKC leaves ASCII as it is; no CJK, no NUL to replace).
    segmented: dict[str, str] = {}

    def seg(text: str) -> str:
        done = segmented.get(text)
        if done is None:
            done = segmented[text] = text if text.isascii() and "\x00" not in text else segment(text)
        return done

    keep = {rowid_of[mid]: (text, ctx) for mid, _tid, _rid, text, ctx in docs if text.strip() and mid in rowid_of}
    bulk.insert_json_rows(
        conn, f"INSERT INTO {FTS_TABLE} (rowid, body, context, content_hash)",
        [(rowid, seg(text), seg(ctx), batch_passage_hash(ctx, text)) for rowid, (text, ctx) in sorted(keep.items())],
    )


_DOC_STATE_SQL = (f"SELECT m.id, f.content_hash, m.thread_id FROM mastra_messages m JOIN {FTS_TABLE} f "
                  "ON f.rowid = m.rowid WHERE m.id IN ({})")


def doc_state(conn: sa.Connection, message_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
    """(passage hash, thread id) of each message's keyword doc on libSQL (``Fts5Keywords.doc_state``; the
    thread is the message's: the doc is its FTS5 row, ``0031``)."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for marks, params in bulk.in_lists(conn, message_ids):
        for mid, digest, thread_id in conn.exec_driver_sql(_DOC_STATE_SQL.format(marks), params):
            out[mid] = (digest, thread_id)
    return out


def delete_docs(conn: sa.Connection, message_ids: list[str]) -> int:
    """Remove these stored messages' keyword rows (libSQL); returns how many went. A deleted message's
    row went with it (the delete trigger of ``0031``)."""
    rowids: list[int] = []
    for marks, params in bulk.in_lists(conn, message_ids):
        rowids.extend(r[0] for r in driver_sql.rows(
            conn, f"SELECT s.id FROM mastra_messages m JOIN {FTS_TABLE}_docsize s ON s.id = m.rowid "
            f"WHERE m.id IN ({marks})", params))
    return _delete_rowids(conn, rowids)


# The batch's messages' rowids and which of them have a keyword row, as one JSON object and one JSON
# list: one index seek per id (json_each first, CROSS JOIN keeps that order) and one row fetched.
_ROWS_OF_SQL = (
    f"SELECT json_group_object(m.id, m.rowid), json_group_array(s.id) FILTER (WHERE s.id IS NOT NULL) "
    f"FROM json_each(?) j CROSS JOIN mastra_messages m ON m.id = j.value LEFT JOIN {FTS_TABLE}_docsize s ON s.id = m.rowid"
)


def _rows_of(conn: sa.Connection, message_ids: list[str]) -> tuple[dict[str, int], set[int]]:
    """(the rowid of each stored message of these, the rowids among them that have a keyword row)."""
    rowid_of: dict[str, int] = {}
    present: set[int] = set()
    for marks, params in bulk.in_lists(conn, message_ids):
        if marks.startswith("SELECT"):  # (one JSON list: ``bulk.in_lists``)
            row = driver_sql.first(conn, _ROWS_OF_SQL, params)
            if row is not None:
                rowid_of.update(json.loads(row[0] or "{}"))
                present.update(json.loads(row[1] or "[]"))
            continue
        for mid, rowid, held in driver_sql.rows(
                conn, f"SELECT m.id, m.rowid, s.id FROM mastra_messages m LEFT JOIN {FTS_TABLE}_docsize s "
                f"ON s.id = m.rowid WHERE m.id IN ({marks})", params):
            rowid_of[mid] = int(rowid)
            if held is not None:
                present.add(int(held))
    return rowid_of, present


def _delete_rowids(conn: sa.Connection, rowids: list[int]) -> int:
    """Delete keyword rows by rowid and bump the rewrite counter once (a batch of new messages has none:
    no statement). FTS5 has no triggers: every delete of its rows here tells the in-process index."""
    for marks, params in bulk.in_lists(conn, rowids):
        driver_sql.execute(conn, f"DELETE FROM {FTS_TABLE} WHERE rowid IN ({marks})", params)
    if rowids:
        driver_sql.execute(conn, _BUMP_REWRITES)
    return len(rowids)


def delete_orphan_rows(conn: sa.Connection) -> int:
    """Keyword rows whose rowid no message holds (a row replaced by another program's ``INSERT OR
    REPLACE``, which fires no delete trigger): removed by ``reindex``; searches never see them (they join
    the messages), though FTS5's row count holds them until then."""
    orphans = [int(r[0]) for r in driver_sql.rows(
        conn, f"SELECT id FROM {FTS_TABLE}_docsize WHERE id NOT IN (SELECT rowid FROM mastra_messages)")]
    return _delete_rowids(conn, orphans)
