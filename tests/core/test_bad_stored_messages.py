"""A bad message already stored (written by another tool) never breaks its thread (issue 17, item 4):
a turn skips it and reports it in its prompt record; the memory API lists it as unreadable."""

from __future__ import annotations

import http.client
import json

import pytest

from core import Memory, MemoryOptions, Message
from core.agent import Agent
from core.gateway import GatewayServer, create_app
from core.llm import ScriptedModel

pytestmark = pytest.mark.backends

BAD_ROWS = {
    "not-json": '{"format": 2, "parts": [{"type": "text", "text": "cut off',
    "not-the-format": '{"format": 2, "parts": "a string, not a list"}',
    "unknown-shape": '{"hello": "world"}',
    "part-not-an-object": '{"format": 2, "parts": ["a string, not a part"]}',
    "call-not-an-object": '{"format": 2, "parts": [{"type": "tool-invocation", "toolInvocation": "oops"}]}',
    # Nested past Python's JSON parser: every turn of the thread failed ("maximum recursion depth exceeded").
    "too-deep": '{"format": 2, "parts": [{"type": "text", "text": "x", "d": ' + "[" * 100_000 + "]" * 100_000 + "}]}",
}


def write_bad_rows(store, thread: str, resource: str, minute: int = 30) -> None:
    with store.db.write() as conn:
        for i, (message_id, content) in enumerate(BAD_ROWS.items()):
            conn.exec_driver_sql(
                'INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
                "VALUES (?, ?, ?, 'user', 'v2', ?, ?)",
                (message_id, thread, content, f"2026-01-01T00:{minute + i:02d}:00.000Z", resource))


def seen_by_model(model: ScriptedModel) -> list[str]:
    return [m["content"] for m in model.requests[-1].messages if m["role"] == "user"]


@pytest.mark.parametrize("options", [{"last_messages": 10}, {"message_history": {"max_tokens": 2000}}],
                         ids=["last-messages", "token-budget"])
def test_a_turn_skips_and_reports_a_bad_stored_message(store, options):
    memory = Memory(store, MemoryOptions(**options))
    memory.save_messages([Message.user("before", thread_id="t", resource_id="ada",
                                       created_at="2026-01-01T00:00:00.000Z")])
    write_bad_rows(store, "t", "ada")
    model = ScriptedModel(lambda messages, tools: "still here")
    agent = Agent("a", instructions="Help.", model=model, memory=memory, tracer=False)
    result = agent.generate("after", memory={"thread": "t", "resource": "ada"})
    assert result.text == "still here"
    assert seen_by_model(model) == ["before", "after"]
    notes = result.prompts[0].notes["message-history"]
    assert {u["id"] for u in notes["unreadable"]} == set(BAD_ROWS)
    assert all(u["threadId"] == "t" and u["error"] for u in notes["unreadable"])
    # The next turn sees this one's messages: one row never breaks a thread.
    agent.generate("again", memory={"thread": "t", "resource": "ada"})
    assert seen_by_model(model) == ["before", "after", "again"]


def test_recall_and_reads_skip_it_and_say_so(store):
    memory = Memory(store, MemoryOptions(last_messages=10))
    memory.save_messages([Message.user("fine", thread_id="t", resource_id="ada")])
    write_bad_rows(store, "t", "ada", minute=0)
    result = memory.recall(thread_id="t", resource_id="ada")
    assert [m.text for m in result.messages] == ["fine"]
    assert {u.id for u in result.unreadable} == set(BAD_ROWS)
    assert [m.text for m in memory.recall(thread_id="t", per_page=2, page=1).messages] == []
    assert [m.id for m in store.memory.get_messages(["not-json", result.messages[0].id])] == [result.messages[0].id]


def test_the_gateway_serves_a_thread_with_a_bad_row(store):
    memory = Memory(store, MemoryOptions(last_messages=10))
    memory.save_messages([Message.user("fine", thread_id="t", resource_id="ada")])
    write_bad_rows(store, "t", "ada")
    agent = Agent("echo", instructions="Echo.", model=ScriptedModel(lambda m, t: "ok"), memory=memory, tracer=False)
    with GatewayServer(create_app([agent], token="")) as server:
        conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
        conn.request("POST", "/v1/chat/completions", json.dumps({
            "model": "echo", "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"thread_id": "t", "resource_id": "ada"}}), {"content-type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200, response.read()
        response.read()
        conn.request("GET", "/api/memory/threads/t/messages?resourceId=ada")
        body = json.loads(conn.getresponse().read())
        conn.close()
    assert [m["text"] for m in body["messages"]] == ["fine", "hi", "ok"]
    assert {u["id"] for u in body["unreadable"]} == set(BAD_ROWS)


def test_an_assistant_row_whose_tool_call_is_not_an_object_is_left_out_and_reported(store):
    # Building the prompt read ``toolInvocation.get(...)``: such a row (from the API, or another tool) failed
    # every turn of its thread with an AttributeError.
    memory = Memory(store, MemoryOptions(last_messages=10))
    memory.save_messages([Message.user("before", thread_id="t", resource_id="ada",
                                       created_at="2026-01-01T00:00:00.000Z")])
    with store.db.write() as conn:
        conn.exec_driver_sql(
            'INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
            "VALUES ('bad-call', 't', ?, 'assistant', 'v2', '2026-01-01T00:01:00.000Z', 'ada')",
            ('{"format": 2, "parts": [{"type": "tool-invocation", "toolInvocation": ["not", "an", "object"]}]}',))
    model = ScriptedModel(lambda messages, tools: "still here")
    agent = Agent("a", instructions="Help.", model=model, memory=memory, tracer=False)
    result = agent.generate("after", memory={"thread": "t", "resource": "ada"})
    assert result.text == "still here"
    assert [m["role"] for m in model.requests[-1].messages] == ["system", "user", "user"]
    unreadable = result.prompts[0].notes["message-history"]["unreadable"]
    assert [u["id"] for u in unreadable] == ["bad-call"] and "toolInvocation" in unreadable[0]["error"]


def test_such_a_tool_call_is_refused_when_the_message_is_made():
    from core.messages import MessageFormatError

    with pytest.raises(MessageFormatError, match="needs a 'toolInvocation' object"):
        Message.create("assistant", [{"type": "tool-invocation", "toolInvocation": "oops"}], thread_id="t")
