"""The in-process cache of piece vectors (``core.recall.piece_cache``, libSQL's ``MatrixVectors``): a
vector-only search reads a message's pieces once, and stays exact when another process (another store
on the same file) edits, deletes or adds: its answers equal a fresh index's, score for score."""

from __future__ import annotations

import sqlalchemy as sa

from core import open_store
from core.recall import RecallIndex, pieces
from tests.core.test_recall_pieces import LONG, QUERY, TEXTS, Counting, edit, seed, with_pieces

QUERIES = (QUERY, "pumpkin soup with fresh bread", "the bicycle chain in the garage", "pottery bowls", "aquarium")
MORE = [LONG.replace("Caroline", "Melanie").replace("bicycle", "kayak"), TEXTS[2],
        LONG.replace("museum downtown", "aquarium by the harbour"), TEXTS[1]]


def answers(index: RecallIndex) -> list[list[tuple[str, float]]]:
    return [[(h.message_id, h.score) for h in index.search(q, resource_id="u", mode="vector", top_k=6).hits]
            for q in QUERIES]


def fresh(db_path) -> list[list[tuple[str, float]]]:
    """The same searches by a new process (an empty cache: every piece read from the table)."""
    other = open_store(db_path)
    try:
        return answers(RecallIndex.for_store(other, Counting()))
    finally:
        other.close()


def piece_reads(store, run) -> int:
    seen: list[str] = []

    def listener(conn, cursor, sql, params, context, many):  # noqa: ANN001
        seen.append(sql)

    sa.event.listen(store.db.engine, "before_cursor_execute", listener)
    try:
        run()
    finally:
        sa.event.remove(store.db.engine, "before_cursor_execute", listener)
    return sum(pieces.TABLE_PREFIX in sql and "SELECT" in sql and ".embedding" in sql for sql in seen)


def test_a_second_vector_search_reads_no_piece_rows(store):
    index = with_pieces(store)
    assert index.index_messages(seed(store)).ok
    first = piece_reads(store, lambda: index.search(QUERY, resource_id="u", mode="vector", top_k=4))
    second = piece_reads(store, lambda: index.search(QUERY, resource_id="u", mode="vector", top_k=4))
    other = piece_reads(store, lambda: index.search("pumpkin soup", resource_id="u", mode="vector", top_k=4))
    assert first == 1 and second == 0 and other == 0
    assert index.search(QUERY, resource_id="u", mode="vector", top_k=1).hits[0].message_id == "t-0"


def test_answers_with_the_cache_equal_a_fresh_read(store, db_path):
    index = with_pieces(store)
    assert index.index_messages(seed(store) + seed(store, MORE, thread="t2")).ok
    cold = answers(index)
    assert answers(index) == cold == fresh(db_path)  # (the second run from the cache)
    assert any(s != round(s, 3) for hits in cold for _, s in hits)  # (real scores, compared exactly)


def test_another_process_edit_delete_and_new_pieces_are_seen_at_the_next_search(store, db_path):
    index = with_pieces(store)
    msgs = seed(store) + seed(store, MORE, thread="t2")
    assert index.index_messages(msgs).ok
    answers(index)  # (the cache filled)

    def in_another_process(change) -> None:
        other = open_store(db_path)
        try:
            change(other, RecallIndex.for_store(other, Counting()))
        finally:
            other.close()

    steps = [
        # an edit of the long message: new pieces, new passage
        lambda s, ix: (edit(s, msgs[0], LONG.replace("museum downtown", "zoo uptown")), ix.refresh_messages(["t-0"])),
        # an edit of the message before t2-2: its passage moves, its pieces stay as they were
        lambda s, ix: (edit(s, msgs[5], "Caroline: something else entirely about pumpkins"),
                       ix.refresh_messages(["t2-1"])),
        # a message deleted with its pieces
        lambda s, ix: (s.memory.delete_messages(["t2-0"]), ix.refresh_messages(["t2-0"])),
        # new messages with pieces
        lambda s, ix: ix.index_messages(seed(s, [LONG.replace("Caroline", "Joanna"), TEXTS[3]], thread="t3")),
    ]
    for step in steps:
        before = answers(index)
        in_another_process(step)
        after = answers(index)
        assert after == fresh(db_path) and after != before


def test_the_cache_is_bounded_and_drops_the_least_recently_used(store):
    index = with_pieces(store)
    assert index.index_messages(seed(store) + seed(store, MORE, thread="t2")).ok
    cache = index.vectors._piece_cache  # type: ignore[attr-defined]
    answers(index)
    whole = cache.held_bytes
    assert whole > 0
    cache.max_bytes = whole // 2
    cache.clear()
    answers(index)
    assert 0 < cache.held_bytes <= whole // 2


def test_the_cache_answers_only_within_the_read_whose_counters_it_saw(store):
    index = with_pieces(store)
    assert index.index_messages(seed(store)).ok
    ids = ["t-0", "t-1", "t-2", "t-3"]
    with store.db.read() as conn:
        index.vector_set(conn, "u", None)  # (a search reads the counters first)
        filled = index.vectors.read_pieces(conn, ids)
    assert sorted(filled) == ["t-0", "t-3"]

    def again_in(opened) -> dict:
        with opened() as conn:
            return index.vectors.read_pieces(conn, ids)

    # Without the counters read in this read (or in a write, which may change what it read): from the table,
    # also on one kept connection (``reads()``) whose earlier read saw them.
    assert piece_reads(store, lambda: again_in(store.db.read)) == 1
    assert piece_reads(store, lambda: again_in(store.db.write)) == 1
    with store.db.reads():
        with store.db.read() as conn:
            index.vector_set(conn, "u", None)
            assert piece_reads(store, lambda: index.vectors.read_pieces(conn, ids)) == 0
        assert piece_reads(store, lambda: again_in(store.db.read)) == 1

    def searched_read() -> dict:
        with store.db.read() as conn:
            index.vector_set(conn, "u", None)
            return index.vectors.read_pieces(conn, ids)

    got: list[dict] = []
    assert piece_reads(store, lambda: got.append(searched_read())) == 0
    assert {k: v.spans for k, v in got[0].items()} == {k: v.spans for k, v in filled.items()}
