"""The request bytes of a model call, read at the wire: an ``httpx`` request hook armed per call.

A turn record keeps the hash of the bytes its model call sent only when they are the bytes the server
received, so they are taken where they leave: a request hook on the ``httpx`` client of the model's
OpenAI client (``openai.OpenAI`` or ``openai.AsyncOpenAI``). The hook is added once per client and reads
a request only for the call the current thread or task armed, through a context variable
(``RequestWatch.armed``): calls made at once from several threads or tasks each see their own request,
and a request of another client (a guardrail's or a tool's own model) is not the armed call's. Reading
never fails the request it watches: a failure leaves a log line and the call is told (``Armed.unread``).

Used by ``OpenAICompatibleModel`` (a sync client, one call at a time per thread) and by the Agents SDK
capture (``core.integrations.openai_agents.capture``, async clients, one call per task).
"""

from __future__ import annotations

import contextvars
import inspect
import logging
from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar

log = logging.getLogger(__name__)


class Armed(Protocol):
    """The model call a thread or task armed: which requests are its, and what it keeps of them."""

    def takes(self, http: Any) -> bool:
        """Whether a request going through ``http`` (an ``httpx`` client) may be this call's now."""

    def sent(self, request: Any, raw: bytes, path: str) -> None:
        """A request of this call, as sent: its bytes and which of the watched paths its URL ends in."""

    def unread(self) -> None:
        """A request of this call could not be read or taken (it was sent all the same)."""


_A = TypeVar("_A", bound=Armed)


class RequestWatch(Generic[_A]):
    """Request hooks that hand each ``POST`` to one of ``paths`` to the call armed in ``armed``;
    ``unread``: the log line of a request that could not be read or taken (``%s``: its path)."""

    def __init__(self, armed: contextvars.ContextVar[_A | None], paths: tuple[str, ...], unread: str) -> None:
        self.armed = armed
        self.paths = paths
        self.unread = unread

    def watch(self, client: Any) -> Any:
        """Add the hook to the ``httpx`` client of an OpenAI client (``http_client``), once; that
        ``httpx`` client, or None when there is none to add it to."""
        http = http_client(client)
        if http is None:
            return None
        hooks = http.event_hooks["request"]
        if not any(isinstance(h, _Hook) and h.watch is self for h in hooks):
            # An ``AsyncClient`` awaits its hooks (its ``send`` is a coroutine), a ``Client`` calls them.
            hook = _AsyncHook if inspect.iscoroutinefunction(getattr(http, "send", None)) else _Hook
            hooks.append(hook(self, http))
        return http

    def armed_for(self, http: Any, request: Any) -> tuple[_A, str] | None:
        """The armed call ``request`` (through ``http``) is for, and the watched path it goes to; None
        when it is no call's."""
        call = self.armed.get()
        if call is None or request.method != "POST" or not call.takes(http):
            return None
        path = request.url.path
        suffix = next((p for p in self.paths if path.endswith(p)), None)
        return None if suffix is None else (call, suffix)

    def failed(self, request: Any) -> None:
        log.warning(self.unread, request.url.path, exc_info=True)
        call = self.armed.get()
        if call is not None:
            call.unread()


def http_client(client: Any) -> Any:
    """The ``httpx`` client an OpenAI client keeps (``_client``), if it has request hooks; else None."""
    http = getattr(client, "_client", None)
    hooks = getattr(http, "event_hooks", None)
    if not isinstance(hooks, Mapping) or not isinstance(hooks.get("request"), list):
        return None
    return http


class _Hook:
    """The request hook of one ``httpx.Client``."""

    def __init__(self, watch: RequestWatch[Any], http: Any) -> None:
        self.watch = watch
        self.http = http

    def __call__(self, request: Any) -> None:
        try:
            found = self.watch.armed_for(self.http, request)
            if found is not None:
                found[0].sent(request, bytes(request.read()), found[1])
        except Exception:  # noqa: BLE001 - reading a request must never fail it
            self.watch.failed(request)


class _AsyncHook(_Hook):
    """The request hook of one ``httpx.AsyncClient`` (which awaits its hooks)."""

    async def __call__(self, request: Any) -> None:  # type: ignore[override]
        try:
            found = self.watch.armed_for(self.http, request)
            if found is not None:
                found[0].sent(request, bytes(await request.aread()), found[1])
        except Exception:  # noqa: BLE001 - reading a request must never fail it
            self.watch.failed(request)


__all__ = ["Armed", "RequestWatch", "http_client"]
