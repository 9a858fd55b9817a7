"""Connections kept open between uses (issue 20 item 7): the libSQL writers' one connection and the
turn's read connections, and the span writer's DuckDB connection between writes. Other processes and
the Studio must still read, write and compact; a crash loses nothing written; a turn still sees what
another process wrote."""

from __future__ import annotations

import json
from dataclasses import replace
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable

import duckdb
import pytest
import sqlalchemy as sa

from core import Memory, MemoryOptions, open_store
from core.agent import Agent
from core.llm import ScriptedModel
from core.traces.exporter import DuckDBSpanExporter
from core.traces.store import DuckDBObservabilityStore
from tests.core.test_traces_store import agent_trace

ROOT = Path(__file__).resolve().parents[2]


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert predicate()


def _agent(store: Any) -> Agent:
    memory = Memory(store, MemoryOptions(last_messages=10, working_memory={"enabled": True}))
    return Agent("kept", instructions="Be brief.", memory=memory, tracer=False,
                 model=ScriptedModel(lambda msgs, tools: f"reply to {len(msgs)} messages", name="kept"))


# -- libSQL ------------------------------------------------------------------------------------


def test_a_turn_takes_no_pool_connection_and_sets_no_busy_timeout_once_warm(tmp_path: Path) -> None:
    store = open_store(tmp_path / "kept.db")
    try:
        agent = _agent(store)
        agent.generate("first", memory={"resource": "u", "thread": "t"})
        statements: list[str] = []
        checkouts: list[int] = []
        sa.event.listen(store.db.engine, "before_cursor_execute",
                        lambda _c, _cur, statement, *_a: statements.append(" ".join(statement.split())))
        sa.event.listen(store.db.engine, "checkout", lambda *_a: checkouts.append(1))
        result = agent.generate("second", memory={"resource": "u", "thread": "t"})
        assert [m.role for m in result.saved] == ["user", "assistant"] and result.saved[0].text == "second"
        assert checkouts == []
        assert not [s for s in statements if "busy_timeout" in s]
        assert statements.count("BEGIN IMMEDIATE") == 1 and statements.count("COMMIT") == 1
        # The owner check under the write lock reads the owner alone.
        assert 'SELECT "resourceId" FROM mastra_threads WHERE id = ?' in statements
    finally:
        store.close()


HOLD_WRITE_LOCK = textwrap.dedent("""
    import sqlite3, sys, time
    con = sqlite3.connect(sys.argv[1], isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    con.execute("UPDATE mastra_threads SET title = 'held' WHERE id = 't'")
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    con.execute("COMMIT")
""")


