"""Slow readers cannot take every worker (issue 17, item 7): streamed writes have a deadline, and the
memory API has workers of its own. Clients here read a reply's headers, then never read again."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from core import Memory, MemoryOptions
from core.agent import Agent
from core.gateway import GatewayServer, create_app
from core.llm import ScriptedModel
from core.llm.base import ChatChunk

BIG = "x" * (16 * 1024 * 1024)  # far more than the socket buffers hold


class Chatty(ScriptedModel):
    """Streams its reply in 64 KB deltas, as a model producing a long answer does: many more events
    than the gateway buffers, so a stalled client holds the turn's worker unless something lets go."""

    def stream(self, messages, **kwargs):  # type: ignore[no-untyped-def]
        for chunk in super().stream(messages, **kwargs):
            if chunk.text_delta:
                for start in range(0, len(chunk.text_delta), 65536):
                    yield ChatChunk(text_delta=chunk.text_delta[start:start + 65536])
            else:
                yield chunk


@pytest.fixture
def agents(store) -> list[Agent]:
    memory = Memory(store, MemoryOptions(last_messages=5))
    return [Agent("big", instructions="Talk a lot.", model=Chatty(lambda m, t: BIG), memory=memory,
                  tracer=False),
            Agent("small", instructions="Be brief.", model=ScriptedModel(lambda m, t: "ok"), memory=memory,
                  tracer=False)]


@contextmanager
def stalled_readers(server: GatewayServer, n: int) -> Iterator[list[socket.socket]]:
    """``n`` clients whose streamed turns have started (their headers came), that then stop reading."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    body = json.dumps({"model": "big", "stream": True, "messages": [{"role": "user", "content": "go"}],
                       "metadata": {"resource_id": "slow"}}).encode()
    sockets = []
    try:
        for _ in range(n):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a reader that takes almost nothing
            sock.settimeout(60)
            sock.connect((host, int(port)))
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (host.encode(), port.encode(), len(body), body))
            assert sock.recv(12) == b"HTTP/1.1 200"  # the turn runs on a worker now
            sockets.append(sock)
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def request(server: GatewayServer, method: str, path: str, body: object = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    conn.request(method, path, None if body is None else json.dumps(body), {"content-type": "application/json"})
    response = conn.getresponse()
    result = response.status, json.loads(response.read())
    conn.close()
    return result


def test_the_memory_api_and_health_answer_while_every_turn_worker_is_held(agents):
    app = create_app(agents, token="", max_concurrency=2, stream_write_timeout=600)
    with GatewayServer(app) as server, stalled_readers(server, 2):
        assert request(server, "GET", "/health") == (200, {"status": "ok"})
        status, data = request(server, "GET", "/api/memory/threads?resourceId=slow")
        assert status == 200 and data["total"] == 0  # the stalled turns are not saved (yet)


def test_a_stream_nobody_reads_releases_its_worker(agents):
    app = create_app(agents, token="", max_concurrency=1, stream_write_timeout=0.5)
    with GatewayServer(app) as server, stalled_readers(server, 1):
        # The only turn worker is held by the stalled stream until its write deadline passes.
        status, data = request(server, "POST", "/v1/chat/completions",
                               {"model": "small", "messages": [{"role": "user", "content": "hi"}]})
        assert status == 200 and data["choices"][0]["message"]["content"] == "ok"
