"""Working memory has a size limit, and its version history is pruned (issue 17, item 12)."""

from __future__ import annotations

import json

import pytest

from core import Memory, MemoryOptions
from core.agent import Agent
from core.llm import ScriptedModel, ScriptedReply, tool_call
from core.options import OptionsError
from core.working_memory import WorkingMemoryTooLargeError

pytestmark = pytest.mark.backends

BIG = "# Notes\n" + "x" * 256_000


def versions(memory: Memory, owner: str = "ada") -> list[str | None]:
    return [v.text for v in memory.working_memory_service.versions("resource", owner)]


def test_a_value_over_the_limit_is_refused_and_nothing_is_written(store):
    memory = Memory(store, MemoryOptions(working_memory={"enabled": True}))
    assert MemoryOptions().max_working_memory_bytes == 256_000
    memory.update_working_memory(resource_id="ada", working_memory="# Notes\n- tea")
    with pytest.raises(WorkingMemoryTooLargeError, match=r"256,008 bytes, over the limit of 256,000 bytes") as info:
        memory.update_working_memory(resource_id="ada", working_memory=BIG)
    assert "max_working_memory_bytes" in str(info.value) and "Nothing was written" in str(info.value)
    assert memory.get_working_memory(resource_id="ada") == "# Notes\n- tea"
    assert versions(memory) == ["# Notes\n- tea"]
    # Multi-byte text counts in bytes, as stored.
    small = Memory(store, MemoryOptions(working_memory={"enabled": True}, max_working_memory_bytes=10))
    with pytest.raises(WorkingMemoryTooLargeError, match="12 bytes"):
        small.update_working_memory(resource_id="bob", working_memory="éééééé")
    Memory(store, MemoryOptions(working_memory={"enabled": True}, max_working_memory_bytes=None)).update_working_memory(
        resource_id="carol", working_memory=BIG)
    for bad in (0, -1, 2.5, True, "1"):
        with pytest.raises(OptionsError, match="max_working_memory_bytes"):
            MemoryOptions(max_working_memory_bytes=bad)


def test_a_schema_merge_over_the_limit_is_refused(store):
    schema = {"type": "object", "properties": {"notes": {"type": "string"}}}
    memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "schema": schema},
                                         max_working_memory_bytes=1000))
    memory.update_working_memory(resource_id="ada", working_memory={"notes": "short"})
    with pytest.raises(WorkingMemoryTooLargeError):
        memory.update_working_memory(resource_id="ada", working_memory={"notes": "y" * 2000})
    assert memory.get_working_memory(resource_id="ada") == {"notes": "short"}


def test_the_model_is_told_its_update_is_too_large_and_the_turn_is_saved(store):
    memory = Memory(store, MemoryOptions(working_memory={"enabled": True}, max_working_memory_bytes=1000))
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": "z" * 2000}),)),
                           "I could not save that."])
    agent = Agent("a", instructions="Remember.", model=model, memory=memory, tracer=False)
    result = agent.generate("remember everything", memory={"thread": "t", "resource": "ada"})
    assert result.text == "I could not save that."
    tool_reply = json.dumps([m for m in model.requests[1].messages if m["role"] == "tool"])
    assert "over the limit of 1,000 bytes" in tool_reply
    assert memory.get_working_memory(resource_id="ada") is None
    assert [m.text for m in memory.recall(thread_id="t", resource_id="ada").messages][-1] == "I could not save that."


def test_version_history_keeps_the_newest_n_per_scope(store):
    memory = Memory(store, MemoryOptions(working_memory={"enabled": True}))
    assert MemoryOptions().max_working_memory_versions == 100
    for i in range(105):
        memory.update_working_memory(resource_id="ada", working_memory=f"# v{i}")
    kept = versions(memory)
    assert len(kept) == 100 and kept[0] == "# v104" and kept[-1] == "# v5"
    few = Memory(store, MemoryOptions(working_memory={"enabled": True}, max_working_memory_versions=3))
    for i in range(5):
        few.update_working_memory(resource_id="bob", working_memory=f"# b{i}")
    assert versions(few, "bob") == ["# b4", "# b3", "# b2"]
    assert len(versions(memory)) == 100  # another owner's history is untouched
    every = Memory(store, MemoryOptions(working_memory={"enabled": True}, max_working_memory_versions=None))
    for i in range(5):
        every.update_working_memory(resource_id="bob", working_memory=f"# all{i}")
    assert len(versions(every, "bob")) == 8
    with pytest.raises(OptionsError, match="max_working_memory_versions"):
        MemoryOptions(max_working_memory_versions=0)
