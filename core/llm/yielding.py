"""Background model calls that give way to a turn's own call on the same server.

A local model server often has one slot (llama.cpp ``n_parallel=1``, one Ollama model): while a
background observer or reflector call runs there, a turn's own call queues behind it and the turn
waits anyway. So a background call runs inside ``TRAFFIC.background(model, ...)`` and a turn's call
inside ``TRAFFIC.foreground(model)``; both are keyed by the model's server (its base URL):

- a foreground call cancels every background call in flight on its server: the call's flag is set
  and its connection is shut down, which makes llama.cpp and Ollama stop generating and frees the
  slot; the background call then raises ``CallYielded`` (never a failure: no back-off);
- a background call starts only while no foreground call runs on its server, so one that yielded is
  tried again once the turn's call has finished.

A model without a base URL (a scripted or custom ``ChatModel``) has no server here: nothing yields.
The cancel reaches the wire only for a model that sends through ``BackgroundCall.attach``
(``OpenAICompatibleModel`` does, for a call made inside ``background``); another model's background
call is still flagged, and its result is thrown away, but the server finishes it.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from core.llm.base import ModelError
from core.llm.stopping import Interruptible

log = logging.getLogger(__name__)

#: How often a background call waiting for a turn's call to finish looks at its ``stop`` (closing).
_POLL_SECONDS = 0.25


class CallYielded(ModelError):
    """A background call was cancelled because a turn's call went to the same server; it is tried again
    after that call. Not a failure: nothing was written and no back-off is recorded. ``to``: the model id
    of the turn's call."""

    def __init__(self, detail: str, *, to: str, model_id: str, endpoint: str | None = None) -> None:
        self.to = to
        super().__init__(detail, model_id=model_id, endpoint=endpoint, retryable=True,
                         hint="nothing to do: the call runs again once the turn's call has finished")


class BackgroundCall(Interruptible):
    """One background model call in flight (see the module doc)."""

    def __init__(self, server: str, label: str) -> None:
        super().__init__()
        self.server = server
        self.label = label  # what the call is for ("observer", "reflector (level 0)")

    def __repr__(self) -> str:
        return f"BackgroundCall(server={self.server!r}, label={self.label!r}, cancelled_by={self.cancelled_by!r})"

    @property
    def cancelled_by(self) -> str | None:
        """The model id of the turn's call it gave way to."""
        return self.interrupted_by

    @property
    def cancelled(self) -> bool:
        return self.interrupted_by is not None

    def cancel(self, by: str) -> None:
        self.interrupt(by)

    def yielded(self, model_id: str, endpoint: str = "") -> CallYielded:
        """The error a cancelled call raises."""
        return CallYielded(f"the background {self.label} call gave way to a turn's call to the same server "
                           f"({self.cancelled_by}); it is tried again after that call", to=str(self.cancelled_by),
                           model_id=model_id, endpoint=endpoint or None)


@dataclass
class _Server:
    foreground: int = 0
    calls: set[BackgroundCall] = field(default_factory=set)


class ServerTraffic:
    """Foreground and background model calls per server (one instance per process: ``TRAFFIC``)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._servers: dict[str, _Server] = {}

    def _server(self, key: str) -> _Server:
        return self._servers.setdefault(key, _Server())

    @contextmanager
    def foreground(self, model: Any) -> Iterator[list[BackgroundCall]]:
        """A turn's call to ``model``: cancels the background calls in flight on its server (given
        to the block, so its span can say so) and holds back new ones until the block ends."""
        key = server_of(model)
        if key is None:
            yield []
            return
        with self._cond:
            server = self._server(key)
            server.foreground += 1
            yielded = [c for c in server.calls if not c.cancelled]
        by = str(getattr(model, "model_id", key))
        for call in yielded:
            call.cancel(by)
            log.info("background %s call on %s gave way to a turn's call (%s)", call.label, key, by)
        try:
            yield yielded
        finally:
            with self._cond:
                server.foreground -= 1
                self._cond.notify_all()

    @contextmanager
    def background(self, model: Any, label: str, *, stop: Callable[[], bool] = lambda: False,
                   ) -> Iterator[BackgroundCall | None]:
        """A background call to ``model``: waits while a turn's call runs on its server (or until
        ``stop()``), then is registered as in flight for the block (None: ``model`` has no server)."""
        key = server_of(model)
        if key is None:
            yield None
            return
        call = BackgroundCall(key, label)
        with self._cond:
            server = self._server(key)
            while server.foreground and not stop():
                self._cond.wait(_POLL_SECONDS)
            server.calls.add(call)
        token = _CURRENT.set(call)
        try:
            yield call
        finally:
            _CURRENT.reset(token)
            with self._cond:
                server.calls.discard(call)

    def in_flight(self, model: Any) -> list[BackgroundCall]:
        """The background calls in flight on ``model``'s server (a snapshot)."""
        key = server_of(model)
        with self._cond:
            return [] if key is None or key not in self._servers else list(self._servers[key].calls)


def server_of(model: Any) -> str | None:
    """The server a model's calls go to (its base URL), or None when it has none (scripted, custom)."""
    url = getattr(model, "base_url", None)
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
        return None
    return url.rstrip("/")


def current_call() -> BackgroundCall | None:
    """The background call this thread is making (inside ``ServerTraffic.background``), if any."""
    return _CURRENT.get()


def yields_by_default(model: Any) -> bool:
    """Whether background calls to ``model`` yield when the option says "auto": when its server is on
    this machine or a private network (where one-slot servers run); a hosted API serves calls side by
    side, so cancelling there would only waste the tokens already paid for."""
    key = server_of(model)
    if key is None:
        return False
    import ipaddress

    host = (urlsplit(key).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost") or host.endswith(".local"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # a name: hosted APIs are reached by name
    return address.is_loopback or address.is_private or address.is_link_local


_CURRENT: contextvars.ContextVar[BackgroundCall | None] = contextvars.ContextVar("memory_studio_background_call",
                                                                                 default=None)
TRAFFIC = ServerTraffic()

__all__ = ["TRAFFIC", "BackgroundCall", "CallYielded", "ServerTraffic", "current_call", "server_of",
           "yields_by_default"]
