"""The agents a gateway serves: loaded from ``package.module:attribute``, looked up by name.

The attribute is a dict of name → ``Agent`` (the name is what clients send as ``model``), a list of
agents (each served under its own ``name``), or a function returning either, so a module can open
its database only when the gateway starts.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from core.agent import Agent
from core.errors import MemoryStudioError
from core.gateway.errors import GatewayError, bad_request
from core.ids import shown
from core.memory import Memory, resolve_memory


class AgentLoadError(MemoryStudioError, ValueError):
    """``--agents`` does not name a usable set of agents; the message says what to fix."""


def load_agents(spec: str) -> dict[str, Agent]:
    """Import ``package.module:attribute`` and return its agents by name."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise AgentLoadError(f"--agents takes package.module:attribute (for example myapp.agents:agents), got {spec!r}.")
    # Like uvicorn: the folder the command runs in is importable, so `myapp.agents` just works there.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise AgentLoadError(
                f"Cannot import {module_name!r} ({exc}). Run the command from the folder that holds it, "
                "or add that folder to PYTHONPATH."
            ) from exc
        raise
    try:
        value: Any = module
        for part in attribute.split("."):
            value = getattr(value, part)
    except AttributeError:
        raise AgentLoadError(f"Module {module_name!r} has no attribute {attribute!r}.") from None
    if callable(value) and not isinstance(value, Agent):
        value = value()
    return agents_by_name(value, source=spec)


def agents_by_name(value: Any, *, source: str = "agents") -> dict[str, Agent]:
    """A dict of name → Agent, or a list of agents, as a checked dict."""
    if isinstance(value, Agent):
        value = [value]
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        pairs = [(getattr(agent, "name", None), agent) for agent in value]
    else:
        raise AgentLoadError(f"{source} must be a dict of name → Agent or a list of agents, got {type(value).__name__}.")
    agents: dict[str, Agent] = {}
    for name, agent in pairs:
        if not isinstance(agent, Agent):
            raise AgentLoadError(f"{source}: {name!r} is a {type(agent).__name__}, not an Agent.")
        if not isinstance(name, str) or not name:
            raise AgentLoadError(f"{source}: every agent needs a non-empty string name, got {name!r}.")
        if name in agents:
            raise AgentLoadError(f"{source}: two agents are named {name!r}; names must be unique.")
        agents[name] = agent
    if not agents:
        raise AgentLoadError(f"{source} holds no agents.")
    return agents


class AgentRegistry:
    """Name → agent, and which memory the memory API reads."""

    def __init__(self, agents: Mapping[str, Agent] | Sequence[Agent]) -> None:
        self.agents = agents_by_name(agents)

    @property
    def names(self) -> list[str]:
        return list(self.agents)

    def get(self, name: Any) -> Agent:
        if not isinstance(name, str) or not name:
            raise bad_request("Say which agent answers: set 'model' to one of " + self._listing() + ".", param="model")
        agent = self.agents.get(name)
        if agent is None:
            raise GatewayError(404, f"There is no agent named {shown(name)}. This gateway serves {self._listing()}.",
                               code="model_not_found", param="model")
        return agent

    def memory_for(self, agent_id: str | None, request_context: Mapping[str, Any], *,
                   working_memory: bool = False) -> Memory:
        """The memory of ``agent_id``; without one, any memory when the agents agree.

        Reading threads and messages needs only the database, so agents that share one store agree;
        working memory also needs the same working-memory settings. When they differ the caller
        must say which agent it means.
        """
        if agent_id:
            if agent_id not in self.agents:  # the memory API's parameter, not a chat request's 'model'
                raise GatewayError(404, f"agentId={shown(agent_id)} names no agent. This gateway serves "
                                   f"{self._listing()}.", code="model_not_found", param="agentId")
            memory = resolve_memory(self.get(agent_id).memory, request_context)
            if memory is None:
                raise bad_request(f"Agent {agent_id!r} has no memory.", param="agentId")
            return memory
        memories = [m for m in (resolve_memory(a.memory, request_context) for a in self.agents.values())
                    if m is not None]
        if not memories:
            raise bad_request("None of the agents on this gateway has a memory.")
        first = memories[0]
        agree = all(m.store is first.store for m in memories)
        if agree and working_memory:
            agree = all(m.options.working_memory == first.options.working_memory for m in memories)
        if not agree:
            with_memory = [n for n, a in self.agents.items() if a.memory is not None]
            what = "working-memory settings" if working_memory else "databases"
            raise bad_request(f"The agents here use different {what}; add agentId= (one of "
                              + ", ".join(repr(n) for n in with_memory) + ").", param="agentId")
        return first

    def _listing(self) -> str:
        return ", ".join(repr(n) for n in self.agents)
