"""The hybrid re-rank's kept reads (``core.recall.order_cache``) always equal a fresh read.

Each step compares what the cache answers with ``search.thread_order`` read from the database, for
every message, after messages were appended at a thread's end, in its middle and in another thread,
edited (its speaker label changes) and deleted, by this store and by another engine on the same file.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex
from core.recall import search as pipeline
from core.storage import open_store

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def msg(i: int, thread: str, text: str, minutes: float) -> Message:
    make = Message.user if i % 2 == 0 else Message.assistant
    return make(text, id=f"{thread}-{i}", thread_id=thread, resource_id="u", created_at=T0 + timedelta(minutes=minutes))


def agree(index: RecallIndex, ids: list[str]) -> set[str]:
    """The cache's answers equal a fresh read, twice; returns the messages the first time had to read."""
    reads: list[list[str]] = []

    def counting(conn, message_ids, *, labels=False, keys=None):  # type: ignore[no-untyped-def]
        reads.append(list(message_ids))
        return pipeline.thread_order(conn, message_ids, labels=labels, keys=keys)

    with index.store.db.read() as conn:
        fresh = pipeline.thread_order(conn, ids, labels=True)
        assert index.order.read(conn, ids, labels=True, reader=counting) == fresh
        first = len(reads)
        assert index.order.read(conn, ids, labels=True, reader=counting) == fresh
        assert len(reads) == first  # the second time entirely from what was kept
    return {m for r in reads for m in r}


def test_kept_reads_follow_appends_edits_and_deletes(tmp_path: Path):
    store = open_store(tmp_path / "m.db")
    index = RecallIndex.for_store(store, HashingEmbedder(16))
    store.memory.create_thread(thread_id="a", resource_id="u")
    store.memory.create_thread(thread_id="b", resource_id="u")
    store.memory.save_messages([msg(i, "a", f"Mel: line {i}", 10 * i) for i in range(6)])
    store.memory.save_messages([msg(i, "b", f"Jo: other {i}", 10 * i) for i in range(4)])
    ids = [f"a-{i}" for i in range(6)] + [f"b-{i}" for i in range(4)]
    assert agree(index, ids) == set(ids)
    # At the end of thread a: only a-5 (which had no next message) is read again, with the new one.
    store.memory.save_messages([msg(6, "a", "Mel: at the end", 100)])
    assert agree(index, ids + ["a-6"]) == {"a-5", "a-6"}
    # In the middle of thread a (between a-2 and a-3), and a tool message that is nobody's next.
    store.memory.save_messages([msg(7, "a", "Caroline: in between", 25)])  # a-2's next changes
    store.memory.save_messages([Message(id="a-t", role="tool", thread_id="a", resource_id="u", created_at=T0 + timedelta(minutes=5),
                                        content={"format": 2, "parts": [{"type": "text", "text": "tool"}]})])
    agree(index, ids + ["a-6", "a-7"])
    # An edit changes a label; a delete changes a next message.
    store.memory.save_messages([msg(1, "a", "Caroline: edited", 10)])
    agree(index, ids + ["a-6", "a-7"])
    store.memory.delete_messages(["a-3"])
    agree(index, [i for i in ids if i != "a-3"] + ["a-6", "a-7"])
    # Another engine on the same file appends to thread b.
    other = open_store(tmp_path / "m.db")
    other.memory.save_messages([msg(8, "b", "Jo: from elsewhere", 35)])
    other.close()
    agree(index, [i for i in ids if i != "a-3"] + ["b-8"])
    store.close()


def test_a_hybrid_search_is_the_same_with_kept_reads(tmp_path: Path):
    store = open_store(tmp_path / "m.db")
    index = RecallIndex.for_store(store, HashingEmbedder(32))
    store.memory.create_thread(thread_id="a", resource_id="u")
    msgs = [msg(i, "a", f"{('Mel', 'Jo')[i % 2]}: hiking museum {'zebra' * (i % 3)} {i % 5}", 10 * i) for i in range(40)]
    store.memory.save_messages(msgs)
    assert index.index_messages(msgs).ok
    queries = ["What did Mel say about hiking", "zebra museum", "Jo hiking 3"]
    first = [[(h.message_id, h.score) for h in index.search(q, resource_id="u", top_k=5).hits] for q in queries]
    again = [[(h.message_id, h.score) for h in index.search(q, resource_id="u", top_k=5).hits] for q in queries]
    assert first == again
    fresh = RecallIndex(store, HashingEmbedder(32))  # nothing kept
    assert [[(h.message_id, h.score) for h in fresh.search(q, resource_id="u", top_k=5).hits] for q in queries] == first
    store.close()


