"""End to end: a separate agent process writes turns while the Studio is open; the new messages and
the working memory show up without a manual refresh."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core import Memory, open_store
from studio.models.messages_model import MessageRoles
from studio.selection import Selection

ROOT = Path(__file__).resolve().parents[2]

AGENT = r"""
import sys
from core import Memory, MemoryOptions, open_store
from core.agent import Agent
from core.llm.scripted import ScriptedModel, ScriptedReply, tool_call

TEMPLATE = "# Traveller\n- City:\n"
store = open_store(sys.argv[1])
memory = Memory(store, MemoryOptions(last_messages=10,
                working_memory={"enabled": True, "scope": "resource", "template": TEMPLATE}), name="live")
script = [
    ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": "# Traveller\n- City: Oslo\n"}),)),
    "Noted: you live in Oslo.",
    "Bring a raincoat.",
]
agent = Agent("live", instructions="Be brief.", model=ScriptedModel(script, name="live-e2e"), memory=memory)
for line in sys.stdin:  # one turn per line, so the test decides when the agent writes
    text = line.strip()
    if not text:
        break
    agent.generate(text, memory={"resource": "traveller", "thread": "live-thread"})
    print("turn done", flush=True)
"""


@pytest.fixture
def live_db(tmp_path: Path) -> Path:
    path = tmp_path / "live.db"
    store = open_store(path)
    Memory(store).create_thread(thread_id="live-thread", resource_id="traveller", title="Live trip")
    store.close()
    return path


def test_turns_written_by_another_process_appear(qtbot: Any, make_window: Any, live_db: Path) -> None:
    window = make_window()
    window.open_database(str(live_db))
    qtbot.waitUntil(lambda: window.resources is not None and window.resources.thread_rows() ==
                    [("traveller", "Live trip", 0)], timeout=15_000)
    window.resources.set_selection(Selection("traveller", "live-thread"))
    qtbot.waitUntil(lambda: window.selection.thread_id == "live-thread", timeout=10_000)
    wm_pane = window.panes["working_memory"]
    messages = window.messages_pane.model

    agent = subprocess.Popen([sys.executable, "-c", AGENT, str(live_db)], cwd=ROOT, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert agent.stdin is not None
        agent.stdin.write("I live in Oslo.\n")
        agent.stdin.flush()
        qtbot.waitUntil(lambda: messages.rowCount() >= 2, timeout=30_000)
        qtbot.waitUntil(lambda: any(messages.index(i).data(MessageRoles.PREVIEW) == "Noted: you live in Oslo."
                                    for i in range(messages.rowCount())), timeout=15_000)
        qtbot.waitUntil(lambda: getattr(wm_pane, "snapshot", None) is not None
                        and "Oslo" in (wm_pane.snapshot.text or ""), timeout=15_000)
        count_after_first = messages.rowCount()

        agent.stdin.write("Any advice for today?\n")
        agent.stdin.flush()
        qtbot.waitUntil(lambda: messages.rowCount() >= count_after_first + 2, timeout=30_000)
        qtbot.waitUntil(lambda: any(messages.index(i).data(MessageRoles.PREVIEW) == "Bring a raincoat."
                                    for i in range(count_after_first, messages.rowCount())), timeout=15_000)
        qtbot.waitUntil(lambda: ("traveller", "Live trip", messages.rowCount()) in window.resources.thread_rows(),
                        timeout=15_000)
        assert window.resources.current_selection() == Selection("traveller", "live-thread")
    finally:
        out, err = agent.communicate("\n", timeout=60)
    assert agent.returncode == 0, err
