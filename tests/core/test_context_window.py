"""The model's context window: prompt + reply budget never exceed it; memory is dropped oldest history
first, then recall, then working memory; an input that alone does not fit is refused before sending."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from core import Memory, MemoryOptions, Message
from core.agent import Agent, Tool
from core.context_window import DEFAULT_REPLY_RESERVE, ContextWindowError, PromptBudget
from core.embedding import HashingEmbedder
from core.llm import LoopbackServer, OpenAICompatibleModel, RetryPolicy, ScriptedModel, ScriptedReply, tool_call
from core.traces.tracer import InMemorySpanExporter, Tracer

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
FILL = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor " * 3  # ~40 tokens
WM = "# User\n- Name: Ada\n- Likes: " + "puzzles, chess, hiking, opera, " * 6


@pytest.fixture
def memory(store):
    """A thread of 12 stored messages (history: the last 6; recall: an old zebra message of this thread
    and one of another thread), and working memory."""
    mem = Memory(store, MemoryOptions(last_messages=6, working_memory={"enabled": True},
                                      semantic_recall={"top_k": 2, "message_range": 0, "mode": "keyword"}),
                 embedder=HashingEmbedder(64))
    mem.create_thread(thread_id="t", resource_id="u")
    mem.create_thread(thread_id="other", resource_id="u")
    msgs = []
    for i in range(12):
        text = f"zebra crossings are striped {i}" if i == 0 else f"h{i} {FILL}"
        make = Message.user if i % 2 == 0 else Message.assistant
        msgs.append(make(text, id=f"h{i}", thread_id="t", resource_id="u", created_at=T0 + timedelta(minutes=i)))
    msgs.append(Message.user("a zebra was seen in the zoo", id="o0", thread_id="other", resource_id="u",
                             created_at=T0 - timedelta(days=1)))
    mem.save_messages(msgs)
    mem.update_working_memory(thread_id="t", resource_id="u", working_memory=WM)
    return mem


def preview(memory, budget=None, text="tell me about zebra crossings", options=None):
    return memory.assemble(thread_id="t", resource_id="u", input=text, instructions="Be brief.", budget=budget,
                           options=options, tools=[])


def sources(prompt) -> list[str]:
    """Where the prompt's messages came from (tool definitions aside: the update tool stays)."""
    return [f.source for f in prompt.fragments if f.kind != "tools"]


def test_everything_fits_in_a_large_window(memory):
    full = preview(memory)
    fitted = preview(memory, PromptBudget.for_model(100_000, max_tokens=None, model_id="m"))
    assert fitted.messages == full.messages and "context-window" not in fitted.skipped
    assert fitted.context_window == 100_000
    assert fitted.notes["context-window"] == {"dropped": {}, "droppedTokens": {}, "contextWindow": 100_000,
                                              "replyTokens": DEFAULT_REPLY_RESERVE}


