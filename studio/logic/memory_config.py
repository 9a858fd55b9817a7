"""The template/schema override editor's state and parsing (no Qt, no I/O).

Which agent runs with what, and the overrides themselves, are the engine's (``core/agent_configs.py``:
the one module that reads and writes the Studio's configuration tables). ``studio.reads.config_state``
reads a ``ConfigState`` in a worker; saving goes through ``core.agent_configs.save_override``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from core.agent_configs import AgentConfig, ConfigVersion
from core.working_memory_schema import WorkingMemoryError, check_schema
from studio.logic.thread_labels import shown_title


def ignored_options_note(agent: AgentConfig | None) -> str:
    """What the Studio says of the options ``agent`` registered that this version does not know
    (``AgentConfig.ignored_options``: an agent of a newer version wrote them, one host of a fleet upgraded before
    the Studio): which ones, that the Studio's previews, replays and chats run without them, and that they are not
    lost. "" when there are none."""
    names = agent.ignored_options() if agent is not None else ()
    if agent is None or not names:
        return ""
    return (f"Agent '{shown_title(agent.name)}' registered option(s) this version of Memory Studio does not "
            f"understand: {', '.join(shown_title(n) for n in names)}. The Studio works without them here (upgrade "
            "it to use them); the agent's registration keeps them, and the agent itself runs with them.")


@dataclass
class ConfigState:
    """Everything the template/schema editor needs for one memory name, read in one go."""

    name: str
    versions: list[ConfigVersion] = field(default_factory=list)  # newest first
    available: bool = True  # False: a foreign database without the Studio's tables

    @property
    def current(self) -> ConfigVersion | None:
        return self.versions[0] if self.versions else None


def parse_schema(text: str) -> tuple[dict[str, Any] | None, list[str]]:
    """Editor text as a working-memory schema, or the problems (JSON syntax with line and column)."""
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, [f"line {exc.lineno}, column {exc.colno}: {exc.msg}"]
    try:
        check_schema(schema)
    except WorkingMemoryError as exc:
        return None, [str(exc)]
    return schema, []
