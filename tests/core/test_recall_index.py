"""The recall index on real libSQL files: vectors, keywords, hybrid ranking, isolation, corruption."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.embedding import HashingEmbedder
from core.messages import Message
from core.storage import open_store
from core.recall import RecallIndex, recall_text, segment, keyword_query, vector_table_name

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def seed(store, thread: str, resource: str, texts: list[str], prefix: str | None = None, start: int = 0) -> list[Message]:
    if store.memory.get_thread(thread) is None:
        store.memory.create_thread(thread_id=thread, resource_id=resource)
    msgs = [
        (Message.user if i % 2 == 0 else Message.assistant)(
            text, id=f"{prefix or thread}-{i}", thread_id=thread, resource_id=resource, created_at=at(start + i)
        )
        for i, text in enumerate(texts)
    ]
    store.memory.save_messages(msgs)
    return msgs


def count(store, sql: str) -> int:
    with store.db.read() as conn:
        return int(conn.exec_driver_sql(sql).scalar() or 0)


def test_index_and_search_in_every_mode(store):
    msgs = seed(store, "t1", "u1", ["I am allergic to peanuts", "Noted: no peanuts for you", "My cat is called Miso"])
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    index.check()
    report = index.index_messages(msgs)
    assert sorted(report.indexed) == ["t1-0", "t1-1", "t1-2"] and report.ok
    for mode in ("vector", "keyword", "hybrid"):
        result = index.search("what is she allergic to? peanuts", resource_id="u1", mode=mode, top_k=2)
        assert result.hits, (mode, result.reason)
        assert result.hits[0].message_id in {"t1-0", "t1-1"}
        assert all(h.thread_id == "t1" and h.resource_id == "u1" for h in result.hits)
    hybrid = index.search("allergic peanuts", resource_id="u1", mode="hybrid").hits
    top = hybrid[0]
    assert top.source == "hybrid" and top.vector_score is not None and top.keyword_score is not None
    # Keyword-only hits still carry their cosine, so every recalled fragment shows a similarity.
    assert all(h.vector_score is not None for h in hybrid)


def test_caller_ids_are_kept_and_index_is_one_per_model(store):
    store.memory.create_thread(thread_id="t", resource_id="u")
    msg = Message.user("We met on Tuesday", id="D1:3", thread_id="t", resource_id="u", created_at=T0)
    store.memory.save_messages([msg])
    emb = HashingEmbedder(64)
    index = RecallIndex.for_store(store, emb)
    assert RecallIndex.for_store(store, emb) is index
    index.index_messages([msg])
    assert [h.message_id for h in index.search("Tuesday", resource_id="u").hits] == ["D1:3"]


def test_system_and_empty_messages_are_skipped_and_failures_reported(store):
    store.memory.create_thread(thread_id="t", resource_id="u")
    sys_msg = Message.system("be nice", id="s", thread_id="t")
    empty = Message.assistant("", id="e", thread_id="t")

    class Broken(HashingEmbedder):
        def embed(self, texts, kind="passage"):  # type: ignore[override]
            raise RuntimeError("model crashed")

    index = RecallIndex.for_store(store, Broken(64))
    report = index.index_messages([sys_msg, empty, Message.user("hello", id="u1", thread_id="t", resource_id="u")])
    assert set(report.skipped) == {"s", "e"}
    assert "model crashed" in report.failed["u1"]
    # Keyword indexing does not depend on the embedder.
    assert report.keyword_indexed == ["u1"]


def test_threshold_excludes_low_scores_and_says_so(store):
    # Separate threads: a passage also embeds the previous message of its thread.
    msgs = seed(store, "t", "u", ["peanut allergy is serious"]) + seed(store, "t2", "u", ["the weather is sunny today"])
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    index.index_messages(msgs)
    result = index.search("peanut allergy", resource_id="u", mode="vector", threshold=0.5)
    assert [h.message_id for h in result.hits] == ["t-0"]
    assert all(h.score >= 0.5 for h in result.hits)
    none = index.search("zebra crossing", resource_id="u", mode="vector", threshold=0.99)
    assert none.hits == [] and "below threshold 0.99" in (none.reason or "")


def test_empty_resource_says_why(store):
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    result = index.search("anything", resource_id="nobody")
    assert result.hits == [] and "no messages indexed for resource nobody" in (result.reason or "")


def test_wrong_dimension_and_corrupt_rows_are_skipped_with_reason(store):
    msgs = seed(store, "t", "u", ["peanut allergy", "peanut butter"])
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    index.index_messages(msgs)
    table = vector_table_name(64)
    meta = '{"message_id": "%s", "thread_id": "t", "resource_id": "u"}'
    with store.db.write() as conn:
        conn.exec_driver_sql(
            f"INSERT INTO {table} (vector_id, embedding, metadata) VALUES ('bad-dim', ?, ?)",
            (np.ones(32, dtype="<f4").tobytes(), meta % "bad-dim"),
        )
        nan = np.full(64, np.nan, dtype="<f4").tobytes()
        conn.exec_driver_sql(
            f"INSERT INTO {table} (vector_id, embedding, metadata) VALUES ('bad-nan', ?, ?)", (nan, meta % "bad-nan")
        )
    result = index.search("peanut", resource_id="u", mode="vector")
    assert {h.message_id for h in result.hits} == {"t-0", "t-1"}
    assert "1 vector row(s) skipped: wrong dimension" in (result.reason or "")
    assert "1 vector row(s) skipped: corrupt" in (result.reason or "")


def test_delete_thread_removes_vectors_and_keyword_rows(store):
    a = seed(store, "t1", "u", ["peanut allergy", "peanut butter"])
    b = seed(store, "t2", "u", ["peanut farm visit"])
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    index.index_messages(a + b)
    assert index.search("peanut", resource_id="u").hits  # loads the cache before the delete
    index.delete_thread("t1")
    table = vector_table_name(64)
    assert count(store, f"SELECT count(*) FROM {table} WHERE json_extract(metadata, '$.thread_id') = 't1'") == 0
    assert count(store, "SELECT count(*) FROM memory_studio_fts_docs WHERE thread_id = 't1'") == 0
    for mode in ("vector", "keyword", "hybrid"):
        assert {h.thread_id for h in index.search("peanut", resource_id="u", mode=mode).hits} == {"t2"}


def test_messages_deleted_through_storage_lose_their_vectors(store):
    msgs = seed(store, "t1", "u", ["peanut allergy", "peanut butter"])
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    index.index_messages(msgs)
    store.memory.delete_thread("t1")  # not through the index: the triggers queue the deletion
    assert index.search("peanut", resource_id="u", mode="hybrid").hits == []
    # A search never writes (issue 9, item 18): the next write through the index applies the queue.
    later = seed(store, "t2", "u", ["weather report"])
    index.index_messages(later)
    assert count(store, f"SELECT count(*) FROM {vector_table_name(64)}") == len(later)


def test_rows_written_by_another_process_appear(db_path: Path):
    first = open_store(db_path)
    other = open_store(db_path)
    try:
        a = seed(first, "t", "u", ["peanut allergy"])
        index = RecallIndex.for_store(first, HashingEmbedder(64))
        index.index_messages(a)
        assert [h.message_id for h in index.search("peanut", resource_id="u", mode="vector").hits] == ["t-0"]
        b = seed(other, "t", "u", ["peanut farm"], prefix="late", start=10)
        RecallIndex.for_store(other, HashingEmbedder(64)).index_messages(b)
        ids = {h.message_id for h in index.search("peanut", resource_id="u", mode="vector").hits}
        assert ids == {"t-0", "late-0"}
    finally:
        other.close()
        first.close()


def test_appends_are_told_by_the_newest_rowid_not_a_per_row_trigger(tmp_path: Path):
    """Migration 0018 drops the vector tables' per-row append trigger (and its counter); a row any
    process appends still reaches an open index's cached matrix, found by ``max(rowid)``."""
    import json

    import libsql_experimental as libsql

    from core.recall.schema import APPENDS_MIGRATION, STATE_TABLE
    from core.storage.migrations import MIGRATIONS_TABLE

    path = tmp_path / "m.db"
    store = open_store(path)
    table = vector_table_name(64)
    a = seed(store, "t", "u", ["peanut allergy"])
    RecallIndex.for_store(store, HashingEmbedder(64)).index_messages(a)

    def triggers() -> set[str]:
        return {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?", (table,)).fetchall()}

    raw = libsql.connect(str(path))
    # Rewrites and deletes are counted (and send IVF list entries back to the table: 0021); no insert trigger.
    ours = {f"{table}_ms_au", f"{table}_ms_ad", f"{table}_ms_ivf_au", f"{table}_ms_ivf_ad"}
    assert triggers() == ours
    # A database from before the migration: the trigger and its counter, the migration not applied.
    raw.execute(f'CREATE TRIGGER "{table}_ms_ai" AFTER INSERT ON "{table}" BEGIN '
                f"UPDATE {STATE_TABLE} SET value = value + 1 WHERE key = '{table}:appends'; END")
    raw.execute(f"INSERT INTO {STATE_TABLE} (key, value) VALUES (?, 1)", (f"{table}:appends",))
    raw.execute(f"DELETE FROM {MIGRATIONS_TABLE} WHERE name = ?", (APPENDS_MIGRATION,))
    raw.commit()
    store.close()

    store = open_store(path)  # migrates on open
    try:
        assert triggers() == ours
        assert raw.execute(f"SELECT count(*) FROM {STATE_TABLE} WHERE key = ?", (f"{table}:appends",)).fetchall() == [(0,)]
        index = RecallIndex.for_store(store, HashingEmbedder(64))
        assert [h.message_id for h in index.search("peanut", resource_id="u", mode="vector").hits] == ["t-0"]
        # Another process (here Mastra's way: a random vector id) appends a row for a message it saved.
        b = seed(store, "t", "u", ["peanut farm"], prefix="late", start=10)
        meta = {"message_id": b[0].id, "thread_id": "t", "resource_id": "u", "role": "user", "content": "peanut farm"}
        vec = HashingEmbedder(64).embed(["peanut farm"])[0]
        raw.execute(f'INSERT INTO "{table}" (vector_id, embedding, metadata, model_id) VALUES (?, ?, ?, ?)',
                    ("random-1", np.asarray(vec, dtype="<f4").tobytes(), json.dumps(meta), index.model_id))
        raw.commit()
        ids = {h.message_id for h in index.search("peanut", resource_id="u", mode="vector").hits}
        assert ids == {"t-0", "late-0"}
    finally:
        store.close()


def test_model_change_is_detected(store):
    msgs = seed(store, "t", "u", ["peanut allergy"])
    RecallIndex.for_store(store, HashingEmbedder(64)).index_messages(msgs)

    class Other(HashingEmbedder):
        def __init__(self) -> None:
            super().__init__(64)
            self.model_id = "another-model@d64"

    result = RecallIndex.for_store(store, Other()).search("peanut", resource_id="u", mode="vector")
    assert result.hits == []
    assert "hashing-ngram-v1@d64" in (result.reason or "") and "reindex" in (result.reason or "")


def test_chinese_text_is_segmented_for_keywords(store):
    msgs = seed(store, "t", "u", ["我对花生过敏", "今天天气很好"])
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    index.index_messages(msgs)
    hits = index.search("花生", resource_id="u", mode="keyword").hits
    # t-1 matches through its context column (the previous message), ranked below the message itself.
    assert [h.message_id for h in hits] == ["t-0", "t-1"]
    assert segment("我对花生") == " 我 对 花 生 "
    assert keyword_query('say "NEAR" 花生 -x') == '"say" OR "near" OR "花 生" OR "x"'


def test_recall_text_prefers_content_then_parts():
    m = Message.create("user", [{"type": "text", "text": "Part 1"}, {"type": "text", "text": "Part 2"}])
    m.content.pop("content", None)
    assert recall_text(m) == "Part 1 Part 2"


def test_the_three_text_rules_differ_where_a_mastra_row_says_so():
    """A Mastra row whose ``content`` is not its text parts: each rule reads what its user needs."""
    from core.messages import tool_invocation_part
    from core.observational.tokens import observer_text

    m = Message.create("assistant", [tool_invocation_part("c1", "getWeather", {"city": "Oslo"}, {"temp": 4}),
                                     {"type": "text", "text": "Cold in Oslo."}])
    m.content["content"] = "It is 4 degrees in Oslo."
    assert m.text == "Cold in Oslo."  # what the chat model reads: the text parts
    assert recall_text(m) == "It is 4 degrees in Oslo."  # Mastra's query rule: content first
    assert observer_text(m).splitlines() == [  # the observer also sees what the tool did
        '[called getWeather with {"city": "Oslo"}]', '[getWeather returned {"temp": 4}]', "Cold in Oslo."]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    words=st.lists(st.sampled_from(["peanut", "cat", "tuesday", "paris", "allergy", "guitar"]), min_size=2, max_size=6),
    query=st.sampled_from(["peanut", "cat tuesday", "paris guitar", "allergy"]),
    mode=st.sampled_from(["vector", "keyword", "hybrid"]),
)
def test_a_resource_never_recalls_another_resources_messages(tmp_path_factory, words, query, mode):
    store = open_store(tmp_path_factory.mktemp("iso") / "m.db")
    try:
        index = RecallIndex.for_store(store, HashingEmbedder(64))
        for resource in ("u1", "u2"):
            msgs = seed(store, f"{resource}-t", resource, [f"{w} {resource}" for w in words])
            index.index_messages(msgs)
        for resource in ("u1", "u2"):
            hits = index.search(query, resource_id=resource, mode=mode, top_k=20).hits
            assert all(h.resource_id == resource and h.message_id.startswith(resource) for h in hits)
    finally:
        store.close()


