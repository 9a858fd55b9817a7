"""A user's own chat model as the background observer, on a one-slot server: what giving way does.

Before, a model that was not ``OpenAICompatibleModel`` but had a ``base_url`` was "flagged but not
stopped": a turn's call set its background call's flag, and its span said the observer had given way
(``backgroundYielded``), while the call went on holding the server and the turn queued behind it; the
call's reply was then used anyway. Now:

- a model whose call hands over its connection (``current_call().attach``) or a stop (``on_cancel``) is
  stopped: a wrapper around ``OpenAICompatibleModel`` does so without knowing, a model sending its own
  requests can do it in two lines; the error its stopped request raises is the call giving way;
- a model that does not cannot be stopped once its call has started: the turn's span says so
  (``backgroundKept``, "cannot stop"), not that it gave way, and the call's reply is kept.

Loopback server with one slot; the observer's first request is held (``stall_next``) until released or
until its client hangs up. No timed assertions.
"""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from core import Agent, Memory, MemoryOptions, open_store
from core.llm import ChatResult, LoopbackServer, OpenAICompatibleModel, RetryPolicy
from core.llm.yielding import KEPT_CANNOT_STOP, TRAFFIC, current_call, server_of
from core.observational import load_current
from core.tokens import EstimatingTokenizer
from core.traces.tracer import InMemorySpanExporter, Tracer
from tests.core.test_om_yield_to_turns import WORDS, Server, wait_for


class Wrapper:
    """A user's model that adds something around ``OpenAICompatibleModel`` (here nothing) and delegates."""

    def __init__(self, inner: OpenAICompatibleModel) -> None:
        self.inner = inner
        self.model_id = "custom/wrapped"
        self.provider = "custom"
        self.base_url = inner.base_url

    def generate(self, messages: list[Any], **kwargs: Any) -> ChatResult:
        return self.inner.generate(messages, **kwargs)

    def stream(self, messages: list[Any], **kwargs: Any) -> Any:
        return self.inner.stream(messages, **kwargs)

    def describe(self) -> dict[str, Any]:
        return {"model_id": self.model_id}


class OwnRequests:
    """A user's model that sends its requests itself (``http.client``); ``hands_over``: it gives its
    background call the connection, as ``core.llm.yielding`` describes."""

    provider = "custom"

    def __init__(self, base_url: str, *, hands_over: bool) -> None:
        self.base_url = base_url
        self.model_id = "custom/own-requests"
        self.hands_over = hands_over

    def generate(self, messages: list[Any], *, temperature: float | None = None, **_: Any) -> ChatResult:
        url = urlsplit(self.base_url)
        conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=120)
        try:
            conn.connect()
            call = current_call()
            if call is not None and self.hands_over:
                call.attach(conn.sock)
            conn.request("POST", f"{url.path}/chat/completions", headers={"Content-Type": "application/json"},
                         body=json.dumps({"model": "local", "messages": messages, "temperature": temperature}))
            data = json.loads(conn.getresponse().read())
        finally:
            conn.close()
        return ChatResult(text=data["choices"][0]["message"]["content"], model_id=self.model_id)

    def stream(self, messages: list[Any], **kwargs: Any) -> Any:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"model_id": self.model_id}


