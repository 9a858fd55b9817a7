"""Running the gateway with uvicorn: in the foreground (``memory-studio serve``) or on a thread.

The listening socket is bound here, before uvicorn starts, so ``port=0`` gets a free port whose
number is known (and printed) at once, and a client connecting early simply waits in the backlog.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Literal

import uvicorn

log = logging.getLogger(__name__)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; the error names the address and what to do."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must say TCP: asyncio sets TCP_NODELAY on accepted connections only then, and without
    # it Nagle's algorithm and delayed ACKs add ~40 ms to every response.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise RuntimeError(f"Cannot listen on {host}:{port} ({exc.strerror or exc}); "
                           "choose another --port or --host.") from None
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(app: Any, *, host: str = "127.0.0.1", port: int = 8787, log_level: str = "info",
          on_ready: Callable[[str], None] | None = None, sock: socket.socket | None = None) -> None:
    """Serve ``app`` until interrupted (Ctrl+C / SIGTERM finish the requests in flight first); ``sock``: a
    socket ``bind`` made already (``host`` and ``port`` are then not used)."""
    sock = sock if sock is not None else bind(host, port)
    if on_ready is not None:
        on_ready(url_of(sock))
    # Keep idle connections longer than a load balancer's usual 60 s idle timeout, so the balancer
    # never reuses a connection the gateway is closing at that instant (a spurious 502).
    config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=30, timeout_keep_alive=75)
    with exit_on_sigterm():
        uvicorn.Server(config).run(sockets=[sock])


@contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """SIGTERM ends the process through Python's own shutdown (``SystemExit``, status 143), as Ctrl+C does.

    uvicorn shuts down gracefully on SIGTERM and then raises the signal again under the handler that was
    there before it started. With the default action there, the process died at once: no ``finally``, no
    ``atexit``, so the spans the tracers still had queued (up to about a second of turns) were lost on
    every rolling restart. Only from the main thread, and only over the default action."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def terminated(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


class GatewayServer:
    """The gateway on a background thread, on 127.0.0.1 and a free port: for tests and benchmarks.

        with GatewayServer(create_app(agents)) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="-")
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, lifespan: Literal["on", "off"] = "off") -> None:
        """``lifespan``: uvicorn's setting ("on" for an app that needs its lifespan run, as the MCP server's HTTP
        app does for its session manager)."""
        self.app = app
        self.host, self.port = host, port
        self.lifespan = lifespan
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as ``base_url``."""
        return f"{self.url}/v1"

    def start(self, timeout: float = 30.0) -> GatewayServer:
        sock = bind(self.host, self.port)
        self.url = url_of(sock)
        config = uvicorn.Config(self.app, log_config=None, access_log=False, lifespan=self.lifespan)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="gateway-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:  # a bounded wait for startup, not a timing assumption
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("The gateway server did not start; see the log.")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
        self._server = self._thread = None

    def __enter__(self) -> GatewayServer:
        return self.start() if self._server is None else self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
