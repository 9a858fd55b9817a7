"""The gateway's memory API: threads, messages and working memory over HTTP, against a real server."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import openai
import pytest

from core import Memory, MemoryOptions
from core.agent import Agent
from core.gateway import GatewayServer, create_app
from core.llm import ScriptedModel
from core.messages import Message

TEMPLATE = "# Profile\n- Name:\n- Likes:\n"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}


def show_system(messages: list[dict[str, Any]], tools: Any) -> str:
    """Replies with the working-memory block the model was sent."""
    return next((m["content"] for m in messages if m["role"] == "system" and "Profile" in (m["content"] or "")), "none")


@pytest.fixture
def memory(store) -> Memory:
    return Memory(store, MemoryOptions(last_messages=20, working_memory={"enabled": True, "template": TEMPLATE}))


@pytest.fixture
def server(store, memory) -> Iterator[GatewayServer]:
    structured = Memory(store, MemoryOptions(working_memory={"enabled": True, "schema": SCHEMA}))
    agents = [Agent("chat", instructions="Chat.", model=ScriptedModel(show_system), memory=memory, tracer=False),
              Agent("forms", instructions="Forms.", model=ScriptedModel(["ok"] * 5), memory=structured, tracer=False)]
    with GatewayServer(create_app(agents)) as server:
        yield server


def call(server: GatewayServer, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    conn.request(method, path, None if body is None else json.dumps(body), {"content-type": "application/json"})
    response = conn.getresponse()
    status, data = response.status, json.loads(response.read())
    conn.close()
    return status, data


def chat(server: GatewayServer, text: str, thread: str, resource: str, agent: str = "chat") -> str:
    client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=60)
    reply = client.chat.completions.create(model=agent, messages=[{"role": "user", "content": text}],
                                           metadata={"thread_id": thread, "resource_id": resource})
    return reply.choices[0].message.content or ""


def test_threads_of_a_resource_are_listed_by_page(server):
    for i in range(3):
        chat(server, f"hello {i}", f"t{i}", "ada")
    chat(server, "other", "b1", "bob")
    status, data = call(server, "GET", "/api/memory/threads?resourceId=ada&agentId=chat")
    assert status == 200 and data["total"] == 3 and not data["hasMore"]
    assert {t["id"] for t in data["threads"]} == {"t0", "t1", "t2"}
    assert all(t["resourceId"] == "ada" for t in data["threads"])
    status, page = call(server, "GET", "/api/memory/threads?resourceId=ada&perPage=2&agentId=chat")
    assert len(page["threads"]) == 2 and page["hasMore"]
    # Both agents share one database, so listing threads needs no agentId.
    assert call(server, "GET", "/api/memory/threads?resourceId=bob")[1]["total"] == 1
    status, data = call(server, "GET", "/api/memory/threads")
    assert status == 400 and data["error"]["param"] == "resourceId"
    status, data = call(server, "GET", "/api/memory/threads?resourceId=ada&perPage=lots")
    assert status == 400 and "whole number" in data["error"]["message"]


def test_messages_of_a_thread_oldest_first_and_owner_checked(server):
    chat(server, "first", "t1", "ada")
    chat(server, "second", "t1", "ada")
    status, data = call(server, "GET", "/api/memory/threads/t1/messages?resourceId=ada")
    assert status == 200 and data["total"] == 4
    assert [(m["role"], m["text"]) for m in data["messages"]][::2] == [("user", "first"), ("user", "second")]
    assert all(m["threadId"] == "t1" and m["content"]["format"] == 2 for m in data["messages"])
    status, newest = call(server, "GET", "/api/memory/threads/t1/messages?resourceId=ada&perPage=1")
    assert [m["role"] for m in newest["messages"]] == ["assistant"] and newest["hasMore"]
    # Another resource's thread is answered as a missing one (the owner, another user, is not named).
    status, data = call(server, "GET", "/api/memory/threads/t1/messages?resourceId=mallory")
    assert status == 404 and data["error"]["code"] == "not_found"
    assert "ada" not in data["error"]["message"] and "first" not in json.dumps(data)
    status, missing = call(server, "GET", "/api/memory/threads/nope/messages?resourceId=mallory")
    assert status == 404 and missing["error"]["type"] == "not_found_error"
    assert missing == json.loads(json.dumps(data).replace("'t1'", "'nope'"))
    # Issue 17: without a resource, no thread is readable (it used to read any thread).
    status, data = call(server, "GET", "/api/memory/threads/t1/messages")
    assert status == 400 and data["error"]["param"] == "resourceId"


def test_working_memory_read_and_written_and_seen_by_the_next_turn(server):
    chat(server, "hi", "t1", "ada")
    status, data = call(server, "GET", "/api/memory/threads/t1/working-memory?resourceId=ada&agentId=chat")
    assert status == 200 and data == {"workingMemory": None, "format": "markdown", "scope": "resource",
                                      "threadExists": True, "resourceId": "ada"}
    profile = "# Profile\n- Name: Ada\n- Likes: tea\n"
    status, data = call(server, "PUT", "/api/memory/threads/t1/working-memory?resourceId=ada&agentId=chat",
                        {"workingMemory": profile})
    assert status == 200 and data["workingMemory"] == profile
    assert call(server, "GET", "/api/memory/threads/t1/working-memory?resourceId=ada&agentId=chat")[1][
        "workingMemory"] == profile
    assert "- Name: Ada" in chat(server, "who am I?", "t1", "ada")
    # Another resource can neither read nor overwrite it through this thread: to it, the thread is not there (its
    # own working memory, resource-scoped, is read and written as through a thread not stored yet).
    for method, body in (("GET", None), ("PUT", {"workingMemory": "# Profile\n- Name: Mallory\n"})):
        status, data = call(server, method, f"/api/memory/threads/t1/working-memory?resourceId=mallory&agentId=chat",
                            body)
        assert status == 200 and data["threadExists"] is False and data["resourceId"] == "mallory"
        assert "Ada" not in json.dumps(data)
    # Nor can a caller that names no resource (issue 17: that used to read and write any thread).
    for method, body in (("GET", None), ("PUT", {"workingMemory": "# Profile\n- Name: Nobody\n"})):
        status, data = call(server, method, "/api/memory/threads/t1/working-memory?agentId=chat", body)
        assert status == 400 and data["error"]["param"] == "resourceId"
    assert call(server, "GET", "/api/memory/threads/t1/working-memory?resourceId=ada&agentId=chat")[1][
        "workingMemory"] == profile


def wm_call(server: GatewayServer, method: str, path: str, body: Any = None,
            headers: dict[str, str] | None = None) -> tuple[int, Any, str | None]:
    """``call`` with request headers, answering the reply's ETag too."""
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    conn.request(method, path, None if body is None else json.dumps(body),
                 {"content-type": "application/json", **(headers or {})})
    response = conn.getresponse()
    status, data, etag = response.status, json.loads(response.read()), response.getheader("ETag")
    conn.close()
    return status, data, etag


