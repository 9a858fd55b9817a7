"""Traces pane: the runs of a real trace file, the span tree with the model's input, filters, paging,
busy / missing states, a Mastra database, and no writes (pytest-qt, offscreen, files in tmp_path)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import libsql_experimental as libsql
import pytest
from PySide6.QtCore import Qt, QTimer

from core import open_store
from core.traces.locking import observe_statements
from core.traces.store import DuckDBObservabilityStore
from core.traces.spans import SpanRecord
from studio.main_window import PANES, TRACES
from studio.panes.traces import PAGE, TAB_ERROR, TAB_MESSAGES, TracesPane
from studio.selection import Selection
from studio.widgets.timeline import COL_DURATION, COL_TIMELINE

from tests.core.test_storage_busy_reads import HOLD_EXCLUSIVE  # (the other process holding the lock)

from .conftest import file_state, make_mastra_db, seeded_demo_folder

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
WAIT = 20_000


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's real agent runs, seeded once; each test browses its own copy."""
    return seeded_demo_folder(tmp_path_factory, "demo")


@pytest.fixture
def demo_db(tmp_path: Path, demo_dir: Path) -> Path:
    shutil.copytree(demo_dir, tmp_path / "demo")
    return tmp_path / "demo" / "memory.db"


def open_pane(qtbot: Any, make_session: Any, db: Path) -> TracesPane:
    pane = TracesPane(make_session(db))
    qtbot.addWidget(pane)
    pane.resize(1200, 800)
    with qtbot.waitSignal(pane.traces_loaded, timeout=WAIT):
        pane.show()
    if pane.traces:
        qtbot.waitUntil(lambda: pane.trace_id is not None and bool(pane.spans)
                        and pane.spans[0].trace_id == pane.trace_id, timeout=WAIT)
    return pane


def reload(qtbot: Any, pane: TracesPane, action: Any) -> None:
    with qtbot.waitSignal(pane.traces_loaded, timeout=WAIT):
        action()


def span(trace: str, sid: str, start_s: float, end_s: float | None, parent: str | None = None,
         span_type: str = "agent_run", **kw: Any) -> SpanRecord:
    return SpanRecord(trace_id=trace, span_id=sid, name=kw.pop("name", sid), span_type=span_type,
                      parent_span_id=parent, started_at=T0 + timedelta(seconds=start_s),
                      ended_at=None if end_s is None else T0 + timedelta(seconds=end_s), **kw)


def test_lists_the_runs_and_shows_the_tree_and_the_prompt_sent(no_leaked_widgets, qtbot, make_session, demo_db):
    pane = open_pane(qtbot, make_session, demo_db)
    assert pane.total == 17 and len(pane.traces) == 17
    assert {t.entity_name for t in pane.traces} == {"chef", "travel", "notes", "notes-om"}
    assert [t.started_at for t in pane.traces] == sorted((t.started_at for t in pane.traces), reverse=True)
    assert all(t.status == "ok" and t.total_tokens > 0 for t in pane.traces)
    assert not pane.banner.isVisible()
    assert pane.trace_model.rowCount() == 17 and pane.trace_id == pane.traces[0].trace_id

    types = {r.span.span_type for r in pane.layout_model.rows}
    assert {"agent_run", "memory_operation", "processor_run", "model_generation"} <= types
    names = {r.span.name for r in pane.layout_model.rows}
    assert {"memory: recall", "memory: save"} <= names
    assert pane.span_model.rowCount() == 1  # one root, the rest nested under it
    root = pane.span_model.index(0, 0)
    assert pane.span_model.rowCount(root) == len([r for r in pane.layout_model.rows if r.depth == 1])

    gen = next(r.span for r in pane.layout_model.rows if r.span.span_type == "model_generation" and r.depth == 1)
    assert pane.select_span(gen.span_id) and pane.current_span() == gen
    assert pane.tabs.isTabVisible(TAB_MESSAGES) and pane.tabs.currentIndex() == TAB_MESSAGES
    chat = pane.chat_view.toPlainText()
    sent = gen.input["messages"]
    assert sent[-1]["content"] in chat and sent[0]["content"].splitlines()[0] in chat
    assert json.loads(pane.input_view.toPlainText()) == gen.input  # the raw JSON, on its own tab
    assert "tokens" in pane.span_facts.text()

    recall = next(r.span for r in pane.layout_model.rows if r.span.name == "memory: recall")
    pane.select_span(recall.span_id)
    assert not pane.tabs.isTabVisible(TAB_MESSAGES)
    assert json.loads(pane.span_json_view.toPlainText())["spanId"] == recall.span_id


def test_thread_filter_follows_the_selection_and_all_threads_widens_it(no_leaked_widgets, qtbot, make_session,
                                                                       demo_db):
    pane = open_pane(qtbot, make_session, demo_db)
    reload(qtbot, pane, lambda: pane.set_selection(Selection("li-wei", "liwei-shanghai")))
    assert len(pane.traces) == 3 and {t.thread_id for t in pane.traces} == {"liwei-shanghai"}
    assert pane.total == 3 and "thread liwei-shanghai" in pane.subtitle.text()
    qtbot.waitUntil(lambda: pane.trace_id == pane.traces[0].trace_id and bool(pane.spans)
                    and pane.spans[0].trace_id == pane.trace_id, timeout=WAIT)
    tool = [r.span for r in pane.layout_model.rows if r.span.span_type == "tool_call"]
    assert tool and tool[0].name == "tool: 'getWeather'"

    reload(qtbot, pane, lambda: pane.commands.run("traces.all_threads"))
    assert pane.all_threads_action.isChecked() and len(pane.traces) == 17
    of_li = [t.trace_id for t in pane.traces if t.resource_id == "li-wei"]
    reload(qtbot, pane, lambda: pane.commands.run("traces.all_threads"))
    reload(qtbot, pane, lambda: pane.set_selection(Selection("li-wei")))
    assert not pane.all_threads_action.isChecked() and len(of_li) > 3
    assert [t.trace_id for t in pane.traces] == of_li

    reload(qtbot, pane, lambda: pane.set_selection(Selection()))
    reload(qtbot, pane, lambda: pane.filter_edit.setText("chef"))
    assert pane.traces and {t.entity_name for t in pane.traces} == {"chef"}
    reload(qtbot, pane, lambda: pane.status_combo.setCurrentIndex(pane.status_combo.findData("error")))
    assert pane.traces == [] and pane.total == 0
    # a filter that matches nothing is not "no traces yet": it says the filter left nothing (since session 36)
    assert "No traces yet" not in pane.banner.text() and pane.banner.text().startswith("No run matches the filter")


