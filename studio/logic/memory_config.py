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


#: How many of an agent's ignored option names the note names, and how long each may be as drawn: the names come
#: from the database (another program, or a hand edit, may have written a million, or one of a megabyte), and the
#: note is a label laid out on the UI thread (100,000 names named whole: 18 s in the Chat, 5 s in the Prompt tab).
IGNORED_NAMES_SHOWN = 8
IGNORED_NAME_CHARS = 60


def _option_name(name: str) -> str:
    """One ignored option's name as the note names it: quoted (so a name such as "ok, and every option is used"
    reads as a name, never as the Studio's words), its controls escaped (``shown_title``), cut where it is long
    (before it is quoted, so no escape is cut in two)."""
    cut = name if len(name) <= IGNORED_NAME_CHARS else name[:IGNORED_NAME_CHARS - 1] + "…"
    return shown_title(json.dumps(cut, ensure_ascii=False))


def ignored_options_note(agent: AgentConfig | None) -> str:
    """What the Studio says of the options ``agent`` registered that this version does not know
    (``AgentConfig.ignored_options``: an agent of a newer version wrote them, one host of a fleet upgraded before
    the Studio): which ones (the first ``IGNORED_NAMES_SHOWN``, quoted, and how many more), that the Studio's
    previews, replays and chats run without them, and that they are not lost. "" when there are none."""
    names = agent.ignored_options() if agent is not None else ()
    if agent is None or not names:
        return ""
    shown = ", ".join(_option_name(n) for n in names[:IGNORED_NAMES_SHOWN])
    more = len(names) - IGNORED_NAMES_SHOWN
    if more > 0:
        shown += f" and {more:,} more (the registration in Memory > Agents lists them all)"
    return (f"Agent '{shown_title(agent.name)}' registered option(s) this version of Memory Studio does not "
            f"understand: {shown}. The Studio works without them here (upgrade "
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
