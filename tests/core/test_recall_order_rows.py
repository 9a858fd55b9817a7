"""Each vector-set row's thread-order answer kept by row (``core.recall.order_rows``) always equals a
fresh read (``search.thread_order``), after appends at a thread's end and in its middle, edits and
deletes, by this store and by another engine on the same file; an append leaves the other threads'
rows known; a change while a search fills rows leaves them unknown."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex
from core.recall import search as pipeline
from core.recall.matrix import VectorSet
from core.storage import open_store

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def msg(i: int, thread: str, text: str, minutes: float) -> Message:
    make = Message.user if i % 2 == 0 else Message.assistant
    return make(text, id=f"{thread}-{i}", thread_id=thread, resource_id="u", created_at=T0 + timedelta(minutes=minutes))


def save(store, index: RecallIndex, msgs: list[Message]) -> None:  # type: ignore[no-untyped-def]
    store.memory.save_messages(msgs)
    assert index.index_messages(msgs).ok


def indexed(tmp_path: Path, threads: dict[str, int]):  # type: ignore[no-untyped-def]
    """A store and its index, with each thread's messages saved and indexed ("Mel: line i" in thread a, else
    "Jo: other i"), ten minutes apart."""
    store = open_store(tmp_path / "m.db")
    index = RecallIndex.for_store(store, HashingEmbedder(16))
    for thread, n in threads.items():
        store.memory.create_thread(thread_id=thread, resource_id="u")
        text = "Mel: line" if thread == "a" else "Jo: other"
        save(store, index, [msg(i, thread, f"{text} {i}", 10 * i) for i in range(n)])
    return store, index


def check(index: RecallIndex, *, hints: bool = False) -> tuple[VectorSet, list[str]]:
    """Fill every row of the resource's set and compare its answers with a fresh read; returns the set
    and the messages the fill had to ask the order cache to read from the database."""
    reads: list[str] = []

    def counting(conn, message_ids, *, labels=False, keys=None):  # type: ignore[no-untyped-def]
        reads.extend(message_ids)
        return pipeline.thread_order(conn, message_ids, labels=labels, keys=keys)

    with index.store.db.read() as conn:
        vset = index.vector_set(conn, "u", None)
        assert isinstance(vset, VectorSet)
        fresh = pipeline.thread_order(conn, vset.message_ids[: vset.n], labels=True)
        # (the rows of the messages stored: a deleted message's row, until the next write drops it, has no
        # answer, and a search leaves it out)
        rows = np.array([r for r in range(vset.n) if vset.message_ids[r] in fresh], dtype=np.intp)
        threads = (lambda: dict(zip(vset.message_ids, vset.thread_ids))) if hints else None
        # (``filled``, a search's fill and gather in one pass; ``fill`` alone is checked below)
        found = vset.order_rows.filled(conn, index.order, vset, rows, reader=counting, threads=threads)
        got = vset.order_rows.answers(vset, rows)
        assert found is not None and got is not None, "a row left unknown with nothing changing"
        assert {vset.message_ids[r]: a for r, a in got.items()} == fresh
        again = vset.order_rows.gather(rows)
        assert again is not None and found.next_ids == again.next_ids
        for mine, theirs in zip(found[:3], again[:3]):
            assert np.array_equal(mine, theirs)
    return vset, reads


def known_of(vset: VectorSet) -> set[str]:
    rows = vset.order_rows
    return {vset.message_ids[r] for r in range(vset.n) if r < len(rows.known) and rows.known[r]}


def test_rows_follow_appends_edits_and_deletes(tmp_path: Path):
    store, index = indexed(tmp_path, {"a": 6, "b": 4})
    vset, reads = check(index)
    assert sorted(reads) == sorted(vset.message_ids[: vset.n])
    _, reads = check(index)
    assert reads == []  # every row known: nothing asked
    # Appended at the end of thread a, not indexed yet (a-5's next message has no row: kept by id).
    store.memory.save_messages([msg(6, "a", "Mel: at the end", 100)])
    with store.db.read() as conn:
        index.order.sync(conn)
        vset.order_rows.mark(index.order, vset)
    assert known_of(vset) == {f"b-{i}" for i in range(4)}  # thread a's rows marked, thread b's kept
    vset, _ = check(index)
    assert vset.order_rows.next_ids == {vset.row_of("a-5"): "a-6"}
    # Indexed now, and one in the middle of thread a (between a-2 and a-3).
    assert index.index_messages([msg(6, "a", "Mel: at the end", 100)]).ok
    save(store, index, [msg(7, "a", "Caroline: in between", 25)])
    vset, _ = check(index)
    assert vset.order_rows.next_ids == {}
    check(index, hints=True)
    # An edit changes a label; a delete changes a next message: every row is read again.
    save(store, index, [msg(1, "a", "Caroline: edited", 10)])
    check(index)
    store.memory.delete_messages(["a-3"])
    vset, _ = check(index)
    # Another engine on the same file appends to thread b.
    other = open_store(tmp_path / "m.db")
    other.memory.save_messages([msg(8, "b", "Jo: from elsewhere", 35)])
    other.close()
    check(index, hints=True)
    store.close()


def test_a_change_while_filling_leaves_rows_unknown(tmp_path: Path):
    store, index = indexed(tmp_path, {"a": 4})
    other = open_store(tmp_path / "m.db")

    def meanwhile(conn, message_ids, *, labels=False, keys=None):  # type: ignore[no-untyped-def]
        got = pipeline.thread_order(conn, message_ids, labels=labels, keys=keys)
        # Another engine appends, and another search sees it before this fill keeps its answers.
        other.memory.save_messages([msg(9, "a", "Mel: late", 100)])
        with store.db.read() as later:
            index.order.sync(later)
        return got

    with store.db.read() as conn:
        vset = index.vector_set(conn, "u", None)
        assert isinstance(vset, VectorSet)
        rows = np.arange(vset.n)
        assert vset.order_rows.fill(conn, index.order, vset, rows, reader=meanwhile)
        assert vset.order_rows.answers(vset, rows) is None  # a-3's next message changed: nothing kept
    other.close()
    vset, _ = check(index)
    assert vset.order_rows.next_ids == {vset.row_of("a-3"): "a-9"}
    store.close()


def test_a_database_without_the_change_counter_is_not_kept(tmp_path: Path):
    from core.recall.order_cache import OrderCache
    from core.recall.order_rows import OrderRows

    store, index = indexed(tmp_path, {"a": 3})
    with store.db.write() as conn:
        conn.exec_driver_sql("DELETE FROM memory_studio_recall_state WHERE key = 'messages:rewrites'")
    with store.db.read() as conn:
        vset = index.vector_set(conn, "u", None)
        assert isinstance(vset, VectorSet)
        assert not OrderRows().fill(conn, OrderCache(), vset, np.arange(vset.n), reader=pipeline.thread_order)
    store.close()


def marked(index: RecallIndex) -> VectorSet:
    """The resource's set after a write, its rows marked as a search's ``fill`` marks them first."""
    with index.store.db.read() as conn:
        vset = index.vector_set(conn, "u", None)
        assert isinstance(vset, VectorSet)
        index.order.sync(conn)
        vset.order_rows.mark(index.order, vset)
    return vset


def test_an_append_to_a_thread_kept_whole_marks_only_the_message_before(tmp_path: Path):
    store, index = indexed(tmp_path, {"a": 6, "b": 4})
    vset, _ = check(index, hints=True)  # (both threads read whole)
    everyone = set(vset.message_ids[: vset.n])
    save(store, index, [msg(6, "a", "Caroline: at the end", 100)])  # a-5's next message changes
    assert marked(index) is vset  # (an append at the end: the set grows, its rows stay)
    assert known_of(vset) == everyone - {"a-5"}
    _, reads = check(index, hints=True)
    assert reads == []  # a-5 and a-6 answered by the thread kept whole
    save(store, index, [msg(4, "b", "Jo: at the end", 100)])
    assert known_of(marked(index)) == (everyone | {"a-6"}) - {"b-3"}
    check(index, hints=True)
    store.close()


def test_a_row_of_another_role_is_marked_when_its_thread_is_appended_to(tmp_path: Path):
    # A vector row of a tool message (Mastra's own rows may have them): its next message is read by id, so an
    # append to its thread, kept whole, marks it as well as the user/assistant message before the appended one.
    store, index = indexed(tmp_path, {"a": 4})
    store.memory.save_messages([Message(id="a-t", role="tool", thread_id="a", resource_id="u",
                                        created_at=T0 + timedelta(minutes=35),
                                        content={"format": 2, "parts": [{"type": "text", "text": "tool"}]})])
    ids = ["a-0", "a-1", "a-2", "a-3", "a-t"]
    vset = VectorSet.of_rows(4, "m", np.eye(5, 4, dtype=np.float32), ids, ["a"] * 5, ["u"] * 5, [None] * 5)
    rows = np.arange(5)

    def filled() -> dict[str, object]:
        with store.db.read() as conn:
            assert vset.order_rows.fill(conn, index.order, vset, rows, reader=pipeline.thread_order,
                                        threads=lambda: dict.fromkeys(ids, "a"))
            got = vset.order_rows.answers(vset, rows)
            assert got is not None
            assert {ids[r]: a for r, a in got.items()} == pipeline.thread_order(conn, ids, labels=True)
            return {ids[r]: a[0] for r, a in got.items()}

    assert filled()["a-t"] is None  # (the tool message is after every user/assistant message)
    store.memory.save_messages([msg(4, "a", "Mel: after the tool", 40)])
    with store.db.read() as conn:
        index.order.sync(conn)
        vset.order_rows.mark(index.order, vset)
    assert [ids[r] for r in range(5) if not vset.order_rows.known[r]] == ["a-3", "a-t"]
    assert filled()["a-t"] == "a-4"
    store.close()


def test_a_set_with_nothing_known_is_filled_whole_by_its_first_search(tmp_path: Path, monkeypatch):
    """The first search of a set just loaded fills every row at once (one read of the order cache), not only its
    candidates'; past ``WHOLE_FILL_ROWS`` only the candidates'; the answers are a fresh read's either way."""
    from core.recall import order_rows

    store, index = indexed(tmp_path, {"a": 6, "b": 4})
    with store.db.read() as conn:
        vset = index.vector_set(conn, "u", None)
        assert isinstance(vset, VectorSet)
        fresh = pipeline.thread_order(conn, vset.message_ids[: vset.n], labels=True)
        two = np.array([vset.row_of("a-1"), vset.row_of("b-2")], dtype=np.intp)
        found = vset.order_rows.filled(conn, index.order, vset, two, reader=pipeline.thread_order)
        assert found is not None
        assert known_of(vset) == set(fresh)  # every row, not the two asked
        got = vset.order_rows.answers(vset, np.arange(vset.n, dtype=np.intp))
        assert got is not None and {vset.message_ids[r]: a for r, a in got.items()} == fresh
    store.close()
    monkeypatch.setattr(order_rows, "WHOLE_FILL_ROWS", 5)  # (this set has 10 rows)
    (tmp_path / "big").mkdir()
    store, index = indexed(tmp_path / "big", {"a": 6, "b": 4})
    with store.db.read() as conn:
        vset = index.vector_set(conn, "u", None)
        assert isinstance(vset, VectorSet)
        two = np.array([vset.row_of("a-1"), vset.row_of("b-2")], dtype=np.intp)
        assert vset.order_rows.filled(conn, index.order, vset, two, reader=pipeline.thread_order) is not None
        assert known_of(vset) == {"a-1", "b-2"}
    store.close()
