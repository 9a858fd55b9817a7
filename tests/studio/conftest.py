"""Studio test ring: Qt adapters and windows (pytest-qt, offscreen).

``no_leaked_widgets`` fails a test that leaves a top-level widget alive after pytest-qt closed the
widgets it was given (napari's ``make_napari_viewer`` check). Window and pane fixtures use it; QSettings
always point into the test's temp folder, never at the user's real settings.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
import threading
from datetime import datetime, timedelta, timezone
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent, QSettings
from PySide6.QtWidgets import QApplication, QWidget

from core import Memory, Message, open_store
from core.messages import data_part, file_part, reasoning_part, text_part, tool_invocation_part
from core.storage import schema
from studio.app import warm_up

# The app warms the engine's modules on a worker after its first paint (studio/app.py); the suite does
# it once here, so a test's first window waits for its database, not for imports, inside its limits.
warm_up()

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
IGNORED_TOP_LEVELS = {"QTipLabel"}  # Qt's shared tooltip window lives for the whole process


def _flush_deletes() -> None:
    for _ in range(3):
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        QApplication.processEvents()


def _key(widget: QWidget) -> int:
    return int(shiboken6.getCppPointer(widget)[0])


def leaked_top_levels(before: set[int]) -> list[QWidget]:
    _flush_deletes()
    return [
        w for w in QApplication.topLevelWidgets()
        if _key(w) not in before and shiboken6.isValid(w) and type(w).__name__ not in IGNORED_TOP_LEVELS
        and w.metaObject().className() not in IGNORED_TOP_LEVELS
    ]


@pytest.fixture
def no_leaked_widgets(qapp: QApplication) -> Iterator[None]:
    _flush_deletes()
    before = {_key(w) for w in QApplication.topLevelWidgets()}
    yield
    leaked = leaked_top_levels(before)
    if leaked:
        names = ", ".join(f"{w.metaObject().className()}({w.objectName() or w.windowTitle()!r})" for w in leaked)
        for w in leaked:
            w.close()
            w.deleteLater()
        _flush_deletes()
        pytest.fail(f"Top-level widgets leaked by this test: {names}")


@pytest.fixture(scope="session", autouse=True)
def _cycles_collected_on_the_ui_thread(qapp: QApplication) -> Iterator[Any]:
    """As in the app (``studio.app.main``): Python's cycle collector runs on the UI thread only, so a
    worker never frees a Qt object (the hang ``studio/ui_gc.py`` describes)."""
    from studio.ui_gc import UiThreadCollector

    collector = UiThreadCollector(qapp)
    yield collector
    collector.stop()


@pytest.fixture(autouse=True)
def _cycles_of_each_test_collected_here(_cycles_collected_on_the_ui_thread: Any) -> Iterator[None]:
    yield
    _cycles_collected_on_the_ui_thread.collect_due()  # (what the test left, on this thread)


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp("qsettings")
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(folder))


@pytest.fixture
def settings(tmp_path: Path) -> QSettings:
    return QSettings(str(tmp_path / "studio.ini"), QSettings.Format.IniFormat)


# -- the UI thread never waits on a database ---------------------------------------------------------
# Every Studio test runs with a watch on the Qt main thread: a statement, a new connection (libSQL, Postgres)
# or a trace file opened there by the app's own code fails the test. The app's reads and writes run on its
# worker pool (``studio.workers``); tests may still call those worker-side functions directly (they run on
# the main thread then), so a call counts as the app's when the outermost Studio frame above it is not one
# of them: a slot, a pane method, a model's data().

STUDIO_DIR = Path(__file__).resolve().parents[2] / "studio"
# (file under studio/, function or None for every function of the file): what the app runs on workers.
WORKER_SIDE: set[tuple[str, str | None]] = {
    ("reads.py", None), ("replay_jobs.py", None), ("chat_runner.py", None), ("checks_jobs.py", None),
    ("edit_jobs.py", None), ("session.py", "open_for_studio"), ("session.py", "open_studio_database"),
    ("session.py", "read_baseline"),
    ("logic/wm_editing.py", "save_wm"),
    ("models/messages_model.py", "<lambda>"),
    # A test closing its own session (the window closes its sessions on its pool: ``finish_close``).
    ("session.py", "close"), ("session.py", "finish_close"),
}
_ui_io: list[str] = []


@lru_cache(maxsize=None)
def _studio_file(filename: str) -> str | None:
    try:
        return Path(filename).resolve().relative_to(STUDIO_DIR).as_posix()
    except ValueError:
        return None


def _studio_frames() -> list[tuple[str, Any, int]]:
    """The app's own frames on the calling stack, innermost first: (file under studio/, code, line)."""
    frames: list[tuple[str, Any, int]] = []
    frame = sys._getframe(2)
    while frame is not None:
        rel = _studio_file(frame.f_code.co_filename)
        if rel is not None:
            frames.append((rel, frame.f_code, frame.f_lineno))
        frame = frame.f_back
    return frames


