"""The reply's ``memory.notices`` (and the ``x-memory-notices`` header): what a gateway turn's memory did less of
than asked, told to the client that would otherwise see only a reply (official ``openai`` client, real server)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from core import Memory, MemoryOptions
from core.agent import Agent
from core.gateway import GatewayServer, create_app
from core.llm import ModelError, ScriptedModel
from core.tokens import EstimatingTokenizer

LONG = "the raised beds need cedar planks and a drip line " * 12  # ~150 tokens: past the threshold below


def _agent(store: Any, observer: ScriptedModel, model: ScriptedModel) -> Agent:
    memory = Memory(store, MemoryOptions(last_messages=10, observational_memory={
        "enabled": True, "message_tokens": 60, "observation_tokens": 5_000, "buffer_tokens": False}),
        observer_model=observer, tokenizer=EstimatingTokenizer())
    return Agent("om", instructions="Be brief.", model=model, memory=memory, tracer=False)


def _ask(client: openai.OpenAI, text: str, *, streamed: bool, thread: str = "t1") -> tuple[dict[str, Any], Any]:
    """The reply's ``memory`` object and its headers."""
    meta = {"thread_id": thread, "resource_id": "ada"}
    if streamed:
        raw = client.chat.completions.with_raw_response.create(
            model="om", messages=[{"role": "user", "content": text}], metadata=meta, stream=True)
        chunks = list(raw.parse())
        return next(c.model_extra["memory"] for c in chunks if c.choices and c.choices[0].finish_reason), raw.headers
    raw = client.chat.completions.with_raw_response.create(
        model="om", messages=[{"role": "user", "content": text}], metadata=meta)
    return raw.parse().model_extra["memory"], raw.headers


@pytest.fixture
def serve(store: Any) -> Iterator[Any]:
    servers: list[GatewayServer] = []

    def start(observer: ScriptedModel, model: ScriptedModel) -> openai.OpenAI:
        server = GatewayServer(create_app({"om": _agent(store, observer, model)}, token=""))
        servers.append(server.__enter__())
        return openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=60)

    yield start
    for server in servers:
        server.__exit__(None, None, None)


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_failing_observer_is_told_to_the_client_with_its_retry_time(serve: Any, streamed: bool) -> None:
    failure = ModelError("upstream said no", model_id="scripted/observer", endpoint="http://observer.test", status=500)
    observer = ScriptedModel([failure] * 3, name="observer")
    model = ScriptedModel(lambda m, t: "ok")
    client = serve(observer, model)
    first, headers = _ask(client, "I am planning raised beds.", streamed=streamed)  # under the threshold
    assert first["notices"] == [] and "x-memory-notices" not in headers
    assert observer.requests == []
    failed, headers = _ask(client, LONG, streamed=streamed)  # crosses it: observed in this turn, the input too
    assert len(observer.requests) == 1 and LONG.strip()[:40] in str(observer.requests[0].messages[-1]["content"])
    [notice] = failed["notices"]
    assert notice["code"] == "observation_failed"
    assert "upstream said no" in notice["message"] and "http://observer.test" in notice["message"]
    assert notice["retry_at"] and f"tried again after {notice['retry_at']}" in notice["message"]
    if not streamed:  # (a streamed reply's headers go before the turn has run: its notices are in the last chunk)
        assert headers["x-memory-notices"] == "observation_failed"
    # The next turn, during the back-off, calls no observer and says until when.
    waiting, _ = _ask(client, "and the soil?", streamed=streamed)
    assert len(observer.requests) == 1
    [notice_then] = waiting["notices"]
    assert notice_then["code"] == "observation_failed" and notice_then["retry_at"] == notice["retry_at"]
    assert f"backing off until {notice['retry_at']}" in notice_then["message"]
    # What the model received holds none of it: the notices are the client's, the prompt is as before.
    assert all("upstream said no" not in str(r.messages) and "notices" not in str(r.messages) for r in model.requests)


def test_an_unexpected_observer_error_keeps_its_words_in_the_log(serve: Any, caplog: Any) -> None:
    def broken(messages: Any, tools: Any) -> str:
        raise RuntimeError("database /srv/private/om.db is locked by pid 4242")

    client = serve(ScriptedModel(broken, name="observer"), ScriptedModel(lambda m, t: "ok"))
    told, headers = _ask(client, LONG, streamed=False)  # the input crosses the threshold: observed in its turn
    [notice] = told["notices"]
    assert notice["code"] == "observation_failed" and notice["retry_at"]
    assert "/srv/private" not in str(told) and "RuntimeError" not in notice["message"]
    assert "the server's log has it" in notice["message"]
    assert "/srv/private/om.db" in caplog.text  # (the operator's)
    assert headers["x-memory-notices"] == "observation_failed"


