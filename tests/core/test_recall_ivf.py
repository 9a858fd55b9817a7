"""Persisted IVF partitions (core/recall/ivf_store.py): a large resource is partitioned by the writer,
a restarted process answers from the probed lists without loading the resource, and rows written
afterwards (by us, or by another program without an assignment) are still found."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from core.messages import Message
from core.recall import RecallIndex, matrix
from core.recall.ivf_store import IVF_ROWS, IVF_TABLE, IvfScope
from core.recall.matrix import VectorSet
from core.storage import open_store

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
DIM = 32
N = 400


class Table:
    """Vectors looked up by text: clustered, so a partition has real lists (not a test double of ours:
    an embedder is a service behind an interface)."""

    model_id = "table@d32"
    dim = DIM

    def __init__(self) -> None:
        self.rng = np.random.default_rng(7)
        self.centers = self.rng.standard_normal((12, DIM)).astype(np.float32)
        self.known: dict[str, np.ndarray] = {}

    def embed(self, texts, kind="passage"):  # type: ignore[no-untyped-def]
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            v = self.known.get(t)
            if v is None:
                v = self.centers[len(self.known) % 12] + 0.3 * self.rng.standard_normal(DIM).astype(np.float32)
                v /= np.linalg.norm(v)
                self.known[t] = v
            out[i] = v
        return out


def seed(store, embedder: Table, n: int, start: int = 0, thread: str = "t") -> RecallIndex:
    if store.memory.get_thread(thread) is None:
        store.memory.create_thread(thread_id=thread, resource_id="u")
    msgs = [Message.user(f"note {i}", id=f"m{i}", thread_id=thread, resource_id="u", created_at=T0 + timedelta(seconds=i))
            for i in range(start, start + n)]
    store.memory.save_messages(msgs)
    index = RecallIndex.for_store(store, embedder)
    for s in range(0, n, 100):
        assert index.index_messages(msgs[s : s + 100]).ok
    return index


@pytest.fixture
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matrix, "IVF_MIN_ROWS", 300)


def passage(i: int, first: int = 0) -> str:
    """What was embedded for message i (its text after the previous message's)."""
    return f"note {i}" if i == first else f"note {i - 1}\nnote {i}"


def count(store, sql: str) -> int:
    with store.db.read() as conn:
        return int(conn.exec_driver_sql(sql).scalar() or 0)


def test_a_large_resource_is_partitioned_and_read_list_by_list_after_a_restart(db_path, small_threshold):
    embedder = Table()
    store = open_store(db_path)
    seed(store, embedder, N)
    assert count(store, f"SELECT count(*) FROM {IVF_TABLE}") == 1
    assert count(store, f"SELECT count(*) FROM {IVF_ROWS}") == N  # every row in exactly one list
    store.close()

    restarted = open_store(db_path)  # a new process: nothing cached
    index = RecallIndex.for_store(restarted, embedder)
    with restarted.db.read() as conn:
        view = index.vector_set(conn, "u", None)
    assert isinstance(view, IvfScope)
    for i in (5, 123, 399):
        hits = index.search(passage(i), resource_id="u", mode="vector", top_k=3).hits
        assert hits[0].message_id == f"m{i}" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    # Only the probed lists were loaded, not the whole resource.
    assert sum(v.n for v in view._lists.values()) < N
    restarted.close()


def test_rows_written_after_the_partition_are_found(db_path, small_threshold):
    embedder = Table()
    store = open_store(db_path)
    index = seed(store, embedder, N)
    with store.db.read() as conn:
        index.vector_set(conn, "u", None)  # a view made before the new rows
    seed(store, embedder, 20, start=N, thread="t2")  # assigned to lists by the writer
    assert count(store, f"SELECT count(*) FROM {IVF_ROWS}") == N + 20
    # Another program adds a vector row without an assignment: scanned exactly as the tail.
    other = np.asarray(embedder.embed(["foreign"])[0], dtype="<f4")
    with store.db.write() as conn:
        conn.exec_driver_sql(
            f'INSERT INTO "memory_messages_{DIM}" (vector_id, embedding, metadata, model_id) VALUES (?, ?, ?, ?)',
            ("x1", other.tobytes(), '{"message_id": "x1", "thread_id": "t", "resource_id": "u"}', embedder.model_id))
    for i in (N + 3, N + 19):
        hits = index.search(passage(i, N), resource_id="u", mode="vector", top_k=1).hits
        assert hits[0].message_id == f"m{i}"
    assert index.search("foreign", resource_id="u", mode="vector", top_k=1).hits[0].message_id == "x1"
    # A thread of the partitioned resource is searched exactly.
    thread_hits = index.search("note 2", resource_id="u", thread_id="t2", mode="vector", top_k=25).hits
    assert {h.message_id for h in thread_hits} == {f"m{i}" for i in range(N, N + 20)}
    store.close()

    restarted = open_store(db_path)
    again = RecallIndex.for_store(restarted, embedder)
    assert again.search("foreign", resource_id="u", mode="vector", top_k=1).hits[0].message_id == "x1"
    assert again.search(passage(N + 7, N), resource_id="u", mode="vector", top_k=1).hits[0].message_id == f"m{N + 7}"
    restarted.close()


def test_the_partitioned_answer_agrees_with_the_exact_one(db_path, small_threshold):
    embedder = Table()
    store = open_store(db_path)
    index = seed(store, embedder, N)
    exact = VectorSet(DIM, embedder.model_id)
    from core.recall import vector_table

    with store.db.read() as conn:
        exact.extend(vector_table.load_rows(conn, index.info, resource_id="u", thread_id=None))
        view = index.vector_set(conn, "u", None)
        assert isinstance(view, IvfScope)
        agree = []
        for c in embedder.centers[:6]:
            q = c / np.linalg.norm(c)
            pos, _ = exact.search(q, 10)
            truth = {exact.message_ids[p] for p in pos}
            got = {r.message_id for r in view.ranked(q, 10, None)}
            agree.append(len(truth & got) / 10)
    assert np.mean(agree) >= 0.9
    store.close()
