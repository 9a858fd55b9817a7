"""A turn is saved whole or not at all: messages, recall rows and working memory (issue 9, items 6-8)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core import Memory, MemoryOptions, Message, open_store
from core.agent import Agent, AgentError, Tool
from core.embedding import HashingEmbedder
from core.llm import ModelError, ScriptedModel, ScriptedReply, tool_call
from core.recall import keyword

TEMPLATE = "# User\n- Name:\n- Allergies:\n"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "city": {"type": "string"}}}
REPO = Path(__file__).resolve().parents[2]


def _recall_rows(mem: Memory, ids: list[str]) -> tuple[list[str], set[str]]:
    """(ids with a vector, ids with a keyword document)."""
    index = mem.recall_index
    probes = [Message.user("x", id=i) for i in ids]
    with_vector = [m.id for m in probes if m not in index.unindexed(probes)]
    with mem.store.db.read() as conn:
        marks = ",".join("?" * len(ids))
        with_doc = {r[0] for r in conn.exec_driver_sql(
            f"SELECT message_id FROM {keyword.DOCS_TABLE} WHERE message_id IN ({marks})", tuple(ids))}
    return with_vector, with_doc


# -- 6. recall rows only for what is saved ---------------------------------------------------------

def test_a_failed_model_call_leaves_no_recall_rows(store):
    mem = Memory(store, MemoryOptions(semantic_recall={"enabled": True, "scope": "resource"}),
                 embedder=HashingEmbedder())
    agent = Agent("chat", instructions="I", model=ScriptedModel([ModelError("down", model_id="scripted/x")]),
                  memory=mem, tracer=False)
    with pytest.raises(ModelError):
        agent.generate(Message.user("where did I park the blue bicycle", id="in-1"),
                       memory={"resource": "u", "thread": "t"})
    assert store.memory.get_messages(["in-1"]) == []
    assert _recall_rows(mem, ["in-1"]) == ([], set())
    assert mem.search("blue bicycle", resource_id="u") == []


def test_a_saved_turn_is_indexed(store):
    mem = Memory(store, MemoryOptions(semantic_recall={"enabled": True}), embedder=HashingEmbedder())
    agent = Agent("chat", instructions="I", model=ScriptedModel(["By the red door."]), memory=mem, tracer=False)
    result = agent.generate(Message.user("where did I park the blue bicycle", id="in-1"),
                            memory={"resource": "u", "thread": "t"})
    ids = [m.id for m in result.saved]
    assert len(ids) == 2
    vectors, docs = _recall_rows(mem, ids)
    assert sorted(vectors) == sorted(ids) and docs == set(ids)


# -- 7. a turn that fails after a tool step --------------------------------------------------------

def test_a_turn_failing_after_a_tool_step_saves_nothing_and_names_the_tools(store):
    mem = Memory(store, MemoryOptions(last_messages=10))
    ran: list[str] = []
    weather = Tool("getWeather", "weather", lambda args, ctx: ran.append(args["city"]) or {"temp": 4})
    model = ScriptedModel([
        ScriptedReply(tool_calls=(tool_call("getWeather", {"city": "Oslo"}),)),
        ModelError("provider went away", model_id="scripted/x", status=503),
    ])
    agent = Agent("chat", instructions="I", model=model, memory=mem, tools=[weather], tracer=False)
    with pytest.raises(AgentError) as caught:
        agent.generate("Weather in Oslo?", memory={"resource": "u", "thread": "t"})
    assert ran == ["Oslo"]
    error = caught.value
    assert isinstance(error, ModelError) and error.status == 503  # still the model's failure, with its details
    assert error.tools_run == ["getWeather"]
    assert "getWeather" in str(error) and "nothing of this turn was saved" in str(error).lower()
    assert store.memory.count_messages("t") == 0

    # The retry stores the input once.
    agent.model = ScriptedModel(["4 degrees."])
    agent.generate("Weather in Oslo?", memory={"resource": "u", "thread": "t"})
    assert [m.text for m in mem.recall(thread_id="t").messages] == ["Weather in Oslo?", "4 degrees."]


def test_a_failure_before_any_tool_keeps_the_plain_model_error(store):
    mem = Memory(store)
    agent = Agent("chat", instructions="I", model=ScriptedModel([ModelError("down", model_id="scripted/x")]),
                  memory=mem, tracer=False)
    with pytest.raises(ModelError) as caught:
        agent.generate("hi", memory={"resource": "u", "thread": "t"})
    assert not isinstance(caught.value, AgentError)


# -- 8. the working-memory tool commits with the turn ----------------------------------------------

def test_working_memory_from_a_failed_turn_is_not_written(store):
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "template": TEMPLATE}))
    model = ScriptedModel([
        ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": "# User\n- Name: Ada\n"}),)),
        ModelError("provider went away", model_id="scripted/x"),
    ])
    agent = Agent("chat", instructions="I", model=model, memory=mem, tracer=False)
    with pytest.raises(ModelError):
        agent.generate("I'm Ada", memory={"resource": "u", "thread": "t"})
    assert mem.get_working_memory(resource_id="u") is None
    assert mem.working_memory_service.versions("resource", "u") == []
    assert store.memory.count_messages("t") == 0


def test_working_memory_is_written_with_a_saved_turn(store):
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "schema": SCHEMA}))
    mem.update_working_memory(resource_id="u", working_memory={"city": "Oslo"})
    model = ScriptedModel([
        ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": {"name": "Ada"}}),)),
        # A second update in the same turn merges onto the first (validated against it, not the store).
        ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": {"city": "Bergen"}}),)),
        "Noted.",
    ])
    agent = Agent("chat", instructions="I", model=model, memory=mem, tracer=False)
    result = agent.generate("I'm Ada from Bergen", memory={"resource": "u", "thread": "t"})
    assert [r["result"]["success"] for r in result.tool_results] == [True, True]
    assert mem.get_working_memory(resource_id="u") == {"name": "Ada", "city": "Bergen"}
    assert [m.text for m in mem.recall(thread_id="t").messages] == ["I'm Ada from Bergen", "Noted."]


def test_a_refused_working_memory_update_is_reported_to_the_model_at_once(store):
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "schema": SCHEMA}))
    model = ScriptedModel([
        ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": {"name": 42}}),)),
        "Sorry.",
    ])
    agent = Agent("chat", instructions="I", model=model, memory=mem, tracer=False)
    result = agent.generate("I'm 42", memory={"resource": "u", "thread": "t"})
    outcome = result.tool_results[0]["result"]
    assert outcome["success"] is False and "schema" in outcome["message"]
    assert mem.get_working_memory(resource_id="u") is None


CRASH = textwrap.dedent("""
    import os, sys
    from core import Memory, MemoryOptions, open_store
    from core.agent import Agent, Tool
    from core.llm import ScriptedModel, ScriptedReply, tool_call

    mem = Memory(open_store(sys.argv[1]), MemoryOptions(
        working_memory={"enabled": True, "template": "# User\\n- Name:\\n"}))
    crash = Tool("notify", "notify", lambda args, ctx: os._exit(9))  # the process dies mid-turn
    model = ScriptedModel([
        ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": "# User\\n- Name: Ada\\n"}),
                                  tool_call("notify", {}))),
        "never reached",
    ])
    Agent("chat", instructions="I", model=model, memory=mem, tools=[crash], tracer=False).generate(
        "I'm Ada", memory={"resource": "u", "thread": "t"})
