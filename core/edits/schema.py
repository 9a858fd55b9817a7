"""The tables that keep every explicit change of stored memory: who, when, before and after.

Two named migrations, registered on import (``core.storage.migrations.PROVIDERS``):

- ``0019_message_versions``: one row per edit, delete or undo of a stored message. ``before_row`` and
  ``after_row`` hold the whole ``mastra_messages`` row as JSON (content exactly as stored, role, type,
  ``createdAt``, thread and resource), so a deleted message can be restored and a turn that ran before
  the change can be rebuilt with what its model saw.
- ``0020_observation_versions``: one row per edit, delete or undo of an observation line. ``before_text``
  and ``after_text`` hold the generation's whole ``activeObservations`` log; ``line_before`` /
  ``line_after`` the line that changed, for people.

Nothing else writes these tables (``core.edits.messages``, ``core.edits.observations``); forgetting a
resource (``core.edits.forget``) deletes its rows.
"""

from __future__ import annotations

import sqlalchemy as sa

from core.storage import migrations

MESSAGE_VERSIONS = "memory_studio_message_versions"
OBSERVATION_VERSIONS = "memory_studio_om_versions"
MESSAGE_MIGRATION = "0019_message_versions"
OBSERVATION_MIGRATION = "0020_observation_versions"

_meta = sa.MetaData()

message_versions = sa.Table(
    MESSAGE_VERSIONS,
    _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("message_id", sa.Text, nullable=False),
    sa.Column("thread_id", sa.Text, nullable=False),
    sa.Column("resource_id", sa.Text),
    sa.Column("op", sa.Text, nullable=False),  # "edit" | "delete" | "undo"
    sa.Column("author", sa.Text, nullable=False),
    sa.Column("before_row", sa.Text),  # JSON of the stored row; NULL: the message did not exist (undo of a delete)
    sa.Column("after_row", sa.Text),  # NULL: the message was deleted
    sa.Column("note", sa.Text),
    sa.Column("createdAt", sa.Text, nullable=False),
)

observation_versions = sa.Table(
    OBSERVATION_VERSIONS,
    _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("record_id", sa.Text, nullable=False),  # mastra_observational_memory.id (one generation)
    sa.Column("lookup_key", sa.Text, nullable=False),
    sa.Column("thread_id", sa.Text),
    sa.Column("resource_id", sa.Text),
    sa.Column("op", sa.Text, nullable=False),  # "edit" | "delete" | "undo"
    sa.Column("author", sa.Text, nullable=False),
    sa.Column("line_before", sa.Text),
    sa.Column("line_after", sa.Text),
    sa.Column("before_text", sa.Text, nullable=False),
    sa.Column("after_text", sa.Text, nullable=False),
    sa.Column("note", sa.Text),
    sa.Column("createdAt", sa.Text, nullable=False),
)


def _message_ddl(key: str) -> list[str]:
    return [
        f"CREATE TABLE IF NOT EXISTS {MESSAGE_VERSIONS} (id {key}, message_id TEXT NOT NULL, "
        "thread_id TEXT NOT NULL, resource_id TEXT, op TEXT NOT NULL, author TEXT NOT NULL, before_row TEXT, "
        'after_row TEXT, note TEXT, "createdAt" TEXT NOT NULL)',
        f"CREATE INDEX IF NOT EXISTS idx_message_versions_message ON {MESSAGE_VERSIONS} (message_id, id)",
        f"CREATE INDEX IF NOT EXISTS idx_message_versions_thread ON {MESSAGE_VERSIONS} (thread_id)",
        f"CREATE INDEX IF NOT EXISTS idx_message_versions_resource ON {MESSAGE_VERSIONS} (resource_id)",
    ]


def _observation_ddl(key: str) -> list[str]:
    return [
        f"CREATE TABLE IF NOT EXISTS {OBSERVATION_VERSIONS} (id {key}, record_id TEXT NOT NULL, "
        "lookup_key TEXT NOT NULL, thread_id TEXT, resource_id TEXT, op TEXT NOT NULL, author TEXT NOT NULL, "
        'line_before TEXT, line_after TEXT, before_text TEXT NOT NULL, after_text TEXT NOT NULL, note TEXT, '
        '"createdAt" TEXT NOT NULL)',
        f"CREATE INDEX IF NOT EXISTS idx_om_versions_record ON {OBSERVATION_VERSIONS} (record_id, id)",
        f"CREATE INDEX IF NOT EXISTS idx_om_versions_lookup ON {OBSERVATION_VERSIONS} (lookup_key)",
        f"CREATE INDEX IF NOT EXISTS idx_om_versions_resource ON {OBSERVATION_VERSIONS} (resource_id)",
    ]


_SQLITE_KEY = "INTEGER PRIMARY KEY AUTOINCREMENT"
_PG_KEY = "BIGSERIAL PRIMARY KEY"

migrations.register(migrations.Migration(
    MESSAGE_MIGRATION, "Versions of stored messages: every edit, delete and undo, with the row before and after",
    _message_ddl(_SQLITE_KEY), postgres=_message_ddl(_PG_KEY),
))
migrations.register(migrations.Migration(
    OBSERVATION_MIGRATION, "Versions of observation logs: every edit, delete and undo of an observation line",
    _observation_ddl(_SQLITE_KEY), postgres=_observation_ddl(_PG_KEY),
))

__all__ = [
    "MESSAGE_MIGRATION", "MESSAGE_VERSIONS", "OBSERVATION_MIGRATION", "OBSERVATION_VERSIONS",
    "message_versions", "observation_versions",
]
