"""The vNext working-memory tool (spec behaviour 43) and ``use_state_signals`` (seed 004), through an
agent with a scripted model, on a real database (issue 19, items 4 and 5)."""

from __future__ import annotations

from typing import Any

import pytest

from core import Agent, Memory, MemoryOptions, OptionsError
from core.llm import ScriptedModel, ScriptedReply, tool_call
from core.options import DEFAULT_TEMPLATE
from core.working_memory import hide_working_memory, tool_definition
from core.working_memory_vnext import reason_of

pytestmark = pytest.mark.backends

VNEXT = {"enabled": True, "version": "vnext"}


def agent_with(store: Any, calls: list[dict[str, Any]], wm: dict[str, Any] = VNEXT) -> tuple[Agent, Memory,
                                                                                            ScriptedModel]:
    script: list[Any] = []
    for args in calls:
        script += [ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", args),)), "ok"]
    model = ScriptedModel(script, name="chat")
    memory = Memory(store, MemoryOptions(working_memory=wm))
    return Agent("vnext", instructions="Remember things.", model=model, memory=memory, tracer=False), memory, model


def tool_results(result: Any) -> list[dict[str, Any]]:
    return [r["result"] for r in result.tool_results]


def test_the_vnext_tool_takes_new_memory_search_string_and_reason(store: Any) -> None:
    memory = Memory(store, MemoryOptions(working_memory=VNEXT))
    spec = memory.working_memory_tool()
    assert spec is not None and spec["function"]["name"] == "updateWorkingMemory"
    params = spec["function"]["parameters"]
    assert set(params["properties"]) == {"newMemory", "searchString", "updateReason"}
    assert params["required"] == ["newMemory"]
    assert params["properties"]["updateReason"]["enum"] == [
        "append-new-memory", "clarify-existing-memory", "replace-irrelevant-memory"]


def test_append_replace_and_refusals_as_in_mastra(store: Any) -> None:
    agent, memory, _ = agent_with(store, [
        {"newMemory": DEFAULT_TEMPLATE.replace(" ", "  ")},  # the empty template, whitespace changed
        {"newMemory": "- **First Name**: Ada\n- **Location**: NYC"},
        {"newMemory": "- **Last Name**: Smith"},  # appended
        {"newMemory": "- **Last Name**: Smith"},  # a duplicate
        {"newMemory": "- **Location**: Boston", "searchString": "- **Location**: NYC",
         "updateReason": "clarify-existing-memory"},  # replaced
        {"newMemory": "- **Pet**: cat", "updateReason": "clarify-existing-memory"},  # no searchString
    ])
    where = {"resource": "u", "thread": "t"}
    outcomes = [tool_results(agent.generate(f"turn {i}", memory=where))[0] for i in range(6)]
    assert outcomes[0]["success"] is False and "template" in outcomes[0]["reason"]
    assert outcomes[1] == {"success": True, "reason": "started working memory", "updateReason": "append-new-memory"}
    assert outcomes[2]["success"] is True and "appended" in outcomes[2]["reason"]
    assert outcomes[3]["success"] is False and "duplicate" in outcomes[3]["reason"]
    assert outcomes[4]["success"] is True and "replaced" in outcomes[4]["reason"]
    assert outcomes[5]["success"] is False and "no searchString" in outcomes[5]["reason"]
    stored = memory.get_working_memory(thread_id="t", resource_id="u")
    assert stored == "- **First Name**: Ada\n- **Location**: Boston\n- **Last Name**: Smith"
    # Every accepted update is versioned with its reason; refusals wrote nothing.
    versions = memory.working_memory_service.versions("resource", "u")
    assert [reason_of(v.note) for v in reversed(versions)] == [
        "append-new-memory", "append-new-memory", "clarify-existing-memory"]
    assert "replaced" in versions[0].note


def test_a_search_string_that_is_not_stored_appends(store: Any) -> None:
    agent, memory, _ = agent_with(store, [
        {"newMemory": "- Likes tea"},
        {"newMemory": "- Likes coffee", "searchString": "- Likes cocoa", "updateReason": "clarify-existing-memory"},
    ])
    agent.generate("one", memory={"resource": "u", "thread": "t"})
    result = tool_results(agent.generate("two", memory={"resource": "u", "thread": "t"}))[0]
    assert result["success"] is True and "appended instead" in result["reason"]
    assert memory.get_working_memory(thread_id="t", resource_id="u") == "- Likes tea\n- Likes coffee"


def test_replace_irrelevant_memory_never_deletes_in_resource_scope(store: Any) -> None:
    agent, memory, _ = agent_with(store, [
        {"newMemory": "- Works at the bakery"},
        {"newMemory": "- Planning a trip", "searchString": "- Works at the bakery",
         "updateReason": "replace-irrelevant-memory"},
    ])
    agent.generate("one", memory={"resource": "u", "thread": "t"})
    agent.generate("two", memory={"resource": "u", "thread": "t"})
    assert memory.get_working_memory(thread_id="t", resource_id="u") == "- Works at the bakery\n- Planning a trip"
    # Thread scope may replace.
    agent2, memory2, _ = agent_with(store, [
        {"newMemory": "- Works at the bakery"},
        {"newMemory": "- Planning a trip", "searchString": "- Works at the bakery",
         "updateReason": "replace-irrelevant-memory"},
    ], wm={**VNEXT, "scope": "thread"})
    agent2.generate("one", memory={"resource": "u2", "thread": "t2"})
    agent2.generate("two", memory={"resource": "u2", "thread": "t2"})
    assert memory2.get_working_memory(thread_id="t2", resource_id="u2") == "- Planning a trip"


def test_an_edit_in_place_keeps_a_change_made_while_the_turn_ran(store: Any) -> None:
    """The turn's update is written with its messages; meanwhile the user edited working memory in the
    Studio. The vNext tool sends one line, so that line is applied to what is stored by then: the
    user's edit stays (it was overwritten by the text computed before it)."""
    memory = Memory(store, MemoryOptions(working_memory=VNEXT))
    memory.update_working_memory(resource_id="u", working_memory="- Name: Ann")
    calls: list[int] = []

    def respond(messages: Any, tools: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            return ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"newMemory": "- Pet: a cat"}),))
        memory.update_working_memory(resource_id="u", working_memory="- Name: Ann\n- City: Oslo", author="studio")
        return "Noted."

    agent = Agent("vnext", instructions="Remember things.", model=ScriptedModel(respond), memory=memory, tracer=False)
    result = agent.generate("I have a cat.", memory={"thread": "t", "resource": "u"})
    assert tool_results(result)[0]["success"] is True
    assert memory.get_working_memory(resource_id="u") == "- Name: Ann\n- City: Oslo\n- Pet: a cat"
    newest = memory.working_memory_service.versions("resource", "u")[0]
    assert newest.author == "agent" and reason_of(newest.note) == "append-new-memory"


