"""The main window: resources tree on the left, the panes as tabs on the right, one registry of
commands behind the menus, the shortcuts and the palette.

Opening a database runs in a worker; until it succeeds the previous one stays open. Each open file
gets a fresh ``StudioSession`` and fresh panes (they are built over one session), so nothing from
the previous file can leak into the next. When the file changes on disk, the tree and the message
list update in place.

The tabs come from one typed tuple, ``PANES`` (``studio.pane_protocol.PaneSpec``): each spec's
factory builds its pane and connects what the pane emits to this window's ``PaneHost`` slots. A
pane is built the first time its tab is shown, or when a command needs it (``pane(spec)``); it then
gets the selection made before it existed.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from urllib.parse import urlsplit
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, TypeVar, cast, runtime_checkable

from PySide6.QtCore import QPoint, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QGuiApplication
from PySide6.QtWidgets import QApplication, QLabel, QMainWindow, QMenu, QProgressBar, QStackedWidget, QVBoxLayout, QWidget

from core.version import __version__
from studio.open_wait import OpenWait
from studio.pane_protocol import EditingPane, FilteringPane, Pane, PaneHost, PaneSpec
from studio.selection import Selection
from studio.theme import apply_theme, current_theme
from studio.widgets.banner import Banner
from studio.widgets.elided_label import ElidedLabel
from studio.widgets.pane_header import elastic
from studio.widgets.path_label import PathLabel, StatusRoom
from studio.widgets.plain_tip import plain_tip
from studio.widgets.scroll_fit import FitScroll, SideWidth
from studio.workers import WorkerPool, traceback_text

# Imported where they are used, after the first paint (``finish_building``, the open, the panes): the
# first paint shows the shell only, and these bring the command palette, the dialogs, the session with
# the engine's names, the reads, the preferences and the two panes' modules.
if TYPE_CHECKING:
    from PySide6.QtWidgets import QSplitter, QTabWidget, QToolButton

    from studio import reads as queries
    from studio.commands import Command, CommandPalette, CommandRegistry, RecentFiles
    from studio.dialogs import DialogPresenter
    from studio.logic.checks_layout import PinTarget
    from studio.memory_edits import MemoryEditActions
    from studio.panes.chat import ChatPane
    from studio.panes.checks import ChecksPane
    from studio.panes.messages import MessagesPane
    from studio.panes.observations import ObservationsPane
    from studio.panes.prompt_inspector import PromptInspectorPane
    from studio.panes.recall_playground import RecallPlaygroundPane
    from studio.panes.replay import ReplayPane
    from studio.panes.resources import ResourcesPane
    from studio.panes.traces import TracesPane
    from studio.panes.working_memory import WorkingMemoryPane
    from studio.preferences import Preferences
    from studio.session import EmptyFileError, OpenedDatabase, StudioSession
    from studio.transfer import TransferActions
    from studio.widgets.fitted_tabs import FittedTabs

APP_NAME = "Memory Studio"
BUSY_DELAY_MS = 300  # show the busy bar only for work slower than a moment
# How long the status bar says what an action did ("Exported …", "Nothing to import: …"): it said so for ever,
# still there after many later actions. Work under way ("…") and a warning ("⚠") stay until the next message.
STATUS_OUTCOME_MS = 60_000
DEFAULT_SIZE = (1360, 860)  # the first launch's window, and when a saved geometry cannot be restored
# The thread list: 380 px (or what the user drags it to) while that is at most 36 % of the window, and at least
# 30 % of it, between 220 and 340 px (a fixed 340 px least left a 720 px window's panes ~320 px, cut sideways).
LIST_WANTED, LIST_MOST_LEAST, LIST_FLOOR, LIST_LEAST_SHARE, LIST_SHARE = 380, 340, 220, 0.30, 0.36

Seeder = Callable[..., Any]


@runtime_checkable
class SeedReport(Protocol):
    """What a seeder may return (``core.demo.DemoReport``): the status bar shows its summary."""

    def summary(self) -> str: ...

T = TypeVar("T", bound=Pane)


# -- the panes: each factory builds one pane and connects what it emits to the window --------------
# Pane modules are imported by their factory, so a pane nobody opens is never imported (and none is
# imported before the first paint).
def _messages(session: StudioSession, parent: QWidget, host: PaneHost) -> MessagesPane:
    from studio.panes.messages import MessagesPane

    pane = MessagesPane(session, parent)
    pane.message_selected.connect(host.select_message)
    pane.request_command.connect(host.run_command)  # Edit…, Delete…, History… of the selected message
    return pane


def _prompt(session: StudioSession, parent: QWidget, host: PaneHost) -> PromptInspectorPane:
    from studio.panes.prompt_inspector import PromptInspectorPane

    pane = PromptInspectorPane(session, parent)
    pane.open_message.connect(host.show_message)
    pane.request_command.connect(host.run_command)  # Migrate Database…
    pane.pin_requested.connect(host.pin_fragment)
    pane.edit_requested.connect(host.edit_message)
    return pane


def _working_memory(session: StudioSession, parent: QWidget, host: PaneHost) -> WorkingMemoryPane:
    from studio.panes.working_memory import WorkingMemoryPane

    pane = WorkingMemoryPane(session, parent)
    pane.request_command.connect(host.run_command)  # Migrate Database…
    return pane


def _traces(session: StudioSession, parent: QWidget, host: PaneHost) -> TracesPane:
    from studio.panes.traces import TracesPane

    return TracesPane(session, parent)


def _observations(session: StudioSession, parent: QWidget, host: PaneHost) -> ObservationsPane:
    from studio.panes.observations import ObservationsPane

    pane = ObservationsPane(session, parent)
    pane.change_requested.connect(host.change_observation)
    return pane


def _chat(session: StudioSession, parent: QWidget, host: PaneHost) -> ChatPane:
    from studio.panes.chat import ChatPane

    pane = ChatPane(session, parent)
    pane.open_prompt.connect(host.show_prompt)  # a turn's prompt
    pane.thread_started.connect(host.select_thread)  # a thread it started
    return pane


def _recall(session: StudioSession, parent: QWidget, host: PaneHost) -> RecallPlaygroundPane:
    from studio.panes.recall_playground import RecallPlaygroundPane

    pane = RecallPlaygroundPane(session, parent)
    pane.request_command.connect(host.run_command)  # Index Recall for Resource…
    return pane


def _replay(session: StudioSession, parent: QWidget, host: PaneHost) -> ReplayPane:
    from studio.panes.replay import ReplayPane

    pane = ReplayPane(session, parent)
    pane.open_message.connect(host.show_message)
    pane.open_trace.connect(host.show_trace)
    pane.open_thread.connect(host.select_in_tree)
    pane.forked.connect(lambda thread: host.select_in_tree(Selection(thread.resource_id, thread.id)))
    pane.view.pin_requested.connect(host.pin_fragment)
    pane.view.edit_requested.connect(host.edit_message)
    pane.what_if.checks_requested.connect(host.run_checks_what_if)
    return pane


def _checks(session: StudioSession, parent: QWidget, host: PaneHost) -> ChecksPane:
    from studio.panes.checks import ChecksPane

    pane = ChecksPane(session, parent)
    pane.open_turn.connect(host.replay_turn)
    return pane


MESSAGES = PaneSpec("messages", "Messages", "Ctrl+1", _messages)
PROMPT = PaneSpec("prompt", "Prompt Inspector", "Ctrl+2", _prompt)
WORKING_MEMORY = PaneSpec("working_memory", "Working Memory", "Ctrl+3", _working_memory)
TRACES = PaneSpec("traces", "Traces", "Ctrl+4", _traces)
OBSERVATIONS = PaneSpec("observations", "Observations", "Ctrl+5", _observations)
CHAT = PaneSpec("chat", "Chat Playground", "Ctrl+6", _chat)
RECALL = PaneSpec("recall", "Recall Playground", "Ctrl+7", _recall)
REPLAY = PaneSpec("replay", "Replay", "Ctrl+8", _replay)
CHECKS = PaneSpec("checks", "Checks", "Ctrl+9", _checks)
# The tabs, in order.
PANES: tuple[PaneSpec[Pane], ...] = (MESSAGES, PROMPT, WORKING_MEMORY, TRACES, OBSERVATIONS, CHAT, RECALL, REPLAY,
                                     CHECKS)
# The tabs' shorter titles, used while the full ones don't fit the window (below ~1,450 px the last
# tabs hid behind scroll arrows); each tab's tooltip holds its full title and its key.
SHORT_TITLES = {"Prompt Inspector": "Prompt", "Working Memory": "Memory", "Chat Playground": "Chat",
                "Recall Playground": "Recall"}
PANE_TABS = tuple((spec.title, SHORT_TITLES.get(spec.title, spec.title), f"{spec.title} ({spec.shortcut})")
                  for spec in PANES)


def spec_named(name: str) -> PaneSpec[Pane]:
    """The spec whose key is ``name`` (``KeyError`` if none)."""
    for spec in PANES:
        if spec.name == name:
            return spec
    raise KeyError(name)


class PanePage(QWidget):
    """One tab's page. It holds its pane once built (no margins, no frame: on screen, the page is the
    pane), in a scroll area: where the window is shorter than the pane's least height (900 x 700, or
    1,440 x 900 at a scale of 2: 720 x 450), the pane keeps its least height and scrolls, so every control
    can be reached; a pane never makes the window taller (it was 789 px at least once the Prompt Inspector
    had been shown, taller than the screen at a scale of 2). Where the pane fits, no scroll bar is shown."""

    def __init__(self, spec: PaneSpec[Pane], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(f"{spec.name}Page")
        self.spec = spec
        self.pane: Pane | None = None
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(0)
        self.area = FitScroll(self)  # (asks the pane's least height only: ``studio.widgets.scroll_fit``)
        self.area.setObjectName(f"{spec.name}Scroll")
        self._layout.addWidget(self.area)

    def hold(self, pane: Pane, widget: QWidget) -> None:
        """Hold ``pane`` (``widget``: the same object, seen as the widget it is)."""
        self.pane = pane
        self.area.hold(widget)
        widget.show()  # now, not on the next turn of the event loop (what addWidget alone would do)


class BuiltPanes:
    """The window's panes by key, for scripts and tests (``window.panes["replay"]``): looking one
    up builds it if it was not built yet. Its length and iteration count built panes only."""

    def __init__(self, window: MainWindow) -> None:
        self._window = window

    def __getitem__(self, name: str) -> Pane:
        return self._window.pane(spec_named(name))

    def __len__(self) -> int:
        return len(self.values())

    def values(self) -> list[Pane]:
        return [page.pane for page in self._window.pages if page.pane is not None]


def title_name(path: str) -> str:
    """The short name the window title starts with: a file's name, a server database's name (the
    URL's path: a socket folder in ``?host=`` or the query is not the database)."""
    if "://" in path:
        return urlsplit(path).path.lstrip("/") or path
    return Path(path).name if path != ":memory:" else path


def default_seeder(store: Any, progress: Callable[[int, int], None]) -> Any:
    from core.demo import seed_demo

    return seed_demo(store, progress=progress)


# How the status bar names the rule that chose the file (core.storage.paths.ResolvedPath.how).
SOURCE_LABELS = {
    "explicit": "opened by path", "environment": "from $MEMORY_STUDIO_DB", "caller": "project of the calling code",
    "project": "project of the working folder", "user-data": "user data folder", "memory": "in memory",
}


MENUS = ("File", "Edit", "View", "Help")  # the menu bar's menus, in order


def status_lasts(text: str) -> bool:
    """Whether a status message stays until the next one: work under way ("Opening …") or a warning."""
    return text.startswith("⚠") or text.rstrip().endswith("…")


class MainWindow(QMainWindow):
    """The window. ``MainWindow(settings)`` is complete when it returns. With ``finish_later=True``
    (the app's start, ``studio.app.launch``) it holds only what its first paint shows: the menu bar's
    titles, the empty-state text and the status bar; ``finish_building()``, run right after that paint,
    adds the rest (the commands behind the menus, the shortcuts and the palette, the recent files, the
    preferences, the edit and transfer actions, the tab area) and emits ``ready``. Nothing can reach
    the missing parts before: menus are empty and no shortcut exists until then, and opening a database
    finishes the window first."""

    session_opened = Signal(object)  # StudioSession
    open_failed = Signal(object)  # Problem
    seeding_finished = Signal(object)  # the seeder's report, or an exception
    ready = Signal()  # finish_building() has run: every menu item, shortcut and palette command exists

    # Made by finish_building():
    presenter: DialogPresenter
    recent: RecentFiles
    preferences: Preferences
    commands: CommandRegistry
    transfer: TransferActions
    edits: MemoryEditActions
    recent_menu: QMenu
    split: QSplitter
    tabs: QTabWidget
    tab_fit: FittedTabs
    back_btn: QToolButton
    left: QStackedWidget

    def __init__(self, settings: QSettings, presenter: DialogPresenter | None = None,
                 seeder: Seeder = default_seeder, parent: QWidget | None = None, *,
                 finish_later: bool = False) -> None:
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.settings = settings
        self._given_presenter = presenter
        self.seeder = seeder
        self.is_ready = False  # finish_building() has run
        self.pool = WorkerPool(self, max_threads=2)
        self.session: StudioSession | None = None
        self._discard_confirmed = False  # the user chose to close with unsaved edits
        self.pages: list[PanePage] = []  # one per tab, in PANES order, while a database is open
        self.panes = BuiltPanes(self)
        self.sql_log_dock: Any = None  # View > SQL Log (studio.widgets.sql_log_dock.SqlLogDock), made on first use
        self.resources: ResourcesPane | None = None
        self.selection = Selection()
        self.newer_migrations: list[str] = []
        self.seeding = False
        self._open_token = 0
        self.last_postgres_url: str | None = None  # the server database opened or tried last (File > Connect…)
        self._busy = {"pool": 0, "session": 0}
        self.preferences_dialog: QWidget | None = None
        self.history: list[tuple[PaneSpec[Pane], Selection]] = []  # where Back returns to (Replay after a trace)
        self.command_palette: CommandPalette | None = None

        self._build_shell()
        self.menus: dict[str, QMenu] = {title: self.menuBar().addMenu(title) for title in MENUS}
        self._update_title()
        geometry = settings.value("geometry")
        # A geometry saved under another screen setup (another monitor, another platform) can be refused:
        # the window would then open at its size hint (a few hundred pixels), so it gets the default size.
        if geometry is None or not self.restoreGeometry(geometry):
            self.resize(*DEFAULT_SIZE)
        if not finish_later:
            self.finish_building()

    def finish_building(self) -> None:
        """Add what the first paint does not show, then emit ``ready`` (once; later calls do nothing)."""
        if self.is_ready:
            return
        from studio.commands import CommandRegistry, RecentFiles
        from studio.dialogs import DialogPresenter
        from studio.preferences import Preferences

        self.is_ready = True
        self.presenter = self._given_presenter or DialogPresenter()
        self.recent = RecentFiles.from_setting(self.settings.value("recentFiles"))
        self.preferences = Preferences(self.settings, self)  # models for re-runs and chats (panes find it here)
        self._build_tab_area()
        self.commands = CommandRegistry(self)
        self._register_commands()
        self.commands.fill_menus(self.menus)
        self.back_btn.setDefaultAction(self.commands.action("view.back"))
        self._build_recent_menu()
        self.commands.add_provider(self._recent_commands)
        self.commands.add_provider(self._pane_commands)
        self.ready.emit()

    # -- shell -----------------------------------------------------------------------------------
    def _build_shell(self) -> None:
        """What the first paint shows: the empty-state text (no database is open yet) and the status bar."""
        self.placeholder = QLabel("No database open.\nFile > Open… (Ctrl+O)", self)
        self.placeholder.setObjectName("emptyState")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.center = QStackedWidget(self)
        self.center.addWidget(self.placeholder)
        # Above everything: problems with the open file itself (it was deleted or replaced).
        self.file_banner = Banner(self)
        # Text shown that no installed font can draw (CJK on a bare Linux): said once, with the package to install.
        self.font_banner = Banner(self)
        # An open waiting for another program's lock: what it waits for, until when, and a way out.
        self.open_banner = Banner(self)
        self.open_wait = OpenWait(self.open_banner, stop=self.stop_waiting_to_open,
                                  open_another=self.choose_database, status=self.show_status)
        self._font_noted = False
        shell = QWidget(self)
        column = QVBoxLayout(shell)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(self.file_banner)
        column.addWidget(self.open_banner)
        column.addWidget(self.font_banner)
        column.addWidget(self.center, 1)
        self.setCentralWidget(shell)

        bar = self.statusBar()
        # What the window says last: cut with "…" (the whole text on hover) where the path beside it leaves no
        # room, never at the path's edge with no mark; plain text, since it names data (a thread, a file).
        self.status_text = elastic(ElidedLabel("", self))
        self.status_expiry = QTimer(self)
        self.status_expiry.setSingleShot(True)
        self.status_expiry.setInterval(STATUS_OUTCOME_MS)
        self.status_expiry.timeout.connect(lambda: self._say(""))
        self.busy_bar = QProgressBar(self)
        self.busy_bar.setObjectName("busyBar")
        self.busy_bar.setFixedWidth(140)
        self.busy_bar.setTextVisible(False)
        self.busy_bar.setRange(0, 0)
        self.busy_bar.hide()
        self.badge = QLabel("", self)
        self.badge.setObjectName("readOnlyBadge")
        self.badge.hide()
        self.path_label = PathLabel(self)  # (cut in the middle of its folders where the bar is short)
        self.path_label.setObjectName("pathLabel")
        bar.addWidget(self.status_text, 1)
        bar.addPermanentWidget(self.busy_bar)
        bar.addPermanentWidget(self.path_label)
        bar.addPermanentWidget(self.badge)
        self.status_room = StatusRoom(bar, self.status_text)
        self._busy_timer = QTimer(self)
        self._busy_timer.setSingleShot(True)
        self._busy_timer.setInterval(BUSY_DELAY_MS)
        self._busy_timer.timeout.connect(self._show_busy)
        self.pool.busy_changed.connect(lambda n: self._set_busy("pool", n))

    def _build_tab_area(self) -> None:
        """The thread tree's place on the left and the panes' tabs on the right (shown once a database is open)."""
        from PySide6.QtWidgets import QSplitter, QTabWidget, QToolButton

        from studio.widgets.fitted_tabs import FittedTabs

        self.split = QSplitter(Qt.Orientation.Horizontal, self)
        self.split.setChildrenCollapsible(False)
        self.tabs = QTabWidget(self)
        self.tabs.setObjectName("paneTabs")
        self.tabs.setDocumentMode(True)
        self.back_btn = QToolButton(self)
        self.back_btn.setObjectName("backButton")
        self.back_btn.hide()
        self.tabs.setCornerWidget(self.back_btn, Qt.Corner.TopRightCorner)
        self.tabs.currentChanged.connect(self._tab_shown)
        self.tab_fit = FittedTabs(self.tabs, PANE_TABS, scroll=True)
        self.left = QStackedWidget(self)
        # Thread titles are what users scan; the panes on the right are wide and would squeeze them. In a
        # narrow window the list gives way to a share of it (``SideWidth``), or the pane beside it is cut.
        self.left.setMinimumWidth(LIST_MOST_LEAST)
        self.split.addWidget(self.left)
        self.split.addWidget(self.tabs)
        self.split.setStretchFactor(0, 0)
        self.split.setStretchFactor(1, 1)
        self.split.setSizes([LIST_WANTED, 980])
        self.thread_list_width = SideWidth(self.split, wanted=LIST_WANTED, most_least=LIST_MOST_LEAST, floor=LIST_FLOOR,
                                           least_share=LIST_LEAST_SHARE, share=LIST_SHARE)
        self.center.addWidget(self.split)

    def _set_busy(self, source: str, count: int) -> None:
        self._busy[source] = count
        if sum(self._busy.values()) or self.seeding:
            if not self.busy_bar.isVisible() and not self._busy_timer.isActive():
                self._busy_timer.start()
        else:
            self._busy_timer.stop()
            self.busy_bar.hide()

    def _show_busy(self) -> None:
        if sum(self._busy.values()) or self.seeding:
            self.busy_bar.show()

    @property
    def busy(self) -> bool:
        return self.busy_bar.isVisible()

    def show_status(self, text: str) -> None:
        """Say ``text`` in the status bar: what an action did for ``STATUS_OUTCOME_MS``, work under way
        ("…") and a warning ("⚠") until the next message."""
        self._say(text)
        if status_lasts(text):
            self.status_expiry.stop()
        else:
            self.status_expiry.start()

    def _say(self, text: str) -> None:
        self.status_text.setText(text)
        self.status_room.fit()

    def _register_commands(self) -> None:
        from studio.memory_edits import MemoryEditActions
        from studio.transfer import TransferActions

        c = self.commands
        has_db = self._has_db
        c.add("file.open", "Open Database…", self.choose_database, shortcut="Ctrl+O", menu="File", group="open",
              keywords="file libsql mastra")
        c.add("file.connect_postgres", "Connect to Postgres…", self.connect_postgres, menu="File", group="open",
              keywords="postgresql server database url")
        c.add("file.reload", "Reload", self.reload, shortcut="Ctrl+R", menu="File", group="open",
              enabled=has_db)
        c.add("file.allow_writes", "Allow Writes…", self.request_allow_writes, menu="File", group="access",
              enabled=lambda: self.session is not None and self.session.read_only, keywords="read-only edit")
        c.add("file.migrate", "Migrate Database…", self.request_migrate, menu="File", group="access",
              enabled=lambda: self.session is not None and not self.session.owned and not self.newer_migrations,
              keywords="mastra tables recall history upgrade")
        c.add("file.copy_path", "Copy Database Path", self.copy_path, menu="File", group="access", enabled=has_db)
        self.transfer = TransferActions(self)
        self.transfer.register(c)
        self.edits = MemoryEditActions(self)  # Edit menu: message edits, undo, Forget Resource…
        self.edits.register(c)
        self.edits.indexed.connect(self._after_indexing)
        c.add("app.preferences", "Preferences…", self.show_preferences, shortcut="Ctrl+,", menu="File",
              group="preferences", keywords="settings models endpoint api key openai ollama")
        c.add("app.quit", "Quit", self.request_close, shortcut="Ctrl+Q", menu="File", group="quit")
        c.add("view.palette", "Command Palette…", self.show_palette, shortcut="Ctrl+K", menu="View", group="palette")
        c.add("view.filter", "Filter Threads", self.focus_filter, shortcut="Ctrl+F", menu="View", group="find",
              enabled=has_db)
        c.add("view.search", "Search All Messages…", self.focus_search, shortcut="Ctrl+Shift+F", menu="View",
              group="find", enabled=has_db, keywords="full text find")
        for spec in PANES:
            c.add(f"view.tab.{spec.name}", f"Show {spec.title}", partial(self.show_tab, spec), shortcut=spec.shortcut,
                  menu="View", group="tabs", enabled=has_db)
        c.add("view.back", "Go Back", self.go_back, shortcut="Alt+Backspace", menu="View", group="back",
              enabled=self._has_history, keywords="return previous replay trace")
        c.add("replay.from_here", "Replay From Here", self.replay_from_here, menu="View", group="back",
              enabled=self._has_message, keywords="step through turns from this message")
        c.add("view.sql_log", "SQL Log", self.toggle_sql_log, shortcut="Ctrl+Shift+Q", menu="View", group="theme",
              keywords="statements queries database audit writes reads what ran")
        c.add("view.theme", "Toggle Dark Mode", self.toggle_theme, shortcut="Ctrl+Shift+L", menu="View",
              group="theme", keywords="light dark colours")
        c.add("help.about", "About Memory Studio", self.show_about, menu="Help")

    def _has_db(self) -> bool:
        return self.session is not None

    def _has_history(self) -> bool:
        return bool(self.history)

    def _has_message(self) -> bool:
        return self.session is not None and self.selection.message_id is not None

    def _build_recent_menu(self) -> None:
        file_menu = self.menus["File"]
        self.recent_menu = QMenu("Open Recent", self)
        self.recent_menu.setObjectName("recentMenu")
        file_menu.insertMenu(self.commands.action("file.reload"), self.recent_menu)
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)
        self._fill_recent_menu()

    def _fill_recent_menu(self) -> None:
        self.recent_menu.clear()
        for path in self.recent.paths:
            self.recent_menu.addAction(path, partial(self.open_recent, path))
        if not self.recent.paths:
            self.recent_menu.addAction("(none yet)").setEnabled(False)

    def _recent_commands(self) -> list[Command]:
        from studio.commands import Command

        return [Command(f"file.recent:{p}", f"Open Recent: {p}", partial(self.open_recent, p), menu="File")
                for p in self.recent.paths]

    def _pane_commands(self) -> list[Command]:
        """Every pane's own commands show in the palette too: listing them builds the panes not built yet."""
        if self.session is None:
            return []
        return [command for spec in PANES for command in self.pane(spec).palette_commands()]

    # -- opening ---------------------------------------------------------------------------------
    def open_database(self, path: str | None, *, allow_writes: bool | None = None, create_missing: bool = False,
                      seed_if_empty: bool = False, keep: Selection | None = None, init_empty: bool = False,
                      discard_unsaved: bool = False, outcome: str | None = None) -> None:
        """Open ``path`` (None: the project's anchored database) in a worker; errors become dialogs.
        Edits not saved in the panes of the open database are discarded only when the user says so. ``outcome``:
        what the status bar says once it is open, instead of "Opened <file>" (what led to the open)."""
        from studio.session import open_studio_database

        self.finish_building()  # what the open and its outcome use (dialogs, recent files, commands)
        if self.seeding:  # the seeder is writing through the current store; let it finish
            self.show_status("Creating demo data — open another database when it is done")
            return
        unsaved = self.unsaved_edits() if self.session is not None and not discard_unsaved else 0
        if unsaved:
            self.presenter.confirm(
                self, "Discard unsaved edits?",
                f"{unsaved} working-memory edit(s) typed in the Working Memory pane are not saved.",
                "Opening a database discards them. Choose Cancel, then Save them in the Working Memory pane, "
                "to keep them.", "Discard and Open",
                lambda: self.open_database(path, allow_writes=allow_writes, create_missing=create_missing,
                                           seed_if_empty=seed_if_empty, keep=keep, init_empty=init_empty,
                                           discard_unsaved=True, outcome=outcome))
            return
        self._open_token += 1
        token = self._open_token
        if isinstance(path, str) and path.strip().lower().startswith(("postgresql://", "postgres://",
                                                                       "postgresql+psycopg://")):
            self.last_postgres_url = path  # what File > Connect to Postgres… shows next (its password never)
        try:
            from core.storage.paths import resolve_db_path  # after the first paint (studio.app.launch)

            display = resolve_db_path(path).display
        except Exception as exc:  # noqa: BLE001 - a bad URL is a user error, shown as a dialog
            self._open_failed(token, exc, str(path))
            return
        self.show_status(f"Opening {display}…")
        self.open_wait.begin(token, display, self.session.display_path if self.session is not None else None)
        open_wait = self.open_wait

        def job() -> OpenedDatabase:
            with open_wait.watching(token):  # (says when the open waits for another program's lock)
                return open_studio_database(path, allow_writes=allow_writes, create_missing=create_missing,
                                            init_empty=init_empty)

        self.pool.submit(job, on_result=lambda r: self._opened(token, r, seed_if_empty, keep, outcome),
                         on_error=lambda e: self._open_failed(token, e, display, seed_if_empty))

    def stop_waiting_to_open(self) -> None:
        """The user stops waiting for an open held up by another program's lock: its worker gives the wait
        up (a statement under way ends first) and its outcome is dropped (a store it opened is closed)."""
        if self.open_wait.token is None:
            return
        display = self.open_wait.display
        self._open_token += 1
        self.open_wait.end()
        still = f"; {self.session.display_path} stays open" if self.session is not None else ""
        self.show_status(f"Stopped waiting to open {display}{still}")

    def _opened(self, token: int, opened: OpenedDatabase, seed_if_empty: bool, keep: Selection | None,
                outcome: str | None = None) -> None:
        from studio.dialogs import newer_schema_notice
        from studio.session import StudioSession

        if token != self._open_token:
            from studio.logic.sql_log import close_watched

            # A newer open superseded this one, or the user stopped waiting for it: closed off the UI thread.
            self.pool.submit(lambda: close_watched(opened.store))
            return
        self.open_wait.end()
        self._install(StudioSession(opened.store, baseline=opened.baseline), keep)
        self.newer_migrations = opened.newer_migrations
        display = opened.store.location.display
        if opened.store.location.path is not None or opened.store.capabilities.server:
            self.recent.push(display)  # a Postgres URL is kept without its password
            self.settings.setValue("recentFiles", self.recent.paths)
        # (the file's name: its path is beside it, whole where it fits; said twice, both were cut at 1,100 px)
        self.show_status(outcome or f"Opened {title_name(display)}")
        if opened.newer_migrations:
            self.presenter.error(self, newer_schema_notice(display, opened.newer_migrations))
        if seed_if_empty and not opened.has_data and not opened.store.read_only:
            self.seed_demo()
        self.session_opened.emit(self.session)

    def _open_failed(self, token: int, exc: BaseException, display: str, seed_if_empty: bool = False) -> None:
        from studio.dialogs import explain
        from studio.session import EmptyFileError

        if token != self._open_token:
            return
        self.open_wait.end()
        if isinstance(exc, EmptyFileError):
            self._ask_to_init(exc, display, seed_if_empty)
            return
        problem = explain(exc, display)
        self.show_status(f"Could not open {display}")
        self.presenter.error(self, problem)
        self.open_failed.emit(problem)

    def _ask_to_init(self, exc: EmptyFileError, display: str, seed_if_empty: bool) -> None:
        """An empty file becomes a database only when the user says so; until then it stays 0 bytes."""
        from studio.dialogs import explain

        self.show_status(f"Not opened: {display} is an empty file")
        self.open_failed.emit(explain(exc, display))
        self.presenter.confirm(
            self, "Make this empty file a database?", str(exc),
            "Memory Studio can create its tables in it, making it a new, empty memory database. "
            "Nothing is written unless you choose Create Database.",
            "Create Database",
            lambda: self.open_database(display, create_missing=True, init_empty=True, seed_if_empty=seed_if_empty),
        )

    def _install(self, session: StudioSession, keep: Selection | None) -> None:
        from studio.panes.resources import ResourcesPane

        # The same database again (Reload, Allow Writes…, after a migration): the user stays on the tab they were
        # on, as on the thread (Allow Writes, asked for by the Working Memory pane's banner, went back to Messages).
        shown = self.tabs.currentIndex() if keep is not None else -1
        self._close_session()
        self.session = session
        session.pool.busy_changed.connect(lambda n: self._set_busy("session", n))
        session.error.connect(lambda text: self.show_status(f"⚠ {text}"))
        self.resources = ResourcesPane(session, self)
        self.left.addWidget(self.resources)
        self.resources.selection_changed.connect(self.set_selection)
        self.resources.hit_activated.connect(self.set_selection)
        self.resources.selection_lost.connect(self.edits.selection_gone)
        self.resources.texts_shown.connect(self._check_fonts)
        self.selection = Selection()
        for spec in PANES:
            page = PanePage(spec, self)
            self.pages.append(page)
            self.tabs.addTab(page, spec.title)
        if 0 < shown < self.tabs.count():
            self.tabs.setCurrentIndex(shown)  # (built here: ``_tab_shown``)
        self.tab_fit.fit()
        self._tab_shown(self.tabs.currentIndex())  # the first tab is shown at once: built now
        messages = self.messages_pane
        messages.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        messages.view.customContextMenuRequested.connect(self._message_menu)
        messages.model.loaded.connect(lambda total: self._check_message_fonts(0, total - 1))
        messages.model.rows_arrived.connect(self._check_message_fonts)
        self.history.clear()
        self._update_back()
        session.changed.connect(self._on_changed)
        session.read_only_changed.connect(lambda _ro: self._update_title())
        session.file_lost.connect(self._on_file_lost)
        session.server_lost.connect(self._on_server_lost)
        session.server_back.connect(self._on_server_back)
        self.file_banner.hide()
        self.center.setCurrentIndex(1)
        if keep is not None and not keep.empty:
            self.resources.set_selection(keep)
        self._update_title()
        session.start()
        self.resources.refresh()

    def _close_session(self) -> None:
        old, self.session = self.session, None
        if self.resources is not None:
            self.left.removeWidget(self.resources)
            self.resources.deleteLater()
            self.resources = None
        while self.is_ready and self.tabs.count():
            self.tabs.removeTab(0)
        for page in self.pages:
            page.deleteLater()  # with its pane, if it was built
        self.pages.clear()
        self._busy["session"] = 0
        if old is not None:
            # Closing waits for the old session's jobs and writes its queued traces: on the window's
            # pool, so opening another database never freezes the window meanwhile.
            old.begin_close()

            def closed(_result: object = None, session: StudioSession = old) -> None:
                session.deleteLater()

            def failed(exc: BaseException, session: StudioSession = old) -> None:
                self.show_status(f"⚠ Closing {session.display_path} failed: {exc}")
                session.deleteLater()

            if self.pool.closed:
                # The window is closing (``closeEvent`` shut its pool, which runs nothing more): the session
                # closes on a thread of its own, waited for as the pool's jobs were, so its store does close
                # (its queued traces written, View > SQL Log's listener taken off) before the app exits.
                self._finish_close_now(old)
                old.deleteLater()
                return
            self.pool.submit(old.finish_close, on_result=closed, on_error=failed)

    @staticmethod
    def _finish_close_now(session: StudioSession) -> None:
        import logging
        import threading

        def close() -> None:
            try:
                session.finish_close()
            except Exception:  # noqa: BLE001 - the window is going: said in the log, nothing to show it in
                logging.getLogger(__name__).warning("closing %s failed", session.display_path, exc_info=True)

        closer = threading.Thread(target=close, name="close-session", daemon=True)
        closer.start()
        closer.join(40)  # (finish_close waits up to 10 s for the session's jobs, then closes the store)

    # -- panes: built when first shown ---------------------------------------------------------------
    def pane(self, spec: PaneSpec[T]) -> T:
        """The pane of ``spec``, built now if it was not yet (a command or a link that needs it)."""
        page = self._page(spec)
        if page.pane is None:
            self._build(page)
        return cast(T, page.pane)  # the pane of spec's page is what spec.build returned: a T

    def _page(self, spec: PaneSpec[Pane]) -> PanePage:
        if self.session is None:
            raise KeyError(f"no database is open, so there is no {spec.title} pane")
        return self.pages[PANES.index(spec)]

    def _build(self, page: PanePage) -> None:
        session = self.session
        assert session is not None  # pages exist only while a database is open
        pane = page.spec.build(session, self, self)
        assert isinstance(pane, QWidget)  # every pane is a widget
        pane.setObjectName(pane.objectName() or f"{page.spec.name}Pane")
        page.hold(pane, pane)  # shown (so polished) now; laid out on the next turn of the event loop
        # Its width follows the window: the page asks the pane's own least width, whatever the window's width
        # when it was built (a least width fixed here at build time kept a pane built wide wider than a window
        # narrowed later, and squeezed a pane built narrow below its parts' least: combos and spin boxes cut).
        # A pane never widens the tab area (the page's scroll area asks no width of its own); each pane fits
        # a 720 px window (tests/studio/test_panes_follow_width.py), and below that its page scrolls sideways.
        if not self.selection.empty:
            pane.set_selection(self.selection)  # chosen before the pane existed

    def _tab_shown(self, index: int) -> None:
        """A tab became the current one: build its pane before the page is painted."""
        page = self.tabs.widget(index)
        if isinstance(page, PanePage) and page.pane is None and self.session is not None:
            self._build(page)

    def current_pane(self) -> Pane | None:
        """The pane of the tab shown (None: no database open)."""
        page = self.tabs.currentWidget()
        return page.pane if isinstance(page, PanePage) else None

    @property
    def messages_pane(self) -> MessagesPane:
        return self.pane(MESSAGES)

    # -- what panes ask of the window (PaneHost) ---------------------------------------------------
    def run_command(self, command_id: str) -> None:
        self.commands.run(command_id)

    def pin_fragment(self, target: PinTarget) -> None:
        self.pane(CHECKS).pin(target)

    def edit_message(self, message_id: str) -> None:
        self.edits.edit_message(message_id)

    def change_observation(self, record_id: str, thread_id: str | None, resource_id: str, old: str,
                           new: str | None) -> None:
        self.edits.change_observation(record_id, thread_id, resource_id, old, new)

    def run_checks_what_if(self, options: Mapping[str, Any]) -> None:
        self.show_tab(CHECKS)
        self.pane(CHECKS).run_what_if(options)

    def replay_turn(self, thread_id: str, message_id: str) -> None:
        self.show_tab(REPLAY)
        self.pane(REPLAY).replay_from(thread_id, message_id)

    # -- selection and live updates --------------------------------------------------------------
    def set_selection(self, selection: Selection) -> None:
        self.selection = selection
        for pane in self.panes.values():
            pane.set_selection(selection)  # panes built later get it when they are built

    def show_message(self, message_id: str) -> None:
        """Open a stored message in the message view, in *its* thread: a recall hit may come from
        another thread, and keeping the old one left the panes asking for a message it does not hold."""
        from studio import reads as queries

        session = self.session
        if session is None:
            return
        store = session.store
        session.run(lambda: queries.message_location(store, message_id), key="show-message",
                    on_result=lambda loc: self._show_located(session, message_id, loc))

    def _show_located(self, session: StudioSession, message_id: str, loc: queries.MessageLocation | None) -> None:
        if session is not self.session:
            return
        if loc is None:
            self.show_status(f"Message {message_id} is not in the database any more.")
            return
        self.show_tab(MESSAGES)
        if self.resources is not None and loc.thread_id != self.selection.thread_id:
            self.resources.set_selection(Selection(loc.resource_id, loc.thread_id))
        self.set_selection(Selection(loc.resource_id, loc.thread_id, message_id))

    def select_thread(self, selection: Selection) -> None:
        if self.resources is not None:
            self.resources.set_selection(selection)  # selected now, or once the tree has it
        self.set_selection(selection)

    def show_prompt(self, selection: Selection) -> None:
        """The prompt inspector on a stored turn (``selection.message_id``: its user message)."""
        self.select_thread(selection)
        self.show_tab(PROMPT)

    def select_message(self, message_id: str | None) -> None:
        sel = self.selection
        if message_id == sel.message_id:
            return
        self.set_selection(Selection(sel.resource_id, sel.thread_id, message_id))

    def _on_changed(self) -> None:
        if self.resources is not None:
            self.resources.refresh()
        if self.pages:
            self.messages_pane.refresh()
        self.edits.check_selection()  # a thread deleted meanwhile is let go of by every pane

    def toggle_sql_log(self) -> None:
        """View > SQL Log: the dock of every statement the Studio ran (built on first use, then shown / hidden)."""
        from studio.logic.sql_log import shared_log
        from studio.widgets.sql_log_dock import SqlLogDock

        if self.sql_log_dock is None:
            self.sql_log_dock = SqlLogDock(shared_log(), self)
            self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.sql_log_dock)
            self.sql_log_dock.show()
            return
        self.sql_log_dock.setVisible(not self.sql_log_dock.isVisible())

    def _after_indexing(self, _report: Any) -> None:
        """Index Recall for Resource… finished: a Recall Playground showing a search runs it again, so its
        lists and banner say what the index holds now (it searches only when asked otherwise)."""
        for pane in self.panes.values():
            again = getattr(pane, "search_again", None)
            if again is not None:
                again()

    def select_in_tree(self, selection: Selection) -> None:
        if self.resources is not None:
            self.resources.set_selection(selection)

    # -- replay, traces and Back -----------------------------------------------------------------
    def _message_menu(self, pos: QPoint) -> None:
        view = self.messages_pane.view
        index = view.indexAt(pos)
        if index.isValid() and index != view.currentIndex():
            view.setCurrentIndex(index)
        menu = QMenu(view)
        menu.addAction(self.commands.action("replay.from_here"))
        self.commands.refresh_enabled()
        menu.popup(view.viewport().mapToGlobal(pos))
        self.message_menu = menu

    def replay_from_here(self) -> None:
        sel = self.selection
        if self.session is None or sel.thread_id is None or sel.message_id is None:
            return
        self.replay_turn(sel.thread_id, sel.message_id)

    def show_trace(self, trace_id: str) -> None:
        """Show a trace in the Traces tab; Back returns to where the user was."""
        if self.session is None:
            return
        traces = self.pane(TRACES)
        self.history.append((self._current_spec(), self.selection))
        self._update_back()
        self.show_tab(TRACES)

        def reveal() -> None:
            rows = [t.trace_id for t in traces.traces]
            if trace_id in rows:
                traces.select_trace(rows.index(trace_id))
            else:
                traces.open_trace(trace_id)

        if traces.source is not None and not traces.loading:
            reveal()
            return

        def once() -> None:
            traces.traces_loaded.disconnect(once)
            reveal()

        traces.traces_loaded.connect(once)

    def _current_spec(self) -> PaneSpec[Pane]:
        page = self.tabs.currentWidget()
        return page.spec if isinstance(page, PanePage) else MESSAGES

    def go_back(self) -> None:
        if not self.history:
            return
        spec, selection = self.history.pop()
        self._update_back()
        if selection != self.selection and self.resources is not None:
            self.resources.set_selection(selection)
        self.show_tab(spec)

    def _update_back(self) -> None:
        target = self.history[-1][0].title if self.history else None
        action = self.commands.action("view.back")
        action.setIconText(f"◀ Back to {target}" if target else "Back")
        action.setEnabled(bool(self.history))
        self.back_btn.setVisible(bool(self.history))

    # -- demo data -------------------------------------------------------------------------------
    def seed_demo(self) -> None:
        session = self.session
        if session is None or self.seeding:
            return
        self.seeding = True
        store = session.store
        self.show_status("Creating demo data by running the engine (scripted models)…")
        self.busy_bar.setRange(0, 0)
        self._set_busy("pool", self.pool.running)

        def progress(done: int, total: int) -> None:
            self.busy_bar.setRange(0, max(total, 1))
            self.busy_bar.setValue(done)
            self.busy_bar.show()
            self.show_status(f"Creating demo data: turn {done} of {total}…")

        def finished(report: Any) -> None:
            self.seeding = False
            self.busy_bar.setRange(0, 0)
            summary = report.summary() if isinstance(report, SeedReport) else "demo data created"
            self.show_status(f"Created {summary}")
            if self.session is session:
                session.notify_local_write()
            self._set_busy("pool", self.pool.running)
            self.seeding_finished.emit(report)

        def failed(exc: BaseException) -> None:
            from studio.dialogs import Problem

            self.seeding = False
            self.busy_bar.setRange(0, 0)
            self._set_busy("pool", self.pool.running)
            self.presenter.error(self, Problem("Demo data could not be created", f"{type(exc).__name__}: {exc}",
                                               "The database stays usable; you can add data with your own agent.",
                                               traceback_text(exc)))
            self.seeding_finished.emit(exc)

        self.pool.submit(lambda report: self.seeder(store, report), on_result=finished, on_error=failed,
                         on_progress=progress)

    # -- commands --------------------------------------------------------------------------------
    def choose_database(self) -> None:
        start = str(Path(self.recent.paths[0]).parent) if self.recent.paths else ""
        self.presenter.choose_database(self, start, lambda path: self.open_database(path))

    def connect_postgres(self) -> None:
        from studio.pg_connect import ConnectPostgresDialog

        dialog = ConnectPostgresDialog(self, lambda url: self.open_database(url), self.last_postgres_url)
        self.presenter.show(dialog)

    def open_recent(self, path: str) -> None:
        self.open_database(path)

    def reload(self) -> None:
        if self.session is not None:
            self.open_database(self.session.target, allow_writes=not self.session.read_only or None,
                               keep=self.selection)

    def request_allow_writes(self) -> None:
        from studio.dialogs import Problem, newer_schema_notice

        session = self.session
        if session is None or not session.read_only:
            return
        if self.newer_migrations:
            self.presenter.error(self, newer_schema_notice(session.display_path, self.newer_migrations))
            return
        if session.write_refusal is not None:  # its folder cannot be written: allowing would not help
            self.presenter.error(self, Problem("Cannot write this file", session.write_refusal,
                                               "Copy the file to a writable folder and open the copy."))
            return
        if session.store.capabilities.server:  # (a server is opened read-only whoever made it: no file, no owner)
            text = (f"{session.display_path} is a database server other programs share, so the Studio opens it "
                    "read-only.")
            info = ("Allowing writes lets editors (working memory, templates, messages) save into this database. "
                    "Browsing never writes. Your agents may be writing to it at the same time: a working-memory "
                    "save that meets their change shows both versions before anything is overwritten.")
        else:
            text = f"{session.display_path} was not created by Memory Studio, so it is open read-only."
            info = ("Allowing writes lets editors (working memory, templates) save into this file. Browsing never "
                    "writes. Memory Studio will not migrate the file; another program (your Mastra app) may still "
                    "be using it.")
        self.presenter.confirm(
            self, "Allow writes?", text, info,
            "Allow Writes",
            lambda: self.open_database(session.target, allow_writes=True, keep=self.selection),
        )

    def request_migrate(self) -> None:
        """Add Memory Studio's tables to a database it did not create: the one explicit way (confirmed)."""
        from studio.dialogs import newer_schema_notice

        session = self.session
        if session is None or session.owned:
            return
        if self.newer_migrations:
            self.presenter.error(self, newer_schema_notice(session.display_path, self.newer_migrations))
            return
        path = session.display_path
        self.presenter.confirm(
            self, "Migrate this database?",
            f"{path} was not created by Memory Studio: it has no recall tables and keeps no working-memory "
            "history.",
            "Migrating adds Memory Studio's tables (recall index, working-memory versions, agent configurations) "
            "in one transaction. Mastra's tables and data stay as they are, and Mastra keeps working with the "
            "file. Afterwards the file opens with writes allowed. (The same as `memory-studio migrate`.)",
            "Migrate", lambda: self._migrate(path))

    def _migrate(self, path: str) -> None:
        keep = self.selection
        name = title_name(path)  # (its path is beside the message, as for "Opened <file>")
        self.show_status(f"Migrating {name}…")

        def job() -> list[str]:
            from core import open_store
            from studio.logic.sql_log import close_watched, shared_log, watch

            with shared_log().opening():  # (View > SQL Log lists the open's statements and the migration's writes)
                store = open_store(path, create=False)
                watch(store)
            try:
                return store.db.migrate()
            finally:
                close_watched(store)

        def done(applied: list[str]) -> None:
            # (said once the file is open again, with writes: the reopen's own messages came after it and hid it)
            count = f"{len(applied):,} migration{'' if len(applied) == 1 else 's'}"
            self.open_database(path, keep=keep, outcome=f"Migrated {name}: {count}")

        def failed(exc: BaseException) -> None:
            from studio.dialogs import explain

            self.presenter.error(self, explain(exc, path))

        self.pool.submit(job, on_result=done, on_error=failed)

    def copy_path(self) -> None:
        if self.session is not None:
            QGuiApplication.clipboard().setText(self.session.display_path)
            self.show_status("Copied the database path")

    def show_palette(self) -> None:
        from studio.commands import CommandPalette

        palette = CommandPalette(self.commands, self)
        palette.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        palette.show()
        palette.input.setFocus()
        self.command_palette = palette

    def show_preferences(self) -> None:
        from studio.widgets.preferences_dialog import PreferencesDialog

        if self.preferences_dialog is not None:
            self.preferences_dialog.raise_()
            return
        dialog = PreferencesDialog(self.preferences, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.finished.connect(self._preferences_closed)
        self.preferences_dialog = dialog
        dialog.open()

    def _preferences_closed(self, _result: int) -> None:
        self.preferences_dialog = None

    def focus_filter(self) -> None:
        """The filter of the pane the focus is in when it has one (``FilteringPane``), else the threads'."""
        pane = self.current_pane()
        focus = QApplication.focusWidget()
        if isinstance(pane, FilteringPane) and isinstance(pane, QWidget) and focus is not None \
                and (focus is pane or pane.isAncestorOf(focus)):
            pane.focus_own_filter()
            return
        if self.resources is not None:
            self.resources.focus_filter()

    def focus_search(self) -> None:
        if self.resources is not None:
            self.resources.focus_filter()
            self.show_status("Type words and press Enter to search every message")

    def show_tab(self, spec: PaneSpec[Pane] | str) -> None:
        """Show a pane's tab (a spec, or its key): the pane is built first if it was not yet."""
        if self.session is None:
            return
        self.tabs.setCurrentWidget(self._page(spec_named(spec) if isinstance(spec, str) else spec))

    def toggle_theme(self) -> None:
        app = QApplication.instance()
        assert isinstance(app, QApplication)
        name = apply_theme(app, "light" if current_theme(app) == "dark" else "dark")
        self.settings.setValue("theme", name)

    def show_about(self) -> None:
        from studio.dialogs import Problem

        self.presenter.error(self, Problem(
            "About Memory Studio",
            f"Memory Studio {__version__}: an inspector for agent memory stored in Mastra's libSQL layout.",
            "Ctrl+K opens the command palette.", warning_only=True))

    # -- identity --------------------------------------------------------------------------------
    def _update_title(self) -> None:
        if self.session is None:
            self.setWindowTitle(APP_NAME)
            self.badge.hide()
            self.path_label.set_path("")
            return
        path = self.session.display_path
        name = title_name(path)
        ro = self.session.read_only
        self.setWindowTitle(f"{name} — {path}{' [read-only]' if ro else ''} — {APP_NAME}")
        location = self.session.store.location
        source = SOURCE_LABELS.get(location.how, location.how)
        if location.how == "explicit" and self.session.store.capabilities.server:
            source = "opened by URL"  # a server database is given by its URL, not a path
        self.path_label.set_path(path, source, location.reason or "")  # which rule chose the file (issue 9, item 22)
        self.badge.setObjectName("readOnlyBadge" if ro else "writableBadge")
        lost = self.session.lost
        gone = "FILE CHANGED · READ-ONLY" if self.session.frozen else "FILE GONE · READ-ONLY"
        self.badge.setText(gone if lost else "READ-ONLY" if ro else "WRITABLE")
        self.badge.setToolTip(plain_tip(lost or self.session.write_refusal or (
            "File > Allow Writes… to edit this database" if ro else "Editors can save to this file")))
        self.badge.style().unpolish(self.badge)
        self.badge.style().polish(self.badge)
        self.badge.show()

    def _on_file_lost(self, message: str) -> None:
        """The open file was deleted or replaced: say so above everything; the session is read-only now,
        and an editor with an unsaved edit offers to save it elsewhere."""
        self._update_title()
        session = self.session
        actions: list[tuple[str, Callable[[], None]]] = []
        if session is not None and session.store.location.path is not None:
            path = str(session.store.location.path)
            actions.append(("Reopen", lambda: self.open_database(path, create_missing=False, keep=self.selection)))
        self.file_banner.show_message(message, "error", actions)
        self.show_status(f"⚠ {message}")

    def _check_message_fonts(self, first: int, last: int) -> None:
        if not self._font_noted and self.session is not None:
            self._check_fonts(self.messages_pane.model.previews(first, last))

    def _check_fonts(self, texts: list[str]) -> None:
        """Say once, above the panes, when the Studio shows text of a script no installed font can draw."""
        if self._font_noted:
            return
        from studio import fonts

        scripts = fonts.undrawable(texts)
        if not scripts:
            return
        self._font_noted = True
        self.font_banner.show_message(fonts.notice(scripts), "warning", [("Dismiss", self.font_banner.hide)])

    def _close_discarding(self) -> None:
        self._discard_confirmed = True
        self.close()

    def _on_server_lost(self, message: str) -> None:
        """The database server stopped answering: the panes keep what they last read, so say so."""
        self.file_banner.show_message(
            f"{message} What the Studio shows may be out of date; it keeps asking, and reads again when the "
            "server answers.", "warning")
        self.show_status("⚠ The database server does not answer")

    def _on_server_back(self) -> None:
        self.file_banner.hide()
        self.show_status("The database server answers again")

    def unsaved_edits(self) -> int:
        """Edits typed in the panes and not saved (closing the window or the database discards them)."""
        return sum(pane.unsaved_edits() for pane in self.panes.values() if isinstance(pane, EditingPane))

    def request_close(self) -> None:
        """Quit, as the user asks it (File > Quit): first ask about edits not saved."""
        if self._ask_before_closing():
            return
        self._discard_confirmed = True
        self.close()

    def _ask_before_closing(self) -> bool:
        """Ask before closing discards unsaved edits; True: asked (the close waits for the answer)."""
        unsaved = self.unsaved_edits() if self.session is not None and not self._discard_confirmed else 0
        if not unsaved:
            return False
        self.presenter.confirm(
            self, "Close with unsaved edits?",
            f"{unsaved} working-memory edit(s) typed in the Working Memory pane are not saved.",
            "Closing discards them. Choose Cancel, then Save them in the Working Memory pane, to keep them.",
            "Discard and Close", self._close_discarding)
        return True

    def closeEvent(self, event: QCloseEvent) -> None:
        # The window system's close (the title bar's button) asks like File > Quit; a close from code
        # (a script, a test harness) closes as it is told.
        if event.spontaneous() and self._ask_before_closing():
            event.ignore()
            return
        self.settings.setValue("geometry", self.saveGeometry())
        if self.is_ready:
            self.presenter.close_all()
        self._open_token += 1
        self.open_wait.end()  # (an open waiting for a lock gives up: the pool's wait below would wait for it)
        self.pool.shutdown()
        self.pool.wait(30_000)  # an open or the demo seeder may still be using the store
        self._close_session()
        self.pool.wait(30_000)  # the session's close, on the pool: its traces are written before the app exits
        super().closeEvent(event)
