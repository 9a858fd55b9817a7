"""A list whose rows are as wide as the list, each line of a row's text cut with "…" at its edge.

A ``QListView`` lays its rows out as wide as their widest text: a row longer than the list made the
whole list scroll sideways, and the part past the edge was simply not there, with no "…" to say so
(the left pane's search results, a title line over a snippet of the message). ``fit_rows_to_width``
gives a list this delegate: a row asks for no width of its own, so each is the list's width, and each
line of its text is cut to fit with "…" (Qt cuts only the last line of a text of several lines). The
whole text belongs in the row's tooltip (``plain_tip``: the rows show stored text).
"""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QApplication, QListView, QStyle, QStyledItemDelegate, QStyleOptionViewItem

from studio.widgets.item_text import text_room


LINE_SEPARATOR = "\u2028"  # what Qt turns a row's "\n" into (``initStyleOption``), and draws as a line break


class ElidedLinesDelegate(QStyledItemDelegate):
    def shown_lines(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> list[str]:
        """The lines of the row's text as drawn in ``option.rect``: each cut with "…" to the text's room."""
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        return self._elided(opt)

    def _elided(self, opt: QStyleOptionViewItem) -> list[str]:
        room = text_room(opt)
        metrics = opt.fontMetrics
        text: str = opt.text.replace("\n", LINE_SEPARATOR)
        return [metrics.elidedText(line, Qt.TextElideMode.ElideRight, max(room, 0))
                for line in text.split(LINE_SEPARATOR)]

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        opt.text = LINE_SEPARATOR.join(self._elided(opt))
        widget = opt.widget
        style = widget.style() if widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:  # noqa: N802
        """The text's height, and no width of its own: the list makes a row as wide as itself (no wider)."""
        return QSize(1, super().sizeHint(option, index).height())


def fit_rows_to_width(view: QListView) -> ElidedLinesDelegate:
    """Give ``view`` rows as wide as it, their lines cut with "…", and no sideways scrolling."""
    delegate = ElidedLinesDelegate(view)
    view.setItemDelegate(delegate)
    view.setWordWrap(False)
    view.setTextElideMode(Qt.TextElideMode.ElideRight)
    view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    view.setResizeMode(QListView.ResizeMode.Adjust)  # (the rows follow the list's width as it changes)
    return delegate


__all__ = ["ElidedLinesDelegate", "fit_rows_to_width"]
