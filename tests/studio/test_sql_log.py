"""View > SQL Log: every statement the Studio runs on its memory database and on its trace file (DuckDB) is listed
with its kind and which of the two it ran on, so that "browsing changes nothing" can be checked (0 writes after
looking through the panes, on either) and an edit's writes are seen; filter, which database, Writes only, the
selected statement in full with its parameters, Clear, Copy; the ring is bounded; the listeners are per opened
database and gone once it closes."""

from __future__ import annotations

import gc
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from PySide6.QtWidgets import QApplication, QMessageBox

from core import open_store
from core.traces.spans import SpanRecord
from core.traces.store import DuckDBObservabilityStore
from studio.logic.sql_log import CHANGE_CHECK, DATABASE, TRACE_FILE, SqlLog, close_watched, kind_of, shared_log
from studio.main_window import REPLAY, TRACES
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
    assert "memory database: " in dock.counts.text() and f"{counts['read']:,} reads, 0 writes" in dock.counts.text()
    assert all(r.database == "small.db" and r.on == DATABASE for r in dock.log.rows())  # (no trace file here)

    # The session's once-a-second change checks are counted, and listed only when asked for.
    assert dock.hide_checks.isChecked() and not any(r.purpose == CHANGE_CHECK for r in dock.model.rows())
    qtbot.waitUntil(lambda: any(r.purpose == CHANGE_CHECK for r in dock.log.rows()), timeout=10_000)
    dock.refresh()
    dock.hide_checks.setChecked(False)
    assert any(r.purpose == CHANGE_CHECK for r in dock.model.rows())
    # Every statement up to the last one listed is listed, in order (the session's polls may log more meanwhile,
    # listed at the next refresh).
    listed = [r.seq for r in dock.model.rows()]
    assert listed == [r.seq for r in dock.log.rows() if r.seq <= listed[-1]]
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


T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def _runs(store: Any, thread_id: str, resource_id: str, n: int) -> None:
    """``n`` runs of a thread, written into the store's trace file (DuckDB) by the engine."""
    store.observability.write_spans([
        SpanRecord(trace_id=f"T{i}", span_id=f"root{i}", name=f"agent run: 'chef' {i}", span_type="agent_run",
                   entity_name="chef", thread_id=thread_id, resource_id=resource_id,
                   started_at=T0 + timedelta(minutes=i), ended_at=T0 + timedelta(minutes=i, seconds=2))
        for i in range(n)])


