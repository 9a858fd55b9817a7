"""The observer's and the reflector's model calls as their spans show them (the Studio's Traces pane):
the messages sent, and the settings sent with them (temperature, the reply cap) and the hash of the whole
body, each equal to what the server received. Before, such a span kept the messages only, so the
Traces pane showed the observer's call without its temperature and reply cap (found by
``bench/llm_requests.py`` against llama.cpp)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core import Memory, MemoryOptions, Message, open_store
from core.llm import LoopbackServer, OpenAICompatibleModel, RetryPolicy, ScriptedModel
from core.replay.record import request_hash
from core.tokens import default_tokenizer
from core.traces.tracer import InMemorySpanExporter, Tracer

OBSERVED = """<observations>
Date: Jan 2, 2025
* 🔴 (09:00) User is planning a garden with raised beds [garden].
* 🟡 (09:01) Assistant suggested cedar planks for the beds.
</observations>
"""
REFLECTED = """<observations>
Date: Jan 2, 2025
* 🔴 (09:00) User plans raised garden beds of cedar.
</observations>
"""


def replies(messages: list[dict[str, Any]], _tools: Any) -> str:
    return REFLECTED if "reflect" in json.dumps(messages[:1]).lower() else OBSERVED


def _turn(memory: Memory, text: str, reply: str) -> None:
    ctx = memory.new_context(memory.request_context(thread_id="t1", resource_id="u1"))
    ctx.live = True
    memory.prepare_input(ctx, input=text, instructions="You help with gardens.")
    memory.run_input(ctx)
    ctx.messages.add(Message.assistant(reply), "response")
    ctx.finish_reason = "stop"
    memory.run_output(ctx)


def test_observer_and_reflector_spans_carry_the_settings_and_hash_the_server_received(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    with LoopbackServer(ScriptedModel(replies, name="server")) as server:
        model = OpenAICompatibleModel("om-model", base_url=server.base_url, api_key="k", api_key_env=None,
                                      keyring_service=None, retry=RetryPolicy(max_retries=0))
        store = open_store(tmp_path / "m.db")
        try:
            memory = Memory(store, MemoryOptions(last_messages=10, observational_memory={
                "enabled": True, "message_tokens": 60, "observation_tokens": 20, "buffer_tokens": False,
                "max_output_tokens": 300, "observer_temperature": 0.4}),
                observer_model=model, tokenizer=default_tokenizer(), tracer=Tracer(exporter))
            for i in range(4):
                _turn(memory, f"Tell me about raised garden beds, part {i}. " * 6, "Cedar lasts long. " * 6)
            received = server.chat_requests()
        finally:
            store.close()
            model.close()
    spans = [s for s in exporter.spans if s.span_type == "model_generation"]
    roles = [str(s.attributes.get("role")) for s in spans]
    assert "observer" in roles and any(r.startswith("reflector") for r in roles), roles
    assert len(spans) == len(received)
    for span, body in zip(spans, received):
        # The span's messages are the body's; its settings and hash are the body's too.
        assert span.input == {"messages": body["messages"]}
        settings = {k: v for k, v in body.items() if k not in ("model", "messages")}
        assert settings and settings["max_tokens"] == 300
        assert span.attributes["modelSettings"] == settings
        assert span.attributes["requestHash"] == request_hash(body)
    observer = spans[roles.index("observer")]
    assert observer.attributes["modelSettings"] == {"max_tokens": 300, "temperature": 0.4}


def test_the_title_models_call_has_a_model_span_with_what_the_server_received(tmp_path: Path) -> None:
    """A generated title's call was traced only as a memory operation with the title it gave: its messages,
    settings, usage and reply were shown nowhere (found 2026-12-06 running a real model server: the one
    model call of ours the Traces pane did not show). It has its own model span now, as the observer's."""
    from core.agent import Agent

    exporter = InMemorySpanExporter()
    with LoopbackServer(ScriptedModel(lambda m, t: "Raised Garden Beds", name="server")) as server:
        titler = OpenAICompatibleModel("title-model", base_url=server.base_url, api_key="k", api_key_env=None,
                                       keyring_service=None, retry=RetryPolicy(max_retries=0))
        store = open_store(tmp_path / "m.db")
        try:
            memory = Memory(store, MemoryOptions(generate_title={"model": titler}), tracer=Tracer(exporter))
            agent = Agent("gardener", instructions="Help.", model=ScriptedModel(["Cedar lasts."]), memory=memory,
                          tracer=Tracer(exporter))
            agent.generate("How do I build raised garden beds?", memory={"resource": "u1", "thread": "t1"})
            assert memory.wait_idle(30)
            assert memory.get_thread("t1").title == "Raised Garden Beds"
            received = server.chat_requests()
        finally:
            store.close()
            titler.close()
    [body] = received
    [span] = [s for s in exporter.spans if s.span_type == "model_generation" and s.attributes.get("role") == "title"]
    assert span.input == {"messages": body["messages"]} and span.output == "Raised Garden Beds"
    assert span.attributes["model"] == titler.model_id == "openai-compatible/title-model"
    assert span.attributes["modelSettings"] == {k: v for k, v in body.items() if k not in ("model", "messages")}
    assert span.attributes["modelSettings"] == {"temperature": 0.3, "max_tokens": 32}
    assert span.attributes["requestHash"] == request_hash(body) and span.attributes["finishReason"] == "stop"
    # It sits under the memory operation that wrote the title, in the trace of the turn that asked for it.
    [operation] = [s for s in exporter.spans if s.name == "memory: generate title"]
    assert span.parent_span_id == operation.span_id and span.trace_id == operation.trace_id
