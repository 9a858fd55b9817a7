"""Error and confirmation dialogs that say what happened and what to do.

``explain`` turns an exception into a ``Problem`` (pure, tested without Qt). ``DialogPresenter``
shows dialogs window-modally but without a nested event loop (``QDialog.open`` plus a callback), so
nothing ever blocks: not the UI, not a test. Tests reach the open dialogs through ``presenter.open``.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, replace
from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QFileDialog, QLabel, QMessageBox, QWidget

from core.storage.errors import (
    CorruptDatabaseError,
    DatabaseBusyError,
    DatabaseOpenError,
    DiskFullError,
    ReadOnlyError,
    ReadOnlyFileError,
    SchemaError,
)
from studio.logic.edit_history import MessageGoneError

DB_FILTER = "Databases (*.db *.sqlite *.sqlite3 *.libsql);;All files (*)"


@dataclass(frozen=True)
class Problem:
    title: str
    text: str  # what happened, naming the file
    advice: str  # what the user can do about it
    details: str = ""
    warning_only: bool = False  # e.g. "opened read-only because…": not an error
    whole_lines: bool = False  # each line of ``text`` (a path on a line of its own) shown unwrapped (``keep_lines_whole``)


def _is_server(path: str | None) -> bool:
    """Whether ``path`` names a server database (a Postgres URL), as the engine's location rules say."""
    from core.storage.paths import resolve_db_path

    if not path:
        return False
    try:
        return resolve_db_path(path).capabilities.server
    except Exception:  # noqa: BLE001 - a location the rules cannot read is not a server's; explain must not fail
        return False


def explain(exc: BaseException, path: str | None = None) -> Problem:
    """What to show for ``exc``. A mistake the message explains in full (a path that is missing or a folder,
    a file that is not a database, a lock, a read-only file) carries no traceback: it would only tell the
    user that something in the program broke. A damaged file and anything unexpected keep theirs, for a report."""
    from core.storage.paths import DatabaseLocationError  # loaded by whatever raised it, after first paint

    problem = _explain(exc, path)
    said_in_full = (DatabaseOpenError, SchemaError, ReadOnlyError, DiskFullError, DatabaseBusyError,
                    DatabaseLocationError)
    if isinstance(exc, said_in_full) and not isinstance(exc, CorruptDatabaseError):
        return replace(problem, details="")
    return problem


def _explain(exc: BaseException, path: str | None) -> Problem:
    from core.storage.paths import DatabaseLocationError

    where = path or "the database"
    message = str(exc) or type(exc).__name__
    low = message.lower()
    details = getattr(exc, "__traceback_text__", "") or "".join(
        traceback.format_exception(type(exc), exc, exc.__traceback__)
    )
    server = _is_server(path)
    if isinstance(exc, SchemaError) and ("newer" in low or "upgrade" in low):
        return Problem("Newer database", message,
                       f"Upgrade Memory Studio to work with this {'database' if server else 'file'}. It was not changed.",
                       details)
    if isinstance(exc, SchemaError) and server:
        return Problem("Not a memory database", message,
                       "Connect to a database written by Memory Studio or by Mastra (PgStore) with File > Connect to "
                       "Postgres…. It was not changed.", details)
    if isinstance(exc, SchemaError):
        return Problem("Not a memory database", message,
                       "Open a database written by Memory Studio or by Mastra (LibSQLStore). It was not changed.",
                       details)
    if isinstance(exc, CorruptDatabaseError):
        return Problem("Damaged database", message,
                       "Keep a copy of the file, then restore a backup or recover it as the message says.", details)
    if isinstance(exc, ReadOnlyFileError):
        return Problem("Cannot write this file", message,
                       "Fix the permissions of the file and its folder, or copy it to a writable folder.", details)
    if isinstance(exc, DiskFullError):
        return Problem("Disk full", message, "Free some disk space, then repeat what you were doing.", details)
    if isinstance(exc, DatabaseOpenError) and server:
        # A server database: the file advice below (File > Open, "this file") would point nowhere.
        if low.startswith("cannot sign in"):
            return Problem("Cannot sign in", message,
                           "Check the user name and password as the message says, then connect again with "
                           "File > Connect to Postgres…. Nothing was changed.", details)
        if "does not exist" in low:
            return Problem("Database not found", message,
                           "Create it first (createdb), or connect to another database with "
                           "File > Connect to Postgres….", details)
        return Problem("Cannot open the database", message,
                       "Do what the message says, then connect again with File > Connect to Postgres…. "
                       "Nothing was changed.", details)
    if isinstance(exc, DatabaseOpenError):
        if "does not exist" in low:
            return Problem("Database not found", message,
                           "Check the path, or choose File > Open to pick an existing database.", details)
        if "locked" in low or "busy" in low:
            return Problem("Database is locked", message,
                           "Wait for the other program to finish its write (or close it), then File > Reload.",
                           details)
        if "permission" in low or "cannot be read" in low:
            return Problem("Cannot read the database", message,
                           "Fix the file's permissions (it must be readable by you), then File > Reload.", details)
        if "folder" in low:
            return Problem("That is a folder", message, "Choose a database file inside it with File > Open.", details)
        return Problem("Not a database", message,
                       "Pick another file with File > Open. This one was left unchanged.", details)
    if isinstance(exc, DatabaseLocationError):
        return Problem("Cannot use this location", message,
                       "Choose another file with File > Open or --db PATH.", details)
    if isinstance(exc, ReadOnlyError):
        return Problem("Read-only", message, "Choose File > Allow Writes first.", details)
    if isinstance(exc, MessageGoneError):
        return Problem("Message not found", message,
                       "File > Reload shows the database as it is now; a prompt shown before may still quote it.")
    if isinstance(exc, DatabaseBusyError):  # (its message names the file and what did not happen: a read or a write)
        return Problem("Database is locked", message,
                       "Wait for the other program to finish its write (or close it), then File > Reload.", details)
    if "database is locked" in low or "database is busy" in low:
        # the libSQL driver raises a bare ValueError for a lock met while connecting
        return Problem("Database is locked", f"{where} is locked by another process ({message}).",
                       "Wait for the other program to finish its write (or close it), then File > Reload.", details)
    if isinstance(exc, (PermissionError, IsADirectoryError, FileNotFoundError)):
        return Problem("Cannot open the file", f"{where}: {message}", "Check the path and its permissions.", details)
    return Problem("Something went wrong", f"{type(exc).__name__}: {message}",
                   "The database was not changed. If this keeps happening, report it with the details below.",
                   details)


