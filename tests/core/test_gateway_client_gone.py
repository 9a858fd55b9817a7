"""A turn whose client went away (its timeout ran out, it closed the connection) is stopped.

Every test runs a real gateway (``GatewayServer``) in front of the loopback model server with one slot, as
llama.cpp with ``n_parallel=1``: the loopback holds the turn's model call (``stall_next``) until its client,
the gateway, closes that connection, which it notes in ``abandoned``. The clients are the official ``openai``
client with a short timeout, and a raw socket that closes early. Nothing is timed: each wait is for an event.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx2 as httpx
import openai
import pytest

from core import Memory, MemoryOptions
from core.agent import Agent
from core.gateway import GatewayServer, create_app
from core.gateway.idempotency import IdempotencySettings
from core.llm import OpenAICompatibleModel
from core.llm.loopback import LoopbackServer
from core.storage.schema import IDEMPOTENCY_TABLE
from core.traces.tracer import InMemorySpanExporter, Tracer

pytestmark = pytest.mark.backends

KEY = "Idempotency-Key"
META = {"thread_id": "t1", "resource_id": "ada"}


def reply(messages: list[dict[str, Any]], tools: Any) -> str:
    users = [m["content"] for m in messages if m["role"] == "user"]
    return f"{len(users)} user message(s); last: {users[-1]}"


@pytest.fixture
def upstream() -> Iterator[LoopbackServer]:
    with LoopbackServer(reply, slots=1) as server:
        yield server


@pytest.fixture
def memory(store) -> Memory:
    return Memory(store, MemoryOptions(last_messages=20))


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def gateway(upstream, memory, spans) -> Iterator[GatewayServer]:
    model = OpenAICompatibleModel("loopback", base_url=upstream.base_url, api_key="x", timeout=60)
    agent = Agent("echo", instructions="Echo.", model=model, memory=memory, tracer=Tracer(spans))
    app = create_app([agent], default_resource="anon", idempotency=IdempotencySettings(lease=30))
    with GatewayServer(app) as server:
        yield server
    model.close()


def client(server: GatewayServer, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="-", **{"max_retries": 0, "timeout": 60, **kwargs})


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def stored(memory: Memory, thread: str = "t1") -> list[tuple[str, str]]:
    if memory.get_thread(thread) is None:
        return []
    return [(m.role, m.text) for m in memory.recall(thread_id=thread, per_page=False).messages]


def key_rows(memory: Memory) -> list[tuple[Any, ...]]:
    with memory.store.db.read() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(f"SELECT idem_key, state FROM {IDEMPOTENCY_TABLE}")]


def wait_until(condition: Callable[[], Any], what: str) -> None:
    """Wait (up to a minute) for something another thread does; never a timed assertion."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def left_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "core.gateway.openai_routes"
            and r.getMessage().startswith("a client left")]


def assert_stopped_and_nothing_stored(upstream: LoopbackServer, gateway: GatewayServer, memory: Memory,
                                      caplog: pytest.LogCaptureFixture, spans: InMemorySpanExporter) -> None:
    """The held model call's connection was closed by the gateway (the server stops generating), the turn left
    nothing in its thread, its log line and trace say why, and the next turn there is answered (not queued behind
    the abandoned one)."""
    wait_until(lambda: upstream.abandoned, "the model server to see its connection closed")
    assert [r.body["messages"][-1] for r in upstream.abandoned] == [user("book a table")]
    wait_until(lambda: left_lines(caplog), "the gateway's line about the client that left")
    assert "its model call was stopped and nothing of the turn was saved" in left_lines(caplog)[0]
    assert "agent 'echo', thread 't1', resource 'ada'" in left_lines(caplog)[0]
    assert stored(memory) == []
    run, = [s for s in spans.spans if s.span_type == "agent_run"]
    call, = [s for s in spans.spans if s.span_type == "model_generation"]
    for span in (run, call):
        assert "stopped: the client closed its connection; nothing of this turn was saved" in json.dumps(span.error)
    upstream.release()
    answer = client(gateway).chat.completions.create(model="echo", messages=[user("next")], metadata=META)
    assert answer.choices[0].message.content == "1 user message(s); last: next"
    assert stored(memory) == [("user", "next"), ("assistant", "1 user message(s); last: next")]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_turn_whose_client_timed_out_stops_its_model_call_and_stores_nothing(upstream, gateway, memory, caplog,
                                                                               spans, stream):
    caplog.set_level(logging.INFO, logger="core.gateway.openai_routes")
    upstream.stall_next()  # the model is still reading the prompt when the client gives up
    with pytest.raises(openai.APITimeoutError):
        answer = client(gateway, timeout=0.5).chat.completions.create(
            model="echo", messages=[user("book a table")], metadata=META, stream=stream)
        for _ in answer if stream else ():
            pass
    assert_stopped_and_nothing_stored(upstream, gateway, memory, caplog, spans)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_raw_client_that_closes_early_stops_its_turn(upstream, gateway, memory, caplog, spans, stream):
    caplog.set_level(logging.INFO, logger="core.gateway.openai_routes")
    upstream.stall_next()
    host, port = gateway.url.removeprefix("http://").rsplit(":", 1)
    body = json.dumps({"model": "echo", "stream": stream, "messages": [user("book a table")],
                       "metadata": META}).encode()
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (host.encode(), port.encode(), len(body), body))
        wait_until(lambda: upstream.chat_requests(), "the turn's model call to reach the model server")
    # The socket is closed before any answer: the gateway notices, though it has nothing to write yet.
    assert_stopped_and_nothing_stored(upstream, gateway, memory, caplog, spans)


