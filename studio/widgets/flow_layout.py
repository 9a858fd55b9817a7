"""A layout that lines its items up left to right and wraps them onto the next row when the width
runs out (Qt's flow-layout example), so a bar of many controls never sets the window's width.

Its minimum width is its widest single item, not the sum of all of them. An item added with a stretch
(``add``) shares what its row leaves over, as in a box layout: where a bar fits on one row it looks as the
box it replaced did, its combos as wide as the window gives them. An *elastic* item (a label that ends in "…")
asks only its least width of the row, then takes its share of what is left.
"""

from __future__ import annotations

from PySide6.QtCore import QMargins, QPoint, QRect, QSize, Qt, QTimer
from PySide6.QtWidgets import QHBoxLayout, QLayout, QLayoutItem, QWidget

from studio.widgets.a11y import label_for


class FlowLayout(QLayout):
    def __init__(self, parent: QWidget | None = None, spacing: int = 6, row_spacing: int = 4) -> None:
        super().__init__(parent)
        self._items: list[QLayoutItem] = []
        self._spacing = spacing
        self._row_spacing = row_spacing
        self._rows_height = 0  # the height of its rows at the width it was last given
        self._stretch: dict[int, int] = {}  # id() of an item: its share of its row's room left over
        self._elastic: set[int] = set()  # id() of an item that asks its least width of a row, not its hint

    def add(self, widget: QWidget, stretch: int = 0, *, elastic: bool = False) -> None:
        """Add ``widget``; with a ``stretch``, it takes that share of the room its row leaves over; ``elastic``:
        it asks a row only its least width (its text is cut to what it gets)."""
        self.addWidget(widget)
        if stretch:
            self._stretch[id(self._items[-1])] = stretch
        if elastic:
            self._elastic.add(id(self._items[-1]))

    # -- QLayout ------------------------------------------------------------------------------------
    def addItem(self, item: QLayoutItem) -> None:  # noqa: N802 - Qt's name
        self._items.append(item)

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QLayoutItem | None:  # noqa: N802
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:  # noqa: N802
        if not 0 <= index < len(self._items):
            return None
        item = self._items.pop(index)
        self._stretch.pop(id(item), None)
        self._elastic.discard(id(item))
        return item

    def expandingDirections(self) -> Qt.Orientation:  # noqa: N802
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:  # noqa: N802
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802
        return self._arrange(QRect(0, 0, width, 0), move=False)

    def setGeometry(self, rect: QRect) -> None:  # noqa: N802
        super().setGeometry(rect)
        height = self._arrange(rect, move=True)
        if height != self._rows_height:
            # Its rows at this width are its least height: where the window was short of height the parent
            # gave the bar one row's minimum, and a wrapped row (a 900 px window's last options) was drawn
            # outside it, out of sight. Asked again once this layout pass is over.
            self._rows_height = height
            QTimer.singleShot(0, self, self._grown)  # (dropped if the layout is gone by then)

    def _grown(self) -> None:
        widget = self.parentWidget()
        if widget is not None:
            self.invalidate()
            widget.updateGeometry()

    def sizeHint(self) -> QSize:  # noqa: N802
        """One row of everything: what the bar would like when there is room."""
        width = sum(i.sizeHint().width() for i in self._items) + self._spacing * max(len(self._items) - 1, 0)
        height = max((i.sizeHint().height() for i in self._items), default=0)
        return QSize(width, height) + self._margin_size()

    def minimumSize(self) -> QSize:  # noqa: N802
        size = QSize()
        for item in self._items:
            size = size.expandedTo(item.minimumSize())
        size += self._margin_size()
        return QSize(size.width(), max(size.height(), self._rows_height))

    # -- layout -------------------------------------------------------------------------------------
    def _margin_size(self) -> QSize:
        m: QMargins = self.contentsMargins()
        return QSize(m.left() + m.right(), m.top() + m.bottom())

    def _arrange(self, rect: QRect, *, move: bool) -> int:
        m = self.contentsMargins()
        area = rect.adjusted(m.left(), m.top(), -m.right(), -m.bottom())
        rows: list[list[tuple[QLayoutItem, QSize]]] = [[]]
        x = 0
        for item in self._items:
            if item.isEmpty():
                continue
            hint = item.sizeHint()
            if id(item) in self._elastic:
                hint.setWidth(item.minimumSize().width())
            if rows[-1] and x + hint.width() > area.width():
                rows.append([])
                x = 0
            rows[-1].append((item, hint))
            x += hint.width() + self._spacing
        y = area.y()
        for row in rows:
            if not row:
                continue
            # (an item wider than the row, a flow of its own, is given the row and wraps inside at that width)
            row = [(item, QSize(area.width(), item.heightForWidth(area.width()) if item.hasHeightForWidth()
                                else hint.height()) if hint.width() > area.width() > 0 else hint)
                   for item, hint in row]
            row_height = max(hint.height() for _item, hint in row)
            if move:
                used = sum(hint.width() for _item, hint in row) + self._spacing * (len(row) - 1)
                left, stretches = max(area.width() - used, 0), sum(self._stretch.get(id(i), 0) for i, _h in row)
                x = area.x()
                for item, hint in row:
                    share = left * self._stretch.get(id(item), 0) // stretches if stretches else 0
                    item.setGeometry(QRect(QPoint(x, y), QSize(hint.width() + share, hint.height())))
                    x += hint.width() + share + self._spacing
            y += row_height + self._row_spacing
        return y - self._row_spacing - rect.y() + m.bottom() if any(rows) else m.top() + m.bottom()


def labelled(label: str, widget: QWidget) -> QWidget:
    """A label and its control as one item of a flow bar, so the two never wrap apart (given more than it asks,
    by a stretch: the control takes it)."""
    holder = QWidget()
    layout = QHBoxLayout(holder)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.setSpacing(4)
    layout.addWidget(label_for(label, widget))
    layout.addWidget(widget, 1)
    return holder
