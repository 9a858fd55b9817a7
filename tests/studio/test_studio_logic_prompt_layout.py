"""The prompt inspector's pure logic, on a real libSQL file (no Qt)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from core import Memory, MemoryOptions, Message, open_store
from core.agent_configs import choose_agent, list_agents
from studio.logic.prompt_layout import (
    EmbedderHolder,
    InspectorOptions,
    PreviewRequest,
    context_usage,
    fragment_rows,
    skipped_rows,
    source_color,
    starting_point,
)
from studio.reads import assemble_preview, resolve_turn

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)


@pytest.fixture()
def store(tmp_path):
    s = open_store(tmp_path / "memory.db")
    mem = Memory(s, MemoryOptions(last_messages=6, working_memory={"enabled": True}), name="assistant")
    mem.create_thread(resource_id="alice", thread_id="t1", title="Trip to Lisbon")
    msgs = []
    for i, (role, text) in enumerate([
        ("user", "I'm Alice, I live in Berlin."), ("assistant", "Nice to meet you, Alice."),
        ("user", "Plan a trip to Lisbon in May."), ("assistant", "Here is a 3-day plan for Lisbon."),
        ("user", "Add a day trip to Sintra."), ("assistant", "Day 4: Sintra, Pena Palace."),
    ]):
        make = Message.user if role == "user" else Message.assistant
        msgs.append(make(text, thread_id="t1", resource_id="alice", created_at=T0 + timedelta(minutes=i),
                         id=f"m{i}"))
    mem.save_messages(msgs)
    mem.update_working_memory(thread_id="t1", resource_id="alice", working_memory="# User\n- Name: Alice\n- Location: Berlin")
    mem.register("travel-agent")
    yield s
    s.close()


def factory(store):
    return lambda opts, name, emb: Memory(store, opts, name=name, embedder=emb)


def no_embedder():
    raise AssertionError("recall is off; the embedding model must not be loaded")


def test_options_round_trip_into_engine_overrides():
    opts = InspectorOptions(last_messages=0, recall=True, top_k=3, scope="thread", read_only=True,
                            working_memory=True, observational=False, threshold=0.25, message_range=(2, 0))
    over = opts.to_overrides()
    over.pop("message_history", None)  # the token budget: only on engines that have the option
    assert over == {"last_messages": False,
                    "semantic_recall": {"enabled": True, "top_k": 3, "scope": "thread", "threshold": 0.25,
                                        "message_range": {"before": 2, "after": 0}},
                    "read_only": True, "working_memory": {"enabled": True},
                    "observational_memory": {"enabled": False}}
    merged = MemoryOptions().merged(over)
    assert InspectorOptions.from_memory_options(merged) == opts


def test_starting_point_uses_the_registered_agent(store):
    agents = list_agents(store)
    assert [a.name for a in agents] == ["travel-agent"]
    thread = store.memory.get_thread("t1")
    agent, reason = choose_agent(agents, thread)
    start = starting_point(agent, reason)
    assert start.options.last_messages == 6
    assert "travel-agent" in start.origin
    assert start.agent is not None and start.agent.memory_name == "assistant"
    default = starting_point(None, "no agent has registered")
    assert default.origin.startswith("Defaults") and default.options.last_messages == 10


def test_preview_renders_the_engine_record(store):
    start = starting_point(list_agents(store)[0], "test")
    req = PreviewRequest("t1", "alice", start.base, start.options, "assistant", text="Which city do I live in?",
                         instructions="You are a travel agent.")
    preview = assemble_preview(store, req, factory(store), EmbedderHolder(no_embedder))
    prompt = preview.prompt
    rows = fragment_rows(prompt)
    assert [r.source for r in rows][:2] == ["instructions", "working-memory"]
    assert rows[-1].source in ("tools", "working-memory") and rows[-1].role == "tool defs"
    history = [r for r in rows if r.source == "message-history"]
    assert [r.stored_ids for r in history] == [(f"m{i}",) for i in range(6)]
    assert sum(r.tokens for r in rows) + 3 == prompt.total_tokens
    usage = context_usage(prompt)
    assert usage.total == prompt.total_tokens and usage.window == 128_000
    assert {s.source: s.tokens for s in usage.segments} == {**prompt.tokens_by_source(), "reply primer": 3}
    assert sum(s.tokens for s in usage.segments) == usage.total  # the bar's parts add up to its total
    assert usage.segments[0].color == source_color("instructions")
    assert [s.processor for s in skipped_rows(prompt)] == ["memory-input-filter"]
    # Copy payloads are the engine's own serialisations.
    assert json.loads(prompt.openai_messages_json())[-1] == {"role": "user", "content": "Which city do I live in?"}


def test_option_change_changes_the_prompt(store):
    start = starting_point(None, "none")
    req = PreviewRequest("t1", "alice", start.base, InspectorOptions(last_messages=2), "assistant", text="hi")
    two = assemble_preview(store, req, factory(store), EmbedderHolder(no_embedder)).prompt
    assert len(two.fragments_from("message-history")) == 2
    off = assemble_preview(store, PreviewRequest("t1", "alice", start.base, InspectorOptions(last_messages=0),
                                                 "assistant", text="hi"), factory(store), EmbedderHolder(no_embedder))
    assert off.prompt.fragments_from("message-history") == []
    assert "message-history" not in off.prompt.processors or "message-history" in off.prompt.skipped


def test_read_only_drops_the_update_tool(store):
    base = MemoryOptions(working_memory={"enabled": True})
    req = PreviewRequest("t1", "alice", base, InspectorOptions(read_only=True), "assistant", text="hi")
    prompt = assemble_preview(store, req, factory(store), EmbedderHolder(no_embedder)).prompt
    assert prompt.tools == []
    assert "READ-ONLY" in prompt.fragments_from("working-memory")[0].text


def test_stored_turn_sees_only_earlier_history(store):
    turn = resolve_turn(store, "t1", "m3")  # an assistant reply: its turn starts at user message m2
    assert turn is not None and turn.input is not None and turn.input.id == "m2"
    req = PreviewRequest("t1", "alice", MemoryOptions(), InspectorOptions(), "assistant", message_id="m3")
    preview = assemble_preview(store, req, factory(store), EmbedderHolder(no_embedder))
    history = [f.stored_ids[0] for f in preview.prompt.fragments_from("message-history")]
    assert history == ["m0", "m1"]
    assert preview.prompt.messages[-1] == {"role": "user", "content": "Plan a trip to Lisbon in May."}


def test_recall_without_model_reports_the_install_hint(store):
    def missing():
        raise RuntimeError("The embedding model is not installed. Run: memory-studio models install")

    req = PreviewRequest("t1", "alice", MemoryOptions(), InspectorOptions(recall=True), "assistant", text="hi")
    with pytest.raises(RuntimeError, match="models install"):
        assemble_preview(store, req, factory(store), EmbedderHolder(missing))


def test_pure_logic_imports_no_qt():
    code = (
        "import sys, studio.logic.prompt_layout, studio.logic.wm_editing, studio.logic.memory_config, "
        "studio.logic.diffing, studio.reads; sys.exit(1 if any(m.startswith('PySide6') for m in sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_history_budget_trim_shows_as_a_skip_reason(store):
    base = MemoryOptions(message_history={"max_tokens": 120, "at_max_remove_tokens": 20},
                         working_memory={"enabled": True})
    start = InspectorOptions.from_memory_options(base)
    assert start.last_messages is None  # no count cap: the token budget bounds history
    assert MemoryOptions(**base.to_dict()).merged(start.to_overrides()).last_messages is None
    req = PreviewRequest("t1", "alice", base, start, "assistant", text="Which city do I live in?")
    prompt = assemble_preview(store, req, factory(store), EmbedderHolder(no_embedder)).prompt
    rows = skipped_rows(prompt)
    assert [r.processor for r in rows] == ["memory-input-filter", "memory-token-limiter"]  # in the order they ran
    assert "over the 120-token history budget" in rows[1].reason and "oldest memory message" in rows[1].reason
    kept = [r.stored_ids[0] for r in fragment_rows(prompt) if r.source == "message-history"]
    assert kept == [f"m{i}" for i in range(6 - len(kept), 6)] and len(kept) < 6
    assert prompt.messages[-1] == {"role": "user", "content": "Which city do I live in?"}


def test_inspector_options_start_from_any_memory_options_including_a_schema_and_a_budget():
    """Options holding a JSON schema (dicts) must not break the inspector's starting point."""
    from core import MemoryOptions
    from studio.logic.prompt_layout import InspectorOptions

    schema = {"type": "object", "properties": {"name": {"type": "string"}, "city": {"type": "string"}}}
    opts = MemoryOptions(working_memory={"enabled": True, "schema": schema},
                         message_history={"max_tokens": 900})
    start = InspectorOptions.from_memory_options(opts)
    assert start.history_tokens == 900 and start.working_memory is True
    merged = opts.merged(start.to_overrides())
    assert list(merged.working_memory.schema["properties"]) == ["name", "city"]
    assert merged.message_history.max_tokens == 900


