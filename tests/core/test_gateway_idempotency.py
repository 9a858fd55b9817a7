"""Idempotency keys: the official ``openai`` client's retries, sent with one ``Idempotency-Key``, store a turn once.

Every test runs a real gateway (``GatewayServer``) on libSQL and on Postgres, and talks to it with the official
client or plain HTTP. A lost response is lost for real: the client's timeout is shorter than the model, which
waits for the client's retry to be on its way.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import openai
import pytest

from core import Memory, MemoryOptions
from core.agent import Agent
from core.gateway import GatewayServer, create_app
from core.gateway.guard import GuardPolicy
from core.gateway.errors import GatewayError
from core.gateway.idempotency import Claim, IdempotencySettings, Keeper
from core.gateway.tokens import TokensFile, entry_for, new_token
from core.llm import ModelError, ScriptedModel
from core.messages import Message
from core.storage.schema import IDEMPOTENCY_TABLE

pytestmark = pytest.mark.backends

KEY = "Idempotency-Key"


class CountingModel:
    """A scripted model that counts its calls and, while ``gate`` is clear, waits for the test."""

    def __init__(self) -> None:
        self.calls = 0
        self.called = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.fail_next: list[Exception] = []

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> str:
        self.calls += 1
        self.called.set()
        assert self.gate.wait(60)
        if self.fail_next:
            raise self.fail_next.pop(0)
        users = [m["content"] for m in messages if m["role"] == "user"]
        return f"{len(users)} user message(s); last: {users[-1]}"


@pytest.fixture
def model() -> CountingModel:
    return CountingModel()


@pytest.fixture
def memory(store) -> Memory:
    return Memory(store, MemoryOptions(last_messages=20, working_memory={"enabled": True}))


@pytest.fixture
def users() -> dict[str, str]:
    return {"alice": new_token(), "bob": new_token(), "ops1": new_token(), "ops2": new_token()}


@pytest.fixture
def server(memory, model, users) -> Iterator[GatewayServer]:
    tokens = TokensFile(None, (entry_for("alice-app", ["alice"], users["alice"]),
                               entry_for("bob-app", ["bob"], users["bob"]),
                               entry_for("ops-1", ["*"], users["ops1"]), entry_for("ops-2", ["*"], users["ops2"])))
    agent = Agent("echo", instructions="Echo.", model=ScriptedModel(model), memory=memory, tracer=False)
    app = create_app([agent], policy=GuardPolicy(token="shared", tokens=tokens), default_resource="anon",
                     idempotency=IdempotencySettings(lease=30))
    with GatewayServer(app) as server:
        yield server


def client(server: GatewayServer, token: str = "shared", **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=token, **{"max_retries": 0, "timeout": 60, **kwargs})


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def stored(memory: Memory, thread: str) -> list[tuple[str, str]]:
    if memory.get_thread(thread) is None:
        return []
    return [(m.role, m.text) for m in memory.recall(thread_id=thread, per_page=False).messages]


def key_rows(memory: Memory) -> list[tuple[Any, ...]]:
    with memory.store.db.read() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(
            f"SELECT idem_key, state, resource_id, thread_id FROM {IDEMPOTENCY_TABLE} ORDER BY idem_key")]


def wait_until(condition: Any, what: str) -> None:
    """Wait (up to a minute) for something another thread or process does; never a timed assertion."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def done(memory: Memory, key: str) -> bool:
    return any(r[0] == key and r[1] == "done" for r in key_rows(memory))


def call(server: GatewayServer, method: str, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any, Any]:
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    conn.request(method, path, json.dumps(body),
                 {"content-type": "application/json", "authorization": "Bearer shared", **headers})
    response = conn.getresponse()
    status, data, headers_back = response.status, json.loads(response.read()), response.headers
    conn.close()
    return status, data, headers_back


