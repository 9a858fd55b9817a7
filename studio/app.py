"""``memory-studio`` without a subcommand: the desktop app.

Start-up, in order (``main``; ``memory-studio`` reaches it through ``studio.cli``, which imports
neither the engine nor ``core.cli`` for it, and loads Qt through ``studio.qt_boot``: shiboken's
signature module compiled from a cache):

1. The window is built with ``finish_later`` and shown: only what its first paint shows (the menu
   bar's titles, the empty-state text, the status bar). Importing it loads Qt and the Studio's shell
   only: ``core`` and its packages load their modules on first use (PEP 562 tables), the command
   palette, the dialogs, the session, the reads, the preferences and the edit and transfer actions are
   imported where they are used, and a pane's module when the pane is first built
   (``studio/main_window.py``). So no SQLAlchemy, numpy, DuckDB, onnxruntime or tokenizer is imported
   before the first paint (``tests/studio/test_startup.py`` checks it).
2. Once the window has painted, ``MainWindow.finish_building`` adds the rest (every command with its
   menu item and shortcut, the palette, the recent files, the tab area; the window emits ``ready``),
   then the database opens in a worker (``MainWindow.open_database``). When it has opened (or failed,
   or after ``WARM_AFTER_MS``), another worker warms the modules the panes' reads will need
   (``WARM_MODULES``). Nothing waits for the warm-up: whatever needs a module first simply imports it
   (Python's import lock makes a second importer wait for the first), so it is never wrong, only
   sometimes not yet faster. Only non-Qt modules are imported on the worker.
3. Not warmed, because they cost memory and only some panes need them: the tokenizer's table (about
   75 MB; loaded by the worker of the first read that counts tokens: the working-memory and prompt
   inspector reads) and the embedding model (onnxruntime; loaded by the worker of the first read that
   needs an embedder: a recall search, a preview with semantic recall).

On first launch, when the project's anchored database is empty, the window fills it with demo data by
running the real engine (``core.demo.seed_demo``), with progress in the status bar.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from typing import Any, Callable

from PySide6.QtCore import (
    QEvent,
    QMessageLogContext,
    QObject,
    QSettings,
    QtMsgType,
    QTimer,
    Signal,
    qFormatLogMessage,
    qInstallMessageHandler,
)
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication, QWidget

from core.version import __version__
from studio.assets import APP_ID, icon_files
from studio.main_window import APP_NAME, MainWindow
from studio.theme import apply_theme
from studio.ui_gc import UiThreadCollector
from studio.workers import WorkerPool

ORGANIZATION = "memory-studio"
ANCHORED = ("caller", "project", "user-data")  # default locations; an explicit --db or $MEMORY_STUDIO_DB is never seeded

# Warmed on a worker after the first paint, in this order: the memory tables (and with them SQLAlchemy
# and the database layer), the engine the panes' reads build on, the trace reader (DuckDB), the recall
# index (numpy), and the pure-Python layouts the UI thread imports on demand. No Qt module, and only the
# engine's public modules (the Studio's import contract in pyproject.toml).
WARM_MODULES: tuple[str, ...] = (
    "core.storage.memory_store",
    "core.memory",
    "core.agent_configs",
    "core.edits.messages",
    "core.tokens",
    "core.observational",
    "core.traces.reader",
    "core.recall",
    "studio.logic.prompt_layout",
    "studio.logic.replay_layout",
    "studio.edit_jobs",
)
FIRST_PAINT_TIMEOUT_MS = 2000  # a window that never paints (minimised, no compositor) still opens its database
WARM_AFTER_MS = 3000  # the warm-up starts when the database has opened, or this long after the first paint


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
            from studio.system_check import EXIT_NO_WINDOW, platform_failure_message

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


class _FirstPaint(QObject):
    """Calls ``then`` once, right after ``widget``'s first paint has reached the screen (or after
    ``FIRST_PAINT_TIMEOUT_MS`` if it never paints)."""

    def __init__(self, widget: QWidget, then: Callable[[], None]) -> None:
        super().__init__(widget)
        self._widget: QWidget | None = widget
        self._then: Callable[[], None] | None = then
        widget.installEventFilter(self)
        QTimer.singleShot(FIRST_PAINT_TIMEOUT_MS, self, self._fire)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint and self._then is not None:
            QTimer.singleShot(0, self, self._fire)  # after this paint pass has been flushed
        return False

    def _fire(self) -> None:
        then, self._then = self._then, None
        if then is None:
            return
        if self._widget is not None:
            self._widget.removeEventFilter(self)
            self._widget = None
        then()


def after_first_paint(widget: QWidget, then: Callable[[], None]) -> None:
    """Run ``then`` on the UI thread once ``widget`` has painted for the first time."""
    _FirstPaint(widget, then)


def warm_up(modules: tuple[str, ...] = WARM_MODULES) -> dict[str, float]:
    """Import ``modules``: run on a worker, never the UI thread. Returns the milliseconds each took
    (a module another thread was importing at the time counts the wait)."""
    took: dict[str, float] = {}
    for name in modules:
        t0 = time.perf_counter()
        importlib.import_module(name)
        took[name] = (time.perf_counter() - t0) * 1000
    return took


class StartUp(QObject):
    """The start-up sequence of one window (``launch``): ``opening`` runs after the first paint; the
    warm-up runs once the window has opened a database (or failed to), on its own one-thread pool (not
    the window's: the busy bar is for the user's work).
    ``warmed`` carries the per-module times, or the exception (printed, never a dialog: whatever needs
    the module imports it again and reports the failure where it happens)."""

    warmed = Signal(object)

    def __init__(self, window: MainWindow, opening: Callable[[], None], warm: bool = True) -> None:
        super().__init__(window)
        self.window = window
        self.opening = opening
        self.warm = warm
        self.painted = False
        self.warming = False
        self.warm_result: dict[str, float] | BaseException | None = None
        self.pool = WorkerPool(self, max_threads=1)

    def begin(self) -> None:
        self.painted = True
        self.window.finish_building()  # menus' items, shortcuts, palette (emits window.ready)
        if self.warm:
            # The open's own imports come first; warming alongside would only slow the first rows.
            self.window.session_opened.connect(self._start_warm_up)
            self.window.open_failed.connect(self._start_warm_up)
            QTimer.singleShot(WARM_AFTER_MS, self, self._start_warm_up)
        self.opening()

    def _start_warm_up(self, *_args: Any) -> None:
        if self.warming:
            return
        self.warming = True
        self.window.session_opened.disconnect(self._start_warm_up)
        self.window.open_failed.disconnect(self._start_warm_up)
        self.pool.submit(warm_up, on_result=self._done, on_error=self._done)

    def _done(self, result: dict[str, float] | BaseException) -> None:
        self.warm_result = result
        if isinstance(result, BaseException):
            sys.stderr.write(f"memory-studio: warming the engine failed: {type(result).__name__}: {result}\n")
        self.warmed.emit(result)


def launch(window: MainWindow, opening: Callable[[], None], warm: bool = True) -> StartUp:
    """Show ``window``; after its first paint, finish building it (``MainWindow(..., finish_later=True)``),
    run ``opening`` (open the database) and warm the heavy modules on a worker."""
    startup = StartUp(window, opening, warm)
    window.show()
    after_first_paint(window, startup.begin)
    return startup


def start(window: MainWindow, db: str | None, allow_writes: bool = False, seed_demo: bool = True) -> None:
    """Open the database the command line asked for (or the anchored default)."""
    from core.storage.paths import resolve_db_path

    writes = True if allow_writes else None  # None: ours read-write, anything else read-only
    if db:
        window.open_database(db, allow_writes=writes, create_missing=False)
        return
    location = resolve_db_path(None)
    window.open_database(None, allow_writes=writes, create_missing=True, seed_if_empty=seed_demo and location.how in ANCHORED)


def main(db: str | None = None, allow_writes: bool = False, seed_demo: bool = True) -> int:
    app = make_app()
    collector = UiThreadCollector(app)  # cycles (Qt objects among them) are freed on the UI thread, never on a worker
    settings = QSettings()
    apply_theme(app, str(settings.value("theme", "dark")))
    window = MainWindow(settings, finish_later=True)  # what its first paint shows; the rest right after
    launch(window, lambda: start(window, db, allow_writes, seed_demo))
    try:
        return int(app.exec())
    finally:
        collector.stop()


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else None))
