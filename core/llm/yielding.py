"""Background model calls that give way to a turn's own call on the same server.

A local model server often has one slot (llama.cpp ``n_parallel=1``, one Ollama model): while a
background observer, reflector or title call runs there, a turn's own call queues behind it and the
turn waits anyway. So a background call runs inside ``TRAFFIC.background(model, ...)`` (through
``background_call``, which reads the ``yield_to_turns`` option) and a turn's call inside
``TRAFFIC.foreground(model)``; both are keyed by the model's server (its base URL):

- a foreground call cancels every background call in flight on its server that can be stopped: the
  call's flag is set and its connection is shut down (or its own stop is run), which makes llama.cpp
  and Ollama stop generating and frees the slot; the background call then raises ``CallYielded``
  (never a failure: no back-off);
- a background call starts only while no foreground call runs on its server, so one that yielded is
  tried again once the turn's call has finished;
- while a turn waits for background memory work (``TRAFFIC.awaiting``: a turn past ``block_after``
  waits for the observer), background calls on that server neither wait nor give way: the turn's
  wait would otherwise last as long as other turns keep the server busy, so observation could be
  put off forever. Other turns' calls queue behind them on the server meanwhile (``backgroundKept``).

Which calls can be stopped: a model that says so (``StoppableModel``: ``stops_background_calls``
True; ``OpenAICompatibleModel`` sends a background call on a connection of its own and hands it to
``BackgroundCall.attach``), or any model whose call has handed over a connection or a stop
(``current_call().attach(sock)`` / ``.on_cancel(fn)``: a wrapper around ``OpenAICompatibleModel``
does so without knowing). Another model with a base URL (a custom ``ChatModel`` that sends its own
requests) cannot be stopped once its call has started: the turn's call does not pretend it did
(its span says ``backgroundKept``, "cannot stop"), it queues behind that call on a one-slot server,
and the call's reply is used. Its background calls still wait for a turn's call before they start.
A model without a base URL (scripted, custom) has no server here: nothing waits or yields.
"""

from __future__ import annotations

import contextvars
import ipaddress
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from core.llm.base import ModelError, StoppableModel
from core.llm.stopping import shut

log = logging.getLogger(__name__)

#: How often a background call waiting for a turn's call to finish looks at its ``stop`` (closing).
_POLL_SECONDS = 0.25

#: Why a turn's call left a background call running (``backgroundKept`` / ``notYielded``).
KEPT_TURN_WAITS = "a turn waits for background memory work on this server (block_after)"
KEPT_CANNOT_STOP = "its model cannot stop a call it has started (see core.llm.yielding)"

#: The ``yield_to_turns`` option: True, False, or "auto" (self-hosted servers: ``self_hosted``).
YieldChoice = bool | Literal["auto"]


class CallYielded(ModelError):
    """A background call was cancelled because a turn's call went to the same server; it is tried again
    after that call. Not a failure: nothing was written and no back-off is recorded. ``to``: the model id
    of the turn's call."""

    def __init__(self, detail: str, *, to: str, model_id: str, endpoint: str | None = None) -> None:
        self.to = to
        super().__init__(detail, model_id=model_id, endpoint=endpoint, retryable=True,
                         hint="nothing to do: the call runs again once the turn's call has finished")

    def span_attribute(self) -> dict[str, str]:
        """What the cancelled call's span says (``yielded``)."""
        return {"to": self.to, "reason": self.detail}