class StoredThenHeld(Agent):
    """``Agent.generate`` held by the test after the turn is stored, before its answer is sent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stored, self.release = threading.Event(), threading.Event()

    def generate(self, message, **kwargs):  # type: ignore[override]
        result = super().generate(message, **kwargs)
        self.stored.set()
        assert self.release.wait(60)
        return result


def test_a_retry_after_a_lost_response_stores_the_turn_once(memory, model):
    """The client's timeout runs out after the turn was stored, before its answer came (the response is lost); its
    one retry carries the same key, arrives once the first request finished, and gets its answer: one turn stored,
    one model call. (A client that gives up before the turn is stored stops it: test_gateway_client_gone.py.)"""
    agent = StoredThenHeld("echo", instructions="Echo.", model=ScriptedModel(model), memory=memory, tracer=False)
    attempts: list[httpx.Request] = []

    def on_request(request: httpx.Request) -> None:
        attempts.append(request)
        if len(attempts) == 2:  # the retry: let the first request finish before it is sent
            agent.release.set()
            wait_until(lambda: done(memory, "retry-1"), "the first request to finish")

    with GatewayServer(create_app([agent], idempotency=IdempotencySettings(lease=30))) as server:
        http_client = httpx.Client(event_hooks={"request": [on_request]})
        retrying = client(server, max_retries=1, timeout=0.5, http_client=http_client)
        reply = retrying.chat.completions.with_raw_response.create(
            model="echo", messages=[user("book a table")], metadata={"thread_id": "t1", "resource_id": "ada"},
            extra_headers={KEY: "retry-1"})
        assert agent.stored.is_set()
        assert len(attempts) == 2 and attempts[0].headers[KEY] == attempts[1].headers[KEY] == "retry-1"
        assert reply.headers["idempotent-replayed"] == "true"
        assert reply.parse().choices[0].message.content == "1 user message(s); last: book a table"
        assert model.calls == 1
        assert stored(memory, "t1") == [("user", "book a table"),
                                        ("assistant", "1 user message(s); last: book a table")]
        # The same request sent again later gets the same completion, id included.
        again = client(server).chat.completions.with_raw_response.create(
            model="echo", messages=[user("book a table")], metadata={"thread_id": "t1", "resource_id": "ada"},
            extra_headers={KEY: "retry-1"})
        assert again.parse().id == reply.parse().id and model.calls == 1
        http_client.close()


def test_without_a_key_a_response_lost_after_the_store_is_stored_twice(memory, model):
    """What the keys are for: the same lost response without one, and the client's retry stores the turn again."""
    agent = StoredThenHeld("echo", instructions="Echo.", model=ScriptedModel(model), memory=memory, tracer=False)
    attempts: list[httpx.Request] = []

    def on_request(request: httpx.Request) -> None:
        attempts.append(request)
        if len(attempts) == 2:
            agent.release.set()

    with GatewayServer(create_app([agent])) as server, \
            httpx.Client(event_hooks={"request": [on_request]}) as http_client:
        client(server, max_retries=1, timeout=0.5, http_client=http_client).chat.completions.create(
            model="echo", messages=[user("book a table")], metadata={"thread_id": "t1", "resource_id": "ada"})
    assert model.calls == 2 and len(stored(memory, "t1")) == 4


def test_without_a_key_a_turn_whose_client_gave_up_is_not_stored_and_its_retry_stores_it_once(server, memory, model,
                                                                                              caplog):
    """The client gives up while the model works: that turn is stopped and stores nothing (the scripted model, with
    no connection to shut, runs on and its reply is thrown away), so the retry's turn is the only one stored."""
    caplog.set_level(logging.INFO, logger="core.gateway.openai_routes")
    model.gate.clear()
    attempts: list[httpx.Request] = []

    def on_request(request: httpx.Request) -> None:
        attempts.append(request)
        if len(attempts) == 2:
            model.gate.set()

    with httpx.Client(event_hooks={"request": [on_request]}) as http_client:
        answer = client(server, max_retries=1, timeout=0.5, http_client=http_client).chat.completions.create(
            model="echo", messages=[user("book a table")], metadata={"thread_id": "t1", "resource_id": "ada"})
    # The first turn has ended (its reply thrown away) once the gateway says so.
    wait_until(lambda: any(r.getMessage().startswith("a client left before its turn's answer") for r in caplog.records),
               "the first turn to end")
    assert answer.choices[0].message.content == "1 user message(s); last: book a table"
    assert model.calls == 2
    assert stored(memory, "t1") == [("user", "book a table"), ("assistant", "1 user message(s); last: book a table")]


