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


def test_turns_from_a_preloaded_source_equal_turns_read_and_refuse_another_threads(store) -> None:
    import pytest

    from core.replay.frozen import ReplaySource
    from core.storage import InvalidArgumentError

    memory = Memory(store, MemoryOptions(last_messages=3))
    agent = _agent(memory, ["One.", "Two.", "Three."])
    for text, thread in (("first", "t1"), ("second", "t1"), ("elsewhere", "t2")):
        agent.generate(text, memory={"resource": "ada", "thread": thread})
    assert memory.turns("t1", source=ReplaySource(store).preload("t1")) == memory.turns("t1")
    with pytest.raises(InvalidArgumentError, match=r"preloaded thread 't2'.*preload\('t1'\)"):
        memory.turns("t1", source=ReplaySource(store).preload("t2"))  # (t2's turns, listed as t1's, before)
    with pytest.raises(InvalidArgumentError, match="preloaded no thread"):
        memory.turns("t1", source=ReplaySource(store))


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


def test_a_schema_working_memory_keeps_its_key_order_in_a_rebuilt_turn(store) -> None:
    """The schema's properties are shown to the model in their order; a record whose options were
    re-read with sorted keys rebuilt a different prompt (matches=False on every such turn)."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "home_city": {"type": "string"},
                                               "allergies": {"type": "array", "items": {"type": "string"}}}}
    memory = Memory(store, MemoryOptions(last_messages=4, working_memory={"enabled": True, "schema": schema}))
    model = ScriptedModel(["Hi.", "Noted."])
    agent = Agent("helper", instructions="Be brief.", model=model, memory=memory, tracer=False)
    for text in ("I am Li Wei", "I live in Shanghai"):
        agent.generate(text, memory={"resource": "li", "thread": "t"})
    for turn, request in zip(memory.turns("t"), model.requests):
        prompt = memory.assemble(thread_id="t", resource_id="li", as_of=turn.input_message_id)
        assert prompt.replay is not None and prompt.replay.matches is True
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


def test_a_record_can_be_committed_in_the_turns_own_transaction(store) -> None:
    """``TurnCapture.commit(conn)`` (a staged write): the record lands with the messages, naming
    only the responses that transaction stored."""
    from core import Message
    from core.replay.capture import capture

    memory = Memory(store, MemoryOptions(last_messages=4))
    ctx = memory.new_context(memory.request_context(thread_id="t", resource_id="u"))
    ctx.live = True
    memory.prepare_input(ctx, input="hello there", instructions="Be kind.")
    prompt = memory.run_input(ctx)
    turn = capture(ctx, prompt, model=ScriptedModel(["x"]))
    assert turn is not None
    reply = Message.assistant("Hi!", thread_id="t", resource_id="u")
    ctx.messages.add(reply, "response")
    with store.db.write() as conn:
        memory.store.memory.save_messages(ctx.messages.new_messages(), conn=conn)
        turn.commit(conn)
    record = memory.turn_record(turn.record.input_message_id)
    assert record is not None and record.response_ids == (reply.id,) and record.instructions == ("Be kind.",)
    rebuilt = memory.assemble(as_of=record.input_message_id)
    assert rebuilt.replay is not None and rebuilt.replay.matches is True and rebuilt.messages == prompt.messages


def test_a_turn_that_sent_several_inputs_is_one_turn_and_rebuilds_exactly(store) -> None:
    from core import Message

    memory = Memory(store, MemoryOptions(last_messages=5))
    model = ScriptedModel(["First.", "Both read."])
    agent = Agent("a", instructions="Read all.", model=model, memory=memory, tracer=False)
    agent.generate("hello", memory={"resource": "u", "thread": "t"})
    agent.generate([Message.user("part one"), Message.user("part two")], memory={"resource": "u", "thread": "t"})
    turns = memory.turns("t")
    assert [t.input_text for t in turns] == ["hello", "part two"]
    record = turns[1].record
    assert record is not None and len(record.input_ids) == 2
    prompt = memory.assemble(as_of=turns[1].input_message_id)
    assert prompt.messages == model.requests[1].messages and prompt.replay.matches is True


def test_any_memory_on_the_file_rebuilds_a_recorded_turn(store) -> None:
    """The record carries the options: a memory built without recall (the Studio's, a script's)
    still rebuilds a turn that had recall, without an embedder."""
    from core.embedding import HashingEmbedder

    live = Memory(store, MemoryOptions(last_messages=1, semantic_recall={"top_k": 2, "scope": "thread",
                                                                         "message_range": 0}),
                  embedder=HashingEmbedder())
    model = ScriptedModel(["Herons fish.", "Yes, herons.", "Still herons."])
    agent = Agent("a", instructions="Birds.", model=model, memory=live, tracer=False)
    for text in ("herons eat fish", "tell me about egrets", "what do herons eat"):
        agent.generate(text, memory={"resource": "u", "thread": "t"})
    plain = Memory(store)
    last = plain.turns("t")[-1]
    assert last.record is not None and last.record.recall
    prompt = plain.assemble(as_of=last.input_message_id)
    assert prompt.fragments_from("semantic-recall")
    assert prompt.messages == model.requests[2].messages and prompt.replay.matches is True


def test_records_travel_with_an_exported_thread_and_rebuild_exactly_after_import(tmp_path) -> None:
    from core.transfer import export_thread, import_data

    source_path, target_path = tmp_path / "a.db", tmp_path / "b.db"
    with open_store(source_path) as store:
        memory = Memory(store, MemoryOptions(last_messages=2, working_memory={"enabled": True, "template": TEMPLATE}))
        model = ScriptedModel([
            ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": "# User\n- Name: Ada\n"}),)),
            "Hi Ada.", "Sure.", "Done."])
        agent = Agent("a", instructions="Be kind.", model=model, memory=memory, tracer=False)
        for text in ("I am Ada", "what is my name", "thanks"):
            agent.generate(text, memory={"resource": "ada", "thread": "t"})
        data = export_thread(store, "t")
    assert data["counts"]["turns"] == 3
    with open_store(target_path) as store:
        # The target already has a version of its own, so the imported one gets another id.
        Memory(store, MemoryOptions(working_memory={"enabled": True})).update_working_memory(
            resource_id="someone", working_memory="x")
        import_data(store, data)
        memory = Memory(store)
        turns = memory.turns("t")
        assert all(t.record is not None for t in turns)
        sent = [r.messages for r in model.requests if r.messages[-1]["role"] == "user"]
        for turn, messages in zip(turns, sent):
            prompt = memory.assemble(as_of=turn.input_message_id)
            assert prompt.replay.matches is True and prompt.messages == messages


def test_a_live_turns_stored_record_is_what_the_plain_encoder_writes(store, monkeypatch) -> None:
    """A live turn writes its record with shortcuts (the options' JSON remembered per options object,
    the first call's messages hashed only for a record without calls, the stored ids taken from the
    save it commits with): the stored text is byte for byte what ``encode`` makes of the record
    without any of them, for turns with and without a working-memory tool call (whose parts the
    stored reply does not hold)."""
    from dataclasses import replace

    from core.replay import capture as capture_module
    from core.replay import record as record_module
    from core.replay import store as records

    written: list[tuple[TurnRecord, str | None]] = []
    real_write = records.write

    def spy(conn, store_, record, *, options_json=None):  # type: ignore[no-untyped-def]
        written.append((record, options_json))
        return real_write(conn, store_, record, options_json=options_json)

    monkeypatch.setattr(capture_module.records, "write", spy)
    memory = Memory(store, MemoryOptions(last_messages=3, working_memory={"enabled": True, "template": TEMPLATE}))
    agent = _agent(memory, [
        ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": "# User\n- Name: Ada\n"}),)),
        "Hello Ada.",
        ScriptedReply(text="Noting it.", tool_calls=(tool_call("updateWorkingMemory", {"memory": "# User\n- Tea\n"}),)),
        "Done.", "Plain.",
    ])
    results = [agent.generate(text, memory={"resource": "ada", "thread": "t1"})
               for text in ("I am Ada", "I like tea", "And lemon")]
    assert len(written) == 3
    with store.db.read() as conn:
        stored = dict(conn.exec_driver_sql("SELECT input_message_id, record FROM memory_studio_turns").all())
    for (record, options_json), result in zip(written, results):
        assert options_json == record_module._canonical(record.options)
        keys = {x: record_module.text_key(x) for x in record_module.long_texts(record)}
        plain = replace(record, messages_hash=record_module.messages_hash(result.prompts[0].messages))
        assert stored[record.input_message_id] == record_module.encode(plain, keys)
        reply = result.messages[-1]
        saved_ids = {m.id for m in result.saved}
        assert record.response_ids == tuple(i for i in (reply.id,) if i in saved_ids)
