"""Replay figures for ``bench/studio.py``: step time on a 1,000-turn thread and what-if over it.

The thread is written by the real engine (an ``Agent`` with a scripted model, a turn record per turn,
a 10-message history window and thread-scoped working memory updated every 50 turns; recall off, so
no embedding model is involved). Each measurement runs in a fresh process with the Replay pane shown
offscreen: a step is timed from the request (``go_to``, as a key press does) to the step painted,
so it includes the pane's 10 ms coalescing delay; the worker's own rebuild time is printed beside it.
"""

from __future__ import annotations

import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

TURNS = 1000

REPLAY = r"""
import json, random, resource, sys, time
from PySide6.QtCore import QEventLoop, QSettings
from studio.app import make_app
from studio.panes.replay import ReplayPane
from studio.preferences import Preferences
from studio.selection import Selection
from studio.session import StudioSession, open_for_studio
from studio.theme import apply_theme
app = make_app(); apply_theme(app, "dark")
session = StudioSession(open_for_studio(sys.argv[1]))
pane = ReplayPane(session, preferences=Preferences(QSettings(sys.argv[2], QSettings.Format.IniFormat)))
pane.resize(1400, 900); pane.show(); app.processEvents()
def wait(cond, limit=120.0):
    end = time.perf_counter() + limit
    while not cond() and time.perf_counter() < end:
        app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 5)
    return cond()
out = {}
t0 = time.perf_counter()
pane.set_selection(Selection("bench", "replay-1000"))
wait(lambda: pane.step is not None and not pane.busy)
out["open_ms"] = (time.perf_counter() - t0) * 1000
out["turns"] = len(pane.source.turns)
def step_to(i):
    t = time.perf_counter()
    pane.go_to(i)
    wait(lambda: pane.step is not None and pane.step.index == i and not pane.busy)
    pane.repaint()
    return (time.perf_counter() - t) * 1000
pane.go_to(0); wait(lambda: pane.step.index == 0 and not pane.busy)
out["next_ms"] = [step_to(i) for i in range(1, 101)]
rng = random.Random(7)
out["jump_ms"] = [step_to(rng.randrange(out["turns"])) for _ in range(100)]
source = pane.source
raw = []
for i in rng.sample(range(out["turns"]), 100):
    t = time.perf_counter(); source._cache.clear(); source.step(i); raw.append((time.perf_counter() - t) * 1000)
out["worker_ms"] = raw
panel = pane.what_if
panel.last_spin.setValue(4)
done = []
panel.finished.connect(done.append)
ticks = []
panel.progress.valueChanged.connect(ticks.append)
t = time.perf_counter(); panel.run(); wait(lambda: bool(done), 600)
out["what_if_s"] = time.perf_counter() - t
out["what_if_rows"] = len(done[0].rows)
out["progress_updates"] = len(ticks)
done.clear()
panel.run()
wait(lambda: panel.progress.value() >= 100, 600)
t = time.perf_counter(); panel.cancel_btn.click(); wait(lambda: bool(done), 600)
out["cancel_ms"] = (time.perf_counter() - t) * 1000
out["cancelled_after"] = len(done[0].rows)
out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out), flush=True)
session.pool.wait(30000)
import os; os._exit(0)
"""


def build_replay_thread(path: Path) -> None:
    """1,000 live turns on one thread (cached under .temp/bench; a few seconds to build)."""
    if path.exists():
        return
    from core import Agent, Memory, MemoryOptions, open_store
    from core.llm.scripted import ScriptedModel, ScriptedReply, tool_call
    from core.timeutil import FixedClock

    def reply(messages: list[dict[str, Any]], tools: Any) -> Any:
        last = messages[-1]
        if last.get("role") == "tool":
            return "Saved."
        text = str(last.get("content") or "")
        n = int(text.split()[1]) if text.startswith("Question ") else 0
        if n and n % 50 == 0:
            return ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": f"# Notes\n- asked {n}"}),))
        return f"Answer to question {n}: " + "details " * (5 + n % 20)

    tmp = path.with_suffix(".partial")
    tmp.unlink(missing_ok=True)
    store = open_store(tmp)
    memory = Memory(store, MemoryOptions(last_messages=10, working_memory={"enabled": True, "scope": "thread"}),
                    clock=FixedClock(datetime(2026, 1, 1, tzinfo=timezone.utc), step_ms=1000), name="bench")
    agent = Agent("bench-agent", instructions="Answer briefly.", model=ScriptedModel(reply), memory=memory,
                  tracer=False)
    for n in range(1, TURNS + 1):
        agent.generate(f"Question {n} about topic {n % 37}: " + "words " * (3 + n % 11),
                       memory={"resource": "bench", "thread": "replay-1000"})
    store.close()
    tmp.rename(path)


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(int(round(len(ordered) * 0.95)) - 1, 0)]


def report(child: Callable[..., dict[str, Any]], work: Path) -> None:
    db = work / "replay-1000.db"
    build_replay_thread(db)
    r = child(REPLAY.replace("t_proc = float(sys.argv[2])", ""), str(db), str(work / "replay.ini"))
    print(f"replay: open a {r['turns']:,}-turn thread:         {r['open_ms']:7.0f} ms")
    print(f"replay: next turn (J), p50 / p95:          {statistics.median(r['next_ms']):5.0f} / "
          f"{_p95(r['next_ms']):.0f} ms   (aim p95 < 100 ms; 100 steps, incl. 10 ms coalescing)")
    print(f"replay: jump to any turn, p50 / p95:       {statistics.median(r['jump_ms']):5.0f} / "
          f"{_p95(r['jump_ms']):.0f} ms   (100 random turns)")
    print(f"replay: worker rebuild per step, p50 / p95: {statistics.median(r['worker_ms']):5.1f} / "
          f"{_p95(r['worker_ms']):.1f} ms   (received + rebuilt now + previous + diffs)")
    print(f"replay: what-if over {r['what_if_rows']:,} turns:           {r['what_if_s']:7.2f} s    (aim < 3 s; "
          f"{r['progress_updates']:,} progress updates)")
    print(f"replay: Cancel → stopped:                  {r['cancel_ms']:7.0f} ms   (after {r['cancelled_after']} turns)")
