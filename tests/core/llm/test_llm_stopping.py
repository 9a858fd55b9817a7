"""``CallStop``: a turn's model call stopped from another thread once nobody waits for its reply.

The loopback server holds the call (``stall_next``) until its client closes the connection, which it notes in
``abandoned``; the stop comes from another thread, as the gateway's comes from its event loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from core import Memory, MemoryOptions, Message
from core.agent import Agent, Tool, TurnFailedError
from core.llm import OpenAICompatibleModel, ScriptedModel
from core.llm.base import ChatResult
from core.llm.loopback import LoopbackServer
from core.llm.scripted import ScriptedReply, tool_call
from core.llm.stopping import CallStop, CallStopped, armed


def wait_until(condition: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def stop_once_held(upstream: LoopbackServer, stop: CallStop) -> threading.Thread:
    """A thread (started) that stops ``stop`` once a call has reached ``upstream``, as the gateway's comes."""
    def run() -> None:
        wait_until(lambda: upstream.chat_requests(), "the call to reach the server")
        stop.stop("the client closed its connection")

    stopper = threading.Thread(target=run)
    stopper.start()
    return stopper


@pytest.fixture
def upstream() -> Iterator[LoopbackServer]:
    with LoopbackServer(["hello there"], slots=1) as server:
        yield server


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_stopped_call_closes_its_connection_and_is_not_retried(upstream, streamed):
    model = OpenAICompatibleModel("loopback", base_url=upstream.base_url, api_key="x", timeout=60)
    stop = CallStop()
    upstream.stall_next()
    stopper = stop_once_held(upstream, stop)
    with armed(stop), pytest.raises(CallStopped, match="stopped: the client closed its connection") as raised:
        if streamed:
            list(model.stream([{"role": "user", "content": "hi"}]))
        else:
            model.generate([{"role": "user", "content": "hi"}])
    stopper.join()
    assert not raised.value.retryable
    wait_until(lambda: upstream.abandoned, "the server to see its connection closed")
    assert len(upstream.chat_requests()) == 1  # not sent again: a stopped call is not a failure to retry
    model.close()


def test_an_armed_call_that_is_not_stopped_keeps_its_bytes(upstream):
    """A stoppable call goes out on a connection of its own; the turn record still gets the bytes it sent."""
    model = OpenAICompatibleModel("loopback", base_url=upstream.base_url, api_key="x", timeout=60)
    with armed(CallStop()):
        result: ChatResult = model.generate([{"role": "user", "content": "hi"}])
    assert result.text == "hello there" and result.sent == upstream.chat_request_bytes()[-1]
    model.close()


def test_a_turn_stopped_while_a_tool_runs_saves_nothing_and_calls_no_model_again(store):
    """A model that cannot be interrupted (scripted) still stops the turn: no call after the stop, nothing saved."""
    stop = CallStop()
    calls: list[int] = []

    def look_up(args: dict[str, Any], ctx: Any) -> str:
        stop.stop("the client closed its connection")  # the client leaves while the tool runs
        return "found"

    def script(messages: Any, tools: Any) -> Any:
        calls.append(1)
        return ScriptedReply(tool_calls=(tool_call("look_up", {}),)) if len(calls) == 1 else "done"

    memory = Memory(store, MemoryOptions(last_messages=5))
    agent = Agent("a", instructions="", model=ScriptedModel(script), memory=memory, tracer=False,
                  tools=[Tool("look_up", "look something up", look_up, {"type": "object", "properties": {}})])
    with pytest.raises((CallStopped, TurnFailedError), match="the client closed its connection"):
        agent.generate("find it", memory={"thread": "t1", "resource": "ada"}, stop=stop)
    assert calls == [1] and memory.get_thread("t1") is None