def test_error_spans_are_marked_and_their_stack_is_shown(no_leaked_widgets, qtbot, make_session, tmp_path):
    db = tmp_path / "memory.db"
    open_store(db).close()
    stack = "Traceback (most recent call last):\n  File \"agent.py\", line 3\nRuntimeError: weather API down"
    DuckDBObservabilityStore(tmp_path / "observability.duckdb").write_spans([
        span("T1", "root", 0, 2, thread_id="t1", resource_id="r1", name="agent run: 'travel'", entity_name="travel"),
        span("T1", "tool", 0.5, 1.0, "root", "tool_call", name="tool: 'getWeather'", input={"city": "Lisbon"},
             error={"message": "weather API down", "name": "RuntimeError", "details": {"stack": stack}}),
        span("T0", "older", -10, -9, name="agent run: 'chef'"),
    ])
    pane = open_pane(qtbot, make_session, db)
    assert [t.status for t in pane.traces] == ["error", "ok"]
    assert pane.trace_model.index(0, 5).data() == "2 (1 err)"
    row = next(r for r in pane.layout_model.rows if r.span.span_id == "tool")
    assert row.error and row.depth == 1 and 0 < row.offset < 1
    pane.select_span("tool")
    assert pane.tabs.isTabVisible(TAB_ERROR) and pane.tabs.currentIndex() == TAB_ERROR
    text = pane.error_view.toPlainText()
    assert "RuntimeError: weather API down" in text and 'File "agent.py", line 3' in text
    assert pane.span_title.text().startswith("⚠")


@pytest.mark.parametrize("theme", [None, "dark", "light"])
def test_a_runs_spans_with_errors_read_whole_in_a_narrow_list(no_leaked_widgets, qtbot, make_session, tmp_path,
                                                              themed, theme):
    """In a narrow window the Spans cell of a run with a failed span, "2 (1 err)", read "2 (1 …" (found by
    s35-walk11). Where the whole does not fit, the count alone is drawn, whole (the Status column, "ok, 1 err",
    and the cell's tooltip say the errors)."""
    db = tmp_path / "memory.db"
    open_store(db).close()
    DuckDBObservabilityStore(tmp_path / "observability.duckdb").write_spans([
        span("T1", "root", 0, 2, thread_id="t1", resource_id="r1", name="agent run: 'travel'", entity_name="travel"),
        span("T1", "tool", 0.5, 1.0, "root", "tool_call", name="tool: 'getWeather'",
             error={"message": "weather API down", "name": "RuntimeError"}),
    ])
    pane = open_pane(qtbot, make_session, db)
    table, col = pane.trace_table, 5
    index = pane.trace_model.index(0, col)
    assert index.data() == "2 (1 err)" and index.data(Qt.ItemDataRole.ToolTipRole) == "2 (1 err)"
    metrics, drawn_at = table.fontMetrics(), {}
    for width in range(2400, 440, -40):
        pane.resize(width, 700)
        qtbot.waitUntil(lambda w=width: pane.width() == w, timeout=WAIT)
        qtbot.wait(10)  # (the viewport's resize reaches the column fit)
        if table.isColumnHidden(col):
            continue
        drawn = table.itemDelegate().shown_text(table, index)
        assert drawn in ("2 (1 err)", "2"), (width, drawn)
        assert metrics.horizontalAdvance(drawn) <= table.columnWidth(col) - 6, (width, drawn, table.columnWidth(col))
        drawn_at[width] = drawn
    assert set(drawn_at.values()) == {"2 (1 err)", "2"}, drawn_at  # (both: wide and narrow)


def test_paged_list_loads_more_on_request(no_leaked_widgets, qtbot, make_session, tmp_path):
    db = tmp_path / "memory.db"
    open_store(db).close()
    DuckDBObservabilityStore(tmp_path / "observability.duckdb").write_spans(
        [span(f"T{i:03d}", f"s{i}", i, i + 0.5, name=f"run {i:03d}") for i in range(120)])
    pane = open_pane(qtbot, make_session, db)
    assert len(pane.traces) == PAGE and pane.total == 120
    assert pane.traces[0].name == "run 119"  # newest first
    assert pane.commands.command("traces.load_more").is_enabled
    reload(qtbot, pane, lambda: pane.commands.run("traces.load_more"))
    reload(qtbot, pane, lambda: pane.more_btn.click())
    assert len(pane.traces) == 120 and pane.traces[-1].name == "run 000"
    assert len({t.trace_id for t in pane.traces}) == 120
    assert not pane.commands.command("traces.load_more").is_enabled
    assert pane.count_label.text().startswith("120 of 120")


def test_a_trace_opened_by_id_past_the_first_page_stays_when_the_list_reloads(no_leaked_widgets, qtbot,
                                                                              make_session, tmp_path):
    """Replay's Open Trace opens a trace by id, which may not be on the list's first page; a later reload of
    the same list (the trace file changed) keeps showing it, read again. Another scope clears it."""
    db = tmp_path / "memory.db"
    open_store(db).close()
    duck = tmp_path / "observability.duckdb"
    DuckDBObservabilityStore(duck).write_spans(
        [span(f"T{i:03d}", f"s{i}", i, i + 0.5, name=f"run {i:03d}") for i in range(120)])
    pane = open_pane(qtbot, make_session, db)
    assert "T005" not in {t.trace_id for t in pane.traces}
    pane.open_trace("T005")
    qtbot.waitUntil(lambda: bool(pane.spans) and pane.spans[0].trace_id == "T005", timeout=WAIT)

    DuckDBObservabilityStore(duck).write_spans([span("T500", "s500", 500, 501, name="run 500")])
    reload(qtbot, pane, pane.poll)  # the file changed: the same list is read again
    assert pane.traces[0].trace_id == "T500"
    qtbot.waitUntil(lambda: pane.trace_id == "T005" and bool(pane.spans) and pane.spans[0].trace_id == "T005",
                    timeout=WAIT)
    assert "not in this list" not in pane.span_facts.text()

    reload(qtbot, pane, lambda: pane.filter_edit.setText("run 11"))  # another list: the trace goes
    assert pane.trace_id != "T005" and all(s.trace_id != "T005" for s in pane.spans)


def test_a_trace_opened_by_id_that_is_not_stored_says_so(no_leaked_widgets, qtbot, make_session, demo_db):
    pane = open_pane(qtbot, make_session, demo_db)
    pane.open_trace("no-such-trace")
    qtbot.waitUntil(lambda: pane.trace_id is None, timeout=WAIT)
    assert pane.spans == []
    assert "Trace no-such-trace is not in the trace store" in pane.span_facts.text()


