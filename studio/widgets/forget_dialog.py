"""Forget Resource…: what would go, place by place; a confirmation; then what went, and Vacuum Now.

The summary comes from a dry run (``forget_resource(dry_run=True)``, read-only). Forget stays disabled
until the user ticks that they understand it cannot be undone. Afterwards the same table shows what
was removed, anything still naming the resource (there should be none), and offers ``vacuum`` so the
freed pages stop holding the deleted bytes.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QDialog, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from core.edits.forget import ForgetReport
from studio.widgets.pane_header import elastic
from studio.widgets.record_table import RIGHT, Column, RecordTableModel, record_table_view
from studio.widgets.a11y import named
from studio.widgets.scroll_fit import dialog_body

PLACE_COLUMNS: list[Column[tuple[str, int]]] = [
    Column("Place", lambda r: r[0]),
    Column("Rows", lambda r: f"{r[1]:,}", RIGHT),
]


def place_rows(report: ForgetReport) -> list[tuple[str, int]]:
    return [(name, n) for name, n in report.removed.items() if n]


class ForgetDialog(QDialog):
    forget_requested = Signal()
    vacuum_requested = Signal()

    def __init__(self, preview: ForgetReport, where: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("forgetDialog")
        self.setWindowTitle("Forget Resource")
        self.resize(560, 460)
        self.preview = preview
        layout = QVBoxLayout(dialog_body(self))
        self.headline = elastic(QLabel(""), wrap=True)
        self.headline.setTextFormat(Qt.TextFormat.RichText)
        layout.addWidget(self.headline)
        self.model: RecordTableModel[tuple[str, int]] = RecordTableModel(PLACE_COLUMNS, self)
        self.table = record_table_view(self.model)
        self.table.setObjectName("forgetPlaces")
        named(self.table, "What would be deleted")
        layout.addWidget(self.table, 1)
        self.detail = elastic(QLabel(""), wrap=True)
        self.detail.setTextFormat(Qt.TextFormat.PlainText)  # notes and errors name ids and paths: data
        self.detail.setObjectName("forgetDetail")
        layout.addWidget(self.detail)
        self.understood = QCheckBox("I understand: this deletes it everywhere, and it cannot be undone")
        layout.addWidget(self.understood)
        row = QHBoxLayout()
        self.vacuum_btn = QPushButton("Vacuum Now")
        self.vacuum_btn.setToolTip("Rewrite the database (and a database file's trace file) without the space of the "
                                   "deleted rows, which still holds their bytes")
        self.vacuum_btn.hide()
        self.forget_btn = QPushButton("Forget")
        self.forget_btn.setObjectName("forgetButton")
        self.forget_btn.setEnabled(False)
        self.cancel_btn = QPushButton("Cancel")
        row.addWidget(self.vacuum_btn)
        row.addStretch(1)
        row.addWidget(self.forget_btn)
        row.addWidget(self.cancel_btn)
        layout.addLayout(row)
        self.understood.toggled.connect(self.forget_btn.setEnabled)
        self.forget_btn.clicked.connect(self._forget)
        self.cancel_btn.clicked.connect(self.reject)
        self.vacuum_btn.clicked.connect(self._vacuum)
        extra = preview.resources[1:]
        # Rich text for the bold id: the ids and the path are data (a folder may be named "<b>…"), escaped.
        self.headline.setText(
            f"Forget resource <b>{html.escape(preview.resource_id)}</b> in <code>{html.escape(where)}</code>: "
            f"{len(preview.threads)} thread(s) and {preview.total:,} row(s) would go"
            + (f", with the resources of its delegations to sub-agents {html.escape(', '.join(extra))}" if extra
               else "") + ".")
        self.detail.setText("Threads, messages and their versions, recall vectors and keyword docs, working memory "
                            "and its versions, observations, turn records and traces naming it are deleted; other "
                            "resources are not touched.")
        self.model.set_rows(place_rows(preview))

    def _forget(self) -> None:
        self.forget_btn.setEnabled(False)
        self.understood.setEnabled(False)
        self.forget_btn.setText("Forgetting…")
        self.forget_requested.emit()

    def show_done(self, report: ForgetReport) -> None:
        self.headline.setText(f"Forgot resource <b>{html.escape(report.resource_id)}</b>: removed {report.total:,} row(s) from "
                              f"{len(place_rows(report))} place(s).")
        self.model.set_rows(place_rows(report))
        lines = []
        if report.leftovers:
            lines.append("Still naming it: " + ", ".join(f"{t} ({n})" for t, n in report.leftovers.items())
                         + ". Report this; nothing else was kept.")
        if report.written_since:
            lines.append("Written since the forget: " + ", ".join(f"{t} ({n})" for t, n in report.written_since.items())
                         + f". {report.since_note()[0].upper()}{report.since_note()[1:]}.")
        lines += report.notes
        self.detail.setText("\n".join(lines))
        self.understood.hide()
        self.forget_btn.hide()
        self.cancel_btn.setText("Close")
        self.vacuum_btn.setVisible(report.total > 0)

    def show_failed(self, text: str) -> None:
        self.forget_btn.setText("Forget")
        self.forget_btn.setEnabled(True)
        self.understood.setEnabled(True)
        self.detail.setText(text)

    def _vacuum(self) -> None:
        self.vacuum_btn.setEnabled(False)
        self.vacuum_btn.setText("Vacuuming…")
        self.vacuum_requested.emit()

    def show_vacuumed(self, text: str) -> None:
        self.vacuum_btn.setText("Vacuumed")
        self.detail.setText(text)

    def show_vacuum_failed(self, text: str) -> None:
        """The vacuum did not run (a role that may not rewrite the tables, a session holding one): the button
        says so no more "Vacuumed", and stays to try again once the message's advice is followed."""
        self.vacuum_btn.setText("Vacuum Now")
        self.vacuum_btn.setEnabled(True)
        self.detail.setText(text)


__all__ = ["ForgetDialog", "place_rows"]
