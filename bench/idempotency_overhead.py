"""Per-request cost of an Idempotency-Key: sequential plain turns through the openai client, with and without a key,
and a replay, against a gateway on a thread (a scripted model; libSQL file, or a Postgres URL as the argument).

    .venv/bin/python bench/idempotency_overhead.py [postgresql://...]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import openai  # noqa: E402
from core import Memory, MemoryOptions, open_store  # noqa: E402
from core.agent import Agent  # noqa: E402
from core.gateway import GatewayServer, create_app  # noqa: E402
from core.llm import ScriptedModel  # noqa: E402

target = sys.argv[1] if len(sys.argv) > 1 else str(Path(tempfile.mkdtemp()) / "m.db")
store = open_store(target)
memory = Memory(store, MemoryOptions(last_messages=10))
agent = Agent("echo", instructions="Echo.", model=ScriptedModel(lambda m, t: "ok"), memory=memory, tracer=False)
N = 150
with GatewayServer(create_app([agent])) as server:
    client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=60)
    def run(keyed, label):
        times = []
        for i in range(N):
            h = {"Idempotency-Key": uuid.uuid4().hex} if keyed else {}
            t = time.perf_counter()
            client.chat.completions.create(model="echo", messages=[{"role": "user", "content": f"m{i}"}],
                                           metadata={"thread_id": f"{label}-{i % 10}", "resource_id": "r"}, extra_headers=h)
            times.append((time.perf_counter() - t) * 1000)
        return times
    run(False, "warm")
    res = {}
    for rnd in range(2):
        for keyed in (False, True):
            res.setdefault(keyed, []).extend(run(keyed, f"{'k' if keyed else 'p'}{rnd}"))
    for keyed, times in res.items():
        q = statistics.quantiles(times, n=20)
        print(f"{'with key' if keyed else 'no key  '}: p50 {statistics.median(times):.2f} ms  p95 {q[18]:.2f} ms  (n={len(times)})")
    # a replay
    h = {"Idempotency-Key": "replay-me"}
    client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "x"}], metadata={"thread_id": "rp", "resource_id": "r"}, extra_headers=h)
    times = []
    for i in range(N):
        t = time.perf_counter()
        client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "x"}], metadata={"thread_id": "rp", "resource_id": "r"}, extra_headers=h)
        times.append((time.perf_counter() - t) * 1000)
    print(f"replay  : p50 {statistics.median(times):.2f} ms  p95 {statistics.quantiles(times, n=20)[18]:.2f} ms  (n={N})")
store.close()
