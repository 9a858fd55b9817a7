"""The trace store's sidecar locks hold across processes, through portalocker (POSIX and Windows alike)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
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
