"""Named, transactional schema migrations.

Each migration has a stable name and runs inside one transaction together with the row that records
it, so a crash leaves either all of it or none. ``pending()`` only reads. Databases we did not create
(Mastra's) are never migrated implicitly: ``Database`` decides when ``apply`` may run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ContextManager, Sequence

import sqlalchemy as sa

from core.storage import catalog, dialect, schema
from core.storage.errors import SchemaError
from core.storage.pg import ddl as pg_ddl
from core.timeutil import iso_now

MIGRATIONS_TABLE = "memory_studio_migrations"


@dataclass(frozen=True)
class Migration:
    name: str
    description: str
    statements: Sequence[str] = ()
    # For steps that need Python (data rewrites); runs in the same transaction as the statements.
    run: Callable[[sa.Connection], None] | None = None
    # The same step on Postgres (core/storage/pg). None: this migration has no Postgres form yet,
    # and a Postgres database refuses it rather than recording a step it did not take.
    postgres: Sequence[str] | None = None
    postgres_run: Callable[[sa.Connection], None] | None = None


MIGRATIONS: list[Migration] = [
    Migration(
        "0001_mastra_memory_tables",
        "Threads, messages and resources in Mastra's layout",
        schema.MASTRA_MEMORY_DDL,
        postgres=pg_ddl.MASTRA_MEMORY_DDL,
    ),
    Migration(
        "0002_mastra_observational_memory",
        "Mastra's observational-memory table (one row per generation)",
        schema.OBSERVATIONAL_MEMORY_DDL,
        postgres=pg_ddl.OBSERVATIONAL_MEMORY_DDL,
    ),
    Migration(
        "0003_studio_tables",
        "Working-memory versions, template/schema overrides and the agent registry",
        schema.STUDIO_DDL,
        postgres=pg_ddl.STUDIO_DDL,
    ),
    Migration(
        "0006_turn_records",
        "A compact record of every live agent turn, so stored turns rebuild exactly (issue 10)",
        schema.TURNS_DDL,
        postgres=schema.TURNS_DDL,  # plain TEXT columns and a partial index: the same on both
    ),
    Migration(
        "0007_tool_definitions",
        "Tool definitions and the sets a model call offered, stored once by content hash (issue 16)",
        schema.TOOL_DEFS_DDL,
        postgres=schema.TOOL_DEFS_DDL,  # plain TEXT columns: the same on both
    ),
    Migration(
        "0029_gateway_idempotency_keys",
        "The gateway's idempotency keys: a request's key, its lease while it runs, its kept outcome",
        schema.IDEMPOTENCY_DDL,
        postgres=pg_ddl.idempotency_ddl(),
    ),
    Migration(
        "0030_threads_by_resource",
        "Threads found by their resource on libSQL (a turn is stamped after its resource's newest message)",
        schema.THREADS_BY_RESOURCE_DDL,
        postgres=(),  # Postgres has had this index since its first migration (pg_ddl.MASTRA_MEMORY_DDL)
    ),
]


# Modules that contribute migrations. They are imported before any pending/unknown check, so every
# process sees the same list whatever it happened to import (otherwise a process that never loaded
# the recall index would think the file came from a newer version).
PROVIDERS = ("core.recall.schema", "core.recall.ivf_packs", "core.edits.schema")
_providers_loaded = False


def _load_providers() -> None:
    global _providers_loaded
    if _providers_loaded:
        return
    _providers_loaded = True
    import importlib

    for name in PROVIDERS:
        importlib.import_module(name)


def register(migration: Migration) -> None:
    """Add a migration from another module (vector index, full-text search). Names must be unique."""
    if any(m.name == migration.name for m in MIGRATIONS):
        return
    MIGRATIONS.append(migration)
    MIGRATIONS.sort(key=lambda m: m.name)


def _ensure_table(conn: sa.Connection) -> None:
    conn.exec_driver_sql(
        f'CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (name TEXT NOT NULL PRIMARY KEY, "appliedAt" TEXT NOT NULL)'
    )


def applied(conn: sa.Connection) -> list[str]:
    if not catalog.has_table(conn, MIGRATIONS_TABLE):
        return []
    return [r[0] for r in conn.exec_driver_sql(f"SELECT name FROM {MIGRATIONS_TABLE} ORDER BY name")]


def pending(conn: sa.Connection) -> list[str]:
    """Names of migrations not yet applied, in order. Reads only."""
    _load_providers()
    done = set(applied(conn))
    return [m.name for m in MIGRATIONS if m.name not in done]


def unknown(conn: sa.Connection) -> list[str]:
    """Applied migrations this version does not know: the file was written by a newer Memory Studio."""
    _load_providers()
    known = {m.name for m in MIGRATIONS}
    return [name for name in applied(conn) if name not in known]


def apply(
    reader: Callable[[], ContextManager[sa.Connection]],
    transaction: Callable[[], ContextManager[sa.Connection]],
    names: Sequence[str] | None = None,
) -> list[str]:
    """Apply pending migrations (or the given subset), each in its own transaction."""
    done: list[str] = []
    with reader() as conn:
        todo = pending(conn)
    wanted = [n for n in todo if names is None or n in names]
    if wanted:
        with transaction() as conn:
            _ensure_table(conn)
    for migration in (m for m in MIGRATIONS if m.name in wanted):
        with transaction() as conn:
            # Re-check inside the transaction: another process may have applied it meanwhile.
            if conn.exec_driver_sql(
                f"SELECT 1 FROM {MIGRATIONS_TABLE} WHERE name = ?", (migration.name,)
            ).first():
                continue
            statements, run = migration.statements, migration.run
            if dialect.is_postgres(conn):
                if migration.postgres is None:
                    raise SchemaError(
                        f"Migration {migration.name} has no Postgres form in this version; "
                        "this database cannot be brought up to date on Postgres."
                    )
                statements, run = migration.postgres, migration.postgres_run
            for statement in statements:
                conn.exec_driver_sql(statement)
            if run is not None:
                run(conn)
            conn.exec_driver_sql(
                f'INSERT INTO {MIGRATIONS_TABLE} (name, "appliedAt") VALUES (?, ?)', (migration.name, iso_now())
            )
        done.append(migration.name)
    return done
