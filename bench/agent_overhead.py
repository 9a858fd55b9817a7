"""Time per agent turn spent outside the model (processors, storage, tracing), with a scripted model.

Configurations: history only; history + working memory + semantic recall; observational memory;
observational memory while observations are made (synchronous vs buffered in the background, with
an observer and an actor that take real time). Also span write throughput into DuckDB. Aim: at most
3 ms median per turn with history + working memory, traced to DuckDB.

Each line gives the wall-clock median and p95 per turn, and the CPU the turn's own thread used
(median; the model's share subtracted), which a loaded machine inflates far less than the wall
clock; ``bg`` is the CPU other threads of the process used per turn (the span writer), on average.

    .venv/bin/python bench/agent_overhead.py [--turns 200] [--om-turns 60] [--only om-buffering|history-wm]
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
        self.spent_cpu = 0.0

    def generate(self, messages, **kw):  # type: ignore[no-untyped-def]
        start, start_cpu = time.perf_counter(), time.thread_time()
        try:
            return self.inner.generate(messages, **kw)
        finally:
            self.spent += time.perf_counter() - start
            self.spent_cpu += time.thread_time() - start_cpu

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
        overheads, cpu = [], []
        process_start, thread_total = time.process_time(), 0.0
        for i in range(turns):
            model.spent = model.spent_cpu = 0.0
            start_cpu = time.thread_time()
            start = time.perf_counter()
            agent.generate(f"user message number {i} about topic {i % 13}", memory={"resource": "u", "thread": "t"})
            overheads.append((time.perf_counter() - start - model.spent) * 1000)
            used = time.thread_time() - start_cpu
            thread_total += used
            cpu.append((used - model.spent_cpu) * 1000)
        background = (time.process_time() - process_start - thread_total) * 1000 / turns
        store.close()
    overheads.sort()
    p95 = overheads[int(len(overheads) * 0.95) - 1]
    print(f"{name:<38} median {statistics.median(overheads):7.2f} ms   p95 {p95:7.2f} ms   "
          f"cpu {statistics.median(cpu):6.2f} ms   bg {background:6.2f} ms   ({turns} turns)")


OM_OBSERVER_SECONDS = 0.12  # what one observer call takes (a small remote model)
OM_ACTOR_SECONDS = 0.06  # what one reply of the agent's model takes


def counts(turns: int) -> None:
    """What a history + working-memory turn traced to DuckDB does, counted rather than timed (a loaded
    machine changes the times, not these): SQL statements, write transactions and pool checkouts per turn, Python
    function calls per turn (cProfile), how many times the span writer wrote to the trace file and how
    many times a DuckDB connection was opened (the writer keeps its own open between writes)."""
    import cProfile
    import pstats

    import sqlalchemy as sa

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "bench.db")
        memory = Memory(store, MemoryOptions(last_messages=10, working_memory={"enabled": True}))
        agent = Agent("bench", instructions="You are a benchmark.", model=ScriptedModel(
            lambda msgs, tools: f"reply to {len(msgs)} messages", name="bench"), memory=memory)
        for i in range(5):
            agent.generate(f"warm-up {i}", memory={"resource": "u", "thread": "t"})
        memory.turn_tracer().flush(5)
        sink = memory.turn_tracer().exporter
        sink = getattr(sink, "store", None) or next(e.store for e in sink.exporters if hasattr(e, "store"))
        writes = [0]
        real_write = sink.write_spans

        def counted_write(spans, budget_s=None):  # type: ignore[no-untyped-def]
            writes[0] += 1
            return real_write(spans, budget_s)

        sink.write_spans = counted_write
        import duckdb

        opens = [0]
        real_connect = duckdb.connect

        def counted_connect(*args, **kwargs):  # type: ignore[no-untyped-def]
            opens[0] += 1
            return real_connect(*args, **kwargs)

        duckdb.connect = counted_connect
        statements, transactions, checkouts = [0], [0], [0]
        sa.event.listen(store.db.engine, "before_cursor_execute",
                        lambda *a: statements.__setitem__(0, statements[0] + 1))
        sa.event.listen(store.db.engine, "checkout", lambda *a: checkouts.__setitem__(0, checkouts[0] + 1))
        before = store.db.write_transactions
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        for i in range(turns):
            agent.generate(f"user message number {i} about topic {i % 13}", memory={"resource": "u", "thread": "t"})
        profile.disable()
        elapsed = time.perf_counter() - start
        transactions[0] = store.db.write_transactions - before
        calls = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
        store.close()
        duckdb.connect = real_connect
    print(f"per turn: {statements[0] / turns:.1f} SQL statements, {transactions[0] / turns:.1f} write transactions, "
          f"{checkouts[0] / turns:.1f} connection checkouts, "
          f"{calls / turns:,.0f} Python function calls; span-file writes: {writes[0]} in {turns} turns, "
          f"file opens: {opens[0]} ({elapsed:.1f} s under the profiler)")


def om_buffering(turns: int) -> None:
    """The turn's own time (everything but the agent's model call) while observations are made:
    synchronous observation puts the observer call in the turn that crosses the threshold; buffered,
    it runs in the background during later turns and the threshold turn only activates."""
    observation = ("<observations>\nDate: Jan 2, 2026\n* 🔴 (10:00) The user talked about topic {n}.\n"
                   "</observations>\n<current-task>\nPrimary: topic {n}\n</current-task>")
    for mode, buffer_tokens in (("synchronous (buffer_tokens=False)", False), ("buffered in the background", 0.2)):
        calls = {"n": 0}

        def observer(messages, tools):  # type: ignore[no-untyped-def]
            calls["n"] += 1
            time.sleep(OM_OBSERVER_SECONDS)
            return observation.format(n=calls["n"])

        def actor(messages, tools):  # type: ignore[no-untyped-def]
            time.sleep(OM_ACTOR_SECONDS)
            return "A reply about the topic, long enough to count: " + "words " * 25

        with tempfile.TemporaryDirectory() as tmp:
            store = open_store(Path(tmp) / "bench.db")
            memory = Memory(store, MemoryOptions(observational_memory={
                "message_tokens": 400, "observation_tokens": 10**9, "buffer_tokens": buffer_tokens}),
                observer_model=ScriptedModel(observer, name="observer"))
            model = TimedModel(ScriptedModel(actor, name="actor"))
            agent = Agent("bench", instructions="You are a benchmark.", model=model, memory=memory,  # type: ignore[arg-type]
                          tracer=False)
            own, blocked = [], 0
            for i in range(turns):
                model.spent = 0.0
                start = time.perf_counter()
                result = agent.generate(f"user message {i}: " + "about the topic " * 8,
                                        memory={"resource": "u", "thread": "t"})
                own.append((time.perf_counter() - start - model.spent) * 1000)
                notes = result.prompts[0].notes.get("observational-memory", {})
                blocked += bool(notes.get("blocked")) or "observed" in notes
            memory.wait_idle(60)
            store.close()
        own.sort()
        p95 = own[int(len(own) * 0.95) - 1]
        print(f"OM while observing, {mode:<34} median {statistics.median(own):7.2f} ms   p95 {p95:7.2f} ms   "
              f"max {own[-1]:7.2f} ms   turns that waited for the observer {blocked}/{turns}   "
              f"observer calls {calls['n']} ({OM_OBSERVER_SECONDS * 1000:.0f} ms each; actor "
              f"{OM_ACTOR_SECONDS * 1000:.0f} ms)")


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
    parser.add_argument("--om-turns", type=int, default=60)
    parser.add_argument("--only", choices=("om-buffering", "history-wm", "counts"), default=None)
    args = parser.parse_args()
    if args.only == "om-buffering":
        om_buffering(args.om_turns)
        return
    if args.only == "counts":
        counts(args.turns)
        return
    if args.only == "history-wm":  # the issue-20 figure: history + working memory, traced to DuckDB
        run("history + working memory, traced (default)",
            MemoryOptions(last_messages=10, working_memory={"enabled": True}), args.turns, tracer=None)
        run("history + working memory, untraced", MemoryOptions(last_messages=10, working_memory={"enabled": True}),
            args.turns)
        return
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
    om_buffering(args.om_turns)
    span_throughput()


if __name__ == "__main__":
    main()
