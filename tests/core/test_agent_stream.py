"""``Agent.stream``: events as they arrive, the turn saved once when it completes (never when it fails or
is abandoned), the same trace as ``generate``, tool loops, and real SSE from the loopback server."""

from __future__ import annotations

import gc
import json
import re

import pytest

from core import Memory, MemoryOptions, ThreadOwnershipError, open_store
from core.agent import Agent, AgentError, Tool
from core.agent_stream import AgentStream, StreamEvent
from core.llm import LoopbackServer, ModelError, OpenAICompatibleModel, RetryPolicy, ScriptedModel, ScriptedReply
from core.llm import tool_call
from core.traces.tracer import InMemorySpanExporter, Tracer, current_span

TEMPLATE = "# User\n- Name:\n"
LOOKUP = Tool("lookup", "Look a word up", lambda args, ctx: {"meaning": "a small dog"},
              {"type": "object", "properties": {"word": {"type": "string"}}})
THREAD = {"resource": "u", "thread": "t"}


def tool_script() -> list:
    return [
        ScriptedReply(text="Let me check.", tool_calls=(tool_call("lookup", {"word": "pug"}, id="c1"),
                                                         tool_call("updateWorkingMemory",
                                                                   {"memory": "# User\n- Name: Ada\n"}, id="c2"))),
        "A pug is a small dog, Ada.",
    ]


@pytest.fixture
def tracer():
    return Tracer(InMemorySpanExporter())


@pytest.fixture
def memory(store, tracer):
    return Memory(store, MemoryOptions(last_messages=6, working_memory={"enabled": True, "template": TEMPLATE}),
                  tracer=tracer)


def stored(store) -> list[str]:
    return [m.text for m in store.memory.list_messages_page("t", 0, 100)]


def test_text_arrives_in_pieces_and_the_turn_is_saved_once(memory, store):
    model = ScriptedModel(["Hello there, this reply comes in pieces."])
    stream = Agent("a", instructions="I", model=model, memory=memory).stream("hi", memory=THREAD)
    assert isinstance(stream, AgentStream) and model.requests == []  # nothing runs before iteration
    events = []
    for event in stream:
        events.append(event)
        if event.kind == "text-delta":
            assert stored(store) == []  # not saved while the reply is still arriving
    deltas = [e.text for e in events if e.kind == "text-delta"]
    assert len(deltas) == 3 and "".join(deltas) == "Hello there, this reply comes in pieces."
    assert [e.kind for e in events][-1] == "finish"
    result = stream.result
    assert events[-1].result is result and result.text == "".join(deltas) and result.finish_reason == "stop"
    assert stored(store) == ["hi", "Hello there, this reply comes in pieces."]
    assert [m.text for m in result.saved] == stored(store)
    assert model.requests[0].stream is True
    assert list(stream) == []  # a finished stream stays finished


def test_tool_loop_while_streaming(memory, store):
    model = ScriptedModel(tool_script())
    agent = Agent("a", instructions="I", model=model, memory=memory, tools=[LOOKUP])
    events = list(agent.stream("what is a pug? I'm Ada", memory=THREAD))
    kinds = [e.kind for e in events]
    assert kinds == ["text-delta"] * 3 + ["tool-call", "tool-result", "tool-call", "tool-result"] + \
        ["text-delta"] * 3 + ["finish"]
    call, result = events[3], events[4]
    assert (call.tool_name, call.tool_call_id, call.args) == ("lookup", "c1", {"word": "pug"})
    assert result.output == {"meaning": "a small dog"} and result.tool_call_id == "c1"
    assert events[6].output["success"] is True
    assert memory.get_working_memory(resource_id="u") == "# User\n- Name: Ada\n"
    assert stored(store) == ["what is a pug? I'm Ada", "Let me check. A pug is a small dog, Ada."]
    # The second model call carried the tool results.
    sent = model.requests[1].messages
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == ["c1", "c2"]


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # message ids differ per run


def span_tree(spans) -> list[tuple]:
    by_id = {s.span_id: s for s in spans}
    return sorted((s.name, s.span_type, by_id[s.parent_span_id].name if s.parent_span_id else None,
                   _UUID.sub("<id>", json.dumps(s.attributes, sort_keys=True, default=str)),
                   _UUID.sub("<id>", json.dumps(s.output, sort_keys=True, default=str)),
                   s.error is not None) for s in spans)


def test_the_trace_is_the_same_as_generates(tmp_path):
    trees = []
    for mode in ("generate", "stream"):
        tracer = Tracer(InMemorySpanExporter())
        store = open_store(tmp_path / mode / "memory.db")  # the same starting point for both
        mem = Memory(store, MemoryOptions(last_messages=6, working_memory={"enabled": True, "template": TEMPLATE}),
                     tracer=tracer)
        agent = Agent("a", instructions="I", model=ScriptedModel(tool_script()), memory=mem, tools=[LOOKUP],
                      model_settings={"max_tokens": 50})
        if mode == "generate":
            result = agent.generate("what is a pug? I'm Ada", memory=THREAD)
        else:
            result = agent.stream("what is a pug? I'm Ada", memory=THREAD).collect()
        store.close()
        assert result.trace_id and {s.trace_id for s in tracer.exporter.spans} == {result.trace_id}
        trees.append(span_tree(tracer.exporter.spans))
    generated, streamed = trees
    assert streamed == generated
    assert [t[0] for t in generated].count("llm: 'scripted/demo'") == 2