def test_a_repeat_while_the_first_runs_is_409_then_gets_the_answer(server, memory, model):
    model.gate.clear()
    meta = {"thread_id": "t2", "resource_id": "ada"}
    first: list[Any] = []
    runner = threading.Thread(target=lambda: first.append(client(server).chat.completions.create(
        model="echo", messages=[user("hello")], metadata=meta, extra_headers={KEY: "dup"})))
    runner.start()
    assert model.called.wait(60)
    with pytest.raises(openai.ConflictError) as conflict:
        client(server).chat.completions.create(model="echo", messages=[user("hello")], metadata=meta,
                                               extra_headers={KEY: "dup"})
    assert conflict.value.code == "idempotency_key_in_use"
    assert conflict.value.response.headers["retry-after"] == "2"
    assert "still running" in conflict.value.message and "same key" in conflict.value.message
    model.gate.set()
    runner.join(60)
    again = client(server).chat.completions.create(model="echo", messages=[user("hello")], metadata=meta,
                                                   extra_headers={KEY: "dup"})
    assert again.id == first[0].id and model.calls == 1 and len(stored(memory, "t2")) == 2


def test_concurrent_duplicates_run_once(server, memory, model):
    """Eight copies at once, with the client's own retries (it honours Retry-After on the 409s): one turn."""
    def send(_: int) -> str:
        completion = client(server, max_retries=5).chat.completions.create(
            model="echo", messages=[user("once")], metadata={"thread_id": "t3", "resource_id": "ada"},
            extra_headers={KEY: "burst"})
        return completion.id

    results: list[str] = []
    threads = [threading.Thread(target=lambda i=i: results.append(send(i))) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 8 and len(set(results)) == 1
    assert model.calls == 1 and len(stored(memory, "t3")) == 2


def test_another_callers_or_resources_equal_key_is_another_key(server, memory, model, users):
    for token, resource in (("shared", "ada"), ("shared", "bea"), (users["ops1"], "ada"), (users["ops2"], "ada")):
        client(server, token).chat.completions.create(
            model="echo", messages=[user("same words")], metadata={"resource_id": resource},
            extra_headers={KEY: "common-key"})
    for token in (users["alice"], users["bob"]):  # tokens of one resource each
        client(server, token).chat.completions.create(model="echo", messages=[user("same words")],
                                                      extra_headers={KEY: "common-key"})
    assert model.calls == 6
    assert sorted(r[2] for r in key_rows(memory)) == ["ada", "ada", "ada", "alice", "bea", "bob"]


def test_the_same_key_with_another_body_is_422(server, memory, model):
    meta = {"thread_id": "t4", "resource_id": "ada"}
    client(server).chat.completions.create(model="echo", messages=[user("first")], metadata=meta,
                                           extra_headers={KEY: "k4"})
    for changed in ({"messages": [user("second")], "metadata": meta},
                    {"messages": [user("first")], "metadata": {"thread_id": "t5", "resource_id": "ada"}}):
        with pytest.raises(openai.UnprocessableEntityError) as reused:
            client(server).chat.completions.create(model="echo", **changed, extra_headers={KEY: "k4"})
        assert reused.value.code == "idempotency_key_reused"
        assert "different request" in reused.value.message and "new key" in reused.value.message
    assert model.calls == 1 and len(stored(memory, "t4")) == 2 and memory.get_thread("t5") is None


def test_a_malformed_key_is_400_and_runs_nothing(server, model):
    for bad in ("", "has space", "x" * 256, "caf\u00e9"):
        status, data, _ = call(server, "POST", "/v1/chat/completions",
                               {"model": "echo", "messages": [user("hi")]}, {KEY: bad.encode("utf-8").decode("latin-1")})
        assert status == 400 and data["error"]["code"] == "invalid_idempotency_key", bad
        assert "UUID" in data["error"]["message"]
    assert model.calls == 0


def test_a_streamed_turn_is_replayed_as_a_stream_or_as_json(server, memory, model):
    meta = {"thread_id": "t6", "resource_id": "ada"}

    def streamed() -> tuple[str, Any, list[Any]]:
        raw = client(server).chat.completions.with_raw_response.create(
            model="echo", messages=[user("stream it")], metadata=meta, stream=True,
            stream_options={"include_usage": True}, extra_headers={KEY: "s1"})
        chunks = list(raw.parse())
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), raw.headers, chunks

    text, headers, chunks = streamed()
    assert text == "1 user message(s); last: stream it" and "idempotent-replayed" not in headers
    replayed_text, replayed_headers, replayed = streamed()
    assert replayed_text == text and replayed_headers["idempotent-replayed"] == "true"
    assert replayed_headers["x-thread-id"] == "t6"
    assert replayed[0].id == chunks[0].id and replayed[-1].usage.total_tokens == chunks[-1].usage.total_tokens
    # ``stream`` only says how to answer: the same turn asked for as JSON is the same answer.
    plain = client(server).chat.completions.create(model="echo", messages=[user("stream it")], metadata=meta,
                                                   extra_headers={KEY: "s1"})
    assert plain.choices[0].message.content == text and plain.id == chunks[0].id
    assert model.calls == 1 and len(stored(memory, "t6")) == 2


