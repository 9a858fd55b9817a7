"""A save without semantic recall keys its own messages' keyword docs (``core.recall.own_docs``).

A memory without recall (a notes agent, the Studio) left its messages to the next save with recall (2,000 a
save): until then every keyword or hybrid search of any resource said "some recent message changes are not
keyword-indexed yet" and read around the backlog, and those messages were not found by keyword. Now the save
keys them in its own transaction (no model: a doc needs none) and searches find them at once; their vectors
still wait for a writer with the model, which the playground says. A database without the keyword index
(a Mastra file not migrated) gets none. Edits and deletes keep their queued rows for a recall writer (it
checks the vectors of what it re-keys), and two processes saving at once leave one right doc a message.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from core.embedding import HashingEmbedder
from core.memory import Memory
from core.messages import Message
from core.options import MemoryOptions
from core.recall import RecallIndex, passages
from core.recall.explain import explain_message, inspect_search
from core.recall.tables import FTS_TABLE, QUEUE_TABLE
from core.storage import Store, open_store

pytestmark = pytest.mark.backends

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


@pytest.fixture
def store(db_path: "Path | str") -> Iterator[Store]:
    s = open_store(db_path)
    try:
        yield s
    finally:
        s.close()


def _index(store: Store) -> RecallIndex:
    return RecallIndex.for_store(store, HashingEmbedder(32))


def _used_by_recall(store: Store) -> None:
    """A writer with semantic recall has used the keyword index (a doc of another resource's message): saves
    without recall key their own docs from then on (``own_docs``: before, nothing searches the index)."""
    Memory(store, MemoryOptions(semantic_recall=True), embedder=HashingEmbedder(32)).save_messages(
        [Message.user("I like tea", id="ada-0", thread_id="ta", resource_id="ada")])


def _queued(store: Store) -> list[tuple[str, str]]:
    with store.db.read() as conn:
        return [(r[0], r[1]) for r in conn.exec_driver_sql(f"SELECT message_id, op FROM {QUEUE_TABLE} ORDER BY seq")]


def _docs_right(store: Store, index: RecallIndex) -> tuple[dict[str, int], list[str]]:
    """(how many docs each stored user/assistant message has, the ids whose doc is not built from the
    message's passage now)."""
    with store.db.read() as conn:
        ids = [r[0] for r in conn.exec_driver_sql(
            "SELECT id FROM mastra_messages WHERE role IN ('user', 'assistant') ORDER BY id")]
        if store.capabilities.full_text == "fts5":
            counts = {r[0]: int(r[1]) for r in conn.exec_driver_sql(
                f"SELECT m.id, count(f.rowid) FROM mastra_messages m LEFT JOIN {FTS_TABLE} f ON f.rowid = m.rowid "
                "WHERE m.role IN ('user', 'assistant') GROUP BY m.id")}
        else:
            counts = {r[0]: int(r[1]) for r in conn.exec_driver_sql(
                "SELECT m.id, count(d.message_id) FROM mastra_messages m LEFT JOIN memory_studio_fts_docs d "
                "ON d.message_id = m.id WHERE m.role IN ('user', 'assistant') GROUP BY m.id")}
        state = index.keywords.doc_state(conn, ids)
        now = passages.load(conn, ids)
    return counts, [mid for mid in ids if state.get(mid, (None,))[0] != now[mid].hash]


def _found(index: RecallIndex, query: str, mode: str, resource: str = "sam") -> tuple[list[str], str | None]:
    result = index.search(query, resource_id=resource, mode=mode, top_k=5)  # type: ignore[arg-type]
    return [h.message_id for h in result.hits], result.reason


def test_a_save_without_recall_is_keyword_found_at_once_and_leaves_nothing_pending(store: Store) -> None:
    recalled = Memory(store, MemoryOptions(semantic_recall=True), embedder=HashingEmbedder(32))
    recalled.save_messages([Message.user("I like tea", id="ada-1", thread_id="ta", resource_id="ada")])
    Memory(store).save_messages([
        Message.user("The staging mail server is down", id="s1", thread_id="ts", resource_id="sam",
                     created_at=T0),
        Message.assistant("I will ask Priya for access", id="s2", thread_id="ts", resource_id="sam",
                          created_at=T0 + timedelta(seconds=1))])
    index = recalled.recall_index
    assert index is not None
    assert index.backlog() == (None, set(), set()) and _queued(store) == []
    hits, reason = _found(index, "staging mail server", "keyword")
    assert hits == ["s1", "s2"] and reason is None  # (s2 by its context, s1's text)
    hits, reason = _found(index, "Priya access", "hybrid")
    assert hits[:1] == ["s2"] and reason is None
    # A search of another resource reads no backlog either.
    assert _found(index, "tea", "keyword", "ada") == (["ada-1"], None)
    counts, stale = _docs_right(store, index)
    assert set(counts.values()) == {1} and stale == []  # s2's doc holds s1 as its context
    # The vectors still wait for a writer with the model, and the playground says so.
    assert [m.id for m in index.unindexed(store.memory.get_messages(["s1", "s2"]))] == ["s1", "s2"]
    inspection = inspect_search(index, "staging mail server", resource_id="sam", top_k=5)
    assert any(n.startswith(f"2 keyword matches have no vector from {index.model_id} yet") and "memory-studio reindex" in n
               for n in inspection.notes), inspection.notes
    why = explain_message(index, "s1", inspection)
    assert why.placements["keyword"].status == "hit"
    assert why.placements["vector"].status == "not-indexed"
    assert "saved while recall was off" in why.placements["vector"].why and "memory-studio reindex" in why.placements["vector"].why
    # A save with recall then finds nothing of theirs to do, and their vectors come from reindex as before.
    recalled.save_messages([Message.user("and green tea", id="ada-2", thread_id="ta", resource_id="ada")])
    assert _docs_right(store, index)[1] == [] and _queued(store) == []


def test_a_keyword_index_no_recall_writer_has_used_costs_a_plain_save_nothing(store: Store) -> None:
    """Until a writer with recall has put a doc in the keyword index, nothing searches it: a save without recall
    writes no doc there (the FTS insert would cost a plain save about half its speed, issue 20 item 3d) and its
    messages wait for the first recall writer's drain, as before; from then on such saves key their own docs."""
    plain = Memory(store)
    plain.save_messages([Message.user("The staging mail server is down", id="s1", thread_id="ts", resource_id="sam",
                                      created_at=T0)])
    index = _index(store)
    counts, _stale = _docs_right(store, index)
    assert counts == {"s1": 0}
    reason = index.backlog()[0]
    assert reason is not None and "not keyword-indexed yet" in reason
    _used_by_recall(store)  # (its save drains what waited)
    assert index.backlog() == (None, set(), set()) and _found(index, "staging mail", "keyword") == (["s1"], None)
    plain.save_messages([Message.user("Priya has the access keys", id="s2", thread_id="ts", resource_id="sam",
                                      created_at=T0 + timedelta(seconds=1))])
    assert index.backlog() == (None, set(), set()) and _found(index, "Priya keys", "keyword") == (["s2"], None)
    assert _docs_right(store, index) == ({"ada-0": 1, "s1": 1, "s2": 1}, [])


def test_an_agent_turn_without_recall_is_keyword_found_at_once(store: Store) -> None:
    _used_by_recall(store)
    from core.agent import Agent
    from core.llm import ScriptedModel

    notes = Agent("notes", instructions="Take notes.", model=ScriptedModel(["Noted."]), memory=Memory(store))
    notes.generate("Remind me about the dentist on Friday", memory={"resource": "sam", "thread": "n1"})
    index = _index(store)
    assert index.backlog() == (None, set(), set()) and _queued(store) == []
    hits, reason = _found(index, "dentist", "keyword")
    assert len(hits) == 2 and reason is None  # (the reply by its context)
    assert sorted(m.role for m in store.memory.get_messages(hits)) == ["assistant", "user"]
    assert _docs_right(store, index)[1] == []


def test_clones_and_forks_made_without_recall_are_keyword_found(store: Store) -> None:
    _used_by_recall(store)
    memory = Memory(store)
    memory.save_messages([Message.user(f"Note {i}: the lighthouse keeper", id=f"n{i}", thread_id="t", resource_id="sam",
                                       created_at=T0 + timedelta(seconds=i)) for i in range(3)])
    memory.clone_thread("t", new_thread_id="t-clone")
    memory.fork_thread("t", at="n2", new_thread_id="t-fork")  # (copies n0 and n1)
    index = _index(store)
    assert index.backlog() == (None, set(), set()) and _queued(store) == []
    found = index.search("lighthouse keeper", resource_id="sam", mode="keyword", top_k=20)
    assert found.reason is None and len(found.hits) == 3 + 3 + 2
    assert {h.thread_id for h in found.hits} == {"t", "t-clone", "t-fork"}
    assert _docs_right(store, index)[1] == []


def test_a_save_among_stored_messages_takes_their_texts_as_contexts(store: Store) -> None:
    """A batch whose span holds a message it did not write (an earlier save's, another writer's): contexts are
    the stored ones, not the batch's chain; the message after a new one keeps its doc (hash rules, as with
    recall: `memory-studio reindex` re-keys it)."""
    _used_by_recall(store)
    plain = Memory(store)

    def at(mid: str, second: int, text: str) -> Message:
        return Message.user(text, id=mid, thread_id="t", resource_id="sam", created_at=T0 + timedelta(seconds=second))

    plain.save_messages([at("m1", 1, "apples"), at("m3", 3, "cherries"), at("m5", 5, "elderberries")])
    plain.save_messages([at("m2", 2, "bananas"), at("m4", 4, "dates")])  # m3 lies among them
    index = _index(store)
    with store.db.read() as conn:
        state = index.keywords.doc_state(conn, ["m2", "m4"])
    from core.recall.text import passage_hash

    assert state["m2"][0] == passage_hash("apples", "bananas") and state["m4"][0] == passage_hash("cherries", "dates")
    assert _docs_right(store, index)[1] == ["m3", "m5"]  # (their previous messages came later)
    assert index.backlog() == (None, set(), set())


def test_a_re_save_is_keyed_with_its_text_now_and_keeps_its_queued_update_for_the_vectors(store: Store) -> None:
    recalled = Memory(store, MemoryOptions(semantic_recall=True), embedder=HashingEmbedder(32))
    first = Message.user("We rode to Lisbon by bicycle", id="m1", thread_id="t", resource_id="sam", created_at=T0)
    recalled.save_messages([first])
    index = recalled.recall_index
    assert index is not None and index.unindexed([first]) == []
    Memory(store).save_messages([Message.user("We took the train to Porto", id="m1", thread_id="t", resource_id="sam",
                                              created_at=T0)])
    assert _found(index, "train Porto", "keyword")[0] == ["m1"]
    assert _found(index, "Lisbon bicycle", "keyword")[0] == []
    assert _docs_right(store, index)[1] == []
    # The update stays queued: the next recall write re-keys it and re-embeds its vector of the old text.
    assert ("m1", "upsert") in _queued(store)
    recalled.save_messages([Message.user("then dinner", id="m2", thread_id="t", resource_id="sam",
                                         created_at=T0 + timedelta(minutes=1))])
    assert _queued(store) == [] and index.backlog() == (None, set(), set())
    with store.db.read() as conn:
        stored = passages.load(conn, ["m1"])["m1"]
        assert index.vectors.stored_state(conn, ["m1"])["m1"].content_hash == stored.hash


def test_edits_and_deletes_without_recall_leave_the_docs_to_the_hash_rules(store: Store) -> None:
    _used_by_recall(store)
    plain = Memory(store)
    plain.save_messages([
        Message.user("We rode to Lisbon by bicycle", id="e1", thread_id="t", resource_id="sam", created_at=T0),
        Message.assistant("That sounds like a long ride", id="e2", thread_id="t", resource_id="sam",
                          created_at=T0 + timedelta(seconds=1)),
        Message.user("The concert was very loud", id="e3", thread_id="t", resource_id="sam",
                     created_at=T0 + timedelta(seconds=2))])
    index = _index(store)
    plain.edit_message("e1", resource_id="sam", text="We took the train to Porto")
    plain.delete_messages(["e3"], resource_id="sam")
    # A later save without recall keys its own message (a delete's rowid may be handed to it) and leaves the
    # edit and the delete queued: the edited doc is left out for its old words until a recall write.
    plain.save_messages([Message.user("Earplugs help with loud concerts", id="e4", thread_id="t", resource_id="sam",
                                      created_at=T0 + timedelta(seconds=3))])
    hits, reason = _found(index, "Lisbon bicycle", "keyword")
    assert "e1" not in hits and reason is not None and "not keyword-indexed yet" in reason
    assert _found(index, "concert loud", "keyword")[0][:1] == ["e4"] and "e3" not in _found(index, "concert", "keyword")[0]
    assert {op for _mid, op in _queued(store)} <= {"upsert", "delete"} and _queued(store)
    index.index_messages([])  # (nothing of its own: a write's drain applies the queue)
    index.sync_keywords()
    assert index.backlog() == (None, set(), set())
    assert _found(index, "train Porto", "keyword")[0][:1] == ["e1"]
    assert "e1" not in _found(index, "Lisbon bicycle", "keyword")[0]
    counts, stale = _docs_right(store, index)
    assert counts == {"ada-0": 1, "e1": 1, "e2": 1, "e4": 1} and stale == ["e2"]  # (e2's context: e1's old text, hash rules)


def test_rows_another_program_wrote_wait_as_before_and_the_reason_says_so(store: Store) -> None:
    """Rows saved below ``Memory`` (another program): on libSQL past the watermark, which the next save of any
    memory keys (as a drain does); on Postgres in the queue, which only a recall writer's drain applies."""
    _used_by_recall(store)
    store.memory.create_thread(thread_id="o", resource_id="other")
    store.memory.save_messages([Message.user("an orchard of plum trees", id="o1", thread_id="o", resource_id="other")])
    index = _index(store)
    reason = index.backlog()[0]
    assert reason is not None and "not keyword-indexed yet" in reason
    Memory(store).save_messages([Message.user("a note", id="n1", thread_id="n", resource_id="sam")])
    if store.capabilities.full_text == "fts5":
        assert index.backlog() == (None, set(), set())
        assert _found(index, "plum orchard", "keyword", "other") == (["o1"], None)
    else:
        assert _queued(store) == [("o1", "insert")]
        hits, reason = _found(index, "plum orchard", "keyword", "other")
        assert hits == [] and reason is not None and "not keyword-indexed yet" in reason
        assert _found(index, "note", "keyword")[0] == ["n1"]


@pytest.mark.libsql_only
def test_a_database_without_the_keyword_index_gets_no_docs_until_it_is_migrated(tmp_path: Path) -> None:
    from tests.core.test_recall_mastra import make_mastra_db

    path = tmp_path / "mastra.db"
    make_mastra_db(path)
    with open_store(path) as s:
        assert not s.db.owned
        Memory(s).save_messages([Message.user("hello from Mastra land", id="x1", thread_id="t1", resource_id="u1")])
        with s.db.read() as conn:
            assert not [r for r in conn.exec_driver_sql(
                f"SELECT name FROM sqlite_master WHERE name LIKE '{FTS_TABLE}%' OR name LIKE '{QUEUE_TABLE}%'")]
        s.migrate()  # (the user's explicit migration: the keyword index is made and filled)
        Memory(s).save_messages([Message.user("after the migration", id="x2", thread_id="t1", resource_id="u1")])
        index = _index(s)
        assert index.backlog() == (None, set(), set())
        assert _found(index, "migration", "keyword", "u1") == (["x2"], None)
        assert _found(index, "Mastra land", "keyword", "u1") == (["x1", "x2"], None)  # (x2 by its context)


_WORKER = textwrap.dedent("""
    import sys
    from datetime import datetime, timedelta, timezone
    from core.embedding import HashingEmbedder
    from core.memory import Memory
    from core.messages import Message
    from core.options import MemoryOptions
    from core.storage import open_store

    target, who, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = open_store(target)
    memory = (Memory(store, MemoryOptions(semantic_recall=True), embedder=HashingEmbedder(32)) if who == "recall"
              else Memory(store))
    print("ready", flush=True)
    sys.stdin.readline()  # both start saving at once
    t0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
    for b in range(batches):
        memory.save_messages([
            (Message.user if i % 2 == 0 else Message.assistant)(
                f"{who} batch {b} line {i} about word{b * 5 + i}", id=f"{who}-{b}-{i}", thread_id=f"{who}-t{b % 3}",
                resource_id="fleet", created_at=t0 + timedelta(seconds=b * 5 + i))
            for i in range(5)])
    store.close()
    print("done", flush=True)
""")


def test_a_recall_writer_and_a_save_without_recall_at_once_leave_one_right_doc_a_message(
        store: Store, db_path: "Path | str") -> None:
    store.memory.create_thread(thread_id="seed", resource_id="fleet")  # (the schema made before the workers)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    workers = [subprocess.Popen([sys.executable, "-c", _WORKER, str(db_path), who, "40"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
               for who in ("recall", "plain")]
    try:
        for w in workers:
            assert w.stdout is not None and w.stdout.readline().strip() == "ready"
        for w in workers:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        for w in workers:
            out, err = w.communicate(timeout=300)
            assert w.returncode == 0 and out.strip() == "done", err
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    index = _index(store)
    counts, stale = _docs_right(store, index)
    assert len(counts) == 2 * 40 * 5 and set(counts.values()) == {1} and stale == []
    assert _queued(store) == [] and index.backlog() == (None, set(), set())
    assert sorted(_found(index, "word123", "keyword", "fleet")[0][:2]) == ["plain-24-3", "recall-24-3"]
