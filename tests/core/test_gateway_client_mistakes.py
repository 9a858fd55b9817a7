"""Conversation ids that cannot collide (issue 17, item 9) and clear 4xx statuses for every client
mistake (items 6 and 10), through raw HTTP requests against a running gateway."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from core import Memory, MemoryOptions, Message
from core.storage.memory_store import MessageQuery
from core.agent import Agent
from core.gateway import GatewayServer, create_app
from core.gateway.turns import conversation_thread_id
from core.llm import ScriptedModel


@pytest.fixture
def memory(store) -> Memory:
    return Memory(store, MemoryOptions(last_messages=20, working_memory={"enabled": True},
                                       max_message_bytes=10_000, max_working_memory_bytes=1_000))


@pytest.fixture
def server(memory) -> Iterator[GatewayServer]:
    def echo(messages: list[dict[str, Any]], tools: Any) -> str:
        return f"{sum(1 for m in messages if m['role'] == 'user')} user message(s)"

    agent = Agent("echo", instructions="Echo.", model=ScriptedModel(echo, context_window=500), memory=memory,
                  tracer=False)
    with GatewayServer(create_app([agent], token="")) as server:
        yield server


def send(server: GatewayServer, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    conn.request(method, path, data, {"content-type": "application/json", **(headers or {})})
    response = conn.getresponse()
    text = response.read()
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(text) if text else None


def chat(server: GatewayServer, text: str = "hi", **fields: Any) -> tuple[int, dict[str, str], Any]:
    return send(server, "POST", "/v1/chat/completions",
                {"model": "echo", "messages": [{"role": "user", "content": text}], **fields})


# -- item 9 -----------------------------------------------------------------------------------------


def test_conversation_ids_cannot_collide():
    assert conversation_thread_id("a:b", "c") != conversation_thread_id("a", "b:c")
    assert conversation_thread_id("a%3Ab", "c") != conversation_thread_id("a:b", "c")
    assert conversation_thread_id("bob", "1") == "conversation:bob:1"


def test_two_resources_never_share_a_conversation_thread(server, memory):
    _, first, _ = chat(server, "from a:b", user="a:b", metadata={"conversation_id": "c"})
    _, second, _ = chat(server, "from a", user="a", metadata={"conversation_id": "b:c"})
    assert first["x-thread-id"] != second["x-thread-id"]
    assert memory.get_thread(first["x-thread-id"]).resource_id == "a:b"
    assert memory.get_thread(second["x-thread-id"]).resource_id == "a"


def test_nobody_can_take_bobs_conversation_first(server, memory):
    # Mallory names the thread bob's conversation "1" would use, first: refused, whatever the form.
    for thread in ("conversation:bob:1", conversation_thread_id("bob", "1")):
        status, _, body = chat(server, "mine now", metadata={"thread_id": thread, "resource_id": "mallory"})
        assert status == 400 and "conversation_id" in body["error"]["message"]
        status, _, _ = send(server, "POST", "/v1/chat/completions", {
            "model": "echo", "messages": [{"role": "user", "content": "x"}]},
            headers={"x-thread-id": thread, "x-resource-id": "mallory"})
        assert status == 400
    # The old naming ("bob:1") is just a thread id now: Mallory may own it, and Bob is not locked out.
    assert chat(server, "mine", metadata={"thread_id": "bob:1", "resource_id": "mallory"})[0] == 200
    status, headers, body = chat(server, "hello", user="bob", metadata={"conversation_id": "1"})
    assert status == 200 and headers["x-thread-id"] == "conversation:bob:1"
    assert body["memory"]["thread_id"] == "conversation:bob:1"


def test_a_conversation_begun_under_the_old_naming_goes_on_in_its_thread(server, memory):
    memory.save_messages([Message.user("before the upgrade", thread_id="carol:7", resource_id="carol")])
    for stream in (False, True):
        status, headers, _ = send(server, "POST", "/v1/chat/completions", {
            "model": "echo", "stream": stream, "user": "carol", "metadata": {"conversation_id": "7"},
            "messages": [{"role": "user", "content": "after"}]}) if not stream else _stream(server)
        assert status == 200 and headers["x-thread-id"] == "carol:7"
    texts = [m.text for m in memory.recall(thread_id="carol:7").messages]
    assert texts[:2] == ["before the upgrade", "after"] and "streamed" in texts
    assert memory.get_thread("conversation:carol:7") is None


def _stream(server: GatewayServer) -> tuple[int, dict[str, str], Any]:
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "model": "echo", "stream": True, "user": "carol", "metadata": {"conversation_id": "7"},
        "messages": [{"role": "user", "content": "streamed"}]}), {"content-type": "application/json"})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    assert b"data: [DONE]" in body
    return response.status, {k.lower(): v for k, v in response.getheaders()}, None


# -- items 6 and 10 ---------------------------------------------------------------------------------


MISTAKES: list[tuple[str, str, Any, bytes | None, int]] = [
    ("message over the size limit", "/v1/chat/completions",
     {"model": "echo", "messages": [{"role": "user", "content": "x" * 20_000}]}, None, 413),
    ("prompt over the context window", "/v1/chat/completions",
     {"model": "echo", "messages": [{"role": "user", "content": "word " * 900}]}, None, 400),
    ("lone surrogate", "/v1/chat/completions", None,
     b'{"model": "echo", "messages": [{"role": "user", "content": "a\\udc00"}]}', 400),
    ("NUL in a thread id", "/v1/chat/completions",
     {"model": "echo", "messages": [{"role": "user", "content": "x"}], "metadata": {"thread_id": "t\u0000"}}, None,
     400),
    ("deep JSON", "/v1/chat/completions", None, b'{"model": "echo", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}",
     400),
    ("huge number", "/v1/chat/completions", None, b'{"model": "echo", "n": ' + b"9" * 5000 + b"}", 400),
    ("NaN", "/v1/chat/completions", None, b'{"model": "echo", "n": NaN, "messages": []}', 400),
    ("model not a string", "/v1/chat/completions", {"model": ["echo"], "messages": []}, None, 400),
    ("messages not a list", "/v1/chat/completions", {"model": "echo", "messages": "hi"}, None, 400),
    ("content null", "/v1/chat/completions", {"model": "echo", "messages": [{"role": "user", "content": None}]},
     None, 400),
    ("metadata not an object", "/v1/chat/completions",
     {"model": "echo", "messages": [{"role": "user", "content": "x"}], "metadata": "t1"}, None, 400),
    ("working memory over its limit", "/api/memory/threads/t1/working-memory?resourceId=ada",
     {"workingMemory": "# Notes\n" + "y" * 2_000}, None, 413),
    ("working memory of the wrong type", "/api/memory/threads/t1/working-memory?resourceId=ada",
     {"workingMemory": ["not", "markdown"]}, None, 400),
    # A working-memory write may create the resource: its id follows the chat route's rule (printable, <= 256).
    ("control character in a written resource id", "/api/memory/threads/t1/working-memory?resourceId=ev%1B%5B31mil",
     {"workingMemory": "# Notes"}, None, 400),
    ("written resource id over 256 characters", "/api/memory/threads/t1/working-memory?resourceId=" + "r" * 257,
     {"workingMemory": "# Notes"}, None, 400),
    ("NUL in a path thread id", "/api/memory/threads/t%00x/messages?resourceId=ada", None, None, 400),
    ("lone surrogate in a path", "/api/memory/threads/%ED%A0%80/messages?resourceId=ada", None, None, 404),
]


@pytest.mark.parametrize("what, path, body, raw, status", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_client_mistakes_are_4xx_with_the_reason(server, memory, what, path, body, raw, status):
    method = "PUT" if "working-memory" in path else ("POST" if body is not None or raw is not None else "GET")
    got, _, reply = send(server, method, path, body, raw=raw)
    assert got == status, reply
    assert reply["error"]["type"] != "server_error" and reply["error"]["message"]
    assert memory.list_threads(resource_id="default").total == 0  # nothing was stored


def test_a_lone_surrogate_in_working_memory_is_named_and_the_database_is_not(server, memory, store):
    """The storage layer's refusal named the server's database file and "\\ud800" whatever the character
    was; the gateway now refuses the value itself, naming the character."""
    raw = b'{"workingMemory": "# Notes\\n- likes caf\\udc00"}'
    got, _, reply = send(server, "PUT", "/api/memory/threads/t1/working-memory?resourceId=ada", raw=raw)
    assert got == 400 and reply["error"]["param"] == "workingMemory"
    assert "U+DC00" in reply["error"]["message"] and "Nothing was written" in reply["error"]["message"]
    assert str(store.location.display) not in reply["error"]["message"]
    assert memory.get_working_memory(resource_id="ada") is None


def test_a_reply_over_the_message_limit_is_the_agents_failure_not_the_clients(memory):
    """A two-character question whose reply (with its tool results) was over max_message_bytes got 413
    "Message <an id the client never saw> is ... bytes ... Shorten it": the client's request was small and
    nothing in it could be shortened. It is the agent's failure (502, like a model's), said as such."""
    import openai

    model = ScriptedModel(lambda m, t: "y" * 20_000)
    agent = Agent("wordy", instructions="Talk.", model=model, memory=memory, tracer=False)
    with GatewayServer(create_app([agent], token="")) as server:
        status, headers, body = send(server, "POST", "/v1/chat/completions", {
            "model": "wordy", "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"thread_id": "w1", "resource_id": "ada"}})
        # The SDK's default retries 5xx; this one says not to (the same reply, its tools run again).
        assert headers.get("x-should-retry") == "false"
        calls = len(model.requests)
        retrying = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=2, timeout=60)
        with pytest.raises(openai.APIError):
            retrying.chat.completions.create(model="wordy", messages=[{"role": "user", "content": "hi"}],
                                             metadata={"thread_id": "w3", "resource_id": "ada"})
        assert len(model.requests) == calls + 1  # asked once, not three times
        client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=60)
        with pytest.raises(openai.APIError) as streamed:
            for _ in client.chat.completions.create(model="wordy", stream=True,
                                                    messages=[{"role": "user", "content": "hi"}],
                                                    metadata={"thread_id": "w2", "resource_id": "ada"}):
                pass
        # The client's own message over the limit stays its mistake.
        own, _, own_body = send(server, "POST", "/v1/chat/completions", {
            "model": "wordy", "messages": [{"role": "user", "content": "x" * 20_000}]})
    assert (status, body["error"]["code"], body["error"]["type"]) == (502, "reply_too_large", "api_error")
    for message in (body["error"]["message"], streamed.value.message):
        assert "The agent's reply is 40," in message and "limit of 10,000 bytes" in message, message
        assert "not saved" in message and "Shorten it" not in message
    assert (own, own_body["error"]["code"]) == (413, "too_large") and "Shorten it" in own_body["error"]["message"]
    assert memory.get_thread("w1") is None and memory.get_thread("w2") is None  # nothing of either turn
    assert memory.get_thread("w3") is None


def test_an_id_header_outside_ascii_is_refused_not_read_as_latin_1(server, memory):
    """A header carries bytes, which the server read as Latin-1: curl's UTF-8 "josé" in x-resource-id became
    the resource "josÃ©", a memory of its own that also belongs to any client naming "josÃ©" in metadata.
    Such a header is now refused, saying to send the id in metadata (UTF-8 JSON), which keeps working."""
    utf8 = "josé".encode().decode("latin-1")  # what http.client sends for these bytes: UTF-8, as curl does
    for header, value in (("x-resource-id", utf8), ("x-thread-id", "t-é"), ("x-conversation-id", utf8)):
        got, _, reply = send(server, "POST", "/v1/chat/completions",
                             {"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
                             headers={header: value})
        assert got == 400 and reply["error"]["param"] == header, reply
        assert "metadata." in reply["error"]["message"] and "ASCII" in reply["error"]["message"]
    assert memory.list_threads(resource_id="josÃ©").total == 0 and memory.list_threads(resource_id="default").total == 0
    got, headers, reply = chat(server, metadata={"resource_id": "josé", "thread_id": "t-é"})
    assert got == 200 and reply["memory"]["resource_id"] == "josé"
    assert memory.get_thread("t-é").resource_id == "josé"
    # ASCII ids in headers are read as before.
    got, headers, _ = send(server, "POST", "/v1/chat/completions",
                           {"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
                           headers={"x-resource-id": "jose", "x-thread-id": "t-1"})
    assert got == 200 and memory.get_thread("t-1").resource_id == "jose"


def test_a_thread_without_an_owner_is_nobodys(server, memory, store):
    """A thread another program stored without a resource (an empty resourceId; the engine never stores one)
    passed every ownership check: any client read its messages through the memory API under any resourceId
    and added turns to it. It is refused now on every route, and nothing is written to it: a chat turn gets 403 saying
    why, the memory API answers as for a thread that does not exist (404; working memory: the resource's own)."""
    import openai

    memory.save_messages([Message.user("the victim's secret kiwi-777", thread_id="orphan", resource_id="victim")])
    with store.db.write() as conn:
        conn.exec_driver_sql('UPDATE mastra_threads SET "resourceId" = ? WHERE id = ?', ("", "orphan"))
    before = [m.id for m in memory.store.memory.list_messages(MessageQuery(thread_id="orphan"))]
    replies = [send(server, "GET", "/api/memory/threads/orphan/messages?resourceId=mallory"),
               send(server, "GET", "/api/memory/threads/orphan/working-memory?resourceId=mallory"),
               send(server, "PUT", "/api/memory/threads/orphan/working-memory?resourceId=mallory",
                    {"workingMemory": "# Notes"}),
               chat(server, "what was said here?", metadata={"thread_id": "orphan", "resource_id": "mallory"}),
               chat(server, "and streamed?", stream=True, metadata={"thread_id": "orphan", "resource_id": "mallory"})]
    assert (replies[0][0], replies[0][2]["error"]["code"]) == (404, "not_found")
    for status, _, reply in replies[1:3]:
        assert status == 200 and (reply["threadExists"], reply["resourceId"]) == (False, "mallory"), reply
    for status, _, reply in replies[3:]:
        assert status == 403 and reply["error"]["code"] == "thread_ownership", reply
        assert "has no owner" in reply["error"]["message"]
    assert "kiwi" not in json.dumps([r[2] for r in replies])
    client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=60)
    with pytest.raises(openai.PermissionDeniedError, match="has no owner"):
        client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "hi"}], user="mallory",
                                       metadata={"thread_id": "orphan"})
    assert [m.id for m in memory.store.memory.list_messages(MessageQuery(thread_id="orphan"))] == before
    assert memory.get_working_memory(thread_id="orphan", resource_id="victim") is None
    assert memory.get_working_memory(resource_id="victim") is None


