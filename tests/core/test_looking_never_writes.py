"""Searching and previewing never write, even when the keyword index is behind (issue 9, item 18).

The keyword index learns about messages written without recall (by Mastra, by another process; a Memory
without an embedder keys its own once a recall writer has used the index, since s37-backlog9) through a
watermark and a trigger-fed queue. Searching used to apply that backlog itself, under BEGIN IMMEDIATE. Now the next writer applies it, and a search answers from
what is indexed, leaving out messages deleted since, and says that some changes are not indexed yet.
"""

from __future__ import annotations

from core import Memory, MemoryOptions, Message, open_store
from core.embedding import HashingEmbedder

RECALL = MemoryOptions(semantic_recall={"top_k": 3, "message_range": 0})


def _recall_memory(store) -> Memory:
    return Memory(store, RECALL, embedder=HashingEmbedder(64))


def _seed(db_path) -> None:
    with open_store(db_path) as store:
        _recall_memory(store).save_messages([
            Message.user("my cat is called Miso", id="cat", thread_id="t1", resource_id="r"),
            Message.assistant("Miso is a lovely name", id="reply", thread_id="t1", resource_id="r"),
            Message.user("the dentist is on Friday", id="dentist", thread_id="t1", resource_id="r"),
        ])
        # Written by another program (below ``Memory``, whose saves key their own keyword docs since s37-backlog9),
        # then a message deleted behind the index's back (as Mastra would).
        store.memory.create_thread(thread_id="t2", resource_id="r")
        store.memory.save_messages([Message.user("the boat is blue", id="boat", thread_id="t2", resource_id="r")])
        with store.db.write() as conn:
            conn.exec_driver_sql("DELETE FROM mastra_messages WHERE id = 'dentist'")


def test_search_and_assemble_write_nothing_with_a_backlog(db_path):
    _seed(db_path)
    with open_store(db_path) as store:
        memory = _recall_memory(store)
        before = store.db.write_transactions
        hits = memory.search("dentist Friday", resource_id="r", mode="keyword")
        assert "dentist" not in {h.message_id for h in hits}  # deleted since it was indexed
        result = memory.recall_index.search("Miso", resource_id="r", mode="hybrid")
        assert result.hits and result.hits[0].message_id in {"cat", "reply"}
        assert "not keyword-indexed yet" in (result.reason or "")
        prompt = memory.assemble(thread_id="t1", resource_id="r", input=[Message.user("what about Miso?")])
        assert "semantic-recall" in prompt.notes
        assert store.db.write_transactions == before


def test_a_query_only_store_searches_the_same_way(db_path):
    _seed(db_path)
    with open_store(db_path, read_only=True) as store:
        hits = _recall_memory(store).search("dentist Friday Miso", resource_id="r", mode="hybrid")
        assert "dentist" not in {h.message_id for h in hits}


def test_the_next_write_applies_the_backlog(db_path):
    _seed(db_path)
    with open_store(db_path) as store:
        memory = _recall_memory(store)
        assert memory.search("boat", resource_id="r", mode="keyword") == []
        memory.save_messages([Message.user("unrelated news", thread_id="t1", resource_id="r")])
        assert [h.message_id for h in memory.search("boat", resource_id="r", mode="keyword")] == ["boat"]
        result = memory.recall_index.search("boat", resource_id="r", mode="keyword")
        assert result.reason is None


def test_a_preview_or_search_on_a_database_without_the_vector_table_does_not_make_it(db_path):
    """Found by the Studio's QA pass: opening the prompt inspector (or the recall playground) for an agent
    with recall on, on a database that had no vector table for the model's dimension, created the table
    and its indexes. It is now made by the first write that needs it (a save with recall on, reindex)."""
    from core.recall import vector_table_name
    from core.storage.catalog import has_table

    with open_store(db_path) as store:  # messages written without recall: no vector table
        Memory(store).save_messages([Message.user("my cat is called Miso", id="cat", thread_id="t1", resource_id="r")])
    with open_store(db_path) as store:
        memory = _recall_memory(store)  # the index is built (and checked) here
        before = store.db.write_transactions
        prompt = memory.assemble(thread_id="t1", resource_id="r", input=[Message.user("what about Miso?")])
        assert "semantic-recall" in prompt.notes
        result = memory.recall_index.search("Miso", resource_id="r", mode="hybrid")
        # (No writer with recall has used the keyword index, so the save keyed no doc: the message waits.)
        assert result.hits == [] and "no messages indexed for resource r" in (result.reason or "")
        assert store.db.write_transactions == before
        with store.db.read() as conn:
            assert not has_table(conn, vector_table_name(64))
        # The first save with recall on makes it, and indexes what it saves.
        memory.save_messages([Message.user("the boat is blue", id="boat", thread_id="t1", resource_id="r")])
        with store.db.read() as conn:
            assert has_table(conn, vector_table_name(64))
        assert memory.search("boat", resource_id="r", mode="vector", top_k=1)[0].message_id == "boat"
        assert memory.search("Miso", resource_id="r", mode="keyword", top_k=1)[0].message_id == "cat"  # (the backlog)
