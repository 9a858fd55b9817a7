"""Which memory configuration an agent runs with, and which one applies to a thread.

Memory Studio keeps two tables of its own for this (``core/storage/schema.py``); this module is the
only code that reads or writes them:

* ``memory_studio_agents``: every agent process registers the resolved memory configuration it runs
  with (``Memory.register`` calls ``register_agent``), one row per agent name; an ``Agent`` adds its
  instructions, model settings (``modelSettings``) and own tools' names (``tools``), keys a row of an
  older engine lacks (``AgentConfig.model_settings`` / ``tool_names`` are None then).
* ``memory_studio_configs``: an insert-only history of working-memory template/schema overrides per
  memory name, written from the Studio. The newest row wins and the engine reads it on every turn
  (``Memory.effective_options`` calls ``effective_options``), so a running agent picks an edit up on
  its next turn. Restoring an old version inserts it again; a row with neither template nor schema
  means "back to what the agent's code declares".

(The third, ``memory_studio_wm_versions``, belongs to the working-memory service, its only reader and
writer: ``core/working_memory.py``.)

Each assistant message records the agent that wrote it (``content.metadata.agent``). With the
registered configurations this answers "which configuration does this thread run with?"
(``agent_for_thread``); the CLI's ``memory-studio prompt`` and the Studio's prompt inspector both
ask it, so both preview a turn exactly as that agent would assemble it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, NamedTuple, Sequence, Union

import sqlalchemy as sa

from core.options import (MemoryOptions, ObservationalMemoryOptions, OptionsError, SemanticRecallOptions, TitleOptions,
                          WorkingMemoryOptions)
from core.storage import Store, dialect, driver_sql
from core.storage import schema as t
from core.storage.memory_store import Thread
from core.timeutil import iso_now, parse_iso
from core.working_memory_schema import WorkingMemoryError, check_schema
from core.stored_text import json_text

logger = logging.getLogger(__name__)

DEFAULT_MEMORY_NAME = "default"
# The ``process`` of a registration an import wrote (``core.transfer``): no agent process of this database
# registered it, so nothing serves it unless told to by name (``memory-studio mcp --agent``).
IMPORTED_PROCESS = "imported"
_AGENT_KEYS = ("agent", "agentName", "agentId")  # thread metadata naming its agent (Mastra playground style)


# -- records ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AgentConfig:
    """One row of ``memory_studio_agents``: the resolved configuration an agent registered."""

    name: str  # agent name
    config: dict[str, Any]  # ``Memory.describe()`` as the agent saw it
    process: str | None  # "host:pid" of the agent process that registered it, or ``IMPORTED_PROCESS``
    updated_at: datetime | None

    @property
    def imported(self) -> bool:
        """Written by an import (a file's registration), not by an agent process of this database."""
        return self.process == IMPORTED_PROCESS

    @property
    def memory_name(self) -> str:
        """The name its memory's overrides are kept under (``Memory(name=...)``), not the agent's."""
        return str(self.config.get("name") or self.name)

    @property
    def options(self) -> dict[str, Any]:
        opts = self.config.get("options")
        return dict(opts) if isinstance(opts, Mapping) else {}

    @property
    def instructions(self) -> str | None:
        """The agent's instructions, when it recorded them at registration (older engines did not)."""
        text = self.config.get("instructions")
        return text if isinstance(text, str) and text.strip() else None

    @property
    def model_settings(self) -> dict[str, Any] | None:
        """The model settings the agent registered (``ModelSettings`` names; {} when it sets none), or
        None when its row holds none (registered by an older engine, or by ``Memory.register`` alone)."""
        settings = self.config.get("modelSettings")
        return dict(settings) if isinstance(settings, Mapping) else None

    @property
    def tool_names(self) -> tuple[str, ...] | None:
        """The names of the agent's own tools, as it registered them; None when its row holds none."""
        tools = self.config.get("tools")
        if not isinstance(tools, list):
            return None
        return tuple(str(name) for name in tools if isinstance(name, str))

    def ignored_options(self) -> tuple[str, ...]:
        """The option names in its registration this engine does not know, and so does not use (``memory_options``
        drops them), as dotted paths: ``a_future_section``, ``observational_memory.a_future_knob``. A newer
        engine's agent wrote them; they stay in its row as written (nothing here rewrites a registration)."""
        known, ignored = MemoryOptions.__dataclass_fields__, []
        for key, value in self.options.items():
            if key not in known:
                ignored.append(key)
            elif key in _SECTIONS and isinstance(value, Mapping):
                fields = _SECTIONS[key].__dataclass_fields__
                ignored.extend(f"{key}.{name}" for name in value if name not in fields)
        return tuple(ignored)

    def memory_options(self) -> MemoryOptions:
        """The agent's options as a ``MemoryOptions``. Keys an engine of a newer version wrote and this one does
        not know are dropped, at the top and inside each section (``observational_memory.max_tokens_per_batch``
        from a newer agent made an older Studio refuse the agent's options: a fleet on one database is upgraded
        one host at a time)."""
        known = MemoryOptions.__dataclass_fields__
        try:
            return MemoryOptions(**{k: _known_only(k, v) for k, v in self.options.items() if k in known})
        except (OptionsError, TypeError, ValueError) as exc:  # a hand-edited row, or a bug that stored it
            why = str(exc).rstrip(".")
            raise OptionsError(
                f"Agent {self.name!r} registered memory options that cannot be used ({why}). Run the agent again "
                "so it registers its current options, or correct its row in memory_studio_agents."
            ) from None


#: The sections of ``MemoryOptions`` given as a dict of their own options in a registration.
_SECTIONS: dict[str, Any] = {"semantic_recall": SemanticRecallOptions, "working_memory": WorkingMemoryOptions,
                             "observational_memory": ObservationalMemoryOptions, "generate_title": TitleOptions}


def _known_only(key: str, value: Any) -> Any:
    """A section's dict without the names its options class does not have (a newer engine's)."""
    section = _SECTIONS.get(key)
    if section is None or not isinstance(value, Mapping):
        return value
    fields = section.__dataclass_fields__
    return {k: v for k, v in value.items() if k in fields}


@dataclass(frozen=True)
class ConfigVersion:
    """One row of ``memory_studio_configs``: a template or schema override (or neither: code default)."""

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
        """What an editor shows for this version."""
        if self.schema is not None:
            return json.dumps(self.schema, ensure_ascii=False, indent=2)
        return self.template or ""


@dataclass(frozen=True)
class AgentChoice:
    """The registered agent whose configuration applies to a thread, and why (said to the user)."""

    agent: AgentConfig | None
    reason: str
    agents: list[AgentConfig] = field(default_factory=list)  # every registered agent, by name
    thread: Thread | None = None

    @property
    def memory_name(self) -> str:
        return self.agent.memory_name if self.agent is not None else DEFAULT_MEMORY_NAME

    def options(self) -> MemoryOptions:
        """The chosen agent's options, or the engine's defaults when none applies."""
        return self.agent.memory_options() if self.agent is not None else MemoryOptions()


# -- which agent -----------------------------------------------------------------------------------
def _has_table(store: Store, name: str) -> bool:
    try:
        return store.db.has_table(name)
    except Exception:  # noqa: BLE001 - an unreadable schema simply has no Studio tables
        logger.debug("cannot list tables of %s", store.location.display, exc_info=True)
        return False


def list_agents(store: Store) -> list[AgentConfig]:
    """Every registered agent, by name; [] for a database without the table (a Mastra one)."""
    if not _has_table(store, t.agent_registry.name):
        return []
    with store.db.read() as conn:
        rows = conn.execute(sa.select(t.agent_registry).order_by(t.agent_registry.c.name)).all()
    out = []
    for r in rows:
        try:
            config = json.loads(r.config)
        except (TypeError, json.JSONDecodeError):
            logger.warning("agent %r registered an unreadable configuration; showing it as empty", r.name)
            config = {}
        out.append(AgentConfig(r.name, config if isinstance(config, dict) else {}, r.process,
                               parse_iso(r.updatedAt) if r.updatedAt else None))
    return out


def named_agent(store: Store, name: str) -> AgentConfig:
    """The agent registered as ``name``; ``LookupError`` (naming the registered ones) if there is none."""
    agents = list_agents(store)
    for agent in agents:
        if agent.name == name:
            return agent
    known = ", ".join(repr(a.name) for a in agents) or "none"
    raise LookupError(f"No agent named {name!r} has registered with this database (registered: {known}).")


def last_agent(store: Store, thread_id: str) -> str | None:
    """The agent that last answered in this thread, if it said who it was."""
    with store.db.read() as conn:
        row = conn.execute(
            sa.select(dialect.json_path(t.messages.c.content, "metadata", "agent"))
            .where(t.messages.c.thread_id == thread_id, t.messages.c.role == "assistant")
            .order_by(t.messages.c.createdAt.desc()).limit(1)
        ).first()
    return str(row[0]) if row and row[0] else None


def choose_agent(
    agents: Sequence[AgentConfig], thread: Thread | None, last: str | None = None
) -> tuple[AgentConfig | None, str]:
    """The rule: which registered agent a thread belongs to, and how that was decided.

    First the agent that last answered in the thread (``last``: the engine records it on every
    assistant message), then an agent named in the thread's metadata (``agent``, ``agentName``,
    ``agentId``), then an agent named like the resource (Mastra's playground uses
    ``resourceId = agentId``), then the only agent registered.
    """
    by_name = {a.name: a for a in agents}
    if last and last in by_name:
        return by_name[last], f"agent '{last}' answered last in this thread"
    meta = (thread.metadata or {}) if thread is not None else {}
    for key in _AGENT_KEYS:
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


def agent_for_thread(store: Store, thread_id: str | None) -> AgentChoice:
    """Which registered configuration applies to a thread (``choose_agent`` over what is stored)."""
    agents = list_agents(store)
    thread = store.memory.get_thread(thread_id) if thread_id else None
    agent, reason = choose_agent(agents, thread, last_agent(store, thread.id) if thread is not None else None)
    return AgentChoice(agent, reason, agents, thread)


def register_agent(store: Store, name: str, config: Mapping[str, Any]) -> bool:
    """Record (or refresh) the configuration agent ``name`` runs with. False when the store cannot
    take it: read-only, or a database without the Studio's tables (never migrated silently)."""
    if store.read_only or not _has_table(store, t.agent_registry.name):
        return False
    values = {
        "name": name, "config": json_text(dict(config), default=str),
        "process": f"{socket.gethostname()}:{os.getpid()}", "updatedAt": iso_now(),
    }
    with store.db.write() as conn:
        conn.execute(dialect.upsert(conn, t.agent_registry, values, key="name"))
    return True


# -- overrides -------------------------------------------------------------------------------------
Override = Union[ConfigVersion, Mapping[str, Any], None]
# Plain driver SQL (no statement compilation): it runs on every agent turn.
_LATEST_OVERRIDE_SQL = (
    'SELECT id, name, template, schema, author, "createdAt" FROM memory_studio_configs '
    "WHERE name = ? ORDER BY id DESC LIMIT 1"
)


def _version(r: Any) -> ConfigVersion:
    schema = None
    if r.schema:
        try:
            schema = json.loads(r.schema)
        except json.JSONDecodeError:
            logger.warning("override #%s for %r holds unreadable JSON; ignored", r.id, r.name)
    return ConfigVersion(int(r.id), r.name, r.template, schema, r.author,
                         parse_iso(r.createdAt) if r.createdAt else None)


def config_versions(store: Store, name: str) -> list[ConfigVersion] | None:
    """Every override of memory ``name``, newest first; None when the database has no such table."""
    if not _has_table(store, t.memory_configs.name):
        return None
    with store.db.read() as conn:
        rows = conn.execute(
            sa.select(t.memory_configs).where(t.memory_configs.c.name == name).order_by(t.memory_configs.c.id.desc())
        ).all()
    return [_version(r) for r in rows]


def latest_override(store: Store, name: str) -> ConfigVersion | None:
    """The newest override of memory ``name`` (None: none, or no table). Runs on every agent turn, so
    it is one indexed query and does not look the table up first."""
    try:
        with store.db.read() as conn:
            row = driver_sql.first(conn, _LATEST_OVERRIDE_SQL, (name,))
    except (sa.exc.DBAPIError, ValueError):  # a foreign database without our tables has no overrides
        return None
    return _version(_ConfigRow(*row)) if row is not None else None


class _ConfigRow(NamedTuple):
    """A row of ``_LATEST_OVERRIDE_SQL`` read on the driver's cursor, by name as ``_version`` reads it."""

    id: Any
    name: Any
    template: Any
    schema: Any
    author: Any
    createdAt: Any  # noqa: N815 - the column's name


def validate_template(text: str) -> list[str]:
    """A template must be non-empty Markdown; the model is told to fill it in, so empty helps nobody."""
    if not text.strip():
        return ["The template is empty. Write the Markdown outline the agent should fill in."]
    if text.lstrip().startswith("{"):
        return ["This looks like JSON. A template is Markdown; to store JSON, switch to a schema."]
    return []


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
                schema=json_text(dict(schema), ensure_ascii=False) if schema is not None else None,
                author=author, createdAt=now,
            )
        ).inserted_primary_key
        new_id = key[0] if key is not None else 0
    return ConfigVersion(int(new_id), name, template, dict(schema) if schema is not None else None, author,
                         parse_iso(now))


