"""A search's state statements answered from what its connection read before (``core.recall.unchanged``) are
never stale: after every kind of change, by another process, another engine on the same file, this process
through another connection, or the search's own connection, the next search's kept answers equal the
statements run then (the keyword memory against FTS5's ``bm25()``, the backlog check against
``keyword.has_pending``, the order cache against ``search.thread_order``), and its hits show the change.
Also on a new read connection (whose ``data_version`` starts over) and an in-memory database."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from core import Memory, MemoryOptions
from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex, keyword, reindex, unchanged
from core.recall import search as pipeline
from core.storage import open_store
from core.storage.reading import end_read, start_read

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
ROOT = Path(__file__).resolve().parents[2]
KEYS = (unchanged.KEYWORD_STATE, unchanged.PENDING, unchanged.ORDER_STATE)
QUERY = "hiking museum guitar soup zebra"
WORDS = "hiking museum painting guitar concert recipe soup running".split()


def msg(thread: str, resource: str, i: int, text: str | None = None) -> Message:
    make = Message.user if i % 2 == 0 else Message.assistant
    body = text if text is not None else f"{('Mel', 'Jo')[i % 2]}: {WORDS[i % 8]} {WORDS[(i * 3) % 8]} {i}"
    return make(body, id=f"{thread}-{i}", thread_id=thread, resource_id=resource,
                created_at=T0 + timedelta(minutes=i))


def save(store: Any, index: RecallIndex | None, msgs: list[Message]) -> None:
    for m in msgs:
        if store.memory.get_thread(m.thread_id) is None:
            store.memory.create_thread(thread_id=m.thread_id, resource_id=m.resource_id)
    store.memory.save_messages(msgs)
    if index is not None:  # (None: as Mastra writes, without recall: the keyword index is behind)
        assert index.refresh_messages([m.id for m in msgs]).ok


def check(index: RecallIndex, conn: Any = None) -> None:
    """In one read: each kept answer is what its statement says now (``conn``: that connection, in a read)."""
    if conn is None:
        with index.store.db.read() as held:
            check(index, held)
        return
    pending = keyword.has_pending(conn)  # (the module's statement itself: nothing kept)
    assert (index.backlog(conn)[0] is not None) == pending
    terms, _ = index.keywords.terms(conn, QUERY)
    for resource in ("u", "v"):
        fast = index.keywords.memory.search(conn, terms, resource_id=resource, thread_id=None, limit=60,
                                            weight=keyword.CONTEXT_WEIGHT)
        slow = keyword.search(conn, QUERY, resource_id=resource, thread_id=None, limit=60, terms=terms)
        assert fast == [(h.message_id, h.thread_id, h.resource_id, h.score) for h in slow], resource
    ids = [r[0] for r in conn.exec_driver_sql("SELECT id FROM mastra_messages ORDER BY id")]
    assert index.order.read(conn, ids, labels=True, reader=pipeline.thread_order) == pipeline.thread_order(
        conn, ids, labels=True)


def kept(index: RecallIndex) -> dict[str, Any]:
    with index.store.db.read() as conn:
        assert unchanged.stamp(conn) is not None  # (a file's read: the answers are kept)
        return {key: conn.info.get(key) for key in KEYS}


def checked_twice(index: RecallIndex) -> None:
    """Two searches; the second ran none of the three statements (answered from what the first kept)."""
    check(index)
    before = kept(index)
    assert all(before[key] is not None for key in KEYS)
    index.search("hiking museum", resource_id="u", mode="hybrid", top_k=5)
    check(index)
    after = kept(index)
    assert all(after[key] is before[key] for key in KEYS)


def found(index: RecallIndex, word: str, resource: str = "u") -> set[str]:
    return {h.message_id for h in index.search(word, resource_id=resource, mode="keyword", top_k=50).hits}


@pytest.fixture
def made(tmp_path: Path) -> Iterator[tuple[Path, Any, RecallIndex]]:
    path = tmp_path / "m.db"
    store = open_store(path)
    index = RecallIndex.for_store(store, HashingEmbedder(32))
    save(store, index, [msg("a", "u", i) for i in range(8)] + [msg("b", "u", i) for i in range(5)]
         + [msg("c", "v", i) for i in range(4)])
    index.search("warm up", resource_id="u", mode="hybrid", top_k=5)
    yield path, store, index
    store.close()


def theirs(path: Path, work: Callable[[Any, RecallIndex], None]) -> None:
    """Another engine on the file (its own connections, as another process's)."""
    store = open_store(path)
    try:
        work(store, RecallIndex.for_store(store, HashingEmbedder(32)))
    finally:
        store.close()


def test_another_engines_write_edit_and_delete_are_seen_on_the_kept_connection(made):
    path, store, index = made
    with store.db.reads():
        checked_twice(index)
        theirs(path, lambda s, i: save(s, i, [msg("a", "u", 8, "Jo: zebra at the end")]))
        check(index)
        assert found(index, "zebra") == {"a-8"}
        checked_twice(index)
        theirs(path, lambda s, i: save(s, i, [msg("a", "u", 3, "Caroline: zebra edited")]))
        check(index)
        assert found(index, "zebra") == {"a-3", "a-4", "a-8"}  # (a-4's doc holds a-3's text too)
        checked_twice(index)

        def delete(s: Any, i: RecallIndex) -> None:
            s.memory.delete_messages(["a-8"])
            assert i.refresh_messages(["a-8"]).ok

        theirs(path, delete)
        check(index)
        assert found(index, "zebra") == {"a-3", "a-4"}


def test_another_engine_forgetting_a_resource_is_seen(made):
    path, store, index = made
    with store.db.reads():
        checked_twice(index)
        assert found(index, "hiking", "v")
        theirs(path, lambda s, i: Memory(s, MemoryOptions(), embedder=HashingEmbedder(32)).forget_resource("v"))
        check(index)  # (the keyword scores of "u" moved too: fewer rows in the table)
        assert not found(index, "hiking", "v")


def test_a_write_without_recall_and_then_a_reindex_by_another_engine_are_seen(made):
    path, store, index = made
    with store.db.reads():
        checked_twice(index)
        theirs(path, lambda s, i: save(s, None, [msg("b", "u", 5, "Mel: zebra unindexed")]))
        check(index)
        with store.db.read() as conn:
            assert index.backlog(conn)[0] is not None  # (the backlog's note: not keyword-indexed yet)
        checked_twice(index)
        theirs(path, lambda s, i: reindex(s, HashingEmbedder(32)))
        check(index)
        with store.db.read() as conn:
            assert index.backlog(conn)[0] is None
        assert found(index, "zebra") == {"b-5"}


def test_another_process_write_is_seen(made):
    path, store, index = made
    code = (
        "import sys; from tests.core.test_recall_unchanged import msg, save; from core.storage import open_store; "
        "from core.recall import RecallIndex; from core.embedding import HashingEmbedder; "
        "s = open_store(sys.argv[1]); save(s, RecallIndex.for_store(s, HashingEmbedder(32)), "
        "[msg('b', 'u', 5, 'Jo: zebra from elsewhere'), msg('a', 'u', 2, 'Jo: zebra edited elsewhere')]); s.close()"
    )
    with store.db.reads():
        checked_twice(index)
        subprocess.run([sys.executable, "-c", code, str(path)], check=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
        check(index)
        assert found(index, "zebra") == {"a-2", "a-3", "b-5"}


def test_this_processs_write_through_its_write_connection_is_seen(made):
    _, store, index = made
    with store.db.reads():
        checked_twice(index)
        save(store, index, [msg("b", "u", 5, "Jo: zebra of ours")])
        check(index)
        assert found(index, "zebra") == {"b-5"}
        checked_twice(index)
        store.memory.delete_messages(["b-5"])  # (without recall: queued for the keyword index)
        check(index)
        assert not found(index, "zebra")


def test_a_write_on_the_searching_connection_itself_is_seen(made):
    """``data_version`` does not move on the connection's own commits: ``total_changes()`` does."""
    _, store, index = made
    with store.db.reads():
        checked_twice(index)
        with store.db.read() as conn:
            driver = conn.connection.driver_connection
            driver.execute("BEGIN IMMEDIATE")
            driver.execute("DELETE FROM mastra_messages WHERE id = 'a-4'")  # (triggers: queued, rewrites bumped)
            driver.execute("COMMIT")
        check(index)
        with store.db.read() as conn:
            assert index.backlog(conn)[1] == {"a-4"}  # (deleted since indexed: left out)


def test_a_new_read_connection_does_not_take_another_connections_answers(made):
    """A new connection's ``data_version`` starts over, so its stamp can equal an older connection's."""
    path, store, index = made
    engine = store.db.engine
    engine.dispose()
    first = engine.connect()
    start_read(first)
    check(index, first)
    stamp = unchanged.stamp(first)
    theirs(path, lambda s, i: save(s, None, [msg("a", "u", 9, "Mel: zebra unindexed")]))
    engine.dispose()  # (no idle connection left: the next is new)
    second = engine.connect()
    start_read(second)
    assert unchanged.stamp(second) == stamp  # the same stamp, another file state: kept per connection
    check(index, second)
    assert index.backlog(second)[0] is not None
    for conn in (first, second):
        end_read(conn)
        conn.close()


def test_an_in_memory_database_reads_every_time():
    store = open_store(":memory:")
    try:
        index = RecallIndex.for_store(store, HashingEmbedder(32))
        save(store, index, [msg("a", "u", i) for i in range(6)])
        with store.db.read() as conn:
            assert unchanged.stamp(conn) is None  # (one connection, shared, that also writes)
        check(index)
        save(store, index, [msg("a", "u", 6, "Jo: zebra in memory")])
        check(index)
        assert found(index, "zebra") == {"a-6"}
        store.memory.delete_messages(["a-6"])
        check(index)
        assert not found(index, "zebra")
    finally:
        store.close()


@pytest.mark.backends
def test_on_both_engines_another_engines_changes_reach_the_next_search(db_path: Any, backend: str):
    """Postgres keeps nothing (its statements run every time, as before); libSQL keeps, and both see the
    changes another engine makes between two searches on one kept connection."""
    store = open_store(db_path)
    try:
        index = RecallIndex.for_store(store, HashingEmbedder(32))
        save(store, index, [msg("a", "u", i) for i in range(6)])
        with store.db.reads():
            assert found(index, "hiking")
            with store.db.read() as conn:
                assert (unchanged.stamp(conn) is None) == (backend == "postgres")
            theirs_on = open_store(db_path)
            try:
                other = RecallIndex.for_store(theirs_on, HashingEmbedder(32))
                save(theirs_on, other, [msg("a", "u", 6, "Jo: zebra appended")])
                assert found(index, "zebra") == {"a-6"}
                save(theirs_on, other, [msg("a", "u", 2, "Mel: zebra edited")])
                assert found(index, "zebra") == {"a-2", "a-3", "a-6"}
                theirs_on.memory.delete_messages(["a-6"])
                assert other.refresh_messages(["a-6"]).ok
                assert found(index, "zebra") == {"a-2", "a-3"}
                theirs_on.memory.delete_messages(["a-2"])  # (without recall: the backlog leaves it out)
                assert found(index, "zebra") == {"a-3"}
            finally:
                theirs_on.close()
    finally:
        store.close()
