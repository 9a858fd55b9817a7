"""A per-message size limit, refused before anything is written or sent (issue 9, item 21)."""

from __future__ import annotations

import pytest

from core import Memory, MemoryOptions, Message, OptionsError
from core.agent import Agent
from core.llm import ScriptedModel
from core.message_size import DEFAULT_MAX_MESSAGE_BYTES, MessageTooLargeError


def test_default_limit_is_one_megabyte_and_documented_in_the_options():
    assert MemoryOptions().max_message_bytes == DEFAULT_MAX_MESSAGE_BYTES == 1_000_000


def test_an_oversized_message_is_refused_whole_naming_it(store):
    memory = Memory(store)
    small = Message.user("hello", thread_id="t", resource_id="r")
    big = Message.user("x" * 600_000, id="huge", thread_id="t", resource_id="r")
    with pytest.raises(MessageTooLargeError, match=r"huge is 1,2\d\d,\d\d\d bytes.*limit of 1,000,000") as info:
        memory.save_messages([small, big])
    assert info.value.message_id == "huge" and info.value.limit == 1_000_000
    assert "max_message_bytes" in str(info.value)
    assert memory.get_thread("t") is None  # nothing of the batch was written


def test_the_limit_counts_stored_bytes_not_characters(store):
    memory = Memory(store, MemoryOptions(max_message_bytes=100_000))
    memory.save_messages([Message.user("é" * 22_000, thread_id="t", resource_id="r")])  # 88 kB stored (text + parts)
    with pytest.raises(MessageTooLargeError):
        memory.save_messages([Message.user("é" * 30_000, thread_id="t", resource_id="r")])  # 120 kB, 60k chars
    assert len(memory.recall(thread_id="t").messages) == 1


def test_the_limit_is_configurable_and_can_be_lifted(store):
    Memory(store, MemoryOptions(max_message_bytes=None)).save_messages(
        [Message.user("x" * 1_500_000, thread_id="t", resource_id="r")])
    for bad in (0, -1, 1.5, True, "1MB"):
        with pytest.raises(OptionsError, match="max_message_bytes"):
            MemoryOptions(max_message_bytes=bad)


def test_an_agent_refuses_an_oversized_input_before_calling_the_model(store):
    model = ScriptedModel(["never sent"])
    agent = Agent("chat", instructions="hi", model=model, memory=Memory(store))
    with pytest.raises(MessageTooLargeError, match="over the limit"):
        agent.generate("y" * 2_000_000, memory={"resource": "r", "thread": "t"})
    assert model.requests == []
    assert Memory(store).get_thread("t") is None
