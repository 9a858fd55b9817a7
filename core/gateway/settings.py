"""The gateway's environment settings, below every gateway module (the package re-exports them)."""

from __future__ import annotations

#: Where ``memory-studio serve`` reads its bearer token when ``--token`` is not given.
TOKEN_ENV = "MEMORY_STUDIO_GATEWAY_TOKEN"
#: Where it reads the path of its tokens file (per-resource tokens) when ``--tokens-file`` is not given.
TOKENS_FILE_ENV = "MEMORY_STUDIO_GATEWAY_TOKENS_FILE"
