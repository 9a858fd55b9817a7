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


def test_a_text_redacted_before_a_key_was_registered_is_redacted_after_it():
    from core.redaction import register_secret

    text = "the tool said: Qq-later-registered-4821 was used"
    assert redact_text(text) == text  # remembered as clean...
    assert redact_text(text) == text
    register_secret("Qq-later-registered-4821")
    assert redact_text(text) == f"the tool said: {REDACTED} was used"  # ...until a key is registered


def test_remembered_redactions_give_what_a_fresh_scan_gives():
    from core import redaction

    texts = [f"message {i} with sk-{'a' * 20}{i} and api_key={i}abc and plain words" for i in range(50)]
    texts += [f"plain text number {i}" for i in range(50)]
    fresh = [redaction._redact_text(t, redaction._secrets) for t in texts]
    assert [redact_text(t) for t in texts] == fresh
    assert [redact_text(t) for t in texts] == fresh  # the second time from the cache
    long = "x" * (redaction.DONE_CHARS + 1) + " sk-" + "b" * 30
    assert redact_text(long).endswith(REDACTED) and long not in redaction._done


def test_the_span_writer_writes_a_steady_stream_in_one_write_per_interval(tmp_path):
    """Within ``flush_interval_s`` of a write, root spans only queue; a queue past the high-water mark
    (a quarter of ``max_queue``) is written in one write of up to that many spans, not in
    ``batch_size`` pieces that each open the file."""
    import time as _time

    from core.traces.exporter import DuckDBSpanExporter

    class CountingStore(DuckDBObservabilityStore):
        def __init__(self, path):
            super().__init__(path)
            self.sizes = []

        def write_spans(self, spans, budget_s=None):
            self.sizes.append(len(spans))
            return super().write_spans(spans, budget_s)

    store = CountingStore(tmp_path / "obs.duckdb")
    exporter = DuckDBSpanExporter(store, batch_size=5, max_queue=100, flush_interval_s=600, prune_interval_s=None)
    tracer = Tracer(exporter)

    def runs(n):
        for i in range(n):
            with tracer.start_span(f"run {i}", "agent_run", new_trace=True):
                pass

    def wait_for(predicate):
        deadline = _time.monotonic() + 60
        while not predicate() and _time.monotonic() < deadline:
            _time.sleep(0.01)
        assert predicate()

    runs(1)
    wait_for(lambda: store.sizes == [1])  # the first run is written at once
    runs(20)  # within the interval: each run wakes the writer, which waits (20 < 25)
    runs(9)  # 29 queued: past the high-water mark of 25
    wait_for(lambda: len(store.sizes) == 2)
    assert store.sizes == [1, 25]
    exporter.shutdown(timeout=60)
    assert sum(store.sizes) == 30 and exporter.stats.written == 30
    with duckdb.connect(str(tmp_path / "obs.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM mastra_ai_spans").fetchone()[0] == 30


def test_a_span_record_built_without_init_equals_the_dataclasss_own():
    """``Tracer._finish`` builds a ``SpanRecord`` without its frozen ``__init__``: the same fields, in
    the same order, equal, hashable alike and just as frozen; a dict without every field still gets the
    dataclass's own error."""
    import dataclasses

    import pytest

    from core.traces.spans import SpanRecord
    from core.traces.tracer import _span_record

    spans = _spans(3)
    for span in spans:
        values = dict(reversed(list(vars(span).items())))  # any order in, field order out
        fast, slow = _span_record(values), SpanRecord(**values)
        assert fast == slow and list(vars(fast)) == list(vars(slow)) == [f.name for f in dataclasses.fields(SpanRecord)]
        assert repr(fast) == repr(slow) and fast.to_json_dict() == slow.to_json_dict()
        with pytest.raises(dataclasses.FrozenInstanceError):
            fast.name = "changed"  # type: ignore[misc]
    values = dict(vars(spans[0]))
    del values["name"]
    with pytest.raises(TypeError):
        _span_record(values)
    with pytest.raises(TypeError):
        _span_record({**vars(spans[0]), "unknown": 1})


def test_spans_inherit_from_their_parent_and_root_as_before():
    """What a child takes from its parent (trace, parent and root entities, thread, resource, run,
    session, user) and what a root span sets itself; empty ids are stored as None."""
    exporter = InMemorySpanExporter()
    tracer = Tracer(exporter)
    with tracer.start_span("root", "agent_run", new_trace=True, thread_id="t", resource_id="", run_id="r",
                           entity_type="agent", entity_id="a1", entity_name="A", metadata={"m": 1}):
        with tracer.start_span("child", "processor_run", resource_id="u2", attributes={"x": 1}, input="in"):
            pass
        with tracer.start_span("other", "tool_call", thread_id="t2", new_trace=True):
            pass
    child, other, root = exporter.spans
    assert root.parent_span_id is None and root.resource_id is None and root.thread_id == "t" and root.run_id == "r"
    assert (root.root_entity_type, root.root_entity_id, root.root_entity_name) == ("agent", "a1", "A")
    assert child.trace_id == root.trace_id and child.parent_span_id == root.span_id
    assert (child.parent_entity_type, child.parent_entity_id, child.parent_entity_name) == ("agent", "a1", "A")
    assert (child.root_entity_type, child.root_entity_id, child.root_entity_name) == ("agent", "a1", "A")
    assert child.thread_id == "t" and child.resource_id == "u2" and child.run_id == "r"
    assert child.attributes == {"x": 1} and child.input == "in" and child.metadata is None
    assert child.entity_type is None and child.environment is None and child.service_name == "memory-studio"
    assert other.trace_id != root.trace_id and other.parent_span_id is None and other.thread_id == "t2"
    assert other.root_entity_type is None and other.run_id is None


def test_the_writer_is_woken_once_per_write_not_once_per_run(tmp_path):
    """A root span wakes the span writer only when no wake is pending: the runs that end while it
    waits out the interval only queue (their spans are written in the same write as before)."""
    from core.traces.exporter import DuckDBSpanExporter

    exporter = DuckDBSpanExporter(tmp_path / "obs.duckdb", background=False, prune_interval_s=None)
    notified = []
    real_notify = exporter._cond.notify
    exporter._cond.notify = lambda n=1: (notified.append(n), real_notify(n))  # type: ignore[method-assign]
    tracer = Tracer(exporter)
    for i in range(5):
        with tracer.start_span(f"run {i}", "agent_run", new_trace=True):
            with tracer.start_span("child", "processor_run"):
                pass
    assert len(notified) == 1 and exporter._wake and exporter.queued == 10
    exporter._wake = False  # what the writer does before it writes
    with tracer.start_span("run 5", "agent_run", new_trace=True):
        pass
    assert len(notified) == 2
    assert exporter.flush(timeout=60) and exporter.stats.written == 11
    exporter.shutdown(timeout=5)