def test_a_turn_on_a_model_server_reached_by_name_is_stopped_when_its_client_leaves(upstream, memory, caplog, spans):
    """The agent's model server is reached by a name, not an address (``127.1``: resolved to 127.0.0.1 without DNS,
    as a Docker service name ``ollama`` resolves to a private address): it is self-hosted, so a plain turn whose
    client gave up has its model call cut too (a hosted API's would be waited for: here for 10 minutes)."""
    caplog.set_level(logging.INFO, logger="core.gateway.openai_routes")
    model = OpenAICompatibleModel("loopback", base_url=upstream.base_url.replace("127.0.0.1", "127.1"), api_key="x",
                                  timeout=600)
    agent = Agent("echo", instructions="Echo.", model=model, memory=memory, tracer=Tracer(spans))
    upstream.stall_next()
    with GatewayServer(create_app([agent], default_resource="anon")) as gateway:
        try:
            with pytest.raises(openai.APITimeoutError):
                client(gateway, timeout=0.5).chat.completions.create(
                    model="echo", messages=[user("book a table")], metadata=META)
            assert_stopped_and_nothing_stored(upstream, gateway, memory, caplog, spans)
        finally:
            upstream.release()  # (a call that was not cut ends now, so a failing test does not hang)
    model.close()


def test_a_keyed_retry_after_a_timeout_runs_once_and_stores_the_turn_once(upstream, gateway, memory, caplog):
    """The first attempt times out while the model holds it: it is stopped and its key given back at once, so the
    client's retry (same key) runs the turn, which is stored once; a later repeat is answered from it."""
    caplog.set_level(logging.INFO, logger="core.gateway.openai_routes")
    upstream.stall_next()
    attempts: list[httpx.Request] = []

    def on_request(request: httpx.Request) -> None:
        attempts.append(request)
        if len(attempts) == 2:  # the retry waits until the first attempt has given its key back
            wait_until(lambda: upstream.abandoned and not key_rows(memory), "the first attempt's key to be freed")

    with httpx.Client(event_hooks={"request": [on_request]}) as http_client:
        answer = client(gateway, max_retries=1, timeout=0.5, http_client=http_client).chat.completions.create(
            model="echo", messages=[user("book a table")], metadata=META, extra_headers={KEY: "k1"})
    assert len(attempts) == 2 and attempts[0].headers[KEY] == attempts[1].headers[KEY] == "k1"
    assert answer.choices[0].message.content == "1 user message(s); last: book a table"
    assert stored(memory) == [("user", "book a table"), ("assistant", "1 user message(s); last: book a table")]
    assert key_rows(memory) == [("k1", "done")]
    assert len(upstream.chat_requests()) == 2 and len(upstream.abandoned) == 1  # the first stopped, the retry ran
    again = client(gateway).chat.completions.with_raw_response.create(
        model="echo", messages=[user("book a table")], metadata=META, extra_headers={KEY: "k1"})
    assert again.headers["idempotent-replayed"] == "true" and again.parse().id == answer.id
    assert len(upstream.chat_requests()) == 2 and len(stored(memory)) == 2


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_turn_waiting_for_the_background_observer_is_stopped_when_its_client_leaves(store, caplog, spans, stream):
    """Past ``block_after`` the turn waits (up to 120 s) for observational memory's background observer, held by
    the one-slot server. The official client gives up: the gateway stops the turn, which ends its wait at once
    (before: only when the wait did, 120 s later) and saves nothing; the background observer's call is not cut
    (it is memory's, not the client's), and the next turn takes its observation."""
    from core.llm import RetryPolicy, ScriptedModel
    from core.observational import load_current
    from core.observational.observer import OBSERVER_SYSTEM_PROMPT
    from core.tokens import EstimatingTokenizer

    def is_observer(body: Any) -> bool:
        return isinstance(body, dict) and body["messages"][0]["content"] == OBSERVER_SYSTEM_PROMPT

    def answer(messages: list[dict[str, Any]], _tools: Any) -> str:
        if is_observer({"messages": messages}):
            return "<observations>\nDate: Mar 3, 2025\n* 🔴 (09:00) Ada books a table.\n</observations>"
        return "Noted."

    caplog.set_level(logging.INFO, logger="core.gateway.openai_routes")
    long = "word " * 90  # about 100 tokens: two turns pass block_after (200 tokens)
    with LoopbackServer(ScriptedModel(answer, name="server"), slots=1) as upstream:
        model = OpenAICompatibleModel("loopback", base_url=upstream.base_url, api_key="x", api_key_env=None,
                                      keyring_service=None, retry=RetryPolicy(max_retries=0), timeout=600)
        memory = Memory(store, MemoryOptions(observational_memory={
            "message_tokens": 200, "block_after": 1.0, "observation_tokens": 5000, "timeout": 120}),
            tokenizer=EstimatingTokenizer(), observer_model=model)
        agent = Agent("echo", instructions="Echo.", model=model, memory=memory, tracer=Tracer(spans))
        try:
            with GatewayServer(create_app([agent], default_resource="anon")) as gateway:
                upstream.stall_next(100, matching=is_observer)
                client(gateway).chat.completions.create(model="echo", messages=[user(f"first {long}")], metadata=META)
                wait_until(lambda: [b for b in upstream.chat_requests() if is_observer(b)], "the observer's request")
                before = stored(memory)
                with pytest.raises(openai.APITimeoutError):
                    answered = client(gateway, timeout=0.5).chat.completions.create(
                        model="echo", messages=[user(f"book a table {long}")], metadata=META, stream=stream)
                    for _ in answered if stream else ():
                        pass
                wait_until(lambda: left_lines(caplog), "the gateway's line about the client that left")
                assert "nothing of the turn was saved" in left_lines(caplog)[0]
                run = [s for s in spans.spans if s.span_type == "agent_run"][-1]
                assert "stopped: the client closed its connection" in json.dumps(run.error)
                assert stored(memory) == before
                assert not upstream.abandoned  # the background observer's call goes on
                assert [b for b in upstream.chat_requests() if not is_observer(b)][-1]["messages"][-1] == \
                    user(f"first {long}")  # the stopped turn's model was never asked
                upstream.release()
                assert memory.wait_idle(60)
                done = client(gateway).chat.completions.create(model="echo", messages=[user(f"again {long}")],
                                                               metadata=META)
                assert done.choices[0].message.content == "Noted."
                record = load_current(store, thread_id="t1")
                assert record is not None and "Ada books a table." in record.active_observations
        finally:
            upstream.release()
            model.close()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_client_that_left_after_observational_memory_stored_its_message_is_logged_as_such(store, caplog, spans,
                                                                                              stream):
    """Synchronous observational memory stores the message it observes, with that observation, before the model is
    asked. The client gives up while the model call is held: the gateway's line said "nothing of the turn was
    saved" though the message was stored (s37-trust8); it says that the message was, and the reply not."""
    from core.llm import ScriptedModel
    from core.tokens import EstimatingTokenizer

    observation = "<observations>\nDate: Mar 3, 2025\n* 🔴 (09:00) Ada wants a table.\n</observations>"
    caplog.set_level(logging.INFO, logger="core.gateway.openai_routes")
    with LoopbackServer(reply, slots=1) as upstream:
        model = OpenAICompatibleModel("loopback", base_url=upstream.base_url, api_key="x", timeout=60)
        memory = Memory(store, MemoryOptions(last_messages=20, observational_memory={
            "message_tokens": 1, "buffer_tokens": False, "observation_tokens": 100_000}),
            tokenizer=EstimatingTokenizer(), observer_model=ScriptedModel(lambda _m, _t: observation, name="observer"))
        agent = Agent("echo", instructions="Echo.", model=model, memory=memory, tracer=Tracer(spans))
        try:
            with GatewayServer(create_app([agent], default_resource="anon")) as gateway:
                upstream.stall_next()  # the actor's call: the observer is not the loopback's
                with pytest.raises(openai.APITimeoutError):
                    answer = client(gateway, timeout=0.5).chat.completions.create(
                        model="echo", messages=[user("book a table")], metadata=META, stream=stream)
                    for _ in answer if stream else ():
                        pass
                wait_until(lambda: upstream.abandoned, "the model server to see its connection closed")
                wait_until(lambda: left_lines(caplog), "the gateway's line about the client that left")
                line, = left_lines(caplog)
                said, = memory.recall(thread_id="t1", per_page=False).messages
                assert said.text == "book a table"
                assert "nothing of the turn was saved" not in line, line
                assert (f"its model call was stopped and nothing of the reply was saved; its message {said.id} was "
                        "stored, with the observation observational memory made of it") in line, line
                assert "agent 'echo', thread 't1', resource 'ada'" in line
                upstream.release()  # sent again: stored once, as the line says
                again = client(gateway).chat.completions.create(model="echo", messages=[user("book a table")],
                                                                metadata=META)
                assert again.choices[0].message.content.endswith("last: book a table")
                assert stored(memory) == [("user", "book a table"), ("assistant", again.choices[0].message.content)]
        finally:
            upstream.release()
            model.close()
