"""A lone surrogate cannot stop tracing (issue 17, item 11): it is refused at the agent's boundary, also
through the gateway, and a span batch that fails for such a reason is set aside as a poison pill."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core import Memory, MemoryOptions, Message, open_store
from core.agent import Agent
from core.gateway import GatewayServer, create_app
from core.llm import ScriptedModel
from core.storage import InvalidArgumentError
from core.traces.exporter import DuckDBSpanExporter
from core.traces.store import DuckDBObservabilityStore

from .test_traces_store import agent_trace, span


def test_generate_refuses_a_lone_surrogate_before_anything_runs(store):
    memory = Memory(store, MemoryOptions(last_messages=5))
    model = ScriptedModel(lambda m, t: "ok")
    agent = Agent("a", instructions="x", model=model, memory=memory, tracer=False)
    for bad in ("x\ud800y", Message.user("fine\udfff"), ["ok", Message.user("a\ud83d")]):
        with pytest.raises(InvalidArgumentError, match=r"lone surrogate \(U\+D[89A-F]"):
            agent.generate(bad, memory={"thread": "t", "resource": "r"})
        with pytest.raises(InvalidArgumentError, match="lone surrogate"):
            list(agent.stream(bad, memory={"thread": "t", "resource": "r"}))
    assert model.requests == [] and memory.get_thread("t") is None
    assert agent.generate("x\U0001F600y", memory={"thread": "t", "resource": "r"}).text == "ok"  # a real pair


def test_the_gateway_answers_400(store):
    memory = Memory(store, MemoryOptions(last_messages=5))
    agent = Agent("a", instructions="x", model=ScriptedModel(lambda m, t: "ok"), memory=memory, tracer=False)
    with GatewayServer(create_app([agent], token="")) as server:
        for stream in (False, True):
            conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
            body = '{"model": "a", "stream": %s, "messages": [{"role": "user", "content": "x\\ud800y"}]}' % (
                "true" if stream else "false")
            conn.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
            response = conn.getresponse()
            reply = json.loads(response.read())
            conn.close()
            assert response.status == 400 and "lone surrogate (U+D800)" in reply["error"]["message"]


def test_a_poison_span_is_set_aside_and_the_others_are_stored(tmp_path: Path):
    path = tmp_path / "observability.duckdb"
    exporter = DuckDBSpanExporter(path, background=False)
    try:
        poison = span("bad", "s1", None, "agent run: 'x\ud800'", "agent_run", 0, input={"message": "x\ud800y"})
        exporter.export([*agent_trace("before"), poison, *agent_trace("alongside")])
        assert exporter.flush(timeout=30.0)
        exporter.export(agent_trace("after"))  # the flusher goes on: later spans are stored too
        assert exporter.flush(timeout=30.0)
    finally:
        exporter.shutdown(2.0)
    assert exporter.stats.poisoned == 1 and exporter.queued == 0
    traces = sorted(t.trace_id for t in DuckDBObservabilityStore(path, read_only=True).list_traces())
    assert traces == ["after", "alongside", "before"]
    kept = list(tmp_path.glob("observability.duckdb.poison-*.jsonl"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["spanId"] == "s1"


def test_queued_spans_survive_exit_with_a_poison_span_among_them(tmp_path: Path):
    """At exit the queue is spilled; a surrogate used to make the spill itself fail and lose it all."""
    script = textwrap.dedent(f'''
        from pathlib import Path
        from core.traces.exporter import DuckDBSpanExporter
        from core.traces.locking import StoreBusy
        from tests.core.test_traces_store import agent_trace, span

        class Busy:  # the store stays busy until exit: everything is still queued then
            path = Path({str(tmp_path / "observability.duckdb")!r})
            retention = None
            def write_spans(self, spans, budget_s=None):
                raise StoreBusy(self.path, 0.0)

        exporter = DuckDBSpanExporter(Busy(), background=False, prune_interval_s=None)
        exporter.export([*agent_trace("one"), span("bad", "s1", None, "x\\ud800", "agent_run", 0)])
    ''')
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[2], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    exporter = DuckDBSpanExporter(tmp_path / "observability.duckdb", background=False)
    try:
        assert exporter.flush(timeout=30.0)
    finally:
        exporter.shutdown(2.0)
    assert exporter.stats.poisoned == 1
    store = DuckDBObservabilityStore(tmp_path / "observability.duckdb", read_only=True)
    assert [t.trace_id for t in store.list_traces()] == ["one"]
