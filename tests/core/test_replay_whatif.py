"""What-if, prompt diffs with their reasons, and re-running a turn (issue 10 items 3 and 8, engine side)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import pytest

from core import Agent, Memory, MemoryOptions, OpenAICompatibleModel
from core.embedding import HashingEmbedder
from core.llm import LoopbackServer, ScriptedModel, ScriptedReply, tool_call
from core.replay import REASONS, RerunError, prompt_diff, rerun
from core.timeutil import FixedClock

TEMPLATE = "# User\n- Name:\n- Likes:\n"
RECALL = {"top_k": 3, "message_range": 0, "scope": "thread", "mode": "vector"}


def _responder(messages: list[dict[str, Any]], tools: Any) -> Any:
    last = messages[-1]
    if last["role"] == "tool":
        return "Saved."
    text = str(last["content"])
    if text.startswith("I like"):
        return ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": f"# User\n- Name:\n- Likes: {text[7:]}\n"}),))
    return f"About {text.split()[-1]}"


@pytest.fixture
def chat(store: Any) -> tuple[Memory, list[str]]:
    clock = FixedClock(datetime(2026, 5, 1, 10, tzinfo=timezone.utc), step_ms=1000)
    memory = Memory(store, MemoryOptions(last_messages=4, semantic_recall=RECALL,
                                         working_memory={"enabled": True, "template": TEMPLATE}),
                    embedder=HashingEmbedder(), clock=clock)
    agent = Agent("helper", instructions="Short answers.", model=ScriptedModel(_responder), memory=memory, tracer=False)
    texts = ["tell me about herons", "herons eat fish", "I like herons", "what about egrets",
             "egrets and herons wade", "where do herons nest"]
    ids = []
    for text in texts:
        result = agent.generate(text, memory={"resource": "u", "thread": "t"})
        ids.append(next(m.id for m in result.messages if m.role == "user"))
    return memory, ids


def _reasons(changes: list[Any], kind: str | None = None) -> set[str]:
    return {c.reason for c in changes if kind is None or c.kind == kind}


def test_every_reason_is_a_known_one(chat: Any) -> None:
    memory, ids = chat
    changes = prompt_diff(memory.assemble(as_of=ids[2]), memory.assemble(as_of=ids[5]))
    assert changes and _reasons(changes) <= set(REASONS)


def test_outside_the_history_window(chat: Any) -> None:
    memory, ids = chat
    real = memory.assemble(as_of=ids[5])
    narrow = memory.assemble(as_of=ids[5], options={"last_messages": 2, "semantic_recall": False})
    left = [c for c in prompt_diff(real, narrow) if c.kind == "left" and c.source == "message-history"]
    assert len(left) == 2 and {c.reason for c in left} == {"outside-history-window"}
    assert all(c.text_after is None and c.tokens_after == 0 and c.tokens_before > 0 for c in left)


def test_below_the_recall_threshold_and_outside_the_top_k(chat: Any) -> None:
    memory, ids = chat
    real = memory.assemble(as_of=ids[5])
    recalled = [f for f in real.fragments if f.source == "semantic-recall"]
    assert recalled, "the last turn recalled older messages"
    strict = memory.assemble(as_of=ids[5], options={"semantic_recall": {"threshold": 1.01}})
    assert _reasons(prompt_diff(real, strict), "left") == {"below-recall-threshold"}
    fewer = memory.assemble(as_of=ids[5], options={"semantic_recall": {"top_k": 1}})
    left = [c for c in prompt_diff(real, fewer) if c.kind == "left"]
    assert left and {c.reason for c in left} == {"outside-recall-top-k"}


def test_working_memory_changed_and_new_messages_between_turns(chat: Any) -> None:
    memory, ids = chat
    before, after = memory.assemble(as_of=ids[2]), memory.assemble(as_of=ids[3])
    changes = prompt_diff(before, after)
    wm = [c for c in changes if c.source == "working-memory"]
    assert len(wm) == 1 and wm[0].kind == "changed" and wm[0].reason == "working-memory-changed"
    assert "Likes: herons" in (wm[0].text_after or "") and "Likes: herons" not in (wm[0].text_before or "")
    entered = [c for c in changes if c.kind == "entered" and c.source in ("message-history", "input")]
    assert entered and {c.reason for c in entered} == {"new-message"}
    # The earlier turn's input, now in the history, is not a change.
    assert not [c for c in changes if ids[2] in c.stored_ids]


def test_options_changed(chat: Any) -> None:
    memory, ids = chat
    real = memory.assemble(as_of=ids[4])
    off = memory.assemble(as_of=ids[4], options={"working_memory": {"enabled": False}})
    left = [c for c in prompt_diff(real, off) if c.source == "working-memory"]
    # The working-memory block and the update tool it offered both leave.
    assert [c.kind for c in left] == ["left", "left"] and {c.reason for c in left} == {"options-changed"}
    assert any("updateWorkingMemory" in (c.text_before or "") for c in left)


def test_trimmed_by_the_token_budget(chat: Any) -> None:
    memory, ids = chat
    real = memory.assemble(as_of=ids[5])
    history = [f for f in real.fragments if f.source == "message-history"]
    trimmed = replace(real, fragments=[f for f in real.fragments if f is not history[0]],
                      skipped={**real.skipped, "message-history": "2 oldest messages trimmed by the token budget"})
    left = [c for c in prompt_diff(real, trimmed) if c.kind == "left"]
    assert [c.reason for c in left] == ["token-budget"]


def test_observed_by_observational_memory(store: Any) -> None:
    calls = {"n": 0}

    def observer(messages: Any, tools: Any) -> str:
        calls["n"] += 1
        return f"<observations>\nDate: May 1, 2026\n* 🔴 (10:0{calls['n']}) Note {calls['n']}.\n</observations>"

    memory = Memory(store, MemoryOptions(observational_memory={"message_tokens": 40, "observation_tokens": 90_000}),
                    observer_model=ScriptedModel(observer, name="observer"),
                    clock=FixedClock(datetime(2026, 5, 1, 10, tzinfo=timezone.utc)))
    agent = Agent("om", instructions="Hi.", model=ScriptedModel(lambda m, t: "A fairly long answer about compost."),
                  memory=memory, tracer=False)
    ids = []
    for i in range(4):
        result = agent.generate(f"Question {i} about compost heaps and worms", memory={"resource": "u", "thread": "o"})
        ids.append(next(m.id for m in result.messages if m.role == "user"))
    pairs = [prompt_diff(memory.assemble(as_of=a), memory.assemble(as_of=b)) for a, b in zip(ids, ids[1:])]
    observed = [c for changes in pairs for c in changes if c.reason == "observed"]
    assert any(c.kind == "left" and c.source == "observational-memory" and c.stored_ids for c in observed), \
        "raw messages leave once observed"
    assert any(c.kind in ("entered", "changed") and c.text_after and "Note" in c.text_after for c in observed)


def test_what_if_over_a_whole_thread(chat: Any) -> None:
    memory, ids = chat
    seen: list[tuple[int, int]] = []
    rows = list(memory.what_if("t", options={"last_messages": 1}, progress=lambda i, n: seen.append((i, n))))
    assert [r.input_message_id for r in rows] == ids
    assert seen == [(i, len(ids)) for i in range(1, len(ids) + 1)]
    assert rows[0].left == 0 and rows[0].tokens_what_if == rows[0].tokens_real
    assert all(r.tokens_what_if <= r.tokens_real for r in rows)
    assert rows[-1].left >= 1 and rows[-1].tokens_what_if < rows[-1].tokens_real
    # Messages pushed out of the window may come back through recall: a change of source, same reason.
    assert {c.reason for c in rows[-1].changes if c.source == "message-history" or c.kind == "changed"} \
        == {"outside-history-window"}
    assert rows[-1].left == sum(c.kind == "left" for c in rows[-1].changes)
    stop = {"after": 2}

    def cancel() -> bool:
        stop["after"] -= 1
        return stop["after"] < 0

    assert len(list(memory.what_if("t", options={"last_messages": 1}, cancel=cancel))) == 2


def _snapshot(path: Any) -> list[Any]:
    with sqlite3.connect(path) as con:
        return [con.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall()
                for t in ("mastra_threads", "mastra_messages", "memory_studio_turns", "memory_studio_wm_versions")]


def test_rerun_sends_the_prompt_and_writes_nothing(chat: Any, store: Any) -> None:
    memory, ids = chat
    prompt = memory.assemble(as_of=ids[3])
    before = _snapshot(store.location.path)
    model = ScriptedModel(["A new answer about egrets."])
    result = rerun(prompt, model, model_settings={"temperature": 0.2})
    assert result.text == "A new answer about egrets." and result.model == "scripted/demo"
    assert model.requests[0].messages == prompt.messages and model.requests[0].temperature == 0.2
    assert model.requests[0].tools and model.requests[0].tools[0]["function"]["name"] == "updateWorkingMemory"
    assert result.tokens_in > 0 and result.tokens_out > 0 and result.latency_ms >= 0
    assert _snapshot(store.location.path) == before
    with pytest.raises(RerunError, match="warmth"):  # every model setting may change in a re-run; unknown ones not
        rerun(prompt, model, model_settings={"warmth": 3})


def test_rerun_against_an_openai_compatible_server(chat: Any) -> None:
    memory, ids = chat
    prompt = memory.assemble(as_of=ids[4], options={"last_messages": 1})
    with LoopbackServer(["Loopback says hello."]) as server:
        model = OpenAICompatibleModel("loop", base_url=server.base_url, api_key="k")
        result = rerun(prompt, model)
        body = server.chat_requests()[0]
    assert body["messages"] == prompt.messages
    assert result.text == "Loopback says hello." and result.model.startswith("openai-compatible/loop@http://127.0.0.1")
    assert "k" not in result.model.split("@")[0].split("/")[0]


def test_recall_hits_that_enter_a_turn_were_recalled_for_its_input(store: Any) -> None:
    """Issue 16: a hit entering the next turn's prompt was labelled "outside recall top-k"; it entered
    because this turn's input recalled it."""
    memory = Memory(store, MemoryOptions(last_messages=2, semantic_recall={"top_k": 1, "message_range": 0,
                                                                           "scope": "thread", "mode": "vector"}),
                    embedder=HashingEmbedder())
    agent = Agent("helper", instructions="Short answers.", model=ScriptedModel(lambda m, t: "ok"), memory=memory,
                  tracer=False)
    for text in ("lemons are sour and yellow", "cars drive on roads", "planes fly high", "tell me about lemons"):
        agent.generate(text, memory={"resource": "u", "thread": "t"})
    ids = [t.input_message_id for t in memory.turns("t")]
    changes = prompt_diff(memory.assemble(as_of=ids[2]), memory.assemble(as_of=ids[3]))
    entered = [c for c in changes if c.kind == "entered" and c.source == "semantic-recall"]
    assert entered and {c.reason for c in entered} == {"recalled-for-input"}
    assert "lemons are sour" in (entered[0].text_after or "")
    # Within one turn (a what-if), a hit that enters with recall on was left out by the options.
    off = memory.assemble(as_of=ids[3], options={"semantic_recall": False})
    assert _reasons(prompt_diff(off, memory.assemble(as_of=ids[3])), "entered") == {"options-changed"}