def test_the_trace_files_reads_are_listed_apart_and_browsing_writes_to_neither(qtbot: Any, make_window: Any,
                                                                                small_db: Path) -> None:
    with open_store(small_db) as store:
        _runs(store, "t-groceries", "ada", 3)
        trace_file = Path(store.observability.path).name
    window = _open(qtbot, make_window, small_db)
    window.commands.run("view.sql_log")
    dock = window.sql_log_dock
    dock.clear()
    _select_message(qtbot, window, "ada", "t-groceries", 0)
    window.show_tab("traces")
    pane = window.pane(TRACES)
    qtbot.waitUntil(lambda: len(pane.traces) == 3 and bool(pane.spans), timeout=15_000)
    qtbot.waitUntil(lambda: any(r.on == TRACE_FILE for r in dock.log.rows()), timeout=10_000)
    # Replay's Trace: it looks for the turn's run in the trace file.
    window.show_tab("replay")
    replay = window.pane(REPLAY)
    replay.replay_from_thread("t-groceries")
    qtbot.waitUntil(lambda: replay.state.source is not None and replay.state.step is not None, timeout=15_000)
    before = dock.log.rows()[-1].seq
    replay.show_trace()
    qtbot.waitUntil(lambda: replay.state.trace is not None, timeout=15_000)
    assert any(r.on == TRACE_FILE and r.seq > before and "'t-groceries'" in r.params for r in dock.log.rows())
    window.show_tab("messages")
    qtbot.wait(200)
    dock.refresh()
    traced = [r for r in dock.log.rows() if r.on == TRACE_FILE]
    assert traced and {r.database for r in traced} == {trace_file}
    assert {r.connection for r in traced} == {"read-only"}
    assert {r.kind for r in traced} == {"read"}, [r.line for r in traced if r.kind != "read"]
    assert any('"traceId"' in r.sql and r.params for r in traced)  # (the statement as sent, with its parameters)
    assert dock.log.counts(TRACE_FILE)["write"] == 0 and dock.log.counts(DATABASE)["write"] == 0
    assert dock.log.counts(TRACE_FILE)["read"] == len(traced)
    assert f"trace file: {len(traced):,} reads, 0 writes" in dock.counts.text()

    # Which database: both, the memory database alone, the trace file alone; Writes only lists nothing.
    both = dock.model.rowCount()
    dock.database.setCurrentText("Trace file")
    assert dock.model.rowCount() == len(traced) < both
    assert all(r.on == TRACE_FILE for r in dock.model.rows())
    assert dock.model.index(0, 4).data() == "trace file"
    dock.table.selectRow(0)
    assert f"trace file {trace_file} (read-only connection)" in dock.detail.toPlainText()
    assert dock.model.rows()[0].sql.strip() in dock.detail.toPlainText()
    chosen = dock.model.rows()[0]
    dock.copy_shown()
    assert QApplication.clipboard().text().count("\ttrace file\t") == len(traced)
    dock.database.setCurrentText("Both databases")  # (the statement chosen stays chosen while it is listed)
    assert dock.model.row_at(dock.table.selectionModel().selectedRows()[0].row()) == chosen
    dock.database.setCurrentText("Memory database")  # (not listed: neither chosen nor in the detail)
    assert not dock.table.selectionModel().selectedRows() and dock.detail.toPlainText() == ""
    dock.database.setCurrentText("Trace file")
    dock.table.resize(600, 300)  # (narrow: the statements keep the room, Thread and Database give way)
    assert dock.table.isColumnHidden(3) and dock.table.isColumnHidden(5) and not dock.table.isColumnHidden(6)
    dock.table.resize(1_000, 300)
    assert not dock.table.isColumnHidden(3) and not dock.table.isColumnHidden(5)
    dock.database.setCurrentText("Memory database")
    assert 0 < dock.model.rowCount() and all(r.on == DATABASE for r in dock.model.rows())
    dock.database.setCurrentText("Both databases")
    dock.writes_only.setChecked(True)
    assert dock.model.rowCount() == 0


def test_the_trace_files_writes_are_listed_as_writes(tmp_path: Path) -> None:
    """A tracer's (or any) write to the trace file shows as a write on a read-write connection: the Writes only
    view hides none."""
    log = SqlLog()
    store = open_store(tmp_path / "memory.db")
    log.watch(store)
    try:
        _runs(store, "t1", "r1", 2)
    finally:
        store.close()
        log.unwatch(store)
    traced = [r for r in log.rows() if r.on == TRACE_FILE]
    assert {r.connection for r in traced} == {"read-write"}
    inserts = [r for r in traced if r.sql.lstrip().upper().startswith("INSERT")]
    assert inserts and all(r.kind == "write" for r in inserts)
    assert any(r.kind == "transaction" for r in traced)
    assert log.counts(TRACE_FILE)["write"] >= len(inserts) > 0


def _own_listeners(engine: sa.Engine) -> list[Any]:
    """The engine's own ``before_cursor_execute`` listeners (not those every engine has: the test suite's)."""
    return list(engine.dispatch.before_cursor_execute.listeners)


def _one_read(store: Any) -> None:
    with store.db.engine.connect() as conn:
        conn.exec_driver_sql("SELECT count(*) FROM mastra_threads").scalar()