class HoldingAgent(Agent):
    """``Agent.stream``, held by the test after the turn is stored (just before ``finish``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stored, self.release = threading.Event(), threading.Event()

    def stream(self, message, **kwargs):  # type: ignore[override]
        for event in super().stream(message, **kwargs):
            if event.kind == "finish":
                self.stored.set()
                assert self.release.wait(60)
            yield event


def test_a_client_that_left_a_stream_after_the_turn_was_stored_gets_it_on_retry(memory, model):
    agent = HoldingAgent("held", instructions="", model=ScriptedModel(model), memory=memory, tracer=False)
    with GatewayServer(create_app([agent])) as server:
        conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
        body = {"model": "held", "stream": True, "messages": [user("remember me")], "metadata": {"thread_id": "t7"}}
        conn.request("POST", "/v1/chat/completions", json.dumps(body),
                     {"content-type": "application/json", KEY: "left"})
        response = conn.getresponse()
        assert response.status == 200 and b'"role":"assistant"' in response.readline()
        assert agent.stored.wait(60)
        conn.sock.close()  # the client goes away after the turn was stored, before it saw the end
        conn.close()
        agent.release.set()
        wait_until(lambda: done(memory, "left"), "the answer to be kept")
        again = client(server).chat.completions.create(model="held", messages=[user("remember me")],
                                                       metadata={"thread_id": "t7"}, extra_headers={KEY: "left"})
    assert again.choices[0].message.content == "1 user message(s); last: remember me"
    assert model.calls == 1 and len(stored(memory, "t7")) == 2


def test_a_failure_that_stored_nothing_lets_the_retry_run_and_a_4xx_is_kept(server, memory, model):
    model.fail_next.append(ModelError("upstream said no", model_id="scripted/x", endpoint="http://model", status=500))
    meta = {"thread_id": "t8", "resource_id": "ada"}
    with pytest.raises(openai.APIStatusError) as failed:
        client(server).chat.completions.create(model="echo", messages=[user("try")], metadata=meta,
                                               extra_headers={KEY: "k8"})
    assert failed.value.status_code == 502 and key_rows(memory) == []  # the key was given back
    retried = client(server).chat.completions.create(model="echo", messages=[user("try")], metadata=meta,
                                                     extra_headers={KEY: "k8"})
    assert retried.choices[0].message.content == "1 user message(s); last: try" and model.calls == 2
    assert len(stored(memory, "t8")) == 2
    # A thread of another resource: 403 while running, kept, answered again without running.
    for n in range(2):
        raw = client(server).chat.completions.with_raw_response
        with pytest.raises(openai.PermissionDeniedError) as denied:
            raw.create(model="echo", messages=[user("mine?")], metadata={"thread_id": "t8", "resource_id": "eve"},
                       extra_headers={KEY: "k9"})
        assert denied.value.response.headers.get("idempotent-replayed") == (None if n == 0 else "true")
    assert len(stored(memory, "t8")) == 2


def test_kept_outcomes_expire_are_swept_and_go_with_the_thread_and_forget(server, memory, model):
    meta = {"thread_id": "t10", "resource_id": "ada"}
    client(server).chat.completions.create(model="echo", messages=[user("one")], metadata=meta,
                                           extra_headers={KEY: "k10"})
    with memory.store.db.write() as conn:  # the day has passed
        conn.exec_driver_sql(f"UPDATE {IDEMPOTENCY_TABLE} SET expires_at = 0")
    again = client(server).chat.completions.with_raw_response.create(
        model="echo", messages=[user("one")], metadata=meta, extra_headers={KEY: "k10"})
    assert "idempotent-replayed" not in again.headers and model.calls == 2  # an expired key is a new key
    # An expired row nobody asks for again is deleted after a later response (once a minute per process).
    server_keeper = server.app.state.gateway.keeper  # type: ignore[attr-defined]
    server_keeper._swept.clear()
    with memory.store.db.write() as conn:
        conn.exec_driver_sql(f"UPDATE {IDEMPOTENCY_TABLE} SET expires_at = 0")
    client(server).chat.completions.create(model="echo", messages=[user("x")], metadata={"resource_id": "bea"},
                                           extra_headers={KEY: "k11"})
    wait_until(lambda: [r[0] for r in key_rows(memory)] == ["k11"], "the sweep after the response")
    client(server).chat.completions.create(model="echo", messages=[user("two")], metadata=meta,
                                           extra_headers={KEY: "k12"})
    memory.delete_thread("t10")
    assert [r[0] for r in key_rows(memory)] == ["k11"]
    from core.edits.forget import forget_resource

    report = forget_resource(memory.store, "bea")
    assert report.removed["idempotency keys"] == 1 and key_rows(memory) == []


def test_working_memory_put_with_a_key_writes_once(server, memory):
    client(server).chat.completions.create(model="echo", messages=[user("hi")],
                                           metadata={"thread_id": "t20", "resource_id": "ada"})
    path = "/api/memory/threads/t20/working-memory?resourceId=ada"
    status, first, headers = call(server, "PUT", path, {"workingMemory": "# Ada\n- likes tea"}, {KEY: "wm-1"})
    assert status == 200 and headers.get("idempotent-replayed") is None
    # Someone else writes meanwhile; the retry of the first write must not undo it.
    call(server, "PUT", path, {"workingMemory": "# Ada\n- likes coffee"}, {})
    status, again, headers = call(server, "PUT", path, {"workingMemory": "# Ada\n- likes tea"}, {KEY: "wm-1"})
    assert status == 200 and again == first and headers["idempotent-replayed"] == "true"
    assert memory.get_working_memory(thread_id="t20", resource_id="ada") == "# Ada\n- likes coffee"
    status, data, _ = call(server, "PUT", path, {"workingMemory": "other"}, {KEY: "wm-1"})
    assert status == 422 and data["error"]["code"] == "idempotency_key_reused"
    # A failed If-Match is a 4xx found while running: kept, and the repeat meets it again.
    for n in range(2):
        status, data, headers = call(server, "PUT", path, {"workingMemory": "x"}, {KEY: "wm-2", "If-Match": '"stale"'})
        assert status == 412 and headers.get("idempotent-replayed") == (None if n == 0 else "true")


def test_an_unknown_key_header_without_memory_runs_as_before(memory):
    plain = Agent("plain", instructions="", model=ScriptedModel(lambda m, t: "ok"), tracer=False)
    with GatewayServer(create_app([plain])) as server:
        for _ in range(2):
            reply = client(server).chat.completions.with_raw_response.create(
                model="plain", messages=[user("hi")], extra_headers={KEY: str(uuid.uuid4())})
            assert reply.parse().choices[0].message.content == "ok" and "idempotent-replayed" not in reply.headers


def _taken_over(keeper: Keeper, db: Any, key: str, thread: str) -> tuple[Claim, Claim]:
    """A claim of ``key`` (a request that then stalls) and the repeat's, which takes the key over once the first's
    lease runs out (409 until then)."""
    stale = keeper.claim(db, scope="s", key=key, digest="d", resource_id="ada", thread_id=thread)
    assert isinstance(stale, Claim)
    while True:
        try:
            repeat = keeper.claim(db, scope="s", key=key, digest="d", resource_id="ada", thread_id=thread)
            break
        except GatewayError as exc:
            assert exc.status == 409
            time.sleep(0.02)
    assert isinstance(repeat, Claim)
    return stale, repeat


def test_a_turn_whose_key_was_taken_over_while_it_ran_saves_nothing(memory, model):
    """A request that held its key past the lease (a stalled process) and finishes after a repeat took the key over
    saves nothing: its outcome is written in the turn's own transaction, which refuses (409) when the key is no
    longer its own, so only the repeat's turn is stored."""
    keeper = Keeper(IdempotencySettings(lease=0.05))
    db = memory.store.db
    stale, repeat = _taken_over(keeper, db, "k-stall", "t-stall")
    assert repeat.took_over
    agent = Agent("echo", instructions="Echo.", model=ScriptedModel(model), memory=memory, tracer=False)
    where = {"thread": "t-stall", "resource": "ada"}
    with pytest.raises(GatewayError) as refused:
        agent.generate("hello", memory=where, save_with=lambda o: keeper.saved_with(stale, {"text": o.text}))
    assert refused.value.status == 409 and refused.value.code == "idempotency_key_in_use"
    assert memory.get_thread("t-stall") is None  # nothing of the stale turn was saved
    agent.generate("hello", memory=where, save_with=lambda o: keeper.saved_with(repeat, {"text": o.text}))
    assert [m.role for m in memory.recall(thread_id="t-stall", resource_id="ada").messages] == ["user", "assistant"]
    with db.read() as conn:
        assert [tuple(r) for r in conn.exec_driver_sql(f"SELECT state, outcome FROM {IDEMPOTENCY_TABLE}")] == \
            [("done", '{"text":"1 user message(s); last: hello"}')]