def test_a_read_edit_write_client_never_overwrites_a_change_it_did_not_see(server, memory):
    """GET and PUT answer an ETag; a PUT with If-Match writes only over the value the client read: an agent's
    (or another client's) change meanwhile gets 412 with the ETag of the value now, and is kept."""
    chat(server, "hi", "t1", "ada")
    path = "/api/memory/threads/t1/working-memory?resourceId=ada&agentId=chat"
    status, data, none_tag = wm_call(server, "GET", path)
    assert status == 200 and data["workingMemory"] is None and none_tag == '"none"'
    # If-Match: * means "over an existing value": there is none yet.
    status, data, _ = wm_call(server, "PUT", path, {"workingMemory": "# Profile\n- Name: Ada\n"}, {"If-Match": "*"})
    assert status == 412 and data["error"]["code"] == "precondition_failed"
    status, data, first = wm_call(server, "PUT", path, {"workingMemory": "# Profile\n- Name: Ada\n"},
                                  {"If-Match": none_tag})
    assert status == 200 and first not in (None, none_tag)
    assert wm_call(server, "GET", path)[2] == first
    # The agent writes while a client edits what it read.
    memory.update_working_memory(resource_id="ada", working_memory="# Profile\n- Name: Ada\n- Likes: tea\n",
                                 author="agent")
    status, data, now = wm_call(server, "PUT", path, {"workingMemory": "# Profile\n- Name: Ada L.\n"},
                                {"If-Match": first})
    assert status == 412 and data["error"]["code"] == "precondition_failed" and "Read it again" in data["error"]["message"]
    assert now not in (None, first) and wm_call(server, "GET", path)[2] == now
    assert wm_call(server, "GET", path)[1]["workingMemory"] == "# Profile\n- Name: Ada\n- Likes: tea\n"
    # Redone on what it holds now (a weak tag and a list are read as such): written.
    status, data, after = wm_call(server, "PUT", path, {"workingMemory": "# Profile\n- Name: Ada L.\n- Likes: tea\n"},
                                  {"If-Match": f'"stale", W/{now}'})
    assert status == 200 and data["workingMemory"] == "# Profile\n- Name: Ada L.\n- Likes: tea\n" and after != now
    # Without If-Match a PUT replaces the value, as Mastra's API does.
    assert wm_call(server, "PUT", path, {"workingMemory": "# Profile\n- Name: B\n"})[0] == 200


