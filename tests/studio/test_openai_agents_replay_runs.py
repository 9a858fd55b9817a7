"""Replay of Agents SDK turns when runs share a trace, a task or a thread: each turn's record holds the
calls of its own run, exactly as the server received them, and no other run's.

A real SDK ``Runner`` runs against the loopback OpenAI server, which keeps every request body.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Iterator

import pytest

agents = pytest.importorskip("agents")
from agents import (Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_trace_processors,  # noqa: E402
                    trace)
from openai import AsyncOpenAI  # noqa: E402

from core import Memory, MemoryOptions, open_store  # noqa: E402
from core.embedding.hashing import HashingEmbedder  # noqa: E402
from core.integrations.openai_agents import MemorySession, trace_processor  # noqa: E402
from core.llm.loopback import LoopbackServer  # noqa: E402
from core.replay.record import ReplayInfo  # noqa: E402


@pytest.fixture()
def only_our_traces() -> Iterator[None]:
    # The SDK's default processor would export to OpenAI's backend; tests are offline.
    set_trace_processors([trace_processor()])
    yield
    set_trace_processors([trace_processor()])


@pytest.fixture()
def memory(tmp_path: Path) -> Iterator[Memory]:
    store = open_store(tmp_path / "memory.db")
    yield Memory(store, MemoryOptions(last_messages=10), embedder=HashingEmbedder(), name="guide")
    store.close()


def _agent(client: AsyncOpenAI, name: str = "guide", instructions: str = "You are a terse travel guide.",
           **kw: Any) -> Agent[Any]:
    return Agent(name=name, instructions=instructions,
                 model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client), **kw)


def _sent(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in ("stream", "stream_options")}


def _replays(memory: Memory, thread: str) -> dict[str, ReplayInfo | None]:
    """Each stored user input's text → its turn's Replay."""
    inputs = [m for m in memory.recall(thread_id=thread, resource_id="ada", per_page=False).messages
              if m.role == "user"]
    return {m.text: memory.assemble(thread_id=thread, resource_id="ada", as_of=m.id).replay
            for m in inputs}


def _asked(body: dict[str, Any]) -> str:
    """The last user message of a request body."""
    return str([m for m in body["messages"] if m["role"] == "user"][-1]["content"])


def test_two_runs_in_one_trace_of_the_callers_are_two_turns_each_with_its_own_call(
        memory: Memory, only_our_traces: None) -> None:
    # The SDK's own docs group runs as one workflow: `with trace("..."):` around several `Runner.run`.
    with LoopbackServer(["Take the tram.", "About ten minutes."]) as server:
        session = MemorySession("trip", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)

        async def workflow() -> None:
            with trace("planning"):
                await Runner.run(_agent(client), "How do I get downtown?", session=session,
                                 run_config=session.run_config())
                await Runner.run(_agent(client), "How long does it take?", session=session,
                                 run_config=session.run_config())

        asyncio.run(workflow())
        sent = server.chat_requests()
    assert len(sent) == 2
    replays = _replays(memory, "trip")
    first, second = replays["How do I get downtown?"], replays["How long does it take?"]
    assert first is not None and first.exact and [c.request for c in first.calls] == [_sent(sent[0])]
    # The second turn's record holds its own call only (it held the first run's call first, as "exact").
    assert second is not None and second.exact and [c.request for c in second.calls] == [_sent(sent[1])]
    assert second.record is not None and first.record is not None
    assert set(second.record.input_ids).isdisjoint(first.record.input_ids)


def test_two_runs_of_one_thread_side_by_side_in_one_trace_keep_their_own_calls(
        memory: Memory, only_our_traces: None) -> None:
    with LoopbackServer(lambda messages, tools: "Noted.") as server:
        one = MemorySession("trip", memory=memory, resource_id="ada")
        two = MemorySession("trip", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)

        async def both() -> None:
            with trace("planning"):
                await asyncio.gather(
                    Runner.run(_agent(client), "Book the ferry.", session=one, run_config=one.run_config()),
                    Runner.run(_agent(client), "Book the hotel.", session=two, run_config=two.run_config()))

        asyncio.run(both())
        sent = {_asked(b): _sent(b) for b in server.chat_requests()}
    assert set(sent) == {"Book the ferry.", "Book the hotel."}
    for asked, info in _replays(memory, "trip").items():
        assert info is not None and info.exact, asked
        assert [c.request for c in info.calls] == [sent[asked]], asked


class _Relay:
    """An OpenAI client seen through a wrapper (as instrumentation libraries wrap one): the SDK calls it
    as usual, but it has no ``httpx`` client of its own for a request hook."""

    def __init__(self, client: AsyncOpenAI) -> None:
        self._real = client

    def __getattr__(self, name: str) -> Any:
        if name == "_client":
            raise AttributeError(name)
        return getattr(self._real, name)


def test_a_call_without_a_hook_does_not_take_the_body_of_another_agents_request_made_meanwhile(
        memory: Memory, only_our_traces: None) -> None:
    def answer(messages: list[dict[str, Any]], tools: Any) -> Any:
        if "checker" in str(messages[0].get("content")):
            return "Looks fine."
        if messages[-1]["role"] == "user":
            return {"tool_calls": [{"name": "check", "id": "call_1", "arguments": {"text": "the plan"}}]}
        return "Checked: go ahead."

    with LoopbackServer(answer) as server:
        shared = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        checker = Agent(name="checker", instructions="You are a checker.",
                        model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=shared))
        # The app's checker ran in a session run once: its client has the request hook.
        earlier = MemorySession("earlier", memory=memory, resource_id="ada")
        asyncio.run(Runner.run(checker, "Warm up.", session=earlier, run_config=earlier.run_config()))

        @function_tool
        async def check(text: str) -> str:
            """Ask the checker about a text."""
            result = await Runner.run(checker, f"Check {text}.")  # its own run: no session, no memory
            return str(result.final_output)

        # This agent's model has no client the hook can reach, and tracing is off: none of its calls
        # is seen. The checker's request, made in the tool while the run's first call was armed, is not
        # that call's.
        relayed = OpenAIChatCompletionsModel(
            model="loopback-chat", openai_client=_Relay(AsyncOpenAI(base_url=server.base_url, api_key="test-key",
                                                                    max_retries=0)))  # type: ignore[arg-type]
        planner = Agent(name="planner", instructions="You are a planner.", model=relayed, tools=[check])
        session = MemorySession("plan", memory=memory, resource_id="ada")
        asyncio.run(Runner.run(planner, "Plan the day.", session=session,
                               run_config=session.run_config(tracing_disabled=True)))
        sent = server.chat_requests()
    assert [str(b["messages"][0]["content"]) for b in sent][1:] == [
        "You are a planner.", "You are a checker.", "You are a planner."]
    info = _replays(memory, "plan")["Plan the day."]
    assert info is not None
    # Neither "exact" nor the checker's request as the planner's call: the turn is a reconstruction.
    assert info.kind == "reconstructed" and not info.exact
    assert all("checker" not in str(c.request) for c in info.calls)


@function_tool(needs_approval=True)
def pay(amount: int) -> str:
    """Pay the hotel."""
    return f"paid {amount}"


@pytest.mark.parametrize("kept", ["in memory", "as a string"])
def test_a_run_resumed_after_an_approval_adds_its_calls_to_the_turn_it_answers(
        memory: Memory, only_our_traces: None, kept: str) -> None:
    from agents import RunState

    script: list[Any] = [{"tool_calls": [{"name": "pay", "id": "call_1", "arguments": {"amount": 80}}]},
                         {"text": "Paid 80 for the hotel."}]
    with LoopbackServer(script) as server:
        session = MemorySession("hotel", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        agent = _agent(client, tools=[pay])

        async def ask() -> Any:
            result = await Runner.run(agent, "Pay the hotel.", session=session, run_config=session.run_config())
            assert len(result.interruptions) == 1
            state = result.to_state()
            state.approve(result.interruptions[0])
            return state if kept == "in memory" else state.to_string()

        async def resume(state: Any) -> Any:  # another request of a web app: a new event loop
            if isinstance(state, str):
                state = await RunState.from_string(agent, state)
            return await Runner.run(agent, state, session=session, run_config=session.run_config())

        state = asyncio.run(ask())
        assert asyncio.run(resume(state)).final_output == "Paid 80 for the hotel."
        sent = server.chat_requests()
    assert len(sent) == 2
    info = _replays(memory, "hotel")["Pay the hotel."]
    # The turn's model received two requests: the one that asked to pay and the one after the approval.
    assert info is not None and info.exact and [c.request for c in info.calls] == [_sent(b) for b in sent]
    stored = memory.recall(thread_id="hotel", resource_id="ada", per_page=False).messages
    assert info.record is not None and stored[-1].text == "Paid 80 for the hotel."
    assert set(info.record.response_ids) == {m.id for m in stored[1:]}


def test_an_agent_used_as_a_tool_with_the_same_session_records_its_own_turn(
        memory: Memory, only_our_traces: None) -> None:
    def answer(messages: list[dict[str, Any]], tools: Any) -> Any:
        if "finder" in str(messages[0].get("content")):
            return "Hotel Alma."
        if messages[-1]["role"] == "user":
            return {"tool_calls": [{"name": "find", "id": "call_1", "arguments": {"input": "a hotel in Porto"}}]}
        return "Try Hotel Alma."

    with LoopbackServer(answer) as server:
        session = MemorySession("porto", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        finder = _agent(client, name="finder", instructions="You are a hotel finder.")
        finder_tool = finder.as_tool("find", "Find a hotel.", session=session)  # the nested run: same thread
        planner = Agent(name="planner", instructions="You are a planner.", tools=[finder_tool],
                        model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client))
        asyncio.run(Runner.run(planner, "Where do I sleep?", session=session, run_config=session.run_config()))
        sent = server.chat_requests()
    assert [str(b["messages"][0]["content"]) for b in sent] == [
        "You are a planner.", "You are a hotel finder.", "You are a planner."]
    replays = _replays(memory, "porto")
    outer, inner = replays["Where do I sleep?"], replays["a hotel in Porto"]
    # The planner's turn: its two calls; the finder's run (its input stored as a user message): its own.
    assert outer is not None and outer.exact and [c.request for c in outer.calls] == [_sent(sent[0]), _sent(sent[2])]
    assert inner is not None and inner.exact and [c.request for c in inner.calls] == [_sent(sent[1])]


def test_an_approval_given_after_a_newer_input_adds_its_calls_to_the_turn_that_asked_for_it(
        memory: Memory, only_our_traces: None) -> None:
    from agents import RunState

    def answer(messages: list[dict[str, Any]], tools: Any) -> Any:
        last = messages[-1]
        if last["role"] == "user" and last["content"] == "Pay the hotel.":
            return {"tool_calls": [{"name": "pay", "id": "call_1", "arguments": {"amount": 80}}]}
        return "Paid 80 for the hotel." if last["role"] == "tool" else "It opens at nine."

    with LoopbackServer(answer) as server:
        session = MemorySession("later", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        agent = _agent(client, tools=[pay])

        async def ask() -> str:
            result = await Runner.run(agent, "Pay the hotel.", session=session, run_config=session.run_config())
            state = result.to_state()
            state.approve(result.interruptions[0])
            return state.to_string()

        async def resume(kept: str) -> Any:
            state = await RunState.from_string(agent, kept)
            return await Runner.run(agent, state, session=session, run_config=session.run_config())

        kept = asyncio.run(ask())
        asyncio.run(Runner.run(agent, "When does the museum open?", session=session,
                               run_config=session.run_config()))
        assert asyncio.run(resume(kept)).final_output == "Paid 80 for the hotel."
        sent = server.chat_requests()
    assert [_asked(b) for b in sent] == ["Pay the hotel.", "When does the museum open?", "Pay the hotel."]
    replays = _replays(memory, "later")
    paying, museum = replays["Pay the hotel."], replays["When does the museum open?"]
    assert paying is not None and paying.exact and [c.request for c in paying.calls] == [_sent(sent[0]), _sent(sent[2])]
    assert museum is not None and museum.exact and [c.request for c in museum.calls] == [_sent(sent[1])]


def test_a_model_call_a_hook_makes_before_the_runs_call_is_not_taken_for_it(
        memory: Memory, only_our_traces: None) -> None:
    from agents import RunHooks

    def answer(messages: list[dict[str, Any]], tools: Any) -> Any:
        return "Travel." if "classifier" in str(messages[0].get("content")) else "Take the night train."

    with LoopbackServer(answer) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        classifier = _agent(client, name="classifier", instructions="You are a topic classifier.")

        class Classify(RunHooks[Any]):
            async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
                await Runner.run(classifier, "Classify: how do I get to Vienna?")  # same client, own run

        session = MemorySession("vienna", memory=memory, resource_id="ada")
        asyncio.run(Runner.run(_agent(client), "How do I get to Vienna?", session=session,
                               run_config=session.run_config(), hooks=Classify()))
        sent = server.chat_requests()
    assert [str(b["messages"][0]["content"]) for b in sent] == [
        "You are a topic classifier.", "You are a terse travel guide."]
    info = _replays(memory, "vienna")["How do I get to Vienna?"]
    # The turn's call is the guide's request, not the classifier's that went out first on the same client.
    assert info is not None and info.exact and [c.request for c in info.calls] == [_sent(sent[1])]
    assert info.calls[0].usage is not None