@dataclass(eq=False)
class BackgroundCall:
    """One background model call in flight (see the module doc)."""

    server: str
    label: str  # what the call is for ("observer", "reflector (level 0)", "title")
    stoppable: bool = True  # its model said it stops when cancelled (``StoppableModel``)
    cancelled_by: str | None = None  # the model id of the turn's call it gave way to
    #: The turns' calls it did not give way to, and why ([{to, reason}]; its span's ``notYielded``).
    kept: list[dict[str, str]] = field(default_factory=list)
    _stops: list[Callable[[], None]] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def cancelled(self) -> bool:
        return self.cancelled_by is not None

    @property
    def can_stop(self) -> bool:
        """Whether cancelling it stops it: its model says so, or the call handed over how."""
        with self._lock:
            return self.stoppable or bool(self._stops)

    def attach(self, sock: socket.socket) -> None:
        """The connection this call's request goes out on: shut down at once when already cancelled."""
        self.on_cancel(lambda: shut(sock))

    def on_cancel(self, stop: Callable[[], None]) -> None:
        """How to stop this call (close its response, shut its socket): run when a turn's call cancels
        it, at once when that happened already. A model that hands one over can be stopped."""
        with self._lock:
            self._stops.append(stop)
            late = self.cancelled
        if late:
            _run_stop(stop)

    def cancel(self, by: str) -> None:
        with self._lock:
            if self.cancelled_by is not None:
                return
            self.cancelled_by = by
            stops = list(self._stops)
        for stop in stops:
            _run_stop(stop)

    def keep(self, by: str, reason: str) -> None:
        with self._lock:
            if not any(k["to"] == by and k["reason"] == reason for k in self.kept):
                self.kept.append({"to": by, "reason": reason})

    def yielded(self, model_id: str, endpoint: str = "") -> CallYielded:
        """The error a cancelled call raises."""
        return CallYielded(f"the background {self.label} call gave way to a turn's call to the same server "
                           f"({self.cancelled_by}); it is tried again after that call", to=str(self.cancelled_by),
                           model_id=model_id, endpoint=endpoint or None)

    def span_attributes(self) -> dict[str, Any]:
        """What the call's span says once it ended without giving way (``notYielded``, when a turn's call
        found it running and left it)."""
        with self._lock:
            return {"notYielded": [dict(k) for k in self.kept]} if self.kept else {}


def _run_stop(stop: Callable[[], None]) -> None:
    try:
        stop()
    except Exception:  # noqa: BLE001 - a stop that fails leaves the call running; the turn goes on
        log.warning("stopping a background model call failed", exc_info=True)


@dataclass
class TurnCall:
    """What a turn's call did to the background calls in flight on its server: ``stopped`` (they gave
    way) and ``kept`` (left running: (call, why))."""

    stopped: list[BackgroundCall] = field(default_factory=list)
    kept: list[tuple[BackgroundCall, str]] = field(default_factory=list)

    def span_attributes(self) -> dict[str, Any]:
        """The turn's call span's ``backgroundYielded`` / ``backgroundKept`` (only those that apply)."""
        out: dict[str, Any] = {}
        if self.stopped:
            out["backgroundYielded"] = [{"call": c.label, "server": c.server} for c in self.stopped]
        if self.kept:
            out["backgroundKept"] = [{"call": c.label, "server": c.server, "reason": why} for c, why in self.kept]
        return out


@dataclass
class _Server:
    foreground: int = 0
    awaited: int = 0  # turns waiting for background memory work on this server
    calls: set[BackgroundCall] = field(default_factory=set)