def run(tmp_path: Path, server: Server, observer: Any, model: OpenAICompatibleModel,
        exporter: InMemorySpanExporter, *, queued: bool) -> Any:
    """Turn 0 starts the observer (held by the server); turn 1 is asked while it holds the slot.
    ``queued``: turn 1 is expected to wait behind it (it is answered once the test releases the observer)."""
    tracer = Tracer(exporter)
    store = open_store(tmp_path / "m.db")
    memory = Memory(store, MemoryOptions(observational_memory={"message_tokens": 200, "observation_tokens": 5000,
                                                               "timeout": 120}),
                    tokenizer=EstimatingTokenizer(), observer_model=observer, tracer=tracer)
    agent = Agent("helper", instructions="Help.", model=model, memory=memory, tracer=tracer)

    def ask(i: int) -> str:
        return agent.generate(f"Question {i}: {WORDS}", memory={"resource": "u", "thread": "t"}).text

    try:
        ask(0)
        wait_for(lambda: len(server.observer_requests()) == 1, "the observer's request reached the server")
        assert [c.label for c in TRAFFIC.in_flight(model)] == ["observer"]
        if queued:
            answers: list[str] = []
            worker = threading.Thread(target=lambda: answers.append(ask(1)), daemon=True)
            worker.start()
            wait_for(lambda: len(server.loopback.chat_requests()) == 3, "the turn's request reached the server")
            assert not answers and not server.loopback.abandoned  # it waits for the slot the observer holds
            server.loopback.release()
            worker.join(60)
            assert answers and answers[0].startswith("Reply")
        else:
            assert ask(1).startswith("Reply")
        assert memory.wait_idle(30)
        return load_current(store, thread_id="t")
    finally:
        store.close()


def turn_calls(exporter: InMemorySpanExporter) -> list[Any]:
    return [s for s in exporter.spans if s.span_type == "model_generation" and s.name.startswith("llm:")]


@pytest.mark.parametrize("kind", ["wrapper", "own requests, connection handed over"])
def test_a_custom_observer_model_that_hands_over_its_connection_gives_way(tmp_path: Path, kind: str) -> None:
    server = Server()
    exporter = InMemorySpanExporter()
    with server.loopback:
        model = OpenAICompatibleModel("local", base_url=server.loopback.base_url, api_key="k", api_key_env=None,
                                      keyring_service=None, retry=RetryPolicy(max_retries=0))
        observer = Wrapper(model) if kind == "wrapper" else OwnRequests(model.base_url, hands_over=True)
        try:
            record = run(tmp_path, server, observer, model, exporter, queued=False)
        finally:
            model.close()
    # Turn 1 got the slot because the observer's request was hung up; the observer ran again afterwards.
    assert [r.body["messages"][0]["content"] for r in server.loopback.abandoned] == [
        server.observer_requests()[0]["messages"][0]["content"]]
    assert record is not None and record.buffered[0].observations.endswith("Observation 1.")
    assert [s.attributes.get("backgroundYielded") for s in turn_calls(exporter)] == [
        None, [{"call": "observer", "server": server_of(model)}]]
    observer_calls = [s for s in exporter.spans if s.attributes.get("role") == "observer"]
    assert observer_calls[0].attributes["yielded"]["to"] == model.model_id
    assert all(s.error is None for s in observer_calls)


def test_a_custom_observer_model_that_cannot_be_stopped_is_not_said_to_give_way_and_its_reply_is_kept(
        tmp_path: Path) -> None:
    server = Server()
    exporter = InMemorySpanExporter()
    with server.loopback:
        model = OpenAICompatibleModel("local", base_url=server.loopback.base_url, api_key="k", api_key_env=None,
                                      keyring_service=None, retry=RetryPolicy(max_retries=0))
        try:
            record = run(tmp_path, server, OwnRequests(model.base_url, hands_over=False), model, exporter,
                         queued=True)
        finally:
            model.close()
    assert not server.loopback.abandoned
    # The held call's reply made the first chunk (before, it was flagged as cancelled and used anyway).
    assert record is not None and record.buffered[0].observations.endswith("Observation 1.")
    calls = turn_calls(exporter)
    assert [s.attributes.get("backgroundYielded") for s in calls] == [None, None]
    assert calls[1].attributes["backgroundKept"] == [
        {"call": "observer", "server": server_of(model), "reason": KEPT_CANNOT_STOP}]
    first = next(s for s in exporter.spans if s.attributes.get("role") == "observer")
    assert first.error is None and "yielded" not in first.attributes
    assert first.attributes["notYielded"] == [{"to": model.model_id, "reason": KEPT_CANNOT_STOP}]
