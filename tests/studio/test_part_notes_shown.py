"""The Prompt Inspector and Replay shade a fragment's notes of parts that are no text (an image, a file), and not a
line typed to look like one (pytest-qt, offscreen, a real libSQL file written by a real agent turn).

A fragment names an image it was sent with a line such as ``[image_url: data:image/png;base64,iVBOR… (118
characters)]``; a user can type that same line, and both views showed the two alike (the prose highlighter greys
every ``[…]``). The fragment says where its notes are (``Fragment.part_notes``) and the views shade those lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core import Agent, Memory, MemoryOptions, Message, open_store
from core.llm import ScriptedModel
from studio.panes.prompt_inspector import PromptInspectorPane
from studio.selection import Selection
from studio.session import StudioSession, open_for_studio
from studio.widgets.code_editor import PART_NOTES_HINT, CodeEditor, note_blocks

from .replay_panes import pane_preferences, shown_pane

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
URL = f"data:image/png;base64,{PNG}"
NOTE = f"[image_url: {URL[:80]}… ({len(URL)} characters)]"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Thread t of ada: a turn whose message is a typed note line, then a real image; then a turn of text."""
    path = tmp_path / "memory.db"
    with open_store(path) as store:
        memory = Memory(store, MemoryOptions(last_messages=6, semantic_recall={"enabled": False}), name="m")
        agent = Agent("a", instructions="Be brief.", model=ScriptedModel(lambda m, t: "A dot."), memory=memory,
                      tracer=False)
        agent.generate(Message.create("user", [{"type": "text", "text": f"Look:\n{NOTE}"},
                                               {"type": "file", "data": PNG, "mimeType": "image/png"}]),
                       memory={"resource": "ada", "thread": "t"})
        agent.generate("And the colour?", memory={"resource": "ada", "thread": "t"})
    return path


@pytest.fixture
def session(db: Path, qapp: Any) -> Any:
    s = StudioSession(open_for_studio(db))
    yield s
    s.pool.wait(20_000)
    s.close()


def shaded(editor: CodeEditor) -> list[str]:
    return [s.cursor.selectedText() for s in editor.extraSelections()]


def test_note_blocks_count_lines_as_the_viewer_breaks_them() -> None:
    text = f"a\r\nb\rc\u2029d\u2028e\n{NOTE}"
    assert note_blocks(text, [(len(text) - len(NOTE), len(text))]) == [4]  # (\u2028 breaks no block)


@pytest.mark.parametrize("theme", ["dark"])
def test_the_inspector_shades_the_images_note_and_not_the_typed_line(qtbot: Any, no_leaked_widgets: None,
                                                                     session: Any, themed: Any, theme: str,
                                                                     tmp_path: Path) -> None:
    pane = PromptInspectorPane(session)
    qtbot.addWidget(pane)
    pane.resize(1200, 800)
    pane.show()
    with qtbot.waitSignal(pane.assembled, timeout=15_000):
        pane.set_selection(Selection("ada", "t"))
    rows = pane.fragment_model.rows()
    at = next(i for i, r in enumerate(rows) if r.part_notes)
    pane.fragment_table.selectRow(at)
    assert pane.detail_text.toPlainText() == f"Look:\n{NOTE}\n{NOTE}"
    assert shaded(pane.detail_text) == [NOTE]
    assert pane.detail_text.extraSelections()[0].cursor.block().blockNumber() == 2  # the last line, not line 1
    assert PART_NOTES_HINT in pane.detail_sources.text()
    pane.grab().save(str(tmp_path / "inspector.png"))
    # A fragment without notes shades nothing, and says nothing of them.
    plain = next(i for i, r in enumerate(rows) if r.role == "system")
    pane.fragment_table.selectRow(plain)
    assert shaded(pane.detail_text) == [] and PART_NOTES_HINT not in pane.detail_sources.text()


@pytest.mark.parametrize("theme", ["dark"])
def test_replay_shades_the_images_note_and_not_the_typed_line(qtbot: Any, no_leaked_widgets: None, session: Any,
                                                              themed: Any, theme: str, tmp_path: Path) -> None:
    pane = shown_pane(qtbot, session, pane_preferences(tmp_path), opened=Selection("ada", "t"))
    rows = pane.view.step_model.rows()
    at = next(i for i, r in enumerate(rows) if r.part_notes)
    pane.view.step_table.selectRow(at)
    assert pane.view.fragment_text.toPlainText().endswith(f"Look:\n{NOTE}\n{NOTE}")
    assert shaded(pane.view.fragment_text) == [NOTE]
    last = pane.view.fragment_text.document().blockCount() - 1
    assert pane.view.fragment_text.extraSelections()[0].cursor.block().blockNumber() == last
    assert PART_NOTES_HINT in pane.view.fragment_sources.text()
    pane.grab().save(str(tmp_path / "replay.png"))
