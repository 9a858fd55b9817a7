"""A reflection writes a new observational-memory record (the next generation), so every observation block of the
next turn names another record even where its text is the very text the model read before: the preamble, the
``<observations>`` marker, the current task, the reminder. Replay listed each of those as "~ changed · time passed
(the same observations, dated from a later day)" though neither the text nor a date in it had changed (found
2026-12-07 by s37-walk14 replaying a thread across the turn whose reflection was swapped in: "~6 changed (time
passed ×5, observed)", five of them byte for byte the same). A block the model reads unchanged is no change."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from core import Agent, Memory, MemoryOptions
from core.llm import ScriptedModel
from core.observational import load_current
from core.replay import prompt_diff
from core.timeutil import FixedClock

OBSERVED = ("<observations>\nDate: May 1, 2026\n* 🔴 (10:01) User keeps a Boston fern on the balcony and asked "
            "about question {n} on pots, soil and watering.\n</observations>\n\n<current-task>\nPrimary: help with "
            "the fern.\n</current-task>\n\n<suggested-response>\nAsk about the pot size.\n</suggested-response>")
REFLECTED = ("<observations>\nDate: May 1, 2026\n* 🔴 (10:01) User keeps a Boston fern and asks about pots.\n"
             "</observations>\n\n<current-task>\nPrimary: help with the fern.\n</current-task>\n\n"
             "<suggested-response>\nAsk about the pot size.\n</suggested-response>")


def observer(messages: list[dict[str, Any]], tools: Any) -> str:
    if "condense" in str(messages[0].get("content") or ""):  # the reflector's instructions
        return REFLECTED
    asked = [n for n in range(20) if f"Question {n} " in str(messages[-1].get("content") or "")]
    return OBSERVED.format(n=", ".join(map(str, asked)))


def test_blocks_the_model_reads_unchanged_after_a_reflection_are_no_change(store: Any) -> None:
    memory = Memory(store, MemoryOptions(observational_memory={"message_tokens": 40, "observation_tokens": 120,
                                                               "buffer_tokens": False}),
                    observer_model=ScriptedModel(observer, name="observer"),
                    clock=FixedClock(datetime(2026, 5, 1, 10, tzinfo=timezone.utc), step_ms=1000))
    agent = Agent("om", instructions="Hi.", model=ScriptedModel(lambda m, t: "A fairly long answer about ferns."),
                  memory=memory, tracer=False)
    ids, generations = [], []
    for i in range(8):
        result = agent.generate(f"Question {i} about ferns, pots and soil", memory={"resource": "u", "thread": "o"})
        ids.append(next(m.id for m in result.messages if m.role == "user"))
        record = load_current(store, thread_id="o")
        generations.append(record.generation_count if record is not None else -1)
    reflected = [i for i in range(1, len(ids)) if generations[i - 1] == 0 and generations[i] >= 1]
    assert reflected, generations  # the data holds a reflection between two turns
    for i in range(1, len(ids)):
        changes = prompt_diff(memory.assemble(as_of=ids[i - 1]), memory.assemble(as_of=ids[i]))
        same = [(c.reason, c.text_after) for c in changes if c.kind == "changed" and c.text_before == c.text_after
                and c.source_before is None]
        assert not same, (i, generations[i - 1], generations[i], same)
    # What the reflection did change is still listed, as observed.
    after = prompt_diff(memory.assemble(as_of=ids[reflected[0] - 1]), memory.assemble(as_of=ids[reflected[0]]))
    assert any(c.kind == "changed" and c.source == "observational-memory" and c.reason == "observed" for c in after)
