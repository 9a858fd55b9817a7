"""A fleet on one Postgres database: four processes run agents at once; nothing is lost."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core import Memory, MemoryOptions, open_store

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "fleet_worker.py"
WORKERS, TURNS = 4, 12


@pytest.mark.slow
def test_four_processes_lose_no_message_and_no_working_memory_field(pg_url: str) -> None:
    with open_store(pg_url):
        pass  # migrate once up front, as a deployment would before starting its workers
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MEMORY_STUDIO_TRACING": "off"}
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), pg_url, str(w), str(TURNS)], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(WORKERS)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0 and out.startswith("ok"), err[-3000:]
    with open_store(pg_url) as store:
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "schema": {"type": "object"}}))
        texts = []
        for thread in ("fleet-a", "fleet-b"):
            texts += [m.text for m in memory.recall(thread_id=thread, per_page=False).messages]
        wm = memory.get_working_memory(resource_id="fleet-user")
    expected_users = {f"message {w}.{t}" for w in range(WORKERS) for t in range(TURNS)}
    expected_replies = {f"reply {w}.{t}" for w in range(WORKERS) for t in range(TURNS)}
    assert len(texts) == 2 * WORKERS * TURNS
    assert set(texts) == expected_users | expected_replies
    assert wm == {f"w{w}_{t}": "x" for w in range(WORKERS) for t in range(TURNS)}
