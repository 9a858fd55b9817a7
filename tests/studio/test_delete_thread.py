"""Edit > Delete Thread… (Mastra Studio's thread list deletes a thread): asked first, naming the thread and
what goes with it; the thread, its messages and its vectors are gone; the other threads stay; every pane
lets go of it; a read-only database refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QMessageBox

from core import Message, open_store
from studio.selection import Selection

from .conftest import make_mastra_db
from .test_memory_edits_window import _dialog, _open, _select_message


def test_delete_thread_asks_first_then_deletes_the_thread_and_every_pane_lets_go(qtbot: Any, make_window: Any,
                                                                                  small_db: Path) -> None:
    window = _open(qtbot, make_window, small_db)
    _select_message(qtbot, window, "ada", "t-groceries", 0)
    assert window.commands.command("thread.delete").is_enabled
    window.commands.run("thread.delete")
    box = _dialog(qtbot, window, QMessageBox)
    assert "Weekly groceries" in box.text() and "3 message" in box.text()
    box.button(QMessageBox.StandardButton.Cancel).click()
    with open_store(small_db, read_only=True) as store:
        assert store.memory.count_messages("t-groceries") == 3
    window.commands.run("thread.delete")
    box = _dialog(qtbot, window, QMessageBox)
    with qtbot.waitSignal(window.edits.thread_deleted, timeout=30_000):
        box.property("yesButton").click()
    with open_store(small_db, read_only=True) as store:
        assert store.memory.get_thread("t-groceries") is None and store.memory.count_messages("t-groceries") == 0
        assert store.memory.get_thread("t-party") is not None
    assert window.selection == Selection("ada", None)
    assert window.messages_pane.model.thread_id is None
    assert "t-groceries" in window.status_text.text() and "3 message" in window.status_text.text()
    qtbot.waitUntil(lambda: "Weekly groceries" not in [r[1] for r in window.resources.thread_rows()], timeout=15_000)
    assert not window.commands.command("thread.delete").is_enabled  # no thread selected now


def test_a_read_only_database_refuses_to_delete_a_thread(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    path = tmp_path / "mastra.db"
    make_mastra_db(path)
    window = _open(qtbot, make_window, path)
    _select_message(qtbot, window, "user-42", "mastra-thread", 0)
    window.commands.run("thread.delete")
    box = _dialog(qtbot, window, QMessageBox)
    assert "read-only" in box.text() and "Allow Writes" in box.informativeText()
    box.accept()
    with open_store(path, read_only=True) as store:
        assert store.memory.get_thread("mastra-thread") is not None


def test_a_thread_another_program_changed_after_the_confirmation_is_not_deleted(small_db: Path) -> None:
    # The confirmation named the thread's messages; what another program did to it meanwhile (two more messages,
    # or the thread gone) is said, never deleted unseen nor reported as this delete's work.
    from core import Memory, NotFoundError
    from core.edits.messages import EditConflictError
    from studio import edit_jobs

    with open_store(small_db) as store:
        factory = lambda options, name: Memory(store, options)  # noqa: E731
        target = edit_jobs.load_thread(store, "t-groceries")
        assert target.messages == 3
        with open_store(small_db) as other:
            Memory(other).save_messages([Message.user(f"added meanwhile {i}", thread_id="t-groceries",
                                                      resource_id="ada") for i in range(2)])
        with pytest.raises(EditConflictError) as changed:
            edit_jobs.delete_thread(store, factory, target)
        assert "5 messages" in str(changed.value) and "Nothing was deleted" in str(changed.value)
        assert store.memory.count_messages("t-groceries") == 5
        again = edit_jobs.load_thread(store, "t-groceries")  # asked again, with what it holds now
        assert edit_jobs.delete_thread(store, factory, again).messages == 5
        assert store.memory.get_thread("t-groceries") is None

        party = edit_jobs.load_thread(store, "t-party")
        with open_store(small_db) as other:
            Memory(other).delete_thread("t-party")
        with pytest.raises(NotFoundError) as gone:
            edit_jobs.delete_thread(store, factory, party)
        assert "another program deleted it" in str(gone.value)