def test_a_working_memory_write_and_its_keys_outcome_are_one_transaction(memory):
    """The working-memory PUT kept its answer for its key in a second transaction after the write, so a process
    that died between the two left the key leased and the retry wrote again (with If-Match, a 412 for its own
    write). The answer is now kept in the write's transaction: a key no longer held undoes the write (409), and a
    held one is done exactly when the value is written."""
    keeper = Keeper(IdempotencySettings(lease=0.05))
    db = memory.store.db
    memory.save_messages([Message.user("hi", thread_id="t-wm", resource_id="ada")])
    stale, repeat = _taken_over(keeper, db, "k-wm", "t-wm")

    def kept(claim: Claim) -> Any:
        return keeper.saved_with(claim, lambda value: {"kind": "json", "status": 200, "body": value.text, "headers": {}})

    with pytest.raises(GatewayError) as refused:
        memory.update_working_memory(thread_id="t-wm", resource_id="ada", working_memory="# stale", _writes=[kept(stale)])
    assert refused.value.status == 409
    assert memory.get_working_memory(thread_id="t-wm", resource_id="ada") is None  # the stale write was undone
    memory.update_working_memory(thread_id="t-wm", resource_id="ada", working_memory="# fresh", _writes=[kept(repeat)])
    with db.read() as conn:
        assert [tuple(r) for r in conn.exec_driver_sql(f"SELECT state, outcome FROM {IDEMPOTENCY_TABLE}")] == \
            [("done", '{"kind":"json","status":200,"body":"# fresh","headers":{}}')]