def test_keyword_index_catches_rows_written_by_other_writers_and_rowid_reuse(tmp_path):
    """Rows written with plain SQL (as Mastra would) are found by rowid; a deleted top row whose
    rowid is reused by the next insert is still indexed correctly."""
    import json as _json

    from core import Memory, MemoryOptions, Message, open_store
    from core.embedding import HashingEmbedder

    store = open_store(tmp_path / "kw.db")
    memory = Memory(store, MemoryOptions(semantic_recall=True), embedder=HashingEmbedder())
    memory.save_messages([Message.user("the zebra crossing", thread_id="t", resource_id="u")])

    def raw_insert(mid: str, text: str) -> None:
        content = _json.dumps({"format": 2, "parts": [{"type": "text", "text": text}], "content": text})
        with store.db.write() as conn:
            conn.exec_driver_sql(
                "INSERT INTO mastra_messages VALUES (?, 't', ?, 'user', 'v2', '2030-01-01T00:00:00.000Z', 'u')",
                (mid, content),
            )

    # Searches never write (issue 9, item 18): the queue is applied by the next writer, here the
    # index's own sync (a save through a Memory with recall does the same).
    raw_insert("m-a", "a platypus in the river")
    memory.recall_index.sync_keywords()
    assert [h.message_id for h in memory.search("platypus", resource_id="u", mode="keyword")] == ["m-a"]
    with store.db.write() as conn:
        conn.exec_driver_sql("DELETE FROM mastra_messages WHERE id = 'm-a'")
    raw_insert("m-b", "an axolotl in the lake")  # gets the rowid m-a had
    assert memory.search("platypus", resource_id="u", mode="keyword") == []  # left out before the sync
    memory.recall_index.sync_keywords()
    assert memory.search("platypus", resource_id="u", mode="keyword") == []
    assert [h.message_id for h in memory.search("axolotl", resource_id="u", mode="keyword")] == ["m-b"]
    store.close()


