"""The recall index's set-based writes: id lists go as one JSON parameter (``bulk.in_lists``) and a
batch's keyword docs are read with the newest doc id in one statement. The rows written must be
exactly those of the placeholder path (the statements as they were before), for unicode, NUL
characters, empty text, ids JSON must escape, repeated ids in one batch, edits and deletes."""

from __future__ import annotations

import json

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import re

import pytest
import sqlalchemy as sa

from core import Memory, MemoryOptions, open_store
from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall.tables import DOCS_TABLE, FTS_TABLE, QUEUE_TABLE, STATE_TABLE
from core.recall import vector_table
from core.storage import bulk

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
RESOURCE = "u"


def _msg(i: int, text: str, *, mid: str | None = None, thread: str = "t", role: str | None = None) -> Message:
    make = {"user": Message.user, "assistant": Message.assistant}[role or ("user" if i % 2 == 0 else "assistant")]
    return make(text, id=mid or f"m{i}", thread_id=thread, resource_id=RESOURCE, created_at=T0 + timedelta(seconds=i))


def _scenario(memory: Memory) -> None:
    memory.create_thread(resource_id=RESOURCE, thread_id="t")
    memory.create_thread(resource_id=RESOURCE, thread_id="t2")
    memory.save_messages([
        _msg(0, "我对花生过敏 and peanuts"), _msg(1, "café naïve 🙂 e\u0301"), _msg(2, "a NUL\x00inside the text"),
        _msg(3, ""), _msg(4, "   "), _msg(5, "quotes \"here\" and back\\slash", mid='id "q" \\ ид'),
        _msg(6, "line one\nline two\ttab"), _msg(7, "second thread", thread="t2"),
    ])
    # A repeated id in one batch (the last content wins), a rewrite of stored messages (their docs
    # are deleted first, the newest doc among them), and new ones.
    memory.save_messages([
        _msg(8, "first copy"), _msg(8, "second copy wins"),
        _msg(1, "café edited"), _msg(7, "second thread, edited", thread="t2"),
        _msg(9, "after the rewrite"), _msg(10, "NUL\x00again"),
    ])
    memory.edit_message("m0", resource_id=RESOURCE, text="allergic to peanuts (edited)")
    memory.delete_messages(["m6"], resource_id=RESOURCE)
    memory.save_messages([_msg(10, "the newest doc rewritten"), _msg(3, "now it has text")])
    memory.save_messages([_msg(11 + i, f"batch message {i} about topic {i % 7}") for i in range(120)])


def _dump(store: Any) -> dict[str, list[tuple[Any, ...]]]:
    with store.db.read() as conn:
        vector_table = conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'memory_messages_%'").scalar()
        return {
            "docs": [tuple(r) for r in conn.exec_driver_sql(
                f"SELECT doc_id, message_id, thread_id, resource_id, content_hash FROM {DOCS_TABLE} ORDER BY doc_id")],
            "fts": [tuple(r) for r in conn.exec_driver_sql(f"SELECT rowid, body, context FROM {FTS_TABLE} ORDER BY rowid")],
            "vectors": [tuple(r) for r in conn.exec_driver_sql(
                f'SELECT id, vector_id, embedding, metadata, model_id FROM "{vector_table}" ORDER BY id')],
            "state": [tuple(r) for r in conn.exec_driver_sql(f"SELECT key, value FROM {STATE_TABLE} ORDER BY key")],
            "queue": [tuple(r) for r in conn.exec_driver_sql(f"SELECT seq, message_id, op FROM {QUEUE_TABLE} ORDER BY seq")],
        }


def _run(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    store = open_store(path)
    try:
        memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=True), embedder=HashingEmbedder(64))
        _scenario(memory)
        return _dump(store)
    finally:
        store.close()


def test_json_id_lists_write_exactly_the_rows_of_the_placeholder_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    batched = _run(tmp_path / "json.db")
    monkeypatch.setattr(bulk, "_json_safe", lambda values: False)  # every id list as placeholders
    monkeypatch.setattr(bulk, "_NOT_PLAIN", re.compile("(?s)."))  # (the hand-joined lists too)
    plain = _run(tmp_path / "placeholders.db")
    assert batched == plain
    docs = {r[1]: r for r in batched["docs"]}
    assert {"m2", "m10", 'id "q" \\ ид', "m8", "m3"} <= set(docs)
    assert "m6" not in docs and "m4" not in docs  # deleted; whitespace only
    metadata = {r[1]: r[3] for r in batched["vectors"]}
    assert "NUL\\u0000inside" in metadata["m2"]  # the whole text, NUL included, in the vector's metadata
    assert len(batched["vectors"]) == len(batched["docs"]) == 11 + 120 - 2  # m4 and m6 have none
    assert [r[0] for r in batched["docs"]] == sorted(r[0] for r in batched["docs"])


