"""Keyword recall keeps stop words on both engines, as FTS5's porter tokenizer does.

Postgres's ``english`` text search configuration drops ``any``, ``about``, ``what``, ``you``…, which FTS5
keeps: the same query matched other messages on the two engines (demo: "Any restaurant tips? 有推荐吗"
found 3 messages of ``ada`` on libSQL, 1 on Postgres). Postgres now keys docs and queries with the
engine's own configuration (``pg_schema.KEYWORD_CONFIG``); migration ``0026_recall_keyword_config``
re-keys a database's docs.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex, passages
from core.recall.pg_schema import KEYWORD_CONFIG, KEYWORD_CONFIG_DDL, NEEDS_NEWER, _STEM_DICT
from core.recall.schema import DOCS_TABLE, KEYWORD_CONFIG_MIGRATION, QUEUE_TABLE
from core.recall.text import segment
from core.storage import migrations, open_store

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)

# One message per thread: each doc is its message alone (no context from a previous one).
FACTS = {
    "m-any": "Quick heads-up: please keep peanuts out of any recipe.",
    "m-about": "Tell me about the trip to Lyon.",
    "m-zh": "我对花生过敏，吃了会很危险。",
    "m-ja": "来週の月曜日に東京で会議があります。",
    "m-train": "The train was late again this morning.",
}


def _save(store: object) -> RecallIndex:
    msgs = []
    for i, (mid, text) in enumerate(FACTS.items()):
        store.memory.create_thread(thread_id=f"t-{mid}", resource_id="ada")  # type: ignore[attr-defined]
        msgs.append(Message.user(text, id=mid, thread_id=f"t-{mid}", resource_id="ada",
                                 created_at=T0 + timedelta(seconds=i)))
    store.memory.save_messages(msgs)  # type: ignore[attr-defined]
    index = RecallIndex.for_store(store, HashingEmbedder(16))  # type: ignore[arg-type]
    assert index.index_messages(msgs).ok
    return index


def _found(index: RecallIndex, query: str) -> set[str]:
    return {h.message_id for h in index.search(query, resource_id="ada", mode="keyword", top_k=10).hits}


@pytest.mark.backends
def test_a_query_of_stop_words_matches_the_same_messages_on_both_backends(store) -> None:
    index = _save(store)
    assert _found(index, "any") == {"m-any"}  # ``english`` dropped "any": Postgres found nothing
    assert _found(index, "What about you?") == {"m-about"}  # "what", "you": the shared query stop list
    assert _found(index, "Any restaurant tips?") == {"m-any"}
    # Still stemmed as porter does (a configuration without a stemmer would miss these), and CJK still found.
    assert _found(index, "recipes") == {"m-any"}
    assert _found(index, "trains") == {"m-train"}
    assert _found(index, "花生") == {"m-zh"}
    assert _found(index, "東京の会議") == {"m-ja"}


def _rewind_to_english(store: object) -> None:
    """The database as a version before ``0026_recall_keyword_config`` left it: docs keyed with
    ``english``, no configuration of ours, no ``keyed_with`` column, the migration not recorded."""
    db = store.db  # type: ignore[attr-defined]
    with db.transaction() as conn:
        stored = passages.load(conn, list(FACTS))
        conn.exec_driver_sql(f"ALTER TABLE {DOCS_TABLE} DROP CONSTRAINT {NEEDS_NEWER}")
        conn.exec_driver_sql(f"ALTER TABLE {DOCS_TABLE} DROP COLUMN keyed_with")
        for p in stored.values():
            conn.exec_driver_sql(
                f"UPDATE {DOCS_TABLE} SET terms = setweight(to_tsvector('english', ?), 'A') || "
                "setweight(to_tsvector('english', ?), 'B') WHERE message_id = ?",
                (segment(p.text), segment(p.context), p.message_id))
        conn.exec_driver_sql(f"DROP TEXT SEARCH CONFIGURATION {KEYWORD_CONFIG}")
        conn.exec_driver_sql(f"DROP TEXT SEARCH DICTIONARY {_STEM_DICT}")
        conn.exec_driver_sql(f"DELETE FROM {migrations.MIGRATIONS_TABLE} WHERE name = ?", (KEYWORD_CONFIG_MIGRATION,))
        conn.exec_driver_sql(f"DELETE FROM {QUEUE_TABLE}")


def test_a_database_keyed_with_english_is_migrated_and_its_docs_rekeyed(pg_url: str) -> None:
    store = open_store(pg_url)
    _save(store)
    _rewind_to_english(store)
    store.close()

    # Opened read-only before any writer migrated it: searched as its docs were keyed (no error).
    looker = open_store(pg_url, read_only=True)
    try:
        old = RecallIndex.for_store(looker, HashingEmbedder(16))
        assert KEYWORD_CONFIG_MIGRATION in looker.db.pending_migrations()
        assert _found(old, "any") == set()  # the defect, as the old docs have it
        assert _found(old, "recipes") == {"m-any"}
        assert _found(old, "花生") == {"m-zh"}
    finally:
        looker.close()

    store = open_store(pg_url)  # a writer: the migration runs at open
    try:
        with store.db.read() as conn:
            assert KEYWORD_CONFIG_MIGRATION in migrations.applied(conn)
        index = RecallIndex.for_store(store, HashingEmbedder(16))
        with store.db.read() as conn:  # every doc queued to be keyed again from its passage
            queued = sorted(r[0] for r in conn.exec_driver_sql(f"SELECT message_id FROM {QUEUE_TABLE} WHERE op = 'upsert'"))
        assert queued == sorted(FACTS)
        assert index.sync_keywords() is None  # what the next writer (or `memory-studio reindex`) does
        with store.db.read() as conn:
            assert conn.exec_driver_sql(f"SELECT count(*) FROM {QUEUE_TABLE}").scalar() == 0
            keyed = {r[0]: r[1] for r in conn.exec_driver_sql(f"SELECT message_id, keyed_with FROM {DOCS_TABLE}")}
        assert keyed == {mid: KEYWORD_CONFIG for mid in FACTS}
        assert _found(index, "any") == {"m-any"}
        assert _found(index, "What about you?") == {"m-about"}
        assert _found(index, "recipes") == {"m-any"}
        assert _found(index, "花生") == {"m-zh"}
        assert _found(index, "東京の会議") == {"m-ja"}

        # A process of an older version still running keys its docs with ``english``: refused, naming why.
        with pytest.raises(sa.exc.IntegrityError, match=NEEDS_NEWER):
            with store.db.transaction() as conn:
                conn.exec_driver_sql(
                    f"INSERT INTO {DOCS_TABLE} (message_id, thread_id, resource_id, content_hash, terms) "
                    "VALUES ('m-train', 't-m-train', 'ada', NULL, to_tsvector('english', 'train')) "
                    "ON CONFLICT (message_id) DO UPDATE SET terms = EXCLUDED.terms")
        assert _found(index, "The train") == {"m-train"}
    finally:
        store.close()


def test_making_the_configuration_again_or_at_once_in_two_processes_is_harmless(pg_url: str) -> None:
    """What two processes starting at once do (each in its transaction; the second waits on the first's
    catalog rows, then finds them): no error, one configuration, and the same statements again do nothing."""
    store = open_store(pg_url)
    other = open_store(pg_url)
    try:
        with store.db.transaction() as conn:
            conn.exec_driver_sql(f"DROP TEXT SEARCH CONFIGURATION {KEYWORD_CONFIG}")
            conn.exec_driver_sql(f"DROP TEXT SEARCH DICTIONARY {_STEM_DICT}")
        errors: list[BaseException] = []
        with store.db.transaction() as first:
            for sql in KEYWORD_CONFIG_DDL[:2]:
                first.exec_driver_sql(sql)

            def second() -> None:
                try:
                    with other.db.transaction() as conn:
                        for sql in KEYWORD_CONFIG_DDL[:2]:
                            conn.exec_driver_sql(sql)
                except BaseException as exc:  # reported below
                    errors.append(exc)

            runner = threading.Thread(target=second)
            runner.start()
            # The second waits on the first's catalog rows before the first commits (checked, not slept on).
            for _ in range(3000):
                with store.db.read() as look:
                    if look.exec_driver_sql(
                            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                            "AND wait_event_type = 'Lock'").scalar():
                        break
                runner.join(0.01)
            else:
                raise AssertionError("the second process never waited for the first")
        runner.join()
        assert errors == []
        with store.db.transaction() as conn:
            for sql in KEYWORD_CONFIG_DDL[:2]:
                conn.exec_driver_sql(sql)
            assert conn.exec_driver_sql(
                "SELECT count(*) FROM pg_ts_config WHERE cfgname = ?", (KEYWORD_CONFIG,)).scalar() == 1
            assert conn.exec_driver_sql(
                "SELECT to_tsvector(?, 'any recipes')::text", (KEYWORD_CONFIG,)).scalar() == "'ani':1 'recip':2"
    finally:
        other.close()
        store.close()