def test_memory_is_dropped_history_first_then_recall_then_working_memory(memory):
    full = preview(memory)
    by = {src: sum(f.tokens for f in full.fragments if f.source == src and f.kind != "tools")
          for src in ("message-history", "semantic-recall", "working-memory")}
    assert by["message-history"] and by["semantic-recall"] and by["working-memory"]
    fixed = full.total_tokens - by["message-history"] - by["semantic-recall"] - by["working-memory"]

    def fit(prompt_room: int):
        return preview(memory, PromptBudget(prompt_room + 100, 100, "scripted/x"))

    # Room for all but a little history: only the oldest history goes.
    some = fit(full.total_tokens - 10)
    kept = [f.stored_ids[0] for f in some.fragments_from("message-history")]
    assert kept == ["h7", "h8", "h9", "h10", "h11"] and some.total_tokens + 100 <= some.context_window
    assert "semantic-recall" in sources(some) and "working-memory" in sources(some)
    assert some.skipped["context-window"].startswith("dropped to fit scripted/x's")
    assert "history: the oldest 1 message" in some.skipped["context-window"]
    # Room for recall but no history.
    no_history = fit(fixed + by["semantic-recall"] + by["working-memory"])
    assert no_history.fragments_from("message-history") == [] and "semantic-recall" in sources(no_history)
    # Less: recall goes too (same-thread messages before the other-threads block), working memory stays.
    no_recall = fit(fixed + by["working-memory"])
    assert "semantic-recall" not in sources(no_recall) and "working-memory" in sources(no_recall)
    reason = no_recall.skipped["context-window"]
    assert reason.index("history:") < reason.index("recall:") and "working memory" not in reason
    # Less still: working memory goes last.
    bare = fit(fixed)
    assert not {"message-history", "semantic-recall", "working-memory"} & set(sources(bare))
    assert "working memory: the system message" in bare.skipped["context-window"]
    assert bare.messages[-1] == {"role": "user", "content": "tell me about zebra crossings"}
    assert bare.notes["context-window"]["dropped"]["history"][0] == "h6"


def test_an_input_that_alone_does_not_fit_is_refused_before_any_request(memory, store):
    model = ScriptedModel(["never"], context_window=600)
    agent = Agent("a", instructions="Be brief.", model=model, memory=memory)
    with pytest.raises(ContextWindowError) as caught:
        agent.generate(FILL * 20, memory={"resource": "u", "thread": "t"})
    error = caught.value
    assert model.requests == []
    assert "with every memory message already dropped" in str(error) and "scripted/demo's 600-token" in str(error)
    assert "Nothing was sent" in str(error) and "input " in str(error)
    assert error.context_window == 600 and error.prompt_tokens + error.reply_tokens > 600
    assert store.memory.count_messages("t") == 12  # nothing saved


def test_the_agent_keeps_the_reply_budget_free(memory):
    window = 600
    for settings, reply in (({"max_tokens": 300}, 300), (None, min(DEFAULT_REPLY_RESERVE, window // 4))):
        model = ScriptedModel(["ok"], context_window=window)
        result = Agent("a", instructions="Be brief.", model=model, memory=memory).generate(
            "zebra?", memory={"resource": "u", "thread": "t", "options": {"read_only": True}},
            model_settings=settings)
        prompt = result.prompts[0]
        assert model.requests[0].messages == prompt.messages
        slack = window // 10  # kept for the server's tokenizer counting more than o200k_base
        assert prompt.total_tokens + reply + slack <= window < preview(memory, text="zebra?").total_tokens + reply
        assert prompt.notes["context-window"]["replyTokens"] == reply
        assert f"{slack} for tokenizer differences" in prompt.skipped["context-window"]
        assert "context-window" in prompt.skipped


def test_max_tokens_as_large_as_the_window_is_refused(memory):
    agent = Agent("a", instructions="I", model=ScriptedModel(["ok"], context_window=512), memory=memory)
    with pytest.raises(ContextWindowError, match="max_tokens 512 leaves no room"):
        agent.generate("hi", memory={"resource": "u", "thread": "t"}, model_settings={"max_tokens": 512})


def test_a_growing_tool_loop_is_refitted_each_step(memory, store):
    big = {"rows": [FILL] * 6}
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("fetch", {}),)), "done"], context_window=1200)
    agent = Agent("a", instructions="Be brief.", model=model, memory=memory,
                  tools=[Tool("fetch", "Fetch rows", lambda args, ctx: big)])
    result = agent.generate("zebra?", memory={"resource": "u", "thread": "t"}, model_settings={"max_tokens": 200})
    first, second = result.prompts
    assert second.total_tokens + 200 <= 1200 and first.total_tokens + 200 <= 1200
    assert len(second.fragments_from("message-history")) < len(first.fragments_from("message-history"))
    assert second.notes["context-window"]["droppedTokens"]["history"] > \
        first.notes["context-window"].get("droppedTokens", {}).get("history", 0)
    assert model.requests[1].messages == second.messages
    assert store.memory.count_messages("t") == 14  # the turn saved whole