def raw_wm(server: GatewayServer, method: str, path: str, body: Any = None,
           headers: tuple[tuple[str, str], ...] = ()) -> tuple[int, Any, str | None]:
    """A call whose headers are sent line by line as given, a name on several lines too (clients fold them)."""
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    data = b"" if body is None else json.dumps(body).encode()
    conn.putrequest(method, path)
    for name, value in (("content-type", "application/json"), ("content-length", str(len(data))), *headers):
        conn.putheader(name, value)
    conn.endheaders(data)
    response = conn.getresponse()
    status, text, tag = response.status, response.read(), response.getheader("ETag")
    conn.close()
    return status, json.loads(text) if text else None, tag


def test_a_conditional_header_sent_on_several_lines_is_one_list(server, memory):
    """If-Match on two lines is the list of both (RFC 9110 section 5.3), as a proxy folding them reads it; it was
    read by its first line only, so the ETag the client read, on the second line, was refused 412."""
    chat(server, "hi", "t1", "ada")
    path = "/api/memory/threads/t1/working-memory?resourceId=ada&agentId=chat"
    status, _, first = raw_wm(server, "PUT", path, {"workingMemory": "# Profile\n- Name: Ada\n"})
    assert status == 200 and first is not None
    status, data, after = raw_wm(server, "PUT", path, {"workingMemory": "# Profile\n- Name: Ada L.\n"},
                                 (("If-Match", '"stale"'), ("If-Match", first)))
    assert status == 200 and data["workingMemory"] == "# Profile\n- Name: Ada L.\n" and after != first
    # Neither line names the value now: refused, whichever line held which tag.
    status, data, now = raw_wm(server, "PUT", path, {"workingMemory": "x"}, (("If-Match", first), ("If-Match", '"b"')))
    assert status == 412 and data["error"]["param"] == "If-Match" and now == after
    # Under an Idempotency-Key every line is part of the request: the same key without the second line is another one.
    lines = (("Idempotency-Key", "k-lines"), ("If-Match", '"a"'), ("If-Match", after or ""))
    status, _, after = raw_wm(server, "PUT", path, {"workingMemory": "# Profile\n- Name: Ada L.\n"}, lines)
    assert status == 200
    status, data, _ = raw_wm(server, "PUT", path, {"workingMemory": "# Profile\n- Name: Ada L.\n"}, lines[:2])
    assert status == 422 and data["error"]["code"] == "idempotency_key_reused"
    # * beside tags means nothing: 400 naming the header and its lines, for both headers; nothing written.
    for name in ("If-Match", "If-None-Match"):
        status, data, _ = raw_wm(server, "PUT", path, {"workingMemory": "x"}, ((name, "*"), (name, after or "")))
        assert status == 400 and data["error"]["param"] == name and "sent on 2 lines" in data["error"]["message"]
    assert memory.get_working_memory(thread_id="t1", resource_id="ada") == "# Profile\n- Name: Ada L.\n"


