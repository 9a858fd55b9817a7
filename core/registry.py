"""Which agent runs with which memory configuration.

Agents register their resolved memory configuration (``Memory.register``) in
``memory_studio_agents``; each assistant message records the agent that wrote it
(``content.metadata.agent``). Together they answer "what configuration does this thread run with?",
which the CLI and the Studio use to preview a prompt exactly as that agent would build it.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from core.options import MemoryOptions
from core.storage import Store
from core.storage import dialect
from core.storage import schema as t


def registered_agents(store: Store) -> dict[str, dict[str, Any]]:
    if not store.db.has_table("memory_studio_agents"):
        return {}
    with store.db.read() as conn:
        rows = conn.execute(
            sa.select(t.agent_registry.c.name, t.agent_registry.c.config, t.agent_registry.c.updatedAt)
            .order_by(t.agent_registry.c.updatedAt.desc())
        ).all()
    out: dict[str, dict[str, Any]] = {}
    for name, config, updated in rows:
        try:
            data = json.loads(config)
        except json.JSONDecodeError:
            continue
        data["updatedAt"] = updated
        out[name] = data
    return out


def agent_for_thread(store: Store, thread_id: str) -> str | None:
    """The agent that last answered in this thread, if it said who it was."""
    with store.db.read() as conn:
        row = conn.execute(
            sa.select(dialect.json_path(t.messages.c.content, "metadata", "agent"))
            .where(t.messages.c.thread_id == thread_id, t.messages.c.role == "assistant")
            .order_by(t.messages.c.createdAt.desc()).limit(1)
        ).first()
    return str(row[0]) if row and row[0] else None


def options_for_thread(store: Store, thread_id: str, agent: str | None = None) -> tuple[dict[str, Any], str | None]:
    """(memory options as a dict, agent name) for previews; ({}, None) when nothing is known."""
    agents = registered_agents(store)
    name = agent or agent_for_thread(store, thread_id)
    if agent and agent not in agents:
        raise LookupError(f"No agent named {agent!r} has registered with this database.")
    data = agents.get(name) if name else None
    if data is None:
        return {}, None
    opts = data.get("options") or {}
    known = MemoryOptions.__dataclass_fields__
    return {k: v for k, v in opts.items() if k in known}, name
