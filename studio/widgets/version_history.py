"""A working memory's saved versions: numbered within their resource or thread, each with its size
in characters and tokens, and a diff of any one against the version before it or the editor, or of
any two against each other.

A view: the pane hands it ``VersionRow`` values and says what the editor would save; the pane does
the restoring (``restore_btn`` is bound to its command).
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QItemSelectionModel, Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from core.working_memory_vnext import reason_of
from studio.logic.dates import date_tooltip, format_datetime
from studio.logic.diffing import line_diff, normalize_for_diff
from studio.logic.wm_editing import VersionRow
from studio.widgets.diff_view import DiffView
from studio.widgets.fit_to_pane import FitToPane
from studio.widgets.pane_header import caption, elastic
from studio.widgets.record_table import RIGHT, Column, RecordTableModel, record_table_view
from studio.widgets.a11y import label_for, named

COMPARE_PREVIOUS, COMPARE_EDITOR = "previous", "editor"

VERSION_COLUMNS: list[Column[VersionRow]] = [
    Column("#", lambda r: r.number, RIGHT, tooltip=lambda r: f"version {r.number} of this "
           f"{r.version.scope} (stored as row {r.version.id})"),
    Column("Saved", lambda r: format_datetime(r.version.created_at), tooltip=lambda r: date_tooltip(r.version.created_at)),
    Column("Author", lambda r: r.version.author,
           foreground=lambda r: {"agent": "#D9A441", "studio": "#4FA3D9"}.get(r.version.author)),
    Column("Size", lambda r: r.size, RIGHT),
    # The vNext tool's updateReason (append / clarify / replace), then what the update did.
    Column("Reason", lambda r: reason_of(r.version.note) or "", tooltip=lambda r: r.version.note or ""),
    Column("Note", lambda r: _note_text(r.version.note), tooltip=lambda r: r.version.note or ""),
]

VERSION_SAMPLES = {"#": "000", "Saved": "2026-09-14 10:03:00", "Author": "studio"}
VERSION_SHARES = {"Size": 0.6, "Reason": 0.4}
VERSION_FLOORS = {"Size": "0,000 chars · 000 tokens"}
VERSION_CAPS = {"Size": "00,000 chars · 0,000 tokens", "Reason": "Reason · clarify"}
VERSION_WIDTHS = {"#": 40, "Saved": 160, "Author": 64, "Size": 170, "Reason": 70}  # (until the first resize)
STACK_BELOW = 1100  # px: a history narrower than this puts the diff under the versions, not beside them


def _note_text(note: str | None) -> str:
    """A version's note without its leading update reason (shown in its own column)."""
    if note and reason_of(note):
        return note.split(":", 1)[1].strip()
    return note or ""


