"""Giving way to turns cannot put observation off for ever.

A background observer call gives way to every turn's call on its server (``yield_to_turns``). Under
steady traffic to a one-slot server (several users' turns back to back) it kept giving way; a turn of
its thread past ``block_after`` then waited for it (at most 120 s) while the other turns went on
cancelling it, and went on with the messages raw, turn after turn. Now, while a turn waits for
background memory work, the background calls on that server neither wait for nor give way to other
turns' calls (``TRAFFIC.awaiting``): the other turns queue behind the observer on the server, the
observation is made, and the waiting turn takes it.

The loopback server has one slot and holds every observer request (``stall_next``) until the test
releases them, so which call waits behind which is decided by the test, not by timing.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from core import Agent, Memory, MemoryOptions, open_store
from core.llm import LoopbackServer, OpenAICompatibleModel, RetryPolicy, ScriptedModel
from core.llm.yielding import KEPT_TURN_WAITS, TRAFFIC, ServerTraffic, server_of
from core.observational import load_current
from core.observational.observer import OBSERVER_SYSTEM_PROMPT
from core.tokens import EstimatingTokenizer
from core.traces.tracer import InMemorySpanExporter, Tracer
from tests.core.test_om_yield_to_turns import wait_for

LONG = "word " * 90  # about 100 tokens: two turns pass block_after (200 tokens)


def is_observer(body: Any) -> bool:
    return isinstance(body, dict) and body["messages"][0]["content"] == OBSERVER_SYSTEM_PROMPT


def test_a_turn_waiting_past_block_after_gets_its_observation_while_other_turns_keep_the_server_busy(
        tmp_path: Path) -> None:
    observations = {"n": 0}

    def reply(messages: list[dict[str, Any]], _tools: Any) -> str:
        if messages[0]["content"] == OBSERVER_SYSTEM_PROMPT:
            observations["n"] += 1
            return (f"<observations>\nDate: Mar 3, 2025\n* 🔴 (09:00) Observation {observations['n']}.\n"
                    "</observations>")
        return "Reply " + "x " * 28

    exporter = InMemorySpanExporter()
    tracer = Tracer(exporter)
    loopback = LoopbackServer(ScriptedModel(reply, name="server"), slots=1)
    with loopback:
        model = OpenAICompatibleModel("local", base_url=loopback.base_url, api_key="k", api_key_env=None,
                                      keyring_service=None, retry=RetryPolicy(max_retries=0))
        store = open_store(tmp_path / "m.db")
        memory = Memory(store, MemoryOptions(observational_memory={
            "message_tokens": 200, "block_after": 1.0, "observation_tokens": 5000, "timeout": 120}),
            tokenizer=EstimatingTokenizer(), observer_model=model, tracer=tracer)
        agent = Agent("helper", instructions="Help.", model=model, memory=memory, tracer=tracer)

        def ask(thread: str, text: str) -> str:
            return agent.generate(text, memory={"resource": thread, "thread": thread}).text

        answers: dict[str, str] = {}

        def ask_aside(name: str, thread: str, text: str) -> threading.Thread:
            worker = threading.Thread(target=lambda: answers.__setitem__(name, ask(thread, text)), daemon=True)
            worker.start()
            return worker

        try:
            loopback.stall_next(100, matching=is_observer)  # every observer request waits for release()
            ask("t", f"Question 0: {LONG}")  # ~130 tokens stored: the observer starts in the background
            wait_for(lambda: len([b for b in loopback.chat_requests() if is_observer(b)]) == 1,
                     "the observer's request reached the server")
            # Thread t's next turn is past block_after (~230 unobserved tokens, none buffered): it waits for
            # the background observer before its own call.
            waiting = ask_aside("t", "t", f"Question 1: {LONG}")
            wait_for(lambda: TRAFFIC.awaited(model), "the turn of thread t waits for the observer")
            # Another user's turn, to the same server: before, its call cancelled the observer again (and
            # the next one, and so on: the waiting turn went on raw after 120 s).
            other = ask_aside("u", "u", "Another user's question")
            wait_for(lambda: any("Another user's question" in str(b["messages"]) for b in loopback.chat_requests()),
                     "the other user's request reached the server")
            assert not loopback.abandoned  # the observer kept its slot; the other turn queues behind it
            assert not answers
            loopback.release()
            waiting.join(60)
            other.join(60)
            assert answers == {"t": "Reply " + "x " * 28, "u": "Reply " + "x " * 28}
            assert memory.wait_idle(30)
            record = load_current(store, thread_id="t")
        finally:
            store.close()
            model.close()
    assert not loopback.abandoned
    # The waiting turn took the observation of thread t's first exchange (activated, not raw).
    assert record is not None and "Observation 1." in record.active_observations
    spans = exporter.spans
    other_call = [s for s in spans if s.name.startswith("llm:") and "Another user" in str(s.input)]
    assert len(other_call) == 1 and other_call[0].attributes.get("backgroundYielded") is None
    assert other_call[0].attributes["backgroundKept"] == [
        {"call": "observer", "server": server_of(model), "reason": KEPT_TURN_WAITS}]
    first_observer = next(s for s in spans if s.attributes.get("role") == "observer")
    assert first_observer.error is None and first_observer.attributes.get("yielded") is None
    assert first_observer.attributes["notYielded"] == [{"to": model.model_id, "reason": KEPT_TURN_WAITS}]
    assert not TRAFFIC.awaited(model)  # the wait is over: background calls give way again
    # The wait is a span of the turn's trace (before: no trace of it; Studio Chat said "waiting for the model").
    waits = [s for s in spans if s.name == "memory: wait for the background observer"]
    assert len(waits) == 1 and waits[0].attributes["operationType"] == "wait"
    assert waits[0].attributes["waitsFor"] == "observer" and waits[0].attributes["limitSeconds"] == 180
    assert waits[0].output == {"settled": True, "stopped": False} and waits[0].thread_id == "t"
    turn = next(s for s in spans if s.name.startswith("agent") and s.trace_id == waits[0].trace_id)
    assert "Question 1" in str(turn.input)


class Model:
    """Only what the server bookkeeping reads: the base URL and the model id."""

    model_id = "openai-compatible/local"
    base_url = "http://127.0.0.1:9/v1"
    stops_background_calls = True


def test_a_background_call_held_back_by_a_turns_call_goes_once_a_turn_waits_for_background_work() -> None:
    traffic, model = ServerTraffic(), Model()
    held_back = threading.Event()
    started = threading.Event()
    finish = threading.Event()

    def background() -> None:
        def stop() -> bool:  # asked only while the call waits for the turn's call to finish
            held_back.set()
            return False

        with traffic.background(model, "observer", stop=stop):
            started.set()
            finish.wait(30)

    worker = threading.Thread(target=background, daemon=True)
    with traffic.foreground(model) as first:
        assert first.stopped == [] and first.kept == []
        worker.start()
        wait_for(held_back.is_set, "the background call waits for the turn's call")
        assert not started.is_set()
        with traffic.awaiting(model):
            wait_for(started.is_set, "the background call went while a turn waits for background work")
            with traffic.foreground(model) as second:  # another turn's call leaves it running
                assert second.stopped == [] and [(c.label, why) for c, why in second.kept] == [
                    ("observer", KEPT_TURN_WAITS)]
        # The wait is over: the next turn's call stops it again.
        with traffic.foreground(model) as third:
            assert [c.label for c in third.stopped] == ["observer"] and third.kept == []
            assert third.stopped[0].cancelled_by == model.model_id
    finish.set()
    worker.join(30)
    assert not worker.is_alive()
