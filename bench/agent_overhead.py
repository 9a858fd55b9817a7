"""Time per agent turn spent outside the model (processors, storage, tracing), with a scripted model.

Configurations: history only; history + working memory + semantic recall; observational memory.
Also span write throughput into DuckDB. Aim: under 5 ms of overhead per turn without recall.

    .venv/bin/python bench/agent_overhead.py [--turns 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core import Memory, MemoryOptions, open_store  # noqa: E402
from core.agent import Agent  # noqa: E402
from core.llm import ScriptedModel  # noqa: E402


class TimedModel:
    """Wraps the scripted model and accumulates the time spent inside it, so it can be subtracted."""

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.provider = inner.provider
        self.spent = 0.0

    def generate(self, messages, **kw):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        try:
            return self.inner.generate(messages, **kw)
        finally:
            self.spent += time.perf_counter() - start

    def describe(self):  # type: ignore[no-untyped-def]
        return self.inner.describe()


def run(name: str, options: MemoryOptions, turns: int, *, embedder=None, tracer=False, observer=None) -> None:  # type: ignore[no-untyped-def]
    """``tracer``: False = untraced, None = the default (spans queued for the DuckDB file)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "bench.db")
        memory = Memory(store, options, embedder=embedder, observer_model=observer)
        model = TimedModel(ScriptedModel(lambda msgs, tools: f"reply to {len(msgs)} messages", name="bench"))
        agent = Agent("bench", instructions="You are a benchmark.", model=model, memory=memory,  # type: ignore[arg-type]
                      tracer=tracer)
        for i in range(5):  # warm-up: tokenizer, model session, caches
            agent.generate(f"warm-up {i}", memory={"resource": "u", "thread": "warm"})
        overheads = []
        for i in range(turns):
            model.spent = 0.0
            start = time.perf_counter()
            agent.generate(f"user message number {i} about topic {i % 13}", memory={"resource": "u", "thread": "t"})
            overheads.append((time.perf_counter() - start - model.spent) * 1000)
        store.close()
    overheads.sort()
    p95 = overheads[int(len(overheads) * 0.95) - 1]
    print(f"{name:<38} median {statistics.median(overheads):7.2f} ms   p95 {p95:7.2f} ms   ({turns} turns)")


def span_throughput() -> None:
    from core.traces.store import DuckDBObservabilityStore
    from core.traces.tracer import InMemorySpanExporter, Tracer

    exporter = InMemorySpanExporter()
    tracer = Tracer(exporter)
    for i in range(2000):
        with tracer.start_span(f"span {i}", "processor_run", new_trace=i % 10 == 0, attributes={"i": i}):
            pass
    spans = list(exporter.spans)
    with tempfile.TemporaryDirectory() as tmp:
        store = DuckDBObservabilityStore(Path(tmp) / "obs.duckdb")
        start = time.perf_counter()
        for i in range(0, len(spans), 100):
            store.write_spans(spans[i:i + 100])
        rate = len(spans) / (time.perf_counter() - start)
        store.close()
    print(f"{'span writes into DuckDB (batches of 100)':<38} {rate:10,.0f} spans/s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    run("history only, untraced", MemoryOptions(last_messages=10), args.turns)
    run("history only, traced to DuckDB (default)", MemoryOptions(last_messages=10), args.turns, tracer=None)
    run("history + working memory, untraced", MemoryOptions(last_messages=10, working_memory={"enabled": True}),
        args.turns)
    run("history + working memory, traced (default)",
        MemoryOptions(last_messages=10, working_memory={"enabled": True}), args.turns, tracer=None)
    try:
        from core.embedding import default_embedder

        embedder = default_embedder()
        run("history + working memory + recall, untraced", MemoryOptions(
            last_messages=10, working_memory={"enabled": True}, semantic_recall=True), args.turns, embedder=embedder)
    except Exception as exc:  # noqa: BLE001
        print(f"history + working memory + recall: skipped ({exc})")
    run("observational memory, untraced", MemoryOptions(observational_memory={"enabled": True, "message_tokens": 10**9}),
        args.turns, observer=ScriptedModel(lambda m, t: "<observations>\n</observations>", name="observer"))
    span_throughput()


if __name__ == "__main__":
    main()