HOLD_LOCK = textwrap.dedent(
    """
    import sys, duckdb
    con = duckdb.connect(sys.argv[1])  # read-write: nobody else may open the file now
    print("locked", flush=True)
    sys.stdin.readline()
    con.close()
    """
)


def test_busy_trace_file_shows_the_last_good_list_and_recovers(no_leaked_widgets, qtbot, make_session, demo_db):
    pane = open_pane(qtbot, make_session, demo_db)
    duck = demo_db.with_name("observability.duckdb")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(duck)], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        reload(qtbot, pane, pane.refresh)
        assert pane.flags["busy"] and pane.flags["stale"]
        assert pane.banner.isVisible() and pane.banner.level == "warning"
        # (the holder is a program, not an agent: the banner says to close it there if it lasts)
        assert "Another process has the trace file open" in pane.banner.text()
        assert "close the file in that program" in pane.banner.text()
        assert "showing results from" in pane.banner.text()
        assert len(pane.traces) == 17  # the last good answer stays on screen
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=60)
    reload(qtbot, pane, pane.refresh)
    assert not pane.flags["busy"] and not pane.banner.isVisible()


def test_no_traces_yet_then_the_first_run_appears(no_leaked_widgets, qtbot, make_session, tmp_path):
    db = tmp_path / "memory.db"
    open_store(db).close()
    duck = tmp_path / "observability.duckdb"
    pane = open_pane(qtbot, make_session, db)
    assert pane.traces == [] and pane.flags["missing"]
    assert pane.banner.isVisible() and "No traces yet" in pane.banner.text() and str(duck) in pane.banner.text()
    assert not duck.exists()  # looking did not create the trace file

    DuckDBObservabilityStore(duck).write_spans([span("T1", "root", 0, 1, name="agent run: 'first'")])
    reload(qtbot, pane, pane.poll)  # what the 2 s timer does: stat the file, reload when it changed
    assert [t.name for t in pane.traces] == ["agent run: 'first'"] and not pane.banner.isVisible()


JSONB = ("attributes", "input", "output", "error")


def _insert(con: Any, **row: Any) -> None:
    cols = list(row)
    values = ", ".join("jsonb(?)" if c in JSONB else "?" for c in cols)
    params = tuple(json.dumps(row[c]) if c in JSONB else row[c] for c in cols)
    quoted = ", ".join(f'"{c}"' for c in cols)
    con.execute(f"INSERT INTO mastra_ai_spans ({quoted}) VALUES ({values})", params)


def _create_spans_table(con: Any) -> None:
    con.execute('CREATE TABLE mastra_ai_spans ("traceId" TEXT NOT NULL, "spanId" TEXT NOT NULL, '
                '"name" TEXT NOT NULL, "spanType" TEXT NOT NULL, "isEvent" INTEGER NOT NULL, '
                '"startedAt" TEXT NOT NULL, "parentSpanId" TEXT, "entityType" TEXT, "entityId" TEXT, '
                '"entityName" TEXT, "parentEntityType" TEXT, "parentEntityId" TEXT, "parentEntityName" TEXT, '
                '"rootEntityType" TEXT, "rootEntityId" TEXT, "rootEntityName" TEXT, "userId" TEXT, '
                '"organizationId" TEXT, "resourceId" TEXT, "runId" TEXT, "sessionId" TEXT, "threadId" TEXT, '
                '"requestId" TEXT, "environment" TEXT, "serviceName" TEXT, "scope" TEXT, '
                '"entityVersionId" TEXT, "parentEntityVersionId" TEXT, "rootEntityVersionId" TEXT, '
                '"experimentId" TEXT, "source" TEXT, "metadata" TEXT, "tags" TEXT, "attributes" TEXT, '
                '"links" TEXT, "input" TEXT, "output" TEXT, "error" TEXT, "endedAt" TEXT, '
                '"requestContext" TEXT, "createdAt" TEXT NOT NULL, "updatedAt" TEXT, UNIQUE (spanId, traceId))')


def _mastra_db_with_spans(tmp_path: Path) -> Path:
    """A database Mastra wrote, in its rollback journal mode, with two runs in its spans table."""
    db = tmp_path / "mastra.db"
    make_mastra_db(db)
    con = libsql.connect(str(db))
    _create_spans_table(con)
    common = {"isEvent": 0, "threadId": "mastra-thread", "resourceId": "user-42"}
    _insert(con, traceId="T1", spanId="root", name="agent run: 'chef'", spanType="agent_run",
            startedAt="2026-01-01T10:00:00.000Z", endedAt="2026-01-01T10:00:02.000Z",
            createdAt="2026-01-01T10:00:00.000Z", entityName="chef", **common)
    _insert(con, traceId="T1", spanId="gen", parentSpanId="root", name="llm: 'gpt-4o'",
            spanType="model_generation", startedAt="2026-01-01T10:00:00.500Z",
            endedAt="2026-01-01T10:00:01.800Z", createdAt="2026-01-01T10:00:00.500Z",
            input={"messages": [{"role": "user", "content": [{"type": "text", "text": "hello from mastra"}]}]},
            output={"text": "hi, I remember you"},
            attributes={"usage": {"inputTokens": 11, "outputTokens": 4, "totalTokens": 15}}, **common)
    _insert(con, traceId="T2", spanId="r2", name="agent run: 'chef'", spanType="agent_run",
            startedAt="2026-01-01T09:00:00.000Z", endedAt="2026-01-01T09:00:01.000Z",
            createdAt="2026-01-01T09:00:00.000Z", error={"message": "model refused"}, **common)
    con.commit()
    con.close()
    return db


def test_reads_a_mastra_database_spans_table(no_leaked_widgets, qtbot, make_session, tmp_path):
    db = _mastra_db_with_spans(tmp_path)
    before = file_state(db)

    pane = open_pane(qtbot, make_session, db)
    assert pane.source is not None and pane.source.kind == "libsql"
    assert "Mastra spans table" in pane.subtitle.text()
    assert [(t.trace_id, t.status, t.total_tokens) for t in pane.traces] == [("T1", "ok", 15), ("T2", "error", 0)]
    pane.select_span("gen")
    assert "hello from mastra" in pane.chat_view.toPlainText()
    assert "hi, I remember you" in pane.chat_view.toPlainText()
    pane.select_trace(1)
    qtbot.waitUntil(lambda: pane.trace_id == "T2" and bool(pane.spans) and pane.spans[0].trace_id == "T2",
                    timeout=WAIT)
    assert pane.tabs.currentIndex() == TAB_ERROR and "model refused" in pane.error_view.toPlainText()
    assert file_state(db) == before
    assert not db.with_name("observability.duckdb").exists()