def test_a_body_in_utf_16_cannot_slip_past_the_nesting_limit(server, memory):
    """The guard counts brackets in the body's bytes as UTF-8 reads them, but the app let `json.loads` guess the
    encoding, which reads UTF-16 too: a UTF-16 body with a character whose bytes hold a quote ("≢" is 62 22)
    hid its brackets from the count, and a working memory nested 900 deep was stored (the limit is 64). A body
    is now read as UTF-8 only; UTF-16 is refused saying so, and a UTF-8 byte-order mark is still accepted."""
    deep = '{"workingMemory": {"note": "\u2262", "deep": ' + "[" * 900 + "]" * 900 + "}}"
    path = "/api/memory/threads/t1/working-memory?resourceId=ada"
    for raw in (deep.encode("utf-16-le"), deep.encode("utf-16")):
        got, _, reply = send(server, "PUT", path, raw=raw)
        assert got == 400 and "UTF-8" in reply["error"]["message"], reply
    assert memory.get_working_memory(resource_id="ada") is None
    got, _, reply = send(server, "PUT", path, raw=deep.encode("utf-8"))
    assert got == 400 and reply["error"]["code"] == "json_too_deep"
    chat_body = json.dumps({"model": "echo", "messages": [{"role": "user", "content": "hi"}]})
    got, _, reply = send(server, "POST", "/v1/chat/completions", raw=chat_body.encode("utf-16"))
    assert got == 400 and "UTF-8" in reply["error"]["message"]
    got, _, reply = send(server, "POST", "/v1/chat/completions", raw=chat_body.encode("utf-8-sig"))
    assert got == 200, reply


def test_a_400_repeats_at_most_80_characters_of_what_the_client_sent(server):
    """'stream', a content part's type, 'model', a page number or a thread id as long as the body limit came
    back whole in the error message (megabytes of answer, and of log line beside it)."""
    huge = "x" * 200_000
    answers = [chat(server, stream=huge),
               send(server, "POST", "/v1/chat/completions", {"model": "echo", "messages": [
                   {"role": "user", "content": [{"type": huge}]}]}),
               send(server, "POST", "/v1/chat/completions", {"model": huge, "messages": [
                   {"role": "user", "content": "hi"}]}),
               send(server, "GET", "/api/memory/threads?resourceId=ada&perPage=" + "9x" * 3000),
               send(server, "GET", "/api/memory/threads?resourceId=ada&perPage=" + "9" * 4000),
               send(server, "GET", "/api/memory/threads?resourceId=ada&agentId=" + "a" * 6000),
               send(server, "GET", "/api/memory/threads/" + "t" * 6000 + "/messages?resourceId=ada")]
    for status, _, body in answers:
        message = body["error"]["message"]
        assert status in (400, 404) and len(message) < 600 and "…" in message, (status, message[:300])