def test_the_listeners_are_per_database_and_gone_once_it_closes(tmp_path: Path) -> None:
    """A process opening several databases: each store's statements are listed while it is open, under its
    name; a closed one's engine keeps no listener, and the trace file is observed only while a store is."""
    log = SqlLog()
    a, b = open_store(tmp_path / "a.db"), open_store(tmp_path / "b" / "b.db")
    _runs(b, "t1", "r1", 1)
    traces = DuckDBObservabilityStore(b.observability.path, read_only=True)
    log.watch(a)
    log.watch(b)
    log.watch(b)  # (twice: one listener)
    _one_read(a)
    _one_read(b)
    assert traces.count_traces() == 1
    assert [r.database for r in log.rows() if r.on == DATABASE] == ["a.db", "b.db"]  # (one listener each)
    assert {r.database for r in log.rows() if r.on == TRACE_FILE} == {Path(b.observability.path).name}

    a.close()
    log.unwatch(a)
    log.unwatch(a)  # (twice: nothing to do)
    engine_a = a.db.engine
    total = log.total
    _one_read(a)  # (a disposed engine still connects: nothing is listed of it now)
    assert log.total == total
    _one_read(b)
    assert log.total == total + 1
    traces.get_trace("T0")
    assert log.total > total + 1

    b.close()
    log.unwatch(b)
    total = log.total
    _one_read(b)
    traces.get_trace("T0")
    traces.count_traces()
    assert log.total == total and not log.watching(a) and not log.watching(b)
    assert not _own_listeners(engine_a) and not _own_listeners(b.db.engine)

    # A store closed and dropped without ``unwatch`` (a script's): its trace statements stop being listed too.
    c = open_store(tmp_path / "c.db")
    log.watch(c)
    traces.count_traces()
    assert log.total > total
    c.close()
    del c
    gc.collect()
    total = log.total
    traces.get_trace("T0")
    traces.count_traces()
    assert log.total == total


def test_a_studio_session_stops_listing_its_database_when_it_closes(make_session: Any, small_db: Path) -> None:
    session = make_session(small_db)
    store = session.store
    assert shared_log().watching(store) and len(_own_listeners(store.db.engine)) == 1
    _one_read(store)
    assert shared_log().rows()[-1].line == "SELECT count(*) FROM mastra_threads"
    session.close()
    assert not shared_log().watching(store) and not _own_listeners(store.db.engine)
    total = shared_log().total
    _one_read(store)
    assert shared_log().total == total


def test_closing_the_window_closes_its_database_and_stops_listing_it(qtbot: Any, make_window: Any,
                                                                     small_db: Path) -> None:
    """The window's close shuts its worker pool first; the session's close used to be handed to that pool and
    never ran: the store stayed open (its queued traces unwritten) and its listener on."""
    window = _open(qtbot, make_window, small_db)
    store = window.session.store
    closed: list[bool] = []
    close = store.close
    store.close = lambda: (closed.append(True), close())[1]
    assert shared_log().watching(store)
    window.close()
    assert closed == [True]
    assert not shared_log().watching(store) and not _own_listeners(store.db.engine)


def test_what_opening_a_database_runs_is_listed_from_its_first_statement(tmp_path: Path) -> None:
    """The open itself (the first look at the file, its journal mode, the migrations that make a new file's
    tables) is listed under the file's name, before ``open_store`` has returned a store to watch."""
    from studio.session import open_for_studio

    log = shared_log()
    log.clear()
    store = open_for_studio(tmp_path / "new.db")
    try:
        rows = [r for r in log.rows() if r.on == DATABASE]
        assert rows and {r.database for r in rows} == {"new.db"}
        assert rows[0].sql.startswith("SELECT count(*) FROM sqlite_master")  # (``Database._look``)
        assert any(r.kind == "write" and "CREATE TABLE" in r.sql for r in rows)  # (the migrations)
        assert len(_own_listeners(store.db.engine)) == 1
    finally:
        close_watched(store)
    assert not _own_listeners(store.db.engine)


