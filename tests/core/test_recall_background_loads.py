"""A large database's keyword memory and thread order load in the background (``core.background.BackgroundLoads``).

The first hybrid search of a large resource used to wait for both loads (~1.8 s at 100,000 messages on
a quiet machine). Now the searches that come before the loads end are answered by the statements, with
the same hits; the loads read in one snapshot, are taken over when they end, stop when the store closes,
and a write during a load is seen by the next search.

Each test holds the load at a gate (a real snapshot of the real database, opened when the test says), so
"a search while the load runs" is certain, not a race.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

import numpy as np
import sqlalchemy as sa

from core import Memory, MemoryOptions, open_store
from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex
from core.recall.keyword_memory import _lists, _token_counts

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=timezone.utc)
QUERIES = ["topic 5 with some words", "message number 77", "about topic 12 plans", "number 1234 about topic 3",
           "Caroline adoption agency", "Melanie pottery class"]


def _messages(thread: str, start: int, n: int) -> list[Message]:
    out = []
    for i in range(start, start + n):
        speaker = "Caroline" if i % 2 == 0 else "Melanie"
        extra = " adoption agency" if i % 97 == 0 else " pottery class" if i % 89 == 0 else ""
        make = Message.user if i % 2 == 0 else Message.assistant
        out.append(make(f"{speaker}: message number {i} about topic {i % 37} with some words{extra}",
                        id=f"{thread}-{i:05d}", thread_id=thread, resource_id="r",
                        created_at=T0 + timedelta(seconds=i)))
    return out


def _database(path: Path) -> None:
    store = open_store(path)
    memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=True), embedder=HashingEmbedder(64))
    memory.create_thread(resource_id="r", thread_id="long")
    memory.create_thread(resource_id="r", thread_id="short")
    for start in range(0, 2400, 400):
        memory.save_messages(_messages("long", start, 400))
    memory.save_messages(_messages("short", 5000, 300))
    store.close()


def _open(path: Path, background_rows: int) -> tuple[object, Memory, RecallIndex]:
    store = open_store(path)
    memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=True), embedder=HashingEmbedder(64))
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    index.keywords.memory.background_rows = background_rows  # type: ignore[attr-defined]
    index.order.background_rows = background_rows  # type: ignore[union-attr]
    return store, memory, index


def _hits(memory: Memory) -> dict[str, list[tuple[str, float]]]:
    return {q: [(h.message_id, round(h.score, 9)) for h in memory.search(q, resource_id="r", top_k=8, mode="hybrid")]
            for q in QUERIES}


class Gate:
    """A snapshot of the store's database that opens (and reads, so its moment is fixed) when called, then
    waits for ``release`` before the load reads on."""

    def __init__(self, store: object) -> None:
        self.store = store
        self.opened = threading.Event()
        self.released = threading.Event()
        self.calls = 0

    @contextmanager
    def snapshot(self) -> Iterator[sa.Connection]:
        self.calls += 1
        with self.store.db.snapshot() as conn:  # type: ignore[attr-defined]
            conn.exec_driver_sql("SELECT count(*) FROM mastra_messages").scalar()
            self.opened.set()
            assert self.released.wait(30), "the test never released the load"
            yield conn


def _gated(index: RecallIndex, gate: Gate) -> None:
    index.keywords.memory.attach(gate.snapshot, index.loads)  # type: ignore[attr-defined]
    index.order.attach(gate.snapshot, index.loads)  # type: ignore[union-attr]


def test_searches_answer_the_same_while_the_large_indexes_load_and_after(tmp_path: Path):
    db = tmp_path / "m.db"
    _database(db)
    # The reference: loaded inside the first search, as before (the tables are below the bar).
    store, memory, index = _open(db, background_rows=10**9)
    expected = _hits(memory)
    assert index.keywords.memory._loaded and not index.loads.busy()  # type: ignore[attr-defined]
    assert any(expected[q] for q in QUERIES)
    store.close()

    store, memory, index = _open(db, background_rows=1_000)
    gate = Gate(store)
    _gated(index, gate)
    assert _hits(memory) == expected  # answered by the statements: the loads wait at the gate
    assert gate.opened.wait(10)
    assert index.loads.busy("keywords") and index.loads.busy("thread-order")
    assert not index.keywords.memory._loaded  # type: ignore[attr-defined]
    assert _hits(memory) == expected  # (again: a running load is not started twice)
    gate.released.set()
    assert index.loads.wait(30)
    assert gate.calls == 2  # one load each
    assert index.keywords.memory._loaded  # type: ignore[attr-defined]
    assert "long" in index.order._threads  # type: ignore[union-attr]
    assert _hits(memory) == expected
    store.close()


def test_a_write_during_the_load_is_found_by_the_next_search(tmp_path: Path):
    db = tmp_path / "m.db"
    _database(db)
    store, memory, index = _open(db, background_rows=1_000)
    gate = Gate(store)
    _gated(index, gate)
    assert [h for h in memory.search("zeppelin", resource_id="r", top_k=3, mode="hybrid") if h.keyword_score] == []
    assert gate.opened.wait(10)  # the load's snapshot is fixed before the write
    late = Message.user("Caroline: we flew over the lake in a zeppelin", id="long-late", thread_id="long",
                        resource_id="r", created_at=T0 + timedelta(days=2))
    memory.save_messages([late])
    gate.released.set()
    assert index.loads.wait(30)
    assert index.keywords.memory._loaded  # type: ignore[attr-defined]
    hits = memory.search("zeppelin", resource_id="r", top_k=3, mode="keyword")
    assert [h.message_id for h in hits] == ["long-late"]
    hybrid = memory.search("zeppelin lake", resource_id="r", top_k=3, mode="hybrid")
    assert hybrid and hybrid[0].message_id == "long-late"
    store.close()
    # What a fresh process computes agrees.
    store, memory, _ = _open(db, background_rows=10**9)
    assert [h.message_id for h in memory.search("zeppelin", resource_id="r", top_k=3, mode="keyword")] == ["long-late"]
    store.close()


def test_closing_the_store_stops_a_load_and_keeps_nothing_of_it(tmp_path: Path):
    db = tmp_path / "m.db"
    _database(db)
    store, memory, index = _open(db, background_rows=1_000)
    gate = Gate(store)
    _gated(index, gate)
    expected = memory.search("adoption agency", resource_id="r", top_k=5, mode="hybrid")
    assert expected and gate.opened.wait(10)
    closing = threading.Thread(target=store.close)
    closing.start()
    # ``close`` has told the loads to stop before it waits for them: once the gate opens, each returns at its
    # next check, before taking anything over.
    for _ in range(200):
        if index.loads.closed:
            break
        threading.Event().wait(0.01)
    assert index.loads.closed
    gate.released.set()
    closing.join(30)
    assert not closing.is_alive()
    assert not index.loads.busy()
    assert not [t for t in threading.enumerate() if "-load-" in t.name]
    assert not index.keywords.memory._loaded  # type: ignore[attr-defined]
    assert index.loads.start("keywords", lambda token: None) is False  # closed: no new load
    # The file is whole and writable again.
    store, memory, _ = _open(db, background_rows=10**9)
    assert memory.search("adoption agency", resource_id="r", top_k=5, mode="hybrid") == expected
    memory.save_messages(_messages("short", 9000, 2))
    store.close()


def test_lists_and_token_counts_parse_as_the_one_row_readers_did():
    # Lists out of order are sorted; one already ascending is kept; every result is what _ints + sort gave.
    got = _lists(["3,1,2", "5,6", "42", "9,7"])
    assert [g.tolist() for g in got] == [[1, 2, 3], [5, 6], [42], [7, 9]]
    # docsize records: one byte a column below 128 tokens, a varint from 128 on (the per-row fallback).
    assert _token_counts([b"\x05\x03", b"\x00\x01"]).tolist() == [8.0, 1.0]
    assert _token_counts([b"\x05\x03", b"\x81\x00\x02"]).tolist() == [8.0, 130.0]
    assert _token_counts([]).dtype == np.float64
