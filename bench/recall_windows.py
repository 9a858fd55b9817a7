"""Recall windows: the time to read every hit's neighbours for a turn (semantic recall's context
window), at top-k 4, 20 and 100, on libSQL and Postgres, this checkout against another one.

    .venv/bin/python bench/recall_windows.py --code /work/main [--rounds 3] [--calls 200] [--no-postgres]

One resource of 100,000 messages (50 threads of 2,000, a system message in ten) is built once per
backend by this checkout's code: a libSQL file and a database on a PostgreSQL started for the run
(the test suite's server helper). Then each round runs one process per checkout, alternately (the
other checkout first), each timing ``--calls`` reads per top-k of random hits (seeded: both read the
same hits) with the processor's default range, one message before and one after. A checkout that
has ``MemoryStore.message_windows`` reads the hits in one call; one without it makes a
``messages_with_context`` call per hit, as its recall processor does. Prints the median and p90
wall time per turn's read, and the statements each read ran.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
THREADS, PER_THREAD, TOP_KS = 50, 2_000, (4, 20, 100)


def _build(target: str) -> None:
    from core import Message, open_store

    store = open_store(target)
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    try:
        for t in range(THREADS):
            store.memory.create_thread(thread_id=f"t{t:02d}", resource_id="u1")
            batch = [
                Message.create(role="system" if i % 10 == 9 else ("user" if i % 2 == 0 else "assistant"),
                               parts=[{"type": "text", "text": f"message {i} of thread {t} about topic {i % 37}"}],
                               id=f"m{t:02d}-{i:05d}", thread_id=f"t{t:02d}", resource_id="u1",
                               created_at=t0 + timedelta(seconds=t * PER_THREAD + i))
                for i in range(PER_THREAD)
            ]
            for start in range(0, len(batch), 500):
                store.memory.save_messages(batch[start:start + 500])
    finally:
        store.close()


def _measure(target: str, calls: int) -> dict[str, Any]:
    import sqlalchemy as sa

    from core import open_store
    from core.storage.memory_store import Include

    store = open_store(target, read_only=True)
    memory = store.memory
    batched = hasattr(memory, "message_windows")
    statements = [0]

    def count(*_: Any) -> None:
        statements[0] += 1

    def read(ids: list[str]) -> int:
        if batched:
            windows = memory.message_windows([Include(i, None, 1, 1) for i in ids], resource_id="u1")
        else:
            windows = [memory.messages_with_context([Include(i, None, 1, 1)], resource_id="u1") for i in ids]
        return sum(len(w) for w in windows)

    ids = [f"m{t:02d}-{i:05d}" for t in range(THREADS) for i in range(PER_THREAD)]
    out: dict[str, Any] = {"batched": batched}
    try:
        for k in TOP_KS:
            rng = random.Random(k)
            hit_sets = [rng.sample(ids, k) for _ in range(calls)]
            for hits in hit_sets[:5]:  # warm: statement caches, pages
                read(hits)
            times, rows = [], 0
            for hits in hit_sets:
                began = time.perf_counter()
                rows += read(hits)
                times.append(time.perf_counter() - began)
            sa.event.listen(store.db.engine, "before_cursor_execute", count)
            statements[0] = 0
            read(hit_sets[0])
            sa.event.remove(store.db.engine, "before_cursor_execute", count)
            times.sort()
            out[str(k)] = {"median_ms": statistics.median(times) * 1e3, "p90_ms": times[int(len(times) * 0.9)] * 1e3,
                           "statements": statements[0], "rows": rows}
    finally:
        store.close()
    return out


def _run(code: Path, target: str, calls: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(code))
    done = subprocess.run([sys.executable, __file__, "--measure", target, "--calls", str(calls), "--code", str(code)],
                          env=env, cwd=str(code), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the measuring process failed with {code}:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", type=Path, default=None, help="the other checkout (e.g. /work/main)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200, help="reads timed per top-k")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        sys.path.insert(0, str(args.code or ROOT))
        print(json.dumps(_measure(args.measure, args.calls)))
        return
    sys.path.insert(0, str(ROOT))
    folder = Path(tempfile.mkdtemp(prefix="memory-studio-bench-windows-"))
    server = None
    try:
        targets = {"libsql": str(folder / "memory.db")}
        if not args.no_postgres:
            spec = importlib.util.spec_from_file_location("suite_conftest", ROOT / "tests" / "conftest.py")
            assert spec is not None and spec.loader is not None
            conftest = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(conftest)
            server = conftest.start_server(folder / "pg")
            targets["postgres"] = server.fresh_database()[0]
        for name, target in targets.items():
            began = time.perf_counter()
            _build(target)
            print(f"{name}: {THREADS * PER_THREAD:,} messages built in {time.perf_counter() - began:.1f} s", flush=True)
        checkouts = ([("other", args.code.resolve())] if args.code else []) + [("this", ROOT)]
        for r in range(args.rounds):
            for name, target in targets.items():
                for label, code in checkouts:
                    res = _run(code, target, args.calls)
                    line = "  ".join(
                        f"k={k} {res[str(k)]['median_ms']:.2f} ms (p90 {res[str(k)]['p90_ms']:.2f}, "
                        f"{res[str(k)]['statements']} st, {res[str(k)]['rows']} rows)" for k in TOP_KS)
                    how = "one call" if res["batched"] else "a call per hit"
                    print(f"round {r + 1} {name:8s} {label} ({code}, {how}): {line}", flush=True)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
