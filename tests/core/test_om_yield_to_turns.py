"""Background observer calls give way to a turn's call on a one-slot model server.

With observational memory buffering, the observer's background call occupied a one-slot server
(llama.cpp ``n_parallel=1``, one Ollama model), and the user's next turn queued behind it, so the turn
waited anyway. Now the turn's call cancels the background call to the same server (its connection is
shut down, which frees the slot) and the observer runs again after the turn's call.

The server here is the loopback server with one slot, through the real ``openai`` client. The
observer's first request is held by the server (never answered: ``stall_next``) until its client hangs
up, so a turn that queued behind it could not finish at all (it fails on its 60 s timeout: checked by
running this file with the turn's ``TRAFFIC.foreground`` made a no-op). No timed assertions.
"""

from __future__ import annotations

import ipaddress
import threading
from pathlib import Path
from typing import Any

import pytest

from core import Agent, Memory, MemoryOptions, open_store
from core.llm import LoopbackServer, OpenAICompatibleModel, RetryPolicy, ScriptedModel
from core.llm.providers import resolve_model
from core.llm.settings import ModelSettingsError
from core.llm.yielding import TRAFFIC, gives_way, self_hosted, server_addresses, server_of, yields_by_default
from core.observational import load_current
from core.observational.observer import OBSERVER_SYSTEM_PROMPT
from core.tokens import EstimatingTokenizer
from core.traces.tracer import InMemorySpanExporter, Tracer

WORDS = "word " * 30  # about 32 tokens with the question number


class Server:
    """The scripted server side: observer requests get an observation, turns a reply. The first turn's
    request arms the server to hold the next request (the background observer's) until its client goes."""

    def __init__(self) -> None:
        self.loopback = LoopbackServer(ScriptedModel(self.reply, name="server"), slots=1)
        self.observations = 0

    def reply(self, messages: list[dict[str, Any]], _tools: Any) -> str:
        if messages and messages[0]["content"] == OBSERVER_SYSTEM_PROMPT:
            self.observations += 1
            return (f"<observations>\nDate: Mar 3, 2025\n* 🔴 (09:00) Observation {self.observations}.\n"
                    "</observations>")
        if "Question 0" in str(messages[-1]["content"]):
            self.loopback.stall_next(1)  # the next request is the observer's, started once this turn is saved
        return "Reply " + "x " * 28

    def observer_requests(self) -> list[dict[str, Any]]:
        return [b for b in self.loopback.chat_requests() if b["messages"][0]["content"] == OBSERVER_SYSTEM_PROMPT]


def wait_for(condition: Any, what: str) -> None:
    done = threading.Event()
    for _ in range(3000):  # up to about 30 s: a bound for a broken build, not a measured time
        if condition():
            return
        done.wait(0.01)
    raise AssertionError(f"never happened: {what}")


def setup(tmp_path: Path, server: Server, exporter: InMemorySpanExporter | None = None, host: str = "127.0.0.1",
          **om: Any) -> tuple[Any, Memory, Agent, OpenAICompatibleModel]:
    tracer = Tracer(exporter or InMemorySpanExporter())
    # One model for the turns and the observer, as with one local server (the usual set-up).
    base_url = server.loopback.base_url.replace("127.0.0.1", host)
    model = OpenAICompatibleModel("local", base_url=base_url, api_key="k", api_key_env=None,
                                  keyring_service=None, retry=RetryPolicy(max_retries=0))
    store = open_store(tmp_path / "m.db")
    # The observer may take longer than a turn (120 s against 60 s): a turn that queued behind the held
    # observer request would fail on its own timeout first.
    memory = Memory(store, MemoryOptions(observational_memory={"message_tokens": 200, "observation_tokens": 5000,
                                                               "timeout": 120, **om}),
                    tokenizer=EstimatingTokenizer(), observer_model=model, tracer=tracer)
    agent = Agent("helper", instructions="Help.", model=model, memory=memory, tracer=tracer)
    return store, memory, agent, model


def ask(agent: Agent, i: int, *, streaming: bool = False) -> str:
    kwargs: dict[str, Any] = {"memory": {"resource": "u", "thread": "t"}}
    if streaming:
        return agent.stream(f"Question {i}: {WORDS}", **kwargs).collect().text
    return agent.generate(f"Question {i}: {WORDS}", **kwargs).text


