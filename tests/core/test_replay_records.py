"""Turn records (issue 10 item 1): every live turn writes one compact row; stored turns list and rebuild."""

from __future__ import annotations

import sqlite3

from core import Agent, Memory, MemoryOptions, open_store
from core.llm import ScriptedModel, ScriptedReply, tool_call
from core.replay import TurnRecord

TEMPLATE = "# User\n- Name:\n"


def _agent(memory: Memory, replies: list[object]) -> Agent:
    return Agent("helper", instructions="Answer in one sentence.", model=ScriptedModel(replies), memory=memory,
                 tracer=False)


def test_every_live_turn_writes_a_record_naming_what_it_used(store) -> None:
    memory = Memory(store, MemoryOptions(last_messages=3, working_memory={"enabled": True, "template": TEMPLATE}))
    agent = _agent(memory, [
        ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": "# User\n- Name: Ada\n"}),)),
        "Hello Ada.", "Tea it is.", "Noted.",
    ])
    first = agent.generate("I am Ada", memory={"resource": "ada", "thread": "t1"})
    agent.generate("I like tea", memory={"resource": "ada", "thread": "t1"})
    third = agent.generate("And lemon", memory={"resource": "ada", "thread": "t1"})

    turns = memory.turns("t1")
    assert [t.input_text for t in turns] == ["I am Ada", "I like tea", "And lemon"]
    assert all(isinstance(t.record, TurnRecord) for t in turns)
    one, _two, three = (t.record for t in turns)
    assert one is not None and three is not None
    assert one.response_ids == tuple(m.id for m in first.saved if m.role == "assistant")
    assert one.wm_version_id is None and one.history_ids == ()
    # The third turn's window is the last three stored messages, and it saw the version the tool wrote.
    stored = [m.id for m in memory.recall(thread_id="t1", per_page=False).messages]
    assert three.history_ids == tuple(stored[1:4])
    assert three.wm_version_id is not None
    assert three.tools == ("updateWorkingMemory",) and three.model == "scripted/demo"
    assert three.tokens["total"] == third.prompts[0].total_tokens
    assert three.options["last_messages"] == 3 and three.instructions == ("Answer in one sentence.",)
    assert memory.turn_record(turns[2].input_message_id) == three


def test_a_rebuilt_turn_matches_what_the_model_was_sent(store) -> None:
    memory = Memory(store, MemoryOptions(last_messages=2))
    model = ScriptedModel(["One.", "Two.", "Three."])
    agent = Agent("helper", instructions="Be brief.", model=model, memory=memory, tracer=False)
    for text in ("first", "second", "third"):
        agent.generate(text, memory={"resource": "u", "thread": "t"})
    for turn, request in zip(memory.turns("t"), model.requests):
        prompt = memory.assemble(thread_id="t", resource_id="u", as_of=turn.input_message_id)
        assert prompt.replay is not None and prompt.replay.kind == "recorded" and prompt.replay.matches is True
        assert prompt.messages == request.messages


def test_records_are_small(store) -> None:
    memory = Memory(store, MemoryOptions(last_messages=10, working_memory={"enabled": True}))
    agent = _agent(memory, [f"Reply {i}." for i in range(12)])
    for i in range(12):
        agent.generate(f"Message number {i}", memory={"resource": "u", "thread": "t"})
    with sqlite3.connect(store.location.path) as con:
        sizes = [len(r[0]) for r in con.execute("SELECT record FROM memory_studio_turns")]
    assert len(sizes) == 12 and max(sizes) < 1024


def test_a_database_without_the_table_has_no_records_and_rebuilds_by_time(tmp_path) -> None:
    path = tmp_path / "mastra.db"
    with open_store(path) as store:
        memory = Memory(store, MemoryOptions(last_messages=5))
        agent = _agent(memory, ["A.", "B."])
        agent.generate("hello", memory={"resource": "u", "thread": "t"})
        agent.generate("again", memory={"resource": "u", "thread": "t"})
    with sqlite3.connect(path) as con:  # as if Mastra (or an older version) had written the turns
        con.execute("DROP TABLE memory_studio_turns")
    with open_store(path) as store:
        memory = Memory(store, MemoryOptions(last_messages=5))
        turns = memory.turns("t")
        assert [t.record for t in turns] == [None, None]
        assert turns[1].response_ids and memory.turn_record(turns[1].input_message_id) is None
        prompt = memory.assemble(as_of=turns[1].input_message_id)
        assert prompt.replay is not None and prompt.replay.kind == "reconstructed" and prompt.replay.matches is None
        assert [m["content"] for m in prompt.messages] == ["hello", "A.", "again"]
        assert any("instructions" in u for u in prompt.replay.unknowns)
