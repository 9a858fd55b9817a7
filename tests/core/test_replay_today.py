"""A stored turn rebuilt "with the memory as it is now" (``rebuild="today"``): a working-memory value or a
message fixed by hand after the turn reaches its rebuilt prompt and a re-run of it, and the thread-wide
what-if against today's memory lists exactly the turns whose prompt the fix changes, with the hand-edit
reason. Real components: a libSQL file written by the engine (scripted model), the loopback server."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from core import Agent, Memory, MemoryOptions, OpenAICompatibleModel
from core.llm import LoopbackServer, ScriptedModel, ScriptedReply, tool_call
from core.replay import prompt_diff, rerun
from core.timeutil import FixedClock
from core.working_memory import WorkingMemoryService

WRONG = "# Ana\n- diet: vegetarian\n"
FIXED = "# Ana\n- diet: vegan (no eggs, no dairy)\n"
TEXTS = ["Hi, I am Ana.", "Remember my diet please.", "What should I cook tonight?", "And for lunch tomorrow?",
         "Something with rice?"]


def _responder(messages: list[dict[str, Any]], tools: Any) -> Any:
    last = messages[-1]
    if last["role"] == "tool":
        return "Noted."
    if last["content"] == TEXTS[1]:  # the model writes a wrong value: Ana is vegan
        return ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": WRONG}),))
    return f"An answer to {last['content']!r}"


@pytest.fixture
def thread(store: Any) -> tuple[Memory, Agent, list[str]]:
    """Three turns, then the working memory fixed by hand (the Studio writes as "studio"), then two more."""
    clock = FixedClock(datetime(2026, 5, 1, 9, tzinfo=timezone.utc), step_ms=60_000)
    memory = Memory(store, MemoryOptions(last_messages=2, working_memory={"enabled": True, "scope": "thread"}),
                    clock=clock)
    agent = Agent("cook", instructions="Short answers.", model=ScriptedModel(_responder), memory=memory, tracer=False)
    ids: list[str] = []

    def turn(text: str) -> None:
        result = agent.generate(text, memory={"resource": "ana", "thread": "t"})
        ids.append(next(m.id for m in result.messages if m.role == "user"))

    for text in TEXTS[:3]:
        turn(text)
    wm = memory.effective_options().working_memory
    WorkingMemoryService(store, clock=clock).write(wm, thread_id="t", resource_id="ana", value=FIXED, author="studio")
    for text in TEXTS[3:]:
        turn(text)
    return memory, agent, ids


def _wm(prompt: Any) -> str:
    return "\n".join(f.text for f in prompt.fragments_from("working-memory"))


def test_a_working_memory_fix_reaches_the_turn_rebuilt_with_todays_memory_and_its_rerun(thread: Any) -> None:
    memory, _agent, ids = thread
    received = memory.assemble(as_of=ids[2])
    now = memory.assemble(as_of=ids[2], rebuild="now")
    today = memory.assemble(as_of=ids[2], rebuild="today")
    assert received.replay is not None and received.replay.exact
    assert "vegetarian" in _wm(received) and "vegan" not in _wm(received)
    assert "vegetarian" in _wm(now)  # "now" keeps the version in force at the turn
    assert "vegan (no eggs, no dairy)" in _wm(today) and "vegetarian" not in _wm(today)
    assert today.notes["working-memory"]["writtenSince"] == ["studio"]
    changes = prompt_diff(received, today)
    assert [(c.kind, c.source, c.reason) for c in changes] == [("changed", "working-memory", "working-memory-edited")]

    with LoopbackServer(["Try a chickpea curry.", "Try an omelette."]) as server:
        model = OpenAICompatibleModel("loop", base_url=server.base_url, api_key="k")
        fixed = rerun(today, model)
        original = rerun(received, model)
        sent_fixed, sent_original = server.chat_requests()
        raw_fixed = server.chat_request_bytes()[0].decode()
    assert sent_fixed["messages"] == fixed.request["messages"] == today.messages  # the request shown is the one sent
    assert "vegan (no eggs, no dairy)" in raw_fixed and "vegetarian" not in raw_fixed
    assert sent_original["messages"] == received.messages and "vegan" not in str(sent_original["messages"])
    assert fixed.text == "Try a chickpea curry."
    # Outside its messages, the request is the recorded one: same tools, settings and tool choice.
    assert {k: v for k, v in sent_fixed.items() if k != "messages"} == \
        {k: v for k, v in sent_original.items() if k != "messages"}


def test_the_what_if_against_todays_memory_lists_only_the_turns_the_fix_touches(thread: Any) -> None:
    memory, _agent, ids = thread
    rows = list(memory.what_if("t", options={}, resource_id="ana", against="today"))
    assert [r.input_message_id for r in rows] == ids
    differing = {ids.index(r.input_message_id): r for r in rows if r.changes}
    # Turns 1-3 ran before the fix (1 and 2 with no value yet, 3 with the wrong one); 4 and 5 ran with it.
    assert sorted(differing) == [0, 1, 2]
    for row in differing.values():
        assert {(c.source, c.reason) for c in row.changes} == {("working-memory", "working-memory-edited")}
    # The options what-if with no change is the turns as they ran: nothing differs.
    assert not any(r.changes for r in memory.what_if("t", options={}, resource_id="ana"))


def test_a_message_fixed_by_hand_touches_the_turns_that_hold_it(thread: Any) -> None:
    memory, _agent, ids = thread
    memory.edit_message(ids[3], resource_id="ana", text="And for dinner tomorrow?", author="studio")
    rows = {ids.index(r.input_message_id): r for r in memory.what_if("t", options={}, resource_id="ana",
                                                                   against="today")}
    # Turn 4's input, and turn 5's history (two messages: turn 4's input and reply) hold it; the first
    # three differ by working memory alone.
    assert "message-edited" in {c.reason for c in rows[3].changes}
    assert "message-edited" in {c.reason for c in rows[4].changes}
    assert not any(c.reason == "message-edited" for i in (0, 1, 2) for c in rows[i].changes)
    today = memory.assemble(as_of=ids[3], rebuild="today")
    assert "And for dinner tomorrow?" in str(today.messages)
    assert "And for dinner tomorrow?" not in str(memory.assemble(as_of=ids[3]).messages)


def test_a_what_if_against_anything_else_is_refused_saying_what_it_takes(thread: Any) -> None:
    """``against`` was compared with "today" only: any other word ran an options what-if, as if it were
    "options"; it is refused before anything is read."""
    from core.storage import InvalidArgumentError

    memory, _agent, _ids = thread
    with pytest.raises(InvalidArgumentError, match="'options' or 'today'"):
        memory.what_if("t", options={}, resource_id="ana", against="now")  # type: ignore[arg-type]
