"""Mastra's PgStore layout for the memory tables, and our own tables, as Postgres DDL.

Mastra (``@mastra/pg``) maps its logical column types to ``TEXT``, ``INTEGER``, ``BOOLEAN``,
``JSONB`` and ``TIMESTAMP``; every ``timestamp`` column ``x`` gets a ``"xZ" TIMESTAMPTZ DEFAULT NOW()``
mirror, which Mastra writes with the same instant and prefers when reading. The engine writes the
plain column (UTC wall time, as Mastra does); one trigger per table keeps the mirror equal to it when
a statement left the mirror at its default, so a Mastra agent reading our rows sees the right time.

The statements are registered against the same named migrations as on libSQL (``0001``–``0003``).
"""

from __future__ import annotations

_TIMESTAMP_MIRROR = '"{c}Z" TIMESTAMPTZ DEFAULT NOW()'


def _z(*columns: str) -> str:
    return ", ".join(_TIMESTAMP_MIRROR.format(c=c) for c in columns)


def _sync_trigger(table: str, columns: tuple[str, ...]) -> list[str]:
    """Fill ``"<col>Z"`` from ``"<col>"`` when the statement did not set the mirror itself."""
    body = []
    for c in columns:
        body.append(
            f'IF NEW."{c}" IS NOT NULL AND (TG_OP = \'INSERT\' AND NEW."{c}Z" IS NOT DISTINCT FROM now() '
            f'OR TG_OP = \'UPDATE\' AND NEW."{c}Z" IS NOT DISTINCT FROM OLD."{c}Z" '
            f'AND NEW."{c}" IS DISTINCT FROM OLD."{c}") '
            f'THEN NEW."{c}Z" := NEW."{c}" AT TIME ZONE \'UTC\'; END IF;'
        )
    fn = f"memory_studio_{table}_z"
    return [
        f"CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        + " ".join(body) + " RETURN NEW; END $$",
        f"DROP TRIGGER IF EXISTS {fn} ON {table}",
        f"CREATE TRIGGER {fn} BEFORE INSERT OR UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION {fn}()",
    ]


MASTRA_MEMORY_DDL = [
    'CREATE TABLE IF NOT EXISTS mastra_threads ("id" TEXT PRIMARY KEY NOT NULL, "resourceId" TEXT NOT NULL, '
    '"title" TEXT NOT NULL, "metadata" JSONB, "createdAt" TIMESTAMP NOT NULL, "updatedAt" TIMESTAMP NOT NULL, '
    + _z("createdAt", "updatedAt") + ")",
    'CREATE TABLE IF NOT EXISTS mastra_messages ("id" TEXT PRIMARY KEY NOT NULL, "thread_id" TEXT NOT NULL, '
    '"content" TEXT NOT NULL, "role" TEXT NOT NULL, "type" TEXT NOT NULL, "createdAt" TIMESTAMP NOT NULL, '
    '"resourceId" TEXT, ' + _z("createdAt") + ")",
    'CREATE TABLE IF NOT EXISTS mastra_resources ("id" TEXT PRIMARY KEY NOT NULL, "workingMemory" TEXT, '
    '"metadata" JSONB, "createdAt" TIMESTAMP NOT NULL, "updatedAt" TIMESTAMP NOT NULL, '
    + _z("createdAt", "updatedAt") + ")",
    # Mastra's default indexes (MemoryPG.getDefaultIndexDefs), under Mastra's names.
    'CREATE INDEX IF NOT EXISTS mastra_threads_resourceid_createdat_idx ON mastra_threads ("resourceId", "createdAt" DESC)',
    'CREATE INDEX IF NOT EXISTS mastra_messages_thread_id_createdat_idx ON mastra_messages (thread_id, "createdAt" DESC)',
    *_sync_trigger("mastra_threads", ("createdAt", "updatedAt")),
    *_sync_trigger("mastra_messages", ("createdAt",)),
    *_sync_trigger("mastra_resources", ("createdAt", "updatedAt")),
]

_OM_TIMES = ("lastObservedAt", "lastReflectionAt", "lastBufferedAtTime", "createdAt", "updatedAt")

OBSERVATIONAL_MEMORY_DDL = [
    'CREATE TABLE IF NOT EXISTS mastra_observational_memory ("id" TEXT PRIMARY KEY NOT NULL, '
    '"lookupKey" TEXT NOT NULL, "scope" TEXT NOT NULL, "resourceId" TEXT, "threadId" TEXT, '
    '"activeObservations" TEXT NOT NULL, "activeObservationsPendingUpdate" TEXT, "originType" TEXT NOT NULL, '
    '"config" TEXT NOT NULL, "generationCount" INTEGER NOT NULL, "lastObservedAt" TIMESTAMP, '
    '"lastReflectionAt" TIMESTAMP, "pendingMessageTokens" INTEGER NOT NULL, "totalTokensObserved" INTEGER NOT NULL, '
    '"observationTokenCount" INTEGER NOT NULL, "isObserving" BOOLEAN NOT NULL, "isReflecting" BOOLEAN NOT NULL, '
    '"observedMessageIds" JSONB, "observedTimezone" TEXT, "bufferedObservations" TEXT, '
    '"bufferedObservationTokens" INTEGER, "bufferedMessageIds" JSONB, "bufferedReflection" TEXT, '
    '"bufferedReflectionTokens" INTEGER, "bufferedReflectionInputTokens" INTEGER, '
    '"reflectedObservationLineCount" INTEGER, "bufferedObservationChunks" JSONB, '
    '"isBufferingObservation" BOOLEAN NOT NULL, "isBufferingReflection" BOOLEAN NOT NULL, '
    '"lastBufferedAtTokens" INTEGER NOT NULL, "lastBufferedAtTime" TIMESTAMP, "metadata" JSONB, '
    '"createdAt" TIMESTAMP NOT NULL, "updatedAt" TIMESTAMP NOT NULL, ' + _z(*_OM_TIMES) + ")",
    'CREATE INDEX IF NOT EXISTS idx_om_lookup_key ON mastra_observational_memory ("lookupKey")',
    *_sync_trigger("mastra_observational_memory", _OM_TIMES),
]

STUDIO_DDL = [
    "CREATE TABLE IF NOT EXISTS memory_studio_wm_versions (id BIGSERIAL PRIMARY KEY, "
    'scope TEXT NOT NULL, owner_id TEXT NOT NULL, working_memory TEXT, format TEXT NOT NULL, '
    'author TEXT NOT NULL, note TEXT, "createdAt" TEXT NOT NULL)',
    "CREATE INDEX IF NOT EXISTS idx_wm_versions_owner ON memory_studio_wm_versions (scope, owner_id, id)",
    "CREATE TABLE IF NOT EXISTS memory_studio_configs (id BIGSERIAL PRIMARY KEY, "
    'name TEXT NOT NULL, template TEXT, schema TEXT, author TEXT NOT NULL, "createdAt" TEXT NOT NULL)',
    "CREATE INDEX IF NOT EXISTS idx_configs_name ON memory_studio_configs (name, id)",
    'CREATE TABLE IF NOT EXISTS memory_studio_agents (name TEXT NOT NULL PRIMARY KEY, config TEXT NOT NULL, '
    'process TEXT, "updatedAt" TEXT NOT NULL)',
]


def idempotency_ddl() -> list[str]:
    """The gateway's idempotency keys (``core.storage.schema.idempotency_ddl``), millisecond times as BIGINT."""
    from core.storage.schema import idempotency_ddl as ddl

    return ddl("BIGINT")
