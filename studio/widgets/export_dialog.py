"""The export dialog: what is exported, as JSON or Markdown, which optional parts, and to which file.

The file is picked through ``choose_path`` (a callable given by the caller), so tests drive the dialog
without a native file dialog. The dialog does no I/O: Export emits ``export_requested`` with an
``ExportRequest``; the caller runs the export in a worker and calls ``succeeded`` or ``failed``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from core.transfer import ExportOptions
from studio.theme import set_tone
from studio.widgets.a11y import named
from studio.widgets.scroll_fit import dialog_body

SUFFIXES = {"json": ".json", "markdown": ".md"}
FILTERS = {"json": "Memory Studio export (*.json);;All files (*)", "markdown": "Markdown (*.md);;All files (*)"}
# (path chooser) parent, title, start path, file filter, callback with the chosen path
PathChooser = Callable[[QWidget, str, str, str, Callable[[str], None]], None]


@dataclass(frozen=True)
class ExportRequest:
    kind: str  # "thread" | "resource"
    id: str
    format: str  # "json" | "markdown"
    options: ExportOptions
    path: Path
    replace: bool = False  # the user agreed to replace an existing file at ``path``


def default_file_name(kind: str, item_id: str, fmt: str) -> str:
    safe = re.sub(r"[^\w.-]+", "-", item_id, flags=re.UNICODE).strip("-.") or kind
    return f"{safe}{SUFFIXES[fmt]}"


class ExportDialog(QDialog):
    export_requested = Signal(object)  # ExportRequest

    def __init__(self, kind: str, item_id: str, folder: str, choose_path: PathChooser,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("exportDialog")
        self.kind, self.item_id = kind, item_id
        self._has_turns = True
        self._replace_path: Path | None = None  # an existing file the user agreed to replace
        self.choose_path = choose_path
        self.setWindowTitle(f"Export {kind.title()}")
        self.heading = QLabel(f"Export {kind} <b>{_escape(item_id)}</b>")
        self.heading.setTextFormat(Qt.TextFormat.RichText)
        self.details = QLabel("Reading…")  # filled in by ``set_details`` from a worker read
        self.details.setObjectName("exportDetails")
        self.details.setTextFormat(Qt.TextFormat.PlainText)  # a thread's title, as stored: never markup
        self.details.setWordWrap(True)
        self.details.setStyleSheet("color: palette(placeholder-text);")

        self.json_button = QRadioButton("JSON: everything, for import into another database")
        self.markdown_button = QRadioButton("Markdown: a transcript to read or share")
        self.json_button.setChecked(True)
        self.formats = QButtonGroup(self)
        self.formats.addButton(self.json_button)
        self.formats.addButton(self.markdown_button)
        format_box = QGroupBox("Format")
        fl = QVBoxLayout(format_box)
        fl.addWidget(self.json_button)
        fl.addWidget(self.markdown_button)

        self.versions = QCheckBox("Working-memory history (every saved version)")
        self.observations = QCheckBox("Observations (observational memory)")
        self.turns = QCheckBox("Turn records (what each turn's prompt was built from, with the tool definitions)")
        self.agents = QCheckBox("Agents' configurations and the Studio's overrides (so the copy previews the same)")
        self.traces = QCheckBox("Traces (every span of these threads' runs; can be large)")
        self.traces.setObjectName("exportTraces")
        for box in (self.versions, self.observations, self.turns, self.agents):
            box.setChecked(True)
        include_box = QGroupBox("Include")
        il = QVBoxLayout(include_box)
        il.addWidget(QLabel("Threads, messages and the current working memory are always included."))
        il.addWidget(self.versions)
        il.addWidget(self.observations)
        il.addWidget(self.turns)
        il.addWidget(self.agents)
        il.addWidget(self.traces)

        self.path_edit = QLineEdit(str(Path(folder) / default_file_name(kind, item_id, "json")))
        self.path_edit.setObjectName("exportPath")
        named(self.path_edit, "File")
        self.path_edit.setMinimumWidth(380)
        self.browse = QPushButton("Choose…")
        path_row = QHBoxLayout()
        path_row.addWidget(self.path_edit, 1)
        path_row.addWidget(self.browse)
        form = QFormLayout()
        form.addRow("File:", path_row)

        self.error = QLabel("")
        self.error.setObjectName("exportError")
        self.error.setTextFormat(Qt.TextFormat.PlainText)  # it quotes a path and the system's error: never markup
        self.error.setWordWrap(True)
        set_tone(self.error, "error")
        self.error.hide()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.export_button = self.buttons.addButton("Export", QDialogButtonBox.ButtonRole.AcceptRole)
        self.export_button.setDefault(True)

        layout = QVBoxLayout(dialog_body(self))
        layout.addWidget(self.heading)
        layout.addWidget(self.details)
        layout.addWidget(format_box)
        layout.addWidget(include_box)
        layout.addLayout(form)
        layout.addWidget(self.error)
        layout.addWidget(self.buttons)

        self.markdown_button.toggled.connect(self._format_changed)
        self.browse.clicked.connect(self._browse)
        self.buttons.rejected.connect(self.reject)
        self.export_button.clicked.connect(self.request_export)
        self.path_edit.textChanged.connect(self._path_edited)

    # -- state -----------------------------------------------------------------------------------
    @property
    def format(self) -> str:
        return "markdown" if self.markdown_button.isChecked() else "json"

    def set_format(self, fmt: str) -> None:
        (self.markdown_button if fmt == "markdown" else self.json_button).setChecked(True)

    def set_details(self, text: str, *, has_turns: bool = True) -> None:
        """What the worker read: a line about the thread or resource, and whether the database keeps
        turn records at all (if not, that option is shown off rather than promising what is not there)."""
        self.details.setText(text)
        self._has_turns = has_turns
        if not has_turns:
            self.turns.setChecked(False)
            self.turns.setToolTip("This database keeps no turn records.")
        self._format_changed()

    def options(self) -> ExportOptions:
        return ExportOptions(working_memory_versions=self.versions.isChecked(),
                             observations=self.observations.isChecked(), turns=self.turns.isChecked(),
                             agents=self.agents.isChecked(), traces=self.traces.isChecked())

    def _format_changed(self) -> None:
        fmt = self.format
        # The transcript shows messages, working memory and the current observations: the rest is JSON-only.
        self.versions.setEnabled(fmt == "json")
        self.turns.setEnabled(fmt == "json" and self._has_turns)
        self.agents.setEnabled(fmt == "json")
        self.traces.setEnabled(fmt == "json")
        text = self.path_edit.text().strip()
        other = SUFFIXES["json" if fmt == "markdown" else "markdown"]
        if text.lower().endswith(other):
            self.path_edit.setText(text[: -len(other)] + SUFFIXES[fmt])

    def _browse(self) -> None:
        self.choose_path(self, f"Export {self.kind} as {self.format.title()}", self.path_edit.text(),
                         FILTERS[self.format], self._chosen)

    def _chosen(self, path: str) -> None:
        if path:
            self.path_edit.setText(path)
            self._replace_path = Path(path).expanduser()  # the file chooser asked before replacing it

    def _path_edited(self, _text: str) -> None:
        self.error.hide()
        if self.export_button.text() == "Replace":
            self.export_button.setText("Export")  # another file: "Replace" was about the one before

    # -- running ---------------------------------------------------------------------------------
    def request_export(self) -> None:
        text = self.path_edit.text().strip()
        if not text:
            self.failed("Choose a file to export to.")
            return
        path = Path(text).expanduser()
        self.export_button.setEnabled(False)
        self.export_button.setText("Exporting…")
        self.error.hide()
        self.export_requested.emit(ExportRequest(self.kind, self.item_id, self.format, self.options(), path,
                                                 replace=path == self._replace_path))

    def ask_replace(self, path: Path) -> None:
        """The file exists (the worker looked): say so, and let a second click replace it."""
        self.failed(f"{path} already exists. Click Replace to overwrite it, or choose another file name.")
        self._replace_path = path
        self.export_button.setText("Replace")

    def failed(self, message: str) -> None:
        """The export did not happen: say why, keep the dialog open so the path can be fixed."""
        self.export_button.setEnabled(True)
        self.export_button.setText("Export")
        self.error.setText(message)
        self.error.show()

    def succeeded(self) -> None:
        self.accept()


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