def test_an_open_keeps_one_listener_on_the_store_it_returns_and_none_on_its_probe(small_db: Path) -> None:
    """Opening a database of ours first looks read-only (the probe), then reopens it for writing: the probe's
    statements are listed, and its engine keeps no listener once let go of; a failed open keeps none either."""
    from core.storage.engine_watch import engines_made
    from studio.session import open_for_studio

    engines: list[sa.Engine] = []
    log = shared_log()
    log.clear()
    with engines_made(engines.append):
        store = open_for_studio(small_db)
    try:
        assert len(engines) == 2 and engines[1] is store.db.engine  # (the probe's, then the store's)
        assert not _own_listeners(engines[0]) and len(_own_listeners(engines[1])) == 1
        looks = [r for r in log.rows() if r.sql.startswith("SELECT count(*) FROM sqlite_master")]
        assert len(looks) == 2 and {r.database for r in looks} == {small_db.name}
    finally:
        close_watched(store)

    damaged = small_db.parent / "damaged.db"
    damaged.write_bytes(small_db.read_bytes()[:100] + b"\0" * 4096)  # (SQLite's header, then nothing it can read)
    engines.clear()
    with engines_made(engines.append), pytest.raises(Exception):
        open_for_studio(damaged)
    assert engines and all(not _own_listeners(e) for e in engines)


def test_a_mastra_databases_spans_table_reads_are_listed_as_the_memory_databases(qtbot: Any, make_window: Any,
                                                                                   tmp_path: Path) -> None:
    """Mastra keeps its spans in the memory database (``mastra_ai_spans``); the Traces pane reads them on a
    connection of its own (``LibSQLSpanReader``), whose statements the log did not list: browsing the traces
    showed nothing of them. They are the memory database's, reads, on the spans reader's connection."""
    import libsql_experimental as libsql

    from studio.logic.sql_log import SPANS_READER

    from .conftest import make_mastra_db
    from .test_traces_pane import _create_spans_table, _insert

    db = tmp_path / "mastra.db"
    make_mastra_db(db)
    con = libsql.connect(str(db))
    _create_spans_table(con)
    for i in range(2):
        _insert(con, traceId=f"T{i}", spanId=f"root{i}", name="agent run: 'chef'", spanType="agent_run", isEvent=0,
                startedAt=f"2026-01-01T10:0{i}:00.000Z", endedAt=f"2026-01-01T10:0{i}:02.000Z",
                createdAt=f"2026-01-01T10:0{i}:00.000Z", threadId="mastra-thread", resourceId="user-42")
    con.commit()
    con.close()
    window = _open(qtbot, make_window, db)
    window.commands.run("view.sql_log")
    dock = window.sql_log_dock
    dock.clear()
    window.select_thread(Selection("user-42", "mastra-thread"))
    window.show_tab("traces")
    pane = window.pane(TRACES)
    qtbot.waitUntil(lambda: len(pane.traces) == 2 and bool(pane.spans), timeout=15_000)
    window.show_tab("messages")
    qtbot.wait(200)
    dock.refresh()
    spans = [r for r in dock.log.rows() if r.connection == SPANS_READER]
    assert any("mastra_ai_spans" in r.sql for r in spans), [r.line for r in dock.log.rows()]
    assert {(r.on, r.database) for r in spans} == {(DATABASE, "mastra.db")}
    assert {r.kind for r in spans} <= {"read", "setting"}, [r.line for r in spans if r.kind not in ("read", "setting")]
    assert dock.log.counts(DATABASE)["write"] == 0 and dock.log.counts(TRACE_FILE) == {
        "read": 0, "write": 0, "transaction": 0, "setting": 0}, "no trace file here: nothing listed as one"
    dock.database.setCurrentText("Memory database")
    dock.filter_edit.setText("mastra_ai_spans")
    shown = dock.model.rows()
    assert any(r.connection == SPANS_READER for r in shown) and all(r.on == DATABASE for r in shown)
    dock.table.selectRow(next(i for i, r in enumerate(shown) if r.connection == SPANS_READER))
    assert "memory database mastra.db (spans reader connection)" in dock.detail.toPlainText()