class VersionHistory(QWidget):
    selection_changed = Signal()

    def __init__(self, editor_value: Callable[[], tuple[str, str]], parent: QWidget | None = None) -> None:
        """``editor_value()`` gives (what the editor would save, its format) for "compare with the editor"."""
        super().__init__(parent)
        self._editor_value = editor_value
        self.model: RecordTableModel[VersionRow] = RecordTableModel(VERSION_COLUMNS, self)
        # One version: compared with the one before it, or with the editor; two: with each other.
        self.table = record_table_view(self.model, selection=QAbstractItemView.SelectionMode.ExtendedSelection,
                                       widths=VERSION_WIDTHS)  # (sized by ``fit`` below, not by their contents)
        named(self.table, "Saved versions, newest first")
        self.compare_combo = QComboBox()
        self.compare_combo.addItem("the version before it", COMPARE_PREVIOUS)
        self.compare_combo.addItem("the editor", COMPARE_EDITOR)
        self.compare_combo.setToolTip("What one selected version is compared with. Select two versions "
                                      "(Ctrl+click) to compare them with each other.")
        self.diff = named(DiffView(), "What the version changed")
        # (wraps: "No Studio versions yet: the agent's own template or schema is in effect." and a
        # comparison's line were cut at the label's edge with no mark in a narrow pane)
        self.diff_label = elastic(QLabel("Select a version to see what it changed."), wrap=True)
        self.restore_btn = QToolButton()

        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.addWidget(caption("Saved versions, newest first"))
        self.kept_label = elastic(QLabel(""))
        self.kept_label.setWordWrap(True)
        ll.addWidget(self.kept_label)
        ll.addWidget(self.table, 1)
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        compare = QHBoxLayout()
        compare.addWidget(label_for("Compare with", self.compare_combo))
        compare.addWidget(self.compare_combo)
        compare.addStretch(1)
        compare.addWidget(self.restore_btn)
        rl.addLayout(compare)
        rl.addWidget(self.diff_label)
        rl.addWidget(self.diff, 1)
        self.split = split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(right)
        split.setSizes([520, 640])
        split.setChildrenCollapsible(False)
        self._sized = False  # (the first resize sets the two sides' sizes)
        # Each column gets what its text needs; the note gives way first (it ends in "…", whole on hover).
        self.fit = FitToPane(self.table, VERSION_SAMPLES, VERSION_SHARES, last="Note", floors=VERSION_FLOORS,
                             caps=VERSION_CAPS, rest_sample="Note…", pad=14, optional=("Reason",))
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 6, 0, 0)
        layout.addWidget(split)
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._selection_changed())
        self.compare_combo.currentIndexChanged.connect(lambda _i: self.compare())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        """Side by side from ``STACK_BELOW`` px wide, else the diff under the versions: side by side at a
        1,100 or 1,360 px window the table had ~275 / ~420 px, and its Size, Reason and Note columns
        sat behind a sideways scroll bar."""
        want = Qt.Orientation.Horizontal if event.size().width() >= STACK_BELOW else Qt.Orientation.Vertical
        if want != self.split.orientation() or not self._sized:
            self._sized = True
            self.split.setOrientation(want)
            whole = event.size().width() if want == Qt.Orientation.Horizontal else event.size().height()
            self.split.setSizes([whole * 45 // 100, whole - whole * 45 // 100])
        super().resizeEvent(event)

    # -- data in / selection ---------------------------------------------------------------------
    def set_rows(self, rows: list[VersionRow]) -> None:
        self.model.set_rows(rows)

    def set_kept(self, kept: int | None, count: int) -> None:
        """Say how much history is kept (``MemoryOptions.max_working_memory_versions``), and whether
        older versions have already been deleted."""
        if kept is None:
            self.kept_label.setText("Every version is kept.")
        elif count >= kept:
            self.kept_label.setText(f"Only the newest {kept} versions are kept: older ones were deleted as new "
                                    "ones were saved, so numbers start from the oldest kept.")
        else:
            self.kept_label.setText(f"The newest {kept} versions are kept; older ones are deleted as new ones "
                                    "are saved.")
        self.kept_label.setToolTip("Set by the agent's MemoryOptions(max_working_memory_versions=...).")

    def selected_rows(self) -> list[VersionRow]:
        rows = sorted(i.row() for i in self.table.selectionModel().selectedRows())
        return [r for r in (self.model.row_at(i) for i in rows) if r is not None]

    def selected(self) -> VersionRow | None:
        """The one selected version (None when none or two are selected)."""
        rows = self.selected_rows()
        return rows[0] if len(rows) == 1 else None

    def select_versions(self, *numbers: int) -> None:
        selection = self.table.selectionModel()
        selection.clearSelection()
        for i, row in enumerate(self.model.rows()):
            if row.number in numbers:
                selection.select(self.model.index(i, 0), QItemSelectionModel.SelectionFlag.Select
                                 | QItemSelectionModel.SelectionFlag.Rows)

    def _selection_changed(self) -> None:
        self.selection_changed.emit()
        self.compare()

    # -- the diff ----------------------------------------------------------------------------------
    def compare(self, *_: Any) -> None:
        rows = self.selected_rows()
        if not rows:
            return
        fmt = rows[0].version.format
        if len(rows) >= 2:  # newest first in the table: the lower one is the older
            new, old = rows[0], rows[-1]
            self._show(old.version.text, new.version.text, fmt, f"Version {old.number} → version {new.number}")
            return
        row = rows[0]
        if self.compare_combo.currentData() == COMPARE_EDITOR:
            editor, _fmt = self._editor_value()
            self._show(row.version.text, editor, fmt, f"Version {row.number} → the editor")
            return
        versions = self.model.rows()
        i = versions.index(row)
        prev = versions[i + 1] if i + 1 < len(versions) else None
        self._show(prev.version.text if prev else "", row.version.text, fmt,
                   f"Version {row.number} by {row.version.author} vs "
                   f"{'version ' + str(prev.number) if prev else 'empty'}")

    def _show(self, old: str | None, new: str | None, fmt: str, title: str) -> None:
        self.diff.set_diff(line_diff(normalize_for_diff(old or "", fmt), normalize_for_diff(new or "", fmt)))
        self.diff_label.setText(f"{title}: {self.diff.summary()}")
