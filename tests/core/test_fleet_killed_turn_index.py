"""A serving process killed (SIGKILL) right after a turn's save commits: what it saved is in the recall
index all the same (found by ``bench/faults.py --fleet``: on Postgres, a gateway killed mid-turn left the
turn's messages stored without vectors, which no later turn or process added, so vector recall never found
them until someone ran ``memory-studio reindex``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core import open_store

pytestmark = pytest.mark.backends

REPO = Path(__file__).resolve().parents[2]

# The child runs one agent turn with semantic recall and dies the moment the turn's save returns (its
# transaction committed): a SIGKILL at that point, sent by the process to itself, not at a guessed time.
CHILD = textwrap.dedent('''
    import os, signal, sys

    from core.agent import Agent
    from core.llm import ScriptedModel
    from core.memory import Memory
    from fleet_worker import fleet_memory

    memory = fleet_memory(sys.argv[1])
    saved_turn = Memory._save_turn

    def save_then_die(self, messages, **kwargs):
        saved = saved_turn(self, messages, **kwargs)
        sys.stdout.write("saved " + " ".join(m.id for m in saved) + "\\n")
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    Memory._save_turn = save_then_die
    agent = Agent("fleet", instructions="Answer.", model=ScriptedModel(["Noted: zanzibar marmalade."]),
                  memory=memory, tracer=False)
    agent.generate("<<u:ann>> ann-t0 q1 zanzibar marmalade", memory={"resource": "ann", "thread": "ann-t0"})
''')


def test_a_turn_killed_after_its_save_is_in_the_recall_index(db_path):
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}
    child = subprocess.run([sys.executable, "-c", CHILD, str(db_path)], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == -signal.SIGKILL, child.stderr
    saved_ids = child.stdout.split("saved ", 1)[1].split()
    sys.path.insert(0, str(REPO / "tests"))
    from fleet_worker import fleet_memory

    memory = fleet_memory(str(db_path))
    try:
        stored = memory.recall(thread_id="ann-t0", resource_id="ann", per_page=False).messages
        assert [m.id for m in stored] == saved_ids and [m.role for m in stored] == ["user", "assistant"]
        # Every saved message has its vector and its keyword document: recall finds it by either.
        assert memory.recall_index.unindexed(stored) == []
        for mode in ("vector", "keyword"):
            hits = memory.search("zanzibar marmalade", resource_id="ann", mode=mode, top_k=5)
            assert {h.message_id for h in hits} == set(saved_ids), mode
    finally:
        memory.store.close()
