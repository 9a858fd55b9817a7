"""Keyword search in process (``core.recall.keyword_memory``) gives exactly what FTS5's statement gives.

Every check compares the in-process answer with ``keyword.search`` (the FTS5 statement and its
``bm25()``) on a real libSQL file: same messages, same order, scores equal to the bit, for English,
Chinese, Japanese, mixed and accented text, per resource and per thread; then again after other
messages were saved, edited and deleted, by this process and by another one.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex, keyword
from core.recall.keyword_memory import NO_ROW, KeywordMemory, varints
from core.recall.matrix import VectorSet
from core.recall.tables import FTS_TABLE
from core.storage import open_store
from core.storage.database import read_token
from core.storage.migrations import MIGRATIONS_TABLE

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
WORDS = (
    "Caroline Mel running runs ran hiking hikes museum painting paintings guitar concert recipe soup café naïve "
    "Zürich resume résumé foo_bar e-mail 2026 3rd 我对花生过敏 花生 过敏 咖啡馆 東京に行きました 東京 ラーメン "
    "iphone手机 手机 zebra crossing crossing crossing"
).split()
QUERIES = [
    "running", "Caroline hiking museum", "花生过敏", "東京 ラーメン", "iphone手机", "cafe naive", "résumé",
    "foo_bar e-mail", "zebra crossing", "2026", "what is it", "咖啡", "run hike paint", "Zurich", "3rd guitar soup",
]


def save(store, thread: str, resource: str, n: int, seed: int, start: int = 0) -> list[Message]:
    rng = np.random.default_rng(seed)
    if store.memory.get_thread(thread) is None:
        store.memory.create_thread(thread_id=thread, resource_id=resource)
    msgs = [
        (Message.user if i % 2 == 0 else Message.assistant)(
            " ".join(rng.choice(WORDS, int(rng.integers(1, 9)))), id=f"{thread}-{i}", thread_id=thread,
            resource_id=resource, created_at=T0 + timedelta(minutes=i))
        for i in range(start, start + n)
    ]
    store.memory.save_messages(msgs)
    return msgs


def same_answers(index: RecallIndex, scopes: list[tuple[str | None, str | None]]) -> None:
    memory = index.keywords.memory
    with index.store.db.read() as conn:
        for query in QUERIES:
            terms, _ = index.keywords.terms(conn, query)
            for resource, thread in scopes:
                for limit in (1, 5, 40):
                    fast = memory.search(conn, terms, resource_id=resource, thread_id=thread, limit=limit,
                                         weight=keyword.CONTEXT_WEIGHT)
                    assert fast is not None, (query, resource, thread)
                    slow = keyword.search(conn, query, resource_id=resource, thread_id=thread, limit=limit, terms=terms)
                    assert fast == [(h.message_id, h.thread_id, h.resource_id, h.score) for h in slow], (query, limit)
                    # The same hits as rows of the resource's vector set (a hit of another scope has none).
                    vset = index.vector_set(conn, resource or "u", None)
                    assert isinstance(vset, VectorSet)
                    by_rows = memory.search_rows(conn, terms, vset, resource_id=resource, thread_id=thread,
                                                 limit=limit, weight=keyword.CONTEXT_WEIGHT)
                    assert by_rows is not None
                    rows, scores, mids, _, _ = by_rows
                    assert mids == [h.message_id for h in fast] and scores.tolist() == [h.score for h in fast]
                    assert by_rows.records() == fast
                    assert [vset.message_ids[r] if r != NO_ROW else None for r in rows.tolist()] == [
                        h.message_id if vset.row_of(h.message_id) is not None else None for h in fast]
            for term in terms:
                counted = conn.exec_driver_sql(f"SELECT count(*) FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ?", (term,)).scalar()
                assert memory.frequency(conn, term) == counted, term


@pytest.fixture
def index(tmp_path: Path):
    store = open_store(tmp_path / "m.db")
    yield RecallIndex.for_store(store, HashingEmbedder(32))
    store.close()


def test_the_same_ranking_as_fts5_for_every_script_and_scope(index):
    store = index.store
    assert index.index_messages(save(store, "t1", "u", 150, 1)).ok
    assert index.index_messages(save(store, "t2", "u", 80, 2)).ok
    assert index.index_messages(save(store, "t3", "v", 90, 3)).ok
    same_answers(index, [("u", None), ("v", None), ("u", "t2"), (None, "t3"), ("nobody", None)])
    # Through the index's own search too: the keyword mode answers from memory, hybrid as well.
    hits = index.search("running hiking", resource_id="u", mode="keyword", top_k=5).hits
    assert hits and all(h.resource_id == "u" for h in hits)


def test_writes_after_loading_are_followed_appends_edits_and_deletes(index):
    store = index.store
    first = save(store, "t1", "u", 120, 4)
    assert index.index_messages(first).ok
    same_answers(index, [("u", None)])  # loaded
    loaded_state = index.keywords.memory._state
    assert index.index_messages(save(store, "t1", "u", 40, 5, start=120)).ok  # appended
    same_answers(index, [("u", None), (None, "t1")])
    assert index.keywords.memory._state != loaded_state
    # An edit rewrites the doc (a delete and an insert): the rewrite counter makes memory load again.
    edited = first[3].copy(content={"format": 2, "parts": [{"type": "text", "text": "东京 running museum"}],
                                    "content": "东京 running museum"})
    store.memory.save_messages([edited])
    assert index.refresh_messages([edited.id]).ok
    same_answers(index, [("u", None)])
    store.memory.delete_messages([first[5].id, first[6].id])
    assert index.refresh_messages([first[5].id, first[6].id]).ok
    same_answers(index, [("u", None)])
    index.delete_thread("t1")
    with store.db.read() as conn:
        terms, _ = index.keywords.terms(conn, "running")
        assert index.keywords.memory.search(conn, terms, resource_id="u", thread_id=None, limit=5, weight=0.5) == []


def test_another_process_writes_are_seen_without_hooks(tmp_path: Path):
    path = tmp_path / "m.db"
    ours = open_store(path)
    index = RecallIndex.for_store(ours, HashingEmbedder(32))
    assert index.index_messages(save(ours, "t1", "u", 60, 6)).ok
    same_answers(index, [("u", None)])
    theirs = open_store(path)  # another engine, its own connections: as another process would be
    other = RecallIndex.for_store(theirs, HashingEmbedder(32))
    assert other.index_messages(save(theirs, "t9", "u", 50, 7)).ok
    msgs = theirs.memory.get_messages(["t1-2"]) if hasattr(theirs.memory, "get_messages") else None
    del msgs
    theirs.memory.delete_messages(["t1-4"])
    assert other.refresh_messages(["t1-4"]).ok
    theirs.close()
    same_answers(index, [("u", None), (None, "t9")])
    ours.close()


def test_the_statement_answers_what_memory_cannot(index, monkeypatch):
    store = index.store
    assert index.index_messages(save(store, "t1", "u", 50, 8)).ok
    memory = index.keywords.memory
    with store.db.read() as conn:
        terms, _ = index.keywords.terms(conn, "running museum")
        assert memory.search(conn, terms, resource_id="u", thread_id=None, limit=5, weight=0.3) is None  # not a binary fraction
        assert memory.search(conn, ['"_"'], resource_id="u", thread_id=None, limit=5, weight=0.5) is None  # no token
        calls: list[object] = []
        monkeypatch.setattr(memory, "search", lambda *a, **k: calls.append(a))
        index.keywords.search(conn, "running", resource_id="u", thread_id=None, limit=5, until="2030-01-01T00:00:00.000Z")
        assert not calls  # ``until`` joins the messages: the statement answers


def test_a_database_without_the_migration_is_answered_by_the_statement(tmp_path: Path):
    path = tmp_path / "m.db"
    store = open_store(path)
    index = RecallIndex.for_store(store, HashingEmbedder(32))
    assert index.index_messages(save(store, "t1", "u", 30, 9)).ok
    with store.db.write() as conn:
        conn.exec_driver_sql("DELETE FROM memory_studio_recall_state WHERE key = 'fts:rewrites'")
    store.close()
    store = open_store(path, read_only=True)
    index = RecallIndex.for_store(store, HashingEmbedder(32))
    with store.db.read() as conn:
        assert not index.keywords.memory.sync(conn)
        assert conn.exec_driver_sql(f"SELECT count(*) FROM {MIGRATIONS_TABLE}").scalar()
    hits = index.search("running", resource_id="u", mode="keyword", top_k=3).hits  # the statement, as before
    with store.db.read() as conn:
        slow = keyword.search(conn, "running", resource_id="u", thread_id=None, limit=3,
                              terms=index.keywords.terms(conn, "running")[0])
    assert [(h.message_id, h.score) for h in hits] == [(h.message_id, h.score) for h in slow]
    store.close()


def test_varints_read_sqlite_varints():
    assert varints(b"\x0c\x00") == [12, 0]
    assert varints(bytes([0x81, 0x00, 0x05])) == [128, 5]
    assert varints(bytes([0x82, 0x80, 0x01])) == [(2 << 14) | 1]


def test_the_tokenizer_is_fts5s_own(index):
    memory = KeywordMemory()
    assert index.index_messages(save(index.store, "t1", "u", 10, 10)).ok
    with index.store.db.read() as conn:
        assert memory.sync(conn)
    assert memory._tokenizer is not None
    assert memory._tokenizer.tokens(["running", "Résumé", "foo_bar", "我 对"]) == [
        ("run",), ("resum",), ("foo", "bar"), ("我", "对")]


def test_ties_are_broken_by_message_id_after_appends_of_longer_ids(index):
    store = index.store
    store.memory.create_thread(thread_id="t", resource_id="u")
    # Equal texts tie on BM25; the ids decide, in text order ("m-10" before "m-9").
    short = [Message.user("zebra crossing", id=f"m-{i}", thread_id="t", resource_id="u", created_at=T0 + timedelta(minutes=i))
             for i in range(12)]
    store.memory.save_messages(short)
    assert index.index_messages(short).ok
    same_answers(index, [("u", None)])  # loaded (ids as a text array of width 4)
    longer = [Message.user("zebra crossing", id=f"m-{i}-and-a-much-longer-id", thread_id="t", resource_id="u",
                           created_at=T0 + timedelta(minutes=20 + i)) for i in range(6)]
    longer.append(Message.user("zebra crossing", id="m-", thread_id="t", resource_id="u", created_at=T0 + timedelta(hours=1)))
    store.memory.save_messages(longer)
    assert index.index_messages(longer).ok
    same_answers(index, [("u", None), (None, "t")])


def test_the_hits_fields_arrays_follow_appends_and_docs_written_later(index):
    """A search gathers its hits' ids, threads and resources from object arrays (``_objects``), kept up to
    date by appends (grown) and by docs that arrive after their rows (written in place): always equal to
    arrays built afresh from ``_mids`` and ``_names``."""
    store = index.store
    memory = index.keywords.memory

    def fresh() -> tuple[list[object], list[object]]:
        return [m or "" for m in memory._mids], [*memory._names, None, None]

    assert index.index_messages(save(store, "t1", "u", 60, 6)).ok
    same_answers(index, [("u", None)])  # (builds the arrays)
    assert memory._mid_objs is not None and memory._name_objs is not None
    assert index.index_messages(save(store, "t2", "v", 30, 7)).ok  # a new thread and resource: new names
    same_answers(index, [("u", None), ("v", None), (None, "t2")])
    mids, names = memory._objects()
    assert (mids.tolist(), names.tolist()) == fresh()
    assert index.index_messages(save(store, "t1", "u", 25, 8, start=60)).ok
    with store.db.read() as conn:
        terms, _ = index.keywords.terms(conn, "running museum")
        hits = memory.search(conn, terms, resource_id="u", thread_id=None, limit=40, weight=keyword.CONTEXT_WEIGHT)
    assert hits and all(h.message_id.startswith("t1-") and h.thread_id == "t1" and h.resource_id == "u" for h in hits)
    mids, names = memory._objects()
    assert (mids.tolist(), names.tolist()) == fresh()


def test_phrases_kept_by_term_are_dropped_when_an_append_touches_their_tokens(index):
    """With every posting kept, a search takes each term's phrase from ``_by_term`` (no tokenizing, no
    posting lookups); an append that adds instances of a token empties it, and the answers stay FTS5's."""
    store = index.store
    memory = index.keywords.memory
    assert index.index_messages(save(store, "t1", "u", 80, 9)).ok
    same_answers(index, [("u", None)])
    assert memory._complete and memory._by_term  # (kept by the searches above)
    kept = dict(memory._by_term)
    with store.db.read() as conn:
        terms, _ = index.keywords.terms(conn, "running museum")
        assert all(t in kept for t in terms)
        assert memory._phrases(conn, terms) == [kept[t] for t in terms]
    running = Message.user("running running museum", id="late-1", thread_id="t1", resource_id="u",
                           created_at=T0 + timedelta(days=3))
    store.memory.save_messages([running])
    assert index.index_messages([running]).ok
    same_answers(index, [("u", None), (None, "t1")])  # (the append is read by the first search's sync)
    with store.db.read() as conn:
        terms, _ = index.keywords.terms(conn, "running museum")
        hits = memory.search(conn, terms, resource_id="u", thread_id=None, limit=3, weight=keyword.CONTEXT_WEIGHT)
    assert hits and hits[0].message_id == "late-1"
    assert all(memory._by_term[t] is not kept[t] for t in terms)  # (built again from the new postings)


