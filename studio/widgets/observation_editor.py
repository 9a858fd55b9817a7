"""The current generation's observations, one per line, with Edit… and Delete… (the Observations pane).

Only observation lines are listed (not dates, boundaries or tags: ``core.edits.observations``), and
only for the current generation: earlier ones are history no turn reads. Edit… opens a one-line
editor; Delete… asks first. Nothing is written here: ``change_requested(record id, thread id,
resource id, old line, new line or None)`` goes to the window's edit actions, which write it on a
worker, version it, and put it on the undo stack.

The list is a model Qt asks for the rows it draws (``ObservationLinesModel``: one-line rows of one
height, the whole line in the tooltip). A list widget of a 5,000-line generation made 5,000 items and
laid them all out, word-wrapped, on the UI thread.
"""

from __future__ import annotations

from typing import Any, Sequence

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, QSize, Qt, Signal
from PySide6.QtGui import QFont, QIcon, QPixmap
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QLineEdit,
    QListView,
    QPushButton,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from core.observational import OMRecord
from studio.dialogs import build_confirm_box
from studio.logic.observations_layout import PRIORITY_MARKS, observation_lines
from studio.widgets.code_editor import unview_marks, view_marks
from studio.widgets.elided_label import ElidedLabel
from studio.widgets.flow_layout import FlowLayout
from studio.widgets.pane_header import elastic
from studio.widgets.plain_tip import plain_tip
from studio.widgets.priority_marks import marker_for
from studio.theme import set_tone
from studio.widgets.a11y import named
from studio.widgets.scroll_fit import dialog_body


LINE_ROLE = Qt.ItemDataRole.UserRole + 1  # the line exactly as stored
REFLECTED = "from the reflection: the reflector's rewrite of earlier observations"
OBSERVED = "from the observer, after the reflection"
_ICONS: dict[int, QIcon] = {}  # id of the mark's image (one per mark and theme) -> its icon


def _shown(line: str, whose: str = "") -> tuple[str, str | None, str]:
    """A row as shown: the priority drawn as an icon (no emoji font needed; the mark's name here, its icon
    made for the theme in force when drawn), the rest as text; the tooltip holds the whole line (a row is
    one line, cut at the list's width), what the mark means and ``whose`` (in a reflection generation: the
    reflector's line or the observer's)."""
    text, mark, meaning = line, None, ""
    for emoji, (name, _colour, what) in PRIORITY_MARKS.items():
        if emoji in text:
            mark, meaning = name, what
            text = text.replace(emoji, "").replace("*  ", "* ")
            break
    text = text.lstrip("*- ").strip()
    notes = "".join(f"\n({n})" for n in (meaning, whose) if n)
    return text, mark, plain_tip(text + notes)


def _italic() -> QFont:
    font = QFont(QApplication.font())
    font.setItalic(True)
    return font


def _icon(mark: str) -> QIcon:
    image = marker_for(mark)
    if id(image) not in _ICONS:
        _ICONS[id(image)] = QIcon(QPixmap.fromImage(image))
    return _ICONS[id(image)]


class _OneLine(QStyledItemDelegate):
    """Rows as wide as the list, not as their text: a long line is cut with "…" (its tooltip has all of
    it) instead of widening every row and adding a horizontal scroll bar."""

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:  # noqa: N802
        return QSize(1, super().sizeHint(option, index).height())


