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

from PySide6.QtCore import QEvent, QPointF, QRectF, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QColor, QImage, QPainter, QPainterPath, QPalette, QPen, QTextCursor, QTextDocument
from PySide6.QtWidgets import QApplication, QTextBrowser, QWidget

from studio.logic.observations_layout import MARK_URL, PRIORITY_MARKS
from studio.theme import AA_GRAPHICS, readable

SIZE = 22  # drawn at twice the 11-px display size, so it stays crisp on high-DPI screens


def marker_image(name: str, colour: str, palette: QPalette | None = None) -> QImage:
    """The mark ``name`` in ``colour``, shaded where it would read below 3:1 on ``palette``'s rows (Base and
    AlternateBase; the application's when None): the amber and green chosen for the dark theme read 2.1 and
    2.6:1 on the light theme's white, and a mark's colour is all that tells high, medium and low apart."""
    pal = palette if palette is not None else QApplication.palette()
    fill = readable(QColor(colour), pal.color(QPalette.ColorRole.Base), pal.color(QPalette.ColorRole.AlternateBase),
                    ratio=AA_GRAPHICS)
    image = QImage(SIZE, SIZE, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    p = QPainter(image)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    if name == "done":  # a check mark in a rounded square
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(fill)
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
        p.setBrush(fill)
        p.drawEllipse(QRectF(2, 2, SIZE - 4, SIZE - 4))
    p.end()
    return image


_COLOURS = {name: colour for name, colour, _meaning in PRIORITY_MARKS.values()}
_MADE: dict[tuple[str, int, int], QImage] = {}


def marker_for(name: str, palette: QPalette | None = None) -> QImage:
    """``marker_image`` of a known mark, made once per mark and row colours."""
    pal = palette if palette is not None else QApplication.palette()
    key = (name, pal.color(QPalette.ColorRole.Base).rgb(), pal.color(QPalette.ColorRole.AlternateBase).rgb())
    if key not in _MADE:
        _MADE[key] = marker_image(name, _COLOURS[name], pal)
    return _MADE[key]


SLICE = 100  # paragraphs added per turn of the event loop (~5 ms of the UI thread)


class ObservationLogView(QTextBrowser):
    """A read-only log view that draws the ``priority:<name>`` images itself and fills in slices."""

    filled = Signal()  # the whole log given to ``show_log`` is in the view

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)
        self._marks: set[str] = set()  # the marks the document has asked for (drawn for this palette)
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
                self._marks.add(mark)
                return marker_for(mark, self.palette())
        return super().loadResource(kind, name)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt's name
        """A theme switch: the document keeps the marks it loaded, so each is given again in the new
        palette's shade (the text itself is not parsed again)."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self._marks:
            doc = self.document()
            for mark in self._marks:
                doc.addResource(QTextDocument.ResourceType.ImageResource.value, QUrl(MARK_URL + mark),
                                marker_for(mark, self.palette()))
            doc.markContentsDirty(0, doc.characterCount())
            self.viewport().update()