def test_a_degraded_search_answers_and_leaves_a_log_line(store, caplog):
    class QueryFails(HashingEmbedder):
        def embed(self, texts, kind="passage"):  # type: ignore[override]
            if kind == "query":
                raise RuntimeError("model crashed")
            return super().embed(texts, kind)

    index = RecallIndex.for_store(store, QueryFails(64))
    index.index_messages(seed(store, "t", "u", ["I am allergic to peanuts"]))
    with caplog.at_level(logging.WARNING, logger="core.recall.search"):
        result = index.search("peanuts", resource_id="u", mode="hybrid")
    assert [h.message_id for h in result.hits] == ["t-0"]  # keyword results still answer
    assert "query embedding failed" in (result.reason or "")
    (record,) = [r for r in caplog.records if r.name == "core.recall.search"]
    assert record.levelno == logging.WARNING
    assert "resource u" in record.getMessage() and "model crashed" in record.getMessage()


def test_a_message_stored_between_staging_and_the_save_becomes_the_context(store) -> None:
    # ``stage`` chains a new batch's contexts before the save takes the write lock; the save then
    # re-checks them inside its transaction. Here the save keeps every staged message as it was, and
    # another writer stored a message just before the batch in between: the batch's first message
    # must be indexed with that message as its context (keyword doc and vector), the rest unchanged.
    emb = HashingEmbedder(64)
    index = RecallIndex.for_store(store, emb)
    [first] = seed(store, "t", "r", ["the train leaves at nine"])
    assert index.index_messages([first]).ok
    batch = [Message.user("which platform is it", id="c", thread_id="t", resource_id="r", created_at=at(10)),
             Message.assistant("platform four", id="d", thread_id="t", resource_id="r", created_at=at(11))]
    staged = index.stage(batch)
    between = Message.assistant("no, it leaves at ten", id="b", thread_id="t", resource_id="r", created_at=at(5))
    store.memory.save_messages([between])
    with store.db.write() as conn:
        saved = store.memory.save_messages(batch, conn=conn)
        staged.commit(conn, saved)
    report = staged.finish()
    assert sorted(report.indexed) == ["c", "d"] and not report.failed
    from core.recall.text import passage_hash, passage_text

    expected = {"c": (between.text, batch[0].text), "d": (batch[0].text, batch[1].text)}
    table = vector_table_name(64)
    with store.db.read() as conn:
        for mid, (context, text) in expected.items():
            digest = conn.exec_driver_sql(
                "SELECT content_hash FROM memory_studio_fts_docs WHERE message_id = ?", (mid,)).scalar()
            assert digest == passage_hash(context, text)
            blob, meta_hash = conn.exec_driver_sql(
                f"SELECT embedding, json_extract(metadata, '$.content_hash') FROM {table} WHERE vector_id = ?", (mid,)).one()
            assert meta_hash == passage_hash(context, text)
            assert np.frombuffer(blob, dtype="<f4").tobytes() == emb.embed([passage_text(context, text)])[0].tobytes()


