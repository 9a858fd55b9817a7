"""History with a token budget: ``MemoryOptions(message_history={"max_tokens", "at_max_remove_tokens"})``,
Mastra's ``messageHistory`` and its ``memory-token-limiter``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from core import Memory, MemoryOptions, Message, MessageHistoryOptions, OptionsError
from core.agent import Agent
from core.llm import ScriptedModel
from core.processors import MemoryTokenLimiter
from core.traces.tracer import InMemorySpanExporter, Tracer

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=timezone.utc)
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa " * 2  # ~20 tokens


def seed(store, n: int = 60, thread: str = "t", resource: str = "u") -> list[Message]:
    store.memory.create_thread(thread_id=thread, resource_id=resource)
    msgs = [(Message.user if i % 2 == 0 else Message.assistant)(f"m{i} {WORDS}", thread_id=thread,
                                                              resource_id=resource, id=f"m{i}",
                                                              created_at=T0 + timedelta(minutes=i))
            for i in range(n)]
    store.memory.save_messages(msgs)
    return msgs


def history_ids(prompt) -> list[str]:
    return [f.stored_ids[0] for f in prompt.fragments if f.kind == "memory" and f.role != "system"]


# -- options ---------------------------------------------------------------------------------------

def test_a_token_budget_alone_lifts_the_default_count_cap():
    opts = MemoryOptions(message_history={"max_tokens": 1000})
    assert opts.last_messages is None and opts.message_history.limit is None
    assert opts.message_history.max_tokens == 1000 and opts.message_history.remove_tokens == 250  # Mastra: 25%
    assert opts.history_enabled
    both = MemoryOptions(last_messages=4, message_history={"maxTokens": 100, "atMaxRemoveTokens": 10})
    assert both.message_history == MessageHistoryOptions(last_messages=4, max_tokens=100, at_max_remove_tokens=10)
    assert MemoryOptions().last_messages == 10 and MemoryOptions().message_history.max_tokens is None
    assert not MemoryOptions(message_history={"max_tokens": 0}).history_enabled  # 0 turns history off


def test_budget_round_trips_and_merges_per_call():
    opts = MemoryOptions(message_history={"max_tokens": 1000})
    assert opts.to_dict()["message_history"] == {"max_tokens": 1000, "at_max_remove_tokens": None}
    assert MemoryOptions(**opts.to_dict()) == opts
    # A per-call budget over a memory with the default count keeps that count (Mastra's rule).
    per_call = MemoryOptions().merged({"message_history": {"max_tokens": 50}})
    assert per_call.last_messages == 10 and per_call.message_history.max_tokens == 50
    # A smaller per-call budget does not trip over the memory's default trim size.
    assert opts.merged({"message_history": {"max_tokens": 40}}).message_history.remove_tokens == 10
    assert opts.merged({"message_history": None}).last_messages == 10


@pytest.mark.parametrize("bad, words", [
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_tokens": 10, "at_max_remove_tokens": 11}, "must not exceed"),
    ({"at_max_remove_tokens": 5}, "needs max_tokens"),
    ({"max_tokens": 1.5}, "max_tokens"),
    ({"max_tokens": 10, "lastMessages": 3}, "Set last_messages"),
    ({"budget": 10}, "Unknown message_history option"),
    ("4000", "must be a dict"),
])
def test_bad_budgets_are_refused_with_what_to_do(bad, words):
    with pytest.raises(OptionsError, match=words):
        MemoryOptions(message_history=bad)


# -- the limiter -----------------------------------------------------------------------------------

def test_over_budget_drops_the_oldest_memory_never_the_input(store):
    seed(store)
    mem = Memory(store, MemoryOptions(message_history={"max_tokens": 300, "at_max_remove_tokens": 100}))
    big_input = "please summarise " + WORDS * 3
    prompt = mem.assemble(thread_id="t", resource_id="u", input=big_input, instructions="Be brief.")
    assert prompt.processors[-1] == "memory-token-limiter"
    kept = history_ids(prompt)
    assert kept and kept == [f"m{i}" for i in range(60 - len(kept), 60)]  # the newest, in order
    assert prompt.messages[-1] == {"role": "user", "content": big_input}
    assert prompt.total_tokens <= 200  # trimmed to max_tokens - at_max_remove_tokens
    reason = prompt.skipped["memory-token-limiter"]
    assert "over the 300-token history budget" in reason and "oldest memory message" in reason
    note = prompt.notes["memory-token-limiter"]
    assert note["tokensBefore"] > 300 and note["tokens"] == prompt.total_tokens and note["targetTokens"] == 200
    assert "m59" not in note["dropped"] and note["dropped"][-1] == f"m{59 - len(kept)}"


def test_within_budget_nothing_is_dropped_and_the_record_says_so(store):
    seed(store, n=4)
    mem = Memory(store, MemoryOptions(message_history={"max_tokens": 5000}))
    prompt = mem.assemble(thread_id="t", resource_id="u", input="hi")
    assert history_ids(prompt) == ["m0", "m1", "m2", "m3"]
    assert prompt.skipped["memory-token-limiter"].startswith("within the 5,000-token history budget")


def test_an_input_over_the_budget_goes_out_whole(store):
    seed(store, n=6)
    mem = Memory(store, MemoryOptions(message_history={"max_tokens": 20}))
    huge = WORDS * 10
    prompt = mem.assemble(thread_id="t", resource_id="u", input=huge)
    assert history_ids(prompt) == [] and prompt.messages[-1]["content"] == huge
    assert "alone exceed the budget" in prompt.skipped["memory-token-limiter"]


def test_loading_by_tokens_is_the_same_as_loading_everything(store):
    """With no count cap history is read page by page only until it passes the budget; the prompt is
    the one a memory that loaded every message would build."""
    seed(store, n=150)
    paged = Memory(store, MemoryOptions(message_history={"max_tokens": 700})).assemble(
        thread_id="t", resource_id="u", input="what next?")
    everything = Memory(store, MemoryOptions(last_messages=10_000, message_history={"max_tokens": 700})).assemble(
        thread_id="t", resource_id="u", input="what next?")
    assert paged.messages == everything.messages
    assert paged.notes["message-history"]["loaded"] < 60  # it did not read the whole thread
    assert everything.notes["message-history"]["loaded"] == 150


def test_a_count_cap_and_a_budget_both_apply(store):
    seed(store, n=30)
    prompt = Memory(store, MemoryOptions(last_messages=3, message_history={"max_tokens": 10_000})).assemble(
        thread_id="t", resource_id="u", input="hi")
    assert history_ids(prompt) == ["m27", "m28", "m29"]


def test_a_stored_turn_rebuilds_with_the_same_trim(store):
    seed(store, n=40)
    mem = Memory(store, MemoryOptions(message_history={"max_tokens": 300}))
    live = mem.assemble(thread_id="t", resource_id="u", input=Message.user(f"m40 {WORDS}", id="m40"))
    store.memory.save_messages([Message.user(f"m40 {WORDS}", id="m40", thread_id="t", resource_id="u",
                                             created_at=T0 + timedelta(minutes=40))])
    rebuilt = mem.assemble(thread_id="t", resource_id="u", as_of="m40")
    assert history_ids(rebuilt) == history_ids(live)


def test_a_user_limiter_replaces_the_built_in_one(store):
    seed(store, n=10)
    mine = MemoryTokenLimiter(MessageHistoryOptions(last_messages=None, max_tokens=60, at_max_remove_tokens=0))
    mem = Memory(store, MemoryOptions(message_history={"max_tokens": 100_000}), processors=[mine])
    prompt = mem.assemble(thread_id="t", resource_id="u", input="hi")
    assert prompt.processors.count("memory-token-limiter") == 1
    assert prompt.total_tokens <= 60


def test_an_agent_turn_sends_the_trimmed_prompt_and_traces_why(store):
    seed(store, n=40)
    tracer = Tracer(InMemorySpanExporter())
    mem = Memory(store, MemoryOptions(message_history={"max_tokens": 250}), tracer=tracer)
    model = ScriptedModel(["ok"])
    result = Agent("a", instructions="Be brief.", model=model, memory=mem).generate(
        "and now?", memory={"resource": "u", "thread": "t"})
    sent = model.requests[0].messages
    assert sent == result.prompts[0].messages and len(sent) < 20
    assert "memory-token-limiter" in result.prompts[0].skipped
    (span,) = [s for s in tracer.exporter.spans if s.name == "processor: memory-token-limiter (input)"]
    assert "over the 250-token history budget" in span.attributes["skipped"]
    # Trimming changes the prompt, never what is stored.
    assert store.memory.count_messages("t") == 42
