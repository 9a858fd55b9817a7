"""Following a link to a stored message in another thread (a recall hit in the prompt inspector or the
Replay pane) opens that thread: it used to keep the old thread, so the inspector was stuck on
"Message … is not in thread … any more" (issue 10, item 9)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from studio.selection import Selection


def _wait_open(qtbot: Any, window: Any) -> None:
    qtbot.waitUntil(lambda: window.session is not None and window.resources is not None
                    and len(window.resources.thread_rows()) >= 3, timeout=15_000)


def test_a_link_into_another_thread_opens_that_thread(qtbot: Any, make_window: Any, small_db: Path) -> None:
    window = make_window()
    window.open_database(str(small_db))
    _wait_open(qtbot, window)
    inspector = window.panes["prompt"]
    window.resources.set_selection(Selection("ada", "t-party"))
    qtbot.waitUntil(lambda: window.selection.thread_id == "t-party", timeout=10_000)
    first_party = _first_message(window, "t-party")
    window.set_selection(Selection("ada", "t-party", first_party))
    window.show_tab("prompt")
    qtbot.waitUntil(lambda: inspector.preview is not None and inspector.preview.turn is not None, timeout=15_000)

    target = _first_message(window, "t-groceries")
    inspector.open_message.emit(target)  # the link in "From stored messages: …"
    qtbot.waitUntil(lambda: window.selection.thread_id == "t-groceries", timeout=10_000)
    assert window.selection == Selection("ada", "t-groceries", target)
    assert window.resources.current_selection() == Selection("ada", "t-groceries")
    qtbot.waitUntil(lambda: window.messages_pane.current_message_id() == target, timeout=10_000)
    assert window.current_pane() is window.messages_pane
    # The inspector follows the new thread and rebuilds that message's turn: no "not in thread" banner.
    window.show_tab("prompt")
    qtbot.waitUntil(lambda: inspector.preview is not None and inspector.preview.request.thread_id == "t-groceries"
                    and not inspector.busy, timeout=15_000)
    assert "any more" not in inspector.banner.text()
    assert inspector.preview.turn is not None and inspector.preview.turn.picked_id == target


def test_a_link_to_a_message_that_is_gone_says_so(qtbot: Any, make_window: Any, small_db: Path) -> None:
    window = make_window()
    window.open_database(str(small_db))
    _wait_open(qtbot, window)
    window.resources.set_selection(Selection("ada", "t-party"))
    qtbot.waitUntil(lambda: window.selection.thread_id == "t-party", timeout=10_000)
    window.show_message("no-such-message")
    qtbot.waitUntil(lambda: "no-such-message" in window.status_text.text(), timeout=10_000)
    assert "not in the database" in window.status_text.text()
    assert window.selection.thread_id == "t-party" and window.selection.message_id is None


def _first_message(window: Any, thread_id: str) -> str:
    from studio import reads

    rows = reads.load_page(window.session.store, thread_id, 0, 1)
    return rows[0].id
