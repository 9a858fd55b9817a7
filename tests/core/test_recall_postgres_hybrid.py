"""A Postgres hybrid search of a scope the server searches (too large to keep in process) reads its
lists in one statement (``pg_hybrid``) and answers exactly what
the step-by-step reads answer: the same hits, scores, lists, cosines, re-rank and notes, for every
scope, depth, threshold, speaker labels on or off, deleted messages still queued, and the searches
that keep the step-by-step path (``until``, a ranking deeper than HNSW lists). One statement per
search once its terms are counted (before: the queue check, the keyword list, the vector list with
cosines and the thread order)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex, hybrid, pg_hybrid, pg_keyword_cache, pg_vector_cache
from core.recall import search as pipeline
from core.storage import Store, open_store

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
LOG_READ = "SELECT 0, pg_snapshot_xmin("  # the change log's read (``pg_changes.ChangeLog.sync``)
WORDS = ("garden", "tomatoes", "Lisbon", "東京の会議", "旅行", "bicycle", "concert")
QUERIES = ("tomatoes item7", "東京 会議", "garden", "what did Caroline say about Lisbon", "旅行 bicycle concert",
           "item12 garden tomatoes", "nothing matches zzz", "Mel concert last week")


def _fill(store) -> RecallIndex:  # type: ignore[no-untyped-def]
    index = RecallIndex.for_store(store, HashingEmbedder(16))
    msgs = []
    for t in ("a", "b", "c"):
        store.memory.create_thread(thread_id=t, resource_id="u")
    for i in range(240):
        speaker = ("Caroline", "Mel", "")[i % 3]
        text = f"{speaker + ': ' if speaker else ''}note {i}: {WORDS[i % len(WORDS)]} item{i % 40}"
        make = Message.user if i % 2 == 0 else Message.assistant
        msgs.append(make(text, id=f"m{i:03d}", thread_id="abc"[i % 3], resource_id="u",
                         created_at=T0 + timedelta(hours=i)))
    store.memory.save_messages(msgs)
    assert not index.index_messages(msgs).failed
    return index


@pytest.fixture
def filled(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Store, RecallIndex]]:
    """A Postgres store and its recall index over ``_fill``'s 240 messages, its scopes searched by the
    server (as those too large to keep in process are: ``pg_vector_cache``); closed after the test."""
    monkeypatch.setattr(pg_vector_cache, "MAX_ROWS", 0)
    monkeypatch.setattr(pg_keyword_cache, "MAX_DOCS", 0)
    store = open_store(pg_url)
    try:
        yield store, _fill(store)
    finally:
        store.close()


def _statements(store) -> list[str]:  # type: ignore[no-untyped-def]
    seen: list[str] = []
    sa.event.listen(store.db.engine, "before_cursor_execute",
                    lambda conn, cur, sql, params, ctx, many: seen.append(sql))
    return seen


def _run(index: RecallIndex, one: bool, query: str, **kw: object) -> tuple[str, str]:
    """(the search's result, the run's lists) as text, with or without the one statement."""
    index.read_hybrid = pg_hybrid.read if one else None
    run = pipeline.run(index, query, mode="hybrid", **kw)  # type: ignore[arg-type]
    lists = repr((run.keyword, run.vector, run.cosines, run.receivers, run.reranked, sorted(run.by_speaker), sorted(run.gone),
                  run.left_out, run.backlog, run.notes, run.terms, run.dropped_terms, run.fused))
    kw.pop("every_candidate", None)
    return repr(index.search(query, mode="hybrid", **kw)), lists  # type: ignore[arg-type]


SCOPES = (
    dict(resource_id="u", thread_id=None, top_k=5),
    dict(resource_id="u", thread_id=None, top_k=40),
    dict(resource_id=None, thread_id="b", top_k=5),
    dict(resource_id="u", thread_id="c", top_k=10),
    dict(resource_id="u", thread_id=None, top_k=5, threshold=0.05),
    dict(resource_id="u", thread_id=None, top_k=5, every_candidate=True),
)


def test_one_statement_answers_what_the_reads_one_by_one_answer(filled: tuple[Store, RecallIndex], monkeypatch: pytest.MonkeyPatch):
    _, index = filled
    assert index.read_hybrid is not None
    for boost in (hybrid.SPEAKER_BOOST, 0.0):  # speaker labels read, or no content read at all
        monkeypatch.setattr(hybrid, "SPEAKER_BOOST", boost)
        for scope in SCOPES:
            for query in QUERIES:
                assert _run(index, True, query, **scope) == _run(index, False, query, **scope), (query, scope)


def test_one_statement_per_search_once_its_terms_are_counted(filled: tuple[Store, RecallIndex]):
    store, index = filled
    seen = _statements(store)
    for query in QUERIES:
        index.search(query, resource_id="u", top_k=5, mode="hybrid")  # counts the new terms
        seen.clear()
        result = index.search(query, resource_id="u", top_k=5, mode="hybrid")
        # The change log's read (with the queue's check: ``pg_changes``), then the one statement.
        assert len(seen) == 2 and seen[0].startswith(LOG_READ) and seen[1].startswith("WITH kw "), (query, seen)
        assert result.hits
    index.read_hybrid = None  # the reads one by one: the log (and queue), keyword list, vector list + cosines
    index.search(QUERIES[0], resource_id="u", top_k=5, mode="hybrid")  # (reads the candidates' threads whole)
    seen.clear()  # (the thread order is kept in process: ``pg_order.PgOrderCache``)
    index.search(QUERIES[0], resource_id="u", top_k=5, mode="hybrid")
    assert len(seen) == 3 and seen[0].startswith(LOG_READ)


def test_messages_deleted_since_indexed_are_left_out_the_same_way(filled: tuple[Store, RecallIndex]):
    store, index = filled
    seen = _statements(store)
    gone_query = "garden"
    before = index.search(gone_query, resource_id="u", top_k=5, mode="hybrid")
    with store.db.write() as conn:  # another writer deletes hits; the queue holds the deletes
        conn.exec_driver_sql("DELETE FROM mastra_messages WHERE id = ANY(CAST(? AS text[]))",
                             ([h.message_id for h in before.hits[:3]],))
    for scope in SCOPES:
        for query in (gone_query, QUERIES[0]):
            one, steps = _run(index, True, query, **scope), _run(index, False, query, **scope)
            assert one == steps, (query, scope)
    index.read_hybrid = pg_hybrid.read
    run = pipeline.run(index, gone_query, resource_id="u", thread_id=None, top_k=5, mode="hybrid")
    assert run.backlog and run.gone and run.left_out
    assert not {h.message_id for h in before.hits[:3]} & {f.message_id for f in run.reranked}
    seen.clear()
    index.search(gone_query, resource_id="u", top_k=5, mode="hybrid")
    assert seen[0].startswith(LOG_READ) and seen[1].startswith("WITH kw ") and len(seen) == 3  # + the deletes


def test_searches_the_one_statement_does_not_cover_keep_the_reads_one_by_one(filled: tuple[Store, RecallIndex]):
    store, index = filled
    seen = _statements(store)
    until = T0 + timedelta(hours=100)
    for kw in (dict(until=until), dict(top_k=600)):  # a past turn's view; deeper than HNSW lists
        seen.clear()
        one = _run(index, True, "garden tomatoes", resource_id="u", thread_id=None, **{"top_k": 5, **kw})
        assert not any(s.startswith("WITH kw ") for s in seen)
        assert one == _run(index, False, "garden tomatoes", resource_id="u", thread_id=None, **{"top_k": 5, **kw})


def test_a_failed_query_embedding_still_answers_by_keyword(filled: tuple[Store, RecallIndex]):
    _, index = filled

    def broken(texts, kind="document"):  # type: ignore[no-untyped-def]
        raise RuntimeError("embedder down")

    index.embedder.embed = broken  # type: ignore[method-assign]
    run = pipeline.run(index, "garden", resource_id="u", thread_id=None, top_k=5, mode="hybrid")
    assert run.keyword and not run.vector and run.reranked
    assert run.notes == ["query embedding failed (embedder down); vector results missing"]


@pytest.mark.parametrize("vector_depth,keyword_depth", [(30, 8), (8, 30)])
def test_one_statement_reads_each_list_to_its_own_depth(filled: tuple[Store, RecallIndex], monkeypatch: pytest.MonkeyPatch,
                                                       vector_depth: int, keyword_depth: int):
    """A model's fusion may list the vector and the keyword side to different depths (``Fusion.keyword_candidates``,
    USE's since session 24): the one statement reads each list to its own depth, as the reads one by one do."""
    _, index = filled
    monkeypatch.setitem(hybrid.MODEL_FUSION, index.model_id.split("@", 1)[0],
                        hybrid.Fusion(keyword_share=0.65, candidates=vector_depth, keyword_candidates=keyword_depth))
    for one in (True, False):
        index.read_hybrid = pg_hybrid.read if one else None
        run = pipeline.run(index, "garden tomatoes", resource_id="u", thread_id=None, top_k=5, mode="hybrid")
        assert (len(run.vector), len(run.keyword)) == (vector_depth, keyword_depth), one
    for scope in SCOPES[:2]:
        for query in QUERIES:
            assert _run(index, True, query, **scope) == _run(index, False, query, **scope), (query, scope)