def test_the_kept_write_connection_waits_for_another_processes_writer_without_holding_the_gil(
        tmp_path: Path) -> None:
    db = tmp_path / "kept.db"
    store = open_store(db)
    try:
        agent = _agent(store)
        agent.generate("first", memory={"resource": "u", "thread": "t"})  # the write connection exists now
        holder = subprocess.Popen([sys.executable, "-c", HOLD_WRITE_LOCK, str(db), "0.6"],
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        ticks = [0]
        done = threading.Event()

        def tick() -> None:  # another thread of this process keeps running while the turn waits
            while not done.is_set():
                ticks[0] += 1
                time.sleep(0.005)

        ticker = threading.Thread(target=tick)
        ticker.start()
        try:
            result = agent.generate("second", memory={"resource": "u", "thread": "t"})
        finally:
            done.set()
            ticker.join(10)
        assert holder.wait(30) == 0
        assert [m.role for m in result.saved] == ["user", "assistant"] and result.saved[0].text == "second"
        assert ticks[0] > 20
        with store.db.read() as conn:  # both writes landed, the other process's first
            assert conn.exec_driver_sql("SELECT title FROM mastra_threads WHERE id = 't'").first() == ("held",)
            assert conn.exec_driver_sql("SELECT count(*) FROM mastra_messages WHERE thread_id = 't'").first() == (4,)
    finally:
        store.close()


WRITE_WORKING_MEMORY = textwrap.dedent("""
    import sqlite3, sys
    con = sqlite3.connect(sys.argv[1], isolation_level=None)
    text = "# User\\n- Name: Ada"
    if not con.execute("UPDATE mastra_resources SET \\"workingMemory\\" = ? WHERE id = 'u'", (text,)).rowcount:
        con.execute("INSERT INTO mastra_resources (id, \\"workingMemory\\", \\"createdAt\\", \\"updatedAt\\") "
                    "VALUES ('u', ?, '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z')", (text,))
    con.close()
""")


def test_reads_on_kept_connections_see_every_write_of_another_process(tmp_path: Path) -> None:
    db = tmp_path / "kept.db"
    store = open_store(db)
    try:
        agent = _agent(store)
        agent.generate("first", memory={"resource": "u", "thread": "t"})
        # Another process writes between turns (Python's own SQLite is not opened in this process: a
        # second copy of SQLite here would break the engine's connections, see test_forget_resource).
        subprocess.run([sys.executable, "-c", WRITE_WORKING_MEMORY, str(db)], check=True, timeout=120)
        result = agent.generate("second", memory={"resource": "u", "thread": "t"})
        assert "Name: Ada" in json.dumps(result.prompts[0].messages)
    finally:
        store.close()


def test_disposing_the_engine_replaces_the_kept_connections(tmp_path: Path) -> None:
    store = open_store(tmp_path / "kept.db")
    try:
        agent = _agent(store)
        agent.generate("first", memory={"resource": "u", "thread": "t"})
        store.db.engine.dispose()
        checkouts: list[int] = []
        sa.event.listen(store.db.engine, "checkout", lambda *_a: checkouts.append(1))
        agent.generate("second", memory={"resource": "u", "thread": "t"})
        assert len(checkouts) == 2  # a new read connection and a new write connection
    finally:
        store.close()


def test_closing_the_store_closes_every_kept_connection_at_once(tmp_path: Path) -> None:
    """The last connection to close checkpoints the WAL and removes it: a closed store leaves the
    file alone and whole, also after the engine was disposed while connections were kept (a kept
    connection handed back to a disposed pool stayed open until garbage collection)."""
    import gc

    gc.disable()  # what is closed must be closed by ``close()``, not by the collector
    try:
        for dispose_first in (False, True):
            path = tmp_path / f"closed-{dispose_first}.db"
            store = open_store(path)
            agent = _agent(store)
            agent.generate("first", memory={"resource": "u", "thread": "t"})
            if dispose_first:
                store.db.engine.dispose()
                agent.generate("second", memory={"resource": "u", "thread": "t"})
                store.db.engine.dispose()
            store.close()
            assert not path.with_name(path.name + "-wal").exists()
            assert not path.with_name(path.name + "-shm").exists()
    finally:
        gc.enable()


# -- the span writer's DuckDB connection ---------------------------------------------------------


def _exporter(path: Path) -> DuckDBSpanExporter:
    return DuckDBSpanExporter(path, flush_interval_s=0.05, prune_interval_s=None)


def _write(exporter: DuckDBSpanExporter, trace: str) -> None:
    before = exporter.stats.written
    exporter.export(agent_trace(trace))
    wait_for(lambda: exporter.stats.written >= before + 7)


COUNT_TRACES = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from core.traces.store import DuckDBObservabilityStore
    result = DuckDBObservabilityStore(sys.argv[1], read_only=True, read_budget_s=20).count_traces()
    print(int(result), result.busy)
""")

COMPACT = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from core.traces.store import DuckDBObservabilityStore
    result = DuckDBObservabilityStore(sys.argv[1]).prune(keep_mb=0.000001, budget_s=20)
    print(result.traces_deleted, result.busy)
""")


def test_the_span_writer_keeps_the_file_between_writes_and_another_process_still_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "observability.duckdb"
    exporter = _exporter(path)
    try:
        opens: list[int] = []
        real = duckdb.connect

        def counted(*args: Any, **kwargs: Any) -> Any:
            opens.append(1)
            return real(*args, **kwargs)

        duckdb.connect = counted  # type: ignore[assignment]
        try:
            for i in range(3):
                _write(exporter, f"t{i}")
        finally:
            duckdb.connect = real  # type: ignore[assignment]
        assert len(opens) == 1 and exporter.store.holds_connection()  # type: ignore[attr-defined]
        # Another process (the Studio) waiting for the file makes the writer let go, and reads it all.
        out = subprocess.run([sys.executable, "-c", COUNT_TRACES, str(path), str(ROOT)], capture_output=True,
                             text=True, timeout=120, check=True).stdout.split()
        assert out == ["3", "False"]
        _write(exporter, "t3")  # and the writer gets the file back
        out = subprocess.run([sys.executable, "-c", COUNT_TRACES, str(path), str(ROOT)], capture_output=True,
                             text=True, timeout=120, check=True).stdout.split()
        assert out == ["4", "False"]
    finally:
        exporter.shutdown(30)
    assert not exporter.store.holds_connection()  # type: ignore[attr-defined]
    with duckdb.connect(str(path), read_only=True) as con:  # shut down: nothing holds the file
        assert con.execute("SELECT count(DISTINCT \"traceId\") FROM mastra_ai_spans").fetchone() == (4,)


