"""Tracing recovers from a broken trace file (issue 9, item 16).

A full disk left a 0-byte ``observability.duckdb``; every flush then failed and spans piled up in
spill files forever. The writer now moves a broken file aside (or removes an empty one), starts a new
file and imports the spill files into it.
"""

from __future__ import annotations

import json
import os
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
