"""File > Export Thread…, Export Resource… and Import…: commands over ``core.transfer``.

Export and import run in workers (``session.run``). Import first previews what it would write (read
only), asks for confirmation with that summary, then imports in one transaction and refreshes the
tree. A read-only database is refused up front with the way out (File > Allow Writes…). File paths
come from ``choose_save_path`` / ``choose_open_path``, replaceable so tests never open a native dialog.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import shiboken6
from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QCheckBox, QDialog, QDialogButtonBox, QFileDialog, QGridLayout, QMessageBox, QWidget

from core.terminal_text import printable
from studio.commands import CommandRegistry
from studio.dialogs import Problem, explain
from studio.logic.thread_labels import shown_title
from studio.widgets.pane_header import alive_only

# core.transfer (and the export dialog, which uses it) load SQLAlchemy: they are imported by the jobs
# below, on a worker, or when a dialog opens; the window's first paint does not wait for them.
if TYPE_CHECKING:  # pragma: no cover
    from core.storage import Store
    from core.transfer import ImportReport
    from studio.main_window import MainWindow
    from studio.session import StudioSession
    from studio.widgets.export_dialog import ExportDialog, ExportRequest, PathChooser

log = logging.getLogger(__name__)
IMPORT_FILTER = "Memory Studio export (*.json);;All files (*)"
FOLDER_KEY = "transfer/folder"
MAX_LISTED = 8  # conflicts listed in a dialog; the rest are counted


@dataclass(frozen=True)
class Imported:
    report: ImportReport
    recall_note: str


@dataclass(frozen=True)
class ExportDetails:
    text: str  # one line: what will be exported
    has_turns: bool  # the database keeps turn records


def describe(store: Store, kind: str, item_id: str) -> ExportDetails:
    """What the export dialog shows about its subject (a small read, run in a worker)."""
    from core.transfer.replay_sections import has_turn_records

    with store.db.read() as conn:
        has_turns = has_turn_records(conn)
    if kind == "thread":
        thread = store.memory.get_thread(item_id)
        if thread is None:
            return ExportDetails("This thread no longer exists.", has_turns)
        n = store.memory.count_messages(item_id)
        title = f"“{shown_title(thread.title)}” · " if thread.title else ""
        return ExportDetails(f"{title}resource {shown_title(thread.resource_id)} "
                             f"· {n} message{'s' if n != 1 else ''}", has_turns)
    summaries = store.memory.thread_summaries(item_id)
    messages = sum(s.message_count for s in summaries)
    return ExportDetails(f"{len(summaries)} thread{'s' if len(summaries) != 1 else ''} · {messages} messages",
                         has_turns)


class ExportFileExists(Exception):
    """The export's file exists and the user has not agreed to replace it: nothing was written."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path} already exists.")
        self.path = path


def run_export(store: Store, request: ExportRequest) -> Path:
    """Export to ``request.path``; an existing file is replaced only when the request says so
    (``ExportFileExists`` otherwise). A write the system refuses raises ``ExportWriteError`` with a
    message that names the path and what to do."""
    from core.transfer import export_data, render_chunks, write_atomically

    path = request.path
    if not request.replace and path.is_file():
        raise ExportFileExists(path)
    # Spans (with traces) are read while the file is written, never all held at once.
    data = export_data(store, thread_id=request.id if request.kind == "thread" else None,
                       resource_id=request.id if request.kind == "resource" else None, options=request.options,
                       streamed=request.format == "json")
    # (a refused write: ``ExportWriteError``, naming ``path``)
    write_atomically(path, render_chunks(data, request.format))
    return path


CONFIGS_CHOICE = "Also take the file's memory overrides (working-memory templates and schemas)"


def _add_choice_under_check_box(box: QMessageBox, choice: QCheckBox) -> None:
    """A second check box in a message box, right under its own one, the buttons moved down under both."""
    grid = box.layout()
    own = box.checkBox()
    buttons = box.findChild(QDialogButtonBox)
    if not isinstance(grid, QGridLayout) or own is None or buttons is None:
        return
    row, col, _rows, span = _position(grid, own)
    b_row, b_col, b_rows, b_span = _position(grid, buttons)
    grid.removeWidget(buttons)
    grid.addWidget(choice, row + 1, col, 1, span)
    grid.addWidget(buttons, max(b_row, row + 1) + 1, b_col, b_rows, b_span)