def test_a_new_messages_preview_is_fitted_into_the_window_the_threads_turns_had(tmp_path):
    """A thread whose turns ran on a model with a small context window: the preview of its next message is
    fitted into that window (measured against it, the oldest history dropped) as the next turn would be,
    not measured against a 128,000-token default with every message shown."""
    from core.agent import Agent
    from core.llm import ScriptedModel

    s = open_store(tmp_path / "small.db")
    try:
        memory = Memory(s, MemoryOptions(last_messages=20), name="small")
        model = ScriptedModel(lambda messages, tools: "ok " + "word " * 40, context_window=900)
        agent = Agent("small", instructions="Be brief.", model=model, memory=memory,
                      model_settings={"max_tokens": 100})
        for i in range(8):
            agent.generate(f"Message {i} about orchids " + "padding " * 60, memory={"resource": "u", "thread": "t"})
        start = starting_point(list_agents(s)[0], "test")
        req = PreviewRequest("t", "u", start.base, start.options, "small", text="And the next one?",
                             instructions="Be brief.")
        preview = assemble_preview(s, req, factory(s), EmbedderHolder(no_embedder))
        usage = context_usage(preview.prompt)
        assert usage.window == 900 and not usage.over
        assert "context-window" in preview.prompt.skipped  # the oldest history did not fit
        assert any("900-token context window" in note for note in preview.notes)
    finally:
        s.close()