def test_if_none_match_answers_304_to_a_read_and_never_overwrites_on_a_write(server, memory):
    """If-None-Match was ignored: a PUT with If-None-Match: * (create, never replace) overwrote the value another
    client wrote first, and a polling GET read the whole value each time. Now the PUT is 412 over a value, a GET
    whose ETag still holds is 304 (its lines joined as If-Match's), and a GET's failed If-Match is 412."""
    chat(server, "hi", "t2", "bea")
    path = "/api/memory/threads/t2/working-memory?resourceId=bea&agentId=chat"
    status, data, tag = raw_wm(server, "PUT", path, {"workingMemory": "# Mine\n"}, (("If-None-Match", "*"),))
    assert status == 200 and data["workingMemory"] == "# Mine\n"
    status, data, now = raw_wm(server, "PUT", path, {"workingMemory": "# Theirs\n"}, (("If-None-Match", "*"),))
    assert status == 412 and data["error"]["param"] == "If-None-Match" and now == tag
    status, data, _ = raw_wm(server, "PUT", path, {"workingMemory": "# Theirs\n"}, (("If-None-Match", tag or ""),))
    assert status == 412 and memory.get_working_memory(thread_id="t2", resource_id="bea") == "# Mine\n"
    assert raw_wm(server, "GET", path, headers=(("If-None-Match", tag or ""),)) == (304, None, tag)
    assert raw_wm(server, "GET", path, headers=(("If-None-Match", '"old"'), ("If-None-Match", f"W/{tag}"))) == \
        (304, None, tag)
    status, data, _ = raw_wm(server, "GET", path, headers=(("If-None-Match", '"old"'),))
    assert status == 200 and data["workingMemory"] == "# Mine\n"
    status, data, _ = raw_wm(server, "GET", path, headers=(("If-Match", '"old"'),))
    assert status == 412 and data["error"]["param"] == "If-Match"
    # An ETag it no longer holds: written.
    status, data, _ = raw_wm(server, "PUT", path, {"workingMemory": "# Next\n"}, (("If-None-Match", '"old"'),))
    assert status == 200 and memory.get_working_memory(thread_id="t2", resource_id="bea") == "# Next\n"


def test_schema_working_memory_and_choosing_the_agent(server):
    path = "/api/memory/threads/f1/working-memory?resourceId=ada"
    status, data = call(server, "GET", path)
    assert status == 400 and data["error"]["param"] == "agentId" and "'forms'" in data["error"]["message"]
    status, data = call(server, "PUT", path + "&agentId=forms", {"workingMemory": {"name": "Ada", "age": 36}})
    assert status == 200 and data["workingMemory"] == {"name": "Ada", "age": 36} and data["format"] == "json"
    assert data["threadExists"] is False  # resource-scoped: no thread needed yet
    status, data = call(server, "PUT", path + "&agentId=forms", {"workingMemory": {"age": "old"}})
    assert status == 400 and "age" in data["error"]["message"]
    status, data = call(server, "PUT", path + "&agentId=forms", {"memory": "wrong key"})
    assert status == 400 and data["error"]["param"] == "workingMemory"
    status, data = call(server, "GET", path + "&agentId=nobody")
    assert status == 404


def test_a_working_memory_put_of_the_wrong_kind_names_what_came_as_json_does(server):
    """A PUT whose workingMemory is no object for JSON working memory (null, an array) or no string for Markdown said
    "got NoneType" / "got list" / "got dict": Python's type names. It now names what came as JSON does and what to
    send, with a 400, and nothing is written."""
    forms = "/api/memory/threads/f1/working-memory?resourceId=ada&agentId=forms"
    assert call(server, "PUT", forms, {"workingMemory": {"name": "Ada"}})[0] == 200
    for sent, came in ((None, "null"), ([1, 2], "an array (2 items)"),
                       ("[]", "JSON text that reads as an array (0 items)")):
        status, data = call(server, "PUT", forms, {"workingMemory": sent})
        assert status == 400 and data["error"]["message"] == (
            'The JSON working memory must be an object of all its fields, such as {"name": "Ada"}, '
            f"not {came}. Nothing changed."), data
    assert call(server, "GET", forms)[1]["workingMemory"] == {"name": "Ada"}
    chat_wm = "/api/memory/threads/c1/working-memory?resourceId=ada&agentId=chat"
    status, data = call(server, "PUT", chat_wm, {"workingMemory": {"name": "Ada"}})
    assert status == 400 and data["error"]["message"] == (
        "Markdown working memory must be a string (its whole text), not an object (1 key). Nothing changed. "
        "Configure working_memory.schema to store objects."), data


