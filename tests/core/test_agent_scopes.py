"""Where a run's scopes come from (Mastra's memory docs, "identifying memory with scopes"): the call's
``scopes``, the agent's own ``scopes`` (a list, or a function of the request context) and the trusted
request-context key ``SCOPES_KEY`` are one set; ``resource:`` / ``thread:`` among them name the run's
memory and must agree wherever given; tools, processors and sub-agents get the others."""

from __future__ import annotations

import pytest

from core import Memory, ScopeConflictError
from core.agent import Agent, AgentError, Tool
from core.llm import ScriptedModel, ScriptedReply, tool_call
from core.scopes import SCOPES_KEY


def _recording_tool(seen: list[tuple[str, ...]]) -> Tool:
    def lookup(args, ctx):
        seen.append(ctx.scopes)
        return {"ok": True}

    return Tool("lookup", "look something up", lookup, {"type": "object", "properties": {}})


def _calls_tool_then(text: str, name: str = "lookup", args: dict | None = None) -> ScriptedModel:
    return ScriptedModel([ScriptedReply(tool_calls=(tool_call(name, args or {}),)), text])


def test_the_agents_scopes_resolver_reads_the_request_context(store):
    seen: list[tuple[str, ...]] = []
    agent = Agent("a", instructions="I", model=_calls_tool_then("done"), memory=Memory(store),
                  tools=[_recording_tool(seen)],
                  scopes=lambda rc: [f"org:{rc['org-id']}"] if rc.get("org-id") else [])
    agent.generate("hi", memory={"resource": "u", "thread": "t"}, request_context={"org-id": "acme"})
    assert seen == [("org:acme",)]


def test_call_agent_and_request_context_scopes_are_one_set(store):
    seen: list[tuple[str, ...]] = []
    agent = Agent("a", instructions="I", model=_calls_tool_then("done"), memory=Memory(store),
                  tools=[_recording_tool(seen)], scopes=["app:notes", "org:acme"])
    result = agent.generate("hi", scopes=["org:acme", "resource:u", "thread:t"],
                            request_context={SCOPES_KEY: ["team:red"]})
    assert sorted(seen[0]) == ["app:notes", "org:acme", "team:red"]  # each once, no resource:/thread:
    assert (result.resource_id, result.thread_id) == ("u", "t")


def test_a_resource_scope_from_the_agent_or_the_request_context_names_the_memory_and_must_agree(store):
    memory = Memory(store)
    agent = Agent("a", instructions="I", model=ScriptedModel(["ok", "ok"]), memory=memory,
                  scopes=lambda rc: [f"resource:{rc['user']}"])
    result = agent.generate("hi", memory={"thread": "t"}, request_context={"user": "ada"})
    assert result.resource_id == "ada" and memory.get_thread("t").resource_id == "ada"
    with pytest.raises(ScopeConflictError):
        agent.generate("hi", memory={"resource": "bob", "thread": "t"}, request_context={"user": "ada"})
    plain = Agent("b", instructions="I", model=ScriptedModel(["ok"]), memory=memory)
    with pytest.raises(ScopeConflictError):
        plain.generate("hi", scopes=["resource:ada"], request_context={SCOPES_KEY: ["resource:bob"]})
    assert store.memory.count_messages("t") == 2  # the refused calls stored nothing


def test_a_sub_agent_gets_the_runs_other_scopes_but_picks_its_own_resource_and_thread(store):
    seen: list[tuple[str, ...]] = []
    helper = Agent("helper", instructions="Help.", model=_calls_tool_then("helped"), tools=[_recording_tool(seen)])
    boss = Agent("boss", instructions="Delegate.", memory=Memory(store), agents=[helper],
                 model=_calls_tool_then("done", "agent-helper", {"prompt": "help"}))
    boss.generate("hi", memory={"resource": "u", "thread": "t"}, scopes=["org:acme"])
    assert seen == [("org:acme",)]


@pytest.mark.parametrize("bad", [["nonsense"], "org:acme", [3]])
def test_bad_agent_scopes_are_refused_when_the_agent_is_made(bad):
    with pytest.raises(AgentError, match="scope"):
        Agent("a", instructions="I", model=ScriptedModel(["ok"]), scopes=bad)


def test_a_resolver_that_returns_no_list_is_refused_before_anything_runs(store):
    agent = Agent("a", instructions="I", model=ScriptedModel(["ok"]), memory=Memory(store), scopes=lambda rc: "org:x")
    with pytest.raises(ScopeConflictError, match="list"):
        agent.generate("hi", memory={"resource": "u", "thread": "t"})
    assert store.memory.count_messages("t") == 0


def test_a_conflict_between_sources_names_both_and_where_each_came_from(store):
    # "pass one of them" is no help when one side is the agent's definition or trusted server code: the refusal
    # says which two sources disagree, so the developer knows which to change.
    memory = Memory(store)
    agent = Agent("a", instructions="I", model=ScriptedModel(["ok"]), memory=memory, scopes=["resource:bob"])
    with pytest.raises(ScopeConflictError) as by_context:
        agent.generate("hi", memory={"thread": "t"}, request_context={SCOPES_KEY: ["resource:alice"]})
    said = str(by_context.value)
    assert "'resource:bob'" in said and "scopes of agent 'a'" in said
    assert "'resource:alice'" in said and f"request context's {SCOPES_KEY!r}" in said
    with pytest.raises(ScopeConflictError) as by_memory:
        agent.generate("hi", memory={"resource": "alice", "thread": "t"})
    said = str(by_memory.value)
    assert "scopes of agent 'a'" in said and "memory={'resource': ...}" in said and "'alice'" in said
    plain = Agent("b", instructions="I", model=ScriptedModel(["ok"]), memory=memory)
    with pytest.raises(ScopeConflictError) as threads:
        plain.generate("hi", scopes=["thread:t2"], memory={"resource": "alice"},
                       request_context={SCOPES_KEY: ["thread:t1"]})
    said = str(threads.value)
    assert "'thread:t1'" in said and "'thread:t2'" in said and "the call's scopes" in said
    assert store.memory.get_thread("t") is None and store.memory.get_thread("t1") is None
