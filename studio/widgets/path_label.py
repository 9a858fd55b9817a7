"""The status bar's path: the open database's path and how it was chosen, cut in the middle of its folders where the
bar has no room for it, its file name always whole (``logic.path_text``); the whole path on hover.

A plain QLabel's least width is its whole text: with a long path the bar had no room left for the status beside it
("Opened /tmp/s3…") or ran past the window's edge."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent
from PySide6.QtWidgets import QLabel, QWidget

from studio.logic.path_text import least_room, shown_path
from studio.widgets.pane_header import ELASTIC_MIN_WIDTH
from studio.widgets.plain_tip import plain_tip


class PathLabel(QLabel):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("", parent)
        self.setTextFormat(Qt.TextFormat.PlainText)  # a path is data (a folder may be named "<b>…")
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._path = ""
        self._note = ""

    def set_path(self, path: str, note: str = "", why: str = "") -> None:
        """Show ``path`` with ``note`` after it ("opened by path"); ``why`` (how it was chosen) goes in the tooltip
        under the whole path."""
        self._path, self._note = path, note
        self.setText(f"{path} · {note}" if path and note else path)
        self.setToolTip(plain_tip("\n".join(line for line in (path, f"Why this file: {why}" if why else "") if line))
                        if path else "")
        self.updateGeometry()

    def shown(self) -> str:
        """The text drawn at the label's width."""
        return shown_path(self._path, self._note, self.contentsRect().width(), self.fontMetrics().horizontalAdvance)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        hint = super().minimumSizeHint()
        if not self._path:
            return hint
        margins = self.contentsMargins()
        least = least_room(self._path, self.fontMetrics().horizontalAdvance) + margins.left() + margins.right()
        return QSize(min(hint.width(), least), hint.height())

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt's name
        shown = self.shown()
        if shown == self.text():
            super().paintEvent(event)  # (and a selection made with the mouse)
            return
        painter = QPainter(self)
        self.style().drawItemText(painter, self.contentsRect(), int(self.alignment()), self.palette(), self.isEnabled(),
                                  shown, self.foregroundRole())
        painter.end()


class StatusRoom(QObject):
    """Keeps ``label`` (the status bar's message, elastic) at least as wide as its text, up to ``share`` of ``bar``:
    the path beside it gives way first (a plain elastic label was squeezed to 40 px, "Op…", by a long path). A longer
    message is cut ("…", whole on hover): the path keeps the rest of the bar, whole where it fits there."""

    def __init__(self, bar: QWidget, label: QLabel, share: float = 0.25) -> None:
        super().__init__(bar)
        self.bar, self.label, self.share = bar, label, share
        bar.installEventFilter(self)

    def fit(self) -> None:
        margins = self.label.contentsMargins()
        want = self.label.fontMetrics().horizontalAdvance(self.label.text()) + margins.left() + margins.right() + 2
        least = max(ELASTIC_MIN_WIDTH, min(want, int(self.bar.width() * self.share)))
        if self.label.minimumWidth() != least:
            self.label.setMinimumWidth(least)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if watched is self.bar and event.type() == QEvent.Type.Resize:
            self.fit()
        return False


__all__ = ["PathLabel", "StatusRoom"]