def test_rows_bound_as_one_json_document_store_exactly_the_rows_of_placeholders(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keyword docs, FTS rows and vector rows bound as one JSON document (and the vectors and
    metadata as two blobs) store the same rows, bytes, types and rowids as one placeholder per value;
    rows a JSON document would not carry unchanged go by placeholders (test below)."""
    seen: list[str] = []

    def listener(*args: Any) -> None:
        seen.append(args[2])

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", listener)
    try:
        packed = _run(tmp_path / "packed.db")
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", listener)
    for table in (FTS_TABLE, "memory_messages_64"):  # the packed statements did run (a doc is its FTS5 row)
        assert any(s.startswith(f"INSERT INTO {table}") or s.startswith(f'INSERT INTO "{table}"') for s in seen
                   if "json_each" in s), table
    with_types = _types(tmp_path / "packed.db")
    monkeypatch.setattr(bulk, "json_rows_param", lambda rows: None)  # every row by placeholders
    monkeypatch.setattr(vector_table, "json_rows_param", lambda rows: None)
    plain = _run(tmp_path / "placeholders.db")
    assert packed == plain
    assert with_types == _types(tmp_path / "placeholders.db")
    assert with_types["vectors"] == {("integer", "text", "blob", "text", "text")}
    metadata = {r[1]: r[3] for r in packed["vectors"]}
    assert '"content": "quotes \\"here\\" and back\\\\slash"' in metadata['id "q" \\ ид']
    assert '"content": "a NUL\\u0000inside the text"' in metadata["m2"]
    assert len(packed["fts"]) == len(packed["docs"])


def _resave_run(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    store = open_store(path)
    try:
        memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=True), embedder=HashingEmbedder(64))
        memory.create_thread(resource_id=RESOURCE, thread_id="t")
        memory.save_messages([_msg(i, f"first save {i}") for i in (0, 1, 3, 5)])
        # Saved and deleted with recall off (another process): rows above the watermark, never drained.
        plain = Memory(store, MemoryOptions(last_messages=10))
        plain.save_messages([_msg(2, "m2 first"), _msg(4, "m4 first")])
        plain.delete_messages(["m2", "m4"], resource_id=RESOURCE)
        # m2 comes back under its id in a save with recall (a new rowid, indexed by that save, with a
        # delete queued), m4 stays gone: the drain must keep m2's fresh rows and drop m4's none.
        memory.save_messages([_msg(2, "m2 saved again"), _msg(6, "a new one")])
        memory.save_messages([_msg(7, "and one more")])
        return _dump(store)
    finally:
        store.close()


def test_the_drain_reads_the_new_rows_as_one_json_list_and_keeps_a_message_saved_again(tmp_path: Path) -> None:
    """A save's drain reads the ids of the rows inserted since the watermark as one JSON array; a
    message deleted (change queued) and saved again under its id by a save with recall keeps its rows."""
    counted = _resave_run(tmp_path / "counted.db")
    assert {r[1] for r in counted["docs"]} == {r[1] for r in counted["vectors"]} == {"m0", "m1", "m2", "m3", "m5", "m6", "m7"}
    assert counted["queue"] == []
    store = open_store(tmp_path / "counted.db")
    try:
        with store.db.read() as conn:
            top = conn.exec_driver_sql("SELECT max(rowid) FROM mastra_messages").scalar()
    finally:
        store.close()
    assert ("fts:rowid", top) in counted["state"]


def test_the_drain_reads_an_id_holding_a_nul_row_by_row(tmp_path: Path) -> None:
    """An id with a NUL (written by another client: our driver cuts parameters there) comes back from
    the JSON array whole; the drain then reads the new rows one by one, as the driver gives them."""
    store = open_store(tmp_path / "nul.db")
    try:
        memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=True), embedder=HashingEmbedder(64))
        memory.create_thread(resource_id=RESOURCE, thread_id="t")
        memory.save_messages([_msg(0, "before")])
        with store.db.write() as conn:
            conn.exec_driver_sql(
                "INSERT INTO mastra_messages (id, thread_id, content, role, type, \"createdAt\", \"resourceId\") "
                "SELECT 'nul' || char(0) || 'id', thread_id, content, role, type, '2026-03-01T09:00:00.500Z', \"resourceId\" "
                "FROM mastra_messages WHERE id = 'm0'")
        memory.save_messages([_msg(1, "after")])  # its drain meets the NUL id
        dump = _dump(store)
        with store.db.read() as conn:
            top = conn.exec_driver_sql("SELECT max(rowid) FROM mastra_messages").scalar()
    finally:
        store.close()
    assert ("fts:rowid", top) in dump["state"]
    assert {"m0", "m1"} <= {r[1] for r in dump["docs"]}


def _types(path: Path) -> dict[str, set[tuple[str, ...]]]:
    store = open_store(path)
    try:
        with store.db.read() as conn:
            return {
                "docs": {tuple(r) for r in conn.exec_driver_sql(
                    f"SELECT typeof(doc_id), typeof(message_id), typeof(thread_id), typeof(resource_id), "
                    f"typeof(content_hash) FROM {DOCS_TABLE}")},
                "vectors": {tuple(r) for r in conn.exec_driver_sql(
                    "SELECT typeof(id), typeof(vector_id), typeof(embedding), typeof(metadata), typeof(model_id) "
                    "FROM memory_messages_64")},
            }
    finally:
        store.close()


def test_json_rows_param_refuses_what_json_each_would_not_give_back(tmp_path: Path) -> None:
    rows: list[tuple[Any, ...]] = [(1, "plain", None), (2, 'q"uote \\ back\\slash', "é 花 🙂"),
                                   (3, "tab\tnew\nline\x01", "")]
    doc = bulk.json_rows_param(rows)
    assert doc is not None
    assert bulk.json_rows_param([(1, "a\x00b")]) is None
    assert bulk.json_rows_param([(1, "lone \ud800")]) is None
    assert bulk.json_rows_param([(1, "a backslash then \\u0000")]) is None  # (bound one by one: same rows)
    engine = sa.create_engine(f"sqlite+libsql:///{tmp_path / 'x.db'}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (a INTEGER PRIMARY KEY, b TEXT, c TEXT)")
        bulk.insert_json_rows(conn, "INSERT INTO t (a, b, c)", rows)
        bulk.insert_json_rows(conn, "INSERT INTO t (a, b, c)", [(4, "NUL\x00kept", "x")])  # placeholders
        got = [tuple(r) for r in conn.exec_driver_sql("SELECT a, b, c, typeof(c) FROM t ORDER BY a")]
    engine.dispose()
    assert got[:3] == [(*r, "null" if r[2] is None else "text") for r in rows]
    assert got[3][0] == 4 and got[3][1].startswith("NUL")


def test_in_lists_use_one_json_parameter_unless_a_value_has_a_nul(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite+libsql:///{tmp_path / 'x.db'}")
    ids = ["plain", "é 花", 'q"uote', "back\\slash", "tab\tnew\nline", "", "9"]
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (id TEXT PRIMARY KEY, n INTEGER)")
        for n, value in enumerate([*ids, "a\x00b", "a"]):
            conn.exec_driver_sql("INSERT INTO t VALUES (?, ?)", (value, n))
        lists = list(bulk.in_lists(conn, ids))
        assert [marks for marks, _ in lists] == ["SELECT value FROM json_each(?)"]
        found = [r[0] for r in conn.exec_driver_sql(f"SELECT id FROM t WHERE id IN ({lists[0][0]}) ORDER BY n", lists[0][1])]
        assert found == ids
        # json_each ends a string at a NUL: a list holding one goes as placeholders, and finds what
        # one placeholder per id finds (whatever the driver makes of the NUL).
        wanted = ["a\x00b", "plain"]
        lists = list(bulk.in_lists(conn, wanted))
        assert [marks for marks, _ in lists] == ["?,?"]
        one_by_one = sorted(r[0] for v in wanted for r in conn.exec_driver_sql("SELECT n FROM t WHERE id = ?", (v,)))
        assert sorted(r[0] for r in conn.exec_driver_sql(f"SELECT n FROM t WHERE id IN ({lists[0][0]})", lists[0][1])) \
            == one_by_one
        ints = list(bulk.in_lists(conn, [0, 2, 7]))
        assert [r[0] for r in conn.exec_driver_sql(f"SELECT n FROM t WHERE n IN ({ints[0][0]}) ORDER BY n", ints[0][1])] \
            == [0, 2, 7]
        assert list(bulk.in_lists(conn, [])) == []
        assert [len(p) for _, p in bulk.in_lists(conn, ["a\x00"] * 1001, chunk=500)] == [500, 500, 1]
    engine.dispose()


def test_id_lists_join_plain_ids_into_the_json_list_json_each_reads_back(tmp_path: Path) -> None:
    """Ids that need no JSON escaping are joined into the list by hand; any other list is escaped by
    the encoder, or goes as placeholders: json_each gives back every id as it was."""
    engine = sa.create_engine(f"sqlite+libsql:///{tmp_path / 'ids.db'}")
    plain = ["01a23df7-db30-7ed8", "é 花 🙂", "a'b", "x\x7fy", "9"]
    escaped = ['q"uote', "back\\slash", "tab\tline\nbreak"]
    with engine.begin() as conn:
        lists = list(bulk.in_lists(conn, plain))
        assert lists == [(bulk.JSON_LIST, ('["' + '","'.join(plain) + '"]',))]
        assert [r[0] for r in conn.exec_driver_sql(f"SELECT value FROM ({lists[0][0]})", lists[0][1])] == plain
        for ids in (escaped, [*plain, *escaped], [1, 2]):
            assert list(bulk.in_lists(conn, ids)) == [(bulk.JSON_LIST, (json.dumps(ids, ensure_ascii=False),))]
        assert list(bulk.in_lists(conn, ["a\x00b", "c"])) == [("?,?", ("a\x00b", "c"))]
        found = list(bulk.in_lists(conn, escaped))
        assert [r[0] for r in conn.exec_driver_sql(f"SELECT value FROM ({found[0][0]})", found[0][1])] == escaped
        assert list(bulk.in_lists(conn, [])) == []
    engine.dispose()


def test_a_batch_of_new_messages_writes_its_recall_rows_in_a_fixed_number_of_statements(tmp_path: Path) -> None:
    store = open_store(tmp_path / "count.db")
    try:
        memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=True), embedder=HashingEmbedder(64))
        memory.create_thread(resource_id=RESOURCE, thread_id="t")
        memory.save_messages([_msg(i, f"warm-up {i}") for i in range(100)])
        seen: list[str] = []
        sa.event.listen(store.db.engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
        memory.save_messages([_msg(100 + i, f"message number {i}") for i in range(100)])
        recall = [s for s in seen if "memory_studio" in s or "memory_messages_" in s]
        # The messages' rowids with their present keyword rows, the FTS insert (the doc is its FTS5 row),
        # the queue with the watermark, the watermark's write, the vector insert: one statement each per
        # batch, whatever its size.
        assert len(recall) == 5, recall
        # The stage's reads: whether any is stored and the text before the first, one statement.
        assert len(seen) <= 14, seen
    finally:
        store.close()


def test_keyword_rows_hold_the_segmented_text_for_ascii_texts_too(tmp_path: Path) -> None:
    """An ASCII text without a NUL is stored as it is (its own segmentation, taken without running
    ``segment``); any other text as ``segment`` makes it: checked against ``segment`` itself."""
    import random

    from core.recall.text import segment

    rnd = random.Random(3)
    texts = ["plain ascii", "tabs\tand\r\nbreaks\x01\x7f", "NUL\x00here", "ﬁne café", "我对花生过敏 ok",
             *("".join(chr(rnd.randrange(1, 128)) for _ in range(rnd.randrange(1, 30))) + "w" for _ in range(40))]
    store = open_store(tmp_path / "seg.db")
    try:
        memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=True), embedder=HashingEmbedder(64))
        memory.create_thread(resource_id=RESOURCE, thread_id="t")
        memory.save_messages([_msg(i, text) for i, text in enumerate(texts)])
        dump = _dump(store)
    finally:
        store.close()
    body = {mid: fts[1:] for (_, mid, *_), fts in zip(dump["docs"], dump["fts"])}
    for i, text in enumerate(texts):
        context = texts[i - 1] if i else ""
        assert body[f"m{i}"] == (segment(text), segment(context)), i


def _staging_run(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    store = open_store(path)
    try:
        memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=True), embedder=HashingEmbedder(64))
        memory.create_thread(resource_id=RESOURCE, thread_id="t")
        memory.create_thread(resource_id=RESOURCE, thread_id="t2")
        memory.save_messages([_msg(i, f"in order {i}") for i in range(10)])  # one thread, in order
        # Two threads, out of order, with equal times broken by id.
        memory.save_messages([_msg(14, "t late"), _msg(12, "t2 a", thread="t2"), _msg(11, "t early"),
                              _msg(13, "t2 b", thread="t2"), _msg(11, "same time", mid="m11b")])
        # A signal saved with them (stored, not indexed: the saved list is longer than the batch).
        tool = Message.create("signal", [{"type": "text", "text": "a signal"}], id="signal1", thread_id="t",
                              resource_id=RESOURCE, created_at=T0 + timedelta(seconds=15, milliseconds=500))
        memory.save_messages([_msg(15, "before the signal"), tool, _msg(16, "after the signal")])
        # Times not given: the save moves them after the thread's newest (copies, re-chained).
        memory.save_messages([_msg(1, f"no time {i}", mid=f"n{i}").copy(created_at_given=False) for i in range(3)])
        memory.save_messages([_msg(5, "in order 5, rewritten"), _msg(20, "new after a rewrite")])
        return _dump(store)
    finally:
        store.close()


def test_a_save_stored_as_staged_writes_the_rows_of_the_general_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the save stored the very messages staged (the usual save), the write keeps the staged
    batch as it is and the re-check reuses the stage's order; turned off, every save takes the
    general path (messages matched by id, threads sorted again): the same rows either way."""
    from core.recall.index import StagedIndex

    fast = _staging_run(tmp_path / "fast.db")
    monkeypatch.setattr(StagedIndex, "_stored_as_staged", lambda self, saved: False)
    assert fast == _staging_run(tmp_path / "general.db")
    contexts = {r[1]: r[3] for r in fast["vectors"]}
    assert '"content": "after the signal"' in contexts["m16"] and len(fast["vectors"]) == 10 + 5 + 2 + 3 + 1


def test_a_utf16_database_gets_its_vector_metadata_bound_as_text(tmp_path: Path) -> None:
    """The packed vector write reads the metadata bytes back with CAST(... AS TEXT), which takes them
    in the database's encoding: a UTF-16 database (made by another program) binds them as text."""
    import libsql_experimental

    path = tmp_path / "utf16.db"
    raw = libsql_experimental.connect(str(path))
    raw.execute("PRAGMA encoding = 'UTF-16le'")
    raw.execute("CREATE TABLE made_elsewhere (x)")
    raw.commit()
    raw.close()
    store = open_store(path)
    try:
        store.migrate()  # (a file we did not create: the explicit step)
        memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=True), embedder=HashingEmbedder(64))
        memory.create_thread(resource_id=RESOURCE, thread_id="t")
        memory.save_messages([_msg(0, "café 花生 🙂"), _msg(1, "plain")])
        with store.db.read() as conn:
            assert conn.exec_driver_sql("PRAGMA encoding").scalar() == "UTF-16le"
        dump = _dump(store)
    finally:
        store.close()
    metadata = {r[1]: r[3] for r in dump["vectors"]}
    assert '"content": "café 花生 🙂"' in metadata["m0"] and metadata["m0"].startswith('{"message_id": "m0"')


