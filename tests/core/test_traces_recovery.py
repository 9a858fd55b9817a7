"""Tracing recovers from a broken trace file (issue 9, item 16).

A full disk left a 0-byte ``observability.duckdb``; every flush then failed and spans piled up in
spill files forever. The writer now moves a broken file aside (or removes an empty one), starts a new
file and imports the spill files into it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from core.traces.exporter import DuckDBSpanExporter
from core.traces.store import DuckDBObservabilityStore

from .test_traces_store import agent_trace


def _spill(path: Path, spans) -> Path:
    """A spill file as an exporter leaves it when the trace file cannot be written."""
    spill = path.with_name(f"{path.name}.spill-{os.getpid()}-0123abcd.jsonl")
    spill.write_text("".join(json.dumps(s.to_json_dict(), default=str) + "\n" for s in spans), encoding="utf-8")
    return spill


@pytest.mark.parametrize("broken", [b"", b"DUCK" * 3000], ids=["empty", "garbage"])
def test_a_broken_trace_file_is_set_aside_and_the_spill_imported(tmp_path: Path, broken: bytes) -> None:
    path = tmp_path / "observability.duckdb"
    path.write_bytes(broken)
    _spill(path, agent_trace("spilled"))
    exporter = DuckDBSpanExporter(path, background=False)
    try:
        exporter.export(agent_trace("live"))
        assert exporter.flush(timeout=10.0)
    finally:
        exporter.shutdown(2.0)
    store = DuckDBObservabilityStore(path, read_only=True)
    assert sorted(t.trace_id for t in store.list_traces()) == ["live", "spilled"]
    assert not list(tmp_path.glob("*.spill-*"))
    aside = list(tmp_path.glob("observability.duckdb.broken-*"))
    if broken:  # kept for a person to look at, byte for byte
        assert len(aside) == 1 and aside[0].read_bytes() == broken
    else:  # nothing to keep in an empty file
        assert aside == []
    assert exporter.stats.dropped == 0 and exporter.stats.imported == len(agent_trace("spilled"))


def test_a_locked_or_healthy_file_is_never_set_aside(tmp_path: Path) -> None:
    path = tmp_path / "observability.duckdb"
    store = DuckDBObservabilityStore(path)
    store.write_spans(agent_trace("one"))
    store.write_spans(agent_trace("two"))
    assert not list(tmp_path.glob("*.broken-*"))
    assert store.count_traces() == 2


@pytest.mark.parametrize("start", [b"", b"\0" * 4096, b"\0" * 8192, "main header"],
                         ids=["empty", "a block of zeros", "two blocks of zeros", "main header written"])
def test_a_reader_takes_a_file_being_created_for_no_store_yet(tmp_path: Path, start: bytes | str) -> None:
    # A writer in another process creates the file and then writes DuckDB's three 4 KiB headers; a reader
    # (the Studio's Traces pane) opening it in between got DuckDB's "not a valid DuckDB database file" as
    # an error of the read (found by the agent-writes-while-Studio-reads test on a loaded machine). It is no
    # store yet: nothing to show and nothing wrong; looking changes nothing, and the writer then goes on.
    path = tmp_path / "observability.duckdb"
    if start == "main header":  # the first of DuckDB's three header blocks, as a new file has it
        import duckdb

        duckdb.connect(str(tmp_path / "whole.duckdb")).close()
        start = (tmp_path / "whole.duckdb").read_bytes()[:4096]
    assert isinstance(start, bytes)
    path.write_bytes(start)
    reader = DuckDBObservabilityStore(path, read_only=True)
    page = reader.list_traces()
    assert page.missing and list(page) == [] and not page.busy
    assert reader.get_trace("any").missing and reader.count_traces() == 0
    assert reader.pending_migrations() == DuckDBObservabilityStore(tmp_path / "none.duckdb").pending_migrations()
    assert path.read_bytes() == start
    DuckDBObservabilityStore(path).write_spans(agent_trace("after"))
    assert [t.trace_id for t in reader.list_traces()] == ["after"]


@pytest.mark.parametrize("case", ["full length", "other bytes", "written minutes ago", "cut off a block"])
def test_a_reader_still_reports_a_broken_file(tmp_path: Path, case: str) -> None:
    # A file DuckDB cannot open that is not one being created this moment (as long as the headers or longer,
    # holding bytes that are not DuckDB's, or short but old: a crash or a full disk) is broken: the read
    # says so (the Studio explains it; the writer sets it aside, above), it is not "no traces yet".
    path = tmp_path / "observability.duckdb"
    path.write_bytes({"full length": b"\0" * 16384, "other bytes": b"not a duckdb file " * 100,
                      "written minutes ago": b"", "cut off a block": b"\0" * 5000}[case])
    if case == "written minutes ago":
        old = time.time() - 300
        os.utime(path, (old, old))
    with pytest.raises(Exception, match="not a valid DuckDB database file"):
        DuckDBObservabilityStore(path, read_only=True).list_traces()