def test_a_failed_turn_saves_nothing(memory, store):
    model = ScriptedModel([ModelError("server fell over", model_id="scripted/demo")])
    stream = Agent("a", instructions="I", model=model, memory=memory).stream("hi", memory=THREAD)
    with pytest.raises(ModelError, match="server fell over"):
        list(stream)
    assert stored(store) == [] and not stream.completed
    with pytest.raises(AgentError, match="has not finished"):
        stream.result


def test_errors_surface_from_the_iteration(memory):
    memory.create_thread(thread_id="t", resource_id="owner")
    stream = Agent("a", instructions="I", model=ScriptedModel(["x"]), memory=memory).stream("hi", memory=THREAD)
    with pytest.raises(ThreadOwnershipError):
        next(stream)


def test_stopping_early_saves_nothing_and_close_is_safe(memory, store, tracer):
    model = ScriptedModel(["one two three four five six"] * 3)
    agent = Agent("a", instructions="I", model=model, memory=memory)
    stream = agent.stream("hi", memory=THREAD)
    first = next(stream)
    assert first == StreamEvent("text-delta", text=first.text) and first.text
    stream.close()
    stream.close()  # twice is fine
    assert list(stream) == [] and stored(store) == []
    (run,) = [s for s in tracer.exporter.spans if s.span_type == "agent_run"]
    assert "closed before the turn completed" in run.error["message"]
    (gen,) = [s for s in tracer.exporter.spans if s.span_type == "model_generation"]
    assert "closed while the model was replying" in gen.error["message"]
    # Leaving a with block, and dropping a half-read stream, abandon the turn the same way.
    with agent.stream("again", memory=THREAD) as second:
        next(second)
    third = agent.stream("and again", memory=THREAD)
    next(third)
    del third
    gc.collect()
    assert stored(store) == []
    assert all(s.ended_at is not None for s in tracer.exporter.spans)


def test_stopping_after_a_tool_ran_saves_nothing_of_the_turn_not_even_working_memory(memory, store):
    stream = Agent("a", instructions="I", model=ScriptedModel(tool_script()), memory=memory,
                   tools=[LOOKUP]).stream("I'm Ada", memory=THREAD)
    for event in stream:
        if event.kind == "tool-result" and event.tool_name == "updateWorkingMemory":
            break
    stream.close()
    assert stored(store) == []
    # The working-memory update was staged with the turn (issue 9 item 8): a turn that is not saved
    # leaves working memory as it was.
    assert memory.get_working_memory(resource_id="u") is None


def test_the_turns_span_never_leaks_into_the_consumer(memory):
    stream = Agent("a", instructions="I", model=ScriptedModel(["a b c d e f"]), memory=memory).stream(
        "hi", memory=THREAD)
    seen = [current_span() for _ in stream]
    assert seen and all(span is None for span in seen)


def test_text_stream_gives_only_the_text(memory):
    stream = Agent("a", instructions="I", model=ScriptedModel(["abcdefghi"]), memory=memory).stream(
        "hi", memory=THREAD)
    assert "".join(stream.text_stream()) == "abcdefghi" and stream.result.text == "abcdefghi"


def test_real_sse_from_the_loopback_server(memory, store):
    script = ScriptedModel(tool_script(), name="loopback")
    with LoopbackServer(script) as server:
        model = OpenAICompatibleModel("loopback-chat", base_url=server.base_url, environ={}, keyring_service=None,
                                      retry=RetryPolicy(max_retries=0))
        agent = Agent("a", instructions="I", model=model, memory=memory, tools=[LOOKUP],
                      model_settings={"max_tokens": 40, "seed": 1})
        events = list(agent.stream("what is a pug? I'm Ada", memory=THREAD, tool_choice="required"))
        bodies = server.chat_requests()
        model.close()
    assert all(b["stream"] is True and b["max_tokens"] == 40 and b["seed"] == 1 for b in bodies)
    assert [b.get("tool_choice") for b in bodies] == ["required", "auto"]
    deltas = [e.text for e in events if e.kind == "text-delta"]
    assert len(deltas) == 6 and "".join(deltas) == "Let me check.A pug is a small dog, Ada."
    calls = [(e.tool_name, e.args) for e in events if e.kind == "tool-call"]
    assert calls == [("lookup", {"word": "pug"}), ("updateWorkingMemory", {"memory": "# User\n- Name: Ada\n"})]
    assert events[-1].kind == "finish" and events[-1].usage.total_tokens > 0
    assert stored(store) == ["what is a pug? I'm Ada", "Let me check. A pug is a small dog, Ada."]


def test_abandoning_a_real_http_stream_saves_nothing(memory, store):
    with LoopbackServer(["many words arrive one piece after another here"]) as server:
        model = OpenAICompatibleModel("loopback-chat", base_url=server.base_url, environ={}, keyring_service=None,
                                      retry=RetryPolicy(max_retries=0))
        with Agent("a", instructions="I", model=model, memory=memory).stream("hi", memory=THREAD) as stream:
            assert next(stream).kind == "text-delta"
        model.close()
    assert stored(store) == []