def test_a_save_larger_than_a_drain_leaves_no_doc_for_the_next_saves_to_rewrite(tmp_path: Path) -> None:
    """A save of more messages than one drain applies (``keyword.DRAIN_BATCH``) writes their docs itself;
    its drain moves the watermark past all of them, so the next saves rewrite none of those docs (each
    rewrite is an FTS delete and insert, and bumps the counter that makes every process load its
    in-process keyword index again). Before: the watermark stopped DRAIN_BATCH rows in, and the next
    saves' drains rewrote the rest, DRAIN_BATCH docs a save."""
    from core.recall import keyword

    big = keyword.DRAIN_BATCH + 300
    store = open_store(tmp_path / "big.db")
    try:
        memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=True), embedder=HashingEmbedder(64))
        memory.create_thread(resource_id=RESOURCE, thread_id="t")
        memory.save_messages([_msg(i, f"message {i} of a large import") for i in range(big)])

        def state() -> tuple[dict[str, int], list[tuple[Any, ...]]]:
            with store.db.read() as conn:
                counters = dict(conn.exec_driver_sql(f"SELECT key, value FROM {STATE_TABLE}").all())
                docs = conn.exec_driver_sql(f"SELECT doc_id, message_id FROM {DOCS_TABLE} ORDER BY doc_id").all()
                top = conn.exec_driver_sql("SELECT max(rowid) FROM mastra_messages").scalar()
            return {**counters, "top": top}, [tuple(r) for r in docs]

        after_big, docs = state()
        assert after_big["fts:rowid"] == after_big["top"]
        memory.save_messages([_msg(big + i, f"a later message {i}") for i in range(10)])
        later, docs_later = state()
        assert later["fts:rewrites"] == after_big["fts:rewrites"] == 0
        assert docs_later[:len(docs)] == docs and len(docs_later) == len(docs) + 10
        assert later["fts:rowid"] == later["top"]
    finally:
        store.close()