def test_a_compaction_in_another_process_gets_the_kept_file(tmp_path: Path) -> None:
    path = tmp_path / "observability.duckdb"
    exporter = _exporter(path)
    try:
        _write(exporter, "t0")
        _write(exporter, "t1")
        assert exporter.store.holds_connection()  # type: ignore[attr-defined]
        out = subprocess.run([sys.executable, "-c", COMPACT, str(path), str(ROOT)], capture_output=True,
                             text=True, timeout=120, check=True).stdout.split()
        assert out[1] == "False" and int(out[0]) >= 1
        _write(exporter, "t2")
    finally:
        exporter.shutdown(30)
    assert DuckDBObservabilityStore(path, read_only=True).count_traces() >= 1


def test_this_processes_readers_and_compaction_end_its_kept_connection(tmp_path: Path) -> None:
    path = tmp_path / "observability.duckdb"
    exporter = _exporter(path)
    try:
        _write(exporter, "t0")
        _write(exporter, "t1")
        reader = DuckDBObservabilityStore(path, read_only=True)
        assert reader.count_traces() == 2
        assert not exporter.store.holds_connection()  # type: ignore[attr-defined]
        _write(exporter, "t2")
        assert exporter.store.holds_connection()  # type: ignore[attr-defined]
        assert DuckDBObservabilityStore(path).compact(budget_s=20) >= 0
        _write(exporter, "t3")
        assert reader.count_traces() == 4
    finally:
        exporter.shutdown(30)


def test_the_kept_file_is_let_go_when_no_spans_come(tmp_path: Path) -> None:
    exporter = _exporter(tmp_path / "observability.duckdb")
    try:
        _write(exporter, "t0")
        wait_for(lambda: not exporter.store.holds_connection())  # type: ignore[attr-defined]
    finally:
        exporter.shutdown(30)


KILLED_WRITER = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, sys.argv[2])
    from core.traces.exporter import DuckDBSpanExporter
    from tests.core.test_traces_store import agent_trace
    exporter = DuckDBSpanExporter(sys.argv[1], flush_interval_s=0.05, prune_interval_s=None)
    for i in range(3):
        exporter.export(agent_trace(f"t{i}"))
        deadline = time.monotonic() + 60
        while exporter.stats.written < 7 * (i + 1) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert exporter.store.holds_connection()
    os.kill(os.getpid(), signal.SIGKILL)  # with the file still open
""")


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_spans_written_through_a_kept_connection_survive_a_kill(tmp_path: Path) -> None:
    path = tmp_path / "observability.duckdb"
    done = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(path), str(ROOT)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert DuckDBObservabilityStore(path, read_only=True, read_budget_s=20).count_traces() == 3


def test_the_writers_columns_are_the_spans_rows_column_by_column() -> None:
    from datetime import datetime, timezone

    from core.traces.spans import COLUMNS
    from core.traces.store import _column_values, _row_params

    spans = [*agent_trace("a"), *agent_trace("b", error=True)]
    spans.append(replace(spans[0], span_id="odd", created_at=None, is_event=1, name="x ✓ \u2028",  # type: ignore[arg-type]
                         attributes={"n": 1.5, "when": datetime(2026, 1, 2, tzinfo=timezone.utc)}))
    now = datetime(2026, 12, 2, 15, 0, tzinfo=timezone.utc)
    rows = [_row_params(s, now) for s in spans]
    for i, (column, attr, kind) in enumerate(COLUMNS):
        assert _column_values(spans, column, attr, kind, now) == [row[i] for row in rows], column
