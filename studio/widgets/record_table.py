"""One thin table adapter for lists of plain Python records (fragments, skips, versions, agents).

Columns are declared as data (title + accessor), so each pane's table is a few lines, and ``data()``
never does I/O: it reads the record the pane handed over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, Sequence, TypeVar

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, QObject, Qt
from PySide6.QtGui import QColor

R = TypeVar("R")

ROW_ROLE = Qt.ItemDataRole.UserRole + 1  # the record itself
SORT_ROLE = Qt.ItemDataRole.UserRole + 2

_Index = QModelIndex | QPersistentModelIndex


@dataclass(frozen=True)
class Column(Generic[R]):
    title: str
    text: Callable[[R], Any]
    align: Qt.AlignmentFlag = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
    tooltip: Callable[[R], str] | None = None
    color: Callable[[R], str | None] | None = None  # a swatch (decoration) colour
    foreground: Callable[[R], str | None] | None = None


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

    def rows(self) -> list[R]:
        return list(self._rows)

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
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return int(col.align)
        if role == Qt.ItemDataRole.ToolTipRole and col.tooltip is not None:
            return col.tooltip(rec)
        if role == Qt.ItemDataRole.DecorationRole and col.color is not None:
            colour = col.color(rec)
            return QColor(colour) if colour else None
        if role == Qt.ItemDataRole.ForegroundRole and col.foreground is not None:
            colour = col.foreground(rec)
            return QColor(colour) if colour else None
        return None