def newer_schema_notice(path: str, migrations: list[str]) -> Problem:
    return Problem(
        "Opened read-only: newer database",
        f"{path} was written by a newer Memory Studio (unknown migrations: {', '.join(migrations)}).",
        "You can browse it; to edit it, upgrade Memory Studio. Nothing in the file was changed.",
        warning_only=True,
    )


def build_error_box(parent: QWidget | None, problem: Problem) -> QMessageBox:
    box = QMessageBox(parent)
    box.setObjectName("problemDialog")
    box.setIcon(QMessageBox.Icon.Warning if problem.warning_only else QMessageBox.Icon.Critical)
    box.setWindowTitle(problem.title)
    box.setTextFormat(Qt.TextFormat.PlainText)  # its text may quote a file or a database: never rich text
    box.setText(problem.text)
    box.setInformativeText(problem.advice)
    if problem.details:
        box.setDetailedText(problem.details)
    box.setStandardButtons(QMessageBox.StandardButton.Ok)
    if problem.whole_lines:
        keep_lines_whole(box)
    return box


def keep_lines_whole(box: QMessageBox) -> None:
    """Make the box's text as wide as its widest line (up to the screen's width less 200 px), so no line is
    wrapped: past ~400 px a message box wraps its text, and a path was wrapped at a slash ("in /tmp/" then
    "s33/…"), to be read and copied in pieces. For a text whose paths stand on lines of their own."""
    label = box.findChild(QLabel, "qt_msgbox_label")
    if label is None:  # (a Qt that names its label otherwise: wrapped as before)
        return
    metrics = label.fontMetrics()
    widest = max((metrics.horizontalAdvance(line) for line in box.text().split("\n")), default=0)
    screen = box.screen().availableGeometry().width() if box.screen() is not None else 1024
    label.setMinimumWidth(min(widest + 2 * label.margin() + 4, max(screen - 200, 300)))


def build_confirm_box(parent: QWidget | None, title: str, text: str, advice: str, yes_text: str,
                      whole_lines: bool = False) -> QMessageBox:
    box = QMessageBox(parent)
    box.setObjectName("confirmDialog")
    box.setIcon(QMessageBox.Icon.Question)
    box.setWindowTitle(title)
    box.setTextFormat(Qt.TextFormat.PlainText)  # (an import's confirmation quotes the file's ids)
    box.setText(text)
    box.setInformativeText(advice)
    yes = box.addButton(yes_text, QMessageBox.ButtonRole.AcceptRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    box.setProperty("yesButton", yes)
    if whole_lines:
        keep_lines_whole(box)
    return box


class DialogPresenter:
    """Shows dialogs without blocking. Keeps the ones still open in ``open`` (newest last)."""

    def __init__(self) -> None:
        self.open: list[QDialog] = []

    def _track(self, dialog: QDialog) -> None:
        self.open.append(dialog)

        def gone(_result: int = 0) -> None:
            if dialog in self.open:
                self.open.remove(dialog)
            dialog.deleteLater()

        dialog.finished.connect(gone)
        dialog.open()

    def show(self, dialog: QDialog) -> QDialog:
        """Open any dialog window-modally, tracked like the others."""
        self._track(dialog)
        return dialog

    def error(self, parent: QWidget | None, problem: Problem) -> QMessageBox:
        box = build_error_box(parent, problem)
        self._track(box)
        return box

    def confirm(self, parent: QWidget | None, title: str, text: str, advice: str, yes_text: str,
                on_yes: Callable[[], None], whole_lines: bool = False) -> QMessageBox:
        box = build_confirm_box(parent, title, text, advice, yes_text, whole_lines)
        yes = box.property("yesButton")
        box.finished.connect(lambda _r: on_yes() if box.clickedButton() is yes else None)
        self._track(box)
        return box

    def choose_database(self, parent: QWidget | None, start: str, on_chosen: Callable[[str], None]) -> QFileDialog:
        dialog = QFileDialog(parent, "Open memory database", start or os.getcwd(), DB_FILTER)
        dialog.setObjectName("openDatabaseDialog")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.fileSelected.connect(on_chosen)
        self._track(dialog)
        return dialog

    def close_all(self) -> None:
        """Close every open dialog (the window closes), without their questions: a
        dialog that asks before dropping typed text (``discard``) is closed by its ``discard``."""
        for dialog in list(self.open):
            discard = getattr(dialog, "discard", None)
            if callable(discard):
                discard()
            else:
                dialog.reject()
