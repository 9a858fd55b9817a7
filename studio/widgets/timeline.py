"""A span tree with a waterfall column: a thin tree adapter over ``TraceLayout`` plus a bar painter.

The layout (offsets, widths, depth, colours) is computed in ``studio.logic.traces_layout``; the model
only hands those values out by role and the delegate only paints them.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QAbstractItemModel, QModelIndex, QObject, QPersistentModelIndex, QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPen, QPolygonF
from PySide6.QtWidgets import QSizePolicy, QStyle, QStyleOptionViewItem, QWidget

from studio.logic.traces_layout import (
    ERROR_COLOR,
    UNFINISHED_FORMS,
    TimelineRow,
    TraceLayout,
    format_duration,
    span_color,
    span_label,
    time_ticks,
)
from studio.widgets.plain_tip import plain_tip
from studio.widgets.record_table import SHORT_ROLE
from studio.widgets.short_forms import ShortFormDelegate

ROW_ROLE = Qt.ItemDataRole.UserRole + 1  # the TimelineRow
SPAN_ID_ROLE = Qt.ItemDataRole.UserRole + 2

COL_NAME, COL_TYPE, COL_DURATION, COL_TIMELINE = range(4)
HEADERS = ("Span", "Type", "Duration", "Timeline")

_Index = QModelIndex | QPersistentModelIndex


class SpanTreeModel(QAbstractItemModel):
    """Rows are ``TraceLayout.rows``; an index's internal id is the row's position plus one."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.layout_ = TraceLayout((), (), None, 0.0)

    def set_layout(self, layout: TraceLayout) -> None:
        self.beginResetModel()
        self.layout_ = layout
        self.endResetModel()

    def row(self, index: _Index) -> TimelineRow | None:
        if not index.isValid():
            return None
        return self.layout_.rows[index.internalId() - 1]

    def _siblings(self, parent: TimelineRow | None) -> tuple[int, ...]:
        return self.layout_.roots if parent is None else parent.children

    def index(self, row: int, column: int, parent: _Index = QModelIndex()) -> QModelIndex:  # noqa: B008
        siblings = self._siblings(self.row(parent))
        if not (0 <= row < len(siblings)) or not (0 <= column < len(HEADERS)):
            return QModelIndex()
        return self.createIndex(row, column, siblings[row] + 1)

    def parent(self, index: _Index = QModelIndex()) -> QModelIndex:  # type: ignore[override]  # noqa: B008
        node = self.row(index)
        if node is None or node.parent is None:
            return QModelIndex()
        up = self.layout_.rows[node.parent]
        grand = self.layout_.rows[up.parent] if up.parent is not None else None
        return self.createIndex(self._siblings(grand).index(up.index), 0, up.index + 1)

    def index_of(self, span_id: str, column: int = 0) -> QModelIndex:
        node = self.layout_.row_of(span_id)
        if node is None:
            return QModelIndex()
        up = self.layout_.rows[node.parent] if node.parent is not None else None
        return self.createIndex(self._siblings(up).index(node.index), column, node.index + 1)

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008
        if parent.isValid() and parent.column() != 0:
            return 0
        return len(self._siblings(self.row(parent)))

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008
        return len(HEADERS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return HEADERS[section]
        if role == Qt.ItemDataRole.ToolTipRole and section == COL_TIMELINE and self.layout_.rows:
            return f"0 → {format_duration(self.layout_.total_ms)} from the trace's first span"
        if role == Qt.ItemDataRole.TextAlignmentRole and section == COL_DURATION:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        node = self.row(index)
        if node is None:
            return None
        col = index.column()
        span = node.span
        if role == ROW_ROLE:
            return node
        if role == SPAN_ID_ROLE:
            return span.span_id
        if role == Qt.ItemDataRole.DisplayRole:
            if col == COL_NAME:
                return ("⚠ " if node.error else "") + span.name
            if col == COL_TYPE:
                return span_label(span.span_type)
            if col == COL_DURATION:
                return node.duration_text
            return None
        if role == SHORT_ROLE and col == COL_DURATION and node.unfinished:
            # ("never finished" read "never fi…" in the column; the caption, the Timeline cell and the tooltip say it)
            return UNFINISHED_FORMS
        if role == Qt.ItemDataRole.DecorationRole and col == COL_NAME:
            return QColor(span_color(span.span_type))
        if role == Qt.ItemDataRole.ForegroundRole:
            if node.error and col in (COL_NAME, COL_DURATION):
                return QColor(ERROR_COLOR)
            if col == COL_TYPE:
                return QColor(span_color(span.span_type))
        if role == Qt.ItemDataRole.TextAlignmentRole and col == COL_DURATION:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole:
            when = f"+{format_duration(node.start_ms)}"
            return plain_tip(f"{span.name}\n{span.span_type} · starts {when} · {node.duration_text}")
        return None


class TimelineDelegate(ShortFormDelegate):
    """Paints the waterfall bar of the Timeline column; other columns paint as usual (in the shorter forms their
    cells give where the text does not fit, ``short_forms``)."""

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: _Index) -> None:
        if index.column() != COL_TIMELINE:
            super().paint(painter, option, index)
            return
        node = index.data(ROW_ROLE)
        painter.save()
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        style = opt.widget.style() if opt.widget is not None else None
        if style is not None:  # selection / hover background like the other columns
            style.drawPrimitive(QStyle.PrimitiveElement.PE_PanelItemViewItem, opt, painter, opt.widget)
        if isinstance(node, TimelineRow):
            self._paint_bar(painter, QRectF(option.rect).adjusted(6, 0, -8, 0), node, index)
        painter.restore()

    def _paint_bar(self, painter: QPainter, rect: QRectF, node: TimelineRow, index: _Index) -> None:
        model = index.model()
        layout = getattr(model, "layout_", None)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        if layout is not None:  # faint guides at round times, the same on every row
            pen = QPen(QColor(255, 255, 255, 18))
            pen.setWidth(1)
            painter.setPen(pen)
            for fraction, _label in time_ticks(layout.total_ms):
                x = rect.left() + fraction * rect.width()
                painter.drawLine(int(x), int(rect.top()), int(x), int(rect.bottom()))
        bar_h = max(min(rect.height() - 10, 12), 4)
        top = rect.center().y() - bar_h / 2
        x = rect.left() + node.offset * rect.width()
        w = max(node.width * rect.width(), 2.0)
        colour = QColor(node.color)
        bar = QRectF(x, top, w, bar_h)
        painter.setPen(Qt.PenStyle.NoPen)
        if node.event:  # a moment: a diamond at its time, not a bar
            half = bar_h / 2 + 1
            cy = rect.center().y()
            painter.setBrush(colour)
            painter.drawPolygon(QPolygonF([QPointF(x, cy - half), QPointF(x + half, cy), QPointF(x, cy + half),
                                           QPointF(x - half, cy)]))
            w = half
        elif node.running or node.unfinished:  # still open (or never closed: grey): a hatched bar
            painter.setBrush(QBrush(colour, Qt.BrushStyle.BDiagPattern))
        else:
            painter.setBrush(colour)
        if not node.event:
            painter.drawRoundedRect(bar, 2, 2)
        if node.error:
            painter.setPen(QPen(QColor(ERROR_COLOR), 1.5))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(bar.adjusted(-1, -1, 1, 1), 2, 2)
        label = node.duration_text
        metrics = painter.fontMetrics()
        text_w = metrics.horizontalAdvance(label) + 6
        painter.setPen(QColor("#9aa4b2"))
        if x + w + text_w <= rect.right():
            painter.drawText(QRectF(x + w + 4, rect.top(), text_w, rect.height()),
                             int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), label)
        elif x - text_w >= rect.left():
            painter.drawText(QRectF(x - text_w, rect.top(), text_w - 2, rect.height()),
                             int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter), label)
        elif node.running or node.unfinished:
            self._paint_on_bar(painter, rect, bar, node)

    def _paint_on_bar(self, painter: QPainter, rect: QRectF, bar: QRectF, node: TimelineRow) -> None:
        """A span still open, or whose writer died, has its bar drawn to the trace's end, so its word ("running",
        "never finished") fits on neither side of it in a narrow tree, and the Duration cell beside it may read only
        "unfinished" or "—" there: the word is drawn on the bar, on a plate of the view's background, in the longest
        of its forms the cell holds."""
        metrics = painter.fontMetrics()
        forms = (node.duration_text, *(UNFINISHED_FORMS[:1] if node.unfinished else ()))
        label = next((f for f in forms if metrics.horizontalAdvance(f) + 6 <= rect.width()), None)
        if label is None:
            return
        text_w = metrics.horizontalAdvance(label) + 6
        left = min(max(bar.left(), rect.left()), rect.right() - text_w)
        plate = QRectF(left, rect.center().y() - metrics.height() / 2, text_w, metrics.height())
        painter.setPen(Qt.PenStyle.NoPen)
        view = self.parent()
        painter.setBrush(view.palette().base() if isinstance(view, QWidget) else QColor("#1e1f22"))
        painter.drawRoundedRect(plate, 3, 3)
        painter.setPen(QColor("#9aa4b2"))
        painter.drawText(plate, int(Qt.AlignmentFlag.AlignCenter), label)


