"""Dialogs for a stored message: edit its text (or its whole content as JSON), and its history.

The edit dialog only stages: the message is written when the user presses Save Edit, by the window's
edit actions on a worker (``studio.edit_jobs``); an error keeps the dialog open with the user's text.
The history dialog lists every version (who, when, what) with a line diff of the selected one and
offers to undo the newest change.
"""

from __future__ import annotations

import html
import json
from typing import Any

from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QRadioButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from core.edits.messages import MessageVersion, content_with_text
from core.messages import MessageFormatError, normalize_content
from studio.dialogs import build_confirm_box
from studio.edit_jobs import MessageTarget
from studio.logic.dates import format_datetime
from studio.logic.diffing import line_diff
from studio.widgets.code_editor import CodeEditor
from studio.widgets.diff_view import DiffView
from studio.widgets.pane_header import caption, elastic
from studio.widgets.record_table import Column, RecordTableModel, record_table_view
from studio.theme import set_tone
from studio.widgets.a11y import named
from studio.widgets.scroll_fit import dialog_body

EDIT_NOTE = ("Turns that ran before this edit keep what their model saw (Replay shows them as they were, marked "
             "“edited since”); the next turn and every prompt rebuilt now use the new text. Recall re-indexes "
             "the message. Edit > Undo Memory Edit reverts it.")
OPS = {"edit": "edited", "delete": "deleted", "undo": "undo"}


