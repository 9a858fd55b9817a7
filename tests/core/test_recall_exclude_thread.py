"""A resource search that leaves one thread out (``exclude_thread``, an SDK session's own thread) answers
exactly what a search of the resource answers when that thread's messages are not indexed in it at all,
on libSQL and on Postgres, on every path: vector, keyword and hybrid lists; libSQL's matrix scan, its
in-process BM25 and the FTS5 statement (``until``); Postgres' kept scopes, its server statements and the
one-statement hybrid read. The brute force is a second database holding the same messages with that
thread under another resource: the keyword table's statistics (BM25's, the very common terms') are the
same there, and the resource's lists never see the thread, so its fusion, neighbours' share and thread
prior are those of the other threads alone.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import numpy as np
import pytest

from core import open_store
from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex, keyword, matrix, pg_keyword_cache, pg_vector_cache
from core.recall import search as pipeline

pytestmark = pytest.mark.backends

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
WORDS = ("zebra crossing lake hiking peanuts allergy Lyon museum painting guitar concert recipe soup garden "
         "tomato train station ticket birthday cake puppy adoption school teacher novel chapter").split()
QUERIES = ("zebra lake", "Where did Caroline go hiking?", "What did Mel paint at the museum", "peanuts allergy soup",
           "train ticket on 3 March 2026", "guitar concert", "birthday cake puppy", "novel chapter teacher",
           "tomato garden recipe last week", "nothing like it qqq")
THREADS = ("t0", "t1", "t2", "t3")
LEFT_OUT = "t1"


def messages(n: int, seed: int, elsewhere: bool) -> list[Message]:
    """``n`` labelled messages of distinct texts over a small vocabulary (BM25 scores repeat), spread over
    four threads of resource ``u``; with ``elsewhere`` the left-out thread's are resource ``x``'s."""
    rng = np.random.default_rng(seed)
    seen: set[str] = set()
    out = []
    for i in range(n):
        while True:
            words = " ".join(rng.choice(WORDS, int(rng.integers(2, 8))))
            if words not in seen:
                seen.add(words)
                break
        thread = THREADS[int(rng.integers(0, len(THREADS)))]
        speaker = ("Caroline", "Mel")[i % 2]
        out.append((Message.user if i % 2 == 0 else Message.assistant)(
            f"{speaker}: {words}", id=f"m{i:05d}", thread_id=thread,
            resource_id="x" if elsewhere and thread == LEFT_OUT else "u", created_at=T0 + timedelta(hours=3 * i)))
    return out


def build(path: Any, n: int, seed: int, elsewhere: bool) -> tuple[Any, RecallIndex]:
    store = open_store(path)
    for t in THREADS:
        store.memory.create_thread(thread_id=t, resource_id="x" if elsewhere and t == LEFT_OUT else "u")
    msgs = messages(n, seed, elsewhere)
    store.memory.save_messages(msgs)
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    assert index.index_messages(msgs).ok
    return store, index


def row(h: Any) -> tuple[Any, ...]:
    return (h.message_id, h.thread_id, h.resource_id, h.source)


def scores(h: Any) -> tuple[float, ...]:
    return tuple(np.nan if s is None else s for s in (h.score, h.vector_score, h.keyword_score))


def check(filtered: RecallIndex, brute: RecallIndex, n: int) -> None:
    """Every query, mode, top k and ``until``: the same hits (the same order, thread and source), the same
    scores (to float32 rounding: the two matrices' products may sum a row's terms in another order),
    and the filtered run's lists hold no message of the left-out thread and are as deep as the brute
    force's."""
    middle = T0 + timedelta(hours=3 * n // 2)
    for query in QUERIES:
        for mode in ("vector", "keyword", "hybrid"):
            for top_k in (1, 4, 12):
                for until in (None, middle):
                    got = filtered.search(query, resource_id="u", top_k=top_k, mode=mode, until=until,
                                          exclude_thread=LEFT_OUT)
                    want = brute.search(query, resource_id="u", top_k=top_k, mode=mode, until=until)
                    where = (query, mode, top_k, until)
                    assert [row(h) for h in got.hits] == [row(h) for h in want.hits], where
                    for a, b in zip(got.hits, want.hits):
                        assert scores(a) == pytest.approx(scores(b), rel=1e-5, abs=1e-6, nan_ok=True), where
                    assert LEFT_OUT not in {h.thread_id for h in got.hits}
                    run = pipeline.run(filtered, query, resource_id="u", thread_id=None, top_k=top_k, mode=mode,
                                       until=until, exclude_thread=LEFT_OUT)
                    long = pipeline.run(brute, query, resource_id="u", thread_id=None, top_k=top_k, mode=mode,
                                        until=until)
                    for which in ("vector", "keyword"):
                        mine, theirs = getattr(run, which), getattr(long, which)
                        assert LEFT_OUT not in {r.thread_id for r in mine}, where
                        assert [r.message_id for r in mine] == [r.message_id for r in theirs], (which, where)
                    if mode == "hybrid":
                        assert [e[2] for e in run.receivers] == [e[2] for e in long.receivers], where


def pair(new_db: Callable[[str], Any], n: int, seed: int) -> tuple[tuple[Any, RecallIndex], tuple[Any, RecallIndex]]:
    return build(new_db(f"filtered{seed}.db"), n, seed, False), build(new_db(f"brute{seed}.db"), n, seed, True)


@pytest.mark.parametrize("served", [False, True], ids=["kept", "server"])
def test_a_search_leaving_a_thread_out_equals_the_resource_without_that_thread_indexed(
        new_db: Callable[[str], Any], backend: str, served: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if served and backend != "postgres":
        pytest.skip("the server's statements are Postgres'")
    if served:  # every scope too large to keep: the server's statements, and the one-statement hybrid read
        monkeypatch.setattr(pg_vector_cache, "MAX_ROWS", 0)
        monkeypatch.setattr(pg_keyword_cache, "MAX_DOCS", 0)
    monkeypatch.setattr(keyword, "STATS_CHECK_S", 1e9)  # term statistics counted once in each database
    for n, seed in ((40, 1), (160, 2)):
        (fs, filtered), (bs, brute) = pair(new_db, n, seed)
        try:
            if served:
                assert filtered.read_hybrid is not None
            check(filtered, brute, n)
        finally:
            fs.close()
            bs.close()


def test_the_matrix_scan_leaves_a_thread_out_as_if_it_were_not_indexed(
        new_db: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # A resource above the scan's size (its other threads alone too): the brute force takes the scan,
    # the filtered search leaves the thread's rows out of one product of the whole matrix.
    monkeypatch.setattr(keyword, "STATS_CHECK_S", 1e9)
    n = int(matrix.SCAN_MIN_ROWS * 1.5)
    (fs, filtered), (bs, brute) = pair(new_db, n, 3)
    try:
        with brute.store.db.read() as conn:
            vset = brute.vector_set(conn, "u", None)
        assert vset is not None and vset.n >= matrix.SCAN_MIN_ROWS
        for query in QUERIES[:4]:
            for mode in ("vector", "hybrid"):
                got = filtered.search(query, resource_id="u", top_k=8, mode=mode, exclude_thread=LEFT_OUT)
                want = brute.search(query, resource_id="u", top_k=8, mode=mode)
                assert [row(h) for h in got.hits] == [row(h) for h in want.hits], (query, mode)
                for a, b in zip(got.hits, want.hits):
                    assert scores(a) == pytest.approx(scores(b), rel=1e-5, abs=1e-6, nan_ok=True), (query, mode)
    finally:
        fs.close()
        bs.close()


def test_leaving_out_a_thread_the_scope_does_not_hold_changes_no_hit(
        new_db: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyword, "STATS_CHECK_S", 1e9)
    store, index = build(new_db("one.db"), 60, 4, False)
    try:
        for query in QUERIES:
            for mode in ("vector", "keyword", "hybrid"):
                for until in (None, T0 + timedelta(hours=90)):
                    for absent in ("nobody", None):
                        got = index.search(query, resource_id="u", top_k=6, mode=mode, until=until,
                                           exclude_thread=absent)
                        want = index.search(query, resource_id="u", top_k=6, mode=mode, until=until)
                        assert got.hits == want.hits, (query, mode, until, absent)
    finally:
        store.close()


@pytest.mark.libsql_only
def test_a_partitioned_resource_leaves_a_thread_out_of_the_lists_it_probes(
        db_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # A resource kept as a persisted IVF partition (approximate: only the lists nearest the query are
    # read): leaving a thread out answers the probed lists' best rows of the other threads.
    from core.recall import ivf_packs
    from core.recall.ivf_store import IvfScope
    from tests.core.test_recall_ivf import Table, seed

    monkeypatch.setattr(matrix, "IVF_MIN_ROWS", 300)
    monkeypatch.setattr(ivf_packs, "DELTA_MIN", 10)
    embedder = Table()
    store = open_store(db_path)
    try:
        seed(store, embedder, 400)
        index = seed(store, embedder, 150, start=400, thread="t2")
        with store.db.read() as conn:
            view = index.vector_set(conn, "u", None)
            assert isinstance(view, IvfScope)
            for c in embedder.centers:
                q = c / np.linalg.norm(c)
                for until in (None, "2026-03-01T09:07:00.000Z"):
                    got = view.ranked(q, 15, None, until, "t2")
                    every = view.ranked(q, 10_000, None, until)
                    want = [r for r in every if r.thread_id != "t2"][:15]
                    assert [r.message_id for r in got] == [r.message_id for r in want]
                    assert [r.score for r in got] == pytest.approx([r.score for r in want], rel=1e-5, abs=1e-6)
                    assert len(got) == 15 and any(r.thread_id == "t2" for r in every[:40])
    finally:
        store.close()
