"""One rule for the ids a client names, on every gateway route and MCP tool (``access.client_id``,
``turns.client_thread``): printable, at most 256 characters, else 400 with the chat route's words.

Before, the memory API read a ``resourceId`` of 8,000 characters (answering an empty list) and a thread id of any
length or with an escape sequence (404 "no thread"), where a chat turn refused both saying why. A thread another
tool stored under such an id stays readable by its resource (a resource likewise); a conversation's thread,
which the gateway names itself from two ids and may be longer than 256, too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import anyio
import httpx2 as httpx
import openai
import pytest

from core import Memory, MemoryOptions, open_store
from core.agent import Agent
from core.gateway import GatewayServer, create_app
from core.gateway.turns import conversation_thread_id
from core.llm import ScriptedModel
from core.messages import Message
from core.scopes import delegation_resource

LONG = "r" * 8_000
RULE = "must be a printable string of at most 256 characters"


@pytest.fixture
def memory(store) -> Memory:
    return Memory(store, MemoryOptions(working_memory={"enabled": True}))


@pytest.fixture
def server(memory) -> Iterator[GatewayServer]:
    agents = [Agent("chat", instructions="Chat.", model=ScriptedModel(["ok"] * 10), memory=memory, tracer=False)]
    with GatewayServer(create_app(agents)) as server:
        yield server


def get(server: GatewayServer, path: str, **params: str) -> tuple[int, Any]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        response = client.get(path, params=params)
    return response.status_code, response.json()


def _reason(message: str) -> str:
    """What a refusal says after the parameter's name."""
    return message[message.index(RULE):]


def test_memory_routes_refuse_an_id_a_chat_turn_refuses_with_the_same_reason(server, memory):
    client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=60)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}],
                                       metadata={"thread_id": "t1", "resource_id": LONG})
    chat_reason = _reason(refused.value.body["message"])  # type: ignore[index]
    assert "8,000 characters long" in chat_reason

    answers = [get(server, "/api/memory/threads", resourceId=LONG),
               get(server, "/api/memory/delegations", resourceId=LONG),
               get(server, "/api/memory/threads/t1/messages", resourceId=LONG),
               get(server, "/api/memory/threads/t1/working-memory", resourceId=LONG)]
    for status, data in answers:
        assert status == 400, data
        assert data["error"]["param"] == "resourceId"
        assert _reason(data["error"]["message"]) == chat_reason
    # An escape sequence, and a delegation of such a resource, likewise.
    status, data = get(server, "/api/memory/threads", resourceId="ev\x1b[31mil")
    assert status == 400 and "control character (U+001B)" in data["error"]["message"]
    status, data = get(server, "/api/memory/threads", resourceId=delegation_resource(LONG, "helper"))
    assert status == 400 and "8,000 characters long" in data["error"]["message"]
    # The ordinary ids still answer, and a resource another tool stored under a long id stays readable.
    assert get(server, "/api/memory/threads", resourceId="ada")[0] == 200
    memory.save_messages([Message.user("kept", thread_id="kept-1", resource_id="q" * 300)])
    status, data = get(server, "/api/memory/threads", resourceId="q" * 300)
    assert status == 200 and [t["id"] for t in data["threads"]] == ["kept-1"]


def test_a_thread_id_no_client_could_name_is_400_unless_the_resource_has_it(server, memory):
    memory.save_messages([Message.user("kept", thread_id="t" * 300, resource_id="ada")])  # another tool's
    long_thread, escaped = quote("t" * 300, safe=""), quote("x" * 300, safe="")
    status, data = get(server, f"/api/memory/threads/{long_thread}/messages", resourceId="ada")
    assert status == 200 and [m["text"] for m in data["messages"]] == ["kept"]
    for path in (f"/api/memory/threads/{escaped}/messages", f"/api/memory/threads/{escaped}/working-memory",
                 f"/api/memory/threads/{quote('e' + chr(0x1b) + '[31m')}/messages"):
        status, data = get(server, path, resourceId="ada")
        assert status == 400, (path, data)
        assert RULE in data["error"]["message"] and "Nothing was read or written" in data["error"]["message"]
    # Another resource asking for the long thread gets the same 400 as for one that does not exist.
    status, data = get(server, f"/api/memory/threads/{long_thread}/messages", resourceId="bob")
    assert status == 400 and data["error"]["message"].replace("t" * 80, "x" * 80) == \
        get(server, f"/api/memory/threads/{escaped}/messages", resourceId="bob")[1]["error"]["message"]
    # A thread id of the right length is still a 404 when it does not exist.
    assert get(server, "/api/memory/threads/nope/messages", resourceId="ada")[0] == 404


def test_a_conversations_thread_longer_than_256_stays_readable(server):
    resource, conversation = "a" * 200, "c:" * 100
    client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=60)
    client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hello"}],
                                   metadata={"conversation_id": conversation, "resource_id": resource})
    thread = conversation_thread_id(resource, conversation)
    assert len(thread) > 256
    status, data = get(server, f"/api/memory/threads/{quote(thread, safe='')}/messages", resourceId=resource)
    assert status == 200 and [m["text"] for m in data["messages"]] == ["hello", "ok"]
    # One of a conversation id no client could send is refused, naming which part.
    bad = conversation_thread_id(resource, "c" * 300)
    status, data = get(server, f"/api/memory/threads/{quote(bad, safe='')}/messages", resourceId=resource)
    assert status == 400 and "(its conversation id)" in data["error"]["message"]


def test_mcp_tools_refuse_the_same_ids(tmp_path):
    pytest.importorskip("mcp")
    from mcp import Client

    from core.mcp_server.server import build_server
    from core.mcp_server.tools import Binding, MemoryTools

    with open_store(tmp_path / "memory.db") as store:
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True}))
        memory.save_messages([Message.user("kept", thread_id="legacy\x1b[31m", resource_id="ada"),  # another tool's
                              Message.user("long kept", thread_id="w1", resource_id="w" * 300)])
        tools = MemoryTools(memory, Binding(None, any_resource=True))

        async def main() -> list[Any]:
            async with Client(build_server(tools)) as client:
                return [await client.call_tool(name, args) for name, args in (
                    ("list_threads", {"resource": LONG}),
                    ("read_thread", {"thread": "t1", "resource": LONG}),
                    ("read_thread", {"thread": "t" * 300, "resource": "ada"}),
                    ("get_working_memory", {"thread": "e\x1b[31m", "resource": "ada"}),
                    ("search_memory", {"query": "kept", "thread": "t" * 300, "resource": "ada"}),
                    ("read_thread", {"thread": "legacy\x1b[31m", "resource": "ada"}),
                    ("read_thread", {"thread": "nope", "resource": "ada"}),
                    ("read_thread", {"thread": "w1", "resource": "w" * 300}))]

        results = anyio.run(main)
    texts = [" ".join(getattr(c, "text", "") for c in r.content) for r in results]
    assert [r.is_error for r in results] == [True, True, True, True, True, False, True, False]
    for text in texts[:5]:
        assert RULE in text, text
    assert "8,000 characters long" in texts[0] and "8,000 characters long" in texts[1]
    assert "control character (U+001B)" in texts[3]
    assert "kept" in texts[5]
    assert RULE not in texts[6] and "No thread" in texts[6]
    assert "long kept" in texts[7]