LATE_RUN = ('INSERT INTO mastra_ai_spans ("traceId", "spanId", name, "spanType", "isEvent", "startedAt", "createdAt", '
            "\"threadId\") VALUES ('T9', 'r9', 'agent run: late', 'agent_run', 0, '2026-01-01T11:00:00.000Z', "
            "'2026-01-01T11:00:00.000Z', 'mastra-thread')")


def test_a_mastra_database_locked_by_another_process_keeps_the_window_running_while_the_list_waits(
        no_leaked_widgets, qtbot, make_session, tmp_path, monkeypatch):
    """Another process holds the EXCLUSIVE lock of a Mastra database (rollback journal, as Mastra writes it):
    the spans reader's wait leaves the GIL free, so the UI thread keeps running (it waited in SQLite's busy
    handler, which keeps the GIL: the window stood still for the read), and the list shows the run the other
    process committed when it let go."""
    db = _mastra_db_with_spans(tmp_path)
    pane = open_pane(qtbot, make_session, db)
    assert pane.source is not None and pane.source.reader is not None
    # Longer than the locker's watchdog: a wait in SQLite's busy handler would hold the UI until it let go.
    pane.source.reader.read_budget_s = 300
    # Where the traces are kept is known already: finding it again reads the database too, and that read's
    # wait (GIL-free, ``test_main_window``'s locked open) would come first; this one is the spans reader's.
    source = pane.source
    monkeypatch.setattr(pane.resolver, "resolve", lambda: source)
    sent: list[str] = []  # the spans reader's statements, told on its worker thread before they run
    stop = observe_statements(lambda _p, statement, _a, _ro, in_database: in_database and sent.append(statement))
    locker = subprocess.Popen([sys.executable, "-c", HOLD_EXCLUSIVE, str(db), LATE_RUN],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        loaded: list[int] = []
        pane.traces_loaded.connect(lambda: loaded.append(1))
        pane.refresh()
        qtbot.waitUntil(lambda: bool(sent), timeout=WAIT)  # its first statement meets the lock
        ticks = [0]
        timer = QTimer(pane)
        timer.setInterval(5)
        timer.timeout.connect(lambda: ticks.__setitem__(0, ticks[0] + 1))
        timer.start()
        qtbot.waitUntil(lambda: ticks[0] > 40, timeout=50_000)  # the UI thread ticks meanwhile
        timer.stop()
        assert not loaded  # still waiting for the lock: nothing failed, nothing shown as busy
        assert locker.stdin is not None
        with qtbot.waitSignal(pane.traces_loaded, timeout=WAIT):
            locker.stdin.write("\n")
            locker.stdin.flush()
            assert locker.stdout.readline().strip() == "released when told"  # the UI never stood still that long
        assert locker.wait(30) == 0
    finally:
        stop()
        if locker.poll() is None:
            locker.communicate("\n", timeout=90)
    assert [t.trace_id for t in pane.traces] == ["T9", "T1", "T2"] and not pane.flags["busy"]


def test_browsing_never_writes_the_trace_file(no_leaked_widgets, qtbot, make_session, demo_db):
    duck = demo_db.with_name("observability.duckdb")
    before = file_state(duck)
    pane = open_pane(qtbot, make_session, demo_db)
    for row in range(len(pane.traces)):
        trace_id = pane.traces[row].trace_id
        pane.select_trace(row)
        qtbot.waitUntil(lambda: pane.trace_id == trace_id and bool(pane.spans)
                        and pane.spans[0].trace_id == trace_id, timeout=WAIT)
        for r in pane.layout_model.rows:
            pane.select_span(r.span.span_id)
    reload(qtbot, pane, lambda: pane.set_selection(Selection("ada", "ada-groceries")))
    reload(qtbot, pane, lambda: pane.filter_edit.setText("chef"))
    pane.poll()
    qtbot.waitUntil(lambda: not pane._polling and not pane._loading, timeout=WAIT)
    reload(qtbot, pane, pane.refresh)
    assert file_state(duck) == before


def test_registered_in_the_main_window_and_the_palette(no_leaked_widgets, qtbot, make_session, demo_db):
    assert TRACES in PANES and (TRACES.name, TRACES.title) == ("traces", "Traces")
    assert TRACES.build.__annotations__["return"] == "TracesPane"  # the tab builds a TracesPane
    pane = open_pane(qtbot, make_session, demo_db)
    ids = {c.id for c in pane.palette_commands()}
    assert {"traces.refresh", "traces.load_more", "traces.all_threads", "traces.copy_span"} <= ids
    pane.commands.run("traces.copy_span")
    from PySide6.QtGui import QGuiApplication

    assert json.loads(QGuiApplication.clipboard().text())["traceId"] == pane.trace_id


def test_mastra_point_events_do_not_show_as_running(no_leaked_widgets, qtbot, make_session, tmp_path):
    db = tmp_path / "mastra.db"
    make_mastra_db(db)
    con = libsql.connect(str(db))
    _create_spans_table(con)
    common = {"threadId": "mastra-thread", "resourceId": "user-42"}
    _insert(con, traceId="T1", spanId="root", name="agent run: 'chef'", spanType="agent_run", isEvent=0,
            startedAt="2026-01-01T10:00:00.000Z", endedAt="2026-01-01T10:00:02.000Z",
            createdAt="2026-01-01T10:00:00.000Z", **common)
    _insert(con, traceId="T1", spanId="ev", parentSpanId="root", name="tool approval", spanType="generic",
            isEvent=1, startedAt="2026-01-01T10:00:01.000Z", createdAt="2026-01-01T10:00:01.000Z", **common)
    _insert(con, traceId="T2", spanId="solo", name="chunk received", spanType="generic", isEvent=1,
            startedAt="2026-01-01T09:00:00.000Z", createdAt="2026-01-01T09:00:00.000Z", **common)
    con.commit()
    con.close()

    pane = open_pane(qtbot, make_session, db)
    assert [(t.trace_id, t.status) for t in pane.traces] == [("T1", "ok"), ("T2", "ok")]
    assert pane.trace_model.index(1, 0).data() == "ok"
    assert pane.select_span("ev")
    index = pane.tree.currentIndex()
    duration = index.sibling(index.row(), COL_DURATION).data()
    assert duration == "event" and "running" not in pane.span_facts.text()
    assert "point event" in pane.span_facts.text()


def test_a_damaged_trace_file_says_what_to_do(no_leaked_widgets, qtbot, make_session, demo_db):
    """A trace file that is not DuckDB's (damaged, or another program's) must not end at DuckDB's own error:
    the banner says the file holds no conversation and how to get a working one."""
    trace_file = demo_db.parent / "observability.duckdb"
    trace_file.write_bytes(b"not a duckdb file " * 500)
    before = trace_file.read_bytes()
    pane = TracesPane(make_session(demo_db))
    qtbot.addWidget(pane)
    pane.show()
    qtbot.waitUntil(lambda: pane.banner.isVisible() and "could not be read" in pane.banner.label.text(),
                    timeout=WAIT)
    text = pane.banner.label.text()
    assert text.startswith("Traces could not be read: ")
    assert "holds traces only (no conversation)" in text and "delete it, then Reload" in text
    assert trace_file.read_bytes() == before  # looking never moves or rewrites the file


def test_the_pane_tells_a_broken_trace_file_by_the_engines_own_rule(no_leaked_widgets, qtbot, make_session,
                                                                   demo_db):
    """One home for DuckDB's words about a broken file: the writer that sets such a file aside and the pane
    that explains it use ``core.traces.is_broken_trace_file_error``; the pane kept its own copy of the
    phrases (which would drift from the writer's)."""
    import duckdb

    from core.traces import is_broken_trace_file_error

    studio = Path(__file__).resolve().parents[2] / "studio"
    copies = [p.name for p in studio.rglob("*.py") if "not a valid duckdb database file" in p.read_text("utf-8")]
    assert copies == []
    trace_file = demo_db.parent / "observability.duckdb"
    trace_file.write_bytes(trace_file.read_bytes()[:5000] if trace_file.exists() else b"\0" * 5000)  # truncated
    with pytest.raises(duckdb.Error) as caught:
        duckdb.connect(str(trace_file), read_only=True).close()
    assert is_broken_trace_file_error(caught.value)
    assert not is_broken_trace_file_error(duckdb.IOException(
        'Could not set lock on file "observability.duckdb": Conflicting lock is held'))  # busy, not broken
    pane = TracesPane(make_session(demo_db))
    qtbot.addWidget(pane)
    pane.show()
    qtbot.waitUntil(lambda: pane.banner.isVisible() and "could not be read" in pane.banner.label.text(),
                    timeout=WAIT)
    assert "holds traces only (no conversation)" in pane.banner.label.text()


def test_a_list_that_cannot_be_read_does_not_keep_the_previous_threads_traces(no_leaked_widgets, qtbot,
                                                                             make_session, demo_db):
    """Another thread picked while the trace file became unreadable: the list kept the thread shown before
    (its traces, "thread ada-weekend" in the header) under the new selection, its spans "reading…" forever."""
    from studio.selection import Selection

    pane = open_pane(qtbot, make_session, demo_db)
    pane.set_selection(Selection("ada", "ada-weekend"))
    qtbot.waitUntil(lambda: bool(pane.traces) and all(t.thread_id == "ada-weekend" for t in pane.traces),
                    timeout=WAIT)
    (demo_db.parent / "observability.duckdb").write_bytes(b"not a duckdb file " * 500)
    pane.set_selection(Selection("li-wei", "liwei-shanghai"))
    # (the open trace's own read may fail first, with the same banner: wait for the list's answer)
    qtbot.waitUntil(lambda: pane.banner.isVisible() and "could not be read" in pane.banner.label.text()
                    and pane.trace_model.rowCount() == 0, timeout=WAIT)
    assert pane.traces == [] and pane.spans == []
    assert pane.subtitle.text().startswith("thread liwei-shanghai") and "ada-weekend" not in pane.subtitle.text()
    assert "reading" not in pane.tree_caption.text()


def _blocking_turn(db: Path, gate: Any, entered: Any) -> Any:
    """A real agent turn (scripted model) whose tool call blocks until ``gate`` is set, in a thread."""
    import threading

    from core import Agent
    from core.agent import Tool
    from core.llm import ScriptedModel
    from core.llm.scripted import ScriptedReply, tool_call

    def lookup(args: dict[str, Any], _ctx: Any) -> dict[str, Any]:
        entered.set()
        gate.wait(120)
        return {"found": args.get("q")}

    store = open_store(db)
    agent = Agent("chef", instructions="Be brief.", tracer=store.tracer(),
                  model=ScriptedModel([ScriptedReply(tool_calls=(tool_call("lookup", {"q": "peanuts"}),)), "None."]),
                  tools=[Tool("lookup", "Look it up.", lookup)])

    def run() -> None:
        try:
            agent.generate("Anything with peanuts?", memory={"resource": "ada", "thread": "t1"})
            store.tracer().flush(30)
        finally:
            store.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _tool_running(pane: TracesPane) -> bool:
    return any(r.running and r.span.span_type == "tool_call" for r in pane.layout_model.rows)


def test_a_run_in_progress_shows_as_running_then_as_finished(no_leaked_widgets, qtbot, make_session, tmp_path):
    import threading

    db = tmp_path / "memory.db"
    open_store(db).close()
    gate, entered = threading.Event(), threading.Event()
    turn = _blocking_turn(db, gate, entered)
    try:
        assert entered.wait(60)
        pane = open_pane(qtbot, make_session, db)

        def poll_until_tool_runs() -> bool:  # the pane's own 2 s poll, driven here
            if not _tool_running(pane) and not pane._polling and not pane.loading:
                pane.poll()
            return _tool_running(pane)

        qtbot.waitUntil(poll_until_tool_runs, timeout=WAIT)
        (trace,) = pane.traces
        assert trace.status == "running" and pane.trace_model.index(0, 0).data() == "running"
        assert pane.trace_model.index(0, 4).data() == "running"  # Duration: no made-up length
        assert "running" in pane.tree_caption.text()
        tool_row = next(r for r in pane.layout_model.rows if r.span.span_type == "tool_call")
        assert tool_row.duration_text == "running"
        assert pane.select_span(tool_row.span.span_id)
        assert "running, written by the process writing it (pid" in pane.span_facts.text()
        assert pane.grab().save(str(tmp_path / "running.png"))  # (the pane as drawn, to look at)
        seen = {r.span.span_id for r in pane.layout_model.rows}
    finally:
        gate.set()
        turn.join(60)

    qtbot.waitUntil(lambda: (not pane._polling and not pane.loading and pane.poll() is None
                             and bool(pane.traces) and pane.traces[0].status == "ok"), timeout=WAIT)
    qtbot.waitUntil(lambda: bool(pane.spans) and all(not s.running for s in pane.spans), timeout=WAIT)
    ids = [s.span_id for s in pane.spans]
    assert len(ids) == len(set(ids)) == pane.traces[0].span_count and seen <= set(ids)
    assert pane.trace_model.index(0, 0).data() == "ok"
    assert pane.grab().save(str(tmp_path / "finished.png"))


KILLED_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from core import Agent, open_store
    from core.agent import Tool
    from core.llm import ScriptedModel
    from core.llm.scripted import ScriptedReply, tool_call

    def lookup(args, ctx):
        print("in tool", flush=True)
        sys.stdin.readline()
        return {}

    store = open_store(Path(sys.argv[1]))
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("lookup", {"q": "x"}),)), "done"])
    Agent("chef", instructions="Be brief.", model=model, tools=[Tool("lookup", "Look it up.", lookup)],
          tracer=store.tracer()).generate("Anything?", memory={"resource": "ada", "thread": "t1"})
    """
)


def test_a_run_whose_process_was_killed_says_it_never_finished(no_leaked_widgets, qtbot, make_session, tmp_path):
    import os
    import signal

    db = tmp_path / "memory.db"
    open_store(db).close()
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(db)], cwd=REPO, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "in tool"
        pane = open_pane(qtbot, make_session, db)

        def poll_until_tool_runs() -> bool:
            if not _tool_running(pane) and not pane._polling and not pane.loading:
                pane.poll()
            return _tool_running(pane)

        qtbot.waitUntil(poll_until_tool_runs, timeout=WAIT)
        assert pane.traces[0].status == "running"
        child.send_signal(signal.SIGKILL)
        child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(60)

    # No file of the trace store changed: the poll sees the writer's lease go, and reads again.
    reload(qtbot, pane, pane.poll)
    qtbot.waitUntil(lambda: any(r.unfinished for r in pane.layout_model.rows), timeout=WAIT)
    _says_never_finished(pane, child.pid)
    assert pane.grab().save(str(tmp_path / "unfinished.png"))


def test_a_postgres_run_shows_running_then_never_finished_once_its_process_was_killed(
        no_leaked_widgets, qtbot, make_session, pg_url, tmp_path):
    """The same as on DuckDB for a database whose spans live in its own Postgres table: the writer's lease is
    an advisory lock, and the poll (which reads no file) sees it go when the process is killed."""
    import os
    import signal

    open_store(pg_url).close()
    writer = KILLED_WRITER.replace("open_store(Path(sys.argv[1]))", "open_store(sys.argv[1])")
    child = subprocess.Popen([sys.executable, "-c", writer, pg_url], cwd=REPO, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "in tool"
        pane = open_pane(qtbot, make_session, pg_url)
        assert pane.source is not None and pane.source.kind == "postgres"

        def poll_until_tool_runs() -> bool:
            if not _tool_running(pane) and not pane._polling and not pane.loading:
                pane.poll()
            return _tool_running(pane)

        qtbot.waitUntil(poll_until_tool_runs, timeout=WAIT)
        (trace,) = pane.traces
        assert trace.status == "running" and pane.trace_model.index(0, 0).data() == "running"
        assert pane.trace_model.index(0, 4).data() == "running"
        assert "running" in pane.tree_caption.text()
        tool_row = next(r for r in pane.layout_model.rows if r.span.span_type == "tool_call")
        assert tool_row.duration_text == "running"
        assert pane.select_span(tool_row.span.span_id)
        assert f"running, written by the process writing it (pid {child.pid}" in pane.span_facts.text()
        assert pane.grab().save(str(tmp_path / "pg-running.png"))
        child.send_signal(signal.SIGKILL)
        child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(60)

    # No row changed: the poll sees the writer's lease go (pg_locks), and reads again.
    def poll_until_unfinished() -> bool:
        if not pane._polling and not pane.loading and not any(r.unfinished for r in pane.layout_model.rows):
            pane.poll()
        return any(r.unfinished for r in pane.layout_model.rows)

    qtbot.waitUntil(poll_until_unfinished, timeout=WAIT)
    _says_never_finished(pane, child.pid)
    assert pane.grab().save(str(tmp_path / "pg-unfinished.png"))


def _says_never_finished(pane, pid: int) -> None:
    """The pane's one run, whose writer (process ``pid``) was killed, reads as never finished everywhere:
    its list row, the tree's caption and root row, the root span's facts; no row reads as running."""
    (trace,) = pane.traces
    assert trace.status == "unfinished"
    assert pane.trace_model.index(0, 0).data() == "never finished"
    assert pane.trace_model.index(0, 4).data() == "never finished"
    assert "never finished" in pane.tree_caption.text()
    assert not any(r.running for r in pane.layout_model.rows)
    root = next(r for r in pane.layout_model.rows if r.span.parent_span_id is None)
    assert root.unfinished and root.duration_text == "never finished"
    assert pane.select_span(root.span.span_id)
    assert f"never finished: the process writing it (pid {pid}" in pane.span_facts.text()
    # Drawn whole, not "never …" / "never fi…": the list's Status and Duration cells and the tree's Duration
    # (a 1,200 px pane has no room for "never finished" in them)
    for view, index in ((pane.trace_table, pane.trace_model.index(0, 0)), (pane.trace_table, pane.trace_model.index(0, 4)),
                        (pane.tree, pane.span_model.index(0, COL_DURATION))):
        _drawn_whole(view, index, ("never finished", "unfinished"))
    # and the Timeline cell says it (its bar runs to the trace's end: no room was left beside it for the words)
    assert [text for text, _ in _timeline_labels(pane.tree, pane.span_model.index(0, COL_TIMELINE))] == [
        "never finished"]


def _timeline_labels(view: Any, index: Any) -> list[tuple[str, Any]]:
    """The texts the span tree's delegate draws in ``index``'s Timeline cell, each with the room it was given (in the
    cell's coordinates), painted as the view paints it (a painter that notes each ``drawText``)."""
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtWidgets import QStyleOptionViewItem

    drawn: list[tuple[str, Any]] = []

    class Noting(QPainter):
        def drawText(self, *args: Any) -> None:  # noqa: N802 (Qt's name)
            rect, _flags, text = args
            drawn.append((text, QRectF(rect)))
            super().drawText(*args)

    option = QStyleOptionViewItem()
    view.initViewItemOption(option)
    option.rect = view.visualRect(index)
    image = QImage(option.rect.right() + 1, option.rect.bottom() + 1, QImage.Format.Format_ARGB32)
    painter = Noting(image)
    painter.setFont(view.font())
    try:
        view.itemDelegate().paint(painter, option, index)
    finally:
        painter.end()
    return [(text, rect.translated(-option.rect.left(), -option.rect.top())) for text, rect in drawn]


@pytest.mark.parametrize("theme", ["dark"])
def test_the_timeline_says_a_span_never_finished_in_the_narrowest_tree(no_leaked_widgets, qtbot, make_session,
                                                                       demo_db, themed, theme):
    """The Timeline cell of a span whose writer died drew no label at all when the tree was narrow: its bar runs to
    the trace's end, so "never finished" fitted on neither side of it (and the Duration cell beside it reads
    "unfinished" or "—" there, saying that the Timeline says it). At the least width the pane gives the waterfall
    the label is drawn on the bar, whole, in the room of the cell."""
    import dataclasses

    from studio.logic.traces_layout import layout_trace
    from studio.panes.traces import SPAN_TIMELINE_PX

    pane = open_pane(qtbot, make_session, demo_db)
    pane.resize(pane.minimumSizeHint().width(), 600)
    qtbot.waitUntil(lambda: pane.tree.columnWidth(COL_TIMELINE) <= SPAN_TIMELINE_PX + 2, timeout=WAIT)
    root = next(s for s in pane.spans if s.parent_span_id is None)
    spans = [dataclasses.replace(s, ended_at=None) if s is root else s for s in pane.spans]
    pane.layout_model = layout_trace(spans, unfinished=frozenset({root.span_id}))
    pane.span_model.set_layout(pane.layout_model)
    qtbot.wait(50)
    index = pane.span_model.index_of(root.span_id, COL_TIMELINE)
    cell = pane.tree.visualRect(index)
    labels = _timeline_labels(pane.tree, index)
    assert [text for text, _ in labels] in (["never finished"], ["unfinished"]), (labels, cell.width())
    (text, room), = labels
    assert room.left() >= 0 and room.right() <= cell.width(), (room, cell.width())
    assert pane.tree.fontMetrics().horizontalAdvance(text) <= room.width(), (text, room.width())
    assert pane.grab().save(str(demo_db.parent / "narrow-unfinished.png"))


def _drawn_whole(view: Any, index: Any, forms: tuple[str, ...]) -> str:
    """The text ``view`` draws in ``index``'s cell: one of ``forms``, in the room the cell's text has."""
    from PySide6.QtWidgets import QStyleOptionViewItem

    from studio.widgets.item_text import text_room

    delegate = view.itemDelegate()
    shown = delegate.shown_text(view, index)
    option = QStyleOptionViewItem()
    view.initViewItemOption(option)
    option.rect = view.visualRect(index)
    delegate.initStyleOption(option, index)
    assert shown in forms, (shown, forms)
    assert option.fontMetrics.horizontalAdvance(shown) <= text_room(option), (shown, text_room(option))
    return shown


@pytest.mark.parametrize("width", [660, 1120])  # the pane in a 1,100 and a 1,500 px window
def test_every_status_a_run_can_have_reads_whole_in_the_list(no_leaked_widgets, qtbot, make_session, demo_db,
                                                              width):
    """The Status column at its floor cut "never finished" to "never …" (and "ok, 12 err" to "ok, 12 e…"), the
    Duration cell beside it "never fi…": each status reads whole in its cell, in a shorter form of its own words
    where the whole does not fit; the cells' text (what the tooltip and a screen reader say) stays whole."""
    import dataclasses

    pane = open_pane(qtbot, make_session, demo_db)
    pane.resize(width, 740)
    qtbot.waitUntil(lambda: abs(pane.width() - width) < 2, timeout=WAIT)
    qtbot.wait(50)  # (the resize events are delivered)
    base = pane.traces[0]
    runs = [dataclasses.replace(base, status="ok", error_count=0),
            dataclasses.replace(base, status="error", failed_itself=True, error_count=1),
            dataclasses.replace(base, status="running", ended_at=None, duration_ms=None),
            dataclasses.replace(base, status="unfinished", ended_at=None, duration_ms=None)]
    runs += [dataclasses.replace(base, status="error", failed_itself=False, error_count=n) for n in (1, 12, 1234)]
    pane.trace_model.set_rows(runs)
    expected = [("ok",), ("error",), ("running",), ("never finished", "unfinished"), ("ok, 1 err",),
                ("ok, 12 err",), ("ok, 1,234 err", "ok, err")]
    for row, forms in enumerate(expected):
        assert pane.trace_model.index(row, 0).data() == forms[0]
        _drawn_whole(pane.trace_table, pane.trace_model.index(row, 0), forms)
    assert pane.trace_model.index(3, 4).data() == "never finished"
    _drawn_whole(pane.trace_table, pane.trace_model.index(3, 4), ("never finished", "unfinished", "—"))


@pytest.mark.parametrize("all_threads", [False, True])
def test_at_a_1100_px_window_the_lists_fit_with_the_names_and_the_timeline_readable(
        no_leaked_widgets, qtbot, make_session, demo_db, all_threads):
    """The pane's width in a 1,100 px window (~700 px): the trace list and the span tree hold every column
    they show inside their edge (no sideways scrolling), the trace's name is whole, and the waterfall has
    room; a label too long for its place (the span's name above its details) ends in "…"."""
    from studio.widgets.elided_label import ElidedLabel

    pane = open_pane(qtbot, make_session, demo_db)
    pane.set_selection(Selection("li-wei", "liwei-shanghai"))
    qtbot.waitUntil(lambda: not pane.loading and bool(pane.traces)
                    and pane.traces[0].thread_id == "liwei-shanghai", timeout=WAIT)
    if all_threads:
        reload(qtbot, pane, pane.toggle_all_threads)
    pane.resize(660, 740)  # (a little narrower than in a 1,100 px window: fonts and scroll bars differ by style)
    qtbot.waitUntil(lambda: pane.trace_table.viewport().width() < 670 and bool(pane.spans), timeout=WAIT)
    qtbot.wait(50)  # (the resize events are delivered)
    metrics = pane.trace_table.fontMetrics()
    for view in (pane.trace_table, pane.tree):
        header = view.horizontalHeader() if view is pane.trace_table else pane.tree.header()
        assert header.length() <= view.viewport().width(), view  # nothing past the edge
    name_col = 1
    assert pane.trace_table.columnWidth(name_col) >= metrics.horizontalAdvance("agent run: 'travel'") + 8
    thread_col = pane.trace_model.columnCount() - 1
    assert pane.trace_table.isColumnHidden(thread_col) is (not all_threads)  # the header names the one thread
    timeline = pane.span_model.columnCount() - 1
    assert pane.tree.columnWidth(timeline) >= 110
    assert pane.tree.columnWidth(0) >= metrics.horizontalAdvance("memory: recall") + 40  # (+ its indent)
    title = pane.span_title
    assert isinstance(title, ElidedLabel)
    title.setText("llm: '" + "a-very-long-model-name/" * 8 + "'")
    assert title.elided() and title.toolTip() == title.text()


def test_a_first_read_that_fails_is_retried_until_the_list_shows(no_leaked_widgets, qtbot, make_session, demo_db):
    """The pane's first read of the runs list ended in an error (not a busy file): it kept no source to watch,
    its poll returned early without one, and the pane read no more until File > Reload, under a banner that
    said "Traces could not be read: …" and nothing else. It reads again by itself now, waiting longer after
    each failure; the banner says so; once the file can be read the list shows and the banner goes."""
    trace_file = demo_db.parent / "observability.duckdb"
    good = trace_file.with_name("good.duckdb")
    shutil.copyfile(trace_file, good)
    trace_file.write_bytes(b"not a duckdb file " * 500)
    pane = TracesPane(make_session(demo_db))
    qtbot.addWidget(pane)
    pane.resize(1200, 800)
    pane.show()
    qtbot.waitUntil(lambda: pane.banner.isVisible() and "could not be read" in pane.banner.label.text(),
                    timeout=WAIT)
    assert "tries again by itself" in pane.banner.label.text() and "Reload (F5) tries now" in pane.banner.label.text()
    first = pane._gen
    qtbot.waitUntil(lambda: pane._gen > first and not pane.loading and pane.banner.isVisible(),
                    timeout=WAIT)  # read again, by itself, and failed again
    assert "next in 4 s" in pane.banner.label.text()  # (a longer wait after the second failure)
    assert pane.traces == [] and pane.source is None
    good.replace(trace_file)  # the file can be read now
    qtbot.waitUntil(lambda: len(pane.traces) == 17, timeout=WAIT)
    assert pane.trace_model.rowCount() == 17 and not pane.banner.isVisible()
    assert pane.source is not None and pane.source.location.endswith("observability.duckdb")


@pytest.mark.parametrize("theme", ["dark"])
def test_a_thread_without_traced_runs_says_why_its_list_is_empty(no_leaked_widgets, qtbot, make_session, demo_db,
                                                                 themed, theme, tmp_path):
    """A thread whose messages no traced run wrote (an import, an MCP client's remember) showed a blank list under
    "Thread …: no model call reported token usage", and the span view said "The trace shown before is not in this
    list any more", as if a run had gone (found by s36-rest8's walk of the app). The banner says why the list is
    empty and what lists every run; the span view says there is nothing to show; a status filter that leaves nothing
    says so too. Looking wrote nothing."""
    from core import Memory, Message

    with open_store(demo_db) as writer:  # (what MCP's remember or an import leaves: messages, no run)
        Memory(writer).save_messages([Message.user("Remember the dentist on Friday", thread_id="remembered",
                                                   resource_id="ada")])
    pane = open_pane(qtbot, make_session, demo_db)
    assert pane.trace_id is not None and not pane.banner.isVisible()
    reload(qtbot, pane, lambda: pane.set_selection(Selection("ada", "remembered")))
    assert pane.traces == [] and pane.banner.isVisible()
    assert pane.banner.text().startswith("No traced run of this thread: its messages were saved without one")
    assert "All Threads lists the runs of every thread" in pane.banner.text()
    assert "No trace to show." in pane.span_facts.text() and "not in this list any more" not in pane.span_facts.text()
    pane.grab().save(str(tmp_path / "no-traced-run.png"))
    reload(qtbot, pane, lambda: pane.set_selection(Selection("sam", "sam-standup")))
    assert pane.traces and not pane.banner.isVisible()  # (a thread with runs: no banner)
    reload(qtbot, pane, lambda: pane.status_combo.setCurrentIndex(pane.status_combo.findText("error")))
    assert pane.traces == [] and pane.banner.text().startswith("No run matches the filter (status error)")


@pytest.mark.parametrize("width", [1440, 660])
def test_each_run_of_an_agent_says_what_it_was_asked(no_leaked_widgets, qtbot, make_session, demo_db, width):
    """Every run of an agent was listed as "agent run: 'notes-om'", nothing telling one turn from the next. The
    Trace cell adds the first words the run was asked (its root span's input, as stored); where the cell cannot
    hold it whole (a narrow list, a long input) it drops "agent run:" so the cut cell still shows those words."""
    from PySide6.QtWidgets import QStyleOptionViewItem

    from studio.widgets.item_text import text_room

    pane = open_pane(qtbot, make_session, demo_db)
    reload(qtbot, pane, lambda: pane.set_selection(Selection("sam", "sam-standup")))
    pane.resize(width, 740)
    qtbot.waitUntil(lambda: abs(pane.width() - width) < 2, timeout=WAIT)
    qtbot.wait(50)  # (the resize events are delivered)
    runs = pane.traces
    assert len(runs) >= 3 and {t.name for t in runs} == {"agent run: 'notes-om'"}
    model, view = pane.trace_model, pane.trace_table
    drawn = []
    for row, run in enumerate(runs):
        asked = run.input_text
        assert asked
        index = model.index(row, 1)
        assert index.data() == f"agent run: 'notes-om' · “{asked}”"
        tip = index.data(Qt.ItemDataRole.ToolTipRole)
        assert asked in tip and run.trace_id in tip
        option = QStyleOptionViewItem()
        view.initViewItemOption(option)
        option.rect = view.visualRect(index)
        view.itemDelegate().initStyleOption(option, index)
        cut = option.fontMetrics.elidedText(option.text, Qt.TextElideMode.ElideRight, text_room(option))
        assert cut.startswith(f"'notes-om' · “{asked.split()[0]}"), cut  # the words, not the name alone
        drawn.append(cut)
    assert len(set(drawn)) == len(drawn)  # each row reads differently
    root = next(s for s in pane.spans if s.parent_span_id is None)
    shown = next(t for t in runs if t.trace_id == root.trace_id)
    assert root.input["message"].startswith(shown.input_text.rstrip("…"))
