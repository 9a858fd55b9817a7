"""The agent runs one path (issue 18 item 5): "no memory" is a null memory, per-call options merge by
the one options rule, and the optional model capabilities are protocols, not attribute lookups."""

from __future__ import annotations

import pytest

from core import Memory, MemoryOptions
from core.agent import Agent
from core.agent_memory import MemoryTurn, NullMemory, turn_memory
from core.llm import ScriptedModel, ScriptedReply, tool_call
from core.llm.base import ServedModel, WindowedModel, WireModel
from core.model_call import request_body_for
from core.options import options_merge
from core.traces.tracer import InMemorySpanExporter, Tracer

pytestmark = pytest.mark.backends


def test_no_memory_is_the_null_memory_and_a_memory_is_its_turn(store):
    assert isinstance(turn_memory(None), NullMemory)
    memory = Memory(store, MemoryOptions(last_messages=3))
    turn = turn_memory(memory)
    assert isinstance(turn, MemoryTurn) and turn.memory is memory
    assert turn.thread_for(None, "u").startswith("thread_")  # a memory gives a thread-less call a thread
    assert NullMemory().thread_for(None, "u") is None  # without memory no thread is made up


def test_a_turn_without_memory_reads_saves_and_traces_no_memory(store):
    exporter = InMemorySpanExporter()
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": "x"}),)), "done"])
    agent = Agent("bare", instructions="Be brief.", model=model, tracer=Tracer(exporter))
    result = agent.generate("hello", memory={"resource": "u"}, context=[])
    assert result.text == "done" and result.saved == [] and result.thread_id is None
    # The working-memory tool is the memory's: without memory it is an unknown tool, as before.
    assert result.tool_results[0]["result"]["error"].startswith("There is no tool named 'updateWorkingMemory'")
    assert [m["role"] for m in model.requests[0].messages] == ["system", "user"]
    assert result.messages[-1].metadata["agent"] == "bare"
    names = [s.name for s in exporter.spans]
    assert not [n for n in names if n.startswith("memory:")]
    assert "agent run: 'bare'" in names and names.count("llm: 'scripted/demo'") == 2


def test_per_call_options_follow_the_one_options_rule(store):
    """``memory={"options": ...}`` and ``options=`` merge by ``options_merge``: a switch (True/False)
    over a settings object keeps its settings (the agent's own merge replaced the object)."""
    memory = Memory(store, MemoryOptions(last_messages=3))
    agent = Agent("a", instructions="I", model=ScriptedModel(lambda m, t: "ok"), memory=memory, tracer=False)
    result = agent.generate("hi", memory={"resource": "u", "thread": "t",
                                          "options": {"generate_title": {"model": "scripted/titles"}}},
                            options={"generate_title": False, "last_messages": 2})
    record = memory.turn_record(result.messages[0].id)
    assert record is not None
    assert record.options["generate_title"]["model"] == "scripted/titles"
    assert record.options["generate_title"]["enabled"] is False
    assert record.options["last_messages"] == 2


def test_options_merge_keeps_a_model_object_given_as_a_setting():
    observer = ScriptedModel([])
    merged = options_merge({"observational_memory": {"observer_model": observer, "message_tokens": 10}},
                           {"observational_memory": {"message_tokens": 20}})
    assert merged["observational_memory"]["observer_model"] is observer
    assert merged["observational_memory"]["message_tokens"] == 20


def test_optional_model_capabilities_are_protocols():
    scripted = ScriptedModel([], name="s", context_window=4096)
    assert isinstance(scripted, WindowedModel) and not isinstance(scripted, WireModel)

    class Bare:  # a ChatModel written without any of them
        model_id = "custom/bare"
        provider = "custom"

    assert not isinstance(Bare(), (WindowedModel, WireModel, ServedModel))
    body = request_body_for(Bare(), [{"role": "user", "content": "x"}], {"tools": None})  # type: ignore[arg-type]
    assert body["model"] == "bare"

    class Served(Bare):
        model = "served-name"

    assert request_body_for(Served(), [], {"tools": None})["model"] == "served-name"  # type: ignore[arg-type]
