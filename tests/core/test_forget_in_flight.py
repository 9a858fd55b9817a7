"""A turn still running when its thread is deleted or its resource forgotten (another process runs
``memory-studio forget`` while the model answers): the turn's save refuses, so nothing comes back:
not the thread, not its messages, not a working-memory update staged in the turn, not its record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core import Agent, Memory, MemoryOptions, Message, open_store
from core.edits.forget import forget_resource
from core.llm import ScriptedModel, ScriptedReply, tool_call
from core.storage.memory_store import NotFoundError

pytestmark = pytest.mark.backends

R, T = "ada-in-flight", "talk-1"
TEMPLATE = "# User\n- Name:\n- Secret:\n"


def options() -> MemoryOptions:
    return MemoryOptions(last_messages=10, working_memory={"enabled": True, "template": TEMPLATE})


def rows_about(db: Path | str) -> dict[str, Any]:
    """What a fresh connection (another process) finds about the resource afterwards."""
    other = open_store(db)
    try:
        mem = Memory(other, options())
        report = forget_resource(other, R, dry_run=True)
        return {"found": report.found, "threads": [t.id for t in mem.list_threads(resource_id=R).threads],
                "thread": mem.get_thread(T), "working memory": mem.get_working_memory(resource_id=R)}
    finally:
        other.close()


@pytest.mark.parametrize("how", ["forget", "delete thread"])
def test_a_turn_in_flight_saves_nothing_after_its_thread_is_gone(db_path: Path | str, how: str) -> None:
    store = open_store(db_path)
    mem = Memory(store, options())
    def remove() -> None:  # another process, on its own connection
        other = open_store(db_path)
        try:
            if how == "forget":
                forget_resource(other, R)
            else:
                Memory(other, options()).delete_thread(T)
        finally:
            other.close()

    calls: list[int] = []

    def model(messages: list[dict[str, Any]], tools: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # the first turn: remember the secret
            return ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {
                "memory": "# User\n- Name: Ada\n- Secret: ZEBRA-7781\n"}),))
        if len(calls) == 2:
            return "Noted."
        if len(calls) == 3:  # the second turn updates working memory again, then the data goes
            return ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {
                "memory": "# User\n- Name: Ada\n- Secret: ZEBRA-7781, and a cat\n"}),))
        remove()
        return "Your cat is noted."

    agent = Agent("a", instructions="be brief", model=ScriptedModel(model), memory=mem, tracer=False)
    agent.generate("My secret is ZEBRA-7781.", memory={"resource": R, "thread": T})
    assert "ZEBRA-7781" in mem.get_working_memory(resource_id=R)
    with pytest.raises(NotFoundError, match=f"Thread {T} was deleted while this turn ran.*nothing of the turn "
                                            "was saved"):
        agent.generate("I have a cat.", memory={"resource": R, "thread": T})
    after = rows_about(db_path)
    assert after["thread"] is None and after["threads"] == []
    if how == "forget":
        assert after == {"found": False, "threads": [], "thread": None, "working memory": None}
    else:  # the resource's working memory is not the thread's: it stays, without the turn's update
        assert "a cat" not in after["working memory"]
    store.close()


def test_a_new_conversation_is_still_saved(db_path: Path | str) -> None:
    # The refusal is only for a thread that existed when the turn began: a first turn makes its thread.
    store = open_store(db_path)
    mem = Memory(store, options())
    agent = Agent("a", instructions="be brief", model=ScriptedModel(["Hello."]), memory=mem, tracer=False)
    agent.generate("Hi.", memory={"resource": R, "thread": T})
    assert [m.text for m in mem.recall(thread_id=T, resource_id=R)] == ["Hi.", "Hello."]
    store.close()


def test_an_observation_made_while_the_resource_is_forgotten_is_not_written(db_path: Path | str) -> None:
    # Regression: a turn's synchronous observer ran while another process forgot the resource; the
    # observation (about the forgotten messages) was then written as the thread's first record, and
    # the thread's hints (current task...) with it.
    store = open_store(db_path)
    observed = ("<observations>\nDate: Jan 2, 2025\n* 🔴 (09:00) The user's secret is ZEBRA-7781.\n"
                "</observations>")

    def observer(messages: list[dict[str, Any]], tools: Any) -> str:
        other = open_store(db_path)  # another process forgets the resource while the observer runs
        try:
            forget_resource(other, R)
        finally:
            other.close()
        return observed

    mem = Memory(store, MemoryOptions(observational_memory={"enabled": True, "message_tokens": 40,
                                                            "buffer_tokens": False}),
                 observer_model=ScriptedModel(observer))
    agent = Agent("a", instructions="be brief", model=ScriptedModel(["Noted, a long and careful reply."] * 2),
                  memory=mem, tracer=False)
    # Messages stored before observational memory was turned on: the thread has no record yet.
    mem.save_messages([Message.user("My secret is ZEBRA-7781, please keep it safe for me.", thread_id=T,
                                    resource_id=R),
                       Message.assistant("Noted, a long and careful reply.", thread_id=T, resource_id=R)])
    with pytest.raises(NotFoundError, match="was deleted while this turn ran"):
        agent.generate("And my cat is called Tom.", memory={"resource": R, "thread": T})
    assert rows_about(db_path)["found"] is False
    store.close()
