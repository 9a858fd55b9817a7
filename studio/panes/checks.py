"""Checks: the memory checks of the user's checks file, with their state, and what a what-if would break.

The checks file lives in the user's repository (a JSON or YAML list, ``core.checks``); the pane
remembers which file goes with which database (QSettings). Run Checks rebuilds each pinned turn as
replay does, on a worker, and never writes the database; Run With What-If runs them twice, as they
stand and with the options typed (the same JSON ``memory-studio test --options`` takes, or the
options the Replay pane's What-If tab has), and marks each check that the change would break.
Pin… (Prompt Inspector, Replay) opens ``PinDialog`` here, which appends to the file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Mapping

import shiboken6
from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from core.checks import CheckFileError
from core.checks.cli import parse_options
from studio import checks_jobs
from studio.commands import Command
from studio.logic.checks_layout import CheckRow, PinTarget, check_rows, detail_caption, result_text, summary
from studio.selection import Selection
from studio.session import StudioSession
from studio.widgets.code_editor import CodeEditor
from studio.widgets.pane_header import alive_only, caption, elastic, pane_header, pane_layout, status_label
from studio.widgets.pin_dialog import PinDialog
from studio.widgets.fit_to_pane import FitToPane
from studio.widgets.record_table import Column, RecordTableModel, record_table_view
from studio.widgets.a11y import named

CHECKS_FILTER = "Memory checks (*.json *.yaml *.yml);;All files (*)"
SETTING = "checks/file:"  # + the database's display path
UNUSABLE_FILE = "No checks shown: this checks file cannot be used as it is;"
# With no checks file there is nothing to run: the run buttons are off (they were on, and said so only after a click)
# and these say how a file is made or opened.
NO_FILE = ("No checks file yet: Open Checks File… opens one (a JSON or YAML list of checks) or names a new one, "
           "and Pin… (right-click a fragment in the Prompt Inspector or Replay) adds a check to it.")
NO_FILE_TIP = ("No checks file to run yet.\nOpen Checks File… opens one, or names a new one;\nPin… (right-click a "
               "fragment in the Prompt Inspector or Replay) adds a check to it.")
RUN_TIP = "Rebuild each pinned turn (offline, no model call) and test its checks; the file is read again first"
WHAT_IF_TIP = "Run every check as it stands and with the what-if options typed: which would break?"

CHECK_SAMPLES = {"State": "pass → FAIL (would break)", "Turn": "ada-party · turn -1"}
CHECK_COLUMNS: list[Column[CheckRow]] = [
    Column("State", lambda r: r.state, foreground=lambda r: r.colour, tooltip=lambda r: r.detail),
    Column("Check", lambda r: r.name, tooltip=lambda r: r.name),
    Column("Turn", lambda r: r.where, tooltip=lambda r: r.where),
    Column("What must hold", lambda r: r.asserts, tooltip=lambda r: r.asserts),
    Column("Why not", lambda r: r.detail, tooltip=lambda r: r.detail),
]

PathChooser = Callable[[QWidget, str, Callable[[str], None]], None]


def _settings(widget: QWidget) -> QSettings:
    host = widget.window()
    found = getattr(host, "settings", None)
    return found if isinstance(found, QSettings) else QSettings()


class ChecksPane(QWidget):
    ran = Signal(object)  # ChecksRun shown
    pinned = Signal(object)  # Check written to the file
    open_turn = Signal(str, str)  # thread id, input message id: show this turn in Replay
    failed = Signal(str)

    def __init__(self, session: StudioSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("checksPane")
        self.session = session
        self.path: Path | None = None
        self.run_data: checks_jobs.ChecksRun | None = None
        self.dialog: PinDialog | None = None
        self.choose_path: PathChooser = self._native_choose
        self._key = f"checks-{id(self)}"
        self._busy = False
        # The newest job this pane started (a run, or a read of the file): a run it superseded still
        # reports its progress from its worker, and that must not paint over this one's status.
        self._job = 0
        self._build()
        self._restore_path()

    # -- construction ----------------------------------------------------------------------------
    def _build(self) -> None:
        root = pane_layout(self)
        head, self.title, self.subtitle = pane_header("Memory Checks")
        self.open_btn = QPushButton("Open Checks File…")
        head.addWidget(self.open_btn)
        root.addLayout(head)
        row = QHBoxLayout()
        self.run_btn = QPushButton("Run Checks")
        self.run_btn.setObjectName("runChecks")
        self.options_edit = QLineEdit()
        self.options_edit.setObjectName("checksWhatIf")
        named(self.options_edit, "What-if options (JSON)")
        self.options_edit.setPlaceholderText('What-if options as JSON, e.g. {"semantic_recall": false} or '
                                             '{"last_messages": 4}')
        self.what_if_btn = QPushButton("Run With What-If")
        self.what_if_btn.setObjectName("runChecksWhatIf")
        row.addWidget(self.run_btn)
        row.addWidget(self.options_edit, 1)
        row.addWidget(self.what_if_btn)
        root.addLayout(row)
        self.summary = elastic(QLabel(""), wrap=True)
        self.summary.setObjectName("checksSummary")
        root.addWidget(self.summary)
        split = QSplitter(Qt.Orientation.Vertical)
        split.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        self.model: RecordTableModel[CheckRow] = RecordTableModel(CHECK_COLUMNS, self)
        self.table = record_table_view(self.model)
        self.table.setObjectName("checksTable")
        named(self.table, "Checks")
        # Fitted to the pane (fixed widths ran ~250 px past it at a 1,100 px window: What must hold and
        # Why not, what a failed check is about, were out of sight); a cut cell ends in "…", whole on hover.
        self.fit = FitToPane(self.table, CHECK_SAMPLES, {"Check": 0.35, "What must hold": 0.65}, last="Why not",
                             floors={"Check": "allergy re", "What must hold": "contains 'pe"},
                             rest_sample="'allergic to pe", pad=16, last_share=0.2)
        split.addWidget(self.table)
        lower = QWidget()
        ll = QVBoxLayout(lower)
        ll.setContentsMargins(0, 0, 0, 0)
        # What the detail holds, for the selected check's state ("what did not hold" showed for a pass too).
        self.detail_caption = caption(detail_caption(None))
        ll.addWidget(self.detail_caption)
        self.detail = CodeEditor("", read_only=True)
        self.detail.setObjectName("checkDetail")
        named(self.detail, "Selected check's detail")
        ll.addWidget(self.detail)
        split.addWidget(lower)
        split.setSizes([260, 220])
        root.addWidget(split, 1)
        self.status = status_label()
        root.addWidget(self.status)
        self.open_btn.clicked.connect(self.choose_file)
        self.run_btn.clicked.connect(lambda: self.run_checks())
        self.what_if_btn.clicked.connect(self.run_what_if_text)
        self.options_edit.returnPressed.connect(self.run_what_if_text)
        self.table.selectionModel().currentRowChanged.connect(lambda cur, _prev: self._show(cur.row()))
        self.table.doubleClicked.connect(lambda index: self._open(index.row()))

    # -- the file ----------------------------------------------------------------------------------
    def _restore_path(self) -> None:
        saved = _settings(self).value(SETTING + self.session.display_path)
        if saved:
            self.set_path(Path(str(saved)), run=True)
        else:
            self._show_rows([])
            self.subtitle.setText("no checks file")  # (the line under it says how one is made or opened)
            self.summary.setText(NO_FILE)
        self._update_actions()

    def _update_actions(self) -> None:
        """The run buttons are on while there is a checks file (one not made yet too: Run Checks reads it again)."""
        has_file = self.path is not None
        for button, tip in ((self.run_btn, RUN_TIP), (self.what_if_btn, WHAT_IF_TIP)):
            button.setEnabled(has_file)
            button.setToolTip(tip if has_file else NO_FILE_TIP)

    def set_path(self, path: Path, *, run: bool = False) -> None:
        self.path = path
        _settings(self).setValue(SETTING + self.session.display_path, str(path))
        self.subtitle.setText(str(path))
        self._update_actions()
        if run:
            self.run_checks()
        else:
            self._read()

    def choose_file(self) -> None:
        start = str(self.path) if self.path else str(Path.cwd() / "checks.json")
        self.choose_path(self, start, lambda p: self.set_path(Path(p), run=True))

    def _native_choose(self, parent: QWidget, start: str, on_chosen: Callable[[str], None]) -> None:
        dialog = QFileDialog(parent, "Memory checks file", start, CHECKS_FILTER)
        dialog.setObjectName("checksFileDialog")
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)  # a new file is fine: Pin… creates it
        dialog.setOption(QFileDialog.Option.DontConfirmOverwrite)
        dialog.fileSelected.connect(on_chosen)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()

    def _read(self) -> None:
        path = self.path
        if path is None:
            return
        self._job += 1
        self.session.run(lambda: checks_jobs.read(path), on_result=alive_only(self, self._on_run),
                         on_error=alive_only(self, self._on_error), key=self._key)

    # -- running ------------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self._busy

    def run_checks(self, options: Mapping[str, Any] | None = None) -> None:
        """Run every check (``options``: and again with this what-if)."""
        path = self.path
        if path is None:
            self.status.setText(NO_FILE)  # (Replay's what-if asks which checks would break)
            return
        session = self.session
        store = session.store
        factory = lambda o, n: session.memory(o, name=n)  # noqa: E731
        self._busy = True
        self._job += 1
        job = self._job
        self.status.setText("Rebuilding each pinned turn (offline, no model call)…" if not options else
                            f"Running each check as it stands and with {json.dumps(dict(options))}…")
        session.run(lambda report: checks_jobs.run(store, factory, path, options, report),
                    on_result=alive_only(self, self._on_run), on_error=alive_only(self, self._on_error),
                    on_progress=alive_only(self, lambda d, t: self._on_progress(job, d, t)),
                    key=self._key)

    def _on_progress(self, job: int, done: int, total: int) -> None:
        if job == self._job and self._busy:  # a superseded run, or one already shown, says nothing
            self.status.setText(f"Checked {done} of {total}…")

    def run_what_if_text(self) -> None:
        try:
            options = parse_options(self.options_edit.text().strip() or None)
        except CheckFileError as exc:
            self.status.setText(_typed_here(str(exc)))
            return
        self.run_checks(options or None)

    def run_what_if(self, options: Mapping[str, Any]) -> None:
        """The Replay pane's What-If options: which checks would they break?"""
        self.options_edit.setText(json.dumps(dict(options)))
        self.run_checks(dict(options) or None)

    def _on_run(self, run: checks_jobs.ChecksRun) -> None:
        self._busy = False
        self.run_data = run
        self.subtitle.setText(str(run.path))
        self._show_rows(check_rows(run.checks, run.results, run.what_if))
        if not run.exists:
            # (a mistyped name, or a file not made yet: pinning a check makes it)
            self.status.setText(f"No checks file at {run.path}: open another (Open Checks File…), or pin a fragment "
                                "(Prompt Inspector or Replay: right-click > Pin…) to start this one.")
        elif run.results is None:
            self.status.setText(f"{len(run.checks)} check(s) in {run.path.name}. Run Checks to test them.")
        else:
            self.status.setText(f"Ran {len(run.checks)} check(s) from {run.path.name}.")
        self.ran.emit(run)

    def _show_rows(self, rows: list[CheckRow]) -> None:
        self.model.set_rows(rows)
        self.summary.setText(summary(rows))
        self.fit.fit()
        if rows:
            self.table.selectRow(next((i for i, r in enumerate(rows) if r.breaks or (r.result and not r.result.passed)),
                                      0))
        else:
            self.detail.load("")
            self.detail_caption.setText(detail_caption(None))

    def _on_error(self, exc: BaseException) -> None:
        self._busy = False
        text = str(exc) or type(exc).__name__
        if isinstance(exc, CheckFileError):
            # The file named above cannot be used: the rows of the file (or version) read before are not
            # its checks, and must not stand under its name.
            self.run_data = None
            self._show_rows([])
            self.summary.setText(f"{UNUSABLE_FILE} fix it (the reason is below), then Run Checks.")
        elif self.run_data is not None and self.run_data.results is not None:
            # The run failed (a database that cannot be read, a lock): the results shown are the previous
            # run's, and must not pass for this one's. The checks stay, not run.
            self.run_data = checks_jobs.ChecksRun(self.run_data.path, self.run_data.checks)
            self._show_rows(check_rows(self.run_data.checks, None, None))
            self.summary.setText(f"{len(self.run_data.checks)} check(s), not run: the last run failed (the "
                                 "reason is below). Run Checks again.")
        self.status.setText(text)
        self.failed.emit(text)

    def _show(self, row: int) -> None:
        rec = self.model.row_at(row)
        self.detail.load(result_text(rec) if rec is not None else "")
        self.detail_caption.setText(detail_caption(rec))

    def _open(self, row: int) -> None:
        rec = self.model.row_at(row)
        result = (rec.result or rec.what_if) if rec is not None else None
        if rec is not None and result is not None and result.input_message_id:
            self.open_turn.emit(rec.check.thread, result.input_message_id)

    # -- pinning ------------------------------------------------------------------------------------
    def pin(self, target: PinTarget) -> None:
        """Open the Pin dialog for a fragment (the inspector's or Replay's)."""
        dialog = PinDialog(target, str(self.path or Path.cwd() / "checks.json"), self)
        dialog.pin_requested.connect(lambda check: self._write_pin(dialog, check))
        dialog.choose_file.connect(lambda: self.choose_path(dialog, dialog.path_edit.text(),
                                                            dialog.path_edit.setText))
        self.dialog = dialog
        presenter = getattr(self.window(), "presenter", None)
        if presenter is not None:
            presenter.show(dialog)
        else:
            dialog.open()

    def _write_pin(self, dialog: PinDialog, check: Any) -> None:
        path = Path(dialog.path_edit.text().strip()).expanduser()

        def done(written: Any) -> None:
            if shiboken6.isValid(dialog):
                dialog.accept()
            self.set_path(path, run=True)
            self.status.setText(f"Pinned “{written.name}” in {path}.")
            self.pinned.emit(written)

        self.session.run(lambda: checks_jobs.pin(path, check), on_result=done,
                         on_error=lambda exc: dialog.show_error(str(exc)) if shiboken6.isValid(dialog) else None)

    def palette_commands(self) -> list[Command]:
        return []  # no commands of its own (its buttons act on what it shows)

    def set_selection(self, selection: Selection) -> None:
        """Checks are the file's, not a thread's: the selection does not change what is listed."""


def _typed_here(message: str) -> str:
    """The command line's words for its ``--options`` flag, said of the field they were typed in here."""
    message = re.sub(r"--options '(\{.*?\})'", r"\1", message)  # the example: the JSON alone
    message = message.replace("--options is not", "The what-if options are not")
    message = message.replace("--options must be", "The what-if options must be")
    return message.replace("--options", "What-if options")


__all__ = ["ChecksPane", "SETTING"]
