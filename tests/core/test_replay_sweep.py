"""A sweep of what a stored turn says was sent against the raw bytes the model server received.

For each way a turn reaches a model (``Agent.generate``, ``Agent.stream``, the gateway's chat route plain
and streamed, a tool loop's second call, a delegated sub-agent's call) and each request setting a user can
give (every ``ModelSettings`` key, in our names and Mastra's, numbers written as ``1``, ``1.0``, ``1e-05``
and a sum that is no short decimal, ``tool_choice`` in each form, a ``json_schema`` response format whose
schema holds non-ASCII text, nested key order and numbers), the loopback server keeps the bytes of every
request, and from a fresh ``Memory`` on the same database each call's bytes (``call_bytes``, what Replay's
"Copy Request Body (exact bytes)" copies) and its body (``Memory.turn_requests``) must equal them, key order,
number spelling and escaping included; likewise for memory that reads across a resource's threads or writes
during a turn (working memory, recall and observational memory in resource scope, buffered observations).
``test_replay_bytes`` and ``test_replay_requests`` cover one fixed conversation each; this varies the request,
the path and the memory. The gateway uses none of a client's settings: the answer and the trace say which.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import Agent, Memory, MemoryOptions, Tool, open_store
from core.llm import LoopbackServer, OpenAICompatibleModel, ScriptedModel, ScriptedReply, tool_call
from core.llm.wire import without_transport
from core.replay.wire import call_bytes, not_bytes_reason
from core.scopes import delegation_resource
from core.traces.tracer import InMemorySpanExporter, Tracer

pytestmark = pytest.mark.backends  # (the tests that take ``db_path`` run on libSQL and on Postgres)

RESOURCE = "zoë"
LOOKUP = Tool("lookup", "Look a word up — „Wörterbuch“ 📖.",
              lambda args, _ctx: {"word": args.get("word"), "meaning": "ein Wort", "score": 1.0, "big": 1e16,
                                  "tiny": 1e-07},
              {"type": "object", "properties": {"word": {"type": "string", "description": "Das Wort (z. B. Grüße)"},
                                                "limit": {"type": "integer", "minimum": 1, "maximum": 1e3}},
               "required": ["word"]})
SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {
    "name": "antwort", "strict": True,
    "schema": {"type": "object", "additionalProperties": False, "required": ["wort", "zahl"],
               "properties": {"zahl": {"type": "number", "minimum": 0.0, "maximum": 1e16, "multipleOf": 0.5},
                              "wort": {"type": "string", "description": "Ein Wort — ✓ \u2028 </script>"}}}}}


def responder(messages: list[dict[str, Any]], tools: Any) -> Any:
    """Calls ``lookup`` once when asked to look something up, then answers; a sub-agent answers plainly."""
    last = messages[-1]
    if last["role"] == "tool":
        return "Gefunden ✓."
    text = str(last.get("content"))
    names = [t["function"]["name"] for t in tools or ()]
    if "delegate" in text and "agent-helper" in names:
        return ScriptedReply(tool_calls=(tool_call("agent-helper", {"prompt": "Sag „hallo“ 👋"}),))
    if "look" in text and "lookup" in names:
        return ScriptedReply(tool_calls=(tool_call("lookup", {"word": "Grüße", "limit": 3}),))
    return "Gern 😊 — „so“."


def _model(server: LoopbackServer) -> OpenAICompatibleModel:
    return OpenAICompatibleModel("loopback-chat", base_url=server.base_url, api_key="k", api_key_env=None,
                                 keyring_service=None)


def _memory(store: Any) -> Memory:
    return Memory(store, MemoryOptions(last_messages=8), name="sweep")


def calls_of(memory: Memory, thread: str) -> list[tuple[Any, Any]]:
    """Every model call of every stored turn of ``thread``, as Replay rebuilds them."""
    out = []
    for turn in memory.turns(thread):
        info = memory.assemble(as_of=turn.input_message_id).replay
        assert info is not None and info.exact, (turn.input_text, info and info.differences)
        out.extend((info, call) for call in info.calls)
    return out


def assert_as_received(path: Path | str, threads: list[str], received: list[bytes],
                       options: MemoryOptions | None = None) -> None:
    """From a fresh ``Memory`` on the database: the calls of ``threads`` (in order), one per request the
    server received, each giving those bytes exactly and, as JSON, that body."""
    store = open_store(path)
    try:
        memory = Memory(store, options, name="sweep") if options is not None else _memory(store)
        calls = [c for thread in threads for c in calls_of(memory, thread)]
        assert len(calls) == len(received)
        for (info, call), sent in zip(calls, received):
            assert not_bytes_reason(info, call) is None, not_bytes_reason(info, call)
            got = call_bytes(info, call)
            assert got == sent, f"\nrecord: {got!r}\nserver: {sent!r}"
            assert dict(call.request) == without_transport(json.loads(sent))
        bodies = [b for thread in threads for turn in memory.turns(thread)
                  for b in memory.turn_requests(turn.input_message_id)]
        # (as JSON: the bytes above hold the key order; a body is a dict in the engine's own order)
        assert bodies == [without_transport(json.loads(s)) for s in received]
    finally:
        store.close()


# -- settings --------------------------------------------------------------------------------------

#: Numbers as a user may write them: whole, with a point, in exponent form, a sum with no short decimal.
def _unit(high: float) -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from([0, 1, 1.0, 0.1 + 0.2, 1e-05, high, float(int(high))]),
                     st.floats(min_value=0.0, max_value=high, allow_nan=False, allow_infinity=False))


SETTINGS = st.fixed_dictionaries({}, optional={
    "temperature": _unit(2.0),
    "top_p": _unit(1.0),
    "max_tokens": st.integers(min_value=1, max_value=2**31),
    "top_k": st.integers(min_value=1, max_value=200),
    "seed": st.integers(min_value=-(2**63), max_value=2**63 - 1),
    "stop": st.one_of(st.text(min_size=1, max_size=6), st.lists(st.text(min_size=1, max_size=6), min_size=1,
                                                                  max_size=3)),
    "presence_penalty": st.one_of(_unit(2.0), st.just(-2.0), st.just(-1)),
    "frequency_penalty": st.one_of(_unit(2.0), st.just(-0.5)),
    "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}, SCHEMA_FORMAT]),
})
CHOICES = st.sampled_from([None, "auto", "none", "required", {"name": "lookup"}, {"type": "tool", "toolName": "lookup"},
                           {"type": "function", "function": {"name": "lookup"}}])
MASTRA_NAMES = {"max_tokens": "maxTokens", "top_p": "topP", "top_k": "topK", "stop": "stopSequences",
                "presence_penalty": "presencePenalty", "frequency_penalty": "frequencyPenalty",
                "response_format": "responseFormat"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, LoopbackServer, OpenAICompatibleModel]]:
    path = tmp_path_factory.mktemp("sweep") / "m.db"
    with LoopbackServer(ScriptedModel(responder, name="server")) as server:
        model = _model(server)
        yield path, server, model
        model.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(defaults=SETTINGS, per_call=SETTINGS, choice=CHOICES, streamed=st.booleans(), mastra=st.booleans(),
       look=st.booleans())
def test_every_setting_a_user_gives_is_recorded_as_the_bytes_the_server_received(
        served: Any, defaults: dict[str, Any], per_call: dict[str, Any], choice: Any, streamed: bool, mastra: bool,
        look: bool) -> None:
    path, server, model = served
    one_turn(path, server, model, defaults, per_call, choice, streamed, mastra, look)


def one_turn(path: Path | str, server: LoopbackServer, model: OpenAICompatibleModel, defaults: dict[str, Any],
             per_call: dict[str, Any], choice: Any, streamed: bool, mastra: bool, look: bool) -> None:
    """One turn with these settings on a new thread, then its calls against the bytes the server received."""
    if mastra:  # Mastra's camelCase names for the per-call settings
        per_call = {MASTRA_NAMES.get(k, k): v for k, v in per_call.items()}
    store = open_store(path)
    try:
        agent = Agent("sweep", instructions="Antworte kurz – „höflich“.", model=model, memory=_memory(store),
                      tools=[LOOKUP], model_settings=defaults, tracer=False)
        thread = f"t-{len(server.chat_request_bytes())}"
        before = len(server.chat_request_bytes())
        text = "Please look up „Grüße“ 👋🏽" if look else "Sag etwas \"Kurzes\" über Zürich\t</script>"
        where = {"resource": RESOURCE, "thread": thread}
        if streamed:
            assert list(agent.stream(text, memory=where, model_settings=per_call, tool_choice=choice))[-1].kind \
                == "finish"
        else:
            agent.generate(text, memory=where, model_settings=per_call, tool_choice=choice)
    finally:
        store.close()
    received = server.chat_request_bytes()[before:]
    assert received
    assert_as_received(path, [thread], received)


#: Settings that stress number spelling and escaping, on each backend (the sweep above runs on libSQL).
EXAMPLES = [
    ({"temperature": 1, "top_p": 1.0, "seed": 2**63 - 1}, {"temperature": 0.1 + 0.2, "presence_penalty": 1e-05},
     {"name": "lookup"}, False, False, True),
    ({"max_tokens": 2**31, "stop": " "}, {"responseFormat": SCHEMA_FORMAT, "topK": 1, "stopSequences": ["</s>", "ü"]},
     "required", True, True, True),
    ({"frequency_penalty": -2.0, "response_format": {"type": "json_object"}}, {"seed": -(2**63), "temperature": 2},
     "none", True, False, False),
]


@pytest.mark.parametrize("example", EXAMPLES, ids=["numbers", "mastra-names-streamed", "no-tools-streamed"])
def test_settings_that_stress_numbers_and_escaping_are_recorded_as_sent(db_path: Any, example: Any) -> None:
    with LoopbackServer(ScriptedModel(responder, name="server")) as server:
        model = _model(server)
        try:
            one_turn(db_path, server, model, *example)
        finally:
            model.close()



# -- memory configurations -----------------------------------------------------------------------------

_OBSERVED = itertools.count(1)


def _observer(messages: list[dict[str, Any]], tools: Any) -> str:
    n = next(_OBSERVED)
    return (f"<observations>\nDate: Mar 2, 2026\n* 🔴 (09:{n % 60:02d}) Zoë asked about batch {n} „Grüße“.\n"
            f"</observations>\n<current-task>\nAnswering batch {n}.\n</current-task>")


#: Memory options whose processors read more than the thread (resource scope) or write during a turn.
CONFIGS = {
    "wm-resource-markdown": {"working_memory": {"enabled": True, "scope": "resource", "template": "# Zoë\n- Stadt:\n"}},
    "wm-thread-schema": {"working_memory": {"enabled": True, "schema": {"type": "object", "properties": {
        "stadt": {"type": "string"}, "grad": {"type": "number"}}}}},
    "recall-resource": {"semantic_recall": {"top_k": 2, "message_range": 1, "scope": "resource"}},
    "om-resource": {"observational_memory": {"enabled": True, "message_tokens": 40, "scope": "resource"}},
    "om-thread-buffered": {"observational_memory": {"enabled": True, "message_tokens": 60, "buffer_tokens": 0.25,
                                                    "block_after": 10.0}},
}


@pytest.mark.parametrize("config", list(CONFIGS), ids=list(CONFIGS))
def test_every_memory_configuration_is_recorded_as_the_bytes_the_server_received(db_path: Any, config: str) -> None:
    """Turns alternating between two threads of one resource (plain, streamed, a tool loop), with memory that
    reads across them or writes during a turn: each call's bytes as the record gives them are the server's."""
    from core.embedding import HashingEmbedder

    options = MemoryOptions(last_messages=4, **CONFIGS[config])
    texts = ["Hallo, ich bin Zoë 👋 aus Köln.", "Please look up „Grüße“.", "Wie ist es in 東京?",
             "Please look up „Käse“ 🧀.", "Noch etwas \"Kurzes\"?", "Danke – bis bald."]
    slices: dict[str, list[bytes]] = {"t-a": [], "t-b": []}
    with LoopbackServer(ScriptedModel(responder, name="server")) as server:
        model = _model(server)
        store = open_store(db_path)
        try:
            memory = Memory(store, options, name="sweep", embedder=HashingEmbedder(),
                            observer_model=ScriptedModel(_observer, name="observer"))
            agent = Agent("sweep", instructions="Antworte kurz.", model=model, memory=memory, tools=[LOOKUP],
                          model_settings={"temperature": 0.5, "seed": 1}, tracer=False)
            for n, text in enumerate(texts):
                thread = ("t-a", "t-b")[n % 2]
                assert memory.wait_idle(30)
                before = len(server.chat_request_bytes())
                where = {"resource": RESOURCE, "thread": thread}
                if n % 3 == 2:
                    assert list(agent.stream(text, memory=where))[-1].kind == "finish"
                else:
                    agent.generate(text, memory=where)
                slices[thread] += server.chat_request_bytes()[before:]
            assert memory.wait_idle(30)
        finally:
            model.close()
            store.close()
    everything = slices["t-a"] + slices["t-b"]
    if config.startswith("om-"):  # the cases that matter came up: observations sent, and (resource) the block
        assert any("asked about batch".encode() in sent for sent in everything)
    if config == "om-resource":
        assert any(b"OTHER conversations" in sent for sent in everything)
    for thread, received in slices.items():
        assert_as_received(db_path, [thread], received, options)


# -- the gateway ----------------------------------------------------------------------------------

#: Everything a client may put in a chat-completions request besides its messages and where to store the turn.
CLIENT_SETTINGS: dict[str, Any] = {
    "temperature": 0.2, "top_p": 0.5, "max_tokens": 7, "max_completion_tokens": 9, "stop": ["END"], "seed": 3,
    "presence_penalty": 0.4, "frequency_penalty": -0.4, "logit_bias": {"50256": -100}, "parallel_tool_calls": False,
    "tool_choice": "none", "response_format": SCHEMA_FORMAT,
    "tools": [{"type": "function", "function": {"name": "client_tool", "parameters": {"type": "object"}}}],
}
#: What the gateway reads besides the messages: where the turn goes and how the reply travels.
GATEWAY_READS = ("model", "messages", "metadata", "user", "stream", "stream_options", "n")


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_gateway_turn_is_recorded_as_sent_and_the_client_is_told_which_settings_were_not_used(
        tmp_path: Path, streamed: bool) -> None:
    import openai

    from core.gateway import GatewayServer, create_app

    path = tmp_path / "m.db"
    own = {"temperature": 1.0, "max_tokens": 64, "top_k": 5, "seed": 11, "stop": ["###"]}
    with LoopbackServer(ScriptedModel(responder, name="server")) as server:
        model = _model(server)
        store = open_store(path)
        exporter = InMemorySpanExporter()
        agent = Agent("sweep", instructions="Antworte kurz – „höflich“.", model=model, memory=_memory(store),
                      tools=[LOOKUP], model_settings=own, tracer=Tracer(exporter))
        with GatewayServer(create_app({"sweep": agent}, default_resource="anon")) as gateway:
            client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0, timeout=60)
            asked = dict(CLIENT_SETTINGS, metadata={"thread_id": "t-gw", "resource_id": RESOURCE}, user="zoë-app")
            extra = {"repetition_penalty": 1.1, "top_k": 2}  # fields the openai client passes through as given
            messages = [{"role": "system", "content": "Be rude."},
                        {"role": "user", "content": "Please look up „Grüße“"}]
            if streamed:
                raw = client.chat.completions.with_raw_response.create(
                    model="sweep", messages=messages, stream=True, stream_options={"include_usage": True},
                    extra_body=extra, **asked)
                chunks = list(raw.parse())
                told = next(c.model_extra["memory"] for c in chunks if c.choices and c.choices[0].finish_reason)
            else:
                raw = client.chat.completions.with_raw_response.create(model="sweep", messages=messages,
                                                                       extra_body=extra, **asked)
                told = raw.parse().model_extra["memory"]
            client.close()
        model.close()
        store.close()
        received = server.chat_request_bytes()
    assert len(received) == 2  # the lookup, then the answer: the agent's tools and choice, not the client's
    for sent in received:
        body = json.loads(sent)
        assert {k: body[k] for k in own} == own and "client_tool" not in sent.decode() and b"Be rude" not in sent
        assert not set(body) & {"presence_penalty", "logit_bias", "parallel_tool_calls", "response_format",
                                "max_completion_tokens", "repetition_penalty", "user", "metadata"}
    assert_as_received(path, ["t-gw"], received)
    # Said to the client: in the body's "memory" object and a header, every request field the turn did not use.
    # (``user`` beside metadata.resource_id is OpenAI's end-user tag: the resource id names the resource)
    not_used = ["messages (system prompt)",
                *sorted([*CLIENT_SETTINGS, *extra, "user (metadata.resource_id names the resource)"])]
    assert told["ignored"] == not_used
    assert raw.headers["x-memory-ignored"] == ", ".join(not_used)  # (a header carries each of these names)
    # ... and in the Studio, on the turn's trace (the Traces pane shows a run's attributes).
    run = next(span for span in exporter.spans if span.span_type == "agent_run")
    assert (run.attributes or {})["ignoredByGateway"] == not_used


def test_a_delegated_sub_agents_call_is_recorded_as_sent(db_path: Any) -> None:
    """The supervisor's first call, the sub-agent's call (its own settings, on the delegation's thread), the
    supervisor's second call with the delegation's result: each the bytes the server received."""
    path = db_path
    with LoopbackServer(ScriptedModel(responder, name="server")) as server:
        model = _model(server)
        store = open_store(path)
        memory = _memory(store)
        helper = Agent("helper", instructions="Du hilfst – kurz.", model=model, model_settings={"temperature": 0.0,
                       "stop": ["\u2028"], "seed": -1}, register=False, tracer=False)
        boss = Agent("boss", instructions="Delegiere „gern“.", model=model, memory=memory, agents=[helper],
                     model_settings={"top_p": 1, "max_tokens": 50}, tracer=False)
        boss.generate("Please delegate this 👋", memory={"resource": RESOURCE, "thread": "t-boss"},
                      model_settings={"temperature": 1.5})
        model.close()
        store.close()
        received = server.chat_request_bytes()
    assert len(received) == 3
    assert b'"agent-helper"' in received[0] and b'"seed":-1' in received[1] and b'"role":"tool"' in received[2]
    store = open_store(path)
    try:
        child = [t.id for t in _memory(store).list_threads(resource_id=delegation_resource(RESOURCE, "helper")).threads]
    finally:
        store.close()
    assert len(child) == 1
    assert_as_received(path, [child[0]], received[1:2])
    assert_as_received(path, ["t-boss"], [received[0], received[2]])


def test_the_gateway_names_nothing_when_all_was_used_and_caps_what_it_repeats(tmp_path: Path) -> None:
    import openai

    from core.gateway import GatewayServer, create_app

    store = open_store(tmp_path / "m.db")
    agent = Agent("plain", instructions="Kurz.", model=ScriptedModel(lambda m, t: "ok"), memory=_memory(store),
                  tracer=False)
    hi = [{"role": "user", "content": "hi"}]
    try:
        with GatewayServer(create_app({"plain": agent}, default_resource="anon")) as gateway:
            client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0, timeout=60)
            plain = client.chat.completions.with_raw_response.create(model="plain", messages=hi, user="zoë-app", n=1,
                                                                     metadata={"thread_id": "t1"})
            many = {f"x{i:03d}": i for i in range(70)}
            odd = client.chat.completions.with_raw_response.create(
                model="plain", messages=hi, extra_body={"température": 0.3, "a,b": 1, **many})
            client.close()
    finally:
        store.close()
    assert plain.parse().model_extra["memory"]["ignored"] == []
    assert "x-memory-ignored" not in plain.headers
    # Sorted, at most 64 names, then how many more; the header carries the names a header can (ASCII, no comma).
    assert odd.parse().model_extra["memory"]["ignored"] == ["a,b", "température", *(f"x{i:03d}" for i in range(62)),
                                                           "… and 8 more"]
    assert odd.headers["x-memory-ignored"] == ", ".join(f"x{i:03d}" for i in range(62))
