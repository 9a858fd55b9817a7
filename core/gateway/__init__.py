"""The gateway: agents served over HTTP (``memory-studio serve``).

- ``app``: ``create_app(agents, token=..., default_resource=...)``, the Starlette app;
- ``openai_routes``: ``POST /v1/chat/completions`` (plain and SSE-streamed), ``GET /v1/models``;
- ``memory_routes``: ``/api/memory/threads...`` (threads, messages, working memory) and
  ``/api/memory/delegations`` (a resource's delegations and their threads);
- ``turns``: one request → one agent turn (thread/resource rules, events);
- ``registry``: loading ``package.module:agents`` and looking agents up by name;
- ``errors``: OpenAI-style error bodies and their statuses;
- ``guard``: ``RequestGuard``/``GuardPolicy``, the ASGI middleware checking Host, Origin, token, JSON
  bodies and their size before any app sees a request (reusable by any ASGI app);
- ``tokens``: tokens files (``--tokens-file``), one token per user or app, stored as SHA-256 hashes;
- ``access``: ``Caller``, who the guard let in and which resources it may use (every route asks it);
- ``server``: uvicorn in the foreground, or on a thread (``GatewayServer``) for tests and benchmarks;
- ``settings``: the environment variables the token and the tokens file are read from (``TOKEN_ENV``,
  ``TOKENS_FILE_ENV``).

Starlette and uvicorn come with the ``serve`` extra; importing this package does not need them,
``require_serve_extra()`` says how to install them.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from core.errors import MemoryStudioError

from core.gateway.settings import TOKEN_ENV as TOKEN_ENV
from core.gateway.settings import TOKENS_FILE_ENV as TOKENS_FILE_ENV

INSTALL_HINT = "pip install 'memory-studio[serve]'"


class ServeExtraMissing(MemoryStudioError, RuntimeError):
    """``memory-studio serve`` needs the ``serve`` extra (Starlette and uvicorn)."""


def require_serve_extra() -> None:
    """Raise ``ServeExtraMissing`` naming the pip command when Starlette or uvicorn is absent."""
    missing = [name for name in ("starlette", "uvicorn", "anyio") if importlib.util.find_spec(name) is None]
    if missing:
        raise ServeExtraMissing(f"The gateway needs {', '.join(missing)}, which are not installed. "
                                f"Install them with: {INSTALL_HINT}")


def __getattr__(name: str) -> Any:
    # The ASGI pieces load on first use, so `core.gateway` imports without the serve extra.
    if name == "create_app":
        from core.gateway.app import create_app

        return create_app
    if name == "GatewayServer":
        from core.gateway.server import GatewayServer

        return GatewayServer
    if name in ("load_agents", "AgentLoadError"):
        from core.gateway import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'core.gateway' has no attribute {name!r}")


__all__ = ["INSTALL_HINT", "TOKENS_FILE_ENV", "TOKEN_ENV", "AgentLoadError", "GatewayServer", "ServeExtraMissing", "create_app", "load_agents",
           "require_serve_extra"]