def test_a_keyed_turn_refused_before_it_runs_gives_its_key_back(server, memory, model):
    """A keyed turn into a thread without an owner is refused (403) when its thread is looked up, before the model
    runs; that refusal is kept for the key like any 4xx found while running, and the key is never left leased."""
    memory.save_messages([Message.user("someone's", thread_id="orphan", resource_id="victim")])
    with memory.store.db.write() as conn:  # another program stored it without an owner
        conn.exec_driver_sql('UPDATE mastra_threads SET "resourceId" = ? WHERE id = ?', ("", "orphan"))
    for n in range(2):
        with pytest.raises(openai.PermissionDeniedError) as refused:
            client(server).chat.completions.with_raw_response.create(
                model="echo", messages=[user("hello")], metadata={"thread_id": "orphan", "resource_id": "ada"},
                extra_headers={KEY: "k-orphan"})
        assert refused.value.response.headers.get("idempotent-replayed") == (None if n == 0 else "true")
    assert model.calls == 0
    with memory.store.db.read() as conn:
        assert [r[0] for r in conn.exec_driver_sql(f"SELECT state FROM {IDEMPOTENCY_TABLE}")] == ["done"]


def _as(users: dict[str, str], who: str, key: str) -> dict[str, str]:
    return {KEY: key, "authorization": f"Bearer {users[who]}"}


