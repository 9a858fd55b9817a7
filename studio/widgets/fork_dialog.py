"""Fork from a turn: the new thread's name and which working memory it starts with."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QButtonGroup,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from studio.logic.thread_labels import shown_title
from studio.theme import set_tone
from studio.widgets.scroll_fit import FitScroll, dialog_body


class ForkDialog(QDialog):
    def __init__(self, title: str, turn_label: str, thread_scoped_wm: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("forkDialog")
        self.setWindowTitle("Fork From This Turn")
        root = QVBoxLayout(dialog_body(self))
        intro = QLabel(f"A new thread of the same resource with copies of every message before {turn_label}. "
                       "The original thread is not changed.")
        intro.setWordWrap(True)
        root.addWidget(intro)
        form = QFormLayout()
        self.name_edit = QLineEdit(title)
        self.name_edit.setObjectName("forkName")
        self.name_edit.selectAll()
        # A control typed or pasted into the name (U+202E, a line break) reorders or hides what the field
        # draws; the note under it names the name as it will be stored, escapes and all.
        self.stored_note = QLabel("")
        self.stored_note.setObjectName("forkStoredNote")
        self.stored_note.setWordWrap(True)
        self.stored_note.setTextFormat(Qt.TextFormat.PlainText)
        set_tone(self.stored_note, "warning")
        self.stored_note.hide()
        form.addRow("Name", self.name_edit)
        form.addRow("", self.stored_note)
        self.name_edit.textChanged.connect(self._note_controls)
        self.as_of_radio = QRadioButton("As it was at this turn")
        self.current_radio = QRadioButton("As it is now")
        self.as_of_radio.setChecked(True)
        group = QButtonGroup(self)
        group.addButton(self.as_of_radio)
        group.addButton(self.current_radio)
        # The radios (and the note saying why they are off) stack in one column with room of their own:
        # the dialog takes the height they need, so nothing overlaps whatever the font or the note.
        column = QVBoxLayout()
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(4)
        column.addWidget(self.as_of_radio)
        column.addWidget(self.current_radio)
        if not thread_scoped_wm:
            for radio in (self.as_of_radio, self.current_radio):
                radio.setEnabled(False)
            note = QLabel("This agent's working memory is resource-scoped (or off): the fork shares it, so "
                          "there is nothing to copy.")
            note.setObjectName("forkWmNote")
            note.setWordWrap(True)
            note.setStyleSheet("color: palette(placeholder-text);")
            column.addWidget(note)
        form.addRow("Working memory", column)
        root.addLayout(form)
        self.problem = QLabel("")
        set_tone(self.problem, "error")
        root.addWidget(self.problem)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Fork")
        root.addWidget(self.buttons)
        self.buttons.accepted.connect(self._accept)
        self.buttons.rejected.connect(self.reject)
        self.setMinimumWidth(520)
        self.adjustSize()

    @property
    def title(self) -> str:
        return self.name_edit.text().strip()

    @property
    def working_memory(self) -> str:
        return "current" if self.current_radio.isChecked() else "as_of"

    def _note_controls(self, text: str) -> None:
        shown = shown_title(text.strip())
        self.stored_note.setText(f"This name holds control characters the field cannot show; it is stored as "
                                 f"typed, which labels show as: {shown}" if shown != text.strip() else "")
        if self.stored_note.isHidden() == (shown != text.strip()):
            self.stored_note.setVisible(shown != text.strip())
            QTimer.singleShot(0, self._fit_note)

    def _fit_note(self) -> None:
        # The scroll area the body is in (``dialog_body``) is asked its size again, and the dialog grows to
        # show the note whole instead of squeezing the rows under it.
        scroll = self.findChild(FitScroll)
        if scroll is not None:
            scroll.updateGeometry()
        layout = self.layout()
        if layout is not None:
            layout.activate()
        want = self.sizeHint().height()
        if self.height() < want:
            self.resize(self.width(), want)

    def _accept(self) -> None:
        if not self.title:
            self.problem.setText("Give the new thread a name.")
            return
        self.accept()