class ObservationLinesModel(QAbstractListModel):
    """The observation lines as a list model: a row's text and icon are made the first time Qt asks for
    that row (only rows on screen are asked for) and kept until the lines change."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self._lines: list[str] = []
        self.made: dict[int, tuple[str, str | None, str]] = {}  # row -> (text, mark, tooltip), as asked
        self.reflected = 0  # the first rows that are a reflection's output, not the observer's

    def set_lines(self, lines: list[str], reflected: int = 0) -> None:
        """``reflected``: how many of the first lines are a reflection's output (each row's tooltip says whose)."""
        self.beginResetModel()
        self._lines, self.made, self.reflected = lines, {}, reflected
        self.endResetModel()

    def line(self, row: int) -> str | None:
        return self._lines[row] if 0 <= row < len(self._lines) else None

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: N802, B008
        return 0 if parent.isValid() else len(self._lines)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        row = index.row()
        if not index.isValid() or not 0 <= row < len(self._lines):
            return None
        if role == LINE_ROLE:
            return self._lines[row]
        if role == Qt.ItemDataRole.FontRole:  # (a reflection's line in italics: the note under the list says so)
            return _italic() if row < self.reflected else None
        if role not in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.DecorationRole, Qt.ItemDataRole.ToolTipRole):
            return None
        shown = self.made.get(row)
        if shown is None:
            shown = self.made[row] = _shown(self._lines[row], REFLECTED if row < self.reflected else
                                            OBSERVED if self.reflected else "")
        text, mark, tooltip = shown
        if role == Qt.ItemDataRole.DisplayRole:
            return text
        if role == Qt.ItemDataRole.DecorationRole:
            return _icon(mark) if mark is not None else None
        return tooltip


class ObservationLineDialog(QDialog):
    saved = Signal(str)

    def __init__(self, line: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("observationEditDialog")
        self.setWindowTitle("Edit Observation")
        self.resize(640, 150)
        layout = QVBoxLayout(dialog_body(self))
        layout.addWidget(elastic(QLabel("The next turn reads the changed observation; turns that ran before keep "
                                        "the log of their time. Edit > Undo Memory Edit reverts it."), wrap=True))
        self.edit = QLineEdit(view_marks(line.strip()))  # priority emoji as marks any font can draw
        self.edit.setObjectName("observationLine")
        named(self.edit, "Observation")
        layout.addWidget(self.edit)
        self.error = elastic(QLabel(""), wrap=True)  # why Save did not save (instead of a click that does nothing)
        set_tone(self.error, "error")
        self.error.hide()
        self.edit.textEdited.connect(lambda _t: self.error.hide())
        layout.addWidget(self.error)
        buttons = QDialogButtonBox()
        self.save_btn = buttons.addButton("Save Edit", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._save)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def _save(self) -> None:
        text = unview_marks(self.edit.text()).strip()
        if not text:
            self.error.setText("An observation cannot be empty. To remove it, use Delete Observation… instead.")
            self.error.show()
            return
        self.saved.emit(text)
        self.accept()


class ObservationLinesEditor(QWidget):
    change_requested = Signal(str, object, str, str, object)  # record id, thread id, resource id, old, new|None

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("observationLines")
        self.record: OMRecord | None = None
        self.thread_id: str | None = None
        self.resource_id = ""
        self.dialog: QDialog | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.model = ObservationLinesModel(self)
        self.list = QListView(self)
        self.list.setObjectName("observationLineList")
        self.list.setModel(self.model)
        # One height for every row: Qt then measures one row, not each of thousands.
        self.list.setUniformItemSizes(True)
        self.list.setWordWrap(False)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setItemDelegate(_OneLine(self.list))
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        layout.addWidget(self.list)
        # A flow: the buttons and the note asked 341 px in one row, so beside the generations (which now ask their
        # columns' least) the pane stacked at 1,100 px. Where they fit, one row as before.
        bar = QWidget()
        row = FlowLayout(bar)
        row.setContentsMargins(0, 0, 0, 0)
        self.edit_btn = QPushButton("Edit Observation…")
        self.delete_btn = QPushButton("Delete Observation…")
        # The count on a line of its own, under the list it counts: beside the buttons, at a 1,440 px window,
        # it read "8 observation(s) in the current…" (still cut with "…" where even its line is too narrow).
        self.note = elastic(ElidedLabel(""))
        self.note.setStyleSheet("color: palette(placeholder-text);")
        for button in (self.edit_btn, self.delete_btn):
            button.setEnabled(False)
            row.addWidget(button)
        layout.addWidget(self.note)
        layout.addWidget(bar)
        self.list.selectionModel().currentRowChanged.connect(self._update)
        self.list.doubleClicked.connect(lambda _index: self.edit_current())
        self.edit_btn.clicked.connect(self.edit_current)
        self.delete_btn.clicked.connect(self.delete_current)

    def set_record(self, record: OMRecord | None, *, current: bool, thread_id: str | None, resource_id: str,
                   lines: Sequence[str] | None = None, reflected: int = 0) -> None:
        """``lines``: the record's observation lines when the caller has them (taken apart on a worker);
        otherwise they are taken from the record here. ``reflected``: how many of the first are a reflection's."""
        self.record = record if current else None
        self.thread_id, self.resource_id = thread_id, resource_id
        shown: list[str] = []
        if record is None:
            self.note.setText("")
        elif not current:
            self.note.setText("An earlier generation: only the current one can be edited.")
        else:
            shown = list(lines if lines is not None else observation_lines(record.active_observations))
            if reflected:
                self.note.setText(f"{len(shown):,} observation(s): {reflected:,} from the reflection (in italics), "
                                  f"{len(shown) - reflected:,} from the observer")
            else:
                self.note.setText(f"{len(shown):,} observation(s) in the current generation")
        self.model.set_lines(shown, reflected if current else 0)
        self._update()

    def set_current_row(self, row: int) -> None:
        self.list.setCurrentIndex(self.model.index(row))

    def current_line(self) -> str | None:
        index = self.list.currentIndex()
        return self.model.line(index.row()) if index.isValid() else None

    def _update(self, *_args: object) -> None:
        can = self.record is not None and self.current_line() is not None and bool(self.resource_id)
        self.edit_btn.setEnabled(can)
        self.delete_btn.setEnabled(can)

    def edit_current(self) -> None:
        line, record = self.current_line(), self.record
        if line is None or record is None:
            return
        dialog = ObservationLineDialog(line, self)
        dialog.saved.connect(lambda new: self.change_requested.emit(record.id, self.thread_id, self.resource_id,
                                                                    line, new) if new != line else None)
        self.dialog = dialog
        dialog.open()

    def delete_current(self) -> None:
        line, record = self.current_line(), self.record
        if line is None or record is None:
            return
        box = build_confirm_box(self, "Delete this observation?",
                                f"Delete “{view_marks(line)}” from the observation log?",
                                "The next turn no longer reads it; turns that ran before keep the log of their "
                                "time. Edit > Undo Memory Edit brings it back.", "Delete")
        yes = box.property("yesButton")
        box.finished.connect(lambda _r: self.change_requested.emit(record.id, self.thread_id, self.resource_id,
                                                                   line, None) if box.clickedButton() is yes else None)
        self.dialog = box
        box.open()


__all__ = ["ObservationLineDialog", "ObservationLinesEditor", "ObservationLinesModel"]