def test_a_recall_block_that_todays_search_answers_otherwise_says_so(store: Any) -> None:
    # Same input, same options, no message edited, and yet the recall block differs from what the model
    # got: the search answers otherwise now (the engine's ranking changed, or the index holds other vectors,
    # as here). The Studio showed this as "changed (other)".
    from core import Message
    from core.recall import vector_table_name

    memory = Memory(store, MemoryOptions(last_messages=2, semantic_recall={"top_k": 2, "message_range": 0,
                                                                            "scope": "resource", "mode": "vector"}),
                    embedder=HashingEmbedder(64))
    memory.save_messages([Message.user(t, id=f"f{i}", thread_id="a", resource_id="u") for i, t in enumerate(
        ["herons eat fish in the river", "herons nest in tall trees by the river", "the bus leaves at nine"])])
    agent = Agent("helper", instructions="Short.", model=ScriptedModel(["Noted."]), memory=memory, tracer=False)
    result = agent.generate("where do herons nest by the river?", memory={"resource": "u", "thread": "b"})
    turn = next(m.id for m in result.messages if m.role == "user")
    recorded = memory.assemble(as_of=turn)
    block = next(f for f in recorded.fragments if f.source == "semantic-recall")
    assert len(block.stored_ids) == 2
    with store.db.write() as conn:  # the block's second message loses its vector (as a reindex might)
        conn.exec_driver_sql(f"DELETE FROM {vector_table_name(64)} WHERE vector_id = ?", (block.stored_ids[1],))
    changes = prompt_diff(recorded, memory.assemble(as_of=turn, rebuild="now"))
    assert [(c.kind, c.source, c.reason) for c in changes] == [
        ("changed", "semantic-recall", "recall-ranked-differently")]