def test_reads_on_one_kept_connection_follow_the_writes_between_them(index):
    """An agent's turns read through one kept connection (``Database.reads()``). Keeping the sync's answer
    for the connection (it was once per connection object) left every later search of that connection
    on the index of its first one: agent turns' keyword lists came back empty."""
    store = index.store
    assert index.index_messages(save(store, "t1", "u", 30, 6)).ok
    with store.db.reads():
        same_answers(index, [("u", None)])  # loaded, on the kept connection
        with store.db.read() as conn:
            first = read_token(conn)
        assert index.index_messages(save(store, "t2", "u", 20, 7)).ok  # written between two reads
        same_answers(index, [("u", None), (None, "t2")])  # the next read sees it, exactly as FTS5 does
        hits = index.search("running hiking museum", resource_id="u", thread_id=None, mode="keyword", top_k=40).hits
        assert any(h.thread_id == "t2" for h in hits)
        with store.db.read() as conn:
            assert read_token(conn) not in (None, first)  # every read its own token, on the same connection
    with store.db.write() as conn:
        assert read_token(conn) is None  # (outside ``read()``: every sync reads the state again)


def test_an_agents_second_turn_finds_the_first_turns_words(tmp_path: Path):
    """Through the agent's own turn (kept connections, the recall processor): the words of a message saved
    by an earlier turn of this process reach the keyword list of a later turn's recall."""
    from core import Memory, MemoryOptions
    from core.agent import Agent
    from core.llm.scripted import ScriptedModel

    store = open_store(tmp_path / "turns.db")
    try:
        memory = Memory(store, MemoryOptions(last_messages=4, semantic_recall={"top_k": 3, "message_range": 0,
                                                                               "scope": "resource"}),
                        embedder=HashingEmbedder(64))
        agent = Agent("a", instructions="Be brief.", model=ScriptedModel(["Noted.", "Noted again.", "Skip the satay."]),
                      memory=memory)
        agent.generate("Hello there", memory={"resource": "u", "thread": "warm"})  # (a first search: loads)
        agent.generate("I am allergic to peanuts and shellfish", memory={"resource": "u", "thread": "a"})
        agent.generate("which peanuts dishes?", memory={"resource": "u", "thread": "b"})
        with store.db.read() as conn:
            record = conn.exec_driver_sql("SELECT record FROM memory_studio_turns WHERE thread_id = 'b'").scalar()
        import json

        hits = json.loads(record)["rc"]  # (message id, thread, cosine, keyword score, fused score, …)
        assert any(h[1] == "a" and h[3] is not None for h in hits), hits
    finally:
        store.close()


