"""The trace store's sidecar locks hold across processes, through portalocker (POSIX and Windows alike)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import pytest

from core.traces import locking
from core.traces.locking import StoreBusy, gated, open_duckdb

# A second process that takes a sidecar lock with portalocker itself, says so, and holds it until its
# stdin closes: what another agent process or a compaction in another process does.
_HOLDER = textwrap.dedent("""
    import sys, portalocker
    path, mode = sys.argv[1], sys.argv[2]
    handle = open(path, "ab")
    portalocker.lock(handle, (portalocker.LOCK_EX if mode == "ex" else portalocker.LOCK_SH) | portalocker.LOCK_NB)
    print("held", flush=True)
    sys.stdin.read()
""")


class Holder:
    def __init__(self, sidecar: Path, mode: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(sidecar), mode],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "held"

    def release(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


@pytest.fixture()
def trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "observability.duckdb"
    duckdb.connect(str(path)).close()
    return path


def test_the_module_locks_through_portalocker_not_fcntl() -> None:
    source = Path(locking.__file__).read_text(encoding="utf-8")
    assert "import fcntl" not in source and "import portalocker" in source


def test_compaction_gate_held_by_another_process_keeps_writers_out(trace_file: Path) -> None:
    holder = Holder(trace_file.with_name(trace_file.name + ".lock"), "ex")
    try:
        with pytest.raises(StoreBusy):
            with open_duckdb(trace_file, read_only=False, budget_s=0.1):
                pass
        with pytest.raises(StoreBusy):
            with gated(trace_file, exclusive=True, budget_s=0.1):
                pass
    finally:
        holder.release()
    with open_duckdb(trace_file, read_only=False, budget_s=5) as con:  # released: the writer gets in
        assert con.execute("select 1").fetchone() == (1,)


def test_shared_gate_lets_opens_in_but_not_compaction(trace_file: Path) -> None:
    holder = Holder(trace_file.with_name(trace_file.name + ".lock"), "sh")
    try:
        with open_duckdb(trace_file, read_only=True, budget_s=5) as con:
            assert con.execute("select 2").fetchone() == (2,)
        with pytest.raises(StoreBusy):
            with gated(trace_file, exclusive=True, budget_s=0.1):
                pass
    finally:
        holder.release()
    with gated(trace_file, exclusive=True, budget_s=5):
        pass


def test_a_waiting_writer_in_another_process_makes_readers_step_aside(trace_file: Path) -> None:
    holder = Holder(trace_file.with_name(trace_file.name + ".write-intent"), "ex")
    try:
        with pytest.raises(StoreBusy):
            with open_duckdb(trace_file, read_only=True, budget_s=0.1):
                pass
        with open_duckdb(trace_file, read_only=False, budget_s=5) as con:  # writers are not held back
            assert con.execute("select 3").fetchone() == (3,)
    finally:
        holder.release()
    with open_duckdb(trace_file, read_only=True, budget_s=5) as con:
        assert con.execute("select 4").fetchone() == (4,)


def test_the_reads_of_one_reading_block_open_the_file_once_and_wait_once_when_busy(trace_file: Path) -> None:
    """The Studio's page read (list, count, the thread's bill) opens the trace file once, not once per
    read (each open of a DuckDB file costs ~12–20 ms of CPU); a busy file is waited for once."""
    from core.traces.spans import SpanRecord, TraceFilters
    from core.traces.store import DuckDBObservabilityStore

    start = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)
    writer = DuckDBObservabilityStore(trace_file)
    writer.write_spans([SpanRecord(f"t{i}", "root", f"run {i}", "agent_run", start, thread_id="th",
                                   ended_at=start + timedelta(seconds=1), created_at=start) for i in range(3)])
    reader = DuckDBObservabilityStore(trace_file, read_only=True, read_budget_s=0.1)
    alone = (reader.list_traces(filters=TraceFilters(thread_id="th")), reader.count_traces(),
             reader.usage_by_model(), reader.get_trace("t1"))
    opens = reader.wait_stats.opens
    with reader.reading():
        shared = (reader.list_traces(filters=TraceFilters(thread_id="th")), reader.count_traces(),
                  reader.usage_by_model(), reader.get_trace("t1"))
        with reader.reading():  # nested: the same connection
            assert reader.count_traces() == 3
    assert reader.wait_stats.opens == opens + 1
    assert shared == alone and len(shared[0]) == 3

    holder = Holder(trace_file.with_name(trace_file.name + ".write-intent"), "ex")  # a writer waits: readers step aside
    try:
        failures = reader.wait_stats.busy_failures
        with reader.reading():
            page, count = reader.list_traces(filters=TraceFilters(thread_id="th")), reader.count_traces()
        assert reader.wait_stats.busy_failures == failures + 1  # one wait for the block, not one per read
        assert page.busy and page.stale and page == alone[0]  # the last good answers, flagged
        assert count.busy and count == 3
    finally:
        holder.release()
    with reader.reading():
        assert not reader.list_traces().busy  # a block after a busy one opens again


def test_a_connection_of_this_process_with_other_settings_is_waited_out_as_busy(trace_file: Path) -> None:
    """DuckDB refuses a second connection to a file inside one process when the first has other settings
    (read-write against read-only, another ``threads``) with a ConnectionException, not a lock error:
    ``open_duckdb`` raised it as it came, so the Studio's Traces pane showed "Traces could not be read" and
    read no more. It is a holder to wait out now: busy while the other connection is open, read once closed."""
    from core.traces.spans import TraceFilters
    from core.traces.store import DuckDBObservabilityStore

    outside = duckdb.connect(str(trace_file))  # kept open outside open_duckdb, read-write
    try:
        with pytest.raises(StoreBusy):
            with open_duckdb(trace_file, read_only=True, budget_s=0.05):
                pass
        reader = DuckDBObservabilityStore(trace_file, read_only=True, read_budget_s=0.05)
        assert reader.list_traces(filters=TraceFilters()).busy  # what the pane is told: busy, retried
    finally:
        outside.close()
    with open_duckdb(trace_file, read_only=True, budget_s=0.05) as con:
        assert con.execute("SELECT 1").fetchone() == (1,)


def test_an_observer_is_told_each_statement_before_it_runs_and_only_while_it_observes(
        trace_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``observe_statements`` (the Studio's SQL Log): every statement on a connection ``open_duckdb`` hands out,
    read-only or not, with its parameters; nothing once stopped; an observer that fails never fails the
    statement; nobody observing: the plain DuckDB connection."""
    from core.traces import observe_trace_statements

    monkeypatch.setattr(locking, "_observers", ())  # (none of another test's, such as a Studio's SQL Log)
    told: list[tuple[str, str, object, bool]] = []
    in_database: list[bool] = []

    def observer(path: Path, statement: str, params: object, read_only: bool, database: bool) -> None:
        told.append((path.name, statement, params, read_only))
        in_database.append(database)

    def broken(*_args: object) -> None:
        raise RuntimeError("a log that fails")

    with open_duckdb(trace_file, read_only=False, budget_s=5) as con:
        assert type(con) is duckdb.DuckDBPyConnection
    stop = observe_trace_statements(observer)
    stop_broken = locking.observe_statements(broken)
    try:
        with open_duckdb(trace_file, read_only=False, budget_s=5) as con:
            con.execute("CREATE TABLE t (a INTEGER)")
            con.executemany("INSERT INTO t VALUES (?)", [(1,), (2,)])
        with open_duckdb(trace_file, read_only=True, budget_s=5) as con:
            assert con.execute("SELECT sum(a) FROM t WHERE a > ?", (0,)).fetchall() == [(3,)]
            assert con.sql("SELECT count(*) FROM t").fetchall() == [(2,)]
    finally:
        stop_broken()
        stop()
    assert told == [
        ("observability.duckdb", "CREATE TABLE t (a INTEGER)", None, False),
        ("observability.duckdb", "INSERT INTO t VALUES (?)", [(1,), (2,)], False),
        ("observability.duckdb", "SELECT sum(a) FROM t WHERE a > ?", (0,), True),
        ("observability.duckdb", "SELECT count(*) FROM t", None, True),
    ]
    assert in_database == [False] * 4, "a trace file, not the memory database"
    with open_duckdb(trace_file, read_only=True, budget_s=5) as con:
        con.execute("SELECT 1").fetchall()
    assert len(told) == 4
    assert locking._observers == ()
