"""Pin…: turn a fragment of a stored turn's prompt into a memory check in the user's checks file.

The dialog starts from the fragment (``studio.logic.checks_layout.default_pin``): its text as "must
stay in the prompt", or for a recall fragment its first hit as "must be recalled"; the user picks the
kind, trims the text and names the check. Nothing is written until Pin; then the check is appended to
the checks file (which lives in the user's repository, never in the database).
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from core.checks import Check
from studio.logic.checks_layout import PIN_KINDS, PinTarget, default_pin, pin_check, pin_name, pin_text
from studio.widgets.pane_header import elastic
from studio.theme import set_tone
from studio.widgets.a11y import named
from studio.widgets.scroll_fit import dialog_body


class PinDialog(QDialog):
    pin_requested = Signal(object)  # Check
    choose_file = Signal()

    def __init__(self, target: PinTarget, path: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("pinDialog")
        self.setWindowTitle("Pin a Memory Check")
        self.resize(620, 420)
        self.target = target
        layout = QVBoxLayout(dialog_body(self))
        turn = f"turn {target.turn_number}" if target.turn_number else "its turn"
        thread, source = html.escape(target.thread_id), html.escape(target.source)  # data: shown as written
        intro = elastic(QLabel(f"Pin what the model reads at {turn} of thread <code>{thread}</code> "
                               f"(fragment from <b>{source}</b>). <code>memory-studio test</code> rebuilds that "
                               "turn's prompt offline and checks it, in CI too."), wrap=True)
        intro.setTextFormat(Qt.TextFormat.RichText)
        layout.addWidget(intro)
        form = QFormLayout()
        self.kind_combo = QComboBox()
        for kind, label in PIN_KINDS.items():
            if kind != "recalled" or target.stored_ids:
                self.kind_combo.addItem(label, kind)
        self.value_edit = QPlainTextEdit()
        self.value_edit.setObjectName("pinValue")
        self.value_edit.setMaximumHeight(90)
        self.name_edit = QLineEdit()
        self.name_edit.setObjectName("pinName")
        self.input_label = elastic(QLabel(target.input_text or "(the turn's input has no text: pinned by number)"),
                                   wrap=True)
        self.input_label.setTextFormat(Qt.TextFormat.PlainText)  # the stored input, as written
        # (beside its row's title, from the top: the dialog's spare height goes below the form, not into a gap here)
        self.input_label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        file_row = QHBoxLayout()
        self.path_edit = QLineEdit(path)
        self.path_edit.setObjectName("pinFile")
        named(self.path_edit, "Checks file")
        self.path_edit.setPlaceholderText("checks.json in your repository")
        browse = QPushButton("Choose…")
        browse.clicked.connect(self.choose_file.emit)
        file_row.addWidget(self.path_edit, 1)
        file_row.addWidget(browse)
        form.addRow("Kind", named(self.kind_combo, "Kind"))
        form.addRow("Text or message", self.value_edit)
        form.addRow("Turn (its input)", self.input_label)
        form.addRow("Name", self.name_edit)
        form.addRow("Checks file", file_row)
        layout.addLayout(form)
        layout.addStretch(1)
        self.error = elastic(QLabel(""), wrap=True)
        set_tone(self.error, "error")
        self.error.hide()
        layout.addWidget(self.error)
        self.buttons = QDialogButtonBox()
        self.pin_btn = self.buttons.addButton("Pin", QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.request_pin)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        kind, value = default_pin(target)
        self.kind_combo.setCurrentIndex(max(self.kind_combo.findData(kind), 0))
        self.value_edit.setPlainText(value)
        self.name_edit.setText(pin_name(target, kind, value))
        self._named = self.name_edit.text()
        self.kind_combo.currentIndexChanged.connect(self._kind_changed)

    def kind(self) -> str:
        return str(self.kind_combo.currentData())

    def _kind_changed(self) -> None:
        kind = self.kind()
        if kind == "recalled" and self.target.stored_ids:
            self.value_edit.setPlainText(self.target.stored_ids[0])
        elif self.value_edit.toPlainText() in self.target.stored_ids:
            self.value_edit.setPlainText(pin_text(self.target.text))
        if self.name_edit.text() == self._named:  # the user has not named it: follow the kind
            self._named = pin_name(self.target, kind, self.value_edit.toPlainText())
            self.name_edit.setText(self._named)

    def check(self) -> Check:
        return pin_check(self.target, self.kind(), self.value_edit.toPlainText().strip(), self.name_edit.text())

    def request_pin(self) -> None:
        if not self.value_edit.toPlainText().strip():
            self.show_error("Say what must hold: the text (or message id) is empty.")
            return
        if not self.name_edit.text().strip():
            self.show_error("Give the check a name: reports and CI list checks by name.")
            return
        if not self.path_edit.text().strip():
            self.show_error("Choose the checks file to add it to (a .json file in your repository).")
            return
        self.pin_btn.setEnabled(False)
        self.pin_requested.emit(self.check())

    def show_error(self, text: str) -> None:
        self.pin_btn.setEnabled(True)
        self.error.setText(text)
        self.error.show()


__all__ = ["PinDialog"]
