"""A request head too large for the gateway: 414 for its path and query, 431 for its header lines, never a reset.

uvicorn (h11) gave a head over 16 KB that arrived in pieces a plain-text 400 and closed the socket while the client
was still sending: the client saw "connection reset by peer", not an answer; one that arrived whole within a read
passed, however long. Now both limits (``guard.MAX_TARGET_BYTES``, ``MAX_HEADER_BYTES``) hold whatever pieces the
head comes in, in the OpenAI error shape, and nothing of the request runs. A real server, the official ``openai``
client where it can send the request (headers), ``http.client`` for a long query.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import openai
import pytest

from core import Memory, MemoryOptions
from core.agent import Agent
from core.gateway import GatewayServer, create_app
from core.gateway.guard import MAX_HEAD_BYTES, MAX_HEADER_BYTES, MAX_TARGET_BYTES, GuardPolicy
from core.llm import ScriptedModel

TOKEN = "t0ken-for-head-limits-0123456789"


@pytest.fixture
def memory(store) -> Memory:
    return Memory(store, MemoryOptions())


@pytest.fixture
def server(memory) -> Iterator[GatewayServer]:
    agent = Agent("chat", instructions="Chat.", model=ScriptedModel(lambda m, t: "ok"), memory=memory, tracer=False)
    with GatewayServer(create_app([agent], policy=GuardPolicy(token=TOKEN))) as served:
        yield served


def _get(server: GatewayServer, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    try:
        conn.request("GET", path, headers={"authorization": f"Bearer {TOKEN}", **(headers or {})})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@pytest.mark.parametrize("length", [MAX_TARGET_BYTES + 1, MAX_HEAD_BYTES + 1, 4 * 1024 * 1024])
def test_a_path_and_query_over_the_limit_is_414_not_a_reset(server, memory, length):
    path = "/api/memory/threads?resourceId="
    status, answer = _get(server, path + "a" * (length - len(path)))
    error = answer["error"]
    assert (status, error["code"], error["type"]) == (414, "uri_too_long", "invalid_request_error"), answer
    assert f"over this server's limit of {MAX_TARGET_BYTES:,} bytes. Nothing was run." in error["message"]
    # At the limit it is an ordinary request, answered by the route: here the id rule's 400 on its resourceId
    # (longer than any id; nothing is stored under it), not the guard's 414.
    status, answer = _get(server, path + "a" * (MAX_TARGET_BYTES - len(path)))
    error = answer["error"]
    assert (status, error["param"]) == (400, "resourceId"), answer
    assert "at most 256 characters" in error["message"], answer


@pytest.mark.parametrize("size", [MAX_HEADER_BYTES + 1, MAX_HEAD_BYTES + 1, 1024 * 1024])
def test_header_lines_over_the_limit_are_431_and_nothing_runs(server, memory, size):
    client = openai.OpenAI(base_url=server.base_url, api_key=TOKEN, max_retries=0, timeout=60)
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}],
                                       metadata={"thread_id": "t1", "resource_id": "ada"},
                                       extra_headers={"x-note": "n" * size})
    assert refused.value.status_code == 431
    assert isinstance(refused.value.body, dict) and refused.value.body["code"] == "headers_too_large"
    assert f"over this server's limit of {MAX_HEADER_BYTES:,} bytes. Nothing was run." in refused.value.message
    assert memory.get_thread("t1") is None
    # Many headers count together.
    status, answer = _get(server, "/api/memory/threads?resourceId=ada",
                          {f"x-note-{i}": "n" * 1000 for i in range(MAX_HEADER_BYTES // 1000 + 1)})
    assert (status, answer["error"]["code"]) == (431, "headers_too_large")
    # The same client goes on with a request of ordinary size.
    done = client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}],
                                          metadata={"thread_id": "t1", "resource_id": "ada"})
    assert done.choices[0].message.content == "ok"
