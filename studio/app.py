"""``memory-studio`` without a subcommand: the desktop app.

``main`` shows the window first (first paint does not wait for the database) and opens the
database in a worker. On first launch, when the project's anchored database is empty, it fills it
with demo data by running the real engine (``core.demo.seed_demo``), with progress in the status bar.
"""

from __future__ import annotations

import sys

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from core.storage.paths import resolve_db_path
from studio.main_window import APP_NAME, MainWindow
from studio.theme import apply_theme

ORGANIZATION = "memory-studio"
ANCHORED = ("caller", "project", "user-data")  # default locations; an explicit --db or $MEMORY_STUDIO_DB is never seeded


def make_app() -> QApplication:
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        app = QApplication(sys.argv[:1])
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APP_NAME)
    return app


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