class TimelineLegend(QWidget):
    """The colour key of the span types: one line where it fits, wrapped onto more where the pane is narrower
    (its least width is its widest entry's; a one-line least width cut the legend, and the tree under it, in a
    720 px window with the theme's 10 pt font)."""

    GAP = 14  # between one entry's label and the next entry's swatch

    def __init__(self, types: tuple[str, ...], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.types = types
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    def _entries(self) -> list[tuple[str, str, bool, int]]:
        """(label, colour, outlined, width with its swatch) of each entry, in order."""
        metrics = self.fontMetrics()
        entries = [(span_label(t), span_color(t), False) for t in self.types] + [("error", ERROR_COLOR, True)]
        return [(label, colour, outline, 18 + metrics.horizontalAdvance(label) + self.GAP)
                for label, colour, outline in entries]

    def _lines(self, width: int) -> list[list[tuple[str, str, bool, int]]]:
        lines: list[list[tuple[str, str, bool, int]]] = [[]]
        used = 0
        for entry in self._entries():
            if lines[-1] and used + entry[3] - self.GAP > width:
                lines.append([])
                used = 0
            lines[-1].append(entry)
            used += entry[3]
        return lines

    def _line_height(self) -> int:
        return self.fontMetrics().height() + 6

    def sizeHint(self) -> Any:
        return QSize(sum(e[3] for e in self._entries()), self._line_height())

    def minimumSizeHint(self) -> Any:
        return QSize(max(e[3] - self.GAP for e in self._entries()), self._line_height())

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return len(self._lines(width)) * self._line_height()

    def paintEvent(self, _event: Any) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        metrics = self.fontMetrics()
        step = self._line_height()
        for row, line in enumerate(self._lines(self.width())):
            x = 0.0
            y = row * step + step / 2
            for label, colour, outline, width in line:
                swatch = QRectF(x, y - 5, 14, 10)
                if outline:
                    painter.setPen(QPen(QColor(colour), 1.5))
                    painter.setBrush(Qt.BrushStyle.NoBrush)
                else:
                    painter.setPen(Qt.PenStyle.NoPen)
                    painter.setBrush(QColor(colour))
                painter.drawRoundedRect(swatch, 2, 2)
                painter.setPen(QColor("#9aa4b2"))
                text_w = metrics.horizontalAdvance(label)
                painter.drawText(QRectF(x + 18, row * step, text_w + 4, step),
                                 int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), label)
                x += width
        painter.end()
