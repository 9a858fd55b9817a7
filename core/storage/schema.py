"""Table definitions in Mastra's layout (spec §1.2), plus the few tables only Memory Studio uses.

The DDL strings are kept verbatim in Mastra's shape (names, camelCase quoting, types) so a database
written by either side opens in the other. The SQLAlchemy ``Table`` objects are used for queries only;
the DDL itself always goes through named migrations (see ``migrations.py``).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from core.storage.dialect import Flag, stored_text

metadata = sa.MetaData()


class SafeText(sa.types.TypeDecorator[Any]):
    """Free text that may hold invalid UTF-8: selected as a blob and decoded in Python.

    libSQL panics on such a value and loses the whole result set (see ``core.stored_text``). Only
    the SELECT list changes; comparisons and writes are plain TEXT.
    """

    impl = sa.Text
    cache_ok = True

    def column_expression(self, colexpr: Any) -> Any:
        return stored_text(colexpr)


threads = sa.Table(
    "mastra_threads",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("resourceId", sa.Text, nullable=False),
    sa.Column("title", SafeText, nullable=False),
    sa.Column("metadata", SafeText),
    sa.Column("createdAt", sa.Text, nullable=False),
    sa.Column("updatedAt", sa.Text, nullable=False),
)

messages = sa.Table(
    "mastra_messages",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("thread_id", sa.Text, nullable=False),
    sa.Column("content", SafeText, nullable=False),
    sa.Column("role", sa.Text, nullable=False),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("createdAt", sa.Text, nullable=False),
    sa.Column("resourceId", sa.Text),
)

resources = sa.Table(
    "mastra_resources",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("workingMemory", SafeText),
    sa.Column("metadata", SafeText),
    sa.Column("createdAt", sa.Text, nullable=False),
    sa.Column("updatedAt", sa.Text, nullable=False),
)

observational_memory = sa.Table(
    "mastra_observational_memory",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("lookupKey", sa.Text, nullable=False),
    sa.Column("scope", sa.Text, nullable=False),
    sa.Column("resourceId", sa.Text),
    sa.Column("threadId", sa.Text),
    sa.Column("activeObservations", SafeText, nullable=False),
    sa.Column("activeObservationsPendingUpdate", sa.Text),
    sa.Column("originType", sa.Text, nullable=False),
    sa.Column("config", sa.Text, nullable=False),
    sa.Column("generationCount", sa.Integer, nullable=False),
    sa.Column("lastObservedAt", sa.Text),
    sa.Column("lastReflectionAt", sa.Text),
    sa.Column("pendingMessageTokens", sa.Integer, nullable=False),
    sa.Column("totalTokensObserved", sa.Integer, nullable=False),
    sa.Column("observationTokenCount", sa.Integer, nullable=False),
    sa.Column("isObserving", Flag, nullable=False),
    sa.Column("isReflecting", Flag, nullable=False),
    sa.Column("observedMessageIds", sa.Text),
    sa.Column("observedTimezone", sa.Text),
    sa.Column("bufferedObservations", sa.Text),
    sa.Column("bufferedObservationTokens", sa.Integer),
    sa.Column("bufferedMessageIds", sa.Text),
    sa.Column("bufferedReflection", sa.Text),
    sa.Column("bufferedReflectionTokens", sa.Integer),
    sa.Column("bufferedReflectionInputTokens", sa.Integer),
    sa.Column("reflectedObservationLineCount", sa.Integer),
    sa.Column("bufferedObservationChunks", sa.Text),
    sa.Column("isBufferingObservation", Flag, nullable=False),
    sa.Column("isBufferingReflection", Flag, nullable=False),
    sa.Column("lastBufferedAtTokens", sa.Integer, nullable=False),
    sa.Column("lastBufferedAtTime", sa.Text),
    sa.Column("metadata", sa.Text),
    sa.Column("createdAt", sa.Text, nullable=False),
    sa.Column("updatedAt", sa.Text, nullable=False),
)

# Memory Studio's own tables. Mastra ignores tables it does not know, so they can share the file.
wm_versions = sa.Table(
    "memory_studio_wm_versions",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("scope", sa.Text, nullable=False),  # "resource" | "thread"
    sa.Column("owner_id", sa.Text, nullable=False),  # resource id or thread id
    sa.Column("working_memory", SafeText),
    sa.Column("format", sa.Text, nullable=False),  # "markdown" | "json"
    sa.Column("author", sa.Text, nullable=False),  # "agent" | "studio" | "api" | "restore"
    sa.Column("note", sa.Text),
    sa.Column("createdAt", sa.Text, nullable=False),
)

memory_configs = sa.Table(
    "memory_studio_configs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.Text, nullable=False),  # the memory (agent) name the override applies to
    sa.Column("template", sa.Text),
    sa.Column("schema", sa.Text),
    sa.Column("author", sa.Text, nullable=False),
    sa.Column("createdAt", sa.Text, nullable=False),
)

agent_registry = sa.Table(
    "memory_studio_agents",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("config", sa.Text, nullable=False),  # resolved memory configuration, JSON
    sa.Column("process", sa.Text),
    sa.Column("updatedAt", sa.Text, nullable=False),
)

# One row per live agent turn (issue 10): what the model was sent, compactly, so the turn can be
# rebuilt exactly. ``record`` is compact JSON (``core.replay.record``); ``texts`` holds the long texts
# (instructions, working memory without a version, observation hints) this row introduced for its
# thread, keyed by hash, so later rows of the thread name them by hash instead of repeating them.
turns = sa.Table(
    "memory_studio_turns",
    metadata,
    sa.Column("input_message_id", sa.Text, primary_key=True),
    sa.Column("thread_id", sa.Text, nullable=False),
    sa.Column("resource_id", sa.Text),
    sa.Column("wm_version_id", sa.Integer),
    sa.Column("record", sa.Text, nullable=False),
    sa.Column("texts", sa.Text),
    sa.Column("createdAt", sa.Text, nullable=False),
)

MASTRA_MEMORY_DDL = [
    'CREATE TABLE IF NOT EXISTS mastra_threads ("id" TEXT NOT NULL PRIMARY KEY, "resourceId" TEXT NOT NULL, '
    '"title" TEXT NOT NULL, "metadata" TEXT, "createdAt" TEXT NOT NULL, "updatedAt" TEXT NOT NULL)',
    'CREATE TABLE IF NOT EXISTS mastra_messages ("id" TEXT NOT NULL PRIMARY KEY, "thread_id" TEXT NOT NULL, '
    '"content" TEXT NOT NULL, "role" TEXT NOT NULL, "type" TEXT NOT NULL, "createdAt" TEXT NOT NULL, '
    '"resourceId" TEXT)',
    'CREATE TABLE IF NOT EXISTS mastra_resources ("id" TEXT NOT NULL PRIMARY KEY, "workingMemory" TEXT, '
    '"metadata" TEXT, "createdAt" TEXT NOT NULL, "updatedAt" TEXT NOT NULL)',
    'CREATE INDEX IF NOT EXISTS idx_messages_thread_created_at ON mastra_messages (thread_id, "createdAt")',
    "CREATE INDEX IF NOT EXISTS idx_messages_thread_resource_created_at "
    'ON mastra_messages (thread_id, "resourceId", "createdAt")',
]

# The index Postgres's tables have had from the start (Mastra's name): the threads of a resource, read
# by every turn's stamp (``MemoryStore.newest_in_resource``), resource-scoped observational memory
# and thread lists, without a scan of every thread.
THREADS_BY_RESOURCE_DDL = [
    'CREATE INDEX IF NOT EXISTS mastra_threads_resourceid_createdat_idx ON mastra_threads ("resourceId", "createdAt" DESC)',
]

OBSERVATIONAL_MEMORY_DDL = [
    'CREATE TABLE IF NOT EXISTS mastra_observational_memory ("id" TEXT NOT NULL PRIMARY KEY, '
    '"lookupKey" TEXT NOT NULL, "scope" TEXT NOT NULL, "resourceId" TEXT, "threadId" TEXT, '
    '"activeObservations" TEXT NOT NULL, "activeObservationsPendingUpdate" TEXT, "originType" TEXT NOT NULL, '
    '"config" TEXT NOT NULL, "generationCount" INTEGER NOT NULL, "lastObservedAt" TEXT, '
    '"lastReflectionAt" TEXT, "pendingMessageTokens" INTEGER NOT NULL, "totalTokensObserved" INTEGER NOT NULL, '
    '"observationTokenCount" INTEGER NOT NULL, "isObserving" INTEGER NOT NULL, "isReflecting" INTEGER NOT NULL, '
    '"observedMessageIds" TEXT, "observedTimezone" TEXT, "bufferedObservations" TEXT, '
    '"bufferedObservationTokens" INTEGER, "bufferedMessageIds" TEXT, "bufferedReflection" TEXT, '
    '"bufferedReflectionTokens" INTEGER, "bufferedReflectionInputTokens" INTEGER, '
    '"reflectedObservationLineCount" INTEGER, "bufferedObservationChunks" TEXT, '
    '"isBufferingObservation" INTEGER NOT NULL, "isBufferingReflection" INTEGER NOT NULL, '
    '"lastBufferedAtTokens" INTEGER NOT NULL, "lastBufferedAtTime" TEXT, "metadata" TEXT, '
    '"createdAt" TEXT NOT NULL, "updatedAt" TEXT NOT NULL)',
    'CREATE INDEX IF NOT EXISTS idx_om_lookup_key ON "mastra_observational_memory" ("lookupKey")',
]

STUDIO_DDL = [
    "CREATE TABLE IF NOT EXISTS memory_studio_wm_versions (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    'scope TEXT NOT NULL, owner_id TEXT NOT NULL, working_memory TEXT, format TEXT NOT NULL, '
    'author TEXT NOT NULL, note TEXT, "createdAt" TEXT NOT NULL)',
    "CREATE INDEX IF NOT EXISTS idx_wm_versions_owner ON memory_studio_wm_versions (scope, owner_id, id)",
    "CREATE TABLE IF NOT EXISTS memory_studio_configs (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    'name TEXT NOT NULL, template TEXT, schema TEXT, author TEXT NOT NULL, "createdAt" TEXT NOT NULL)',
    "CREATE INDEX IF NOT EXISTS idx_configs_name ON memory_studio_configs (name, id)",
    'CREATE TABLE IF NOT EXISTS memory_studio_agents (name TEXT NOT NULL PRIMARY KEY, config TEXT NOT NULL, '
    'process TEXT, "updatedAt" TEXT NOT NULL)',
]

TURNS_DDL = [
    "CREATE TABLE IF NOT EXISTS memory_studio_turns (input_message_id TEXT NOT NULL PRIMARY KEY, "
    'thread_id TEXT NOT NULL, resource_id TEXT, wm_version_id INTEGER, record TEXT NOT NULL, texts TEXT, '
    '"createdAt" TEXT NOT NULL)',
    'CREATE INDEX IF NOT EXISTS idx_turns_thread_created ON memory_studio_turns (thread_id, "createdAt")',
    # The few rows that introduced texts, found without reading the thread's other records.
    "CREATE INDEX IF NOT EXISTS idx_turns_thread_texts ON memory_studio_turns (thread_id) WHERE texts IS NOT NULL",
]

# Tool definitions offered to models, once each by content hash, and the list one call offered by the
# hash of its members (core/replay/tools.py). Rows are only ever added; a key is its content.
TOOL_DEFS_TABLE = "memory_studio_tool_defs"
TOOL_SETS_TABLE = "memory_studio_tool_sets"
TOOL_DEFS_DDL = [
    f'CREATE TABLE IF NOT EXISTS {TOOL_DEFS_TABLE} (hash TEXT NOT NULL PRIMARY KEY, definition TEXT NOT NULL, '
    '"createdAt" TEXT NOT NULL)',
    f'CREATE TABLE IF NOT EXISTS {TOOL_SETS_TABLE} (hash TEXT NOT NULL PRIMARY KEY, members TEXT NOT NULL, '
    '"createdAt" TEXT NOT NULL)',
]

# Idempotency keys of the gateway (``core.gateway.idempotency``): one row per (caller scope, key) while the
# first request runs (``state`` 'running', leased to ``holder`` until ``locked_until``, ms since the epoch)
# and then its kept outcome (``state`` 'done', ``outcome`` JSON) until ``expires_at``. Not exported.
IDEMPOTENCY_TABLE = "memory_studio_idempotency"


def idempotency_ddl(big_integer: str = "INTEGER") -> list[str]:
    """The table and its indexes; ``big_integer``: the column type of millisecond times (Postgres: BIGINT)."""
    return [
        f"CREATE TABLE IF NOT EXISTS {IDEMPOTENCY_TABLE} (scope TEXT NOT NULL, idem_key TEXT NOT NULL, "
        "request_hash TEXT NOT NULL, resource_id TEXT, thread_id TEXT, state TEXT NOT NULL, holder TEXT, "
        f"locked_until {big_integer} NOT NULL, outcome TEXT, \"createdAt\" TEXT NOT NULL, "
        f"expires_at {big_integer} NOT NULL, PRIMARY KEY (scope, idem_key))",
        f"CREATE INDEX IF NOT EXISTS idx_idempotency_expires ON {IDEMPOTENCY_TABLE} (expires_at)",
        f"CREATE INDEX IF NOT EXISTS idx_idempotency_thread ON {IDEMPOTENCY_TABLE} (thread_id)",
        f"CREATE INDEX IF NOT EXISTS idx_idempotency_resource ON {IDEMPOTENCY_TABLE} (resource_id)",
    ]


IDEMPOTENCY_DDL = idempotency_ddl()