def test_a_tool_loop_that_outgrows_the_window_fails_whole(memory, store):
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("fetch", {}),)), "done"], context_window=1200)
    agent = Agent("a", instructions="Be brief.", model=model, memory=memory,
                  tools=[Tool("fetch", "Fetch rows", lambda args, ctx: {"rows": [FILL] * 40})])
    with pytest.raises(ContextWindowError, match="this turn's replies and tool results"):
        agent.generate("zebra?", memory={"resource": "u", "thread": "t"}, model_settings={"max_tokens": 200})
    assert len(model.requests) == 1 and store.memory.count_messages("t") == 12


def test_an_agent_without_memory_is_fitted_too():
    agent = Agent("a", instructions="Be brief.", model=ScriptedModel(["ok"], context_window=300))
    assert agent.generate("hello").text == "ok"
    with pytest.raises(ContextWindowError):
        agent.generate(FILL * 10)


def test_the_trace_and_the_preview_agree(memory):
    tracer = Tracer(InMemorySpanExporter())
    model = ScriptedModel(["ok"], context_window=500)
    agent = Agent("a", instructions="Be brief.", model=model, memory=memory, tracer=tracer)
    result = agent.generate("zebra?", memory={"resource": "u", "thread": "t", "options": {"read_only": True}})
    budget = PromptBudget.for_model(500, max_tokens=None, model_id=model.model_id)
    assert preview(memory, budget, text="zebra?", options={"read_only": True}).messages == result.prompts[0].messages
    (gen,) = [s for s in tracer.exporter.spans if s.span_type == "model_generation"]
    assert gen.attributes["contextWindow"] == 500
    (recall,) = [s for s in tracer.exporter.spans if s.name == "memory: recall"]
    assert "context-window" in recall.output["skipped"]


def test_a_real_client_with_a_window_sends_nothing_too_big(memory):
    with LoopbackServer(["ok"]) as server:
        model = OpenAICompatibleModel("loopback-chat", base_url=server.base_url, environ={}, keyring_service=None,
                                      retry=RetryPolicy(max_retries=0), context_window=400)
        agent = Agent("a", instructions="Be brief.", model=model, memory=memory)
        with pytest.raises(ContextWindowError):
            agent.generate(FILL * 12, memory={"resource": "u", "thread": "t"})
        assert server.chat_requests() == []
        agent.generate("zebra?", memory={"resource": "u", "thread": "t"})
        (body,) = server.chat_requests()
        assert len(body["messages"]) < len(preview(memory, text="zebra?").messages)
        model.close()


def test_a_refitted_tool_loop_rebuilds_exactly_from_its_record(memory, store):
    """Issue 16: the record keeps the window the prompts were fitted into, so both calls of a turn whose
    second call dropped history to fit rebuild to exactly what the model received."""
    big = {"rows": [FILL] * 6}
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("fetch", {}),)), "done"], context_window=1200)
    agent = Agent("a", instructions="Be brief.", model=model, memory=memory,
                  tools=[Tool("fetch", "Fetch rows", lambda args, ctx: big)])
    result = agent.generate("zebra?", memory={"resource": "u", "thread": "t"}, model_settings={"max_tokens": 200})
    first, second = result.prompts
    assert len(second.fragments_from("message-history")) < len(first.fragments_from("message-history"))
    fresh = Memory(store)
    turn = fresh.turns("t")[-1]
    bodies = fresh.turn_requests(turn.input_message_id)
    assert [b["messages"] for b in bodies] == [r.messages for r in model.requests]
    assert [b["tools"] for b in bodies] == [r.tools for r in model.requests]
    assert all(b["max_tokens"] == 200 for b in bodies)
    assert fresh.assemble(as_of=turn.input_message_id).replay.exact
