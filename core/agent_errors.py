"""The agent's own error, below ``agent`` and ``agent_stream`` (both raise it; ``core.agent`` re-exports
it, where callers import it from)."""

from __future__ import annotations

from core.errors import MemoryStudioError


class AgentError(MemoryStudioError, RuntimeError):
    """An agent was built or called in a way that cannot work."""
