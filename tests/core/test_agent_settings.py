"""``model_settings`` and ``tool_choice`` on ``Agent`` and ``Agent.generate`` reach the request body."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from core import Memory, MemoryOptions
from core.agent import Agent, Tool
from core.llm import LoopbackServer, ModelSettingsError, OpenAICompatibleModel, RetryPolicy, ScriptedModel, ScriptedReply
from core.llm import tool_call
from core.traces.tracer import InMemorySpanExporter, Tracer

LOOKUP = Tool("lookup", "Look a word up", lambda args, ctx: {"meaning": "a small dog"},
              {"type": "object", "properties": {"word": {"type": "string"}}})


@pytest.fixture
def memory(store):
    return Memory(store, MemoryOptions(last_messages=4))


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    script = ScriptedModel([ScriptedReply(tool_calls=(tool_call("lookup", {"word": "pug"}),)), "A pug is a dog.",
                            "again"], name="loopback")
    with LoopbackServer(script) as running:
        yield running


def client(server: LoopbackServer) -> OpenAICompatibleModel:
    return OpenAICompatibleModel("loopback-chat", base_url=server.base_url, environ={}, keyring_service=None,
                                 retry=RetryPolicy(max_retries=0))


def test_defaults_and_per_call_settings_reach_the_body(server, memory):
    tracer = Tracer(InMemorySpanExporter())
    agent = Agent("a", instructions="I", model=client(server), memory=memory, tools=[LOOKUP], tracer=tracer,
                  model_settings={"maxTokens": 64, "temperature": 0.2, "seed": 11, "stop": ["###"]})
    agent.generate("what is a pug?", memory={"resource": "u", "thread": "t"},
                   model_settings={"temperature": 0.7, "top_p": 0.9, "presence_penalty": 0.1, "topK": 20},
                   tool_choice="required")
    first, second = server.chat_requests()
    for body in (first, second):  # every call of the turn, the tool loop included
        assert body["max_tokens"] == 64 and body["temperature"] == 0.7 and body["seed"] == 11
        assert body["stop"] == ["###"] and body["top_p"] == 0.9 and body["presence_penalty"] == 0.1
        assert body["top_k"] == 20
    # A forced tool call applies to the first call only; then the model may answer.
    assert first["tool_choice"] == "required" and second["tool_choice"] == "auto"
    gens = [s for s in tracer.exporter.spans if s.span_type == "model_generation"]
    assert [g.attributes["toolChoice"] for g in gens] == ["required", "auto"]
    assert gens[0].attributes["modelSettings"] == {"max_tokens": 64, "temperature": 0.7, "top_p": 0.9, "top_k": 20,
                                                   "stop": ["###"], "seed": 11, "presence_penalty": 0.1}
    # The defaults alone, on the next call.
    agent.generate("again", memory={"resource": "u", "thread": "t"})
    third = server.chat_requests()[-1]
    assert third["temperature"] == 0.2 and "top_p" not in third and "tool_choice" not in third


def test_a_named_tool_choice_is_sent_in_openai_form(memory):
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("lookup", {"word": "pug"}),)), "ok"])
    agent = Agent("a", instructions="I", model=model, memory=memory, tools=[LOOKUP])
    agent.generate("pug?", memory={"resource": "u", "thread": "t"}, tool_choice={"type": "tool", "toolName": "lookup"})
    assert model.requests[0].tool_choice == {"type": "function", "function": {"name": "lookup"}}
    assert model.requests[1].tool_choice == "auto"


def test_tool_choice_none_holds_for_every_call(memory):
    model = ScriptedModel(["ok"])
    Agent("a", instructions="I", model=model, memory=memory, tools=[LOOKUP]).generate(
        "pug?", memory={"resource": "u", "thread": "t"}, tool_choice="none")
    assert model.requests[0].tool_choice == "none"


@pytest.mark.parametrize("kwargs, error, words", [
    ({"model_settings": {"max_token": 5}}, ModelSettingsError, "Unknown model setting 'max_token'"),
    ({"model_settings": {"temperature": -1}}, ModelSettingsError, "temperature must be a number from 0 to 2"),
    ({"tool_choice": {"name": "search"}}, ModelSettingsError, "does not offer"),
    ({"tool_choice": "sometimes"}, ModelSettingsError, "tool_choice must be"),
])
def test_bad_settings_fail_before_any_request(memory, store, kwargs, error, words):
    model = ScriptedModel(["ok"])
    agent = Agent("a", instructions="I", model=model, memory=memory, tools=[LOOKUP])
    with pytest.raises(error, match=words):
        agent.generate("hi", memory={"resource": "u", "thread": "t"}, **kwargs)
    assert model.requests == [] and store.memory.count_messages("t") == 0


def test_forcing_a_tool_when_none_is_offered_is_refused(memory):
    model = ScriptedModel(["ok"])
    with pytest.raises(ModelSettingsError, match="needs a tool, but this turn offers none"):
        Agent("a", instructions="I", model=model, memory=memory).generate(
            "hi", memory={"resource": "u", "thread": "t"}, tool_choice="required")
    assert model.requests == []


def test_agent_defaults_are_validated_when_the_agent_is_built():
    with pytest.raises(ModelSettingsError, match="Unknown model setting 'temp'"):
        Agent("a", instructions="I", model=ScriptedModel([]), model_settings={"temp": 1})


def test_temperature_keeps_working_and_model_settings_win():
    model = ScriptedModel(["a", "b"])
    Agent("a", instructions="I", model=model, temperature=0.3).generate("hi")
    Agent("a", instructions="I", model=model, temperature=0.3, model_settings={"temperature": 0.5}).generate("hi")
    assert [r.temperature for r in model.requests] == [0.3, 0.5]
    assert model.requests[0].settings == {"temperature": 0.3}