def agree_whole(index: RecallIndex, ids: list[str], threads: dict[str, str | None], unkept: tuple[str, ...] = ()) -> list[str]:
    """With thread hints (threads kept whole): the cache's answers equal a fresh read, twice, the
    second time reading only ``unkept`` (rows never kept); returns the messages read one by one the first time."""
    reads: list[str] = []

    def counting(conn, message_ids, *, labels=False, keys=None):  # type: ignore[no-untyped-def]
        reads.extend(message_ids)
        return pipeline.thread_order(conn, message_ids, labels=labels, keys=keys)

    with index.store.db.read() as conn:
        fresh = pipeline.thread_order(conn, ids, labels=True)
        assert index.order.read(conn, ids, labels=True, reader=counting, threads=lambda: threads) == fresh
        first = list(reads)
        assert index.order.read(conn, ids, labels=True, reader=counting, threads=lambda: threads) == fresh
        assert sorted(reads[len(first):]) == sorted(unkept)
        del reads[len(first):]
        unlabelled = index.order.read(conn, ids, labels=False, reader=counting, threads=lambda: threads)
        assert {m: o[:2] for m, o in unlabelled.items()} == {m: o[:2] for m, o in fresh.items()}
    return first


def test_whole_threads_kept_follow_appends_edits_and_deletes(tmp_path: Path):
    store = open_store(tmp_path / "m.db")
    index = RecallIndex.for_store(store, HashingEmbedder(16))
    store.memory.create_thread(thread_id="a", resource_id="u")
    store.memory.create_thread(thread_id="b", resource_id="u")
    # Equal times in thread a (the order falls back to the id), a tool message between.
    store.memory.save_messages([msg(i, "a", f"Mel: line {i}", 10 * (i // 2)) for i in range(8)])
    store.memory.save_messages([msg(i, "b", f"Jo: other {i}", 10 * i) for i in range(4)])
    store.memory.save_messages([Message(id="a-t", role="tool", thread_id="a", resource_id="u", created_at=T0 + timedelta(minutes=15),
                                        content={"format": 2, "parts": [{"type": "text", "text": "tool"}]})])
    store.memory.create_thread(thread_id="c", resource_id="u")
    store.memory.save_messages([msg(i, "c", f"Jo: third {i}", 10 * i) for i in range(2)])
    hints: dict[str, str | None] = {f"a-{i}": "a" for i in range(12)} | {f"b-{i}": "b" for i in range(12)}
    # Wrong and missing hints: answered from the message's own thread when that is kept whole (b),
    # else read one by one (c); a tool message is never in a kept thread.
    hints |= {"a-t": "a", "b-2": "a", "b-3": None, "c-0": "a", "c-1": None}
    ids = [f"a-{i}" for i in range(8)] + [f"b-{i}" for i in range(4)] + ["a-t", "c-0", "c-1"]
    assert sorted(agree_whole(index, ids, hints)) == ["a-t", "c-0", "c-1"]
    assert set(index.order._threads) == {"a", "b"}  # read whole once
    # Appends at the end, in the middle (between equal times), before the first, in another thread.
    store.memory.save_messages([msg(8, "a", "Mel: at the end", 100)])
    store.memory.save_messages([msg(9, "a", "Caroline: in between", 10)])
    store.memory.save_messages([msg(10, "a", "Jo: first of all", -5)])
    other = open_store(tmp_path / "m.db")
    other.memory.save_messages([msg(11, "b", "Jo: from elsewhere", 35), msg(5, "b", "Jo: between", 5)])
    other.close()
    ids += ["a-8", "a-9", "a-10", "b-11", "b-5"]
    assert agree_whole(index, ids, hints) == []  # appends applied in place, nothing read
    # An edit changes a label, a delete a next message: everything is read again.
    store.memory.save_messages([msg(1, "a", "Caroline: edited", 0)])
    agree_whole(index, ids, hints)
    store.memory.delete_messages(["a-3", "b-1"])
    ids = [i for i in ids if i not in ("a-3", "b-1")]
    assert sorted(agree_whole(index, ids, hints)) == ["a-t", "c-0", "c-1"]
    store.close()


def test_whole_threads_leave_odd_rows_to_the_read_by_id(tmp_path: Path):
    store = open_store(tmp_path / "m.db")
    index = RecallIndex.for_store(store, HashingEmbedder(16))
    store.memory.create_thread(thread_id="a", resource_id="u")
    store.memory.create_thread(thread_id="b", resource_id="u")
    store.memory.save_messages([msg(i, "a", f"Mel: line {i}", 10 * i) for i in range(4)])
    store.memory.save_messages([msg(i, "b", f"Jo: other {i}", 10 * i) for i in range(3)])
    with store.db.write() as conn:
        # A plain-text content (its start is read whole, by id) and a thread with a time that is not text (a blob).
        conn.exec_driver_sql("UPDATE mastra_messages SET content = 'Caroline: plain' WHERE id = 'a-2'")
        conn.exec_driver_sql("UPDATE mastra_messages SET \"createdAt\" = X'3132' WHERE id = 'b-1'")
    hints: dict[str, str | None] = {f"a-{i}": "a" for i in range(4)} | {f"b-{i}": "b" for i in range(3)}
    ids = list(hints)
    assert sorted(agree_whole(index, ids, hints, unkept=("b-1",))) == ["a-2", "b-0", "b-1", "b-2"]
    assert set(index.order._threads) == {"a"}
    store.close()


def test_a_database_mastra_wrote_reads_every_time(tmp_path: Path):
    """Opened read-only without our migrations there is no state table (no counters): the cache keeps
    nothing and answers every read from the database, as before any of it was kept."""
    import json
    import sqlite3

    from core.storage import schema

    path = tmp_path / "mastra.db"
    con = sqlite3.connect(path)
    for ddl in schema.MASTRA_MEMORY_DDL:
        con.execute(ddl)
    con.execute("INSERT INTO mastra_threads VALUES (?,?,?,?,?,?)",
                ("t", "u", "From Mastra", "{}", "2026-01-01T10:00:00.000Z", "2026-01-01T10:05:00.000Z"))
    for i, (role, text) in enumerate((("user", "Mel: hello"), ("assistant", "Jo: hi"), ("user", "Mel: bye"))):
        content = json.dumps({"format": 2, "parts": [{"type": "text", "text": text}], "content": text})
        con.execute('INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
                    "VALUES (?,?,?,?,?,?,?)", (f"m{i}", "t", content, role, "v2", f"2026-01-01T10:0{i}:00.000Z", "u"))
    con.commit()
    con.close()
    store = open_store(path, read_only=True, create=False)
    try:
        index = RecallIndex.for_store(store, HashingEmbedder(16))
        assert not index.migrated
        ids = ["m0", "m1", "m2"]
        reads: list[list[str]] = []

        def counting(conn, message_ids, *, labels=False, keys=None):  # type: ignore[no-untyped-def]
            reads.append(list(message_ids))
            return pipeline.thread_order(conn, message_ids, labels=labels, keys=keys)

        with store.db.read() as conn:
            assert index.order.sync(conn) is False
            fresh = pipeline.thread_order(conn, ids, labels=True)
            assert fresh["m0"][0] == "m1" and fresh["m1"][0] == "m2"
            for _ in range(2):
                assert index.order.read(conn, ids, labels=True, reader=counting, threads=lambda: {m: "t" for m in ids}) == fresh
        assert reads == [ids, ids]
        pipeline.run(index, "hello", resource_id="u", thread_id=None, top_k=3, mode="hybrid")  # no state table: no error
    finally:
        store.close()


def test_kept_threads_make_room_for_newly_asked_ones(tmp_path: Path, monkeypatch):  # type: ignore[no-untyped-def]
    """Whole threads up to ``MAX_WHOLE_ROWS`` messages in all: a newly asked thread takes the place of the
    least recently asked (regression: once full, no new thread was kept, and a long-running process read
    every new thread's candidates one by one from then on); a thread larger than the limit is never kept."""
    from core.recall import order_cache

    monkeypatch.setattr(order_cache, "MAX_WHOLE_ROWS", 25)  # (threads a, b and c hold 10 messages each, d 30)
    store = open_store(tmp_path / "m.db")
    index = RecallIndex.for_store(store, HashingEmbedder(16))
    for thread, n in (("a", 10), ("b", 10), ("c", 10), ("d", 30)):
        store.memory.create_thread(thread_id=thread, resource_id="u")
        store.memory.save_messages([msg(i, thread, f"Mel: {thread} line {i}", 10 * i) for i in range(n)])
    hints: dict[str, str | None] = {f"{t}-{i}": t for t in "abcd" for i in range(30)}

    def ask(thread: str, n: int = 10) -> list[str]:
        return agree_whole(index, [f"{thread}-{i}" for i in range(n)], hints)

    assert ask("a") == [] and ask("b") == []
    assert list(index.order._threads) == ["a", "b"]
    assert ask("a") == []  # a is now the most recently asked
    assert ask("c") == []  # b goes, a stays
    assert list(index.order._threads) == ["a", "c"]
    assert ask("b") == []  # and b comes back in a's place
    assert list(index.order._threads) == ["c", "b"]
    assert index.order._whole_rows == 20
    assert set(index.order._of) == {f"{t}-{i}" for t in "cb" for i in range(10)}
    assert sorted(ask("d", 30)) == sorted(f"d-{i}" for i in range(30))  # too large: read one by one
    assert list(index.order._threads) == ["c", "b"]
    # Appends to a kept thread are kept in place and count towards the limit.
    store.memory.save_messages([msg(10, "b", "Mel: b at the end", 200)])
    assert agree_whole(index, [f"b-{i}" for i in range(11)], hints) == []
    assert index.order._whole_rows == 21
    assert ask("a") == []  # c goes (b was asked since)
    assert list(index.order._threads) == ["b", "a"] and index.order._whole_rows == 21
    store.close()


def test_a_thread_read_whole_is_decoded_once_when_read(tmp_path: Path, monkeypatch):  # type: ignore[no-untyped-def]
    """A thread read whole gets each message's day and label decoded by that read, so the searches after it
    decode none of its candidates (each did so the first time a message was a candidate); the answers are
    a fresh read's, also after an append changes a kept message's next one."""
    from core.recall import order_cache

    store = open_store(tmp_path / "m.db")
    index = RecallIndex.for_store(store, HashingEmbedder(16))
    store.memory.create_thread(thread_id="a", resource_id="u")
    store.memory.save_messages([msg(i, "a", f"{'Mel' if i % 2 else 'Jo'}: line {i}", 10 * i) for i in range(6)]
                               + [msg(6, "a", "   ", 60), msg(7, "a", "no label here", 70)])
    ids = [f"a-{i}" for i in range(8)]
    assert agree_whole(index, ids[:2], {m: "a" for m in ids}) == []  # (the thread read whole here)
    decoded: list[str] = []
    real = order_cache.speaker_label

    def counted(text):  # type: ignore[no-untyped-def]
        decoded.append(text)
        return real(text)

    monkeypatch.setattr(order_cache, "speaker_label", counted)
    assert sorted(agree_whole(index, ids, {m: "a" for m in ids})) == ["a-6"]  # (a blank text: read whole, by id)
    assert decoded == []
    store.memory.save_messages([msg(8, "a", "Mel: the last", 80)])
    assert agree_whole(index, ids + ["a-8"], {m: "a" for m in ids}) == []  # (a-6 kept from its read by id)
    assert sorted(decoded) == ["Mel: the last", "no label here"]  # the new message, and the one it now follows
    store.close()


def test_a_read_answered_whole_from_kept_answers_marks_its_thread_recently_asked(tmp_path: Path, monkeypatch):  # type: ignore[no-untyped-def]
    """A search's candidates all answered from what was kept (one lookup pass for all of them) still mark
    their threads recently asked, so a newly asked thread takes the place of another."""
    from core.recall import order_cache

    monkeypatch.setattr(order_cache, "MAX_WHOLE_ROWS", 25)  # (threads a, b and c hold 10 messages each)
    store = open_store(tmp_path / "m.db")
    index = RecallIndex.for_store(store, HashingEmbedder(16))
    for thread in "abc":
        store.memory.create_thread(thread_id=thread, resource_id="u")
        store.memory.save_messages([msg(i, thread, f"Mel: {thread} line {i}", 10 * i) for i in range(10)])
    hints: dict[str, str | None] = {f"{t}-{i}": t for t in "abc" for i in range(10)}
    read: list[str] = []

    def ask(thread: str) -> None:
        ids = [f"{thread}-{i}" for i in range(10)]

        def counting(conn, message_ids, *, labels=False, keys=None):  # type: ignore[no-untyped-def]
            read.extend(message_ids)
            return pipeline.thread_order(conn, message_ids, labels=labels, keys=keys)

        with index.store.db.read() as conn:
            assert index.order.read(conn, ids, labels=True, reader=counting, threads=lambda: hints) == \
                pipeline.thread_order(conn, ids, labels=True)

    ask("a")
    ask("b")
    assert list(index.order._threads) == ["a", "b"] and set(index.order._answers) == set(hints) - {f"c-{i}" for i in range(10)}
    ask("a")  # (every answer kept)
    assert list(index.order._threads) == ["b", "a"]
    ask("c")  # b goes, a stays
    assert list(index.order._threads) == ["a", "c"] and read == []
    store.close()
