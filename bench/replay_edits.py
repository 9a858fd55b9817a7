"""What replaying after edits costs: ``assemble(as_of=...)`` of every turn of a 60-turn thread with the
edit overlay (``core.replay.edited``) and without it, alternated in one process, before and after one
message of the thread was edited.

    .venv/bin/python bench/replay_edits.py
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # (--help says what this times; no options)

import statistics, time, tempfile
from pathlib import Path
from core import Memory, MemoryOptions, open_store, Agent
from core.llm import ScriptedModel
import core.replay.rebuild as rb
tmp = Path(tempfile.mkdtemp())
store = open_store(tmp / "m.db")
mem = Memory(store, MemoryOptions(last_messages=10, working_memory={"enabled": True}))
agent = Agent("a", instructions="Be brief.", model=ScriptedModel([f"r{i}" for i in range(60)]), memory=mem, tracer=False)
for i in range(60):
    agent.generate(f"message {i}", memory={"resource": "u", "thread": "t"})
turns = mem.turns("t")
orig = rb._as_recorded
def run(on):
    rb._as_recorded = orig if on else (lambda *a: None)
    out = []
    for t in turns:
        s = time.perf_counter(); mem.assemble(thread_id="t", resource_id="u", as_of=t.input_message_id); out.append(time.perf_counter() - s)
    return statistics.median(out) * 1000
for edit in (False, True):
    if edit:
        m0 = mem.recall(thread_id="t", resource_id="u", per_page=False).messages[0]
        mem.edit_message(m0.id, resource_id="u", text="edited")
    on, off = [], []
    for _ in range(5):
        off.append(run(False)); on.append(run(True))
    print(f"{'after an edit' if edit else 'no edits'}: rebuild median without overlay {statistics.median(off):.3f} ms, with {statistics.median(on):.3f} ms")
