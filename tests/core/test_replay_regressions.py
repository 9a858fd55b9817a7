"""What was found while trying replay (issue 10 item 9), each pinned by a test that failed before the fix."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from core import Agent, Memory, MemoryOptions, Message
from core.embedding import HashingEmbedder
from core.llm import ScriptedModel
from core.observational.context import TAG as OM_TAG
from core.recall import RecallIndex
from core.timeutil import FixedClock

T0 = datetime(2026, 4, 1, 8, 0, tzinfo=timezone.utc)


def _recall_memory(store: Any, **recall: Any) -> Memory:
    options = {"top_k": 1, "message_range": 0, "scope": "thread", "mode": "vector", **recall}
    return Memory(store, MemoryOptions(last_messages=1, semantic_recall=options), embedder=HashingEmbedder())


def _save(memory: Memory, texts: list[str], thread: str = "t") -> list[Message]:
    msgs = [Message.user(text, thread_id=thread, resource_id="u", created_at=T0 + timedelta(minutes=i))
            for i, text in enumerate(texts)]
    return memory.save_messages(msgs)


def test_a_rebuilt_turns_recall_never_picks_a_message_written_after_it(store: Any) -> None:
    memory = _recall_memory(store, top_k=2)
    msgs = _save(memory, ["orchids need bright indirect light", "filler one", "filler two",
                          "which light do orchids need",  # the replayed turn
                          "orchids need bright indirect light and weekly water"])  # written later, most similar
    prompt = memory.assemble(thread_id="t", as_of=msgs[3].id)
    hits = [h["message_id"] for h in prompt.notes["semantic-recall"]["hits"]]
    assert msgs[4].id not in hits
    # The later message does not take a top-k place from an older one: the older hit is still found.
    assert msgs[0].id in hits


def test_a_later_hit_is_not_reported_as_already_in_the_context(store: Any) -> None:
    memory = _recall_memory(store, top_k=2)
    msgs = _save(memory, ["what about quantum gravity", "quantum gravity is unsolved"])  # the hit is later
    prompt = memory.assemble(thread_id="t", as_of=msgs[0].id)
    reason = prompt.skipped.get("semantic-recall", "")
    assert reason and "already in the context" not in reason
    assert all(h["message_id"] != msgs[1].id for h in prompt.notes["semantic-recall"].get("hits", []))


def test_the_recall_index_searches_as_of_a_time_in_both_halves(store: Any) -> None:
    memory = _recall_memory(store)
    msgs = _save(memory, ["red kite soaring", "blue whale song", "red kite nesting", "red kite feeding chicks"])
    index = RecallIndex.for_store(store, memory.embedder)
    cutoff = msgs[2].created_at
    for mode in ("vector", "keyword", "hybrid"):
        found = index.search("red kite", resource_id=None, thread_id="t", top_k=3, mode=mode, until=cutoff).hits
        ids = {h.message_id for h in found}
        assert msgs[0].id in ids, mode
        assert not ids & {msgs[2].id, msgs[3].id}, mode
        # Without ``until`` the later messages are found again (top 4 of the 4: in hybrid mode "blue whale
        # song", between two kite messages, takes a top-3 place with its neighbours' share).
        everything = index.search("red kite", resource_id=None, thread_id="t", top_k=4, mode=mode).hits
        assert {msgs[2].id, msgs[3].id} <= {h.message_id for h in everything}, mode


OBSERVATION = ("<observations>\nDate: Apr 1, 2026\n* 🔴 (08:{n:02d}) Observation number {n} about the garden."
               "\n</observations>\n<current-task>\nTask number {n}.\n</current-task>")


def _om_conversation(store: Any) -> tuple[Memory, list[str], ScriptedModel]:
    calls = {"n": 0}

    def observer(messages: Any, tools: Any) -> str:
        calls["n"] += 1
        return OBSERVATION.format(n=calls["n"])

    clock = FixedClock(T0, step_ms=1000)
    # Synchronous observation, so "observation n" is written at a known turn (buffered observation is
    # covered by test_observational_buffering.py's rebuild test).
    memory = Memory(store, MemoryOptions(observational_memory={"message_tokens": 40, "observation_tokens": 90_000,
                                                               "buffer_tokens": False}),
                    clock=clock, observer_model=ScriptedModel(observer, name="observer"))
    model = ScriptedModel([f"Answer {i} about the raised garden beds and compost." for i in range(8)])
    agent = Agent("gardener", instructions="Garden help.", model=model, memory=memory, tracer=False)
    inputs = []
    for i in range(8):
        result = agent.generate(f"Question {i}: how do I build raised beds with cedar planks?",
                                memory={"resource": "u", "thread": "g"})
        inputs.append(next(m.id for m in result.messages if m.role == "user"))
    # Observations are buffered in the background (issue 19): let them settle before the file is
    # touched by another SQLite library in this process.
    assert memory.wait_idle(30)
    return memory, inputs, model


def _observations(prompt: Any) -> str:
    return "\n".join(f.text for f in prompt.fragments if f.role == "system" and f.tag == OM_TAG)


def test_a_rebuilt_observational_turn_shows_no_later_observations(store: Any) -> None:
    memory, inputs, model = _om_conversation(store)
    latest = _observations(memory.assemble(as_of=inputs[-1]))
    assert "Observation number 3" in latest  # the thread was observed several times
    for i, input_id in enumerate(inputs):
        prompt = memory.assemble(thread_id="g", as_of=input_id)
        assert prompt.messages == model.requests[i].messages  # from the record: exactly what was sent
    early = _observations(memory.assemble(as_of=inputs[2]))
    assert "Observation number 3" not in early and "Task number 3" not in early


def test_without_records_an_observational_turn_still_shows_no_later_observations(store: Any) -> None:
    memory, inputs, model = _om_conversation(store)
    with sqlite3.connect(store.location.path) as con:
        con.execute("DELETE FROM memory_studio_turns")
    for i, input_id in enumerate(inputs):
        shown = _observations(memory.assemble(as_of=input_id))
        sent = "\n".join(m["content"] for m in model.requests[i].messages if m["role"] == "system")
        for n in range(1, 9):
            if f"Observation number {n}" in shown:
                assert f"Observation number {n}" in sent, f"turn {i} shows observation {n}, written later"
        assert "Task number" not in shown or shown.split("Task number")[1][:2] in sent


def test_without_records_a_turn_that_reflected_shows_the_generation_it_was_sent(store: Any) -> None:
    """Regression (the Prompt Inspector over turns of a synchronous observer, their records gone): a turn
    that observed and then reflected in its own input phase was sent the new generation, but its rebuild
    took the generation before (the new row is written after the turn's input), so it showed observations
    the model never saw, with nothing in ``unknowns`` to say so."""
    calls = {"n": 0}

    def observer(messages: Any, tools: Any) -> str:
        if "grown too long" in messages[0]["content"]:
            return "<observations>\nDate: Apr 1, 2026\n* 🔴 (08:00) Condensed garden notes.\n</observations>"
        calls["n"] += 1
        return OBSERVATION.format(n=calls["n"])

    memory = Memory(store, MemoryOptions(observational_memory={"message_tokens": 40, "observation_tokens": 20,
                                                               "buffer_tokens": False}),
                    clock=FixedClock(T0, step_ms=1000), observer_model=ScriptedModel(observer, name="observer"))
    model = ScriptedModel([f"Answer {i} about the raised garden beds and compost." for i in range(6)])
    agent = Agent("gardener", instructions="Garden help.", model=model, memory=memory, tracer=False)
    inputs, reflected = [], []
    for i in range(6):
        result = agent.generate(f"Question {i}: how do I build raised beds with cedar planks?",
                                memory={"resource": "u", "thread": "g"})
        inputs.append(next(m.id for m in result.messages if m.role == "user"))
        reflected.append(bool(result.prompts[0].notes["observational-memory"].get("reflected")))
    assert any(reflected)
    with sqlite3.connect(store.location.path) as con:
        con.execute("DELETE FROM memory_studio_turns")
    for i, input_id in enumerate(inputs):
        shown = _observations(memory.assemble(as_of=input_id))
        sent = "\n".join(m["content"] for m in model.requests[i].messages if m["role"] == "system")
        assert ("Condensed garden notes" in shown) == ("Condensed garden notes" in sent), i
        for n in range(1, 7):
            assert (f"Observation number {n}" in shown) <= (f"Observation number {n}" in sent), (i, n)


@pytest.mark.parametrize("rebuild", ["record", "now"])
def test_rebuild_modes_report_whether_they_match(store: Any, rebuild: str) -> None:
    memory = Memory(store, MemoryOptions(last_messages=3))
    agent = Agent("a", instructions="Hi.", model=ScriptedModel(["one", "two"]), memory=memory, tracer=False)
    agent.generate("first", memory={"resource": "u", "thread": "t"})
    second = agent.generate("second", memory={"resource": "u", "thread": "t"})
    input_id = next(m.id for m in second.messages if m.role == "user")
    prompt = memory.assemble(as_of=input_id, rebuild=rebuild)  # type: ignore[arg-type]
    assert prompt.replay is not None and prompt.replay.matches is True
    assert prompt.replay.kind == ("recorded" if rebuild == "record" else "reconstructed")
    narrower = memory.assemble(as_of=input_id, rebuild=rebuild, options={"last_messages": 1})  # type: ignore[arg-type]
    assert narrower.replay is not None and narrower.replay.what_if and narrower.replay.matches is False


def test_a_turn_fitted_to_the_context_window_with_recall_rebuilds_exactly(store: Any) -> None:
    # The live turn's recall skipped hits already in the history window; the window then dropped the
    # oldest history messages to fit. The record kept only the history that was sent, so the rebuild's
    # recall no longer saw those messages in the window and put them back as recall, and the fit
    # dropped newer history instead: "recorded, differs" for a turn nobody changed.
    memory = Memory(store, MemoryOptions(last_messages=20, semantic_recall={
        "top_k": 2, "message_range": 1, "scope": "thread", "mode": "vector"}), embedder=HashingEmbedder())
    model = ScriptedModel(lambda messages, tools: "ok " + "word " * 40, context_window=900)
    agent = Agent("fit", instructions="Be brief.", model=model, memory=memory, model_settings={"max_tokens": 100})
    for i in range(8):
        agent.generate(f"Message {i} about orchids and light " + "padding " * 60,
                       memory={"resource": "u", "thread": "t"})
    turns = memory.turns("t", resource_id="u")
    dropped = 0
    for turn in turns:
        prompt = memory.assemble(as_of=turn.input_message_id, resource_id="u")
        assert prompt.replay is not None
        assert prompt.replay.status == "recorded (exact)", (turn.input_message_id, prompt.replay.differences)
        dropped += "context-window" in prompt.skipped
    assert dropped >= 2  # the window really dropped history on later turns
    # A message the window dropped was read but not sent: editing it later does not mark the turn.
    last = turns[-1]
    record = memory.turn_record(last.input_message_id)
    assert record is not None and record.window_dropped
    memory.edit_message(record.window_dropped[0], resource_id="u", text="edited later")
    prompt = memory.assemble(as_of=last.input_message_id, resource_id="u")
    assert prompt.replay is not None and prompt.replay.status == "recorded (exact)"
    assert prompt.replay.changed_since == {}
    sent = memory.turn_record(turns[-1].input_message_id).history_ids  # type: ignore[union-attr]
    memory.edit_message(sent[-1], resource_id="u", text="edited as well")
    prompt = memory.assemble(as_of=last.input_message_id, resource_id="u")
    assert prompt.replay is not None and prompt.replay.changed_since == {sent[-1]: "edited since"}
