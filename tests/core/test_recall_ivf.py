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


def test_a_thread_of_a_partitioned_resource_is_read_once_and_only_its_own_rows(db_path, small_threshold):
    """Narrowed to one thread, a partitioned resource's search read that thread's every vector row again on
    every search (3.9 s a search for a 100,000-message thread): the thread's rows are kept as a set of
    their own now, extended by rows written since, and hold no row of another resource."""
    from sqlalchemy import event

    embedder = Table()
    store = open_store(db_path)
    index = seed(store, embedder, N)
    seed(store, embedder, 20, start=N, thread="t2")
    # Another program wrote a row under thread t2's id for another resource: never this resource's.
    other = np.asarray(embedder.embed(["elsewhere"])[0], dtype="<f4")
    with store.db.write() as conn:
        conn.exec_driver_sql(
            f'INSERT INTO "memory_messages_{DIM}" (vector_id, embedding, metadata, model_id) VALUES (?, ?, ?, ?)',
            ("x2", other.tobytes(), '{"message_id": "x2", "thread_id": "t2", "resource_id": "v"}', embedder.model_id))
    statements: list[str] = []
    event.listen(store.db.engine, "before_cursor_execute",
                 lambda conn, cursor, sql, *rest: statements.append(sql))
    first = index.search("note 2", resource_id="u", thread_id="t2", mode="vector", top_k=50).hits
    assert {h.message_id for h in first} == {f"m{i}" for i in range(N, N + 20)}
    read_rows = [s for s in statements if "v.embedding" in s]
    assert len(read_rows) == 1  # the thread's rows, once
    statements.clear()
    again = index.search(passage(N + 4, N), resource_id="u", thread_id="t2", mode="vector", top_k=1).hits
    assert again[0].message_id == f"m{N + 4}"
    assert not [s for s in statements if "v.embedding" in s]  # kept: nothing read again
    with store.db.read() as conn:
        view = index.vector_set(conn, "u", "t2")
        assert isinstance(view, VectorSet) and view.n == 20
    # A message saved in the thread later is found by the same kept set.
    seed(store, embedder, 1, start=N + 20, thread="t2")
    hits = index.search(passage(N + 20, N), resource_id="u", thread_id="t2", mode="vector", top_k=1).hits
    assert hits[0].message_id == f"m{N + 20}"
    assert index.search("elsewhere", resource_id="u", thread_id="t2", mode="vector", top_k=30).hits
    assert "x2" not in {h.message_id for h in index.search("elsewhere", resource_id="u", thread_id="t2",
                                                            mode="vector", top_k=30).hits}
    store.close()


def test_a_large_set_held_in_memory_is_scanned_exactly_without_a_k_means(db_path, small_threshold):
    """A thread's set of IVF_MIN_ROWS rows or more was clustered by its first search (a k-means: 3.6 s at
    100,000 x 512 rows, the first query of a long thread after a restart) and then answered from the
    probed lists: now every search of it is the exact product, and it is allocated once."""
    embedder = Table()
    store = open_store(db_path)
    index = seed(store, embedder, N)
    restarted = open_store(db_path)
    again = RecallIndex.for_store(restarted, embedder)
    for i in (3, 150, 399):
        hits = again.search(passage(i), resource_id=None, thread_id="t", mode="vector", top_k=10).hits
        assert hits[0].message_id == f"m{i}"
    with restarted.db.read() as conn:
        vset = again.vector_set(conn, None, "t")
    assert isinstance(vset, VectorSet) and vset.n == N >= matrix.IVF_MIN_ROWS
    assert vset.partition is None  # no k-means ran
    for c in embedder.centers[:4]:
        q = (c / np.linalg.norm(c)).astype(np.float32)
        pos, scores = vset.search(q, 10)
        truth = np.argsort(-(vset.matrix @ q), kind="stable")[:10]
        assert list(scores) == list((vset.matrix @ q)[truth])
        assert set(pos.tolist()) == set(truth.tolist()) or len(set((vset.matrix @ q)[truth].tolist())) < 10
    restarted.close()
    store.close()


def test_a_set_loaded_in_pieces_is_allocated_once(db_path):
    """A scope's rows are read in pieces (``row_chunks``) into a matrix sized by a count first, so a large
    thread's load holds one matrix, not its blobs, their join and a doubled copy at once."""
    from core.recall import vector_table

    embedder = Table()
    store = open_store(db_path)
    index = seed(store, embedder, 300)
    with store.db.read() as conn:
        assert vector_table.count_rows(conn, index.info, resource_id=None, thread_id="t") == 300
        chunks = list(vector_table.row_chunks(conn, index.info, resource_id=None, thread_id="t", size=64))
        whole = vector_table.load_rows(conn, index.info, resource_id=None, thread_id="t")
    assert [len(c) for c in chunks] == [64, 64, 64, 64, 44]
    pieces = VectorSet(DIM, embedder.model_id)
    pieces.reserve(300)
    for chunk in chunks:
        pieces.extend(chunk)
    at_once = VectorSet(DIM, embedder.model_id)
    at_once.extend(whole)
    assert pieces._matrix.shape[0] == 300 and pieces.n == 300
    assert np.array_equal(pieces.matrix, at_once.matrix) and pieces.message_ids == at_once.message_ids
    store.close()
