"""The main window: opening files (ours, Mastra's), read-only until allowed, recent files, the
command registry and palette, first-launch demo data, and a dialog for every file that cannot be
opened — with the file's bytes and mtime unchanged afterwards."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QMessageBox

import core.storage.reading as reading
from core import Memory, Message
from studio.app import start
from studio.commands import CommandPalette
from studio.dialogs import DialogPresenter
from studio.selection import Selection

from .conftest import at, file_state, make_mastra_db, seed_small
from tests.core.test_storage_busy_reads import HOLD_EXCLUSIVE  # (the other process holding the lock)


WAIT_OPEN = 15_000


def _wait_open(qtbot: Any, window: Any, threads: int = 1) -> None:
    qtbot.waitUntil(lambda: window.session is not None and window.resources is not None
                    and len(window.resources.thread_rows()) >= threads, timeout=15_000)


def _dialog(qtbot: Any, window: Any) -> QMessageBox:
    qtbot.waitUntil(lambda: bool(window.presenter.open), timeout=15_000)
    box = window.presenter.open[-1]
    assert isinstance(box, QMessageBox) and box.isVisible()
    return box


def test_opens_our_database_writable_with_its_path_in_the_title(qtbot: Any, make_window: Any, small_db: Path) -> None:
    window = make_window()
    window.open_database(str(small_db))
    _wait_open(qtbot, window, 3)
    assert str(small_db) in window.windowTitle() and "read-only" not in window.windowTitle()
    assert window.badge.text() == "WRITABLE"
    assert not window.commands.action("file.allow_writes").isEnabled() or not window.commands.command(
        "file.allow_writes").is_enabled


def test_mastra_file_opens_read_only_until_writes_are_allowed(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    path = tmp_path / "mastra.db"
    make_mastra_db(path)
    before = file_state(path)
    window = make_window()
    window.open_database(str(path))
    _wait_open(qtbot, window)
    assert window.session.read_only and "[read-only]" in window.windowTitle()
    assert window.badge.text() == "READ-ONLY" and window.badge.isVisible()
    assert window.resources.thread_rows() == [("user-42", "From Mastra", 2)]
    window.set_selection(Selection("user-42", "mastra-thread"))
    qtbot.waitUntil(lambda: window.messages_pane.model.rowCount() == 2, timeout=10_000)
    assert file_state(path) == before  # looking never writes

    window.commands.run("file.allow_writes")
    box = _dialog(qtbot, window)
    assert "not created by Memory Studio" in box.text()
    box.property("yesButton").click()
    qtbot.waitUntil(lambda: window.session is not None and not window.session.read_only, timeout=15_000)
    assert window.badge.text() == "WRITABLE" and "[read-only]" not in window.windowTitle()
    qtbot.waitUntil(lambda: window.resources.current_selection().thread_id == "mastra-thread", timeout=10_000)


def test_allow_writes_cancelled_keeps_read_only(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    path = tmp_path / "mastra.db"
    make_mastra_db(path)
    window = make_window()
    window.open_database(str(path))
    _wait_open(qtbot, window)
    window.commands.run("file.allow_writes")
    box = _dialog(qtbot, window)
    box.reject()
    qtbot.waitUntil(lambda: not window.presenter.open)
    assert window.session.read_only


class _PickingPresenter(DialogPresenter):
    def __init__(self, pick: str) -> None:
        super().__init__()
        self.pick = pick

    def choose_database(self, parent: Any, start: str, on_chosen: Any) -> None:  # type: ignore[override]
        on_chosen(self.pick)


def test_file_open_and_recent_list(qtbot: Any, make_window: Any, small_db: Path, tmp_path: Path,
                                   settings: Any) -> None:
    other = tmp_path / "other.db"
    make_mastra_db(other)
    window = make_window(presenter=_PickingPresenter(str(other)))
    window.open_database(str(small_db))
    _wait_open(qtbot, window, 3)
    window.commands.run("file.open")
    qtbot.waitUntil(lambda: window.session is not None and window.session.display_path == str(other), timeout=10_000)
    assert settings.value("recentFiles") == [str(other), str(small_db)]
    window._fill_recent_menu()
    assert [a.text() for a in window.recent_menu.actions()] == [str(other), str(small_db)]
    titles = [c.title for c in window.commands.commands()]
    assert f"Open Recent: {small_db}" in titles
    window.open_recent(str(small_db))
    qtbot.waitUntil(lambda: window.session.display_path == str(small_db), timeout=10_000)


def test_menus_shortcuts_and_palette_come_from_the_registry(qtbot: Any, make_window: Any, small_db: Path) -> None:
    window = make_window()
    window.open_database(str(small_db))
    _wait_open(qtbot, window, 3)
    menu_actions = {a.objectName() for m in window.menus.values() for a in m.actions()}
    for cmd in window.commands.commands():
        if cmd.menu and not cmd.id.startswith("file.recent:") and "." in cmd.id and cmd.id.split(".")[0] in (
                "file", "view", "app", "help"):
            assert cmd.id in menu_actions, cmd.id
    assert window.commands.action("view.palette").shortcut().toString() == "Ctrl+K"
    window.commands.run("view.palette")
    palette = window.findChild(CommandPalette)
    assert palette is not None and palette.isVisible()
    qtbot.keyClicks(palette.input, "dark mode")
    assert palette.visible_titles()[0] == "Toggle Dark Mode"
    from PySide6.QtWidgets import QApplication
    from studio.theme import current_theme

    before = current_theme(QApplication.instance())
    qtbot.keyClick(palette.input, "\r")
    qtbot.waitUntil(lambda: not palette.isVisible())
    assert current_theme(QApplication.instance()) != before
    window.toggle_theme()


def test_busy_indicator_only_for_slow_work(qtbot: Any, make_window: Any) -> None:
    window = make_window()
    window._set_busy("pool", 1)
    assert not window.busy_bar.isVisible()  # not for a moment's work
    qtbot.waitUntil(lambda: window.busy_bar.isVisible(), timeout=5_000)
    window._set_busy("pool", 0)
    assert not window.busy_bar.isVisible()


# -- first launch ---------------------------------------------------------------------------------

def _fake_seeder(store: Any, progress: Any) -> str:
    mem = Memory(store)
    for i in range(3):
        mem.save_messages([Message.user(f"demo {i}", thread_id=f"demo-{i}", resource_id="demo", created_at=at(i))])
        progress(i + 1, 3)
    return "seeded"


def test_empty_anchored_database_gets_demo_data(qtbot: Any, make_window: Any, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMORY_STUDIO_DB", raising=False)
    (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    window = make_window(seeder=_fake_seeder)
    with qtbot.waitSignal(window.seeding_finished, timeout=20_000) as sig:
        start(window, None)
    assert sig.args == ["seeded"]
    assert window.session.display_path == str(tmp_path / ".temp" / "memory.db")
    qtbot.waitUntil(lambda: len(window.resources.thread_rows()) == 3, timeout=10_000)


def test_non_empty_or_explicit_database_is_never_seeded(qtbot: Any, make_window: Any, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch, small_db: Path) -> None:
    calls: list[int] = []
    window = make_window(seeder=lambda store, progress: calls.append(1))
    start(window, str(small_db))
    _wait_open(qtbot, window, 3)
    monkeypatch.setenv("MEMORY_STUDIO_DB", str(tmp_path / "env.db"))  # chosen by the user: not "anchored"
    start(window, None)
    qtbot.waitUntil(lambda: window.session.display_path == str(tmp_path / "env.db"), timeout=10_000)
    assert calls == []


@pytest.mark.slow
def test_real_demo_data_is_made_by_the_engine(qtbot: Any, make_window: Any, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMORY_STUDIO_DB", raising=False)
    (tmp_path / "pyproject.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    window = make_window()
    with qtbot.waitSignal(window.seeding_finished, timeout=120_000) as sig:
        start(window, None)
    outcome = sig.args[0]
    assert not isinstance(outcome, BaseException), getattr(outcome, "__traceback_text__", repr(outcome))
    qtbot.waitUntil(lambda: len(window.resources.thread_rows()) >= 4, timeout=10_000)
    titles = [r[1] for r in window.resources.thread_rows()]
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in t) for t in titles)  # Chinese threads too


# -- files that cannot be opened ---------------------------------------------------------------------

def _expect_problem(qtbot: Any, window: Any, path: Path, title: str, advice: str) -> None:
    before = file_state(path)
    existed = path.exists()
    with qtbot.waitSignal(window.open_failed, timeout=20_000) as sig:
        window.open_database(str(path))
    assert sig.args[0].title == title
    box = _dialog(qtbot, window)
    assert box.windowTitle() == title and advice in box.informativeText()
    assert str(path) in box.text()
    assert window.session is None and "Could not open" in window.status_text.text()
    assert file_state(path) == before and path.exists() == existed
    box.accept()
    qtbot.waitUntil(lambda: not window.presenter.open)


def test_missing_file(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    _expect_problem(qtbot, make_window(), tmp_path / "nope.db", "Database not found", "File > Open")


def test_file_that_is_not_a_database(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("just some notes, not SQLite\n" * 50)
    _expect_problem(qtbot, make_window(), path, "Not a database", "left unchanged")


def test_sqlite_file_without_memory_tables(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    path = tmp_path / "other-app.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    con.commit()
    con.close()
    _expect_problem(qtbot, make_window(), path, "Not a memory database", "Mastra")


def test_a_folder(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    path = tmp_path / "folder.db"
    path.mkdir()
    _expect_problem(qtbot, make_window(), path, "That is a folder", "File > Open")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(qtbot: Any, make_window: Any, small_db: Path) -> None:
    small_db.chmod(0)
    try:
        _expect_problem(qtbot, make_window(), small_db, "Cannot read the database", "permissions")
    finally:
        small_db.chmod(0o644)


LOCKER = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
con.execute("ROLLBACK")
"""