class ServerTraffic:
    """Foreground and background model calls per server (one instance per process: ``TRAFFIC``)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._servers: dict[str, _Server] = {}

    def _server(self, key: str) -> _Server:
        return self._servers.setdefault(key, _Server())

    @contextmanager
    def foreground(self, model: Any) -> Iterator[TurnCall]:
        """A turn's call to ``model``: cancels the background calls in flight on its server that can be
        stopped, unless a turn waits for background work there (what it did is given to the block, for
        its span), and holds back new ones until the block ends."""
        key = server_of(model)
        if key is None:
            yield TurnCall()
            return
        by = str(getattr(model, "model_id", key))
        done = TurnCall()
        with self._cond:
            server = self._server(key)
            server.foreground += 1
            for call in server.calls:
                if call.cancelled:
                    continue
                if server.awaited:
                    done.kept.append((call, KEPT_TURN_WAITS))
                elif call.can_stop:
                    done.stopped.append(call)
                else:
                    done.kept.append((call, KEPT_CANNOT_STOP))
        for call in done.stopped:
            call.cancel(by)
            log.info("background %s call on %s gave way to a turn's call (%s)", call.label, key, by)
        for call, why in done.kept:
            call.keep(by, why)
            log.info("background %s call on %s kept running beside a turn's call (%s): %s", call.label, key, by, why)
        try:
            yield done
        finally:
            with self._cond:
                server.foreground -= 1
                self._cond.notify_all()

    @contextmanager
    def background(self, model: Any, label: str, *, stop: Callable[[], bool] = lambda: False,
                   ) -> Iterator[BackgroundCall | None]:
        """A background call to ``model``: waits while a turn's call runs on its server (unless a turn
        waits for background work there, or until ``stop()``), then is registered as in flight for the
        block (None: ``model`` has no server). An error raised in the block after the call was
        cancelled is the cancel's doing: it becomes ``CallYielded``."""
        key = server_of(model)
        if key is None:
            yield None
            return
        call = BackgroundCall(key, label, stoppable=stops_background_calls(model))
        with self._cond:
            server = self._server(key)
            while server.foreground and not server.awaited and not stop():
                self._cond.wait(_POLL_SECONDS)
            server.calls.add(call)
        token = _CURRENT.set(call)
        try:
            yield call
        except CallYielded:
            raise
        except Exception as exc:
            if not call.cancelled:
                raise
            raise call.yielded(str(getattr(model, "model_id", key))) from exc
        finally:
            _CURRENT.reset(token)
            with self._cond:
                server.calls.discard(call)

    @contextmanager
    def awaiting(self, *models: Any) -> Iterator[None]:
        """A turn waits for background memory work whose calls go to ``models``' servers: until the block
        ends, background calls there neither wait for nor give way to turns' calls."""
        keys = {k for k in map(server_of, models) if k is not None}
        with self._cond:
            for key in keys:
                self._server(key).awaited += 1
            self._cond.notify_all()  # background calls waiting for a turn's call go now
        try:
            yield
        finally:
            with self._cond:
                for key in keys:
                    self._servers[key].awaited -= 1

    def in_flight(self, model: Any) -> list[BackgroundCall]:
        """The background calls in flight on ``model``'s server (a snapshot)."""
        key = server_of(model)
        with self._cond:
            return [] if key is None or key not in self._servers else list(self._servers[key].calls)

    def awaited(self, model: Any) -> bool:
        """Whether a turn waits for background work on ``model``'s server now."""
        key = server_of(model)
        with self._cond:
            return key is not None and key in self._servers and self._servers[key].awaited > 0


def server_of(model: Any) -> str | None:
    """The server a model's calls go to (its base URL), or None when it has none (scripted, custom)."""
    url = getattr(model, "base_url", None)
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
        return None
    return url.rstrip("/")


def stops_background_calls(model: Any) -> bool:
    """Whether ``model`` says its background calls stop when cancelled (``StoppableModel``)."""
    return isinstance(model, StoppableModel) and model.stops_background_calls is True


def current_call() -> BackgroundCall | None:
    """The background call this thread is making (inside ``ServerTraffic.background``), if any."""
    return _CURRENT.get()


def yields_by_default(model: Any) -> bool:
    """Whether background calls to ``model`` yield when the option says "auto": when its server is self-hosted
    (``self_hosted``), where one-slot servers run; a hosted API serves calls side by side, so cancelling there
    would only waste the tokens already paid for."""
    return self_hosted(model)


def self_hosted(model: Any) -> bool:
    """Whether ``model``'s server runs on this machine or a private network (llama.cpp, Ollama, vLLM...) rather
    than being a hosted API. The model's own ``self_hosted`` (True/False) decides when it is set; else its base
    URL: ``localhost`` and ``*.local``, or an address on this machine or a private network (loopback, RFC 1918,
    link-local, IPv6 unique-local, the 100.64/10 shared range a Tailscale or carrier network uses), written
    out or what a host name resolves to (a Docker service ``ollama``, ``llm.internal``). A name is looked up
    once per process (``server_addresses``); one that does not resolve (offline, a typo) counts as hosted
    until it does. A model without a base URL (scripted, custom) has no server: False."""
    said = getattr(model, "self_hosted", None)
    if isinstance(said, bool):
        return said
    key = server_of(model)
    if key is None:
        return False
    host = (urlsplit(key).hostname or "").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost") or host.endswith(".local"):
        return True
    try:
        return _private(ipaddress.ip_address(host))
    except ValueError:
        pass  # a name: what it resolves to says
    addresses = server_addresses(host)
    return bool(addresses) and all(_private(a) for a in addresses)


