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

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from core.gateway.guard import MAX_HEAD_BYTES, error_body, headers_too_large, target_too_long

log = logging.getLogger(__name__)


#: How much of an oversized request head is read (and dropped) after its 414 or 431, so that the client, still
#: sending it, reads the answer rather than a connection reset; and for how long at most.
DRAIN_BYTES = 16 * 1024 * 1024
DRAIN_SECONDS = 10.0


class HeadLimitedH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, answering a request head over ``MAX_HEAD_BYTES`` with 414 (its request line is
    not over yet) or 431 (its header lines), in the OpenAI error shape, instead of closing the connection.

    uvicorn gives a head over h11's limit a plain 400 and closes the socket at once; the client is still sending
    the head, so the kernel resets the connection (the bytes it still receives are never read) and the client sees
    a reset, not the answer. Here the answer is sent, the sending side shut (``write_eof``), and the rest of the
    head read and dropped until it ends (at most ``DRAIN_BYTES``, ``DRAIN_SECONDS``), then the connection closed.
    A head within ``MAX_HEAD_BYTES`` reaches the guard (``guard.head_refusal``), which refuses it by the same
    limits, whichever pieces it arrived in."""

    _draining = False
    _drained = 0
    _tail = b""

    def data_received(self, data: bytes) -> None:
        if not self._draining:
            super().data_received(data)
            return
        self._drained += len(data)
        seen = self._tail + data
        if b"\r\n\r\n" in seen or b"\n\n" in seen or self._drained > DRAIN_BYTES:
            self.transport.close()
        self._tail = seen[-3:]

    def send_400_response(self, msg: str) -> None:
        held, _ = self.conn.trailing_data
        if len(held) <= MAX_HEAD_BYTES:  # a malformed request: uvicorn's answer
            super().send_400_response(msg)
            return
        line_ended = b"\n" in held
        refusal = (headers_too_large if line_ended else target_too_long)(f"more than {MAX_HEAD_BYTES:,} bytes")
        body = error_body(refusal)
        for event in (h11.Response(status_code=refusal.status, headers=[
                          (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                          (b"connection", b"close")]),
                      h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        log.info("refused a request head over %d bytes (%d)", MAX_HEAD_BYTES, refusal.status)
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._draining, self._tail = True, held[-3:]
        self.loop.call_later(DRAIN_SECONDS, self.transport.close)


def server_config(app: Any, **settings: Any) -> uvicorn.Config:
    """uvicorn's settings for ``app``: ``settings`` and the head limits (``HeadLimitedH11``)."""
    return uvicorn.Config(app, http=HeadLimitedH11, h11_max_incomplete_event_size=MAX_HEAD_BYTES, **settings)


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
    config = server_config(app, log_level=log_level, timeout_graceful_shutdown=30, timeout_keep_alive=75)
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
        config = server_config(self.app, log_config=None, access_log=False, lifespan=self.lifespan)
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
