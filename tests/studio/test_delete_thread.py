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


def _tree_read_first(qtbot: Any, window: Any) -> None:
    """The change poll stopped (and its first answer in), so the tree's own read of a change is certain to land
    before anything else looks at the selection: the order that showed the neighbour's thread."""
    window.session._timer.stop()
    qtbot.waitUntil(lambda: not window.session._polling, timeout=15_000)


def test_a_selected_thread_another_program_deletes_is_let_go_not_swapped_for_its_neighbour(
        qtbot: Any, make_window: Any, small_db: Path) -> None:
    # Found by the session-31 walk: a gateway's program deleted the thread the Studio showed; the tree's refresh
    # removed its row, Qt made the next row current, and every pane showed that other thread, nothing said.
    from core import Memory

    window = _open(qtbot, make_window, small_db)
    _select_message(qtbot, window, "ada", "t-party", 0)
    _tree_read_first(qtbot, window)
    with open_store(small_db) as other:
        Memory(other).delete_thread("t-party")
    window.resources.refresh()
    qtbot.waitUntil(lambda: "Birthday party" not in [r[1] for r in window.resources.thread_rows()], timeout=15_000)
    assert window.selection.thread_id is None  # not t-groceries, the row below it
    assert window.resources.current_selection().empty
    assert window.messages_pane.model.thread_id is None
    assert "Thread t-party was deleted" in window.status_text.text()

    window.select_thread(Selection("li", None))  # a resource whose only thread goes: its row goes too
    qtbot.waitUntil(lambda: window.resources.current_selection() == Selection("li", None), timeout=15_000)
    with open_store(small_db) as other:
        Memory(other).delete_thread("t-trip")
    window.resources.refresh()
    qtbot.waitUntil(lambda: "li" not in [r[0] for r in window.resources.thread_rows()], timeout=15_000)
    assert window.selection.empty  # not ada, the resource row that took its place
    assert window.resources.current_selection().empty
    assert "Resource li has no threads" in window.status_text.text()


def test_a_title_with_a_right_to_left_override_is_named_as_stored_in_the_confirmation_and_replay(
        qtbot: Any, make_window: Any, small_db: Path) -> None:
    # Found by the session-31 walk: "\u202eevil" was drawn reversed in Replay's Thread list and status, and in the
    # Delete Thread confirmation, which must name the thread it deletes as it is stored.
    from core import Memory
    from studio.main_window import REPLAY

    with open_store(small_db) as other:
        Memory(other).save_messages([Message.user("hi", thread_id="t-rtl", resource_id="ada")])
        other.memory.update_thread("t-rtl", title="\u202eevil title")
    window = _open(qtbot, make_window, small_db)
    _select_message(qtbot, window, "ada", "t-rtl", 0)
    window.commands.run("thread.delete")
    box = _dialog(qtbot, window, QMessageBox)
    assert "“\\u202eevil title” (t-rtl)" in box.text() and "\u202e" not in box.text()
    box.button(QMessageBox.StandardButton.Cancel).click()
    window.show_tab(REPLAY)
    replay = window.pane(REPLAY)
    qtbot.waitUntil(lambda: replay.thread_combo.currentText().startswith("\\u202eevil title — ada"), timeout=20_000)
    assert all("\u202e" not in replay.thread_combo.itemText(i) for i in range(replay.thread_combo.count()))
