"""Replay never claims "exact" for less than the model received (issue 20, a review of replay's exactness).

A turn record is data: a record whose list of model calls lost its last ones (a hand-edited export file,
imported) rebuilds each call it keeps to its hash, but the turn's stored reply shows how many model
calls the turn made (one step mark per call). Replay must not call such a turn "recorded (exact)":
the calls it does not show happened.
"""

from __future__ import annotations

import json
from typing import Any

from core import Agent, Memory, MemoryOptions, Tool, open_store
from core.llm import ScriptedModel, ScriptedReply, tool_call
from core.transfer import export_thread, import_data

NOOP = Tool("noop", "Does nothing.", lambda args, _ctx: {"ok": True},
            {"type": "object", "properties": {"n": {"type": "integer"}}})


def responder(messages: list[dict[str, Any]], tools: Any) -> Any:
    done = sum(1 for m in messages if m["role"] == "tool")
    if "tools" in str(messages[-1].get("content")) or messages[-1]["role"] == "tool" and done < 2:
        return ScriptedReply(tool_calls=(tool_call("noop", {"n": done}),))
    return "Done."


def test_a_record_missing_its_later_model_calls_is_not_exact(tmp_path: Any) -> None:
    with open_store(tmp_path / "source.db") as store:
        memory = Memory(store, MemoryOptions(last_messages=4))
        agent = Agent("a", instructions="Be brief.", model=ScriptedModel(responder), memory=memory, tracer=False,
                      tools=[NOOP])
        agent.generate("use the tools twice", memory={"resource": "ada", "thread": "t"})
        data = json.loads(json.dumps(export_thread(store, "t")))
    (row,) = data["turns"]
    record = json.loads(row["record"])
    assert len(record["k"]) == 3  # three model calls: two tool steps and the answer
    record["k"] = record["k"][:2]  # a hand-edited file: the last call's entry removed
    row["record"] = json.dumps(record)
    with open_store(tmp_path / "copy.db") as target:
        import_data(target, data)
        copy = Memory(target)
        (turn,) = copy.turns("t")
        info = copy.assemble(as_of=turn.input_message_id).replay
        assert info is not None and len(info.calls) == 2
        assert all(c.matches for c in info.calls)  # each call it keeps is as sent
        assert not info.exact and info.status == "recorded, differs"
        assert any("3 model calls" in d and "keeps 2" in d for d in info.differences), info.differences


def test_a_record_with_every_call_stays_exact(tmp_path: Any) -> None:
    with open_store(tmp_path / "source.db") as store:
        memory = Memory(store, MemoryOptions(last_messages=4))
        agent = Agent("a", instructions="Be brief.", model=ScriptedModel(responder), memory=memory, tracer=False,
                      tools=[NOOP])
        for text in ("hello", "use the tools twice", "thanks"):
            agent.generate(text, memory={"resource": "ada", "thread": "t"})
        for turn in memory.turns("t"):
            info = memory.assemble(as_of=turn.input_message_id).replay
            assert info is not None and info.exact and not info.differences


def test_a_record_whose_texts_are_gone_says_so_not_that_a_message_changed(tmp_path: Any) -> None:
    """The record's long texts (the agent's instructions here) are kept by hash in its row's ``texts``;
    a row without them (a hand-edited file, a manual delete) rebuilds without them, so the call differs:
    the reason given is the missing text, not an edited message (none was edited)."""
    with open_store(tmp_path / "memory.db") as store:
        memory = Memory(store, MemoryOptions(last_messages=4))
        agent = Agent("a", instructions="Be brief, and keep these instructions long enough to be kept by hash. " * 4,
                      model=ScriptedModel(lambda m, t: "Noted."), memory=memory, tracer=False)
        agent.generate("hello", memory={"resource": "ada", "thread": "t"})
        with store.db.write() as conn:
            conn.exec_driver_sql("UPDATE memory_studio_turns SET texts = NULL")
    with open_store(tmp_path / "memory.db") as store:
        memory = Memory(store)
        (turn,) = memory.turns("t")
        info = memory.assemble(as_of=turn.input_message_id).replay
        assert info is not None and not info.exact and info.status == "recorded, differs"
        assert any("named by the record (no longer stored)" in u for u in info.unknowns)
        (why,) = info.differences
        assert "changed or deleted since" not in why and "a text the record names is no longer stored" in why, why