def _position(grid: QGridLayout, widget: QWidget) -> tuple[int, int, int, int]:
    """(row, column, rows, columns) of ``widget`` in ``grid``."""
    found: Any = grid.getItemPosition(grid.indexOf(widget))  # (PySide6 returns the four as a tuple)
    return int(found[0]), int(found[1]), int(found[2]), int(found[3])


def shown(path: str) -> str:
    """The import file as every message about it names it: the path as chosen (``core.transfer.shown_path``,
    without loading ``core.transfer`` on the UI thread)."""
    return printable(path)


def run_import(store: Store, data: dict[str, Any], overwrite: bool, with_configs: bool = False,
               name: str = "the file") -> Imported:
    from core.transfer import import_data, recall_after_import

    report = import_data(store, data, overwrite=overwrite, with_configs=with_configs, name=name)
    note = recall_after_import(store, report.message_ids) if report.message_ids else ""
    return Imported(report, note)


class TransferActions(QObject):
    exported = Signal(object)  # Path
    imported = Signal(object)  # Imported

    def __init__(self, window: "MainWindow") -> None:
        super().__init__(window)
        self.window = window
        self.dialog: ExportDialog | None = None
        self.choose_save_path: PathChooser = self._native_save
        self.choose_open_path: Callable[[QWidget, str, Callable[[str], None]], None] = self._native_open
        # The import under way between its preview and its confirmation: the database it was previewed on, the
        # file, and the confirmation box once shown. It goes into that database or nowhere: another one
        # opened meanwhile (an open started before) ends it with a dialog, and nothing is written.
        self._pending: tuple[Any, str, QMessageBox | None] | None = None
        window.session_opened.connect(self._session_opened)

    def register(self, registry: CommandRegistry) -> None:
        w = self.window
        registry.add("file.export_thread", "Export Thread…", self.export_thread, menu="File", group="transfer",
                     enabled=lambda: w.session is not None and bool(w.selection.thread_id),
                     keywords="save json markdown transcript backup")
        registry.add("file.export_resource", "Export Resource…", self.export_resource, menu="File",
                     group="transfer", enabled=lambda: w.session is not None and bool(w.selection.resource_id),
                     keywords="save json markdown transcript backup user")
        registry.add("file.import", "Import…", self.import_file, menu="File", group="transfer",
                     enabled=lambda: w.session is not None, keywords="load json restore")

    # -- export ----------------------------------------------------------------------------------
    def export_thread(self) -> None:
        sel = self.window.selection
        if self.window.session is not None and sel.thread_id:
            self.open_export_dialog("thread", sel.thread_id)

    def export_resource(self) -> None:
        sel = self.window.selection
        if self.window.session is not None and sel.resource_id:
            self.open_export_dialog("resource", sel.resource_id)

    def open_export_dialog(self, kind: str, item_id: str) -> ExportDialog:
        session = self.window.session
        assert session is not None
        if self.dialog is not None:
            self.dialog.reject()
        from studio.widgets.export_dialog import ExportDialog

        dialog = ExportDialog(kind, item_id, self._folder(), self.choose_save_path, self.window)
        dialog.export_requested.connect(lambda request: self._export(dialog, request, session))
        self.dialog = dialog
        self._show(dialog)
        session.run(lambda: describe(session.store, kind, item_id),
                    on_result=alive_only(dialog, lambda d: dialog.set_details(d.text, has_turns=d.has_turns)),
                    on_error=alive_only(dialog, lambda exc: dialog.set_details(str(exc))))
        return dialog

    def _export(self, dialog: ExportDialog, request: ExportRequest, session: StudioSession) -> None:
        """Export from ``session``, the database the dialog was opened on (never another one opened since)."""
        if self.window.session is not session:
            dialog.failed(f"{session.display_path} is no longer the open database, so nothing was exported. "
                          "Close this dialog and choose File > Export… again.")
            return

        def done(path: Path) -> None:
            self._remember_folder(path)
            self.window.show_status(f"Exported {request.kind} {request.id} to {path}")
            if _alive(dialog):
                dialog.succeeded()
            self.exported.emit(path)

        def failed(exc: BaseException) -> None:
            log.info("export failed: %s", exc)
            if not _alive(dialog):
                return
            if isinstance(exc, ExportFileExists):
                dialog.ask_replace(exc.path)
            else:  # (a refused write: core's ``ExportWriteError``, whose message names the path and what to do)
                dialog.failed(str(exc) or type(exc).__name__)

        session.run(lambda: run_export(session.store, request), on_result=done, on_error=failed)

    # -- import ----------------------------------------------------------------------------------
    def import_file(self) -> None:
        session = self.window.session
        if session is None:
            return
        if session.read_only:
            self.window.presenter.error(self.window, Problem(
                "Read-only database", f"{session.display_path} is open read-only, so nothing can be imported into it.",
                f"{session.write_advice} Then File > Import… again."))
            return
        self.choose_open_path(self.window, self._folder(), self.preview)

    def preview(self, path: str) -> None:
        """Read and check the file, and compute what importing it would write (nothing is written)."""
        session = self.window.session
        if session is None or not path:
            return
        self._remember_folder(Path(path))
        self._pending = (session, path, None)
        # The status bar follows this file from now on (it said "Import failed" of the file before).
        self.window.show_status(f"Checking {shown(path)}: nothing is written yet…")

        def job() -> tuple[dict[str, Any], ImportReport]:
            from core.transfer import load, preview_import

            data = load(path)  # (its errors and the preview's name the file as ``shown`` does)
            return data, preview_import(session.store, data, name=shown(path))

        session.run(job, on_result=lambda r: self._confirm(session, path, r[0], r[1]),
                    on_error=lambda exc: self._preview_failed(session, path, exc))

    def _preview_failed(self, session: StudioSession, path: str, exc: BaseException) -> None:
        if self._pending is not None and self._pending[0] is session:
            self._pending = None
        self._import_failed(session, exc)

    def _still_open(self, session: StudioSession, path: str) -> bool:
        """Whether ``session`` (the database the import was previewed on) is still the one open; if not,
        say that nothing was imported and where a new File > Import… would go."""
        if self.window.session is session:
            return True
        current = self.window.session
        self.window.show_status("Import not started")
        self.window.presenter.error(self.window, Problem(
            "Not imported", f"{shown(path)} was previewed on {session.display_path}, which is no longer the "
            "open database, so nothing was imported.",
            "Nothing was written to either database. Choose File > Import… again to preview the file "
            + (f"on {current.display_path}." if current is not None else "on the database you open.")))
        return False

    def _session_opened(self, session: StudioSession) -> None:
        """Another database is open now: an import previewed on the one before never goes into it, and an
        export dialog of the one before closes (its subject is that database's thread or resource)."""
        dialog = self.dialog
        if dialog is not None and _alive(dialog) and dialog.isVisible():
            dialog.reject()
        pending, self._pending = self._pending, None
        if pending is None or pending[0] is session:
            self._pending = pending
            return
        previewed, path, box = pending
        if box is not None and _alive(box) and box.isVisible():
            box.reject()  # its Import button would have imported the old preview into this database
        self._still_open(previewed, path)

    def _confirm(self, session: StudioSession, path: str, data: dict[str, Any], preview: ImportReport) -> None:
        if self._pending is None or self._pending[0] is not session:
            return  # ended already (another database was opened and the user was told)
        if not self._still_open(session, path):
            self._pending = None
            return
        if not preview.changed and not preview.conflicts and not preview.notes:
            self._pending = None
            self.window.show_status(f"Nothing to import: everything in {shown(path)} is already here")
            self.window.presenter.error(self.window, Problem(
                "Nothing to import", f"Everything in the file\n{shown(path)}\nis already in the database\n"
                f"{session.display_path}",
                "Importing it again would change nothing.", warning_only=True, whole_lines=True))
            return
        # (The checks held ``scope`` to its shape; ``source`` is only shown, so it may be anything a file holds.)
        scope = data.get("scope") or {}
        source = data.get("source")
        database = source.get("database") if isinstance(source, dict) else None
        origin = f"\n(exported from {printable(database)})" if isinstance(database, str) and database else ""
        # Each path on a line of its own: within a sentence the box wrapped a path at a slash ("in /tmp/" then
        # "s33/…"), and one could not read or copy it whole.
        text = (f"Import {scope.get('kind', '?')} {printable(str(scope.get('id', '?')))}\nfrom {shown(path)}{origin}"
                f"\ninto {session.display_path}?")
        self.window.show_status(f"Checked {shown(path)}: nothing is written unless you choose Import")
        needs_choice = any(c.replaceable for c in preview.conflicts)
        check = QCheckBox("Replace the rows that differ (overwrite)") if needs_choice else None
        # A file's memory overrides set what every user of that memory is asked to keep: taken only when asked.
        configs = (QCheckBox(CONFIGS_CHOICE) if data.get("configs") else None)
        box = self.window.presenter.confirm(
            self.window, "Import?", text, _advice(preview), "Import",
            lambda: self._import(session, path, data, overwrite=check is not None and check.isChecked(),
                                 with_configs=configs is not None and configs.isChecked()), whole_lines=True)
        if check is not None:
            box.setCheckBox(check)
        if configs is not None:
            configs.setObjectName("importConfigs")
            if check is None:
                box.setCheckBox(configs)
            else:  # (a message box holds one check box of its own: the second goes under it, the buttons after)
                _add_choice_under_check_box(box, configs)
        self._pending = (session, path, box)
        box.finished.connect(lambda _r: self._confirm_closed(box))

    def _confirm_closed(self, box: QMessageBox) -> None:
        if self._pending is not None and self._pending[2] is box:
            self._pending = None

    def _import(self, session: StudioSession, path: str, data: dict[str, Any], *, overwrite: bool,
                with_configs: bool = False) -> None:
        """Import into ``session``, the database the user saw the preview of (never another one)."""
        if not self._still_open(session, path):
            return
        self.window.show_status("Importing…")

        def done(result: Imported) -> None:
            report = result.report
            self.window.show_status(f"Imported: {report.summary()}")
            if self.window.session is session:
                session.notify_local_write()  # the tree and the message list re-query now
            lines = report.details()
            if lines or result.recall_note:
                self.window.presenter.error(self.window, Problem(
                    "Import finished", report.summary().capitalize() + ".",
                    _listed(lines) + (("\n\nRecall: " + result.recall_note) if result.recall_note else ""),
                    warning_only=True))
            self.imported.emit(result)

        session.run(lambda: run_import(session.store, data, overwrite, with_configs, shown(path)), on_result=done,
                    on_error=lambda exc: self._import_failed(session, exc))

    def _import_failed(self, session: StudioSession, exc: BaseException) -> None:
        """A refused file (``TransferError``: its message names the file as chosen, what is wrong and what to do)
        or a database that could not take the import (``explain``, naming the database, not the file)."""
        from core.transfer import TransferError

        self.window.show_status("Import failed")
        if isinstance(exc, TransferError):
            problem = Problem("Cannot import", str(exc), f"Nothing was written to {session.display_path}.",
                              getattr(exc, "__traceback_text__", ""))
        else:
            problem = explain(exc, session.display_path)
        self.window.presenter.error(self.window, problem)

    # -- files -----------------------------------------------------------------------------------
    def _folder(self) -> str:
        value = self.window.settings.value(FOLDER_KEY)
        return str(value) if value and Path(str(value)).is_dir() else str(Path.home())

    def _remember_folder(self, path: Path) -> None:
        self.window.settings.setValue(FOLDER_KEY, str(path.expanduser().parent))

    def _show(self, dialog: QDialog) -> None:
        """Window-modal without a nested event loop, closed with the window (like the presenter's)."""
        presenter = self.window.presenter
        presenter.open.append(dialog)

        def gone(_result: int = 0) -> None:
            if dialog in presenter.open:
                presenter.open.remove(dialog)
            if self.dialog is dialog:
                self.dialog = None
            dialog.deleteLater()

        dialog.finished.connect(gone)
        dialog.open()

    def _native_save(self, parent: QWidget, title: str, start: str, filters: str,
                     on_chosen: Callable[[str], None]) -> None:
        dialog = QFileDialog(parent, title, start, filters)
        dialog.setObjectName("exportFileDialog")
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.fileSelected.connect(on_chosen)
        self._show(dialog)

    def _native_open(self, parent: QWidget, start: str, on_chosen: Callable[[str], None]) -> None:
        dialog = QFileDialog(parent, "Import a Memory Studio export", start, IMPORT_FILTER)
        dialog.setObjectName("importFileDialog")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.fileSelected.connect(on_chosen)
        self._show(dialog)


def _alive(widget: QWidget) -> bool:
    return bool(shiboken6.isValid(widget))


def _advice(preview: ImportReport) -> str:
    text = f"It {preview.summary()}."
    if preview.details():
        text += "\n\n" + _listed(preview.details())
    return text + "\n\nThe import runs as one transaction: if anything fails, nothing is written."


def _listed(lines: list[str]) -> str:
    shown = [f"• {line}" for line in lines[:MAX_LISTED]]
    if len(lines) > MAX_LISTED:
        shown.append(f"… and {len(lines) - MAX_LISTED} more")
    return "\n".join(shown)
