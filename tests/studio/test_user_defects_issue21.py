"""The Studio defects a user hit (issue 21 item 4): the recall playground starts from the agent's own
recall options and says so; the chat playground starts from Preferences' default model; prose is not
coloured as ``key: value``; priority emoji are drawn in viewers without an emoji font; Replay's change
line is never cut; the recall lists show the message text, not a few characters of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QApplication, QSplitter, QVBoxLayout, QWidget

from core import Memory, MemoryOptions, Message, open_store
from core.embedding import HashingEmbedder
from studio.preferences import Endpoint
from studio.selection import Selection
from studio.widgets.code_editor import CodeEditor
from studio.widgets.fitted_label import FittedLabel


def _registered(path: Path) -> None:
    with open_store(path) as store:
        memory = Memory(store, MemoryOptions(semantic_recall={"top_k": 2, "message_range": 0, "scope": "thread"}),
                        embedder=HashingEmbedder(64), name="helper")
        memory.save_messages([Message.user("I am allergic to peanuts", thread_id="t1", resource_id="ada"),
                              Message.assistant("Noted.", thread_id="t1", resource_id="ada")])
        memory.register("helper")


def _window(qtbot: Any, make_window: Any, path: Path) -> Any:
    window = make_window()
    window.open_database(str(path))
    qtbot.waitUntil(lambda: window.session is not None and window.resources is not None
                    and len(window.resources.thread_rows()) >= 1, timeout=15_000)
    return window


def test_recall_playground_starts_from_the_agents_recall_options(qtbot: Any, make_window: Any,
                                                                 tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _registered(db)
    window = _window(qtbot, make_window, db)
    pane = window.panes["recall"]
    window.show_tab("recall")
    window.select_thread(Selection("ada", "t1"))
    qtbot.waitUntil(lambda: pane.start is not None, timeout=15_000)
    assert pane.topk_spin.value() == 2 and pane.before_spin.value() == 0 and pane.after_spin.value() == 0
    assert pane.scope_combo.currentData() == "thread"
    assert pane.start_label.text() == "agent 'helper': top-k 2, range 0/0, scope thread"
    assert not pane.reset_btn.isEnabled()
    pane.topk_spin.setValue(5)
    assert pane.start_label.text().endswith("· changed here") and pane.reset_btn.isEnabled()
    pane.reset_btn.click()
    assert pane.topk_spin.value() == 2 and not pane.start_label.text().endswith("changed here")


def test_chat_starts_from_the_default_model_in_preferences(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _registered(db)
    window = _window(qtbot, make_window, db)
    window.preferences.save([Endpoint("local", "http://127.0.0.1:9/v1", "tiny", key_source="none", key_name="")],
                            default="local")
    window.show_tab("chat")
    chat = window.panes["chat"]
    qtbot.waitUntil(lambda: chat.model_combo.count() == 2, timeout=5_000)
    assert chat.model_combo.currentData() == "local"
    # Changing the default while the tab is shown follows it, until the user picks one here.
    window.preferences.save([Endpoint("local", "http://127.0.0.1:9/v1", "tiny", key_source="none", key_name="")],
                            default=None)
    assert chat.model_combo.currentData() != "local"
    chat.model_combo.setCurrentIndex(chat.model_combo.findData("local"))
    chat.model_combo.activated.emit(chat.model_combo.currentIndex())
    chat.refresh_models()
    assert chat.model_combo.currentData() == "local"


def _formatted(editor: CodeEditor, text: str) -> bool:
    """Whether the highlighter gave ``text`` (found in the document) a foreground colour."""
    QApplication.processEvents()
    plain = editor.toPlainText()
    at = plain.index(text)
    block = editor.document().findBlock(at)
    offset = at - block.position()
    return any(r.start <= offset < r.start + r.length and r.format.foreground().style() != 0
               for r in block.layout().formats())


def test_prose_is_not_coloured_as_key_value_but_working_memory_fields_are(qapp: Any) -> None:
    prose = CodeEditor("prose", read_only=True)
    prose.load("Hi! I'm Ada. Quick heads-up: I'm allergic to peanuts.\nNote: the party is on Saturday.")
    assert not _formatted(prose, "Quick heads-up") and not _formatted(prose, "Note")
    fields = CodeEditor("markdown")
    fields.load("# Diner\n- **Name**: Ada\n- Allergies: peanuts")
    assert _formatted(fields, "Allergies")


def test_priority_emoji_are_drawn_as_marks_and_copied_back(qapp: Any) -> None:
    viewer = CodeEditor("prose", read_only=True)
    log = "Date: Sep 14, 2026\n* 🔴 (12:44) Sam merged it.\n* 🟡 (13:19) Asked about blockers.\n* 🟢 low\n* ✅ done"
    viewer.load(log)
    shown = viewer.toPlainText()
    assert not any(ch in shown for ch in "🔴🟡🟢✅") and shown.count("●") == 3 and "✔" in shown
    assert viewer.text() == log
    assert _formatted(viewer, "●")
    viewer.selectAll()
    assert viewer.createMimeDataFromSelection().text() == log
    editable = CodeEditor("markdown")
    editable.load(log)
    assert editable.toPlainText() == log  # an editor shows what it edits


def test_the_change_line_is_never_cut_when_the_list_is_crowded(qtbot: Any) -> None:
    holder = QSplitter()
    upper = QWidget()
    layout = QVBoxLayout(upper)
    label = FittedLabel("")
    layout.addWidget(label)
    from PySide6.QtWidgets import QTableView

    layout.addWidget(QTableView())
    holder.addWidget(upper)
    qtbot.addWidget(holder)
    holder.resize(300, 160)
    holder.show()
    label.setText("Since turn 12500: +2 entered · −3 left (outside the history window ×2, observed by observational "
                  "memory) · ~1 changed (working memory changed, new message ×2)")
    qtbot.waitUntil(lambda: label.height() >= label.heightForWidth(label.width()) > 2 * label.fontMetrics().height(),
                    timeout=5_000)


def test_recall_lists_show_the_message_right_after_the_rank_at_half_the_width(qtbot: Any, make_window: Any,
                                                                               tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _registered(db)
    window = _window(qtbot, make_window, db)
    window.show_tab("recall")
    pane = window.panes["recall"]
    for table in pane.tables.values():
        header = table.horizontalHeader()
        message = table.model().columnCount() - 1
        assert header.visualIndex(message) == 1
        qtbot.waitUntil(lambda t=table, m=message: t.columnWidth(m) >= max(170, t.viewport().width() // 2 - 1),
                        timeout=5_000)