def test_a_number_beyond_a_double_is_refused_as_import_refuses_it(server, store):
    """A working-memory PUT stored an integer of 4,000 digits whole (Mastra reads it as Infinity), while 1e400
    was refused and import refused both. Every body the gateway reads now takes numbers by import's rule
    (``stored_text.json_double`` / ``json_whole``): 400 naming the number, nothing written; so does a chat
    request's metadata, which was stored with null for 1e400 and the digits whole."""
    path = "/api/memory/threads/f1/working-memory?resourceId=ada&agentId=forms"
    assert call(server, "PUT", path, {"workingMemory": {"name": "Ada", "age": 36}})[0] == 200
    for age in ("1" + "0" * 4000, "-" + "9" * 309, "1e400"):
        status, data = raw(server, "PUT", path, '{"workingMemory": {"name": "Eve", "age": %s}}' % age)
        assert (status, data["error"]["code"]) == (400, "number_out_of_range"), (age[:10], data)
        assert "beyond what a double holds" in data["error"]["message"] and age[:20] in data["error"]["message"]
        assert len(data["error"]["message"]) < 400
    status, data = raw(server, "PUT", path, '{"workingMemory": {"name": "Eve", "age": NaN}}')
    assert status == 400 and "NaN, which is not a JSON number" in data["error"]["message"]
    assert call(server, "GET", path)[1]["workingMemory"] == {"name": "Ada", "age": 36}
    status, data = raw(server, "POST", "/v1/chat/completions", json.dumps(
        {"model": "chat", "messages": [{"role": "user", "content": "hi"}],
         "metadata": {"thread_id": "big", "resource_id": "ada"}})[:-1] + ', "temperature": 1' + "0" * 400 + "}")
    assert (status, data["error"]["code"]) == (400, "number_out_of_range")
    # An integer a double holds, however long its digits (308), is still a number.
    status, data = raw(server, "PUT", path, '{"workingMemory": {"name": "Eve", "age": %s}}' % ("9" * 308))
    assert status == 200 and data["workingMemory"]["age"] == int("9" * 308)


def raw(server: GatewayServer, method: str, path: str, body: str) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    conn.request(method, path, body.encode(), {"content-type": "application/json"})
    response = conn.getresponse()
    status, data = response.status, json.loads(response.read())
    conn.close()
    return status, data


def test_an_unknown_agent_id_is_named_as_the_parameter_sent(server):
    """agentId=nobody answered 404 with param 'model' ("There is no agent named 'nobody'"): a memory-API
    client sent no 'model', so a client reading param looked for the wrong mistake."""
    for method, body in (("GET", None), ("PUT", {"workingMemory": "# Profile"})):
        status, data = call(server, method, "/api/memory/threads/t1/working-memory?resourceId=ada&agentId=nobody",
                            body)
        assert status == 404 and data["error"]["param"] == "agentId", data
        assert "agentId='nobody' names no agent" in data["error"]["message"] and "'chat'" in data["error"]["message"]
    status, data = call(server, "GET", "/api/memory/threads?resourceId=ada&agentId=nobody")
    assert status == 404 and data["error"]["param"] == "agentId"


