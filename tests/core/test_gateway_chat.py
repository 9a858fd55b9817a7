"""The gateway's OpenAI-compatible chat, used through the official ``openai`` client against a real server."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from core import Memory, MemoryOptions
from core.agent import Agent, AgentResult
from core.agent_stream import StreamEvent
from core.gateway import GatewayServer, create_app
from core.llm import ModelError, ScriptedModel
from core.llm.base import Usage


def echo(messages: list[dict[str, Any]], tools: Any) -> str:
    """Reports what the model was sent, so tests can see the history memory supplied."""
    users = [m["content"] for m in messages if m["role"] == "user"]
    return f"{len(users)} user message(s); last: {users[-1]}"


@pytest.fixture
def memory(store) -> Memory:
    return Memory(store, MemoryOptions(last_messages=20, working_memory={"enabled": True}))


@pytest.fixture
def gate() -> threading.Event:
    gate = threading.Event()
    gate.set()
    return gate


@pytest.fixture
def agents(memory, gate) -> dict[str, Agent]:
    def slow(messages, tools):
        gate.wait(60)
        return "slow reply"

    return {
        "echo": Agent("echo", instructions="Echo.", model=ScriptedModel(echo), memory=memory, tracer=False),
        "plain": Agent("plain", instructions="No memory.", model=ScriptedModel(echo), tracer=False),
        "broken": Agent("broken", instructions="Fails.", memory=memory, tracer=False, model=ScriptedModel(
            [ModelError("upstream said no", model_id="scripted/broken", endpoint="http://model", status=500)] * 4)),
        "slow": Agent("slow", instructions="Waits.", model=ScriptedModel(slow), memory=memory, tracer=False),
    }


@pytest.fixture
def server(agents) -> Iterator[GatewayServer]:
    with GatewayServer(create_app(agents, default_resource="anon")) as server:
        yield server


@pytest.fixture
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=60)


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def stored(memory: Memory, thread: str) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in memory.recall(thread_id=thread, per_page=False).messages]


def test_a_completion_is_a_remembered_turn(client, memory):
    reply = client.chat.completions.with_raw_response.create(
        model="echo", messages=[user("I like tea")], metadata={"thread_id": "t1", "resource_id": "ada"})
    completion = reply.parse()
    assert completion.object == "chat.completion" and completion.model == "echo"
    assert completion.choices[0].message.content == "1 user message(s); last: I like tea"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens > 0
    assert reply.headers["x-thread-id"] == "t1" and reply.headers["x-resource-id"] == "ada"
    assert reply.headers["server-timing"].startswith("agent;dur=")
    assert completion.model_extra["memory"]["thread_id"] == "t1"
    assert stored(memory, "t1") == [("user", "I like tea"), ("assistant", "1 user message(s); last: I like tea")]
    assert memory.get_thread("t1").resource_id == "ada"


def test_only_the_new_message_is_taken_so_resent_history_is_not_stored_twice(client, memory):
    meta = {"thread_id": "t1", "resource_id": "ada"}
    first = client.chat.completions.create(model="echo", messages=[user("one")], metadata=meta)
    history = [user("one"), {"role": "assistant", "content": first.choices[0].message.content}]
    second = client.chat.completions.create(
        model="echo", messages=[{"role": "system", "content": "client prompt"}, *history, user("two")], metadata=meta)
    # The model saw each earlier message once: from memory, not from the request.
    assert second.choices[0].message.content == "2 user message(s); last: two"
    assert [role for role, _ in stored(memory, "t1")] == ["user", "assistant", "user", "assistant"]


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_earlier_messages_sent_to_a_new_thread_are_named_as_ignored(client, memory, streamed):
    """A conversation's earlier messages sent to a new thread are neither stored nor sent to the model: the answer's
    ``ignored`` list and ``x-memory-ignored`` header say how many were left out and why (they said only the system
    prompt before), the same for a plain and a streamed reply."""
    meta = {"thread_id": f"t-new-{streamed}", "resource_id": "ada"}
    messages = [{"role": "system", "content": "client prompt"}, user("I am Ada"),
                {"role": "assistant", "content": "Hello Ada"}, user("I like tea"), user("what do I like?")]
    if streamed:
        raw = client.chat.completions.with_raw_response.create(model="echo", messages=messages, metadata=meta,
                                                               temperature=0.2, stream=True)
        chunks = list(raw.parse())
        told = next(c.model_extra["memory"] for c in chunks if c.choices and c.choices[0].finish_reason)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        raw = client.chat.completions.with_raw_response.create(model="echo", messages=messages, metadata=meta,
                                                               temperature=0.2)
        told = raw.parse().model_extra["memory"]
        text = raw.parse().choices[0].message.content
    expected = ["messages (system prompt)", "messages (3 earlier: memory supplies the history)", "temperature"]
    assert told["ignored"] == expected
    assert raw.headers["x-memory-ignored"] == ", ".join(expected)
    assert text == "1 user message(s); last: what do I like?"  # the model saw none of them
    assert stored(memory, meta["thread_id"]) == [("user", "what do I like?"), ("assistant", text)]
    # The new message alone: nothing before it to name.
    alone = client.chat.completions.with_raw_response.create(model="echo", messages=[user("and now?")], metadata=meta)
    assert alone.parse().model_extra["memory"]["ignored"] == [] and "x-memory-ignored" not in alone.headers
    # An agent without memory is sent no history at all: the list does not say memory supplies it.
    bare = client.chat.completions.with_raw_response.create(model="plain", messages=messages[1:], stream=streamed)
    told = (next(c.model_extra["memory"] for c in bare.parse() if c.choices and c.choices[0].finish_reason)
            if streamed else bare.parse().model_extra["memory"])
    assert told["ignored"] == ["messages (3 earlier: the agent has no memory and is sent no history)"]


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_ids_a_turn_does_not_use_are_named_as_ignored_with_what_was_used(client, memory, streamed):
    """``user`` beside a resource id (the resource id names the resource; ``user`` is OpenAI's end-user tag) and the
    thread and conversation ids sent to an agent without memory were used for nothing, and the answer's ``ignored``
    list and ``x-memory-ignored`` header named neither, though they name every other field not used."""

    def ignored(model: str, **kwargs: Any) -> tuple[list[str], str | None]:
        raw = client.chat.completions.with_raw_response.create(model=model, messages=[user("hi")], stream=streamed,
                                                               **kwargs)
        told = (next(c.model_extra["memory"] for c in raw.parse() if c.choices and c.choices[0].finish_reason)
                if streamed else raw.parse().model_extra["memory"])
        return told["ignored"], raw.headers.get("x-memory-ignored")

    by_body = ignored("echo", user="end-user-7", metadata={"thread_id": f"t-{streamed}", "resource_id": "ada"},
                      temperature=0.2)
    expected = ["temperature", "user (metadata.resource_id names the resource)"]
    assert by_body == (expected, ", ".join(expected))
    assert memory.get_thread(f"t-{streamed}").resource_id == "ada"
    by_header = ignored("echo", user="end-user-7", extra_headers={"x-resource-id": "ada"})
    assert by_header == (["user (the x-resource-id header names the resource)"],
                         "user (the x-resource-id header names the resource)")
    # The user names the resource when nothing else does: it is used, so not named.
    assert ignored("echo", user="ada") == ([], None)
    no_memory = "the agent has no memory: no thread is read or stored"
    expected = [f"metadata.thread_id ({no_memory})", f"x-thread-id header ({no_memory})"]
    assert ignored("plain", metadata={"thread_id": "t9"}, extra_headers={"x-thread-id": "t9"}) == (
        expected, ", ".join(expected))
    assert ignored("plain", metadata={"conversation_id": "c1"}) == (
        [f"metadata.conversation_id ({no_memory})"], f"metadata.conversation_id ({no_memory})")
    assert memory.get_thread("t9") is None


def test_thread_and_resource_from_headers_and_conversation_ids(client, memory):
    client.chat.completions.create(model="echo", messages=[user("via headers")],
                                   extra_headers={"x-thread-id": "th", "x-resource-id": "bob"})
    assert memory.get_thread("th").resource_id == "bob"
    # A conversation id names a thread of its resource; OpenAI's `user` field names the resource.
    for text in ("hello", "again"):
        reply = client.chat.completions.with_raw_response.create(
            model="echo", messages=[user(text)], user="carol", metadata={"conversation_id": "c-1"})
    # (issue 17: in the "conversation:" namespace, so no client can name it, or collide with it)
    assert reply.headers["x-thread-id"] == "conversation:carol:c-1" and reply.headers["x-resource-id"] == "carol"
    assert reply.parse().choices[0].message.content == "2 user message(s); last: again"
    other = client.chat.completions.with_raw_response.create(
        model="echo", messages=[user("hi")], user="dave", metadata={"conversation_id": "c-1"})
    assert other.headers["x-thread-id"] == "conversation:dave:c-1"


def test_without_a_thread_each_request_gets_a_new_one_of_the_default_resource(client, memory):
    a = client.chat.completions.with_raw_response.create(model="echo", messages=[user("x")])
    b = client.chat.completions.with_raw_response.create(model="echo", messages=[user("y")])
    assert a.headers["x-resource-id"] == b.headers["x-resource-id"] == "anon"
    assert a.headers["x-thread-id"] != b.headers["x-thread-id"]
    assert memory.get_thread(a.headers["x-thread-id"]).resource_id == "anon"


def test_an_agent_without_memory_answers_without_a_thread(client):
    reply = client.chat.completions.with_raw_response.create(model="plain", messages=[user("hi")])
    assert "x-thread-id" not in reply.headers
    assert reply.parse().choices[0].message.content == "1 user message(s); last: hi"


def test_streamed_completion_with_the_openai_client(client, memory):
    meta = {"thread_id": "s1", "resource_id": "ada"}
    client.chat.completions.create(model="echo", messages=[user("first")], metadata=meta)
    stream = client.chat.completions.create(model="echo", messages=[user("tell me more about streams")],
                                            metadata=meta, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "2 user message(s); last: tell me more about streams"
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 1  # really in pieces
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    assert {c.id for c in chunks} == {chunks[0].id} and all(c.object == "chat.completion.chunk" for c in chunks)
    assert stored(memory, "s1")[-1] == ("assistant", text)


def test_the_stream_is_server_sent_events_ending_with_done(server):
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    body = {"model": "echo", "stream": True, "messages": [user("raw")], "metadata": {"thread_id": "r1"}}
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"content-type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("content-type").startswith("text/event-stream")
    assert response.getheader("x-thread-id") == "r1"
    events = [e for e in response.read().decode().split("\n\n") if e]
    conn.close()
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and chunks[-1]["memory"]["thread_id"] == "r1"
    assert "usage" not in chunks[-1]  # only with stream_options.include_usage, as OpenAI does


def test_models_lists_the_agents(client):
    assert [m.id for m in client.models.list()] == ["echo", "plain", "broken", "slow"]
    assert client.models.retrieve("echo").owned_by == "memory-studio"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nobody")


def test_a_turn_never_blocks_the_event_loop(client, gate):
    gate.clear()
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(client.chat.completions.create(
        model="slow", messages=[user("wait")]).choices[0].message.content))
    worker.start()
    try:
        # While that turn waits inside its model call, the gateway still answers.
        assert [m.id for m in client.models.list()][0] == "echo"
        assert client.chat.completions.create(model="echo", messages=[user("meanwhile")]).choices[0].message.content
        assert done == []
    finally:
        gate.set()
        worker.join(60)
    assert done == ["slow reply"]


class StreamingAgent(Agent):
    """An agent with ``stream``: what the gateway uses instead of cutting a finished reply."""

    def stream(self, message, *, memory=None, request_context=None):
        yield StreamEvent("text-delta", text="Hel")
        yield StreamEvent("tool-call", tool_call_id="c1", tool_name="lookup")  # no place in OpenAI's format
        yield StreamEvent("text-delta", text="lo!")
        result = AgentResult(text="Hello!", messages=[], prompts=[], usage=Usage(3, 2, 5), trace_id=None,
                             finish_reason="stop", thread_id=memory["thread"], resource_id=memory["resource"])
        yield StreamEvent("finish", text="Hello!", finish_reason="stop", usage=result.usage, result=result)


def test_an_agent_stream_method_is_relayed_delta_by_delta(memory):
    agent = StreamingAgent("live", instructions="", model=ScriptedModel([]), memory=memory, tracer=False)
    with GatewayServer(create_app([agent])) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=60)
        chunks = list(client.chat.completions.create(model="live", messages=[user("hi")], stream=True,
                                                     stream_options={"include_usage": True}))
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert deltas == ["Hel", "lo!"]
    assert chunks[-1].usage.total_tokens == 5


class GatedStreamingAgent(Agent):
    """Streams one delta, then waits for the test before the next; records when it is closed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.release, self.closed = threading.Event(), threading.Event()

    def stream(self, message, *, memory=None, request_context=None):
        try:
            yield StreamEvent("text-delta", text="first ")
            self.release.wait(60)
            yield StreamEvent("text-delta", text="second")
        finally:
            self.closed.set()


def test_a_client_leaving_mid_stream_stops_the_turn_and_the_gateway_goes_on(memory):
    agent = GatedStreamingAgent("gated", instructions="", model=ScriptedModel([]), memory=memory, tracer=False)
    with GatewayServer(create_app([agent])) as server:
        conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
        body = {"model": "gated", "stream": True, "messages": [user("hi")]}
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"content-type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200
        assert b'"role":"assistant"' in response.readline()  # the first event has arrived
        conn.sock.close()  # the client goes away mid-reply
        conn.close()
        agent.release.set()
        assert agent.closed.wait(60)  # the agent's stream was closed, not left running
        client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=60)
        assert [m.id for m in client.models.list()] == ["gated"]
