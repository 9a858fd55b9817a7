"""A database deleted (or replaced) while the Studio has it open (issue 17, item 15): the change poll
notices, a banner says so, the status bar stops saying WRITABLE, every write is refused, and an
unsaved working-memory edit can be saved elsewhere instead of vanishing with the file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from core import Memory, MemoryOptions, ReadOnlyError, open_store
from studio.panes.working_memory import WorkingMemoryPane
from studio.selection import Selection
from studio.session import DatabaseFileLostError, StudioSession

from .test_working_memory_pane import build_db, load


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "memory.db"
    build_db(path).close()
    return path


@pytest.fixture
def opened(qtbot: Any, no_leaked_widgets: None, db: Path) -> Any:
    session = StudioSession(open_store(db))
    pane = WorkingMemoryPane(session)
    qtbot.addWidget(pane)
    pane.show()
    load(qtbot, pane, Selection("alice", "t1"))
    yield session, pane
    session.close()


def test_a_deleted_file_turns_the_session_read_only_and_keeps_the_edit(qtbot, opened, db, tmp_path):
    session, pane = opened
    session.start()
    pane.editor.replace_all("# User\n- Name: Alice\n- City: Porto")
    os.remove(db)
    with qtbot.waitSignal(session.file_lost, timeout=10_000) as lost:
        pass
    assert "was deleted while the Studio had it open" in lost.args[0]
    assert session.read_only and session.lost
    assert not pane.commands.action("wm.save").isEnabled()
    assert "Save Edit As…" in [b.text() for b in pane.info_banner.buttons]
    assert pane.editor.toPlainText().endswith("City: Porto")  # the edit is still there
    with pytest.raises(ReadOnlyError, match="was deleted"):  # and nothing can write into the lost file
        Memory(session.store, MemoryOptions(working_memory={"enabled": True})).update_working_memory(
            thread_id="t1", resource_id="alice", working_memory="# lost")
    target = tmp_path / "kept.md"
    with qtbot.waitSignal(pane.edit_saved_as, timeout=10_000):
        pane.save_edit_to(str(target))
    assert target.read_text(encoding="utf-8").endswith("City: Porto")


def test_a_save_racing_the_deletion_is_not_reported_as_saved(qtbot, opened, db):
    session, pane = opened  # not polling: the save itself must notice
    pane.editor.replace_all("# User\n- Name: Alice\n- City: Faro")
    os.remove(db)
    saved: list[Any] = []
    pane.saved.connect(saved.append)
    with qtbot.waitSignal(session.file_lost, timeout=10_000):
        pane.commands.run("wm.save")
    assert saved == [] and session.read_only
    assert "Save Edit As…" in [b.text() for b in pane.info_banner.buttons]
    with pytest.raises(DatabaseFileLostError):
        session.check_file()


def test_a_replaced_file_is_noticed_too(qtbot, opened, db, tmp_path):
    session, _pane = opened
    session.start()
    qtbot.waitUntil(lambda: session._identity is not None, timeout=10_000)
    other = tmp_path / "other.db"
    shutil.copy(db, other)
    os.replace(other, db)  # the path now names another file
    with qtbot.waitSignal(session.file_lost, timeout=10_000) as lost:
        pass
    assert "was replaced by another file" in lost.args[0] and session.read_only


def test_the_window_shows_a_banner_and_the_badge_stops_saying_writable(qtbot, make_window, small_db):
    window = make_window()
    window.open_database(str(small_db))
    qtbot.waitUntil(lambda: window.session is not None and window.resources is not None
                    and len(window.resources.thread_rows()) >= 3, timeout=15_000)
    assert window.badge.text() == "WRITABLE" and not window.file_banner.isVisible()
    os.remove(small_db)
    qtbot.waitUntil(lambda: window.file_banner.isVisible(), timeout=10_000)
    assert "was deleted while the Studio had it open" in window.file_banner.text()
    assert window.badge.text() == "FILE GONE · READ-ONLY" and "[read-only]" in window.windowTitle()
    assert [b.text() for b in window.file_banner.buttons] == ["Reopen"]


def test_a_write_between_the_open_and_the_first_poll_is_seen_as_a_change(qtbot, qapp, db):
    # Regression: the first poll took whatever it found as the starting point, so a write that landed
    # after the panes' first read but before that poll (another process, a busy worker pool) was never
    # shown. The window's open reads the starting point with the database, before any pane reads it.
    from core.messages import Message
    from studio.session import open_studio_database

    opened = open_studio_database(db)
    assert opened.baseline is not None
    writer = open_store(db)
    writer.memory.save_messages([Message.user("meanwhile", thread_id="t1", resource_id="alice")])
    writer.close()
    session = StudioSession(opened.store, baseline=opened.baseline)
    try:
        with qtbot.waitSignal(session.changed, timeout=10_000):
            session.start()
    finally:
        session.pool.wait(10_000)
        session.close()


def test_a_file_replaced_between_the_open_and_the_first_poll_is_seen(qtbot, qapp, db, tmp_path):
    from studio.session import open_studio_database

    opened = open_studio_database(db)
    other = tmp_path / "other.db"
    shutil.copy(db, other)
    os.replace(other, db)
    session = StudioSession(opened.store, baseline=opened.baseline)
    try:
        with qtbot.waitSignal(session.file_lost, timeout=10_000) as lost:
            session.start()
        assert "was replaced by another file" in lost.args[0]
    finally:
        session.pool.wait(10_000)
        session.close()
