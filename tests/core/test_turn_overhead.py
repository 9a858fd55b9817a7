"""What the cheaper turn (issue 20 item 7) must keep: span ids, redaction, and a trace file that is
checked again when it is not the file the store migrated."""

from __future__ import annotations

import os
import re

import duckdb

from core.redaction import REDACTED, redact_text
from core.traces.store import DuckDBObservabilityStore
from core.traces.tracer import InMemorySpanExporter, Tracer


def _spans(n: int) -> list:
    exporter = InMemorySpanExporter()
    tracer = Tracer(exporter)
    for i in range(n):
        with tracer.start_span(f"run {i}", "agent_run", new_trace=True):
            with tracer.start_span("child", "processor_run"):
                pass
    return exporter.spans


def test_span_ids_keep_their_shape_and_never_repeat():
    spans = _spans(500)
    assert all(re.fullmatch(r"[0-9a-f]{32}", s.trace_id) and re.fullmatch(r"[0-9a-f]{16}", s.span_id) for s in spans)
    assert len({s.span_id for s in spans}) == len(spans) and len({s.trace_id for s in spans}) == 500
    child, root = spans[0], spans[1]
    assert child.parent_span_id == root.span_id and child.trace_id == root.trace_id


def test_a_forked_child_makes_other_ids_than_its_parent():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, _spans(1)[0].span_id.encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    theirs = os.read(read, 64).decode()
    os.close(read)
    assert theirs and theirs != _spans(1)[0].span_id


def test_redaction_still_catches_every_shape_and_leaves_plain_text_alone():
    plain = "The user lives in Oslo and likes tea; working memory: <working_memory># User</working_memory>"
    assert redact_text(plain) == plain
    for secret in ("sk-proj-abcdefghijkl", "Bearer abcdefghijk", "ghp_" + "a" * 24, "hf_" + "b" * 24,
                   "gsk_" + "c" * 24, "xai-" + "d" * 24, "AIza" + "e" * 32, "AKIA" + "F" * 16):
        assert redact_text(f"key: {secret} end") == f"key: {REDACTED} end", secret
    assert redact_text("api_key=hunter22") == f"api_key={REDACTED}"


def test_the_store_checks_the_schema_of_a_file_made_again_under_the_same_path(tmp_path):
    spans = _spans(2)
    store = DuckDBObservabilityStore(tmp_path / "obs.duckdb")
    store.write_spans(spans[:2])
    os.remove(store.path)  # deleted, and made again empty (often under the same inode)
    duckdb.connect(str(store.path)).close()
    store.write_spans(spans[2:])
    with duckdb.connect(str(store.path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM mastra_ai_spans").fetchone() == (2,)