def test_vnext_instruction_describes_the_tool_and_shows_the_template(store: Any) -> None:
    memory = Memory(store, MemoryOptions(working_memory={**VNEXT, "template": "# Me\n- Name:\n"}))
    prompt = memory.assemble(thread_id="t", resource_id="u", input="hi")
    system = next(f.text for f in prompt.fragments if f.source == "working-memory")
    assert "searchString" in system and "<working_memory_template>\n# Me\n- Name:" in system
    assert "do not call updateWorkingMemory" in system


def test_vnext_with_a_schema_or_with_state_signals_is_refused() -> None:
    with pytest.raises(OptionsError, match="vnext"):
        MemoryOptions(working_memory={**VNEXT, "schema": {"type": "object", "properties": {}}})
    with pytest.raises(OptionsError, match="use_state_signals"):
        MemoryOptions(working_memory={**VNEXT, "use_state_signals": True})


# -- use_state_signals (seed 004) ---------------------------------------------------------------------
SIGNALS = {"enabled": True, "template": "# User\n- name:\n- location:", "use_state_signals": True}


def state_messages(prompt: Any) -> list[dict[str, Any]]:
    return [m for m in prompt.messages if m["role"] == "user" and '<state id="working-memory"' in str(m["content"])]


def test_state_signals_deliver_memory_as_a_state_message_sent_once_per_change(store: Any) -> None:
    model = ScriptedModel([
        "hello",
        ScriptedReply(tool_calls=(tool_call("setWorkingMemory", {"memory": "# User\n- name: Sam\n- location:"}),)),
        "noted", "sure", "ok"], name="chat")
    memory = Memory(store, MemoryOptions(last_messages=20, working_memory=SIGNALS))
    agent = Agent("signals", instructions="Be brief.", model=model, memory=memory, tracer=False)
    where = {"resource": "u", "thread": "t"}
    first = agent.generate("hi", memory=where)
    prompt = first.prompts[0]
    # Not in the system prompt: a state message before the input, and the tool named setWorkingMemory.
    assert not any(f.source == "working-memory" for f in prompt.fragments)
    assert [t["function"]["name"] for t in prompt.tools] == ["setWorkingMemory"]
    assert len(state_messages(prompt)) == 1 and "null" in state_messages(prompt)[0]["content"]
    assert prompt.messages[-1] == {"role": "user", "content": "hi"}

    second = agent.generate("I'm Sam", memory=where)  # unchanged: the snapshot in history is not repeated
    assert len(state_messages(second.prompts[0])) == 1
    assert second.prompts[0].notes["working-memory-state"].get("snapshot") is None
    third = agent.generate("what do you know?", memory=where)  # changed by the tool: a new snapshot
    snapshots = state_messages(third.prompts[0])
    assert len(snapshots) == 2 and "- name: Sam" in snapshots[-1]["content"]
    assert memory.get_working_memory(thread_id="t", resource_id="u") == "# User\n- name: Sam\n- location:"
    # The setWorkingMemory call is kept in the saved conversation (an audit record).
    saved = memory.recall(thread_id="t", per_page=False).messages
    calls = [p for m in saved for p in m.parts if p.get("type") == "tool-invocation"]
    assert [c["toolInvocation"]["toolName"] for c in calls] == ["setWorkingMemory"]