def _stored_rows(store, index: RecallIndex) -> dict[str, tuple[np.ndarray, tuple[str, str]]]:
    with store.db.read() as conn:
        vectors = index.vector_set(conn, "u", None)
        docs = {
            mid: (body, context)
            for mid, body, context in conn.exec_driver_sql(
                "SELECT d.message_id, f.body, f.context FROM memory_studio_fts_docs d "
                "JOIN memory_studio_message_fts f ON f.rowid = d.doc_id"
            ).fetchall()
        }
    assert vectors is not None
    return {mid: (vec, docs[mid]) for mid, vec in zip(vectors.message_ids, vectors.matrix)}


def test_index_batches_writes_what_index_messages_writes_batch_after_batch(tmp_path: Path) -> None:
    """Pipelined bulk ingest (the next batch staged while this one is written) stores the same vector
    rows, bit for bit, and keyword docs as indexing the batches one after the other, and reports each
    batch as ``index_messages`` does (a system message skipped, in its batch's report)."""
    texts = [f"message {i} about {'peanuts' if i % 3 else 'the Lisbon hotel'} number {i * 7}" for i in range(50)]
    stores, reports = [], []
    for name in ("one", "pipelined"):
        store = open_store(tmp_path / f"{name}.db")
        msgs = seed(store, "t", "u", texts)
        system = Message.system("be brief", id="sys", thread_id="t", resource_id="u", created_at=at(100))
        store.memory.save_messages([system])
        batches = [msgs[i : i + 16] for i in range(0, len(msgs), 16)] + [[system]]
        index = RecallIndex.for_store(store, HashingEmbedder(64))
        if name == "one":
            got = [index.index_messages(b) for b in batches]
        else:
            got = list(index.index_batches(iter(batches)))
        stores.append((store, index))
        reports.append([(sorted(r.indexed), r.skipped, r.failed) for r in got])
    assert reports[0] == reports[1] and len(reports[0]) == 5 and reports[0][-1][1] == {"sys": "system messages are not indexed"}
    one, pipelined = (_stored_rows(s, i) for s, i in stores)
    assert one.keys() == pipelined.keys() and len(one) == 50
    for mid, (vec, doc) in one.items():
        assert np.array_equal(vec, pipelined[mid][0]) and doc == pipelined[mid][1], mid
    assert list(stores[1][1].index_batches([])) == []
    for s, _ in stores:
        s.close()


