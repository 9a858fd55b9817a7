"""A generated title's background call gives way to a turn's call on a one-slot model server.

The title call ran in the memory's background work but held the server's one slot (llama.cpp
``n_parallel=1``, one Ollama model) like the observer's did: the user's next turn queued behind it. Now
it runs as a background call (``generate_title.yield_to_turns``, default "auto"): a turn's call to the
same server cancels it (its connection shut down), and the title is asked again after the turn's call.

The loopback server holds the first title request (``stall_next``) until its client hangs up, so a turn
queued behind it could not finish (it times out: checked with ``yield_to_turns`` False below, where the
turn is answered only once the test releases the title). No timed assertions.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from core import Agent, Memory, MemoryOptions, open_store
from core.llm import LoopbackServer, OpenAICompatibleModel, RetryPolicy, ScriptedModel
from core.llm.yielding import TRAFFIC, server_of
from core.titles import DEFAULT_INSTRUCTIONS
from core.traces.tracer import InMemorySpanExporter, Tracer
from tests.core.test_om_yield_to_turns import wait_for


def is_title(body: Any) -> bool:
    return isinstance(body, dict) and body["messages"][0]["content"] == DEFAULT_INSTRUCTIONS


class Server:
    """Title requests get "Garden beds" (numbered, to tell the answers apart), turns a reply."""

    def __init__(self) -> None:
        self.loopback = LoopbackServer(ScriptedModel(self.reply, name="server"), slots=1)
        self.titles = 0

    def reply(self, messages: list[dict[str, Any]], _tools: Any) -> str:
        if messages[0]["content"] == DEFAULT_INSTRUCTIONS:
            self.titles += 1
            return f"Garden beds {self.titles}"
        return "Reply about the garden"

    def title_requests(self) -> list[Any]:
        return [b for b in self.loopback.chat_requests() if is_title(b)]


@contextmanager
def running(tmp_path: Path, server: Server, exporter: InMemorySpanExporter,
            **title: Any) -> Iterator[tuple[Memory, Agent, OpenAICompatibleModel]]:
    """The server, and a memory with titles on whose agent and title model are one model on it (the usual
    set-up with one local server); closed at the end."""
    tracer = Tracer(exporter)
    with server.loopback:
        model = OpenAICompatibleModel("local", base_url=server.loopback.base_url, api_key="k", api_key_env=None,
                                      keyring_service=None, retry=RetryPolicy(max_retries=0))
        store = open_store(tmp_path / "m.db")
        memory = Memory(store, MemoryOptions(generate_title={"enabled": True, **title}), tracer=tracer)
        try:
            yield memory, Agent("helper", instructions="Help.", model=model, memory=memory, tracer=tracer), model
        finally:
            store.close()
            model.close()


def settled_title(memory: Memory) -> str | None:
    assert memory.wait_idle(30)
    thread = memory.store.memory.get_thread("t")
    assert thread is not None
    return thread.title


def ask(agent: Agent, text: str, *, streaming: bool = False) -> str:
    kwargs: dict[str, Any] = {"memory": {"resource": "u", "thread": "t"}}
    if streaming:
        return agent.stream(text, **kwargs).collect().text
    return agent.generate(text, **kwargs).text


@pytest.mark.parametrize("streaming", [False, True], ids=["generate", "stream"])
def test_a_turn_is_not_queued_behind_the_title_call_and_the_thread_is_still_named_once(
        tmp_path: Path, streaming: bool) -> None:
    server = Server()
    exporter = InMemorySpanExporter()
    with running(tmp_path, server, exporter) as (memory, agent, model):
        server.loopback.stall_next(1, matching=is_title)  # the first title request is never answered
        ask(agent, "How deep should raised garden beds be?")
        # (Its call is registered on the server before its request goes out.)
        wait_for(lambda: len(server.title_requests()) == 1, "the title's request reached the server")
        assert [c.label for c in TRAFFIC.in_flight(model)] == ["title"]
        # The server's one slot is taken by the title's request; this turn is answered only if it gives way.
        assert ask(agent, "And how wide?", streaming=streaming) == "Reply about the garden"
        assert [is_title(r.body) for r in server.loopback.abandoned] == [True]
        title = settled_title(memory)
    # The title was asked again after the turn's call and written once, from that (answered) request.
    assert title == "Garden beds 1"
    assert len(server.title_requests()) == 2 and server.titles == 1
    # The trace says why: the turn's call says the title gave way, the title's call and its job step say
    # they gave way (not an error), and the title asked again was written.
    spans = exporter.spans
    turn_calls = [s for s in spans if s.span_type == "model_generation" and s.name.startswith("llm:")]
    assert [s.attributes.get("backgroundYielded") for s in turn_calls] == [
        None, [{"call": "title", "server": server_of(model)}]]
    title_calls = [s for s in spans if s.attributes.get("role") == "title"]
    assert [bool(s.attributes.get("yielded")) for s in title_calls] == [True, False]
    assert title_calls[0].attributes["yielded"]["to"] == model.model_id
    assert all(s.error is None for s in title_calls)
    steps = [s for s in spans if s.name == "memory: generate title"]
    assert [(s.attributes.get("yielded"), s.attributes.get("written")) for s in steps] == [
        ({"to": model.model_id}, None), (None, True)]
    assert all(s.error is None for s in steps)


def test_with_yield_to_turns_off_the_turn_queues_behind_the_title_call(tmp_path: Path) -> None:
    server = Server()
    with running(tmp_path, server, InMemorySpanExporter(), yield_to_turns=False) as (memory, agent, _model):
        server.loopback.stall_next(1, matching=is_title)
        ask(agent, "How deep should raised garden beds be?")
        wait_for(lambda: len(server.title_requests()) == 1, "the title's request reached the server")
        done = threading.Event()
        worker = threading.Thread(target=lambda: (ask(agent, "And how wide?"), done.set()), daemon=True)
        worker.start()
        wait_for(lambda: len(server.loopback.chat_requests()) == 3, "the turn's request reached the server")
        # The turn's request waits for the slot the title holds.
        assert not done.is_set() and not server.loopback.abandoned
        server.loopback.release()
        worker.join(30)
        assert done.is_set()
        title = settled_title(memory)
    assert title == "Garden beds 1"
    assert not server.loopback.abandoned and len(server.title_requests()) == 1


def test_generate_title_yield_to_turns_must_be_true_false_or_auto() -> None:
    from core.options import OptionsError

    assert MemoryOptions(generate_title=True).generate_title.yield_to_turns == "auto"
    assert MemoryOptions(generate_title={"yield_to_turns": False}).generate_title.yield_to_turns is False
    for bad in ("yes", 1, None):
        with pytest.raises(OptionsError, match=r"generate_title\.yield_to_turns must be True, False or 'auto'"):
            MemoryOptions(generate_title={"yield_to_turns": bad})