""")


def test_a_crash_between_the_tool_call_and_the_save_leaves_neither(tmp_path):
    db = tmp_path / "crash.db"
    proc = subprocess.run([sys.executable, "-c", CRASH, str(db)], cwd=REPO, capture_output=True, text=True,
                          env={"MEMORY_STUDIO_TRACING": "off", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 9, proc.stderr
    store = open_store(db)
    try:
        mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "template": "# User\n- Name:\n"}))
        assert mem.get_working_memory(resource_id="u") is None
        assert store.memory.count_messages("t") == 0
    finally:
        store.close()


def test_tool_results_in_saved_messages_are_json(store):
    # The staged tool result shape is unchanged: a saved turn with a user tool keeps its result.
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "template": TEMPLATE}))
    model = ScriptedModel([
        ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": "# User\n- Name: Ada\n"}),
                                  tool_call("getWeather", {"city": "Oslo"}))),
        "Done.",
    ])
    agent = Agent("chat", instructions="I", model=model, memory=mem, tracer=False,
                  tools=[Tool("getWeather", "w", lambda a, c: {"temp": 4})])
    agent.generate("hi", memory={"resource": "u", "thread": "t"})
    stored = mem.recall(thread_id="t").messages
    assert "updateWorkingMemory" not in json.dumps(stored[-1].content)
    assert stored[-1].tool_invocations()[0]["result"] == {"temp": 4}
    assert mem.get_working_memory(resource_id="u") == "# User\n- Name: Ada\n"
    assert [v.author for v in mem.working_memory_service.versions("resource", "u")] == ["agent"]