def _note_ui_io(what: str) -> None:
    """Record ``what`` when the app's own code does it on the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    frames = _studio_frames()
    if not frames:
        return  # the test's own set-up (seeding through the engine), not the app
    rel, code, line = frames[-1]  # the outermost: what the event loop or the test called
    if (rel, None) in WORKER_SIDE or (rel, code.co_name) in WORKER_SIDE:
        return
    _ui_io.append(f"{what} from studio/{rel}:{line} ({code.co_name})")


# -- looking never writes -----------------------------------------------------------------------------
# A statement that changes the database fails the test unless a Studio function that writes on the user's
# word is on the stack: a chat turn, an edit or forget, a working-memory save, opening or migrating a file
# (the user's choice in a dialog), demo data on first launch. Browsing, previews, searches, replays and
# checks never write (a preview that made the vector table was such a bug).
# (file under studio/, qualified name of a function, with what it defines inside; None: the whole file)
WRITERS: set[tuple[str, str | None]] = {
    ("chat_runner.py", None), ("edit_jobs.py", None), ("transfer.py", None),  # a turn; edits, forget; import
    ("logic/wm_editing.py", "save_wm"), ("panes/working_memory.py", "WorkingMemoryPane._save_config"),  # Save
    ("session.py", "open_for_studio"), ("session.py", "open_studio_database"),  # opening, creating a file
    ("main_window.py", "MainWindow._migrate"),  # the Migrate dialog
    ("main_window.py", "default_seeder"), ("main_window.py", "MainWindow.seed_demo"),  # first-launch demo data
    ("replay_jobs.py", "ReplayThread.fork"),  # Replay's Fork
}
_WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER|VACUUM|REINDEX|ANALYZE)\b"
                    r"|^\s*WITH\b.*\b(INSERT|UPDATE|DELETE)\b"
                    r"|^\s*PRAGMA\s+(\w+\.)?((journal_mode|user_version)\s*=|wal_checkpoint\b|optimize\b|incremental_vacuum\b)",
                    re.IGNORECASE | re.DOTALL)
_writes: list[str] = []


def _is_writer(rel: str, qualname: str) -> bool:
    return (rel, None) in WRITERS or any(
        (rel, qualname[:end]) in WRITERS for end in [len(qualname)] + [i for i, c in enumerate(qualname) if c == "."])


def _note_write(statement: str) -> None:
    if not _WRITE.match(statement):
        return
    frames = _studio_frames()
    if not frames or any(_is_writer(rel, code.co_qualname) for rel, code, _ in frames):
        return  # the test's own set-up, or a write the user asked for
    rel, code, line = next((f for f in frames if f[0] != "workers.py"), frames[0])
    _writes.append(f"{' '.join(statement.split())[:60]} from studio/{rel}:{line} ({code.co_qualname})")


def _watch_ui_io() -> None:
    import duckdb
    import sqlalchemy as sa

    def before_execute(conn: Any, cursor: Any, statement: Any, *rest: Any) -> None:
        _note_ui_io("SQL " + " ".join(str(statement).split())[:60])
        _note_write(str(statement))

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", before_execute)
    sa.event.listen(sa.pool.Pool, "connect", lambda *args: _note_ui_io("a new database connection"))
    plain_connect = duckdb.connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        _note_ui_io("a trace file opened")
        return plain_connect(*args, **kwargs)

    duckdb.connect = connect


_watch_ui_io()


@pytest.fixture(autouse=True)
def _ui_thread_never_waits_on_a_database() -> Iterator[None]:
    _ui_io.clear()
    _writes.clear()
    yield
    problems = []
    if _ui_io:
        problems.append("The UI thread did database I/O (it belongs on the worker pool):\n  "
                        + "\n  ".join(list(dict.fromkeys(_ui_io))[:10]))
    if _writes:
        problems.append("The Studio wrote without being asked (looking must never write):\n  "
                        + "\n  ".join(list(dict.fromkeys(_writes))[:10]))
    _ui_io.clear()
    _writes.clear()
    if problems:
        pytest.fail("\n".join(problems))


# -- data -------------------------------------------------------------------------------------------

def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def seed_small(path: Path) -> dict[str, Any]:
    """Two resources, three threads, every part type; written through the engine."""
    store = open_store(path)
    mem = Memory(store)
    ids: dict[str, Any] = {}
    for tid, rid, title in (("t-groceries", "ada", "Weekly groceries"), ("t-party", "ada", "Birthday party"),
                            ("t-trip", "li", "上海出差")):
        mem.create_thread(thread_id=tid, resource_id=rid, title=title)
    msgs = [
        Message.user("I am allergic to peanuts. Plan dinner.", thread_id="t-groceries", resource_id="ada",
                     created_at=at(0)),
        Message.create("assistant", [
            {"type": "step-start"},
            reasoning_part("She is allergic; avoid satay."),
            tool_invocation_part("call-1", "searchRecipes", {"query": "green curry"}, {"hits": ["Thai green curry"]}),
            text_part("Try a Thai green curry."),
        ], thread_id="t-groceries", resource_id="ada", created_at=at(1)),
        Message.create("assistant", [data_part("shopping-list", {"items": ["tofu", "limes"]}),
                                     file_part("aGVsbG8=", "text/plain", "list.txt")],
                       thread_id="t-groceries", resource_id="ada", created_at=at(2)),
        Message.user("Party for 12 on Saturday", thread_id="t-party", resource_id="ada", created_at=at(3)),
        Message.user("下周去上海出差，帮我订酒店", thread_id="t-trip", resource_id="li", created_at=at(4)),
        Message.assistant("好的，我来查一下浦东的酒店。", thread_id="t-trip", resource_id="li", created_at=at(5)),
    ]
    mem.save_messages(msgs)
    ids["messages"] = [m.id for m in msgs]
    store.close()
    return ids


def seed_many(path: Path, thread_id: str, count: int, resource_id: str = "bulk") -> None:
    store = open_store(path)
    store.memory.create_thread(thread_id=thread_id, resource_id=resource_id, title=f"{count:,} messages")
    batch = []
    for i in range(count):
        role = "user" if i % 2 == 0 else "assistant"
        batch.append(Message.create(role, [text_part(f"message number {i}")], id=f"m{i:07d}", thread_id=thread_id,
                                    resource_id=resource_id, created_at=T0 + timedelta(seconds=i)))
        if len(batch) == 5000:
            store.memory.save_messages(batch)
            batch = []
    if batch:
        store.memory.save_messages(batch)
    store.close()


def make_mastra_db(path: Path) -> None:
    """A database as Mastra's LibSQLStore writes it: its tables, no Memory Studio migrations table,
    rollback journal (not WAL), content as JSON text."""
    con = sqlite3.connect(path)
    for ddl in schema.MASTRA_MEMORY_DDL:
        con.execute(ddl)
    con.execute('INSERT INTO mastra_threads VALUES (?,?,?,?,?,?)',
                ("mastra-thread", "user-42", "From Mastra", "{}", "2026-01-01T10:00:00.000Z",
                 "2026-01-01T10:05:00.000Z"))
    for i, (role, text) in enumerate((("user", "hello from mastra"), ("assistant", "hi, I remember you"))):
        content = json.dumps({"format": 2, "parts": [{"type": "text", "text": text}], "content": text})
        con.execute('INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
                    "VALUES (?,?,?,?,?,?,?)", (f"mm{i}", "mastra-thread", content, role, "v2",
                                               f"2026-01-01T10:0{i}:00.000Z", "user-42"))
    con.commit()
    con.close()


def another_program(path: Path, *statements: str) -> None:
    """Run ``statements`` on the database at ``path`` from another process, as another program would.

    Never from this process with Python's ``sqlite3``: that is a second SQLite library beside libSQL's,
    and POSIX file locks belong to the process, so closing its connection drops the locks libSQL's
    connections hold on the same file. A libSQL connection of the Studio then kept reading an old
    snapshot of the file (a table renamed away and back stayed missing; rows written later were not
    seen) and a new one could even find the file "malformed" (SQLite's "How To Corrupt" page, 2.2.1)."""
    import subprocess

    script = ("import sqlite3, sys\ncon = sqlite3.connect(sys.argv[1])\n"
              "for s in sys.argv[2:]:\n    con.execute(s)\ncon.commit()\ncon.close()\n")
    subprocess.run([sys.executable, "-c", script, str(path), *statements], check=True, timeout=60)


def file_state(path: Path) -> tuple[bytes, int] | None:
    return (path.read_bytes(), path.stat().st_mtime_ns) if path.exists() and path.is_file() else None


@pytest.fixture
def small_db(tmp_path: Path) -> Path:
    path = tmp_path / "small.db"
    seed_small(path)
    return path


@pytest.fixture
def make_session(qapp: QApplication) -> Iterator[Callable[..., Any]]:
    from studio.session import StudioSession, open_for_studio, read_baseline

    sessions: list[Any] = []

    def make(path: Path, **kw: Any) -> Any:
        store = open_for_studio(path, **kw)
        session = StudioSession(store, baseline=read_baseline(store))  # as the window opens one
        sessions.append(session)
        return session

    yield make
    for s in sessions:
        s.close()
        s.deleteLater()


@pytest.fixture
def make_window(no_leaked_widgets: None, qtbot: Any, settings: QSettings) -> Callable[..., Any]:
    from studio.dialogs import DialogPresenter
    from studio.main_window import MainWindow

    def make(**kw: Any) -> MainWindow:
        kw.setdefault("presenter", DialogPresenter())
        window = MainWindow(settings, **kw)
        qtbot.addWidget(window)
        window.show()
        return window

    return make


def seeded_demo_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A new folder holding the demo database (``seed_demo``: the demo's real agent runs) and its traces,
    flushed: what a module's ``demo_dir`` fixture makes once for its tests to copy."""
    from core.demo import seed_demo

    folder = tmp_path_factory.mktemp(name)
    store = open_store(folder / "memory.db")
    seed_demo(store)
    assert store.tracer().flush(10)
    store.close()
    return folder


@contextmanager
def theme_restored(app: QApplication) -> Iterator[None]:
    """The application's palette, style sheet, theme, style and font as they were, after the block (a test
    that applies a theme leaves the next test the application it found)."""
    style, palette, font, sheet, name = (app.style().name(), app.palette(), app.font(), app.styleSheet(),
                                         app.property("studioTheme"))
    try:
        yield
    finally:
        app.setStyle(style)  # (first: a new style brings its own palette, which the saved one then replaces)
        app.setPalette(palette)
        app.setFont(font)
        app.setStyleSheet(sheet)
        app.setProperty("studioTheme", name)


@pytest.fixture(autouse=True)
def _theme_of_each_test_restored(qapp: QApplication) -> Iterator[None]:
    """Every test starts with the app as tests start (unthemed) and leaves it so: a test that toggles the theme, or
    starts the app (which applies the saved one), no longer themes every test after it. (Toggling dark mode twice
    left the whole rest of a full run in the themed app's 10 pt font: layout tests passed alone and failed in the
    full run, found 2026-12-07.)"""
    with theme_restored(qapp):
        yield


@pytest.fixture
def themed(qapp: QApplication, request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The theme of the test's ``theme`` parameter (None: the app left unthemed, as tests start), the
    application's own restored after it."""
    from studio.theme import apply_theme

    theme = request.node.callspec.params["theme"]
    with theme_restored(qapp):
        yield apply_theme(qapp, theme) if theme is not None else None
