"""Turn records and replay: record size and write time per turn, rebuild time, what-if over a thread.

Record: building it from the assembled prompt plus writing its row inside the turn's own transaction,
per live turn (aim: under 1 KB and under 0.5 ms for a typical turn). Sizes are given without tools and
with an agent of 30 tools of its own (aim: at most 200 B more per turn once the definitions are
stored, which happens once). Rebuild: ``assemble(as_of=...)`` of a recorded turn, and rebuilding one
model call (``turn_requests`` of a one-call turn; the later calls of a turn with tool calls).
What-if: ``memory.what_if`` over every turn of a long thread.

    .venv/bin/python bench/replay.py [--turns 200] [--thread 1000]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import core.agent as agent_module  # noqa: E402
from core import Memory, MemoryOptions, open_store  # noqa: E402
from core.agent import Agent  # noqa: E402
from core.embedding import HashingEmbedder  # noqa: E402
from core.agent import Tool  # noqa: E402
from core.llm import ScriptedModel, ScriptedReply, tool_call  # noqa: E402
from core.replay.capture import TurnCapture  # noqa: E402


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(int(len(ordered) * 0.95) - 1, 0)]


class Timing:
    """Times the two record steps of every turn: building (after the prompt) and writing (in the save)."""

    def __init__(self) -> None:
        self.build: list[float] = []
        self.write: list[float] = []
        self._capture = agent_module.capture_turn
        self._save = TurnCapture.commit

    def __enter__(self) -> "Timing":
        timing = self

        def capture(*args: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return timing._capture(*args, **kw)
            finally:
                timing.build.append((time.perf_counter() - start) * 1000)

        def save(self: TurnCapture, *args: Any, **kw: Any) -> None:
            start = time.perf_counter()
            try:
                timing._save(self, *args, **kw)
            finally:
                timing.write.append((time.perf_counter() - start) * 1000)

        agent_module.capture_turn = capture  # type: ignore[assignment]
        TurnCapture.commit = save  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        agent_module.capture_turn = self._capture
        TurnCapture.commit = self._save  # type: ignore[method-assign]


def tools(n: int) -> list[Tool]:
    """``n`` tools of the size real agents have: a description and a schema of two or three parameters."""
    def fn(args: dict[str, Any], _ctx: Any) -> Any:
        return {"ok": True}

    return [Tool(f"tool_{i:02d}", f"Look up item kind {i} in the catalogue and return its current details.", fn,
                 {"type": "object", "properties": {"query": {"type": "string", "description": "What to look for"},
                                                   "limit": {"type": "integer", "minimum": 1, "maximum": 50}},
                  "required": ["query"]}) for i in range(n)]


def record_cost(name: str, options: MemoryOptions, turns: int, n_tools: int = 0, **memory_kw: Any) -> float:
    """Record size and build + write time per turn; returns the median size in bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "bench.db")
        memory = Memory(store, options, **memory_kw)
        agent = Agent("bench", instructions="You are a helpful assistant. Answer briefly and kindly.",
                      model=ScriptedModel(lambda msgs, tools: f"reply to {len(msgs)} messages", name="bench"),
                      memory=memory, tracer=False, tools=tools(n_tools),
                      model_settings={"temperature": 0.2, "max_tokens": 256})
        for i in range(5):
            agent.generate(f"warm-up {i}", memory={"resource": "u", "thread": "warm"})
        with Timing() as timing:
            for i in range(turns):
                agent.generate(f"user message number {i} about topic {i % 13}", memory={"resource": "u", "thread": "t"})
        with sqlite3.connect(Path(tmp) / "bench.db") as con:
            sizes = [len(r[0]) + len(r[1] or "") for r in con.execute(
                "SELECT record, texts FROM memory_studio_turns WHERE thread_id = 't'")]
            stored_defs = sum(len(r[0]) + len(r[1]) for r in con.execute(
                "SELECT hash, definition FROM memory_studio_tool_defs")) + sum(
                len(r[0]) + len(r[1]) for r in con.execute("SELECT hash, members FROM memory_studio_tool_sets"))
        store.close()
    total = [b + w for b, w in zip(timing.build, timing.write)]
    once = f"; definitions stored once: {stored_defs:,} B" if n_tools else ""
    print(f"{name:<34} record median {statistics.median(sizes):5.0f} B (max {max(sizes)} B){once}; "
          f"build+write median {statistics.median(total):.3f} ms, p95 {_p95(total):.3f} ms "
          f"(build {statistics.median(timing.build):.3f} + write {statistics.median(timing.write):.3f})")
    return float(statistics.median(sizes))


