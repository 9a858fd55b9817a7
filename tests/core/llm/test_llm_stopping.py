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

from core import Memory, MemoryOptions
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


@pytest.fixture
def upstream() -> Iterator[LoopbackServer]:
    with LoopbackServer(["hello there"], slots=1) as server:
        yield server


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_stopped_call_closes_its_connection_and_is_not_retried(upstream, streamed):
    model = OpenAICompatibleModel("loopback", base_url=upstream.base_url, api_key="x", timeout=60)
    stop = CallStop()
    upstream.stall_next()

    def stop_once_held() -> None:
        wait_until(lambda: upstream.chat_requests(), "the call to reach the server")
        stop.stop("the client closed its connection")

    stopper = threading.Thread(target=stop_once_held)
    stopper.start()
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
