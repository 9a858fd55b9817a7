"""The Working Memory editor's keys, as a code editor's: Tab indents with spaces (JSON indented by two, a Markdown
list), over a selection of lines it indents each, Ctrl+] / Ctrl+[ indent and outdent, each one undoable step;
Shift+Tab, Ctrl+Tab and Ctrl+Shift+Tab leave the editor (back, on, back) without switching the pane's tab. Qt's own
Tab typed a tab character into JSON indented with spaces, and Ctrl+Tab switched Memory to History under the
cursor. A read-only viewer ("Stored now") takes no Tab: the focus moves on."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QTextCursor

from studio.selection import Selection

from .test_working_memory_pane import load, pane, session  # noqa: F401 - fixtures

M = Qt.KeyboardModifier


@pytest.fixture(autouse=True)
def _no_modifier_left_held(pane: Any, qtbot: Any) -> Iterator[None]:
    """QTest leaves the application's modifier state as its last key event had it (Ctrl after a Ctrl+Z); a
    later test's ``selectRow`` then toggled its row instead of selecting it. A release with none clears it."""
    yield
    qtbot.keyRelease(pane, Qt.Key.Key_Control)
    assert QGuiApplication.keyboardModifiers() == M.NoModifier


def _focused(qtbot: Any, pane: Any, widget: Any) -> None:
    pane.activateWindow()
    qtbot.waitUntil(pane.isActiveWindow, timeout=5_000)
    widget.setFocus()
    qtbot.waitUntil(widget.hasFocus, timeout=5_000)


def _cursor_at(editor: Any, line: int, column: int = 0, to_line: int | None = None) -> None:
    cursor = QTextCursor(editor.document().findBlockByNumber(line))
    cursor.movePosition(QTextCursor.MoveOperation.Right, n=column)
    if to_line is not None:
        end = editor.document().findBlockByNumber(to_line)
        cursor.setPosition(end.position() + len(end.text()), QTextCursor.MoveMode.KeepAnchor)
    editor.setTextCursor(cursor)


def test_tab_indents_json_with_spaces_and_the_lines_of_a_selection_each_undoably(qtbot: Any, pane: Any) -> None:
    load(qtbot, pane, Selection("bob", "t2"))
    editor = pane.editor
    start = editor.toPlainText()
    lines = start.split("\n")
    _focused(qtbot, pane, editor)

    _cursor_at(editor, 1, 1)  # inside the line's two-space indent: to the next stop, not a tab character
    qtbot.keyClick(editor, Qt.Key.Key_Tab)
    assert editor.hasFocus() and "\t" not in editor.toPlainText()
    assert len(lines[1]) - len(lines[1].lstrip()) == 2  # (pretty JSON: two spaces)
    assert editor.toPlainText().split("\n")[1] == "   " + lines[1].lstrip()  # (one space: the cursor to column 2)
    qtbot.keyClick(editor, Qt.Key.Key_Z, M.ControlModifier)
    assert editor.toPlainText() == start

    _cursor_at(editor, 1, 0, to_line=2)  # two lines selected: each indented, then outdented back
    qtbot.keyClick(editor, Qt.Key.Key_Tab)
    changed = editor.toPlainText().split("\n")
    assert changed[1:3] == ["  " + lines[1], "  " + lines[2]] and changed[3:] == lines[3:]
    assert json.loads(editor.toPlainText()) == json.loads(start) and not pane.problem_label.text()
    qtbot.keyClick(editor, Qt.Key.Key_BracketLeft, M.ControlModifier)
    assert editor.toPlainText() == start
    qtbot.keyClick(editor, Qt.Key.Key_BracketRight, M.ControlModifier)
    assert editor.toPlainText().split("\n")[1:3] == ["  " + lines[1], "  " + lines[2]]
    qtbot.keyClick(editor, Qt.Key.Key_Z, M.ControlModifier)  # one step for the lines
    assert editor.toPlainText() == start


def test_a_markdown_list_item_is_indented_by_tab(qtbot: Any, pane: Any) -> None:
    load(qtbot, pane, Selection("alice", "t1"))
    editor = pane.editor
    _focused(qtbot, pane, editor)
    item = next(n for n, line in enumerate(editor.toPlainText().split("\n")) if line.startswith("- "))
    _cursor_at(editor, item)
    qtbot.keyClick(editor, Qt.Key.Key_Tab)
    assert editor.toPlainText().split("\n")[item].startswith("  - ")


def test_shift_tab_ctrl_tab_and_ctrl_shift_tab_leave_the_editor_on_the_same_tab(qtbot: Any, pane: Any) -> None:
    load(qtbot, pane, Selection("bob", "t2"))
    editor, memory_tab = pane.editor, pane.tabs.currentIndex()
    start = editor.toPlainText()
    for key, mods in ((Qt.Key.Key_Backtab, M.ShiftModifier), (Qt.Key.Key_Tab, M.ControlModifier),
                      (Qt.Key.Key_Backtab, M.ControlModifier | M.ShiftModifier)):
        _focused(qtbot, pane, editor)
        qtbot.keyClick(editor, key, mods)
        focus = pane.focusWidget()
        assert not editor.hasFocus() and pane.isAncestorOf(focus), (key, mods, focus)
        assert pane.tabs.currentIndex() == memory_tab and editor.toPlainText() == start
    viewer = pane.current_view  # read-only: Tab moves on, types nothing
    _focused(qtbot, pane, viewer)
    qtbot.keyClick(viewer, Qt.Key.Key_Tab)
    assert not viewer.hasFocus() and "\t" not in viewer.toPlainText()


def test_the_template_or_schema_editor_keeps_the_same_keys(qtbot: Any, pane: Any) -> None:
    load(qtbot, pane, Selection("bob", "t2"))
    pane.tabs.setCurrentWidget(pane.template_editor)
    editor = pane.template_editor.editor
    editor.setPlainText('{\n"a": 1\n}')
    _focused(qtbot, pane, editor)
    _cursor_at(editor, 1)
    qtbot.keyClick(editor, Qt.Key.Key_Tab)
    assert editor.toPlainText() == '{\n  "a": 1\n}' and editor.hasFocus()
    qtbot.keyClick(editor, Qt.Key.Key_Tab, M.ControlModifier)
    assert not editor.hasFocus() and pane.tabs.currentWidget() is pane.template_editor
