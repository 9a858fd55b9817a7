"""Forking a thread at a turn (issue 10 item 4)."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone
from typing import Any

import pytest

from core import Agent, AlreadyExistsError, Memory, MemoryOptions, NotFoundError, ThreadOwnershipError
from core.llm import ScriptedModel, ScriptedReply, tool_call
from core.timeutil import FixedClock

TEMPLATE = "# Notes\n- Plan:\n"


def _responder(messages: list[dict[str, Any]], tools: Any) -> Any:
    last = messages[-1]
    if last["role"] == "tool":
        return "Noted."
    text = str(last["content"])
    if text.startswith("Plan:"):
        return ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": f"# Notes\n- Plan: {text[6:]}\n"}),))
    return f"Reply to {text}"


@pytest.fixture
def thread(store: Any) -> tuple[Memory, list[str]]:
    memory = Memory(store, MemoryOptions(last_messages=10, working_memory={
        "enabled": True, "scope": "thread", "template": TEMPLATE}),
        clock=FixedClock(datetime(2026, 6, 1, 9, tzinfo=timezone.utc)))
    memory.create_thread(thread_id="src", resource_id="u", title="Trip", metadata={"topic": "travel"})
    agent = Agent("a", instructions="Hi.", model=ScriptedModel(_responder), memory=memory, tracer=False)
    ids = []
    for text in ("Plan: Lisbon", "how long is the flight", "Plan: Porto by train", "and the hotel"):
        result = agent.generate(text, memory={"resource": "u", "thread": "src"})
        ids.append(next(m.id for m in result.messages if m.role == "user"))
    return memory, ids


def _rows(path: Any, thread_id: str) -> list[Any]:
    with sqlite3.connect(path) as con:
        return [
            con.execute("SELECT * FROM mastra_threads WHERE id = ?", (thread_id,)).fetchall(),
            con.execute("SELECT * FROM mastra_messages WHERE thread_id = ? ORDER BY rowid", (thread_id,)).fetchall(),
            con.execute("SELECT * FROM memory_studio_turns WHERE thread_id = ? ORDER BY rowid", (thread_id,)).fetchall(),
            con.execute("SELECT * FROM memory_studio_wm_versions WHERE owner_id = ? ORDER BY id", (thread_id,)).fetchall(),
        ]


def test_fork_copies_exactly_the_messages_before_the_turn_and_never_touches_the_source(thread: Any, store: Any) -> None:
    memory, ids = thread
    before = _rows(store.location.path, "src")
    fork = memory.fork_thread("src", at=ids[2], new_thread_id="fork-1", title="What if Porto")
    assert _rows(store.location.path, "src") == before  # byte for byte
    source = memory.recall(thread_id="src", per_page=False).messages
    copied = memory.recall(thread_id="fork-1", per_page=False).messages
    cut = next(i for i, m in enumerate(source) if m.id == ids[2])
    assert [m.text for m in copied] == [m.text for m in source[:cut]]
    assert [m.created_at for m in copied] == [m.created_at for m in source[:cut]]
    assert [m.metadata["forkedFrom"] for m in copied] == [m.id for m in source[:cut]]
    assert not {m.id for m in copied} & {m.id for m in source}
    assert fork.title == "What if Porto" and fork.resource_id == "u"
    assert fork.metadata["topic"] == "travel"
    assert fork.metadata["fork"]["sourceThreadId"] == "src" and fork.metadata["fork"]["atMessageId"] == ids[2]
    assert fork.metadata["fork"]["workingMemory"] == "as_of" and fork.metadata["fork"]["forkedAt"]


def test_thread_working_memory_is_carried_as_of_the_turn_or_as_it_is_now(thread: Any) -> None:
    memory, ids = thread
    assert "Porto" in memory.get_working_memory(thread_id="src")
    then = memory.fork_thread("src", at=ids[2], new_thread_id="then")
    assert memory.get_working_memory(thread_id="then") == "# Notes\n- Plan: Lisbon\n"
    assert then.metadata["workingMemory"] == "# Notes\n- Plan: Lisbon\n"
    versions = memory.working_memory_service.versions("thread", "then")
    assert [v.author for v in versions] == ["fork"]
    memory.fork_thread("src", at=ids[2], new_thread_id="now", working_memory="current")
    assert memory.get_working_memory(thread_id="now") == "# Notes\n- Plan: Porto by train\n"
    # The fork rebuilds like any thread: its first turn will see the carried memory.
    prompt = memory.assemble(thread_id="then", resource_id="u", input="next")
    assert "Plan: Lisbon" in prompt.fragments_from("working-memory")[0].text


def test_fork_without_records_uses_the_version_in_force(thread: Any, store: Any) -> None:
    memory, ids = thread
    with sqlite3.connect(store.location.path) as con:
        con.execute("DELETE FROM memory_studio_turns")
    memory.fork_thread("src", at=ids[3], new_thread_id="late")
    assert memory.get_working_memory(thread_id="late") == "# Notes\n- Plan: Porto by train\n"


def test_fork_refuses_what_cannot_work(thread: Any) -> None:
    memory, ids = thread
    memory.create_thread(thread_id="other", resource_id="u")
    with pytest.raises(NotFoundError, match="not in thread other"):
        memory.fork_thread("other", at=ids[1])
    with pytest.raises(AlreadyExistsError, match="another id"):
        memory.fork_thread("src", at=ids[1], new_thread_id="other")
    with pytest.raises(ThreadOwnershipError):
        memory.fork_thread("src", at=ids[1], resource_id="someone-else")
    with pytest.raises(ValueError, match="as_of"):
        memory.fork_thread("src", at=ids[1], working_memory="later")
