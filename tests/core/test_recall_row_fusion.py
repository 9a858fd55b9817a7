"""A hybrid search fed the vector set's rows (``search._RowLists``: the scan's positions and cosines, the
keyword list as rows, each candidate's next message, day and speaker from the set's ``OrderRows``) answers
exactly as the same search fed records and maps by id (``search._row_hits`` answering None): every list,
score bit, receiver, speaker and the playground's inspection, before and after writes to the threads."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex, hybrid
from core.recall import search as pipeline
from core.recall.explain import inspect_search
from core.recall.keyword_memory import RowHits
from core.recall.matrix import VectorSet
from core.recall.order_rows import NEXT_BY_ID, NO_LABEL, NO_NEXT, Gathered
from core.storage import open_store

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
WORDS = ("garden tomato concert guitar lake zebra novel teacher soup peanut allergy march trip museum "
         "painting river camping bakery violin chess").split() + [f"filler{i}" for i in range(200)]
SPEAKERS = ("Mel", "Jo", "Caroline")
QUERIES = ("garden tomato soup", "What did Caroline say about the guitar concert?", "zebra lake trip in April",
           "Mel novel teacher last week", "chess violin museum", "peanut allergy bakery on 20 April, 2026",
           "river camping painting")


def message(i: int, thread: str, minutes: float, rng: np.random.Generator, start: str = "") -> Message:
    make = Message.user if i % 2 == 0 else Message.assistant
    words = " ".join([start, *rng.choice(WORDS, size=int(rng.integers(3, 8))).tolist()]).strip()
    text = f"{SPEAKERS[i % 3]}: {words}" if i % 5 else words  # (some lines without a speaker label)
    return make(text, id=f"{thread}-{i:05d}", thread_id=thread, resource_id="u",
                created_at=T0 + timedelta(minutes=minutes))


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """2,400 messages in four threads over ~three months (the rows feeder needs a set of 2,048 rows or more:
    ``VectorSet.depth_suffices``)."""
    rng = np.random.default_rng(7)
    store = open_store(Path(tmp_path_factory.mktemp("rows")) / "m.db")
    index = RecallIndex.for_store(store, HashingEmbedder(32))
    for k, thread in enumerate("abcd"):
        store.memory.create_thread(thread_id=thread, resource_id="u")
        msgs = [message(i, thread, 55 * i + k, rng) for i in range(600)]
        store.memory.save_messages(msgs)
        assert index.index_messages(msgs).ok
    yield store, index
    store.close()


def view(run: pipeline.SearchRun) -> tuple[Any, ...]:
    """Everything a search run shows, with each float's bits (``repr`` round-trips)."""
    assert run.combined is not None
    return (repr(run.reranked), repr(run.fused), repr(run.receivers), repr(run.vector), repr(run.keyword),
            repr(sorted(run.cosines.items())), sorted(run.by_speaker), repr(sorted(run.combined.own.items())),
            run.notes, run.date_spans, run.received, run.counts())


def both(index: RecallIndex, monkeypatch: pytest.MonkeyPatch, query: str, **kw: Any) -> tuple[Any, Any]:
    fed = pipeline.run(index, query, resource_id="u", thread_id=None, mode="hybrid", **kw)
    assert fed.rows is not None, "the search was not fed rows"
    with monkeypatch.context() as m:
        m.setattr(pipeline, "_row_hits", lambda *a, **k: None)
        records = pipeline.run(index, query, resource_id="u", thread_id=None, mode="hybrid", **kw)
    assert records.rows is None
    return fed, records


@pytest.mark.parametrize("settings", [dict(top_k=5), dict(top_k=20), dict(top_k=5, every_candidate=True),
                                      dict(top_k=10, threshold=0.1)])
def test_rows_and_records_give_the_same_search(indexed: Any, monkeypatch: pytest.MonkeyPatch,
                                               settings: dict[str, Any]) -> None:
    _, index = indexed
    spoken = dated = 0
    for query in QUERIES:
        fed, records = both(index, monkeypatch, query, **settings)
        assert view(fed) == view(records), query
        spoken += bool(fed.by_speaker)
        dated += fed.date_spans
    assert spoken and dated  # (the speaker and the date boosts were exercised)