def test_stored_message_labels_tell_engine_ids_apart(tmp_path):
    """The engine's ids are UUIDv7: messages written in the same minute share their first eight characters,
    so the inspector's Stored column showed "01a24241…" on every row (found by the Studio QA pass)."""
    from studio.logic.replay_layout import step_rows

    s = open_store(tmp_path / "ids.db")
    mem = Memory(s, MemoryOptions(last_messages=10), name="assistant")
    mem.create_thread(resource_id="bo", thread_id="t", title="t")
    mem.save_messages([Message.user(f"message {i}", thread_id="t", resource_id="bo") for i in range(6)])
    prompt = mem.assemble(thread_id="t", resource_id="bo", input="next")
    rows = [r for r in fragment_rows(prompt) if r.stored_ids]
    assert len(rows) == 6 and len({r.stored_ids[0][:8] for r in rows}) == 1  # the ids do share their head
    assert len({r.stored_label for r in rows}) == 6
    assert all(r.stored_label.startswith("…") and r.stored_ids[0].endswith(r.stored_label[1:]) for r in rows)
    replay_rows = [r for r in step_rows(prompt) if r.stored_ids]
    assert len({r.stored_label for r in replay_rows}) == 6
    s.close()


def test_short_ids_keep_names_readable():
    from studio.logic.short_ids import short_id

    assert short_id("ada-weekend") == "ada-weekend"
    assert short_id("a-very-long-thread-name") == "a-very-lon…"
    assert short_id("01a24241-7e4b-7126-b608-840c0eded229") == "…0eded229"


def test_a_fragments_table_text_says_observational_memorys_priority_marks_in_words(store):
    """The inspector's and Replay's Text cells showed observational memory's priority emoji as empty boxes
    ("Date: Sep 14, 2026 * □ (15:32) Sam finished …": a table cell has no colour-emoji font); the one-line
    preview says them in words, as the Observations pane's buffer table does. The fragment's text, what
    the model reads, is unchanged."""
    start = starting_point(list_agents(store)[0], "test")
    req = PreviewRequest("t1", "alice", start.base, start.options, "assistant", text="Hi",
                         instructions="* 🔴 (15:32) allergic to peanuts\n* ✅ booked")
    prompt = assemble_preview(store, req, factory(store), EmbedderHolder(no_embedder)).prompt
    (row,) = [r for r in fragment_rows(prompt) if r.source == "instructions"]
    assert row.preview == "* [high] (15:32) allergic to peanuts * [done] booked"
    assert "🔴 (15:32)" in row.text  # (the text itself as the model reads it)
