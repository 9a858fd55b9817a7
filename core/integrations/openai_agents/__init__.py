"""The OpenAI Agents SDK keeps its conversations in our memory (the ``memory-studio[openai-agents]`` extra).

``MemorySession`` implements the SDK's ``Session`` protocol over one of our threads; its
``run_config()`` adds the memory processors' output to the agent's instructions before each model
call and mirrors the SDK's trace of the run into our trace store; ``tools()`` gives the model the
working-memory update tool. Importing this package without the SDK installed raises an error that
names the extra.
"""

from __future__ import annotations

try:
    import agents  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "The OpenAI Agents SDK is not installed: pip install 'memory-studio[openai-agents]'."
    ) from exc

from core.integrations.openai_agents.session import MemorySession, memory_blocks
from core.integrations.openai_agents.tracing import MemoryStudioTraceProcessor, trace_processor

__all__ = ["MemorySession", "MemoryStudioTraceProcessor", "memory_blocks", "trace_processor"]
