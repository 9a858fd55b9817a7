"""The gateway's ASGI app: OpenAI-compatible chat, the memory API, behind the request guard.

    app = create_app({"support": support_agent}, token="s3cret", default_resource="anonymous")
    app = create_app(agents, policy=GuardPolicy(token="s3cret", allowed_origins={"https://app.example"}))

Every request passes ``core.gateway.guard.RequestGuard`` first (Host, Origin, token, JSON bodies,
body size and nesting); see that module for what it refuses and why.

serve it with any ASGI server (``memory-studio serve`` uses uvicorn). The app keeps no state of its
own between requests: threads, messages and working memory live in the agents' database, so any
number of gateway processes can serve the same one behind a load balancer without sticky sessions.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from core.agent import Agent
from core.gateway import memory_routes, openai_routes
from core.gateway.errors import classify
from core.gateway.guard import GuardPolicy, RequestGuard
from core.gateway.idempotency import IdempotencySettings, Keeper
from core.gateway.registry import AgentRegistry
from core.gateway.settings import TOKEN_ENV, TOKENS_FILE_ENV
from core.gateway.tokens import load_tokens_file
from core.scopes import DELEGATION_PREFIX, is_delegation_resource

DEFAULT_RESOURCE = "default"


class Gateway:
    """What every request handler may use: the agents and the serving settings.

    Turns and memory calls run on worker threads from two separate pools: ``limiter`` for turns
    (``max_concurrency``) and ``memory_limiter`` for the memory API (``memory_workers``), so turns,
    even streamed ones whose clients stopped reading, can never take every worker (``/health``
    needs none). A streamed reply gives each write ``stream_write_timeout`` seconds: a client that
    reads nothing for that long is dropped and its turn abandoned, releasing its worker.
    """

    def __init__(self, registry: AgentRegistry, *, default_resource: str, max_concurrency: int,
                 memory_workers: int | None = None, stream_write_timeout: float = 30.0,
                 idempotency: IdempotencySettings | None = None) -> None:
        self.registry = registry
        self.default_resource = default_resource
        self.max_concurrency = max_concurrency
        self.memory_workers = memory_workers if memory_workers is not None else max(4, max_concurrency // 4)
        self.stream_write_timeout = stream_write_timeout
        # Idempotency keys (``core.gateway.idempotency``), kept in each memory's own database.
        self.keeper = Keeper(idempotency)
        self.started = int(time.time())
        self._limiter: anyio.CapacityLimiter | None = None
        self._memory_limiter: anyio.CapacityLimiter | None = None

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        """Worker threads for turns (created in the event loop, on first use)."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.max_concurrency)
        return self._limiter

    @property
    def memory_limiter(self) -> anyio.CapacityLimiter:
        """Worker threads kept for the memory API: turns never take them."""
        if self._memory_limiter is None:
            self._memory_limiter = anyio.CapacityLimiter(self.memory_workers)
        return self._memory_limiter


def check_settings(*, default_resource: str, max_concurrency: int, stream_write_timeout: float,
                   flags: bool = False) -> None:
    """``create_app``'s checks of its settings; ``flags``: name them as ``memory-studio serve``'s options, which
    checks them before it opens a database (a refused start leaves no new file behind)."""
    def name(keyword: str) -> str:
        return "--" + keyword.replace("_", "-") if flags else keyword

    if not default_resource:
        raise ValueError(f"{name('default_resource')} must be a non-empty resource id.")
    if is_delegation_resource(default_resource):
        raise ValueError(f"{name('default_resource')} {default_resource!r}: ids starting with {DELEGATION_PREFIX!r} "
                         "belong to the agents' delegations, which no request may use; give a resource of its own.")
    if max_concurrency < 1:
        raise ValueError(f"{name('max_concurrency')} must be at least 1, got {max_concurrency}.")
    if not 0 < stream_write_timeout < float("inf"):
        raise ValueError(f"{name('stream_write_timeout')} must be a positive number of seconds, got {stream_write_timeout}.")


def create_app(
    agents: Mapping[str, Agent] | Sequence[Agent],
    *,
    token: str | None = None,
    default_resource: str = DEFAULT_RESOURCE,
    max_concurrency: int = 40,
    policy: GuardPolicy | None = None,
    memory_workers: int | None = None,
    stream_write_timeout: float = 30.0,
    idempotency: IdempotencySettings | None = None,
) -> Starlette:
    """The gateway for ``agents`` (name → Agent, or a list served under their names).

    ``policy``: what requests are accepted (``GuardPolicy``: Host names, web origins, token, tokens
    file, body limits); without one, the defaults with ``token`` and the tokens file named by
    ``$MEMORY_STUDIO_GATEWAY_TOKENS_FILE``. ``token``: clients must send ``Authorization: Bearer
    <token>``; when None it is read from ``$MEMORY_STUDIO_GATEWAY_TOKEN``, and an empty string turns
    the check off (a tokens file's tokens are still required then).
    ``max_concurrency``: turns running at once; more wait their turn. ``memory_workers``: memory API
    calls running at once, on workers of their own (default: a quarter of ``max_concurrency``, at
    least 4). ``stream_write_timeout``: seconds a streamed reply waits for a client to read before
    dropping it. ``idempotency``: how long outcomes of requests with an ``Idempotency-Key`` are kept and
    how long a running one holds its key (``IdempotencySettings``; default a day and a minute).
    """
    check_settings(default_resource=default_resource, max_concurrency=max_concurrency,
                   stream_write_timeout=stream_write_timeout)
    if memory_workers is not None and memory_workers < 1:
        raise ValueError("memory_workers must be at least 1.")
    gateway = Gateway(AgentRegistry(agents), default_resource=default_resource, max_concurrency=max_concurrency,
                      memory_workers=memory_workers, stream_write_timeout=stream_write_timeout,
                      idempotency=idempotency)
    routes: list[BaseRoute] = [Route("/health", health, methods=["GET"])]
    for route in [*openai_routes.routes(), *memory_routes.routes()]:
        assert isinstance(route, Route)
        routes.append(Route(route.path, _guarded(route.endpoint), methods=list(route.methods or ())))
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    app.state.gateway = gateway
    if policy is None:
        secret = token if token is not None else os.environ.get(TOKEN_ENV, "")
        tokens_file = os.environ.get(TOKENS_FILE_ENV, "")
        policy = GuardPolicy(token=secret or None, tokens=load_tokens_file(tokens_file) if tokens_file else None)
    elif token is not None:
        raise ValueError("Give the token inside the policy (GuardPolicy(token=...)), not beside it.")
    app.add_middleware(RequestGuard, policy=policy)
    return app


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and wrong methods answer in the same OpenAI error shape as everything else."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    what = {404: "No such endpoint", 405: "Method not allowed"}.get(status, "Request failed")
    message = f"{what}: {request.method} {request.url.path}."
    if status == 404 and request.url.path.rstrip("/") in ("/chat/completions", "/models"):
        # The commonest client mistake: base_url without /v1.
        message += (f" The OpenAI routes are under /v1: give the client base_url=\"{request.base_url}v1\" "
                    f"({request.method} /v1{request.url.path.rstrip('/')}).")
    body = {"error": {"message": message, "type": "invalid_request_error",
                      "code": {404: "not_found", 405: "method_not_allowed"}.get(status), "param": None}}
    return JSONResponse(body, status_code=status)


def _guarded(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """Every error becomes OpenAI-style JSON with its status (see ``errors.classify``)."""

    @functools.wraps(endpoint)
    async def run(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as exc:  # noqa: BLE001 - classify logs what it does not recognise
            reply = classify(exc)
            return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers or None)

    return run
