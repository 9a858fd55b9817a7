"""One thin table adapter for lists of plain Python records (fragments, skips, versions, agents).

Columns are declared as data (title + accessor), so each pane's table is a few lines, and ``data()``
never does I/O: it reads the record the pane handed over.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Callable, Generic, Sequence, TypeVar

import shiboken6
from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, QObject, Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QAbstractItemView, QApplication, QHeaderView, QTableView, QWidget

from studio.theme import readable
from studio.widgets.plain_tip import plain_tip


class RowTableView(QTableView):
    """A table whose rows are the items (whole rows selected): Home and End go to the first and the last
    row. A plain QTableView moves them along the columns of the current row, which with whole-row
    selection changes nothing the user can see (only Ctrl+Home / Ctrl+End reached the ends). With no
    current row yet, a key starts from the rows on screen: Qt jumps to the first row of the model, which
    for a message list opened at its newest message is the oldest one, hundreds of rows away.
    Tab and Shift+Tab move the focus on, as everywhere else: a QTableView moves them from cell to cell,
    which with whole rows selected shows nothing and kept a keyboard user in a 20,000-message list."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTabKeyNavigation(False)

    def moveCursor(self, cursorAction: QAbstractItemView.CursorAction,  # noqa: N802, N803 - Qt's names
                   modifiers: Qt.KeyboardModifier) -> QModelIndex:
        action = QAbstractItemView.CursorAction
        rows = self.selectionBehavior() == QAbstractItemView.SelectionBehavior.SelectRows
        if rows and cursorAction in (action.MoveHome, action.MoveEnd):
            modifiers = modifiers | Qt.KeyboardModifier.ControlModifier
        model = self.model()
        if not self.currentIndex().isValid() and model is not None and model.rowCount(self.rootIndex()):
            count = model.rowCount(self.rootIndex())
            if cursorAction == action.MoveHome:
                row = 0
            elif cursorAction == action.MoveEnd:
                row = count - 1
            else:  # the first row on screen, or the last for a move up
                up = cursorAction in (action.MoveUp, action.MovePageUp, action.MovePrevious)
                row = self.rowAt(self.viewport().height() - 1 if up else 0)
                row = (count - 1 if up else 0) if row < 0 else row
            return model.index(row, max(self.columnAt(0), 0), self.rootIndex())
        return super().moveCursor(cursorAction, modifiers)

R = TypeVar("R")

ROW_ROLE = Qt.ItemDataRole.UserRole + 1  # the record itself
SORT_ROLE = Qt.ItemDataRole.UserRole + 2
SHORT_ROLE = Qt.ItemDataRole.UserRole + 3  # a cell's shorter forms, the most telling first (``short_forms``)

_Index = QModelIndex | QPersistentModelIndex


@dataclass(frozen=True)
class Column(Generic[R]):
    title: str
    text: Callable[[R], Any]
    align: Qt.AlignmentFlag = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
    tooltip: Callable[[R], str] | None = None
    color: Callable[[R], str | None] | None = None  # a swatch (decoration) colour
    foreground: Callable[[R], str | None] | None = None
    short: Callable[[R], Sequence[str]] | None = None  # shorter forms, drawn where the text does not fit


RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter


