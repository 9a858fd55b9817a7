"""A small conversation written by the real engine (scripted model), with a turn record per turn, a
working memory that changes through the tool, a history window that slides, and traces beside it."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from core import Agent, Memory, MemoryOptions, open_store
from core.llm.scripted import ScriptedModel, ScriptedReply, tool_call
from core.timeutil import FixedClock
from core.working_memory import WorkingMemoryService

RESOURCE = "ana"
THREAD = "t-trip"
OTHER = "t-notes"
TURNS = [
    "Hi, I am Ana and I am planning a trip to Porto.",
    "I arrive on May 3 and leave on May 6.",
    "Please remember that I am vegetarian.",
    "Which markets should I visit?",
    "And a good place for dinner near the river?",
    "What about a day trip to Braga?",
    "Can you sum up my plan?",
    "Thanks, that is all for now.",
]
WM_AT = {"Please remember that I am vegetarian.": "# Ana\n- diet: vegetarian\n- trip: Porto, May 3-6"}


def reply(messages: list[dict[str, Any]], tools: Any, wm_at: dict[str, str] = WM_AT) -> Any:
    last = messages[-1]
    if last.get("role") == "tool":
        return "Noted, I will keep that in mind."
    text = str(last.get("content") or "")
    if text in wm_at:
        return ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": wm_at[text]}),))
    return f"About '{text[:24]}': here is my answer number {len(messages)}."


WM_FIX = "# Ana\n- diet: vegan (no eggs, no dairy)\n- trip: Porto, May 3-6"  # the value a user fixes by hand


def build_replay_db(path: Path, *, last_messages: int = 4, wm_fix_after: int | None = None,
                    agent_wm_at: dict[str, str] | None = None) -> dict[str, Any]:
    """``wm_fix_after``: after that many turns, the working memory is fixed by hand (``WM_FIX``, written as
    the Studio writes it: author "studio"); the later turns run with the fix. ``agent_wm_at``: more turns (by
    their text) at which the agent itself updates its working memory to the value given."""
    wm_at = {**WM_AT, **(agent_wm_at or {})}
    store = open_store(path)
    clock = FixedClock(datetime(2026, 5, 1, 9, 0, tzinfo=timezone.utc), step_ms=60_000)
    memory = Memory(store, MemoryOptions(last_messages=last_messages,
                                         working_memory={"enabled": True, "scope": "thread"}),
                    clock=clock, name="travel")
    agent = Agent("travel-agent", instructions="You plan trips. Be brief.", model=ScriptedModel(lambda m, t: reply(m, t, wm_at), name="trip"),
                  memory=memory)
    results = []
    for number, text in enumerate(TURNS):
        if number == wm_fix_after:
            WorkingMemoryService(store, clock=clock).write(memory.effective_options().working_memory, thread_id=THREAD,
                                                           resource_id=RESOURCE, value=WM_FIX, author="studio")
        results.append(agent.generate(text, memory={"resource": RESOURCE, "thread": THREAD}))
    agent.generate("Remember to pack an umbrella.", memory={"resource": RESOURCE, "thread": OTHER})
    turns = memory.turns(THREAD)
    store.close()
    return {"turns": [t.input_message_id for t in turns], "trace_ids": [r.trace_id for r in results]}