class MessageEditDialog(QDialog):
    """Edit one stored message. ``save_requested(text, content)``: exactly one of them is not None."""

    save_requested = Signal(object, object)

    def __init__(self, target: MessageTarget, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageEditDialog")
        self.setWindowTitle("Edit Message")
        self.target = target
        msg = target.message
        self.resize(720, 480)
        layout = QVBoxLayout(dialog_body(self))
        esc = html.escape  # ids are data: shown as written
        head = elastic(QLabel(f"<b>{esc(msg.role)}</b> · {format_datetime(msg.created_at)} · thread "
                              f"<code>{esc(target.thread_id)}</code> · resource "
                              f"<code>{esc(target.resource_id)}</code> · <code>{esc(msg.id)}</code>"), wrap=True)
        head.setTextFormat(Qt.TextFormat.RichText)
        layout.addWidget(head)
        modes = QHBoxLayout()
        self.text_radio = QRadioButton("Text")
        self.json_radio = QRadioButton("Whole content (JSON)")
        self.text_radio.setToolTip("Change the words; tool calls, files and other parts stay as they are")
        group = QButtonGroup(self)
        group.addButton(self.text_radio)
        group.addButton(self.json_radio)
        self.text_radio.setChecked(True)
        modes.addWidget(self.text_radio)
        modes.addWidget(self.json_radio)
        modes.addStretch(1)
        layout.addLayout(modes)
        self.editor = CodeEditor("")
        self.editor.setLineWrapMode(self.editor.LineWrapMode.WidgetWidth)
        self.editor.setObjectName("messageEditor")
        named(self.editor, "Message")
        self.editor.setPlainText(msg.text)
        self._loaded = msg.text  # what the editor showed before the user typed (``changed``)
        self._discarding = False
        self.confirm_box: QMessageBox | None = None
        layout.addWidget(self.editor, 1)
        self.note = elastic(QLabel(EDIT_NOTE), wrap=True)
        self.note.setStyleSheet("color: palette(placeholder-text);")
        layout.addWidget(self.note)
        self.error = elastic(QLabel(""), wrap=True)
        self.error.setObjectName("editError")
        set_tone(self.error, "error")
        self.error.hide()
        layout.addWidget(self.error)
        self.buttons = QDialogButtonBox()
        self.save_btn = self.buttons.addButton("Save Edit", QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.request_save)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.text_radio.toggled.connect(self._mode_changed)

    def _mode_changed(self, text_mode: bool) -> None:
        """Show the other form of the message, carrying over what the user typed (the typed text as the
        content's text; the typed JSON's text), so switching never drops an edit."""
        msg, typed = self.target.message, self.editor.toPlainText()
        edited = typed != self._loaded
        if text_mode:
            text = msg.text
            if edited:
                try:
                    text = msg.copy(content=normalize_content(json.loads(typed), message_id=msg.id)).text
                except (ValueError, TypeError, MessageFormatError) as exc:
                    # Not readable as content: stay on the JSON, with the user's text, and say why.
                    with QSignalBlocker(self.json_radio), QSignalBlocker(self.text_radio):
                        self.json_radio.setChecked(True)
                    self.show_error(f"The JSON you typed is not a message's content ({exc}); fix it, or Cancel. "
                                    "Nothing was saved.")
                    return
            self.editor.set_language("")
            self._show(text, msg.text)
        else:
            content = content_with_text(msg.content, typed) if edited else msg.content
            self.editor.set_language("json")
            self._show(json.dumps(content, ensure_ascii=False, indent=2),
                       json.dumps(msg.content, ensure_ascii=False, indent=2))
        self.error.hide()

    def _show(self, text: str, loaded: str) -> None:
        """``text`` in the editor; ``loaded``: the message as stored, in this form (``changed`` compares)."""
        self.editor.setPlainText(text)
        self._loaded = loaded

    def changed(self) -> bool:
        """Whether the editor holds something other than the message as stored."""
        return self.editor.toPlainText() != self._loaded

    def reject(self) -> None:
        """Cancel, Escape or the close button: an edit typed and not saved is dropped only when the user says
        so (a confirmation, window-modal, that leaves the text as it is on Cancel)."""
        if self._discarding or not self.changed():
            super().reject()
            return
        box = build_confirm_box(self, "Discard your edit?", "What you typed in this message is not saved.",
                                "Discard it, or choose Cancel to go on editing.", "Discard Edit")
        yes = box.property("yesButton")
        box.finished.connect(lambda _r: self.discard() if box.clickedButton() is yes else None)
        self.confirm_box = box
        box.open()

    def discard(self) -> None:
        """Close without saving and without asking."""
        self._discarding = True
        super().reject()

    def request_save(self) -> None:
        body = self.editor.toPlainText()
        if self.text_radio.isChecked():
            self.set_busy(True)
            self.save_requested.emit(body, None)
            return
        try:
            content = json.loads(body)
        except json.JSONDecodeError as exc:
            self.show_error(f"Not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}. Nothing was saved.")
            self.editor.mark_error_line(exc.lineno)
            return
        self.set_busy(True)
        self.save_requested.emit(None, content)

    def set_busy(self, busy: bool) -> None:
        self.save_btn.setEnabled(not busy)
        self.save_btn.setText("Saving…" if busy else "Save Edit")

    def show_error(self, text: str) -> None:
        self.set_busy(False)
        self.error.setText(text)
        self.error.show()


VERSION_COLUMNS: list[Column[tuple[int, MessageVersion]]] = [
    Column("#", lambda r: r[0]),
    Column("When", lambda r: format_datetime(r[1].created_at)),
    Column("Who", lambda r: r[1].author),
    Column("Change", lambda r: OPS.get(r[1].op, r[1].op) + (f" ({r[1].note})" if r[1].note else "")),
]


class MessageHistoryDialog(QDialog):
    """Every change of one message, newest first, with the selected change as a line diff."""

    undo_requested = Signal()

    def __init__(self, target: MessageTarget, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageHistoryDialog")
        self.setWindowTitle("Message History")
        self.resize(760, 480)
        self.target = target
        layout = QVBoxLayout(dialog_body(self))
        head = QLabel(f"Message <code>{html.escape(target.message.id)}</code> · thread "
                      f"<code>{html.escape(target.thread_id)}</code>")
        head.setTextFormat(Qt.TextFormat.RichText)  # (ids are data, escaped above)
        layout.addWidget(elastic(head, wrap=True))
        split = QSplitter(Qt.Orientation.Vertical)
        split.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        self.model: RecordTableModel[tuple[int, MessageVersion]] = RecordTableModel(VERSION_COLUMNS, self)
        self.table = record_table_view(self.model)
        self.table.setObjectName("messageVersions")
        named(self.table, "Versions of the message")
        split.addWidget(self.table)
        holder = QWidget()
        hl = QVBoxLayout(holder)
        hl.setContentsMargins(0, 0, 0, 0)
        self.diff_caption = caption("Before → after")
        self.diff = DiffView()
        self.diff.setObjectName("messageVersionDiff")
        named(self.diff, "Before → after")
        hl.addWidget(self.diff_caption)
        hl.addWidget(self.diff)
        split.addWidget(holder)
        layout.addWidget(split, 1)
        row = QHBoxLayout()
        self.undo_btn = QPushButton("Undo Newest Change")
        self.undo_btn.setToolTip("Revert the newest change of this message (undoing an undo redoes it)")
        self.undo_btn.clicked.connect(self.undo_requested.emit)
        close = QPushButton("Close")
        close.clicked.connect(self.accept)
        row.addWidget(self.undo_btn)
        row.addStretch(1)
        row.addWidget(close)
        layout.addLayout(row)
        self.table.selectionModel().currentRowChanged.connect(lambda cur, _prev: self._show(cur.row()))
        self.set_versions(target.versions)

    def set_versions(self, versions: list[MessageVersion]) -> None:
        rows = [(i, v) for i, v in enumerate(versions, start=1)]
        self.model.set_rows(list(reversed(rows)))
        self.undo_btn.setEnabled(bool(versions))
        if rows:
            self.table.selectRow(0)
        else:
            self.diff.set_diff([], empty_text="This message was never changed: it is as its agent stored it.")

    def _show(self, row: int) -> None:
        item: Any = self.model.row_at(row)
        if item is None:
            return
        number, version = item
        self.diff_caption.setText(f"Change {number}: {OPS.get(version.op, version.op)} by {version.author}, "
                                  f"{format_datetime(version.created_at)}")
        before = version.before.text if version.before is not None else None
        after = version.after.text if version.after is not None else None
        empty = "(the same text: only other parts of the message changed)"
        self.diff.set_diff(line_diff(before, after), empty_text=empty)


__all__ = ["EDIT_NOTE", "MessageEditDialog", "MessageHistoryDialog"]