def test_the_index_writes_times_as_to_iso_does() -> None:
    # The index formats a batch's times its own way for UTC times (its fields in one % template, to
    # milliseconds), cached per time: the text must be timeutil.to_iso's for every time.
    import random
    from datetime import datetime, timedelta, timezone

    from core.recall.index import _utc_iso, to_iso as index_iso
    from core.timeutil import to_iso

    rnd = random.Random(5)
    times = [datetime(rnd.randrange(1, 10000), rnd.randrange(1, 13), rnd.randrange(1, 29), rnd.randrange(24),
                      rnd.randrange(60), rnd.randrange(60), rnd.choice([0, 1, 999, 1000, 999_999, rnd.randrange(10**6)]),
                      tzinfo=timezone.utc) for _ in range(5000)]
    times += [datetime(2026, 3, 1, 9, 0), datetime(2026, 3, 1, 9, 0, 0, 1500, tzinfo=timezone(timedelta(hours=5)))]
    for dt in times:
        assert _utc_iso(dt) == index_iso(dt) == to_iso(dt), dt


def test_the_stage_chains_new_and_saved_again_batches_from_the_stored_message_before_them(store) -> None:
    # ``stage`` reads whether a batch of one thread is stored and the text before its first message in one
    # statement (``passages.contexts_and_previous``), and chains from that text when none is stored; a
    # batch holding a stored message reads them apart. Either way the staged contexts are already the right
    # ones (the save's re-check, which would mend a wrong one, has nothing to change), and a batch over two
    # threads chains each from its own.
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    seed(store, "t", "r", ["first stored", "second stored", "a tool-less third"])
    seed(store, "t2", "r", ["other thread stored"], start=1)
    new = [Message.user("new one", id="n1", thread_id="t", resource_id="r", created_at=at(20)),
           Message.assistant("new two", id="n2", thread_id="t", resource_id="r", created_at=at(21))]
    staged = index.stage(new[::-1])  # (any order in the call: chained by time)
    assert staged.contexts == ["new one", "a tool-less third"]
    early = [Message.user("before the third", id="e", thread_id="t", resource_id="r", created_at=at(1) + timedelta(milliseconds=500))]
    assert index.stage(early).contexts == ["second stored"]
    assert index.stage([Message.user("first of all", id="z", thread_id="t", resource_id="r", created_at=at(-5))]).contexts == [""]
    again = [Message.assistant("second stored, edited", id="t-1", thread_id="t", resource_id="r", created_at=at(1)),
             Message.user("new after it", id="n3", thread_id="t", resource_id="r", created_at=at(30))]
    assert index.stage(again).contexts == ["first stored", "a tool-less third"]
    both = [Message.user("in t", id="x1", thread_id="t", resource_id="r", created_at=at(40)),
            Message.user("in t2", id="x2", thread_id="t2", resource_id="r", created_at=at(40))]
    assert index.stage(both).contexts == ["a tool-less third", "other thread stored"]
    for batch in (new, early, again, both):
        with store.db.write() as conn:
            staged = index.stage(batch)
            staged.commit(conn, store.memory.save_messages(batch, conn=conn))
            assert index._recheck(conn, staged) == {}
