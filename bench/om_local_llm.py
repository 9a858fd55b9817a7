"""Observational memory with background buffering against a real OpenAI-compatible server.

A local llama.cpp server (``/work/llm/serve.py PORT``, SmolLM2-135M; see the local-llm notes) is the
agent's model and, through the defaults, the observer, the reflector and the title model. Runs a
conversation of ``--turns`` turns and prints, per turn, what the turn cost and what buffering did
(activated chunks, whether the turn waited), then the record: the log, the buffer, the events, the
generated title. Skips cleanly when no server answers.

    /work/llm/venv/bin/python /work/llm/serve.py 18519 &
    .venv/bin/python bench/om_local_llm.py --base-url http://127.0.0.1:18519/v1 [--turns 30]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core import Agent, Memory, MemoryOptions, open_store  # noqa: E402
from core.llm.providers import resolve_model  # noqa: E402
from core.observational import load_history  # noqa: E402

TOPICS = [
    "I'm Ada and I live in Lisbon.", "I'm planning a trip to Oslo in March.", "I am allergic to peanuts.",
    "My sister Eva is visiting next week.", "I work as a nurse on night shifts.", "I want to learn Norwegian.",
    "I booked the flight for March 9.", "My cat is called Pixel.", "I prefer trains over planes in Norway.",
    "I need a warm coat for Oslo.",
]


def reachable(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=3) as reply:
            return reply.status == 200
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", default="http://127.0.0.1:18519/v1")
    parser.add_argument("--model", default="llamacpp/smollm2-135m")
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--message-tokens", type=int, default=600)
    parser.add_argument("--observation-tokens", type=int, default=900)
    parser.add_argument("--observer-max-tokens", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=300.0, help="per model call, seconds")
    args = parser.parse_args()
    if not reachable(args.base_url):
        print(f"skipped: no OpenAI-compatible server at {args.base_url} (start /work/llm/serve.py)")
        return 0
    os.environ["LLAMACPP_BASE_URL"] = args.base_url
    model = resolve_model(args.model, context_window=4096, timeout=args.timeout)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "om.db")
        memory = Memory(store, MemoryOptions(
            observational_memory={"message_tokens": args.message_tokens,
                                  "observation_tokens": args.observation_tokens,
                                  "max_output_tokens": args.observer_max_tokens, "timeout": args.timeout},
            generate_title=True))
        agent = Agent("local", instructions="You are a helpful assistant. Answer in one or two sentences.",
                      model=model, memory=memory, tracer=False, model_settings={"max_tokens": 60})
        where = {"resource": "ada", "thread": "chat"}
        started = time.perf_counter()
        try:
            converse(agent, where, args.turns)
        finally:
            report(memory, store, args.turns, started)
        store.close()
    return 0


def converse(agent: Agent, where: dict[str, str], turns: int) -> None:
    for i in range(turns):
        text = f"{TOPICS[i % len(TOPICS)]} (message {i + 1})"
        t0 = time.perf_counter()
        try:
            result = agent.generate(text, memory=where)
        except Exception as exc:  # noqa: BLE001 - a real server: report and go on
            print(f"turn {i + 1:2d}: failed: {type(exc).__name__}: {exc}", flush=True)
            continue
        notes = result.prompts[0].notes.get("observational-memory", {})
        buffer = notes.get("buffer") or {}
        print(f"turn {i + 1:2d}: {time.perf_counter() - t0:5.2f} s  pending {notes.get('unobservedTokens', 0):4d}  "
              f"buffered {buffer.get('chunks', 0)}  activated {json.dumps(notes.get('activated'))}  "
              f"waited {notes.get('blocked')}  prompt {result.prompts[0].total_tokens} tokens"
              + (f"  note: {notes['observationError'][:90]}" if notes.get("observationError") else ""), flush=True)


def report(memory: Memory, store: Any, turns: int, started: float) -> None:
    idle = memory.wait_idle(300)
    print(f"\n{turns} turns in {time.perf_counter() - started:.1f} s; background work settled: {idle}")
    thread = memory.get_thread("chat")
    print(f"title: {thread.title!r}" if thread else "no thread")
    for record in load_history(store, thread_id="chat"):
        print(f"\ngeneration {record.generation_count} ({record.origin_type}): "
              f"{record.observation_token_count} log tokens, {len(record.chunks)} chunks, "
              f"{len(record.buffered)} buffered, pending {record.pending_message_tokens}")
        kinds: dict[str, int] = {}
        for event in record.studio.get("events", []):
            kinds[event["kind"]] = kinds.get(event["kind"], 0) + 1
        print(f"events (last {len(record.studio.get('events', []))}): {kinds}")
        if record.studio.get("observerBackoff"):
            print(f"observer back-off: {record.studio['observerBackoff']}")
        print("log:\n" + record.active_observations[:1500])


if __name__ == "__main__":
    raise SystemExit(main())
