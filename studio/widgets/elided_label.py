"""A one-line label that ends in "…" when its text does not fit, with the whole text in its tooltip.

An elastic QLabel (``pane_header.elastic``) is cut at the label's edge with no mark: "Replay · Weekly
groceri" read like a title of its own, and a subtitle lost its last part ("· resource …") silently.
The text itself is kept whole (``text()``); only what is drawn is shortened."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QPainter, QPaintEvent, QResizeEvent
from PySide6.QtWidgets import QLabel, QWidget

from studio.widgets.plain_tip import plain_tip


class ElidedLabel(QLabel):
    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setTextFormat(Qt.TextFormat.PlainText)  # (the text comes from the data: never markup)
        self._own_tip = False  # a tooltip the caller set: kept as it is

    def elided(self) -> bool:
        """Whether the text is wider than the label (so it is drawn cut, with "…"); a label set to wrap
        (``setWordWrap``) wraps instead, and one of several lines is cut line by line by Qt: neither
        is elided here."""
        if self.wordWrap() or "\n" in self.text():
            return False
        return self.fontMetrics().horizontalAdvance(self.text()) > self.contentsRect().width()

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        super().setText(text)
        self._update_tip()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._update_tip()

    def setToolTip(self, tip: str) -> None:  # noqa: N802 - Qt's name
        """A tooltip of the caller's own (a trace file's path) wins; an empty one gives the place back."""
        self._own_tip = bool(tip)
        super().setToolTip(plain_tip(tip))
        self._update_tip()

    def _update_tip(self) -> None:
        """The whole text on hover while it is cut; a tooltip set by the caller is left alone."""
        if not self._own_tip:
            super().setToolTip(plain_tip(self.text()) if self.elided() else "")

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt's name
        if not self.elided():
            super().paintEvent(event)
            return
        painter = QPainter(self)
        rect = self.contentsRect()
        shown = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, rect.width())
        self.style().drawItemText(painter, rect, int(self.alignment()), self.palette(), self.isEnabled(), shown,
                                  self.foregroundRole())
        painter.end()


__all__ = ["ElidedLabel"]
