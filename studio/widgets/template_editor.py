"""Editor for a memory's working-memory template (Markdown) or schema (JSON Schema), with versions.

A view: it validates as you type and emits intents (``save_requested``, ``reset_requested``); the
pane does the writing in a worker. Every saved version is listed with a diff against the one before.
"""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import QItemSelection, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from studio.logic.dates import date_tooltip, format_datetime
from studio.logic.diffing import line_diff, normalize_for_diff
from core.agent_configs import ConfigVersion, validate_template
from studio.logic.memory_config import parse_schema
from studio.widgets.code_editor import CodeEditor, error_line
from studio.widgets.diff_view import DiffView
from studio.widgets.flow_layout import FlowLayout
from studio.widgets.pane_header import elastic
from studio.widgets.record_table import Column, RecordTableModel, RowTableView, keep_rows_in_sight
from studio.theme import set_tone
from studio.widgets.a11y import label_for, named

KINDS = [("template", "Markdown template"), ("schema", "JSON schema")]

VERSION_COLUMNS: list[Column[ConfigVersion]] = [
    Column("#", lambda v: v.id),
    Column("Saved", lambda v: format_datetime(v.created_at), tooltip=lambda v: date_tooltip(v.created_at)),
    Column("Kind", lambda v: v.kind),
    Column("Author", lambda v: v.author),
]


