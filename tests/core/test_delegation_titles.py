"""Titles and delegations (Mastra's memory docs, "memory in multi-agent systems"): naming a thread is the
top-level thread's business. A sub-agent running on the supervisor's memory gets no title for its
throwaway delegation thread (that would cost a model call per delegation); one with a memory of its own
that generates titles gets them."""

from __future__ import annotations

from core import Memory, MemoryOptions
from core.agent import Agent
from core.llm import ScriptedModel, ScriptedReply, tool_call
from core.scopes import delegation_resource


def _boss(memory: Memory, helper: Agent) -> tuple[Agent, ScriptedModel]:
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("agent-helper", {"prompt": "help"}),)), "done",
                           "Boss Title"])
    return Agent("boss", instructions="Delegate.", model=model, memory=memory, agents=[helper]), model


def test_a_sub_agent_on_the_supervisors_memory_gets_no_title_for_its_delegation_thread(store):
    memory = Memory(store, MemoryOptions(generate_title=True))
    helper_model = ScriptedModel(["helped", "Helper Title"])
    helper = Agent("helper", instructions="Help.", model=helper_model)  # no memory: the supervisor's
    boss, boss_model = _boss(memory, helper)
    boss.generate("hi", memory={"resource": "u", "thread": "t"})
    assert memory.wait_idle(30)
    assert memory.get_thread("t").title == "Boss Title"
    [child] = memory.list_threads(resource_id=delegation_resource("u", "helper"))
    assert child.title == ""
    assert len(helper_model.requests) == 1  # its answer only, no title call


def test_a_sub_agent_with_its_own_titling_memory_names_its_threads(store):
    memory = Memory(store, MemoryOptions(generate_title=True))
    own = Memory(store, MemoryOptions(generate_title=True), name="helper-memory")
    helper = Agent("helper", instructions="Help.", model=ScriptedModel(["helped", "Helper Title"]), memory=own)
    boss, _ = _boss(memory, helper)
    boss.generate("hi", memory={"resource": "u", "thread": "t"})
    assert memory.wait_idle(30) and own.wait_idle(30)
    [child] = own.list_threads(resource_id=delegation_resource("u", "helper"))
    assert child.title == "Helper Title"