def test_a_turn_stopped_while_its_observer_runs_writes_no_observation_and_no_backoff(store):
    """Observational memory observes in the turn (no buffering) before the model is asked. The turn is stopped
    while the observer answers (a scripted model, which cannot be cut short): its reply is not used, nothing is
    written (no observation, no back-off: a stop is not the observer's failure), the turn's model is never
    asked, and the error names the observer. The next turn, not stopped, observes the same messages."""
    from core.observational import store as om_store
    from core.observational.buffer_store import current_backoff
    from core.observational.observer import OBSERVER_SYSTEM_PROMPT
    from core.observational.records import lookup_key

    stop = CallStop()
    asked: list[str] = []

    def script(messages: Any, tools: Any) -> Any:
        if messages[0]["content"] == OBSERVER_SYSTEM_PROMPT:
            asked.append("observer")
            if len(asked) == 1:
                stop.stop("the client closed its connection")  # the client leaves while the observer answers
            return "<observations>\n* Ada waters the garden daily\n</observations>"
        asked.append("turn")
        return "noted"

    memory = Memory(store, MemoryOptions(last_messages=5, observational_memory={
        "enabled": True, "message_tokens": 30, "buffer_tokens": False}))
    agent = Agent("a", instructions="", model=ScriptedModel(script), memory=memory, tracer=False)
    memory.create_thread(thread_id="t1", resource_id="ada")
    memory.save_messages([Message.user(f"Note {i}: water the garden on day {i}, twice a day.", thread_id="t1",
                                       resource_id="ada") for i in range(4)])
    before = len(store.memory.browse_messages("t1", 0, 100))
    with pytest.raises(CallStopped, match="the client closed its connection") as raised:
        agent.generate("What is left?", memory={"thread": "t1", "resource": "ada"}, stop=stop)
    assert raised.value.during == "observer" and asked == ["observer"]
    key = lookup_key("thread", thread_id="t1", resource_id="ada")
    record = om_store.current_record(store, key)
    assert record is None or (not record.active_observations and current_backoff(record, "observer") is None)
    assert len(store.memory.browse_messages("t1", 0, 100)) == before == 4
    agent.generate("What is left?", memory={"thread": "t1", "resource": "ada"})
    assert asked == ["observer", "observer", "turn"]
    assert "waters the garden" in om_store.current_record(store, key).active_observations


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_delegated_sub_agents_model_call_is_stopped_with_its_supervisors_turn(store, upstream, streamed):
    """The supervisor delegates (tool ``agent-helper``); the helper's call, held by the one-slot server, is cut
    when the supervisor's turn is stopped: the server sees its connection closed, the supervisor calls its model
    no more, and neither the supervisor's thread nor the delegation's thread keeps anything."""
    from core.scopes import delegation_resource
    from core.traces.tracer import InMemorySpanExporter, Tracer

    spans = InMemorySpanExporter()
    memory = Memory(store, MemoryOptions(last_messages=5))
    helper = Agent("helper", instructions="Help.", tracer=Tracer(spans),
                   model=OpenAICompatibleModel("loopback", base_url=upstream.base_url, api_key="x", timeout=60))
    boss_calls: list[int] = []

    def boss_script(messages: Any, tools: Any) -> Any:
        boss_calls.append(1)
        return ScriptedReply(tool_calls=(tool_call("agent-helper", {"prompt": "find a table"}),)) \
            if len(boss_calls) == 1 else "booked"

    boss = Agent("boss", instructions="Delegate.", model=ScriptedModel(boss_script), memory=memory,
                 agents=[helper], tracer=Tracer(spans))
    stop = CallStop()
    upstream.stall_next()
    stopper = stop_once_held(upstream, stop)
    try:
        with pytest.raises(CallStopped, match="stopped: the client closed its connection"):
            where = {"thread": "t1", "resource": "ada"}
            if streamed:
                with boss.stream("book a table", memory=where, stop=stop) as events:
                    list(events)
            else:
                boss.generate("book a table", memory=where, stop=stop)
        # (Before the release: a held request whose client hung up is noted abandoned when the server next looks,
        # and a release that came first would answer it into the closed connection instead.)
        wait_until(lambda: upstream.abandoned, "the server to see the helper's connection closed")
    finally:
        stopper.join()
        upstream.release()  # (a call that was not stopped ends now, so a failing test does not hang)
    assert [r.body["messages"][-1]["content"] for r in upstream.abandoned] == ["find a table"]
    assert boss_calls == [1]  # the supervisor did not call its model again after the stop
    assert memory.get_thread("t1") is None
    assert memory.list_threads(resource_id=delegation_resource("ada", "helper")).threads == []
    helper_run, = [s for s in spans.spans if s.span_type == "agent_run" and s.entity_name == "helper"]
    assert "stopped: the client closed its connection" in str(helper_run.error)
    helper.model.close()


def test_a_server_reached_by_a_name_that_resolves_to_this_machine_has_its_plain_call_cut(upstream):
    """``127.1`` is a name to ``ipaddress`` but resolves to 127.0.0.1 (offline: no DNS): as a Docker service name
    resolves to a private address, it is self-hosted, so an armed plain call goes out on a connection of its own
    and the stop cuts it at once. (A hosted API's plain call would be waited for: here its 10-minute timeout,
    long after the minute this test waits for the server to see the connection closed.)"""
    model = OpenAICompatibleModel("loopback", base_url=upstream.base_url.replace("127.0.0.1", "127.1"), api_key="x",
                                  timeout=600)
    assert "://127.1:" in model.base_url
    stop = CallStop()
    raised: list[BaseException] = []

    def call() -> None:
        try:
            with armed(stop):
                model.generate([{"role": "user", "content": "hi"}])
        except BaseException as exc:  # noqa: BLE001 - looked at below
            raised.append(exc)

    upstream.stall_next()
    caller = threading.Thread(target=call)
    caller.start()
    try:
        wait_until(lambda: upstream.chat_requests(), "the call to reach the server")
        stop.stop("the client closed its connection")
        wait_until(lambda: upstream.abandoned, "the server to see its connection closed")
    finally:
        upstream.release()  # (a call that was not cut ends now, so a failing test does not hang)
        caller.join()
        model.close()
    assert len(raised) == 1 and isinstance(raised[0], CallStopped), raised
    assert len(upstream.chat_requests()) == 1