# "127.1": a name (not an address ``ipaddress`` reads) that resolves to this machine, offline, as a Docker
# service name ("ollama") resolves to a private address: a self-hosted server, so "auto" gives way there too.
@pytest.mark.parametrize("host", ["127.0.0.1", "127.1"], ids=["address", "name"])
@pytest.mark.parametrize("streaming", [False, True], ids=["generate", "stream"])
def test_a_turn_is_not_queued_behind_the_background_observer_and_the_observation_still_happens_once(
        tmp_path: Path, streaming: bool, host: str) -> None:
    server = Server()
    exporter = InMemorySpanExporter()
    with server.loopback:
        store, memory, agent, model = setup(tmp_path, server, exporter, host=host)
        try:
            ask(agent, 0)  # ~66 tokens stored: past buffer_tokens (40), so the observer starts in the background
            wait_for(lambda: len(server.observer_requests()) == 1 and TRAFFIC.in_flight(model),
                     "the observer's request reached the server")
            # The server's one slot is taken by the observer's request, which it never answers by itself.
            text = ask(agent, 1, streaming=streaming)
            assert text.startswith("Reply")
            # (a) the turn got the slot because the observer's call hung up, not because it finished.
            assert [r.body["messages"][0]["content"] for r in server.loopback.abandoned] == [OBSERVER_SYSTEM_PROMPT]
            assert memory.wait_idle(30)
            record = load_current(store, thread_id="t")
            messages = memory.recall(thread_id="t", per_page=False).messages
        finally:
            store.close()
            model.close()
    # (b) the observation happened afterwards, once: every stored message is in exactly one chunk, and
    # each answered observer request made one chunk (the abandoned one made none).
    assert record is not None and record.buffered
    covered = [i for chunk in record.buffered for i in chunk.message_ids]
    assert sorted(covered) == sorted(m.id for m in messages)
    assert len(server.observer_requests()) == len(record.buffered) + 1 == server.observations + 1
    assert record.buffered[0].observations.endswith("Observation 1.")  # the abandoned call wrote nothing
    # (c) the trace says why: the turn's call says which background call gave way, the observer's
    # call and its buffering step say that they gave way (not an error), and the retry succeeded.
    spans = {s.span_id: s for s in exporter.spans}
    turn_calls = [s for s in spans.values() if s.span_type == "model_generation" and s.name.startswith("llm:")]
    assert [s.attributes.get("backgroundYielded") for s in turn_calls] == [
        None, [{"call": "observer", "server": server_of(model)}]]
    observer_calls = [s for s in spans.values() if s.attributes.get("role") == "observer"]
    yielded = [s for s in observer_calls if s.attributes.get("yielded")]
    assert len(yielded) == 1 and yielded[0].error is None
    assert yielded[0].attributes["yielded"]["to"] == model.model_id
    assert len(observer_calls) == len(record.buffered) + 1
    steps = [s for s in spans.values() if s.name == "memory: buffer observations"]
    assert [bool(s.attributes.get("yielded")) for s in steps].count(True) == 1
    assert all(s.error is None for s in steps)


def test_with_yield_to_turns_off_the_turn_queues_behind_the_observer(tmp_path: Path) -> None:
    server = Server()
    with server.loopback:
        store, memory, agent, model = setup(tmp_path, server, yield_to_turns=False)
        try:
            ask(agent, 0)
            wait_for(lambda: len(server.observer_requests()) == 1, "the observer's request reached the server")
            done = threading.Event()
            worker = threading.Thread(target=lambda: (ask(agent, 1), done.set()), daemon=True)
            worker.start()
            wait_for(lambda: len(server.loopback.chat_requests()) == 3, "the turn's request reached the server")
            # The turn's request waits for the slot the observer holds: it cannot be answered yet.
            assert not done.is_set() and not server.loopback.abandoned
            server.loopback.release()  # the observer's reply goes out; then the turn is answered
            worker.join(30)
            assert done.is_set()
            assert memory.wait_idle(30)
        finally:
            store.close()
            model.close()
    assert not server.loopback.abandoned


def test_auto_yields_for_servers_on_this_machine_or_a_private_network_only() -> None:
    def model(url: str) -> Any:
        return type("M", (), {"base_url": url})()

    assert yields_by_default(model("http://127.0.0.1:8080/v1"))
    assert yields_by_default(model("http://localhost:11434/v1"))
    assert yields_by_default(model("http://192.168.1.20:8080/v1"))
    assert yields_by_default(model("http://[::1]:8080/v1"))
    assert not yields_by_default(model("https://api.openai.com/v1"))
    assert not yields_by_default(model("https://8.8.8.8/v1"))
    assert not yields_by_default(ScriptedModel(["x"]))  # no server at all: nothing to yield


