"""The current generation's observations, one per line, with Edit… and Delete… (the Observations pane).

Only observation lines are listed (not dates, boundaries or tags: ``core.edits.observations``), and
only for the current generation: earlier ones are history no turn reads. Edit… opens a one-line
editor; Delete… asks first. Nothing is written here: ``change_requested(record id, thread id,
resource id, old line, new line or None)`` goes to the window's edit actions, which write it on a
worker, version it, and put it on the undo stack.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QIcon, QPixmap
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from core.edits.observations import is_observation_line
from core.observational import OMRecord
from studio.dialogs import build_confirm_box
from studio.logic.observations_layout import PRIORITY_MARKS
from studio.widgets.code_editor import unview_marks, view_marks
from studio.widgets.pane_header import elastic
from studio.widgets.priority_marks import marker_image


LINE_ROLE = Qt.ItemDataRole.UserRole + 1  # the line exactly as stored
_ICONS: dict[str, QIcon] = {}


def _item(line: str) -> QListWidgetItem:
    """A list row: the priority drawn as an icon (no emoji font needed), the rest as text."""
    item = QListWidgetItem()
    item.setData(LINE_ROLE, line)
    text = line
    for emoji, (name, colour, meaning) in PRIORITY_MARKS.items():
        if emoji in text:
            if name not in _ICONS:
                _ICONS[name] = QIcon(QPixmap.fromImage(marker_image(name, colour)))
            item.setIcon(_ICONS[name])
            item.setToolTip(meaning)
            text = text.replace(emoji, "").replace("*  ", "* ")
            break
    item.setText(text.lstrip("*- ").strip())
    return item


class ObservationLineDialog(QDialog):
    saved = Signal(str)

    def __init__(self, line: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("observationEditDialog")
        self.setWindowTitle("Edit Observation")
        self.resize(640, 150)
        layout = QVBoxLayout(self)
        layout.addWidget(elastic(QLabel("The next turn reads the changed observation; turns that ran before keep "
                                        "the log of their time. Edit > Undo Memory Edit reverts it."), wrap=True))
        self.edit = QLineEdit(view_marks(line.strip()))  # priority emoji as marks any font can draw
        self.edit.setObjectName("observationLine")
        layout.addWidget(self.edit)
        self.error = elastic(QLabel(""), wrap=True)  # why Save did not save (instead of a click that does nothing)
        self.error.setStyleSheet("color: #d9534f;")
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
        self.list = QListWidget(self)
        self.list.setObjectName("observationLineList")
        self.list.setWordWrap(True)
        layout.addWidget(self.list)
        row = QHBoxLayout()
        self.edit_btn = QPushButton("Edit Observation…")
        self.delete_btn = QPushButton("Delete Observation…")
        self.note = elastic(QLabel(""))
        self.note.setStyleSheet("color: palette(placeholder-text);")
        for button in (self.edit_btn, self.delete_btn):
            button.setEnabled(False)
            row.addWidget(button)
        row.addWidget(self.note, 1)
        layout.addLayout(row)
        self.list.currentRowChanged.connect(self._update)
        self.list.itemDoubleClicked.connect(lambda _item: self.edit_current())
        self.edit_btn.clicked.connect(self.edit_current)
        self.delete_btn.clicked.connect(self.delete_current)

    def set_record(self, record: OMRecord | None, *, current: bool, thread_id: str | None, resource_id: str) -> None:
        self.record = record if current else None
        self.thread_id, self.resource_id = thread_id, resource_id
        self.list.clear()
        if record is None:
            self.note.setText("")
        elif not current:
            self.note.setText("An earlier generation: only the current one can be edited.")
        else:
            lines = [ln.strip() for ln in record.active_observations.splitlines() if is_observation_line(ln)]
            for line in lines:
                self.list.addItem(_item(line))
            self.note.setText(f"{len(lines)} observation(s) in the current generation")
        self._update()

    def current_line(self) -> str | None:
        item = self.list.currentItem()
        return str(item.data(LINE_ROLE)) if item is not None else None

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


__all__ = ["ObservationLineDialog", "ObservationLinesEditor"]