def _raw_ask(client: openai.OpenAI, *, streamed: bool, **asked: Any) -> tuple[dict[str, Any], Any]:
    messages = [{"role": "user", "content": "hi"}]
    if streamed:
        raw = client.chat.completions.with_raw_response.create(model=asked.pop("model", "om"), messages=messages,
                                                               stream=True, **asked)
        chunks = list(raw.parse())
        return next(c.model_extra["memory"] for c in chunks if c.choices and c.choices[0].finish_reason), raw.headers
    raw = client.chat.completions.with_raw_response.create(model=asked.pop("model", "om"), messages=messages, **asked)
    return raw.parse().model_extra["memory"], raw.headers


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_turn_naming_no_resource_or_thread_is_told_where_it_went(store: Any, streamed: bool) -> None:
    """A request naming nothing (the openai client's default) was stored under the gateway's default resource,
    shared by every such request, in a new thread each time: only the x-thread-id / x-resource-id headers hinted
    at it. And an agent without memory stored nothing, saying so nowhere but in a null thread_id."""
    model = ScriptedModel(lambda m, t: "ok")
    memory = Memory(store, MemoryOptions(last_messages=10))
    agents = {"om": Agent("om", instructions="Be brief.", model=model, memory=memory, tracer=False),
              "bare": Agent("bare", instructions="Be brief.", model=model, tracer=False)}
    with GatewayServer(create_app(agents, token="", default_resource="shared")) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=60)
        nothing, headers = _raw_ask(client, streamed=streamed)
        named, named_headers = _raw_ask(client, streamed=streamed, metadata={"thread_id": "t1", "resource_id": "ada"})
        by_user, _ = _raw_ask(client, streamed=streamed, user="bob", metadata={"thread_id": "t2"})
        bare, bare_headers = _raw_ask(client, streamed=streamed, model="bare", user="bob")
    codes = [n["code"] for n in nothing["notices"]]
    assert codes == ["default_resource", "new_thread"]
    assert headers["x-memory-notices"] == "default_resource, new_thread"  # (known before a streamed reply starts)
    resource, thread = nothing["notices"]
    assert "default resource 'shared'" in resource["message"] and "every request naming none shares" in resource["message"]
    assert f"new thread, {nothing['thread_id']!r}" in thread["message"] and "metadata.thread_id" in thread["message"]
    assert [t.id for t in memory.list_threads(resource_id="shared").threads] == [nothing["thread_id"]]  # (stored)
    # Naming both (or the user field for the resource) is what the client meant: nothing to tell.
    assert named["notices"] == [] and by_user["notices"] == [] and "x-memory-notices" not in named_headers
    [not_stored] = bare["notices"]
    assert not_stored["code"] == "not_stored" and "'bare' has no memory" in not_stored["message"]
    assert bare["thread_id"] is None and bare_headers["x-memory-notices"] == "not_stored"
    # What the model received holds none of it.
    assert all("notices" not in str(r.messages) and "shared" not in str(r.messages) for r in model.requests)


@pytest.mark.parametrize("error, shown", [
    ("observer call failed: ModelError: scripted/observer: POST http://observer.test failed with HTTP 500: no", True),
    ("observer call failed: ReplyCutOff: the observer reply was cut off at the server's own reply limit", True),
    ("observer reply unusable: no <observations> block", True),
    ("observer call failed: Locked: /srv/private/om.db", False),  # (any exception class, however named)
    ("the observer failed (observer call failed: OperationalError: database is locked); backing off until x", False),
    ("no usable rewrite (level 0: ProgrammingError: relation om_private does not exist)", False),
    ("no usable rewrite (levels 0–2: the reflector reply was cut off at the server's own reply limit)", True),
    ("no usable rewrite (level 0: KeyError: 'secret')", False),
    ("something went wrong: DbLocked: pid 4242", False),
])
def test_a_notice_shows_a_failures_words_only_when_they_are_a_model_errors(error: str, shown: bool) -> None:
    from core.gateway.notices import om_notices

    [notice] = om_notices([{"observational-memory": {"reflectionError": error, "reflectionRetryAt": "2026-12-07"}}])
    assert notice == {"code": "reflection_failed", "retry_at": "2026-12-07",
                      "message": error if shown else notice["message"]}
    if not shown:
        assert notice["message"].startswith("the reflector failed with an unexpected error") and "/srv" not in \
            notice["message"]