def test_auto_counts_a_named_server_by_what_its_name_resolves_to_unless_the_model_says() -> None:
    """A model server reached by a name (a Docker service "ollama", "llm.internal") is self-hosted when the name
    resolves to this machine or a private network. The names here resolve without DNS (numeric forms glibc and
    macOS read), so the test runs offline; a name that does not resolve counts as hosted."""
    def model(url: str, **kwargs: Any) -> OpenAICompatibleModel:
        return OpenAICompatibleModel("m", base_url=url, api_key="k", api_key_env=None, keyring_service=None,
                                     **kwargs)

    assert self_hosted(model("http://127.1:8080/v1")) and self_hosted(model("http://2130706433:8080/v1"))
    assert server_addresses("127.1") == (ipaddress.ip_address("127.0.0.1"),)
    assert not self_hosted(model("http://8.8.8:8080/v1"))  # resolves to 8.8.0.8: a public address
    assert not self_hosted(model("http://no-such-host.invalid/v1")) and server_addresses("no-such-host.invalid") == ()
    for url in ("http://100.101.102.103:11434/v1", "http://[fd00::1]:8080/v1", "http://[::ffff:10.0.0.7]:8080/v1",
                "http://ollama.local:11434/v1"):
        assert self_hosted(model(url)), url  # Tailscale's range, IPv6 unique-local, a mapped private address, mDNS
    assert model("http://[fd00::1]:8080/v1").base_url == "http://[fd00::1]:8080/v1"  # (its brackets kept)
    # The model's own say wins: a hosted gateway on a private address, a self-hosted server behind a public name.
    assert not gives_way(model("http://127.0.0.1:8080/v1", self_hosted=False), "auto")
    assert gives_way(model("https://llm.example.com/v1", self_hosted=True), "auto")
    assert model("https://llm.example.com/v1", self_hosted=True).describe()["self_hosted"] is True
    assert resolve_model("ollama/llama3.1", self_hosted=False, environ={}).self_hosted is False
    with pytest.raises(ModelSettingsError, match="self_hosted must be True, False or None"):
        model("http://127.0.0.1:8080/v1", self_hosted="yes")


def test_yield_to_turns_must_be_true_false_or_auto() -> None:
    from core.options import OptionsError

    assert MemoryOptions(observational_memory=True).observational_memory.yield_to_turns == "auto"
    for bad in ("yes", 1, None):
        with pytest.raises(OptionsError, match="yield_to_turns must be True, False or 'auto'"):
            MemoryOptions(observational_memory={"yield_to_turns": bad})


REFLECT_MARK = "OBSERVATIONS TO REFLECT ON"


def is_reflector(body: Any) -> bool:
    return isinstance(body, dict) and REFLECT_MARK in str(body.get("messages", [{}])[-1].get("content"))


def test_a_background_reflection_gives_way_too_and_is_kept_once(tmp_path: Path) -> None:
    counts = {"observer": 0, "reflector": 0}

    def reply(messages: list[dict[str, Any]], _tools: Any) -> str:
        if REFLECT_MARK in str(messages[-1]["content"]):
            counts["reflector"] += 1
            return "<observations>\nDate: Mar 3, 2025\n* 🔴 (09:00) Reflected summary.\n</observations>"
        if messages and messages[0]["content"] == OBSERVER_SYSTEM_PROMPT:
            counts["observer"] += 1
            return (f"<observations>\nDate: Mar 3, 2025\n* 🔴 (09:{counts['observer']:02d}) Observation number "
                    f"{counts['observer']} about the garden beds.\n</observations>")
        return "Reply " + "x " * 28

    exporter = InMemorySpanExporter()
    loopback = LoopbackServer(ScriptedModel(reply, name="server"), slots=1)
    with loopback:
        server = Server()
        server.loopback = loopback
        # (No turn here reaches reflection_block_after: a turn past it waits for the reflection on purpose.)
        store, memory, agent, model = setup(tmp_path, server, exporter, observation_tokens=60,
                                            reflection_block_after=100_000)
        # The turns that fill the log ask another model: a turn submits the background reflection before its own
        # call, so the reflector's call could start first and give way to that turn's call (its retry then answered,
        # no held call was left for the turn below: seen with the turn's call delayed, the likely cause of a failure
        # under load). Only that turn asks the reflector's server, once its call is held.
        filler = Agent("helper", instructions="Help.", model=ScriptedModel(lambda m, t: "Reply " + "x " * 28,
                                                                           name="filler"),
                       memory=memory, tracer=Tracer(exporter))
        try:
            loopback.stall_next(1, matching=is_reflector)  # the first reflector call is held by the server
            for i in range(20):
                ask(filler, i)
                wait_for(lambda: any(map(is_reflector, loopback.chat_requests())) or not memory.background.busy(),
                         "the background work settled or the reflector's request reached the server")
                if any(map(is_reflector, loopback.chat_requests())):
                    break
            else:
                raise AssertionError("no background reflection started")
            wait_for(lambda: TRAFFIC.in_flight(model), "the reflector's call is in flight")
            ask(agent, 100)  # the held reflector call gives way; without that this turn would time out
            assert [is_reflector(r.body) for r in loopback.abandoned] == [True]
            assert memory.wait_idle(30)
            record = load_current(store, thread_id="t")
        finally:
            store.close()
            model.close()
    # The reflection was made again after the turn and kept once (a buffered rewrite, or swapped in already).
    assert record is not None
    assert "Reflected summary." in (record.buffered_reflection or record.active_observations)
    assert counts["reflector"] == len([b for b in loopback.chat_requests() if is_reflector(b)]) - 1
    spans = exporter.spans
    reflector_calls = [s for s in spans if str(s.attributes.get("role", "")).startswith("reflector")]
    assert [bool(s.attributes.get("yielded")) for s in reflector_calls].count(True) == 1
    assert all(s.error is None for s in reflector_calls)
    steps = [s for s in spans if s.name == "memory: buffer reflection"]
    assert [bool(s.attributes.get("yielded")) for s in steps] == [True, False]