def call_cost(turns: int) -> None:
    """Rebuilding one model call: a turn's only call, and the later calls of turns with a tool call."""
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "bench.db")
        memory = Memory(store, MemoryOptions(last_messages=10, working_memory={"enabled": True}))

        def reply(msgs: list[dict[str, Any]], _tools: Any) -> Any:
            if msgs[-1]["role"] == "user" and "look" in str(msgs[-1]["content"]):
                return ScriptedReply(tool_calls=(tool_call("tool_00", {"query": "x"}),))
            return "ok, noted"

        agent = Agent("bench", instructions="You are a benchmark.", model=ScriptedModel(reply, name="bench"),
                      memory=memory, tracer=False, tools=tools(30), model_settings={"temperature": 0.2})
        for i in range(turns):
            text = f"please look up item {i}" if i % 2 else f"message {i} about topic {i % 17}"
            agent.generate(text, memory={"resource": "u", "thread": "calls"})
        fresh = Memory(store)
        one: list[float] = []
        later: list[float] = []
        for turn in fresh.turns("calls"):
            start = time.perf_counter()
            bodies = fresh.turn_requests(turn.input_message_id)
            took = (time.perf_counter() - start) * 1000
            (one if len(bodies) == 1 else later).append(took / len(bodies))
        store.close()
    print(f"rebuild one model call (30-tool agent, history 10 + working memory, from a fresh Memory): "
          f"one-call turn median {statistics.median(one):.2f} ms (p95 {_p95(one):.2f}); "
          f"per call of a two-call turn median {statistics.median(later):.2f} ms (p95 {_p95(later):.2f})")


def replay_cost(turns: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "bench.db")
        memory = Memory(store, MemoryOptions(last_messages=10, working_memory={"enabled": True}))
        agent = Agent("bench", instructions="You are a benchmark.",
                      model=ScriptedModel(lambda msgs, tools: "ok, noted", name="bench"), memory=memory, tracer=False)
        for i in range(turns):
            agent.generate(f"message {i} about topic {i % 17}", memory={"resource": "u", "thread": "long"})
        ids = [t.input_message_id for t in memory.turns("long")]
        start = time.perf_counter()
        memory.turns("long")
        listing = (time.perf_counter() - start) * 1000
        steps = []
        for input_id in ids[:: max(len(ids) // 200, 1)]:
            start = time.perf_counter()
            prompt = memory.assemble(as_of=input_id)
            steps.append((time.perf_counter() - start) * 1000)
            assert prompt.replay is not None and prompt.replay.matches
        start = time.perf_counter()
        rows = list(memory.what_if("long", options={"last_messages": 4}))
        what_if = time.perf_counter() - start
        store.close()
    print(f"{turns}-turn thread: list turns {listing:.0f} ms; exact rebuild median {statistics.median(steps):.2f} ms, "
          f"p95 {_p95(steps):.2f} ms; what-if over all {len(rows)} turns {what_if:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200, help="live turns per configuration")
    parser.add_argument("--thread", type=int, default=1000, help="turns of the thread replayed")
    args = parser.parse_args()
    plain = record_cost("history 10 (typical)", MemoryOptions(last_messages=10), args.turns)
    with_tools = record_cost("history 10, 30 tools of its own", MemoryOptions(last_messages=10), args.turns, 30)
    print(f"{'':<34} a 30-tool agent adds {with_tools - plain:+.0f} B per turn once its definitions are stored")
    record_cost("history 10 + working memory", MemoryOptions(last_messages=10, working_memory={"enabled": True}),
                args.turns)
    record_cost("... + recall (top 4, range 1)", MemoryOptions(
        last_messages=10, working_memory={"enabled": True}, semantic_recall={"top_k": 4, "message_range": 1}),
        args.turns, embedder=HashingEmbedder())
    call_cost(min(args.turns, 200))
    replay_cost(args.thread)


if __name__ == "__main__":
    main()
