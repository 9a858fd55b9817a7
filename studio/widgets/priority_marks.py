"""The observation priorities (high, medium, low, done), drawn with QPainter for the log view.

``studio.logic.observations_layout.log_html`` writes ``<img src="priority:high">`` where the observer
wrote 🔴; ``ObservationLogView`` answers those names with a drawn picture, so the markers look the
same with or without a colour-emoji font.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QPointF, QRectF, Qt, QUrl
from PySide6.QtGui import QColor, QImage, QPainter, QPainterPath, QPen, QTextDocument
from PySide6.QtWidgets import QTextBrowser, QWidget

from studio.logic.observations_layout import MARK_URL, PRIORITY_MARKS

SIZE = 22  # drawn at twice the 11-px display size, so it stays crisp on high-DPI screens


def marker_image(name: str, colour: str) -> QImage:
    image = QImage(SIZE, SIZE, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    p = QPainter(image)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    if name == "done":  # a check mark in a rounded square
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor(colour))
        p.drawRoundedRect(QRectF(1, 1, SIZE - 2, SIZE - 2), 5, 5)
        tick = QPainterPath(QPointF(SIZE * 0.25, SIZE * 0.52))
        tick.lineTo(QPointF(SIZE * 0.43, SIZE * 0.70))
        tick.lineTo(QPointF(SIZE * 0.76, SIZE * 0.32))
        p.setPen(QPen(QColor("#ffffff"), SIZE * 0.13, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap,
                      Qt.PenJoinStyle.RoundJoin))
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawPath(tick)
    else:  # a filled disc
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor(colour))
        p.drawEllipse(QRectF(2, 2, SIZE - 4, SIZE - 4))
    p.end()
    return image


_COLOURS = {name: colour for name, colour, _meaning in PRIORITY_MARKS.values()}


class ObservationLogView(QTextBrowser):
    """A read-only log view that draws the ``priority:<name>`` images itself."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)
        self._images: dict[str, QImage] = {}

    def loadResource(self, kind: int, name: QUrl | str) -> Any:  # noqa: N802 - Qt's name
        url = name.toString() if isinstance(name, QUrl) else name
        if kind == QTextDocument.ResourceType.ImageResource.value and url.startswith(MARK_URL):
            mark = url[len(MARK_URL):]
            if mark in _COLOURS:
                if mark not in self._images:
                    self._images[mark] = marker_image(mark, _COLOURS[mark])
                return self._images[mark]
        return super().loadResource(kind, name)
