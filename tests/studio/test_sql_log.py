"""View > SQL Log: every statement the Studio runs on its memory database is listed with its kind, so that
"browsing changes nothing" can be checked (0 writes after looking through the panes) and an edit's writes are
seen; filter, Writes only, the selected statement in full with its parameters, Clear, Copy; the ring is
bounded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QApplication, QMessageBox

from core import open_store
from studio.logic.sql_log import CHANGE_CHECK, SqlLog, kind_of
from studio.selection import Selection

from .test_memory_edits_window import _dialog, _open, _select_message


@pytest.mark.parametrize(("sql", "kind"), [
    ("SELECT id FROM mastra_messages WHERE thread_id = ?", "read"),
    ("  -- a comment\n select 1", "read"),
    ("WITH x AS (SELECT 1) SELECT * FROM x", "read"),
    ("WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", "write"),
    ('INSERT INTO mastra_messages (id) VALUES (?)', "write"),
    ("UPDATE mastra_threads SET title = ? WHERE id = ?", "write"),
    ("DELETE FROM memory_messages_512 WHERE vector_id = ?", "write"),
    ("CREATE TABLE IF NOT EXISTS x (a)", "write"),
    ("BEGIN IMMEDIATE", "transaction"), ("COMMIT", "transaction"), ("SAVEPOINT sp1", "transaction"),
    ("PRAGMA busy_timeout = 5000", "setting"), ("PRAGMA table_info(mastra_messages)", "read"),
    ("PRAGMA wal_checkpoint(TRUNCATE)", "write"), ("SET LOCAL statement_timeout = 100", "setting"),
    ("something new", "write"),  # never assumed harmless
])
def test_a_statement_is_classed_by_what_it_does_to_the_data(sql: str, kind: str) -> None:
    assert kind_of(sql) == kind


def test_the_ring_keeps_the_newest_and_counts_every_statement() -> None:
    log = SqlLog(capacity=3)
    for i in range(5):
        log.add(f"SELECT {i}", (i,), "x.db")
    log.add("UPDATE t SET a = 1", None, "x.db")
    assert [r.sql for r in log.rows()] == ["SELECT 3", "SELECT 4", "UPDATE t SET a = 1"]
    assert log.total == 6 and log.dropped == 3 and log.counts()["read"] == 5 and log.counts()["write"] == 1
    assert [r.seq for r in log.since(4)] == [5, 6] and log.since(6) == []
    log.add("SELECT 'long'", ("x" * 10_000,), "x.db")
    assert log.rows()[-1].params == "('" + "x" * 120 + "'…(10,000 characters))"
    log.add("INSERT INTO t VALUES (?)", [(1, b"ab")] * 20, "x.db")
    assert log.rows()[-1].params == "(" + ", ".join(["[2 values]"] * 12) + ", … 8 more)"


def test_browsing_is_listed_as_reads_only_and_an_edit_shows_its_writes(qtbot: Any, make_window: Any,
                                                                        small_db: Path) -> None:
    window = _open(qtbot, make_window, small_db)
    window.commands.run("view.sql_log")
    dock = window.sql_log_dock
    assert dock is not None and dock.isVisible()
    dock.clear()
    # Look through the panes, as a user would.
    _select_message(qtbot, window, "ada", "t-groceries", 0)
    for tab in ("prompt", "working_memory", "traces", "observations", "recall", "replay", "checks", "messages"):
        window.show_tab(tab)
        qtbot.wait(200)
    window.select_thread(Selection("li", "t-trip"))
    qtbot.waitUntil(lambda: window.messages_pane.model.thread_id == "t-trip", timeout=15_000)
    qtbot.waitUntil(lambda: dock.log.total > 0, timeout=10_000)
    qtbot.wait(300)
    dock.refresh()
    counts = dock.log.counts()
    assert counts["read"] > 0
    assert counts["write"] == 0, [r.line for r in dock.log.rows() if r.kind == "write"]
    assert "0 writes" in dock.counts.text()
    assert all(r.database == "small.db" for r in dock.log.rows())

    # The session's once-a-second change checks are counted, and listed only when asked for.
    assert dock.hide_checks.isChecked() and not any(r.purpose == CHANGE_CHECK for r in dock.model.rows())
    qtbot.waitUntil(lambda: any(r.purpose == CHANGE_CHECK for r in dock.log.rows()), timeout=10_000)
    dock.refresh()
    dock.hide_checks.setChecked(False)
    assert any(r.purpose == CHANGE_CHECK for r in dock.model.rows())
    assert dock.model.rowCount() == len(dock.log.rows())
    dock.hide_checks.setChecked(True)

    # Filter and Writes only narrow the list; the selection shows the whole statement with its parameters.
    dock.filter_edit.setText("mastra_messages")
    assert 0 < dock.model.rowCount() < len(dock.log.rows())
    assert all("mastra_messages" in r.sql.lower() for r in dock.model.rows())
    dock.table.selectRow(0)
    first = dock.model.rows()[0]
    assert first.sql.strip() in dock.detail.toPlainText()
    dock.filter_edit.clear()

    # An edit: its writes are listed.
    dock.writes_only.setChecked(True)
    assert dock.model.rowCount() == 0
    with open_store(small_db, read_only=True) as store:
        before = store.memory.count_messages("t-groceries")
    window.edits.delete_thread("t-party")
    box = _dialog(qtbot, window, QMessageBox)
    with qtbot.waitSignal(window.edits.thread_deleted, timeout=30_000):
        box.property("yesButton").click()
    qtbot.waitUntil(lambda: (dock.refresh(), dock.model.rowCount())[1] > 0, timeout=10_000)
    assert all(r.kind == "write" for r in dock.model.rows())
    assert any("DELETE" in r.sql.upper() and "mastra_threads" in r.sql for r in dock.model.rows())
    with open_store(small_db, read_only=True) as store:
        assert store.memory.count_messages("t-groceries") == before  # (the other thread untouched)
    dock.copy_shown()
    assert "DELETE" in QApplication.clipboard().text()

    # Clear empties the list and the counts; View > SQL Log again hides it.
    last = dock.log.rows()[-1].seq
    dock.clear()  # (the session's polls keep reading meanwhile: only newer statements are listed after it)
    assert dock.model.rowCount() == 0 and all(r.seq > last for r in dock.log.rows())
    window.commands.run("view.sql_log")
    assert not dock.isVisible()
