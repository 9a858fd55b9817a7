"""An observation block in a prompt comes from the observational-memory record, not from a stored message
(found 2026-12-06 walking the debugging story on the demo: the Prompt Inspector listed the record's id under
"Stored messages", offered Edit Stored Message… for it, and that said "LookupError … report it"). A message
deleted since a view was read is said to be gone, not reported as a failure of the program. A Chat turn's prompt
link opens that turn."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QMessageBox

from studio.selection import Selection

from .conftest import seeded_demo_folder

STANDUP = Selection("sam", "sam-standup")  # the demo's thread whose agent keeps observational memory


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seeded_demo_folder(tmp_path_factory, "demo-om-fragments")


def _window(demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any) -> Any:
    folder = tmp_path / "demo"
    shutil.copytree(demo_dir, folder)
    window = make_window()
    window.open_database(str(folder / "memory.db"))
    qtbot.waitUntil(lambda: window.resources is not None and len(window.resources.thread_rows()) >= 6,
                    timeout=20_000)
    return window


def test_an_observation_block_names_its_record_and_leads_to_the_observations_pane(
        qtbot: Any, make_window: Any, demo_dir: Path, tmp_path: Path) -> None:
    window = _window(demo_dir, tmp_path, make_window, qtbot)
    window.resources.set_selection(STANDUP)
    window.show_tab("prompt")
    pane = window.panes["prompt"]
    qtbot.waitUntil(lambda: any(r.source == "observational-memory" for r in pane.fragment_model.rows()),
                    timeout=30_000)
    rows = pane.fragment_model.rows()
    blocks = [i for i, r in enumerate(rows) if r.source == "observational-memory" and r.detail.get("part")]
    assert blocks
    record_id = pane.shown_prompt.fragments[rows[blocks[0]].index].stored_ids[0]  # the engine's provenance
    for i in blocks:
        assert rows[i].observation_record == record_id
        assert rows[i].stored_ids == ()  # no stored message is behind it
        assert rows[i].stored_label.startswith("record ")
    from studio.logic.replay_layout import step_rows  # Replay's rows of the same prompt say the same

    replay_rows = {r.index: r for r in step_rows(pane.shown_prompt)}
    for i in blocks:
        assert replay_rows[rows[i].index].observation_record == record_id
        assert replay_rows[rows[i].index].stored_ids == ()
    pane.fragment_table.selectRow(blocks[0])
    assert not pane.edit_btn.isEnabled()  # Edit Stored Message… has no message to open
    assert "observational-memory record" in pane.detail_sources.text() and record_id in pane.detail_sources.text()
    pane.detail_sources.linkActivated.emit("observations")
    observations = window.panes["observations"]
    qtbot.waitUntil(lambda: window.current_pane() is observations and bool(observations.view.history),
                    timeout=15_000)
    assert observations.view.history[0].id == record_id  # the record the block was read from, to edit there
    assert not window.presenter.open  # nothing went wrong on the way


def test_editing_a_message_deleted_since_says_it_is_gone(qtbot: Any, make_window: Any, demo_dir: Path,
                                                          tmp_path: Path) -> None:
    window = _window(demo_dir, tmp_path, make_window, qtbot)
    window.edit_message("a-message-deleted-since")
    qtbot.waitUntil(lambda: bool(window.presenter.open), timeout=15_000)
    box = window.presenter.open[-1]
    assert isinstance(box, QMessageBox)
    assert box.windowTitle() == "Message not found"
    assert "a-message-deleted-since" in box.text() and "deleted" in box.text()
    assert "report it" not in box.informativeText() and not box.detailedText()  # not a failure of the program


def test_a_chat_turns_prompt_link_opens_that_stored_turn(qtbot: Any, make_window: Any, demo_dir: Path,
                                                         tmp_path: Path) -> None:
    """Found 2026-12-06 (same walk): after a Chat turn, its "prompt" link opened the inspector on the thread's
    next turn ("New message"), not on the turn: the message view's jump to the new message selected its row
    before that row was read, and said "no message" to the window, which dropped the turn."""
    window = _window(demo_dir, tmp_path, make_window, qtbot)
    window.resources.set_selection(STANDUP)
    window.show_tab("chat")
    chat = window.panes["chat"]
    qtbot.waitUntil(lambda: chat.selection.thread_id == "sam-standup" and not chat.busy, timeout=20_000)
    with qtbot.waitSignal(chat.turn_finished, timeout=30_000) as blocker:
        chat.input.setPlainText("What is my blocker?")
        chat.send_btn.click()
    turn_id = blocker.args[0].request.input_id
    assert turn_id
    with qtbot.waitSignal(chat.open_prompt, timeout=5_000):
        chat._link(QUrl(f"prompt:{turn_id}"))  # the link under the reply
    inspector = window.panes["prompt"]
    qtbot.waitUntil(lambda: inspector.preview is not None and inspector.preview.turn is not None
                    and inspector.preview.turn.input is not None and not inspector.busy, timeout=30_000)
    qtbot.wait(500)  # the message view's read of the new row lands after the jump: the turn must stay shown
    assert window.selection.message_id == turn_id
    assert inspector.turn_radio.isChecked()
    assert inspector.preview.turn.input.id == turn_id
    assert inspector.preview.prompt.replay is not None and inspector.preview.prompt.replay.exact
