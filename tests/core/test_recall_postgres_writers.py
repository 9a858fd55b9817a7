"""Several processes indexing for recall on one Postgres database at once.

An agent's turn was saved in one transaction and indexed for recall in the next (until
``SemanticRecall``'s rows joined the save's transaction, ``RecallRows``); meanwhile any other writer's drain of the recall queue may find the
turn's messages queued without a keyword doc. Two such writers each wrote their own docs and then the
other's, and Postgres broke the deadlock by failing one index write: that turn's messages had no
vector until ``memory-studio reindex``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex
from core.recall.schema import DOCS_TABLE
from core.storage import open_store

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def test_a_drain_leaves_alone_the_messages_another_writer_is_indexing(pg_url: str) -> None:
    owner_store, other_store = open_store(pg_url), open_store(pg_url)  # two processes' pools
    try:
        index = RecallIndex.for_store(owner_store, HashingEmbedder(16))
        other = RecallIndex.for_store(other_store, HashingEmbedder(16))
        owner_store.memory.create_thread(thread_id="t", resource_id="ada@example.com")
        turn = [Message.user("Is peanut sauce safe?", id="q1", thread_id="t", resource_id="ada@example.com",
                             created_at=T0),
                Message.assistant("No: it is made of peanuts.", id="a1", thread_id="t", resource_id="ada@example.com",
                                  created_at=T0 + timedelta(seconds=1))]
        owner_store.memory.save_messages(turn)  # saved; its recall rows come in the next transaction
        staged = index.stage(turn)
        docs, _rows = index._rows(staged.todo, staged.contexts, staged.vectors, staged.report)
        with owner_store.db.write() as owner:
            index.keywords.write_docs(owner, docs)  # the owner's write has begun and is not committed
            with other_store.db.write() as conn:
                # Before the fix this drain rewrote q1's and a1's docs and waited for the owner (whose own
                # drain could then wait for it): without this guard the test would hang, not fail.
                conn.exec_driver_sql("SET LOCAL lock_timeout = '5s'")
                applied, gone = other.keywords.drain(conn)
            assert (applied, gone) == (0, [])
            applied, gone = index.keywords.drain(owner)  # the owner's own drain applies its queued rows
            assert (applied, gone) == (2, [])
        with owner_store.db.read() as conn:
            assert sorted(r[0] for r in conn.exec_driver_sql(f"SELECT message_id FROM {DOCS_TABLE}")) == ["a1", "q1"]
    finally:
        other_store.close()
        owner_store.close()


def test_a_claim_locks_its_messages_queue_rows_by_the_index_while_a_backlog_waits(pg_url: str) -> None:
    """A migrated Mastra database's backlog (here 20,000 queued messages) drains over many writes; each
    write's claim finds its messages' rows by the queue's ``message_id`` index (before: a scan of the
    whole queue, ~12 ms a write at 100,000) and still locks exactly those rows."""
    from core.recall import pg_keywords
    from core.recall.pg_schema import QUEUE_INDEX
    from core.recall.schema import QUEUE_TABLE

    store, other_store = open_store(pg_url), open_store(pg_url)
    try:
        with store.db.transaction() as conn:
            conn.exec_driver_sql(f"INSERT INTO {QUEUE_TABLE} (message_id, op) SELECT 'backlog-' || i, 'insert' "
                                 "FROM generate_series(1, 20000) i")
            conn.exec_driver_sql(f"INSERT INTO {QUEUE_TABLE} (message_id, op) VALUES ('q1', 'insert'), ('a1', 'insert')")
            conn.exec_driver_sql(f"ANALYZE {QUEUE_TABLE}")
        with store.db.write() as conn:
            plan = "\n".join(r[0] for r in conn.exec_driver_sql(
                f"EXPLAIN SELECT seq FROM {QUEUE_TABLE} WHERE message_id = ANY(CAST(? AS text[])) ORDER BY seq FOR UPDATE",
                (["q1", "a1"],)))
            assert QUEUE_INDEX in plan and "Seq Scan" not in plan, plan
            pg_keywords.claim_queued(conn, ["q1", "a1", "not-queued"])
            with other_store.db.write() as drain:
                drain.exec_driver_sql("SET LOCAL lock_timeout = '5s'")
                free = {r[0] for r in drain.exec_driver_sql(
                    f"SELECT message_id FROM {QUEUE_TABLE} FOR UPDATE SKIP LOCKED")}
            assert len(free) == 20000 and not {"q1", "a1"} & free
    finally:
        other_store.close()
        store.close()