def test_locked_file(qtbot: Any, make_window: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "mastra-locked.db"
    make_mastra_db(path)  # rollback journal, as Mastra writes it: an exclusive lock blocks readers
    monkeypatch.setattr(reading, "BUSY_TIMEOUT_MS", 200)
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        _expect_problem(qtbot, make_window(), path, "Database is locked", "Wait")
    finally:
        locker.communicate("", timeout=30)


def test_a_locked_file_opens_when_released_and_the_window_keeps_running_meanwhile(
        qtbot: Any, make_window: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The open's first read meets another process's EXCLUSIVE lock (rollback journal, as Mastra writes):
    it waits with the GIL free, so the UI thread keeps running (libsql-experimental's busy handler kept
    the GIL: the window stood still for the busy timeout, then said the file was locked)."""
    path = tmp_path / "mastra-held.db"
    make_mastra_db(path)
    # Longer than the locker's watchdog: a wait in SQLite's busy handler would hold the UI until it let go.
    monkeypatch.setattr(reading, "BUSY_TIMEOUT_MS", 300_000)
    locker = subprocess.Popen([sys.executable, "-c", HOLD_EXCLUSIVE, str(path),
                               "UPDATE mastra_threads SET title = 'Renamed while locked'"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        window = make_window()
        ticks = [0]
        timer = QTimer(window)
        timer.setInterval(5)
        timer.timeout.connect(lambda: ticks.__setitem__(0, ticks[0] + 1))
        timer.start()
        window.open_database(str(path))  # (its worker meets the lock at once: its first connection)
        qtbot.waitUntil(lambda: ticks[0] > 40, timeout=50_000)  # the UI thread ticks meanwhile
        timer.stop()
        assert window.session is None and not window.presenter.open  # still waiting: nothing failed
        # It says what it waits for, that it opens when the lock goes, and when it gives up (not "Opening …").
        qtbot.waitUntil(lambda: not window.open_banner.isHidden(), timeout=WAIT_OPEN)
        said = window.open_banner.text()
        assert f"Waiting to open {path}" in said and "another program holds the database's lock" in said
        assert "opens as soon as that program lets go" in said and "stops waiting in 300 s" in said, said
        assert [b.text() for b in window.open_banner.buttons] == ["Stop Waiting", "Open Another…"]
        assert "waiting for another program's lock" in window.status_text.text()
        assert locker.stdin is not None
        locker.stdin.write("\n")
        locker.stdin.flush()
        assert locker.stdout.readline().strip() == "released when told"  # the UI never stood still that long
        assert locker.wait(30) == 0
        _wait_open(qtbot, window)
        assert window.resources.thread_rows() == [("user-42", "Renamed while locked", 2)]
        assert not window.presenter.open and window.open_banner.isHidden()
    finally:
        if locker.poll() is None:
            locker.communicate("\n", timeout=90)


def _hold_exclusive(path: Path) -> subprocess.Popen[str]:
    """Another process holding the file's EXCLUSIVE lock (until told, or its watchdog's 60 s)."""
    locker = subprocess.Popen([sys.executable, "-c", HOLD_EXCLUSIVE, str(path), "SELECT 1"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
    return locker


def test_waiting_for_a_locked_file_can_be_stopped_and_the_open_database_stays(
        qtbot: Any, make_window: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = tmp_path / "first.db"
    seed_small(first)
    path = tmp_path / "mastra-held.db"
    make_mastra_db(path)
    monkeypatch.setattr(reading, "BUSY_TIMEOUT_MS", 300_000)
    window = make_window()
    window.open_database(str(first))
    _wait_open(qtbot, window)
    locker = _hold_exclusive(path)
    try:
        window.open_database(str(path))
        qtbot.waitUntil(lambda: not window.open_banner.isHidden(), timeout=WAIT_OPEN)
        assert f"{first} stays open meanwhile" in window.open_banner.text()
        window.open_banner.buttons[0].click()  # Stop Waiting
        assert window.open_banner.isHidden()
        assert window.status_text.text() == f"Stopped waiting to open {path}; {first} stays open"
        # The worker gave the wait up with the lock still held (it waited 300 s otherwise), and said nothing.
        qtbot.waitUntil(lambda: window.pool.running == 0, timeout=WAIT_OPEN)
        assert locker.poll() is None
        assert window.session.display_path == str(first) and not window.presenter.open
        assert window.status_text.text() == f"Stopped waiting to open {path}; {first} stays open"
    finally:
        if locker.poll() is None:
            locker.communicate("\n", timeout=90)


def test_waiting_for_a_locked_file_offers_to_open_another(
        qtbot: Any, make_window: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "mastra-held.db"
    make_mastra_db(path)
    other = tmp_path / "other.db"
    seed_small(other)
    monkeypatch.setattr(reading, "BUSY_TIMEOUT_MS", 300_000)
    locker = _hold_exclusive(path)
    try:
        window = make_window(presenter=_PickingPresenter(str(other)))  # (the file dialog picks ``other``)
        window.open_database(str(path))
        qtbot.waitUntil(lambda: not window.open_banner.isHidden(), timeout=WAIT_OPEN)
        assert "stays open" not in window.open_banner.text()  # nothing is open yet
        window.open_banner.buttons[1].click()  # Open Another… (File > Open; the other file chosen there)
        _wait_open(qtbot, window)
        assert window.session.display_path == str(other) and window.open_banner.isHidden()
        qtbot.waitUntil(lambda: window.pool.running == 0, timeout=WAIT_OPEN)  # the wait for the first was given up
        assert locker.poll() is None
    finally:
        if locker.poll() is None:
            locker.communicate("\n", timeout=90)


def test_newer_schema_opens_read_only_with_a_notice(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    seed_small(path)
    con = sqlite3.connect(path)
    con.execute("INSERT INTO memory_studio_migrations VALUES ('9999_from_the_future', '2030-01-01T00:00:00.000Z')")
    con.commit()
    con.close()
    before = file_state(path)
    window = make_window()
    window.open_database(str(path))
    box = _dialog(qtbot, window)
    assert box.windowTitle() == "Opened read-only: newer database"
    assert "9999_from_the_future" in box.text() and "upgrade Memory Studio" in box.informativeText()
    box.accept()
    _wait_open(qtbot, window, 3)
    assert window.session.read_only and window.badge.text() == "READ-ONLY"
    window.commands.run("file.allow_writes")  # refused: explains again instead of offering to write
    box = _dialog(qtbot, window)
    assert box.windowTitle() == "Opened read-only: newer database"
    box.accept()
    window.close()
    assert file_state(path) == before


def test_status_bar_says_where_the_file_came_from(qtbot: Any, make_window: Any, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch, small_db: Path) -> None:
    window = make_window()
    start(window, str(small_db))
    _wait_open(qtbot, window, 3)
    assert window.path_label.text() == f"{small_db} · opened by path"
    monkeypatch.setenv("MEMORY_STUDIO_DB", str(tmp_path / "env.db"))
    start(window, None)
    qtbot.waitUntil(lambda: window.session.display_path == str(tmp_path / "env.db"), timeout=10_000)
    assert window.path_label.text().endswith("· from $MEMORY_STUDIO_DB")
    assert "MEMORY_STUDIO_DB is set" in window.path_label.toolTip()


def test_the_status_bar_names_the_open_file_once_with_its_name_whole(qtbot: Any, make_window: Any,
                                                                     tmp_path: Path) -> None:
    """"Opened <path>" on the left and the same path on the right: at a 1,100 px window both were cut at their end
    ("Opened /tmp/s3…", the file name lost). The message names the file, the path is said once beside it, cut in
    the middle of its folders where it does not fit, its file name whole; its tooltip says it whole."""
    folder = tmp_path.joinpath("home", "ada.lovelace", "Documents", "Projects", "customer-support-agent-with-long-name",
                               "experiments", "2026-12-memory-tuning-round-two", "sqlite-databases")
    folder.mkdir(parents=True)
    db = folder / "support-agent-memory.db"
    seed_small(db)
    window = make_window()
    window.resize(1440, 900)
    start(window, str(db))
    _wait_open(qtbot, window, 3)
    status, path = window.status_text, window.path_label
    assert status.text() == "Opened support-agent-memory.db"
    assert path.text() == f"{db} · opened by path"  # (the label's text and tooltip: the whole path)
    assert str(db) in path.toolTip().splitlines() and "Why this file:" in path.toolTip()
    for width in (1440, 1100, 900):
        window.resize(width, 800)
        qtbot.waitUntil(lambda: window.statusBar().width() <= width, timeout=WAIT_OPEN)
        qtbot.wait(50)  # (the layout is done)
        shown = path.shown()
        assert shown.endswith("/support-agent-memory.db · opened by path"), (width, shown)
        assert "…" in shown and shown.startswith(str(tmp_path)[:5])  # its folders' middle gave way
        assert path.fontMetrics().horizontalAdvance(shown) <= path.contentsRect().width()
        assert not status.elided()  # the message whole beside it
        assert status.geometry().right() < path.geometry().left()
        assert path.geometry().right() <= window.statusBar().width()


@pytest.mark.parametrize("theme", ["dark"])  # (as users run it: its font is the larger)
def test_migrating_names_the_file_and_its_outcome_stays_after_the_reopen(qtbot: Any, make_window: Any,
                                                                         tmp_path: Path, themed: Any, theme: str) -> None:
    """"Migrating <path>…" and "Migrated <path>: N migration(s) applied" repeated the path the status bar shows beside
    them (the rule of "Opened <file>"), and the outcome was gone at once: the reopen that follows a migration said
    "Opening <path>…", then "Opened <file>", so how many migrations ran was never read. The messages name the file,
    and the outcome is what the status bar says once the file is open again."""
    folder = tmp_path.joinpath("home", "ada", "projects", "a-mastra-app-with-a-long-folder-name")
    folder.mkdir(parents=True)
    path = folder / "mastra.db"
    make_mastra_db(path)
    window = make_window()
    window.resize(1100, 800)
    window.show()
    window.open_database(str(path))
    _wait_open(qtbot, window)
    window.commands.run("file.migrate")
    box = _dialog(qtbot, window)
    box.property("yesButton").click()
    assert window.status_text.text() == "Migrating mastra.db…"
    qtbot.waitUntil(lambda: window.session is not None and window.session.owned and not window.session.read_only,
                    timeout=WAIT_OPEN)
    said = window.status_text.text()
    assert re.fullmatch(r"Migrated mastra\.db: [1-9]\d* migrations", said), said
    assert str(folder) not in said and not window.status_text.elided()  # (whole beside the path, at 1,100 px)
    assert window.badge.text() == "WRITABLE"
    assert str(path) in window.path_label.toolTip()


def test_a_closed_sessions_pool_runs_no_late_request(qtbot: Any, tmp_path: Path) -> None:
    """A messages model's paging timer fired after its session began closing (another database opened) and
    submitted a page read to the closed session's pool: the read ran on a store being closed and its answer
    reached a model Qt had deleted ("Internal C++ object (MessageListModel) already deleted"). A pool that
    is shut down now runs nothing new and calls nothing back."""
    from studio.workers import WorkerPool

    pool = WorkerPool()
    ran: list[str] = []
    answered: list[object] = []
    pool.shutdown()
    pool.submit(lambda: ran.append("ran"), on_result=answered.append, on_error=answered.append)
    assert pool.wait(5_000)
    qtbot.wait(50)  # a queued answer would be delivered by now
    assert ran == [] and answered == [] and pool.running == 0
    pool.deleteLater()


def test_a_job_finishing_after_its_pool_is_gone_tells_nobody_and_prints_nothing(capfd: Any) -> None:
    """Closing the window while a long read ran (a 100,000-message thread's turns) printed "Error calling
    Python override of QRunnable::run(): ... Signal source has been deleted" when the read finished. The
    job has nobody to tell then, and says nothing."""
    import shiboken6

    from studio.workers import _Job, _Signals

    signals = _Signals()
    job = _Job(1, lambda: "done", signals, False)
    job.setAutoDelete(False)
    shiboken6.delete(signals)  # (what the window's going takes with it)
    job.run()  # (as the pool's thread runs it)
    assert capfd.readouterr().err == ""
    live = _Signals()
    told: list[object] = []
    live.done.connect(lambda *args: told.append(args))
    _Job(2, lambda: "answer", live, False).run()
    assert told == [(2, "answer", None)]


def test_a_replaced_jobs_progress_reaches_nobody(qtbot: Any) -> None:
    """Regression: a job that a newer one of the same key replaced had its result dropped, but its progress
    still reached the pane, so the old run's "4 of 4" overwrote the newer run's status. Both go now."""
    import threading

    from studio.workers import WorkerPool

    pool = WorkerPool()
    release = threading.Event()
    seen: list[tuple[str, int, int]] = []

    def old_run(progress: Any) -> str:
        release.wait(5)
        progress(4, 4)
        return "old"

    def new_run(progress: Any) -> str:
        progress(1, 2)
        return "new"

    results: list[str] = []
    pool.submit(old_run, on_result=results.append, on_progress=lambda d, t: seen.append(("old", d, t)), key="checks")
    pool.submit(new_run, on_result=results.append, on_progress=lambda d, t: seen.append(("new", d, t)), key="checks")
    qtbot.waitUntil(lambda: results == ["new"], timeout=5_000)
    release.set()
    assert pool.wait(5_000)
    qtbot.wait(50)  # a queued progress report would be delivered by now
    assert seen == [("new", 1, 2)] and results == ["new"]
    pool.deleteLater()


def test_a_saved_geometry_qt_refuses_gives_the_default_size(qtbot: Any, make_window: Any,
                                                              settings: Any) -> None:
    """A geometry saved under another screen setup that ``restoreGeometry`` refuses (found 2026-12-06: one saved
    on the offscreen platform reopened under X11 at the window's size hint, 652x299) gets the first launch's size."""
    from studio.main_window import DEFAULT_SIZE

    settings.setValue("geometry", b"\x01\xd9\xd0\xcb\x00\x09 not a geometry this Qt reads")
    window = make_window()
    assert (window.width(), window.height()) == DEFAULT_SIZE

    window.resize(700, 500)  # (inside the offscreen screen) a geometry this Qt saved is still restored as it was
    window.close()
    again = make_window()
    assert (again.width(), again.height()) == (700, 500)
