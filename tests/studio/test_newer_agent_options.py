"""An agent registered by a newer version of the engine (a fleet upgraded one host at a time), with options this
Studio does not know: the engine reads its options without them (``AgentConfig.ignored_options``). The Studio said
nothing of it: its previews, replays and chats ran without those options while showing the agent's name (found by
s35-walk11). It now names them where the agent's options are used, and looking writes nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core import open_store
from studio.selection import Selection

from .conftest import seeded_demo_folder

NEWER = ("working_memory.a_future_knob", "a_future_section")


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seeded_demo_folder(tmp_path_factory, "demo-newer-agent")


def _registration(db: Path) -> str:
    with open_store(db, read_only=True) as store, store.db.read() as conn:
        return str(conn.execute(sa.text("SELECT config FROM memory_studio_agents WHERE name = 'notes-om'")).scalar())


@pytest.mark.parametrize("theme", [None, "dark", "light"])
def test_the_options_a_newer_agent_registered_are_named_where_its_options_are_used(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, themed: str | None, theme: str | None) -> None:
    folder = tmp_path / "demo"
    shutil.copytree(demo_dir, folder)
    db = folder / "memory.db"
    with open_store(db) as store, store.db.write() as conn:  # as the newer engine's agent registered itself
        config = json.loads(conn.execute(sa.text(
            "SELECT config FROM memory_studio_agents WHERE name = 'notes-om'")).scalar())
        config["options"]["working_memory"]["a_future_knob"] = 5
        config["options"]["a_future_section"] = {"x": 1}
        conn.execute(sa.text("UPDATE memory_studio_agents SET config = :c WHERE name = 'notes-om'"),
                     {"c": json.dumps(config)})
    written = _registration(db)
    window = make_window()
    window.resize(1100, 800)
    window.open_database(str(db))
    qtbot.waitUntil(lambda: window.resources is not None and len(window.resources.thread_rows()) >= 6,
                    timeout=20_000)
    window.resources.set_selection(Selection("sam", "sam-standup"))

    window.show_tab("prompt")  # the preview is assembled without them: its banner says which
    prompt = window.panes["prompt"]
    qtbot.waitUntil(lambda: prompt.preview is not None and not prompt.busy, timeout=30_000)
    assert prompt.banner.isVisible()
    assert all(name in prompt.banner.text() for name in NEWER), prompt.banner.text()
    assert "does not understand" in prompt.banner.text()

    window.show_tab("working_memory")  # the Agents tab, beside the registration as written
    wm = window.panes["working_memory"]
    qtbot.waitUntil(lambda: wm.snapshot is not None, timeout=30_000)
    wm.tabs.setCurrentIndex(wm.tabs.count() - 1)
    row = next(r for r in range(wm.agent_model.rowCount()) if wm.agent_model.row_at(r).name == "notes-om")
    wm.agent_table.selectRow(row)
    note = wm.agent_ignored
    qtbot.waitUntil(lambda: note.isVisible() and note.height() >= note.heightForWidth(note.width()) > 0,
                    timeout=5_000)  # (whole: wrapped onto the lines it needs)
    assert all(name in note.text() for name in NEWER)
    assert "a_future_knob" in wm.agent_config_view.toPlainText()  # (the registration shown as it is stored)
    other = next(r for r in range(wm.agent_model.rowCount()) if not wm.agent_model.row_at(r).ignored_options())
    wm.agent_table.selectRow(other)
    assert not note.isVisible()

    window.show_tab("chat")  # a chat as the agent runs without them
    chat = window.panes["chat"]
    qtbot.waitUntil(lambda: chat.agent() is not None, timeout=30_000)
    index = chat.agent_combo.findData("notes-om")
    assert index >= 0
    chat.agent_combo.setCurrentIndex(index)
    qtbot.waitUntil(lambda: all(name in chat.memory_label.text() for name in NEWER), timeout=5_000)

    window.session.pool.wait(20_000)
    assert _registration(db) == written  # (looking wrote nothing: the newer engine's options are all there)


def test_hostile_option_names_are_named_quoted_escaped_and_a_few_whatever_their_number_and_length() -> None:
    """The names come from the database (any program, or a hand edit, writes them): 100,000 names were all named in
    one label (2.5 M characters, laid out on the UI thread: the Chat pane held it 18 s), a 200,000-character name
    whole, and a name written as words ("ok, and the Studio uses every option") read as the Studio's own words."""
    from core.agent_configs import AgentConfig
    from studio.logic.memory_config import IGNORED_NAME_CHARS, IGNORED_NAMES_SHOWN, ignored_options_note

    hostile = {"x\u202eevil\nline": 1, "L" * 200_000: 1, "ok, and the Studio uses every option": 1,
               'a", "b': 1, **{f"future_{i:06d}": i for i in range(100_000)}}
    agent = AgentConfig("notes-om", {"options": {"last_messages": 10, **hostile,
                                                 "working_memory": {"enabled": True, "knob\u2067": 1}}}, None, None)
    names = agent.ignored_options()
    assert len(names) == len(hostile) + 1  # (all of them are still known to the engine, each by its name)
    note = ignored_options_note(agent)
    assert len(note) < 400 + IGNORED_NAMES_SHOWN * (IGNORED_NAME_CHARS + 2), len(note)
    assert f"and {len(names) - IGNORED_NAMES_SHOWN:,} more" in note
    assert '"x\\u202eevil\\nline"' in note and "\u202e" not in note and "\n" not in note
    assert '"ok, and the Studio uses every option"' in note  # (a name, in quotes: not the Studio's words)
    assert '"a\\", \\"b"' in note  # (one name, its quotes escaped: not two)
    assert '"' + "L" * (IGNORED_NAME_CHARS - 1) + '…"' in note and "L" * IGNORED_NAME_CHARS not in note
    few = AgentConfig("a", {"options": {"a_future_section": {}, "working_memory": {"a_future_knob": 5}}}, None, None)
    assert "more" not in ignored_options_note(few)
    assert '"a_future_section", "working_memory.a_future_knob". The Studio works' in ignored_options_note(few)