def test_hits_as_rows_follow_the_vector_set_as_it_grows_and_messages_with_several_rows(index):
    store = index.store
    memory = index.keywords.memory
    assert index.index_messages(save(store, "t1", "u", 40, 7)).ok
    with store.db.read() as conn:
        terms, _ = index.keywords.terms(conn, "running hiking museum zebra")
        full = memory.search(conn, terms, resource_id="u", thread_id=None, limit=40, weight=keyword.CONTEXT_WEIGHT)
    assert full is not None and len(full) >= 6
    hit = [h.message_id for h in full]
    # A set of its own holding the first three hits' messages, the second of them twice (Mastra's chunks).
    vecs = np.eye(4, 8, dtype=np.float32)
    vset = VectorSet.of_rows(8, "m", vecs, [hit[0], hit[1], hit[1], hit[2]], ["t1"] * 4, ["u"] * 4, [None] * 4)

    def rows() -> list[int]:
        with store.db.read() as conn:
            got = memory.search_rows(conn, terms, vset, resource_id="u", thread_id=None, limit=40,
                                     weight=keyword.CONTEXT_WEIGHT)
        assert got is not None and got[2] == hit
        return got[0].tolist()

    assert rows() == [0, NO_ROW, 3] + [NO_ROW] * (len(hit) - 3)
    # Grown: a hit without a row gets one, and one with a row gets a second (then it has no single row).
    vset.message_ids += [hit[3], hit[0]]
    vset.thread_ids += ["t1", "t1"]
    vset.resource_ids += ["u", "u"]
    vset.append_vectors(np.eye(2, 8, 4, dtype=np.float32), ["t1", "t1"])
    assert rows() == [NO_ROW, NO_ROW, 3, 4] + [NO_ROW] * (len(hit) - 4)
    # Rows moved: looked up again.
    vset.build_partition(nlist=2)
    assert vset.message_ids[:2] != [hit[0], hit[1]]  # (the rows did move)
    assert [vset.message_ids[r] if r != NO_ROW else None for r in rows()] == [
        None, None, hit[2], hit[3]] + [None] * (len(hit) - 4)
    # The docs loaded again with other places (the first doc's message deleted: later docs move up) while a set stays the same: its rows are looked up again, not read from the places they had.
    with store.db.read() as conn:
        every, _ = index.keywords.terms(conn, " ".join(WORDS))
    docs = [m for m in memory._mids if m is not None]
    half = docs[1::2]  # (every other doc's message has a row: a shift by one place gives every doc a wrong row)
    own = VectorSet.of_rows(8, "m", np.eye(len(half), 8, dtype=np.float32), half, ["t1"] * len(half),
                            ["u"] * len(half), [None] * len(half))

    def all_rows() -> tuple[list[int], list[int]]:
        with store.db.read() as conn:
            got = memory.search_rows(conn, every, own, resource_id="u", thread_id=None, limit=1000,
                                     weight=keyword.CONTEXT_WEIGHT)
        assert got is not None and len(got.mids) > len(half)
        return got.rows.tolist(), [r if (r := own.row_of(m)) is not None else NO_ROW for m in got.mids]

    got, want = all_rows()
    assert got == want
    before = memory._mids
    store.memory.delete_messages([docs[0]])
    assert index.refresh_messages([docs[0]]).ok
    got, want = all_rows()
    assert memory._mids is not before  # (loaded again)
    assert got == want
