"""Which resources are delegations Mastra wrote (``<resource>-<agent>``): only those the stored tool results
prove (``core.delegation_results.mastra_delegations``), never an id by its shape alone."""

from __future__ import annotations

from pathlib import Path

from core import Memory, open_store
from core.delegation_results import delegation_results, mastra_delegations
from core.messages import Message, text_part, tool_invocation_part


def _supervisor_turn(memory: Memory, parent: str, thread: str, tool: str, result: dict[str, str]) -> None:
    """A supervisor's turn in ``parent``'s ``thread`` that called ``tool`` and stored ``result``, as Mastra saves
    one (``Agent.listAgentTools``: ``{text, subAgentThreadId, subAgentResourceId}``)."""
    memory.create_thread(resource_id=parent, thread_id=thread, title="Supervisor")
    memory.save_messages([
        Message.create("user", [text_part("find sources")], thread_id=thread, resource_id=parent),
        Message.create("assistant", [tool_invocation_part(f"call-{thread}", tool, {"prompt": "find"}, result),
                                     text_part("Here they are.")], thread_id=thread, resource_id=parent)])


def _sub_thread(memory: Memory, resource: str, thread: str) -> None:
    memory.create_thread(resource_id=resource, thread_id=thread)  # (Mastra names it no title, no metadata)
    memory.save_messages([Message.user("find", thread_id=thread, resource_id=resource),
                          Message.assistant("found", thread_id=thread, resource_id=resource)])


def _threads(store: object) -> dict[str, list[str]]:
    threads: dict[str, list[str]] = {}
    for summary in store.memory.thread_summaries():  # type: ignore[attr-defined]
        threads.setdefault(summary.thread.resource_id, []).append(summary.thread.id)
    return threads


def test_only_resources_the_supervisors_tool_results_prove_are_mastra_delegations(tmp_path: Path) -> None:
    store = open_store(tmp_path / "m.db")
    memory = Memory(store)
    # proven: user-42's thread holds the result of its agent-researcher call naming the resource and its thread
    _supervisor_turn(memory, "user-42", "t-sup", "agent-researcher",
                     {"text": "found", "subAgentThreadId": "th-sub-1", "subAgentResourceId": "user-42-researcher"})
    _sub_thread(memory, "user-42-researcher", "th-sub-1")
    # a user whose id reads like a delegation, and nothing names it
    memory.create_thread(resource_id="alice", thread_id="t-alice", title="Hello")
    memory.create_thread(resource_id="alice-helper", thread_id="t-ah", title="My own thread")
    # named by a result, but it holds a thread of its own too: a user's resource as well
    _supervisor_turn(memory, "bob", "t-bob", "agent-helper",
                     {"text": "ok", "subAgentThreadId": "th-bob-sub", "subAgentResourceId": "bob-helper"})
    _sub_thread(memory, "bob-helper", "th-bob-sub")
    memory.create_thread(resource_id="bob-helper", thread_id="t-bob-own", title="Bob Helper's own")
    # named by a call of another agent than the id's tail
    _supervisor_turn(memory, "carol", "t-carol", "agent-writer",
                     {"text": "ok", "subAgentThreadId": "th-carol-sub", "subAgentResourceId": "carol-helper"})
    _sub_thread(memory, "carol-helper", "th-carol-sub")
    # a result in another resource's thread, not the one the id starts with
    _supervisor_turn(memory, "dave", "t-dave", "agent-helper",
                     {"text": "ok", "subAgentThreadId": "th-erin-sub", "subAgentResourceId": "erin-helper"})
    memory.create_thread(resource_id="erin", thread_id="t-erin", title="Erin")
    _sub_thread(memory, "erin-helper", "th-erin-sub")

    proven = mastra_delegations(store, _threads(store))
    assert proven == {"user-42-researcher": ("user-42", "researcher")}
    store.close()


def test_a_delegation_result_names_the_agent_the_resource_and_the_thread() -> None:
    content = ('{"format": 2, "parts": [{"type": "tool-invocation", "toolInvocation": {"state": "result", '
               '"toolCallId": "c", "toolName": "agent-researcher", "args": {}, "result": {"text": "x", '
               '"subAgentThreadId": "th-1", "subAgentResourceId": "u-researcher"}}}]}')
    assert delegation_results(content) == {("researcher", "u-researcher", "th-1")}
    assert delegation_results(content.encode()) == {("researcher", "u-researcher", "th-1")}
    assert delegation_results(content.replace("agent-researcher", "searchWeb")) == set()  # not a delegation
    assert delegation_results("{not json") == set()
