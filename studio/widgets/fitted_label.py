"""A wrapped label that a crowded layout can never cut: its minimum height is what its text needs at
the width it has (Qt's own minimum for a wrapped label is one line, so a squeezed layout dropped the
rest: Replay's "Since turn 12500: …" line). Its width still comes from the layout, never its text."""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget


class FittedLabel(QLabel):
    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setWordWrap(True)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Minimum)
        self._needed = 0

    def _height_needed(self) -> int:
        return self.heightForWidth(self.width()) if self.width() > 0 else 0

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        hint = super().minimumSizeHint()
        return QSize(hint.width(), max(hint.height(), self._height_needed()))

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        hint = super().sizeHint()
        return QSize(hint.width(), max(hint.height(), self._height_needed()))

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        super().setText(text)
        self._refit()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self._refit()

    def _refit(self) -> None:
        needed = self._height_needed()
        if needed != self._needed:  # only when the wrapped height changed: no layout loop
            self._needed = needed
            self.updateGeometry()


__all__ = ["FittedLabel"]