def test_rows_follow_writes_and_the_inspection_reads_the_same_run(indexed: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    store, index = indexed
    rng = np.random.default_rng(8)
    for query in QUERIES:  # (every candidate's row filled)
        both(index, monkeypatch, query, top_k=10)
    for step in range(3):
        # A turn appended to a thread (its previous message's next changes), then searched at once.
        thread = "abcd"[step]
        msgs = [message(600 + 2 * step + j, thread, 55 * 700 + step * 3 + j, rng) for j in range(2)]
        store.memory.save_messages(msgs)
        assert index.index_messages(msgs).ok
        for query in QUERIES:
            fed, records = both(index, monkeypatch, query, top_k=10, every_candidate=True)
            assert view(fed) == view(records), (step, query)
    # A next message kept by id: "d"'s new turn indexed one message at a time. The first one's row is filled
    # (as a search it is a candidate of fills it) while the second has no vector, so its next message is kept
    # by id, not as a row; once the second has a row too, a query both match makes them candidates, and the
    # first one's next is found by id among them.
    first = Message.user(f"{QUERIES[6]} first", id="d-first", thread_id="d", resource_id="u",
                         created_at=T0 + timedelta(days=60))
    second = Message.assistant(f"{QUERIES[6]} filler3", id="d-second", thread_id="d", resource_id="u",
                               created_at=T0 + timedelta(days=60, minutes=1))
    store.memory.save_messages([first, second])
    assert index.index_messages([first]).ok
    with index.store.db.read() as conn:
        vset = index.vector_set(conn, "u", None)
        assert isinstance(vset, VectorSet) and vset.row_of("d-second") is None
        row = vset.row_of("d-first")
        assert row is not None
        assert vset.order_rows.fill(conn, index.order, vset, np.array([row]), reader=pipeline.thread_order)
    assert "d-second" in vset.order_rows.next_ids.values()
    assert index.index_messages([second]).ok
    fed, records = both(index, monkeypatch, QUERIES[6], top_k=10, every_candidate=True)
    assert fed.combined is not None and {"d-first", "d-second"} <= set(fed.combined.ids)
    assert view(fed) == view(records)
    # The playground's inspection (the run's lists built from the rows when read) equals the records' one.
    def shown(query: str) -> str:
        return repr(dataclasses.replace(inspect_search(index, query, resource_id="u", top_k=5), timings={}))

    real, fed_rows = pipeline._row_hits, []

    def spied(*args: Any, **kw: Any) -> Any:
        got = real(*args, **kw)
        fed_rows.append(got is not None)
        return got

    for query in QUERIES[:3]:
        with monkeypatch.context() as m:
            m.setattr(pipeline, "_row_hits", spied)
            fed = shown(query)
        with monkeypatch.context() as m:
            m.setattr(pipeline, "_row_hits", lambda *a, **k: None)
            assert shown(query) == fed
    assert fed_rows == [True] * 3  # (the inspection's searches were fed rows)


def test_next_messages_are_placed_by_the_searchs_slot_array() -> None:
    # ``_RowLists.slot`` of a 10-row set whose candidates are rows 7, 2 and 9 (places 0, 1, 2): a next message
    # that is a candidate's row reads its place; no next message, one kept by id (none kept here), a row that is
    # not a candidate, and a row added to the set after the slot was made (10, 12) read -1.
    slot = np.full(12, -1, dtype=np.int32)
    slot[[7, 2, 9]] = [0, 1, 2]
    nexts = np.array([2, NO_NEXT, 10, 12, NEXT_BY_ID, 9, 3], dtype=np.int32)
    got = Gathered(nexts, np.zeros(7, dtype=np.int32), np.full(7, NO_LABEL, dtype=np.int32), {}, [])
    links = pipeline._ByRow(got, slot).links(hybrid.Combined([], []))
    assert links.at.tolist() == [1, -1, -1, -1, -1, 2, -1]
    assert links.has.tolist() == [True, False, True, True, True, True, True]


def test_a_message_listed_twice_by_the_keyword_memory_is_fused_as_records(indexed: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # The keyword list's last hit listed once more at its end (as a keyword memory listing a message twice would):
    # the rows feeder hands the search to ``Combined`` of the records, which keeps that message once, at its
    # last place, as the records feeder does.
    _, index = indexed
    memory = index.keywords.memory
    real = type(memory).search_rows

    def twice(self: Any, *args: Any, **kw: Any) -> Any:
        got = real(self, *args, **kw)
        if got is None or not len(got.rows):
            return got
        return RowHits(np.append(got.rows, got.rows[-1]), np.append(got.score, got.score[-1]), got.mids + got.mids[-1:],
                       np.append(got.threads, got.threads[-1:]), np.append(got.resources, got.resources[-1:]))

    monkeypatch.setattr(type(memory), "search_rows", twice)
    outside = 0
    for query in QUERIES:
        run = pipeline.run(index, query, resource_id="u", thread_id=None, mode="hybrid", top_k=10, every_candidate=True)
        assert run.rows is not None and run.combined is not None
        assert not len(run.rows.cand)  # (the records feeder's ``Combined``)
        listed = run.rows.hits.mids
        outside += listed[-1] not in {r.message_id for r in run.vector}
        share = hybrid.fusion_for(index.model_id).keyword_share
        expected = hybrid.Combined(run.vector, run.keyword, run.cosines, keyword_share=share)
        assert run.combined.ids == expected.ids and len(set(run.combined.ids)) == len(run.combined.ids)
        assert repr(run.combined.own) == repr(expected.own)  # (each one's score from its two lists, to the bit)
    assert outside  # (a keyword-only candidate listed twice was among them)