def test_thread_working_memory_of_a_thread_not_started_says_how_to_start_it(store):
    """A PUT of thread-scoped working memory to a thread that does not exist answered 404 "Thread t9 not
    found", though the client named that thread on purpose: it must be started by a chat turn first."""
    memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "thread", "template": TEMPLATE}))
    agent = Agent("chat", instructions="Chat.", model=ScriptedModel(show_system), memory=memory, tracer=False)
    with GatewayServer(create_app([agent])) as server:
        status, data = call(server, "PUT", "/api/memory/threads/t9/working-memory?resourceId=ada",
                            {"workingMemory": "# Profile\n- Name: Ada\n"})
        assert status == 404 and data["error"]["type"] == "not_found_error"
        assert "start the thread with a chat turn" in data["error"]["message"]
        chat(server, "hello", "t9", "ada")
        status, data = call(server, "PUT", "/api/memory/threads/t9/working-memory?resourceId=ada",
                            {"workingMemory": "# Profile\n- Name: Ada\n"})
        assert status == 200 and data["scope"] == "thread" and "Ada" in data["workingMemory"]
    assert memory.get_thread("t9").resource_id == "ada"


def test_ids_with_unusual_characters_round_trip(server):
    thread = "conv 1/ü:ß"
    chat(server, "hi", thread, "ada")
    status, data = call(server, "GET", f"/api/memory/threads/{quote(thread, safe='')}/messages?resourceId=ada")
    assert status == 200 and data["messages"][0]["threadId"] == thread


def test_working_memory_put_follows_the_id_rule_mcp_follows(server, memory):
    """The PUT refused an odd resourceId even when that resource had data (a strict check of its own), while MCP's
    update_working_memory and the memory API's reads let the owner of stored rows reach them. One rule now: an id
    no chat turn could name is refused only when nothing is stored under it."""
    legacy = "legacy\x1b[31m"
    memory.update_working_memory(resource_id=legacy, working_memory="# Profile\n- Name: Old\n")
    memory.save_messages([Message.user("old", thread_id="lt", resource_id=legacy)])  # another tool's rows
    profile = "# Profile\n- Name: New\n"
    put = {resource: call(server, "PUT", f"/api/memory/threads/lt/working-memory?resourceId={quote(resource)}"
                                          "&agentId=chat", {"workingMemory": profile})
           for resource in ("ev\x1b]0;owned\x07il", "r" * 5000, legacy, "carol")}
    assert [status for status, _ in put.values()] == [400, 400, 200, 200]
    refused = put["ev\x1b]0;owned\x07il"][1]["error"]
    assert refused["param"] == "resourceId" and "control character (U+001B)" in refused["message"]
    assert "Nothing was read or written" in refused["message"]
    assert "5,000 characters long" in put["r" * 5000][1]["error"]["message"]
    assert put[legacy][1]["workingMemory"] == profile and put[legacy][1]["threadExists"]
    status, read = call(server, "GET", f"/api/memory/threads/lt/working-memory?resourceId={quote(legacy)}&agentId=chat")
    assert status == 200 and read["workingMemory"] == profile
    ids = {r.id for r in memory.store.memory.list_resources()}
    assert legacy in ids and "carol" in ids and not any("\x1b]" in i or len(i) > 256 for i in ids)


def test_working_memory_of_an_agent_without_it_says_how_to_get_it(store):
    # `memory-studio serve --model` serves a default memory, whose working memory is off: the route said only
    # "not enabled for this agent's memory", with nothing on what to do.
    agents = [Agent("plain", instructions="Chat.", model=ScriptedModel(["ok"]), memory=Memory(store), tracer=False)]
    with GatewayServer(create_app(agents)) as server:
        for method, body in (("GET", None), ("PUT", {"workingMemory": "# Profile\n- Name: Ada\n"})):
            status, data = call(server, method, "/api/memory/threads/t1/working-memory?resourceId=ada", body)
            message = data["error"]["message"]
            assert status == 400 and "not enabled" in message, data
            assert "serve --model" in message and "--agents" in message and '"enabled": True' in message


def test_message_pages_reach_a_long_threads_start_each_message_once(server, memory):
    """Paging a thread's messages from the newest (page 0) to the oldest: the last page repeated the one before
    it (it held ``perPage`` messages from the start, not what was left), so a client reading 250 messages 100 a
    page got 300, 50 of them twice. It now holds the 50 left, and a page past the start none."""
    texts = [f"message {i:03d}" for i in range(250)]
    memory.save_messages([Message.user(text, thread_id="long", resource_id="ada") for text in texts])
    pages = []
    for page in range(4):
        status, data = call(server, "GET", f"/api/memory/threads/long/messages?resourceId=ada&perPage=100&page={page}")
        assert status == 200 and data["total"] == 250 and data["page"] == page
        pages.append(data)
    assert [len(p["messages"]) for p in pages] == [100, 100, 50, 0]
    assert [p["hasMore"] for p in pages] == [True, True, False, False]
    assert [m["text"] for p in reversed(pages) for m in p["messages"]] == texts
    status, data = call(server, "GET", "/api/memory/threads/long/messages?resourceId=ada&perPage=1001")
    assert status == 400 and "perPage must be between 1 and 1000" in data["error"]["message"]