def test_a_working_memory_key_through_another_resources_thread_keeps_no_trace_of_it(server, memory, users):
    """A resource-scoped write through bob's thread, asked as alice, writes alice's own working memory (the thread
    is answered as one not stored yet). Her key's row never names bob's thread, so bob deleting it or being
    forgotten neither drops nor counts alice's key: her repeat is still answered from it, untouched by bob."""
    client(server).chat.completions.create(model="echo", messages=[user("hi")],
                                           metadata={"thread_id": "t-bob", "resource_id": "bob"})
    memory.update_working_memory(thread_id="t-bob", resource_id="bob", working_memory="# Bob's")
    path = "/api/memory/threads/t-bob/working-memory?resourceId=alice"
    status, first, _ = call(server, "PUT", path, {"workingMemory": "# Alice"}, _as(users, "alice", "wm-a"))
    assert status == 200 and first["threadExists"] is False and first["resourceId"] == "alice"
    assert [r for r in key_rows(memory) if r[0] == "wm-a"] == [("wm-a", "done", "alice", None)]
    from core.edits.forget import forget_resource

    assert forget_resource(memory.store, "bob").removed.get("idempotency keys", 0) == 0
    status, again, headers = call(server, "PUT", path, {"workingMemory": "# Alice"}, _as(users, "alice", "wm-a"))
    assert status == 200 and again == first and headers["idempotent-replayed"] == "true"
    # A chat turn of alice's refused in a thread of another's (a 4xx kept for its key) names no thread either.
    client(server).chat.completions.create(model="echo", messages=[user("hi")],
                                           metadata={"thread_id": "t-eve", "resource_id": "eve"})
    with pytest.raises(openai.PermissionDeniedError):
        client(server, users["alice"]).chat.completions.create(
            model="echo", messages=[user("mine?")], metadata={"thread_id": "t-eve"}, extra_headers={KEY: "k-eve"})
    assert [r for r in key_rows(memory) if r[0] == "k-eve"] == [("k-eve", "done", "alice", None)]
    assert memory.get_working_memory(thread_id="t-bob", resource_id="alice") == "# Alice"
    # Through a thread of alice's own, the row names it (deleting the thread deletes the key, as for a turn).
    client(server).chat.completions.create(model="echo", messages=[user("hi")],
                                           metadata={"thread_id": "t-alice", "resource_id": "alice"})
    status, _, _ = call(server, "PUT", "/api/memory/threads/t-alice/working-memory?resourceId=alice",
                        {"workingMemory": "# Alice 2"}, _as(users, "alice", "wm-b"))
    assert status == 200 and [r for r in key_rows(memory) if r[0] == "wm-b"] == [("wm-b", "done", "alice", "t-alice")]


def test_a_per_thread_working_memory_key_through_another_resources_thread_never_reaches_it(store, users):
    """Per thread, the write through bob's thread is a 404 (a thread not stored yet), kept for alice's key with no
    thread named. Before, the row named bob's thread: his delete dropped it, and alice's repeat, after she started a
    thread under the freed id, ran again and wrote there: another answer to one key, decided by bob's action."""
    memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "thread"}))
    tokens = TokensFile(None, (entry_for("alice-app", ["alice"], users["alice"]),
                               entry_for("bob-app", ["bob"], users["bob"])))
    agent = Agent("echo", instructions="Echo.", model=ScriptedModel(lambda m, t: "ok"), memory=memory, tracer=False)
    app = create_app([agent], policy=GuardPolicy(token="shared", tokens=tokens), default_resource="anon")
    with GatewayServer(app) as server:
        client(server, users["bob"]).chat.completions.create(model="echo", messages=[user("hi")],
                                                             metadata={"thread_id": "t-bob"})
        memory.update_working_memory(thread_id="t-bob", resource_id="bob", working_memory="# Bob's")
        path = "/api/memory/threads/t-bob/working-memory?resourceId=alice"
        for n in range(2):
            status, data, headers = call(server, "PUT", path, {"workingMemory": "# Alice"}, _as(users, "alice", "wm-t"))
            assert status == 404 and data["error"]["code"] == "not_found"
            assert headers.get("idempotent-replayed") == (None if n == 0 else "true")
            assert key_rows(memory) == [("wm-t", "done", "alice", None)]
        memory.delete_thread("t-bob")
        client(server, users["alice"]).chat.completions.create(model="echo", messages=[user("mine")],
                                                               metadata={"thread_id": "t-bob"})
        status, data, headers = call(server, "PUT", path, {"workingMemory": "# Alice"}, _as(users, "alice", "wm-t"))
        assert status == 404 and headers.get("idempotent-replayed") == "true"
        assert memory.get_working_memory(thread_id="t-bob", resource_id="alice") is None
