"""``memory-studio`` without a subcommand: the desktop app.

``main`` shows the window first (first paint does not wait for the database) and opens the
database in a worker. On first launch, when the project's anchored database is empty, it fills it
with demo data by running the real engine (``core.demo.seed_demo``), with progress in the status bar.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from PySide6.QtCore import QMessageLogContext, QSettings, QtMsgType, qFormatLogMessage, qInstallMessageHandler
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from core.storage.paths import resolve_db_path
from core.version import __version__
from studio.assets import APP_ID, icon_files
from studio.main_window import APP_NAME, MainWindow
from studio.system_check import EXIT_NO_WINDOW, platform_failure_message
from studio.theme import apply_theme

ORGANIZATION = "memory-studio"
ANCHORED = ("caller", "project", "user-data")  # default locations; an explicit --db or $MEMORY_STUDIO_DB is never seeded


def make_app() -> QApplication:
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        app = _create_application()
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APP_NAME)
    app.setApplicationDisplayName(APP_NAME)
    app.setApplicationVersion(__version__)
    # The desktop entry's name: Wayland compositors and task bars match the window to it (icon, name).
    app.setDesktopFileName(APP_ID)
    app.setWindowIcon(app_icon())
    return app


def app_icon() -> QIcon:
    icon = QIcon()
    for path in icon_files():
        icon.addFile(str(path))
    return icon


def _create_application() -> QApplication:
    """QApplication, with Qt's "could not load the platform plugin" abort turned into advice.

    Qt reports that failure through qFatal, which aborts (core dump) right after the message handler
    returns; the handler is the last place to print what to install and exit cleanly instead.
    """
    def handler(mode: QtMsgType, context: QMessageLogContext, message: str) -> None:
        if mode == QtMsgType.QtFatalMsg and "platform plugin" in message:
            # Qt's earlier warnings (already printed below) say which plugin failed and why.
            sys.stderr.write(platform_failure_message(message.splitlines()[:1]))
            sys.stderr.flush()
            os._exit(EXIT_NO_WINDOW)
        sys.stderr.write(qFormatLogMessage(mode, context, message) + "\n")

    previous: Any = qInstallMessageHandler(handler)
    try:
        return QApplication(sys.argv[:1])
    finally:
        qInstallMessageHandler(previous)


def start(window: MainWindow, db: str | None, allow_writes: bool = False, seed_demo: bool = True) -> None:
    """Open the database the command line asked for (or the anchored default)."""
    writes = True if allow_writes else None  # None: ours read-write, anything else read-only
    if db:
        window.open_database(db, allow_writes=writes, create_missing=False)
        return
    location = resolve_db_path(None)
    window.open_database(None, allow_writes=writes, create_missing=True, seed_if_empty=seed_demo and location.how in ANCHORED)


def main(db: str | None = None, allow_writes: bool = False, seed_demo: bool = True) -> int:
    app = make_app()
    settings = QSettings()
    apply_theme(app, str(settings.value("theme", "dark")))
    window = MainWindow(settings)
    window.show()
    start(window, db, allow_writes, seed_demo)
    return int(app.exec())


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else None))