def test_delegations_are_listed_by_page_each_thread_once(server, memory):
    """``GET /api/memory/delegations`` answered every thread of every delegation of the resource at once (a
    resource whose turns delegated 10,000 times: one answer of megabytes). It now answers a page (``page``,
    ``perPage``, Mastra's thread list shapes, with ``total`` and ``hasMore``), newest created first and grouped
    per delegation, and a client following ``hasMore`` gets each thread once; another resource's never."""
    from core.scopes import delegation_resource

    helper, checker = delegation_resource("ada", "helper"), delegation_resource(delegation_resource("ada", "helper"),
                                                                                "checker")
    expected = {f"h-{i:03d}": helper for i in range(130)} | {f"c-{i}": checker for i in range(7)}
    memory.save_messages([Message.user("kept", thread_id=thread, resource_id=resource)
                          for thread, resource in expected.items()]
                         + [Message.user("bob's", thread_id="bob-h", resource_id=delegation_resource("bob", "helper"))])
    listed: dict[str, str] = {}
    page, answers = 0, []
    while True:
        status, data = call(server, "GET", f"/api/memory/delegations?resourceId=ada&perPage=50&page={page}")
        assert status == 200, data
        answers.append(data)
        for delegation in data["delegations"]:
            for thread in delegation["threads"]:
                assert thread["id"] not in listed
                listed[thread["id"]] = delegation["resourceId"]
                assert thread["messageCount"] == 1
        if not data["hasMore"]:
            break
        page += 1
    assert listed == expected
    assert [sum(len(d["threads"]) for d in a["delegations"]) for a in answers] == [50, 50, 37]
    assert all(a["total"] == 137 and a["perPage"] == 50 for a in answers)
    labels = {d["resourceId"]: d["label"] for a in answers for d in a["delegations"]}
    assert labels == {helper: "delegation of ada to helper", checker: "delegation of ada to helper, then to checker"}
    status, data = call(server, "GET", "/api/memory/delegations?resourceId=ada&perPage=1001")
    assert status == 400 and data["error"]["param"] == "perPage"


def _ids(answer: dict[str, Any]) -> list[str]:
    if "threads" in answer:
        return [t["id"] for t in answer["threads"]]
    return [t["id"] for d in answer["delegations"] for t in d["threads"]]


@pytest.mark.backends
@pytest.mark.parametrize("route", ["threads", "delegations"])
def test_pages_by_cursor_hold_still_when_threads_are_created_between_reads(server, memory, route):
    """The thread and delegation lists paged by offset (``page``): a thread created between two page reads moved
    every later page by one, so the next page began with the last thread already shown (or, a thread deleted,
    skipped one). ``nextCursor`` passed back as ``cursor`` continues after the last thread shown, whatever was
    created meanwhile: each thread once, none skipped. ``page`` still works as an offset (and still shifts)."""
    from core.scopes import delegation_resource

    owner = "ada" if route == "threads" else delegation_resource("ada", "helper")
    for i in range(7):
        memory.save_messages([Message.user("kept", thread_id=f"t{i}", resource_id=owner)])
    path = f"/api/memory/{route}?resourceId=ada&perPage=3"
    status, first = call(server, "GET", path)
    assert status == 200 and first["hasMore"] and first["nextCursor"]
    expected = [t.id for t in memory.list_threads(resource_id=owner, per_page=None).threads]
    seen, answer, created = _ids(first), first, 0
    while answer["nextCursor"]:
        created += 1  # a new thread between every two reads: the newest, so on no later page
        memory.save_messages([Message.user("new", thread_id=f"new-{created}", resource_id=owner)])
        status, answer = call(server, "GET", f"{path}&cursor={quote(answer['nextCursor'])}")
        assert status == 200, answer
        seen += _ids(answer)
        assert answer["total"] == 7 + created
    assert seen == expected  # each once, in order, none skipped
    assert not answer["hasMore"] and answer["nextCursor"] is None
    # By offset, page 1 now begins with threads the first page showed (the new ones pushed them down).
    status, by_offset = call(server, "GET", f"{path}&page=1")
    now = [t.id for t in memory.list_threads(resource_id=owner, per_page=None).threads]
    assert status == 200 and _ids(by_offset) == now[3:6] and set(now[3:6]) & set(_ids(first))


