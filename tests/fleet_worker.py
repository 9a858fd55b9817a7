"""One process of a fleet: an agent with memory answering turns against a shared database.

Run as ``python tests/fleet_worker.py URL WORKER TURNS``. Each turn saves a user and an assistant
message on one of two shared threads of one resource and merges one working-memory field through
the model's tool call (``w<worker>_<turn>``). Prints ``ok <turns> <seconds>`` when done. Used by
``tests/core/test_postgres_fleet.py`` and ``bench/scale.py --only fleet``.
"""

from __future__ import annotations

import sys
import time

RESOURCE = "fleet-user"
THREADS = ("fleet-a", "fleet-b")


def fields(workers: int, turns: int) -> list[str]:
    return [f"w{w}_{t}" for w in range(workers) for t in range(turns)]


def main(url: str, worker: int, turns: int) -> None:
    from core import Memory, MemoryOptions, open_store
    from core.agent import Agent
    from core.llm import ScriptedModel, ScriptedReply, tool_call

    script: list[object] = []
    for t in range(turns):
        script.append(ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": {f"w{worker}_{t}": "x"}}),)))
        script.append(f"reply {worker}.{t}")
    store = open_store(url)
    memory = Memory(store, MemoryOptions(last_messages=6, working_memory={
        "enabled": True, "schema": {"type": "object", "additionalProperties": {"type": "string"}}}))
    agent = Agent("fleet", instructions="Be brief.", model=ScriptedModel(script), memory=memory, tracer=False)
    start = time.perf_counter()
    for t in range(turns):
        agent.generate(f"message {worker}.{t}", memory={"resource": RESOURCE, "thread": THREADS[t % 2]})
    print(f"ok {turns} {time.perf_counter() - start:.3f}", flush=True)
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