class TemplateEditor(QWidget):
    save_requested = Signal(str, object)  # kind ("template" | "schema"), value (str | dict)
    reset_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("templateEditor")
        self._baseline = ""
        self._baseline_kind = "template"
        self._writable = True
        self._versions: list[ConfigVersion] = []

        self.kind_combo = QComboBox()
        for key, title in KINDS:
            self.kind_combo.addItem(title, key)
        self.editor = named(CodeEditor("markdown"), "Template or schema editor")
        self.problem = elastic(QLabel(""), wrap=True)
        set_tone(self.problem, "error")
        self.effect = elastic(QLabel(""), wrap=True)
        self.effect.setStyleSheet("color: palette(placeholder-text);")
        self.save_btn = QPushButton("Save as New Version")
        self.revert_btn = QPushButton("Revert")
        self.reset_btn = QPushButton("Use the Agent's Own")
        self.reset_btn.setToolTip("Save a version that removes the Studio override: the agent's code decides again.")

        top = QWidget()  # wraps onto two rows on a narrow window rather than widening it
        flow = FlowLayout(top)
        flow.setContentsMargins(0, 0, 0, 0)
        kind = QWidget()
        kl = QHBoxLayout(kind)
        kl.setContentsMargins(0, 0, 12, 0)
        kl.addWidget(label_for("Kind", self.kind_combo))
        kl.addWidget(self.kind_combo)
        for w in (kind, self.reset_btn, self.revert_btn, self.save_btn):
            flow.addWidget(w)

        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.addWidget(top)
        ll.addWidget(self.editor, 1)
        ll.addWidget(self.problem)
        ll.addWidget(self.effect)

        self.version_model: RecordTableModel[ConfigVersion] = RecordTableModel(VERSION_COLUMNS, self)
        self.versions = named(RowTableView(), "Saved versions")
        self.versions.setModel(self.version_model)
        self.versions.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.versions.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.versions.verticalHeader().hide()
        self.versions.setShowGrid(False)
        self.versions.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.versions.horizontalHeader().setStretchLastSection(True)
        keep_rows_in_sight(self.versions)
        self.diff = named(DiffView(), "What the version changed")
        # (wraps: "No Studio versions yet: the agent's own template or schema is in effect." and a
        # comparison's line were cut at the label's edge with no mark in a narrow pane)
        self.diff_label = elastic(QLabel("Select a version to see what it changed."), wrap=True)
        self.restore_btn = QPushButton("Restore into Editor")
        self.restore_btn.setEnabled(False)
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        caption = QLabel("Saved versions")
        f = caption.font()
        f.setBold(True)
        caption.setFont(f)
        rl.addWidget(caption)
        rl.addWidget(self.versions, 2)
        row = QHBoxLayout()
        row.addWidget(self.diff_label, 1)
        row.addWidget(self.restore_btn)
        rl.addLayout(row)
        rl.addWidget(self.diff, 3)

        split = QSplitter(Qt.Orientation.Horizontal)
        split.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        split.addWidget(left)
        split.addWidget(right)
        split.setSizes([600, 420])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)

        self.editor.textChanged.connect(self.revalidate)
        self.kind_combo.currentIndexChanged.connect(self._kind_changed)
        self.save_btn.clicked.connect(self._save)
        self.revert_btn.clicked.connect(self.revert)
        self.reset_btn.clicked.connect(self.reset_requested.emit)
        self.versions.selectionModel().selectionChanged.connect(self._version_selected)
        self.restore_btn.clicked.connect(self.restore_selected)

    # -- data in ---------------------------------------------------------------------------------
    def set_state(self, kind: str, text: str, versions: list[ConfigVersion], effect: str, *,
                  keep_edit: bool = True) -> None:
        """Show the effective template/schema. Keeps the user's unsaved edit if there is one, unless
        ``keep_edit`` is False (the state shown is another memory's, or nobody's)."""
        dirty = self.is_dirty() and keep_edit
        self._baseline, self._baseline_kind = text, kind
        self._versions = versions
        self.version_model.set_rows(versions)
        self.diff.set_diff([], empty_text="")
        self.diff_label.setText("Select a version to see what it changed." if versions else
                                "No Studio versions yet: the agent's own template or schema is in effect.")
        self.effect.setText(effect)
        if not dirty:
            self._set_kind(kind)
            self.editor.load(text)
        self.revalidate()

    def edit(self) -> tuple[str, str] | None:
        """The unsaved edit (kind, text), or None."""
        return (self.kind, self.editor.toPlainText()) if self.is_dirty() else None

    def restore_edit(self, kind: str, text: str) -> None:
        """Bring back an unsaved edit kept aside (undoable against the stored text now shown)."""
        self._set_kind(kind)
        self.editor.replace_all(text)
        self.revalidate()

    def set_writable(self, writable: bool, reason: str = "") -> None:
        self._writable = writable
        self.editor.setReadOnly(not writable)
        for b in (self.save_btn, self.reset_btn, self.restore_btn, self.kind_combo):
            b.setToolTip("" if writable else reason)
        self.revalidate()

    # -- state -----------------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        return str(self.kind_combo.currentData())

    def _set_kind(self, kind: str) -> None:
        self.kind_combo.blockSignals(True)
        self.kind_combo.setCurrentIndex(max(self.kind_combo.findData(kind), 0))
        self.kind_combo.blockSignals(False)
        self.editor.set_language("json" if kind == "schema" else "markdown")

    def is_dirty(self) -> bool:
        return self.kind != self._baseline_kind or self.editor.toPlainText() != self._baseline

    def check(self) -> tuple[Any, list[str]]:
        text = self.editor.toPlainText()
        if self.kind == "schema":
            return parse_schema(text)
        problems = validate_template(text)
        return (None if problems else text), problems

    def revalidate(self) -> None:
        value, problems = self.check()
        if not self._writable and not self.editor.toPlainText():
            problems = []  # nothing is shown (no memory's template): nothing to fix either
        self.problem.setText("✖ " + problems[0] if problems else "")
        self.problem.setVisible(bool(problems))
        self.editor.mark_error_line(error_line("JSON syntax: " + problems[0]) if problems and
                                    problems[0].startswith("line ") else None)
        dirty = self.is_dirty()
        self.save_btn.setEnabled(self._writable and dirty and not problems)
        self.revert_btn.setEnabled(dirty)
        self.reset_btn.setEnabled(self._writable)
        self.kind_combo.setEnabled(self._writable)
        self.restore_btn.setEnabled(self._writable and self._selected_version() is not None)

    def _kind_changed(self, _i: int) -> None:
        kind = self.kind
        self.editor.set_language("json" if kind == "schema" else "markdown")
        if kind == "schema" and not self.editor.toPlainText().lstrip().startswith("{"):
            self.editor.replace_all('{\n  "type": "object",\n  "properties": {\n    "name": {"type": "string"}\n  }\n}')
        self.revalidate()

    def revert(self) -> None:
        self._set_kind(self._baseline_kind)
        self.editor.replace_all(self._baseline)
        self.revalidate()

    def _save(self) -> None:
        value, problems = self.check()
        if problems or not self._writable:
            return
        self.save_requested.emit(self.kind, value)

    # -- versions --------------------------------------------------------------------------------
    def _selected_version(self) -> ConfigVersion | None:
        rows = self.versions.selectionModel().selectedRows() if self.versions.selectionModel() else []
        return self.version_model.row_at(rows[0].row()) if rows else None

    def _version_selected(self, _sel: QItemSelection, _desel: QItemSelection) -> None:
        v = self._selected_version()
        self.revalidate()
        if v is None:
            return
        idx = self._versions.index(v)
        prev = self._versions[idx + 1] if idx + 1 < len(self._versions) else None
        fmt = "json" if v.kind == "schema" else "markdown"
        old = normalize_for_diff(prev.text, fmt) if prev else ""
        self.diff.set_diff(line_diff(old, normalize_for_diff(v.text, fmt)))
        self.diff_label.setText(f"#{v.id} vs {'#' + str(prev.id) if prev else 'nothing'}: {self.diff.summary()}")

    def restore_selected(self) -> None:
        v = self._selected_version()
        if v is None or not self._writable:
            return
        if v.kind == "code default":
            self.reset_requested.emit()
            return
        self._set_kind(v.kind)
        self.editor.replace_all(v.text if v.kind == "template" else json.dumps(v.schema, ensure_ascii=False, indent=2))
        self.revalidate()