class RecordTableModel(QAbstractTableModel, Generic[R]):
    def __init__(self, columns: Sequence[Column[R]], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._columns = list(columns)
        self._rows: list[R] = []

    def set_rows(self, rows: Sequence[R]) -> None:
        self.beginResetModel()
        self._rows = list(rows)
        self.endResetModel()

    def update_rows(self, rows: Sequence[R]) -> None:
        """``set_rows`` for a table re-filled often: as many rows as before change in place (no model
        reset, so the view keeps its layout); nothing at all when the rows are equal."""
        rows = list(rows)
        if rows == self._rows:
            return
        if len(rows) != len(self._rows) or not rows:
            self.set_rows(rows)
            return
        self._rows = rows
        self.dataChanged.emit(self.index(0, 0), self.index(len(rows) - 1, len(self._columns) - 1))

    def append_rows(self, rows: Sequence[R], keep: int | None = None) -> None:
        """Add ``rows`` at the end (inserted, not a reset: the view keeps its selection and scroll); with
        ``keep``, the oldest rows beyond it are removed first."""
        rows = list(rows)
        if keep is not None:
            over = len(self._rows) + len(rows) - keep
            if over > 0:
                gone = min(over, len(self._rows))
                if gone:
                    self.beginRemoveRows(QModelIndex(), 0, gone - 1)
                    del self._rows[:gone]
                    self.endRemoveRows()
                rows = rows[len(rows) - min(len(rows), keep):]
        if rows:
            start = len(self._rows)
            self.beginInsertRows(QModelIndex(), start, start + len(rows) - 1)
            self._rows.extend(rows)
            self.endInsertRows()

    def rows(self) -> list[R]:
        return list(self._rows)

    def retitle(self, section: int, title: str) -> None:
        """Head column ``section`` with ``title`` (a column that shows another thing in another mode)."""
        if self._columns[section].title != title:
            self._columns[section] = replace(self._columns[section], title=title)
            self.headerDataChanged.emit(Qt.Orientation.Horizontal, section, section)

    def row_at(self, row: int) -> R | None:
        return self._rows[row] if 0 <= row < len(self._rows) else None

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._columns)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return self._columns[section].title
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.TextAlignmentRole:
            return int(self._columns[section].align)
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.ToolTipRole:
            return self._columns[section].title  # (a heading cut short is read whole on hover)
        return None

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        rec = self._rows[index.row()]
        col = self._columns[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            value = col.text(rec)
            return "" if value is None else str(value)
        if role == SORT_ROLE:
            return col.text(rec)
        if role == ROW_ROLE:
            return rec
        if role == SHORT_ROLE:
            return tuple(col.short(rec)) if col.short is not None else ()
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return int(col.align)
        if role == Qt.ItemDataRole.ToolTipRole and col.tooltip is not None:
            tip = col.tooltip(rec)
            return plain_tip(tip) if isinstance(tip, str) else tip
        if role == Qt.ItemDataRole.DecorationRole and col.color is not None:
            colour = col.color(rec)
            return QColor(colour) if colour else None
        if role == Qt.ItemDataRole.ForegroundRole and col.foreground is not None:
            colour = col.foreground(rec)
            if not colour:
                return None
            # (a colour chosen for both themes, shaded where it would be hard to read on this one's rows)
            pal = QApplication.palette()
            return QColor(_readable_rgb(QColor(colour).rgb(), pal.color(QPalette.ColorRole.Base).rgb(),
                                        pal.color(QPalette.ColorRole.AlternateBase).rgb()))
        return None


@lru_cache(maxsize=256)
def _readable_rgb(colour: int, base: int, alternate: int) -> int:
    return readable(QColor(colour), QColor(base), QColor(alternate)).rgb()


LEAST_ROWS = 3  # rows a table keeps in sight however short its pane (a page scrolls below it instead)


def keep_rows_in_sight(view: QAbstractItemView, rows: int = LEAST_ROWS) -> None:
    """``view``'s least height: its header and ``rows`` rows, and a sideways scroll bar's height while it
    shows one. In a short window (900 x 700) a splitter or a crowded layout squeezed Replay's context table
    to its header; the pane's page scrolls instead."""
    header = view.horizontalHeader() if isinstance(view, QTableView) else getattr(view, "header", lambda: None)()
    head = header.sizeHint().height() if header is not None and not header.isHidden() else 0
    row = view.verticalHeader().defaultSectionSize() if isinstance(view, QTableView) else 0
    row = max(row, view.fontMetrics().height() + 8)
    bar = view.horizontalScrollBar()
    watched = view.property("leastRows") is not None
    view.setProperty("leastRows", rows)  # (asked again, the last number asked holds)

    model = view.model()

    def fit(*_args: object) -> None:
        if not shiboken6.isValid(view):  # (a model outlives its view: a tree widget's own, cleared as it goes)
            return
        sideways = bar.maximum() > 0 and view.horizontalScrollBarPolicy() != Qt.ScrollBarPolicy.ScrollBarAlwaysOff
        # A tree's row is as tall as its delegate says once it has rows (the span tree's icons made its rows
        # 24 px where the font's line and padding said 23: 8 rows asked showed 7 and a half).
        shown = view.sizeHintForRow(0) if not isinstance(view, QTableView) and model is not None \
            and model.rowCount() else -1
        view.setMinimumHeight(head + int(view.property("leastRows")) * max(row, shown) + 2 * view.frameWidth()
                              + (bar.sizeHint().height() if sideways else 0))

    fit()
    if not watched:
        bar.rangeChanged.connect(fit)
        if model is not None and not isinstance(view, QTableView):
            model.modelReset.connect(fit)
            model.rowsInserted.connect(fit)


def record_table_view(
    model: RecordTableModel[Any], *, widths: dict[str, int] | None = None,
    selection: QAbstractItemView.SelectionMode = QAbstractItemView.SelectionMode.SingleSelection,
) -> QTableView:
    """The read-only view every pane uses for a ``RecordTableModel``: whole rows selected, one-line
    rows, columns sized to their contents and the last one stretched. ``widths`` (title → pixels)
    fixes those columns instead: a table re-filled often must not measure every cell again, and a
    column of long texts must never widen the window."""
    table = RowTableView()
    table.setModel(model)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(selection)
    table.verticalHeader().hide()
    table.verticalHeader().setDefaultSectionSize(table.fontMetrics().height() + 8)
    table.setAlternatingRowColors(True)
    table.setShowGrid(False)
    table.setWordWrap(False)
    header = table.horizontalHeader()
    # A title longer than its column is cut at its end with "…" (Qt's header here elides nothing: a
    # right-aligned title lost its start, "Our estimate" showing as ":imate"; the themes give the header
    # the weight its sections are painted in, which the cut is measured in).
    header.setTextElideMode(Qt.TextElideMode.ElideRight)
    header.setStretchLastSection(True)
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(model.columnCount() - 1, QHeaderView.ResizeMode.Stretch)
    for col in range(model.columnCount() - 1):
        width = (widths or {}).get(model.headerData(col, Qt.Orientation.Horizontal))
        if width:
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Interactive)
            header.resizeSection(col, width)
    keep_rows_in_sight(table)
    return table


def keep_current_in_sight(view: QAbstractItemView) -> None:
    """Scroll ``view`` to its current row whenever its scroll range changes (its height or its rows did). A
    row picked while the view was taller was left below its fold once the layout settled on a shorter view:
    Replay opened at a thread's last turn picked its first changed fragment at 720 x 800, and the table
    (three rows high) stayed at its top, the detail under it describing a row out of sight. A user's own
    scrolling changes no range, so it is left alone."""

    def follow(*_args: object) -> None:
        if shiboken6.isValid(view) and view.currentIndex().isValid():
            view.scrollTo(view.currentIndex())  # (EnsureVisible: nothing where it is in sight)

    view.verticalScrollBar().rangeChanged.connect(follow)