@pytest.mark.backends
def test_a_cursor_that_is_not_this_lists_is_400_saying_to_start_again(server, memory):
    for resource in ("ada", "bob"):
        for i in range(3):
            memory.save_messages([Message.user("kept", thread_id=f"{resource}-{i}", resource_id=resource)])
    status, bobs = call(server, "GET", "/api/memory/threads?resourceId=bob&perPage=1")
    assert status == 200 and bobs["nextCursor"]
    status, adas = call(server, "GET", "/api/memory/threads?resourceId=ada&perPage=1")
    import base64

    week_date = base64.urlsafe_b64encode(json.dumps([1, "threads", "x", "2026-W01-1", "ada-1"]).encode()).decode()
    for cursor, says in ((bobs["nextCursor"], "continues another list"), ("not-a-cursor", "cut short, changed or made up"),
                         (adas["nextCursor"][:-3], "cut short, changed or made up"),
                         (week_date, "cut short, changed or made up")):  # a time only Python reads, never sent on
        status, data = call(server, "GET", f"/api/memory/threads?resourceId=ada&cursor={quote(cursor)}")
        assert status == 400 and data["error"]["code"] == "invalid_cursor" and data["error"]["param"] == "cursor"
        assert says in data["error"]["message"] and "without a cursor" in data["error"]["message"]
    status, data = call(server, "GET", f"/api/memory/threads?resourceId=ada&page=1&cursor={quote(adas['nextCursor'])}")
    assert status == 400 and data["error"]["param"] == "page"
    status, data = call(server, "GET", f"/api/memory/delegations?resourceId=ada&cursor={quote(adas['nextCursor'])}")
    assert status == 400 and "continues another list" in data["error"]["message"]


@pytest.mark.backends
def test_message_pages_by_cursor_hold_still_when_a_turn_is_stored_between_reads(server, memory):
    """Paging a thread's messages from the newest by ``page``: a turn stored between two reads (two messages)
    shifted every older page by two, so the next page repeated the two oldest messages already shown.
    ``nextCursor`` passed back as ``cursor`` continues with the messages before the oldest one shown."""
    texts = [f"message {i:02d}" for i in range(25)]
    memory.save_messages([Message.user(text, thread_id="long", resource_id="ada") for text in texts])
    path = "/api/memory/threads/long/messages?resourceId=ada&perPage=10"
    status, answer = call(server, "GET", path)
    assert status == 200 and answer["nextCursor"]
    pages, turns = [answer], 0
    while answer["nextCursor"]:
        turns += 1  # a turn stored between every two reads
        memory.save_messages([Message.user(f"new {turns}", thread_id="long", resource_id="ada"),
                              Message.assistant(f"reply {turns}", thread_id="long", resource_id="ada")])
        status, answer = call(server, "GET", f"{path}&cursor={quote(answer['nextCursor'])}")
        assert status == 200, answer
        pages.append(answer)
    assert [len(p["messages"]) for p in pages] == [10, 10, 5]
    assert [m["text"] for p in reversed(pages) for m in p["messages"]] == texts  # each once, none skipped
    assert [p["hasMore"] for p in pages] == [True, True, False] and pages[-1]["total"] == 25 + 2 * turns
    status, data = call(server, "GET", f"/api/memory/threads/other/messages?resourceId=ada&cursor="
                                       f"{quote(pages[0]['nextCursor'])}")
    assert status == 400 and data["error"]["code"] == "invalid_cursor"