def test_observations_only_dated_from_a_later_day_say_time_passed(store: Any) -> None:
    """Found 2026-12-06 walking Replay on the demo: a turn two months after the previous one showed every
    observation block "changed · observed by observational memory" though nothing was observed between them:
    only the "(today)" → "(2 months ago)" labels differed."""
    def observer(messages: Any, tools: Any) -> str:
        return ("<observations>\nDate: May 1, 2026\n* 🔴 (10:01) User keeps a Boston fern on the balcony and "
                "intends to move it into a larger clay pot (estimated May 3, 2026).\n</observations>")

    first = Memory(store, MemoryOptions(observational_memory={"message_tokens": 40, "observation_tokens": 90_000}),
                   observer_model=ScriptedModel(observer, name="observer"),
                   clock=FixedClock(datetime(2026, 5, 1, 10, tzinfo=timezone.utc)))
    answer = ScriptedModel(lambda m, t: "A fairly long answer about ferns and their pots.")
    ids = []
    for i in range(3):
        result = Agent("om", instructions="Hi.", model=answer, memory=first, tracer=False).generate(
            f"Question {i} about ferns and pots", memory={"resource": "u", "thread": "o"})
        ids.append(next(m.id for m in result.messages if m.role == "user"))
    # Two months later, with a threshold no turn reaches: nothing more is observed.
    later = Memory(store, MemoryOptions(observational_memory={"message_tokens": 90_000, "observation_tokens": 90_000}),
                   observer_model=ScriptedModel(observer, name="observer"),
                   clock=FixedClock(datetime(2026, 7, 1, 10, tzinfo=timezone.utc)))
    result = Agent("om", instructions="Hi.", model=answer, memory=later, tracer=False).generate(
        "Anything else about ferns?", memory={"resource": "u", "thread": "o"})
    ids.append(next(m.id for m in result.messages if m.role == "user"))

    changes = prompt_diff(later.assemble(as_of=ids[2]), later.assemble(as_of=ids[3]))
    blocks = [c for c in changes if c.source == "observational-memory" and c.kind == "changed"]
    assert blocks and all(c.reason == "time-passed" for c in blocks), [(c.reason, c.text_before) for c in blocks]
    assert any("(today)" in (c.text_before or "") and "months ago" in (c.text_after or "") for c in blocks)
    # An observation between two turns is still "observed" (test_observed_by_observational_memory).
