"""Fork from a turn: the new thread's name and which working memory it starts with."""

from __future__ import annotations

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


class ForkDialog(QDialog):
    def __init__(self, title: str, turn_label: str, thread_scoped_wm: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("forkDialog")
        self.setWindowTitle("Fork From This Turn")
        root = QVBoxLayout(self)
        intro = QLabel(f"A new thread of the same resource with copies of every message before {turn_label}. "
                       "The original thread is not changed.")
        intro.setWordWrap(True)
        root.addWidget(intro)
        form = QFormLayout()
        self.name_edit = QLineEdit(title)
        self.name_edit.setObjectName("forkName")
        self.name_edit.selectAll()
        form.addRow("Name", self.name_edit)
        self.as_of_radio = QRadioButton("As it was at this turn")
        self.current_radio = QRadioButton("As it is now")
        self.as_of_radio.setChecked(True)
        group = QButtonGroup(self)
        group.addButton(self.as_of_radio)
        group.addButton(self.current_radio)
        box = QVBoxLayout()
        box.addWidget(self.as_of_radio)
        box.addWidget(self.current_radio)
        holder = QWidget()
        holder.setLayout(box)
        form.addRow("Working memory", holder)
        if not thread_scoped_wm:
            for radio in (self.as_of_radio, self.current_radio):
                radio.setEnabled(False)
            note = QLabel("This agent's working memory is resource-scoped (or off): the fork shares it, so "
                          "there is nothing to copy.")
            note.setWordWrap(True)
            note.setStyleSheet("color: palette(placeholder-text);")
            form.addRow("", note)
        root.addLayout(form)
        self.problem = QLabel("")
        self.problem.setStyleSheet("color: #E5534B;")
        root.addWidget(self.problem)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Fork")
        root.addWidget(self.buttons)
        self.buttons.accepted.connect(self._accept)
        self.buttons.rejected.connect(self.reject)
        self.resize(520, 220)

    @property
    def title(self) -> str:
        return self.name_edit.text().strip()

    @property
    def working_memory(self) -> str:
        return "current" if self.current_radio.isChecked() else "as_of"

    def _accept(self) -> None:
        if not self.title:
            self.problem.setText("Give the new thread a name.")
            return
        self.accept()