def test_a_snapshot_that_left_the_history_window_is_sent_again(store: Any) -> None:
    model = ScriptedModel(lambda m, t: "ok", name="chat")
    memory = Memory(store, MemoryOptions(last_messages=2, working_memory=SIGNALS))
    agent = Agent("signals", instructions="Be brief.", model=model, memory=memory, tracer=False)
    where = {"resource": "u", "thread": "t"}
    prompts = [agent.generate(f"turn {i}", memory=where).prompts[0] for i in range(3)]
    # History holds the last two rows (the previous question and answer), not the snapshot before them:
    # each turn finds no snapshot in its context and sends the unchanged one again, exactly once.
    assert [len(state_messages(p)) for p in prompts] == [1, 1, 1]
    notes = [p.notes["working-memory-state"] for p in prompts]
    assert notes[0]["resent"] is False and notes[1]["resent"] is False
    assert len({n["cacheKey"] for n in notes}) == 1


def test_the_hide_filter_keeps_set_working_memory_and_drops_update_working_memory() -> None:
    def part(name: str) -> dict[str, Any]:
        return {"type": "tool-invocation", "toolInvocation": {"state": "result", "toolCallId": "c", "toolName": name,
                                                              "args": {}, "result": {}}}

    content = {"format": 2, "parts": [part("setWorkingMemory"), part("updateWorkingMemory"),
                                      {"type": "text", "text": "done"}]}
    kept = hide_working_memory(content)
    assert kept is not None
    assert [p.get("toolInvocation", {}).get("toolName") for p in kept["parts"]] == ["setWorkingMemory", None]


def test_state_signal_tool_definition_is_named_set_working_memory() -> None:
    opts = MemoryOptions(working_memory=SIGNALS).working_memory
    assert tool_definition(opts)["function"]["name"] == "setWorkingMemory"


def test_turns_with_state_signals_rebuild_exactly(store: Any) -> None:
    model = ScriptedModel([
        "hello",
        ScriptedReply(tool_calls=(tool_call("setWorkingMemory", {"memory": "# User\n- name: Sam\n- location:"}),)),
        "noted", "sure", "ok", "fine"], name="chat")
    memory = Memory(store, MemoryOptions(last_messages=3, working_memory=SIGNALS))
    agent = Agent("signals", instructions="Be brief.", model=model, memory=memory, tracer=False)
    inputs = []
    for text in ("hi", "I'm Sam", "what do you know?", "more", "again"):
        result = agent.generate(text, memory={"resource": "u", "thread": "t"})
        inputs.append(next(m.id for m in result.messages if m.role == "user"))
    calls = [r for r in model.requests if r.messages[-1]["role"] == "user"]
    for i, input_id in enumerate(inputs):
        rebuilt = memory.assemble(thread_id="t", as_of=input_id)
        assert rebuilt.replay is not None and rebuilt.replay.matches, i
        assert rebuilt.messages == calls[i].messages, i
