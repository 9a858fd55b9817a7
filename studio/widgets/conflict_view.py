"""Both sides of a save conflict — the user's unsaved text and what is stored now — and their diff.

Shown when a save found that someone else (usually the agent) changed the value since it was
loaded. Nothing has been written at that point; the buttons are the only ways forward.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSplitter, QVBoxLayout, QWidget

from studio.logic.diffing import line_diff
from studio.widgets.banner import Banner
from studio.widgets.code_editor import CodeEditor
from studio.widgets.diff_view import DiffView
from studio.widgets.a11y import named


class ConflictView(QWidget):
    overwrite = Signal()  # save mine over theirs, knowingly
    take_theirs = Signal()  # discard mine (undoable in the editor)
    keep_editing = Signal()  # close; the next save overwrites what is stored now

    def __init__(self, language: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("conflictView")
        self.banner = Banner(self)
        self.mine = CodeEditor(language, read_only=True)
        self.theirs = CodeEditor(language, read_only=True)
        self.diff = DiffView()
        self.overwrite_btn = QPushButton("Overwrite with Mine")
        self.theirs_btn = QPushButton("Take Theirs")
        self.keep_btn = QPushButton("Keep Editing")
        self.overwrite_btn.clicked.connect(self.overwrite.emit)
        self.theirs_btn.clicked.connect(self.take_theirs.emit)
        self.keep_btn.clicked.connect(self.keep_editing.emit)

        sides = QSplitter(Qt.Orientation.Horizontal)
        sides.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        for title, editor in (("Yours (not saved)", self.mine), ("Stored now", self.theirs),
                              ("Stored now → yours", self.diff)):
            box = QWidget()
            bl = QVBoxLayout(box)
            bl.setContentsMargins(0, 0, 0, 0)
            label = QLabel(title)
            named(editor, title)
            font = label.font()
            font.setBold(True)
            label.setFont(font)
            bl.addWidget(label)
            bl.addWidget(editor)
            sides.addWidget(box)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        for b in (self.keep_btn, self.theirs_btn, self.overwrite_btn):
            buttons.addWidget(b)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.banner)
        layout.addWidget(sides, 1)
        layout.addLayout(buttons)
        self.hide()

    def set_language(self, language: str) -> None:
        self.mine.set_language(language)
        self.theirs.set_language(language)

    def show_conflict(self, mine: str, theirs: str | None, *, who: str = "someone else") -> None:
        self.banner.show_message(
            f"Not saved: {who} changed this working memory after you loaded it. "
            "Compare both versions and choose; nothing is overwritten until you do.", "warning",
        )
        self.mine.load(mine)
        self.theirs.load(theirs or "")
        self.diff.set_diff(line_diff(theirs or "", mine))
        self.show()

    @property
    def theirs_text(self) -> str:
        return self.theirs.toPlainText()
