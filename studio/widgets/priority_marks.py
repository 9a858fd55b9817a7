"""The observation priorities (high, medium, low, done), drawn with QPainter for the log view.

``studio.logic.observations_layout.log_paragraphs`` writes ``<img src="priority:high">`` where the
observer wrote 🔴; ``ObservationLogView`` answers those names with a drawn picture, so the markers look
the same with or without a colour-emoji font.

A long log (thousands of observations) is shown a slice of paragraphs at a time, one slice per turn of
the event loop (``show_log``): parsing 5,000 paragraphs in one ``setHtml`` held the UI thread ~120 ms.
"""

from __future__ import annotations

from itertools import islice
from typing import Any, Iterable, Iterator

from PySide6.QtCore import QPointF, QRectF, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QColor, QImage, QPainter, QPainterPath, QPen, QTextCursor, QTextDocument
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


SLICE = 100  # paragraphs added per turn of the event loop (~5 ms of the UI thread)


class ObservationLogView(QTextBrowser):
    """A read-only log view that draws the ``priority:<name>`` images itself and fills in slices."""

    filled = Signal()  # the whole log given to ``show_log`` is in the view

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)
        self._images: dict[str, QImage] = {}
        self._rest: Iterator[str] = iter(())  # the paragraphs still to add
        # A timer, not a chain of queued calls: timers take turns, so the UI thread paints and handles
        # input between two slices.
        self._slices = QTimer(self)
        self._slices.setInterval(0)
        self._slices.timeout.connect(self._more)

    @property
    def filling(self) -> bool:
        return self._slices.isActive()

    def show_log(self, paragraphs: Iterable[str]) -> None:
        """Show ``paragraphs`` (HTML): the first ``SLICE`` now, each further slice on a later turn of the
        event loop, so a log of any length never holds the UI thread for more than a slice. A newer
        ``show_log`` or ``clear`` drops the slices still to come."""
        self._rest = iter(paragraphs)
        self.setHtml("\n".join(islice(self._rest, SLICE)))
        self._slices.start()

    def _more(self) -> None:
        part = list(islice(self._rest, SLICE))
        if not part:
            self._slices.stop()
            self.filled.emit()
            return
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertBlock()  # (a fragment's first paragraph would otherwise join the last one shown)
        cursor.insertHtml("\n".join(part))

    def clear(self) -> None:
        self._slices.stop()
        self._rest = iter(())
        super().clear()

    def loadResource(self, kind: int, name: QUrl | str) -> Any:  # noqa: N802 - Qt's name
        url = name.toString() if isinstance(name, QUrl) else name
        if kind == QTextDocument.ResourceType.ImageResource.value and url.startswith(MARK_URL):
            mark = url[len(MARK_URL):]
            if mark in _COLOURS:
                if mark not in self._images:
                    self._images[mark] = marker_image(mark, _COLOURS[mark])
                return self._images[mark]
        return super().loadResource(kind, name)