# -- effective options -----------------------------------------------------------------------------
def effective_options(
    registered: MemoryOptions, override: Override = None, per_call: Mapping[str, Any] | None = None,
) -> MemoryOptions:
    """What a turn runs with: the agent's options, then the newest Studio override, then per-call options.

    An override only replaces the working-memory template or schema (the other one is cleared), and
    only when working memory is on; per-call options merge last (``MemoryOptions.merged``).
    """
    opts = registered
    if override is not None and opts.working_memory.enabled:
        if isinstance(override, ConfigVersion):
            template, schema = override.template, override.schema
        else:
            template, schema = override.get("template"), override.get("schema")
        wm: dict[str, Any] = {}
        if schema is not None:
            wm = {"schema": schema, "template": None}
        elif template is not None:
            wm = {"template": template, "schema": None}
        if wm:
            base = opts.to_dict()
            base["working_memory"].update(wm)
            opts = MemoryOptions(**base)
    return opts.merged(per_call) if per_call else opts


def effective_options_for(
    store: Store, name: str, registered: MemoryOptions, per_call: Mapping[str, Any] | None = None,
) -> MemoryOptions:
    """``effective_options`` with the newest override of memory ``name`` read from ``store``."""
    return effective_options(registered, latest_override(store, name), per_call)


__all__ = [
    "DEFAULT_MEMORY_NAME",
    "AgentChoice",
    "AgentConfig",
    "ConfigVersion",
    "agent_for_thread",
    "choose_agent",
    "config_versions",
    "effective_options",
    "effective_options_for",
    "last_agent",
    "latest_override",
    "list_agents",
    "named_agent",
    "register_agent",
    "save_override",
    "validate_template",
]