def test_a_turn_waiting_for_the_background_observer_is_woken_by_its_stop(tmp_path):
    """Past ``block_after`` a turn waits (up to 120 s) for observational memory's background observer, held here
    by the loopback server. The turn's stop (a gateway client gone, Studio Chat's Stop) ends that wait at once:
    the turn raises ``CallStopped`` saying it waited for the background observer, saves nothing, and its own model
    is never asked. The background observer is not the turn's: its call is not cut, and once the server answers,
    its observation is written and the next turn takes it. (Before, the stop was seen only when the wait ended:
    120 s later, past the minute waited here.)"""
    from core import open_store
    from core.llm import RetryPolicy
    from core.llm.yielding import TRAFFIC
    from core.observational import load_current
    from core.observational.observer import OBSERVER_SYSTEM_PROMPT
    from core.tokens import EstimatingTokenizer

    def is_observer(body: Any) -> bool:
        return isinstance(body, dict) and body["messages"][0]["content"] == OBSERVER_SYSTEM_PROMPT

    def reply(messages: list[dict[str, Any]], _tools: Any) -> str:
        if messages[0]["content"] == OBSERVER_SYSTEM_PROMPT:
            return "<observations>\nDate: Mar 3, 2025\n* 🔴 (09:00) Ada plans the garden.\n</observations>"
        return "Reply " + "x " * 28

    long = "word " * 90  # about 100 tokens: two turns pass block_after (200 tokens)
    with LoopbackServer(ScriptedModel(reply, name="server"), slots=1) as server:
        model = OpenAICompatibleModel("local", base_url=server.base_url, api_key="k", api_key_env=None,
                                      keyring_service=None, retry=RetryPolicy(max_retries=0), timeout=600)
        store = open_store(tmp_path / "m.db")
        memory = Memory(store, MemoryOptions(observational_memory={
            "message_tokens": 200, "block_after": 1.0, "observation_tokens": 5000, "timeout": 120}),
            tokenizer=EstimatingTokenizer(), observer_model=model, tracer=False)
        agent = Agent("helper", instructions="Help.", model=model, memory=memory, tracer=False)
        where = {"resource": "ada", "thread": "t"}
        stop = CallStop()
        raised: list[BaseException] = []

        def waiting_turn() -> None:
            try:
                agent.generate(f"Question 1: {long}", memory=where, stop=stop)
            except BaseException as exc:  # noqa: BLE001 - looked at below
                raised.append(exc)

        try:
            server.stall_next(100, matching=is_observer)  # every observer request waits for release()
            agent.generate(f"Question 0: {long}", memory=where)  # the observer starts in the background
            wait_until(lambda: [b for b in server.chat_requests() if is_observer(b)], "the observer's request")
            stored = len(store.memory.browse_messages("t", 0, 100))
            turn = threading.Thread(target=waiting_turn)
            turn.start()
            wait_until(lambda: TRAFFIC.awaited(model), "the turn to wait for the background observer")
            stop.stop("the client closed its connection")
            turn.join(60)
            assert not turn.is_alive(), "the stopped turn still waits for the background observer"
            assert len(raised) == 1 and isinstance(raised[0], CallStopped), raised
            assert raised[0].during == "observer" and raised[0].waiting
            assert "the client closed its connection" in str(raised[0])
            assert len(store.memory.browse_messages("t", 0, 100)) == stored  # nothing of the turn saved
            assert not TRAFFIC.awaited(model)
            assert not server.abandoned  # the background observer's call goes on
            assert len([b for b in server.chat_requests() if not is_observer(b)]) == 1  # the turn's model not asked
            server.release()
            assert memory.wait_idle(60)
            assert agent.generate(f"Question 2: {long}", memory=where).text == "Reply " + "x " * 28
            record = load_current(store, thread_id="t")  # the next turn took what the background observed
            assert record is not None and "Ada plans the garden." in record.active_observations
        finally:
            server.release()
            store.close()
            model.close()
