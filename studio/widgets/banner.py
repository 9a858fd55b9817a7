"""An inline message strip (info / warning / error) with optional action buttons.

Used instead of modal dialogs for things the user should see while still working: read-only reasons,
a concurrent change waiting for a decision, a missing embedding model.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QPushButton, QSizePolicy, QWidget

from studio.widgets.fitted_label import FittedLabel

_STYLE = {
    "info": ("#1F3B57", "#4FA3D9"),
    "warning": ("#4A3A12", "#D9A441"),
    "error": ("#4A1E1E", "#E5534B"),
}


class Banner(QFrame):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        # Its least height is its lines at its width (``FittedLabel``): Qt's least for a wrapped label is one line,
        # so a pane's least height counted one line of a six-line message, and Replay at 900 x 800 under the
        # embedding-model banner gave its context table and its fragment less than their least (cut mid-row).
        self.label = FittedLabel("", self)
        self.label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.label.setTextFormat(Qt.TextFormat.PlainText)  # its messages quote paths, ids and errors: never markup
        self.label.setTextInteractionFlags(self.label.textInteractionFlags())
        self._layout = QHBoxLayout(self)
        self._layout.setContentsMargins(10, 6, 8, 6)
        self._layout.addWidget(self.label, 1)
        self._buttons: list[QPushButton] = []
        self.level = "info"
        self.hide()

    def show_message(self, text: str, level: str = "info",
                     actions: list[tuple[str, Callable[[], None]]] | None = None) -> None:
        self.level = level
        bg, edge = _STYLE.get(level, _STYLE["info"])
        self.setStyleSheet(
            f"QFrame#banner {{ background: {bg}; border: 1px solid {edge}; border-radius: 4px; }}"
            f"QFrame#banner QLabel {{ color: #E6E6E6; background: transparent; border: none; }}"
        )
        self.label.setText(text)
        for b in self._buttons:
            b.deleteLater()
        self._buttons = []
        for title, handler in actions or []:
            btn = QPushButton(title, self)
            btn.clicked.connect(handler)
            self._layout.addWidget(btn)
            self._buttons.append(btn)
        self.show()

    @property
    def buttons(self) -> list[QPushButton]:
        return list(self._buttons)

    def text(self) -> str:
        return self.label.text()
