"""What each agent runs with, and the Studio's working-memory template/schema overrides (no Qt).

Two Studio-owned tables (``core/storage/schema.py``):

* ``memory_studio_agents`` — every agent process registers the resolved memory configuration it runs
  with (``Memory.register``). Read-only here.
* ``memory_studio_configs`` — insert-only history of template/schema overrides per memory name. The
  newest row wins and the engine reads it every turn (``Memory.effective_options``), so a running agent
  picks an edit up on its next turn. Restoring an old version inserts it again as the newest row; a row
  with neither template nor schema means "back to what the agent's code declares".

All functions here do I/O and must run in a worker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

import sqlalchemy as sa

from core import MemoryOptions, Store
from core.storage.memory_store import Thread
from core.storage import schema as t
from core.timeutil import iso_now, parse_iso
from core.working_memory_schema import WorkingMemoryError, check_schema

DEFAULT_MEMORY_NAME = "default"


@dataclass(frozen=True)
class AgentConfig:
    """One row of ``memory_studio_agents``: the resolved configuration an agent registered."""

    name: str  # agent name
    config: dict[str, Any]  # ``Memory.describe()`` as the agent saw it
    process: str | None
    updated_at: datetime | None

    @property
    def memory_name(self) -> str:
        return str(self.config.get("name") or self.name)

    @property
    def options(self) -> dict[str, Any]:
        opts = self.config.get("options")
        return dict(opts) if isinstance(opts, Mapping) else {}

    def memory_options(self) -> MemoryOptions:
        """The agent's options as a ``MemoryOptions`` (unknown keys from a newer engine are dropped)."""
        known = {f for f in MemoryOptions.__dataclass_fields__}
        return MemoryOptions(**{k: v for k, v in self.options.items() if k in known})


@dataclass(frozen=True)
class ConfigVersion:
    id: int
    name: str
    template: str | None
    schema: dict[str, Any] | None
    author: str
    created_at: datetime | None

    @property
    def kind(self) -> str:
        if self.schema is not None:
            return "schema"
        if self.template is not None:
            return "template"
        return "code default"

    @property
    def text(self) -> str:
        """What the editor shows for this version."""
        if self.schema is not None:
            return json.dumps(self.schema, ensure_ascii=False, indent=2)
        return self.template or ""


@dataclass
class ConfigState:
    """Everything the template/schema editor needs for one memory name, read in one go."""

    name: str
    versions: list[ConfigVersion] = field(default_factory=list)  # newest first
    available: bool = True  # False: a foreign database without the Studio's tables

    @property
    def current(self) -> ConfigVersion | None:
        return self.versions[0] if self.versions else None


# -- reading -------------------------------------------------------------------------------------
def _has_table(store: Store, name: str) -> bool:
    try:
        return store.db.has_table(name)
    except Exception:  # noqa: BLE001 - an unreadable schema simply has no Studio tables
        return False


def list_agents(store: Store) -> list[AgentConfig]:
    if not _has_table(store, "memory_studio_agents"):
        return []
    with store.db.read() as conn:
        rows = conn.execute(sa.select(t.agent_registry).order_by(t.agent_registry.c.name)).all()
    out = []
    for r in rows:
        try:
            config = json.loads(r.config)
        except (TypeError, json.JSONDecodeError):
            config = {}
        out.append(AgentConfig(r.name, config if isinstance(config, dict) else {}, r.process,
                               parse_iso(r.updatedAt) if r.updatedAt else None))
    return out


def config_state(store: Store, name: str) -> ConfigState:
    if not _has_table(store, "memory_studio_configs"):
        return ConfigState(name, [], available=False)
    with store.db.read() as conn:
        rows = conn.execute(
            sa.select(t.memory_configs).where(t.memory_configs.c.name == name).order_by(t.memory_configs.c.id.desc())
        ).all()
    return ConfigState(name, [_version(r) for r in rows])


def _version(r: Any) -> ConfigVersion:
    schema = None
    if r.schema:
        try:
            schema = json.loads(r.schema)
        except json.JSONDecodeError:
            schema = None
    return ConfigVersion(r.id, r.name, r.template, schema, r.author, parse_iso(r.createdAt) if r.createdAt else None)


def agent_for_thread(
    agents: list[AgentConfig], thread: Thread | None, last_agent: str | None = None
) -> tuple[AgentConfig | None, str]:
    """Which registered agent a thread belongs to, and how that was decided (shown to the user).

    First the agent that last answered in the thread (the engine records it on every assistant
    message; ``core.registry.agent_for_thread``), then an agent name in the thread's metadata
    (``agent``, ``agentName``, ``agentId``), then an agent named like the resource (Mastra's
    playground uses ``resourceId = agentId``), then the only agent registered.
    """
    by_name = {a.name: a for a in agents}
    if last_agent and last_agent in by_name:
        return by_name[last_agent], f"agent '{last_agent}' answered last in this thread"
    meta = (thread.metadata or {}) if thread is not None else {}
    for key in ("agent", "agentName", "agentId"):
        value = meta.get(key) if isinstance(meta, Mapping) else None
        if isinstance(value, str) and value in by_name:
            return by_name[value], f"thread metadata names agent '{value}'"
    if thread is not None and thread.resource_id in by_name:
        return by_name[thread.resource_id], f"agent named like resource '{thread.resource_id}'"
    if len(agents) == 1:
        return agents[0], f"the only registered agent, '{agents[0].name}'"
    if not agents:
        return None, "no agent has registered with this database"
    return None, f"{len(agents)} agents registered; none is linked to this thread"


# -- validating ----------------------------------------------------------------------------------
def validate_template(text: str) -> list[str]:
    """A template must be non-empty Markdown; the model is told to fill it in, so empty helps nobody."""
    if not text.strip():
        return ["The template is empty. Write the Markdown outline the agent should fill in."]
    if text.lstrip().startswith("{"):
        return ["This looks like JSON. A template is Markdown; to store JSON, switch to a schema."]
    return []


def parse_schema(text: str) -> tuple[dict[str, Any] | None, list[str]]:
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, [f"line {exc.lineno}, column {exc.colno}: {exc.msg}"]
    try:
        check_schema(schema)
    except WorkingMemoryError as exc:
        return None, [str(exc)]
    return schema, []


# -- writing (explicit editor actions only) ------------------------------------------------------
def save_override(
    store: Store, name: str, *, template: str | None = None, schema: Mapping[str, Any] | None = None,
    author: str = "studio",
) -> ConfigVersion:
    """Insert a new newest override for ``name`` after validating it. Nothing is ever updated in place."""
    if template is not None and schema is not None:
        raise WorkingMemoryError("An override holds a template or a schema, not both.")
    if template is not None:
        problems = validate_template(template)
        if problems:
            raise WorkingMemoryError(problems[0])
    if schema is not None:
        check_schema(schema)
    now = iso_now()
    with store.db.write() as conn:
        key = conn.execute(
            t.memory_configs.insert().values(
                name=name, template=template,
                schema=json.dumps(dict(schema), ensure_ascii=False) if schema is not None else None,
                author=author, createdAt=now,
            )
        ).inserted_primary_key
        new_id = key[0] if key is not None else 0
    return ConfigVersion(int(new_id), name, template, dict(schema) if schema is not None else None, author,
                         parse_iso(now))
