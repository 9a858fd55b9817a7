"""Replay of OpenAI Agents SDK turns: what each model call actually sent, kept as the turn's record.

A real SDK ``Runner`` runs against the loopback OpenAI server (which keeps every request body); the
turn's Replay, the Studio's request view of each call and an exported-then-imported copy all show
those bodies, and say "exact" only for what the record knows.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any, Iterator

import pytest

agents = pytest.importorskip("agents")
from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, RunConfig, Runner,  # noqa: E402
                    function_tool, set_trace_processors)
from openai import AsyncOpenAI  # noqa: E402

from core import Memory, MemoryOptions, open_store  # noqa: E402
from core.embedding.hashing import HashingEmbedder  # noqa: E402
from core.integrations.openai_agents import MemorySession, trace_processor  # noqa: E402
from core.llm.loopback import LoopbackServer  # noqa: E402
from core.prompt import AssembledPrompt  # noqa: E402
from core.replay.record import request_hash  # noqa: E402
from core.replay.frozen import ReplaySource  # noqa: E402
from core.replay.turns import list_turns  # noqa: E402
from core.transfer.export import export_thread  # noqa: E402
from core.transfer.importer import import_data  # noqa: E402
from studio.logic.replay_layout import compare  # noqa: E402
from studio.logic.request_layout import PARTIAL, call_view  # noqa: E402
from studio.replay_jobs import ReplayThread  # noqa: E402

TEMPLATE = "# Traveller\n- Name:\n"


@pytest.fixture()
def only_our_traces() -> Iterator[None]:
    # The SDK's default processor would export to OpenAI's backend; tests are offline.
    set_trace_processors([trace_processor()])
    yield
    set_trace_processors([trace_processor()])


@pytest.fixture()
def memory(tmp_path: Path) -> Iterator[Memory]:
    store = open_store(tmp_path / "memory.db")
    options = MemoryOptions(last_messages=10, working_memory={"enabled": True, "template": TEMPLATE})
    yield Memory(store, options, embedder=HashingEmbedder(), name="guide")
    store.close()


@function_tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


def _agent(session: MemorySession, client: AsyncOpenAI, **kw: Any) -> Agent[Any]:
    return Agent(name="guide", instructions="You are a terse travel guide.",
                 model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client),
                 tools=[weather, *session.tools()],
                 model_settings=ModelSettings(temperature=0.2, max_tokens=200, parallel_tool_calls=False), **kw)


def _sent(body: dict[str, Any]) -> dict[str, Any]:
    """A body as the server received it, without the keys that say how the reply travels."""
    return {k: v for k, v in body.items() if k not in ("stream", "stream_options")}


def _replay(memory: Memory, thread: str, nth: int) -> AssembledPrompt:
    inputs = [m for m in memory.recall(thread_id=thread, resource_id="ada", per_page=False).messages
              if m.role == "user"]
    return memory.assemble(thread_id=thread, resource_id="ada", as_of=inputs[nth].id)


def test_a_turn_with_a_tool_call_replays_exactly_the_two_bodies_the_server_received(
        memory: Memory, only_our_traces: None, tmp_path: Path) -> None:
    script: list[Any] = [
        {"tool_calls": [{"name": "weather", "id": "call_1", "arguments": {"city": "Lisbon"}}]},
        {"text": "Sunny in Lisbon."},
    ]
    with LoopbackServer(script) as server:
        session = MemorySession("trip", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        result = asyncio.run(Runner.run(_agent(session, client), "Weather in Lisbon?", session=session,
                                        run_config=session.run_config()))
        sent = server.chat_requests()
    assert result.final_output == "Sunny in Lisbon." and len(sent) == 2
    assert sent[0]["tools"] and sent[0]["temperature"] == 0.2  # the body has tools and settings to keep

    prompt = _replay(memory, "trip", 0)
    info = prompt.replay
    assert info is not None and info.status == "recorded (exact)" and info.exact and not info.unknowns
    # Each call's body is the one the server received, whole: messages, tools, tool choice, settings.
    assert [c.request for c in info.calls] == [_sent(b) for b in sent]
    assert all(c.matches for c in info.calls)
    assert [c.prompt.messages for c in info.calls] == [b["messages"] for b in sent]
    assert prompt.messages == sent[0]["messages"] and prompt.tools == sent[0]["tools"]
    assert info.record is not None and info.record.transport == {}  # the replies came whole
    assert [c.usage is not None for c in info.calls] == [True, True]  # as the server reported it

    # The turn is keyed to its stored messages: its input, the tool call and result, and the reply.
    stored = memory.recall(thread_id="trip", resource_id="ada", per_page=False).messages
    (turn,) = list_turns(memory.store, "trip")
    assert turn.record is not None and turn.input_message_id == stored[0].id
    assert set(turn.response_ids) == {m.id for m in stored[1:]}

    # The Studio's request view of each call shows that body, and calls it exact.
    for k, body in enumerate(sent):
        view = call_view(prompt, memory.tokenizer, k)
        assert view.request == _sent(body) and view.status == "the whole request matches the record (exact)"
        assert [t.name for t in view.tools] == [t["function"]["name"] for t in body["tools"]]

    # The Studio's Replay pane steps to the turn: each call's request is the body the server received.
    thread = memory.get_thread("trip")
    assert thread is not None
    rows = ReplaySource(memory.store).preload("trip")
    pane = ReplayThread(memory.store, memory, thread, list_turns(memory.store, "trip", rows), "guide", rows=rows)
    step = pane.step(0)
    assert step.received.replay is not None and step.received.replay.status == "recorded (exact)"
    assert [r.request for r in step.requests] == [_sent(b) for b in sent]

    # Export and import: the copy replays the same bodies, exactly.
    data = export_thread(memory.store, "trip")
    other = open_store(tmp_path / "copy.db")
    try:
        import_data(other, data)
        copy = Memory(other, memory.options, embedder=HashingEmbedder(), name="guide")
        again = _replay(copy, "trip", 0).replay
        assert again is not None and again.exact and [c.request for c in again.calls] == [_sent(b) for b in sent]
    finally:
        other.close()


def test_a_streamed_run_replays_exactly_and_keeps_how_its_reply_travelled(
        memory: Memory, only_our_traces: None) -> None:
    with LoopbackServer([{"text": "Hello."}, {"text": "Take the tram."}]) as server:
        session = MemorySession("city", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        agent = _agent(session, client)
        asyncio.run(Runner.run(agent, "Hi.", session=session, run_config=session.run_config()))

        async def streamed() -> Any:
            run = Runner.run_streamed(agent, "How do I get downtown?", session=session,
                                      run_config=session.run_config())
            async for _event in run.stream_events():
                pass
            return run.final_output

        assert asyncio.run(streamed()) == "Take the tram."
        sent = server.chat_requests()
    assert sent[1]["stream"] is True

    info = _replay(memory, "city", 1).replay
    assert info is not None and info.status == "recorded (exact)"
    assert [c.request for c in info.calls] == [_sent(sent[1])]
    assert request_hash(info.calls[0].request) == request_hash(sent[1])
    assert info.record is not None and info.record.transport == {"stream": True}
    # The conversation the SDK sent includes the first turn, as the session gave it back.
    assert [m["content"] for m in info.calls[0].prompt.messages if m["role"] == "user"] == [
        "Hi.", "How do I get downtown?"]

    # A fork before the second turn carries the first turn's record: it replays as sent there too.
    second = [m for m in memory.recall(thread_id="city", resource_id="ada", per_page=False).messages
              if m.role == "user"][1]
    fork = memory.fork_thread("city", at=second.id, new_thread_id="city-fork")
    forked = _replay(memory, fork.id, 0).replay
    assert forked is not None and forked.exact and [c.request for c in forked.calls] == [_sent(sent[0])]


def test_a_run_with_tracing_off_still_keeps_its_record(memory: Memory, only_our_traces: None) -> None:
    with LoopbackServer([{"text": "Noted."}]) as server:
        session = MemorySession("quiet", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        asyncio.run(Runner.run(_agent(session, client), "Remember the ferry.", session=session,
                               run_config=session.run_config(tracing_disabled=True)))
        sent = server.chat_requests()
    info = _replay(memory, "quiet", 0).replay
    assert info is not None and info.exact and [c.request for c in info.calls] == [_sent(b) for b in sent]


class _Relay:
    """An OpenAI client seen through a wrapper (as instrumentation libraries wrap one): the SDK calls it
    as usual, but it has no ``httpx`` client of its own for a request hook."""

    def __init__(self, client: AsyncOpenAI) -> None:
        self._real = client

    def __getattr__(self, name: str) -> Any:
        if name == "_client":
            raise AttributeError(name)
        return getattr(self._real, name)


def test_a_call_whose_body_the_hook_cannot_see_is_kept_from_its_trace_as_messages_only(
        memory: Memory, only_our_traces: None) -> None:
    with LoopbackServer([{"text": "Bring a jacket."}]) as server:
        session = MemorySession("coat", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        relayed = OpenAIChatCompletionsModel(model="loopback-chat", openai_client=_Relay(client))  # type: ignore[arg-type]
        agent = Agent(name="guide", instructions="You are a terse travel guide.", model=relayed,
                      tools=[weather], model_settings=ModelSettings(temperature=0.2))
        asyncio.run(Runner.run(agent, "Is it cold in Oslo?", session=session, run_config=session.run_config()))
        (sent,) = server.chat_requests()

    prompt = _replay(memory, "coat", 0)
    info = prompt.replay
    assert info is not None and info.kind == "recorded"
    # The messages are those sent (the trace holds them); the tools and settings are not claimed.
    assert prompt.messages == sent["messages"] and "tools" in sent and prompt.tools == []
    assert info.status == "recorded (messages only)" and not info.exact
    assert any("tool definitions and settings" in u for u in info.unknowns)
    view = call_view(prompt, memory.tokenizer, 0)
    assert ("settings, tool choice and tools", PARTIAL) in view.settings
    assert "exact" not in view.status
    assert info.record is not None
    now = memory.assemble(thread_id="coat", resource_id="ada", as_of=info.record.input_message_id, rebuild="now")
    banner = compare(prompt, now)
    assert banner.level == "info" and "does not match" not in banner.text
    assert "Kept from the trace of openai-agents: the messages are exactly those sent" in banner.text


def test_a_record_whose_kept_text_was_changed_since_says_it_differs(
        memory: Memory, only_our_traces: None, tmp_path: Path) -> None:
    with LoopbackServer([{"text": "Yes."}]) as server:
        session = MemorySession("edit", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        asyncio.run(Runner.run(_agent(session, client), "Is the museum open?", session=session,
                               run_config=session.run_config()))
    memory.store.close()
    with sqlite3.connect(tmp_path / "memory.db") as db:  # a hand edit of the stored text
        (texts,) = db.execute("SELECT texts FROM memory_studio_turns").fetchone()
        db.execute("UPDATE memory_studio_turns SET texts = ?", (texts.replace("museum", "castle"),))
    store = open_store(tmp_path / "memory.db")
    try:
        reopened = Memory(store, memory.options, embedder=HashingEmbedder(), name="guide")
        info = _replay(reopened, "edit", 0).replay
        assert info is not None and info.kind == "recorded" and info.status == "recorded, differs"
        assert info.differences and "no longer hashes" in info.differences[0]
    finally:
        store.close()


def test_a_what_if_over_an_sdk_turn_is_our_processors_view_and_says_so(
        memory: Memory, only_our_traces: None) -> None:
    with LoopbackServer([{"text": "Fine."}]) as server:
        session = MemorySession("wi", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        asyncio.run(Runner.run(_agent(session, client), "Any tips?", session=session,
                               run_config=session.run_config()))
    first = memory.recall(thread_id="wi", resource_id="ada", per_page=False).messages[0]
    info = memory.assemble(thread_id="wi", resource_id="ada", as_of=first.id,
                           options={"last_messages": 2}).replay
    assert info is not None and info.kind == "reconstructed" and info.what_if
    assert info.status == "what-if over a reconstruction" and info.record_state == "present"
    assert any("openai-agents" in u and "record" in u for u in info.unknowns)
    assert any("record keeps those openai-agents sent" in u for u in info.unknowns)


def test_run_config_keeps_the_callers_own_model_input_filter(memory: Memory, only_our_traces: None) -> None:
    seen: list[str] = []

    def mine(data: Any) -> Any:
        seen.append(data.agent.name)
        return data.model_data

    with LoopbackServer([{"text": "Ok."}]) as server:
        session = MemorySession("own", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        config = session.run_config(call_model_input_filter=mine)
        assert isinstance(config, RunConfig)
        asyncio.run(Runner.run(_agent(session, client), "Hello", session=session, run_config=config))
        (sent,) = server.chat_requests()
    assert seen == ["guide"]
    info = _replay(memory, "own", 0).replay
    assert info is not None and info.exact and info.calls[0].request == _sent(sent)


def test_a_run_config_from_another_session_object_of_the_same_thread_still_records_the_turn(
        memory: Memory, only_our_traces: None) -> None:
    # A script that makes a session for the Runner and another for the run config (one thread, one
    # user: allowed) saves through the first and calls the model through the second's filter.
    with LoopbackServer([{"text": "Sure."}]) as server:
        session = MemorySession("twin", memory=memory, resource_id="ada")
        twin = MemorySession("twin", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        asyncio.run(Runner.run(_agent(session, client), "Can I walk there?", session=session,
                               run_config=twin.run_config()))
        (sent,) = server.chat_requests()
    info = _replay(memory, "twin", 0).replay
    assert info is not None and info.exact and info.calls[0].request == _sent(sent)