#: How a user writes ``self_hosted`` in text (``memory-studio serve --self-hosted``, the Studio's saved models).
SELF_HOSTED_WORDS: dict[str, bool | None] = {"auto": None, "yes": True, "true": True, "no": False, "false": False}


def parse_self_hosted(value: object, *, what: str = "self_hosted") -> bool | None:
    """A ``self_hosted`` setting as a user gives it: True/False/None as they are, or the words ``auto`` (None:
    decided from the base URL by ``self_hosted``), ``yes``/``true`` or ``no``/``false`` (any case). Anything else
    raises ``ValueError`` naming ``what`` and the words it takes."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().casefold() in SELF_HOSTED_WORDS:
        return SELF_HOSTED_WORDS[value.strip().casefold()]
    raise ValueError(f"{what} must be auto (decided from the base URL), yes (the model server runs on your machine "
                     f"or network) or no (a hosted API), got {value!r}.")


_SHARED = ipaddress.ip_network("100.64.0.0/10")  # RFC 6598: carrier-grade NAT, Tailscale's addresses


def _private(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    return (address.is_loopback or address.is_private or address.is_link_local
            or (address.version == 4 and address in _SHARED))


def server_addresses(host: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]:
    """The addresses ``host`` resolves to, looked up once per process (empty, and looked up again next time,
    when it does not resolve now)."""
    with _RESOLVED_LOCK:
        known = _RESOLVED.get(host)
    if known is not None:
        return known
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        log.info("the model server %r does not resolve (%s): taken for a hosted API until it does", host, exc)
        return ()
    found = []
    for info in infos:
        try:
            found.append(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
        except ValueError:
            continue
    addresses = tuple(dict.fromkeys(found))
    with _RESOLVED_LOCK:
        _RESOLVED[host] = addresses
    return addresses


_RESOLVED: dict[str, tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]] = {}
_RESOLVED_LOCK = threading.Lock()


def gives_way(model: Any, choice: YieldChoice) -> bool:
    """Whether background calls to ``model`` give way to turns under the ``yield_to_turns`` option."""
    return yields_by_default(model) if choice == "auto" else bool(choice)


@contextmanager
def background_call(model: Any, label: str, choice: YieldChoice, *, stop: Callable[[], bool] = lambda: False,
                    said: dict[str, Any] | None = None) -> Iterator[BackgroundCall | None]:
    """A background memory call (observer, reflector, title) to ``model``: one that gives way to turns
    when ``choice`` (its ``yield_to_turns`` option) says so (``TRAFFIC.background``); else None.
    ``said`` is filled, once the block ends, with what the call's span says (``notYielded``)."""
    if not gives_way(model, choice):
        yield None
        return
    with TRAFFIC.background(model, label, stop=stop) as call:
        try:
            yield call
        finally:
            if call is not None and said is not None:
                said.update(call.span_attributes())


_CURRENT: contextvars.ContextVar[BackgroundCall | None] = contextvars.ContextVar("memory_studio_background_call",
                                                                                 default=None)
TRAFFIC = ServerTraffic()

__all__ = ["KEPT_CANNOT_STOP", "KEPT_TURN_WAITS", "SELF_HOSTED_WORDS", "TRAFFIC", "BackgroundCall", "CallYielded",
           "ServerTraffic", "TurnCall", "YieldChoice", "background_call", "current_call", "gives_way",
           "parse_self_hosted", "self_hosted", "server_addresses", "server_of", "stops_background_calls", "yields_by_default"]
