"""The in-process cache of piece vectors (``core.recall.piece_cache``, libSQL's ``MatrixVectors``): a
vector-only search reads a message's pieces once, keeps them across appended turns (reading only the new
messages' pieces), and stays exact when another process (another store on the same file) edits, deletes,
adds, re-embeds or gives old messages pieces: its answers equal a fresh index's, score for score."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa

from core import open_store
from core.messages import Message
from core.recall import RecallIndex, pieces, piece_table, reindex
from core.recall.tables import STATE_TABLE
from core.storage import catalog
from tests.core.test_recall_pieces import LONG, QUERY, T0, TEXTS, Counting, edit, seed, with_pieces

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


def asked(store, run) -> set[str]:
    """The message ids whose pieces ``run`` read from the table (the reads' bound ids)."""
    with store.db.read() as conn:
        known = {r[0] for r in conn.exec_driver_sql("SELECT id FROM mastra_messages")}
    seen: set[str] = set()

    def listener(conn, cursor, sql, params, context, many):  # noqa: ANN001
        if pieces.TABLE_PREFIX in sql and "SELECT" in sql and ".embedding" in sql:
            for p in params:  # (ids bound one by one, or as one JSON array: ``bulk.in_lists``)
                values = json.loads(p) if isinstance(p, str) and p.startswith("[") else [p]
                seen.update(v for v in values if isinstance(v, str) and v in known)

    sa.event.listen(store.db.engine, "before_cursor_execute", listener)
    try:
        run()
    finally:
        sa.event.remove(store.db.engine, "before_cursor_execute", listener)
    return seen


def in_another_process(db_path, change) -> None:
    other = open_store(db_path)
    try:
        change(other, RecallIndex.for_store(other, Counting()))
    finally:
        other.close()


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
        in_another_process(db_path, step)
        after = answers(index)
        assert after == fresh(db_path) and after != before


TURN = [LONG.replace("Caroline", "Joanna").replace("museum downtown", "museum uptown"), TEXTS[3]]


@pytest.mark.parametrize("writer", ["this process", "another process"])
def test_an_appended_turn_keeps_the_cache_and_only_the_new_messages_are_read(store, db_path, writer):
    index = with_pieces(store)
    assert index.index_messages(seed(store) + seed(store, MORE, thread="t2")).ok
    before = answers(index)  # (the cache filled: every message is among the re-scored)
    assert asked(store, lambda: answers(index)) == set()

    def save_a_turn(s, ix) -> None:
        assert ix.index_messages(seed(s, TURN, thread="t3")).ok

    if writer == "this process":
        save_a_turn(store, index)
    else:
        in_another_process(db_path, save_a_turn)
    got: list = []
    assert asked(store, lambda: got.append(answers(index))) == {"t3-0", "t3-1"}
    assert got[0] == fresh(db_path) and got[0] != before
    assert asked(store, lambda: answers(index)) == set()


def test_pieces_given_to_old_messages_replace_what_was_kept_of_them(store, db_path):
    """``reindex`` giving pieces to messages indexed before them inserts rows only (no counter moves):
    their kept "no pieces" entries go, the others stay."""
    index = RecallIndex.for_store(store, Counting())  # (pieces off: the hashing embedder's default)
    msgs = seed(store) + seed(store, MORE, thread="t2")
    assert index.index_messages(msgs).ok
    index.set_pieces(True)
    assert index.index_pieces(["t-0"]) == (1, {})
    before = answers(index)  # (t-3, t2-0, t2-2 kept as having none)
    in_another_process(db_path, lambda s, ix: reindex(s, ix.embedder))
    got: list = []
    assert asked(store, lambda: got.append(answers(index))) == {"t-3", "t2-0", "t2-2"}
    assert got[0] == fresh(db_path) and got[0] != before


def between(s, ix) -> None:
    """A message saved between t-2 and t-3: t-3's passage (which holds the previous message) is re-embedded,
    its pieces stay."""
    msg = Message.user("Caroline: I went to the aquarium by the harbour with my friends and my kids",
                       id="t-2b", thread_id="t", resource_id="u", created_at=T0 + timedelta(seconds=2.5))
    s.memory.save_messages([msg])
    assert ix.index_messages([msg]).ok


def recall_off_edit(s, ix) -> None:
    from core.recall.index import drop_stale_vectors_everywhere

    [msg] = s.memory.get_messages(["t-0"])
    edit(s, msg, LONG.replace("bicycle", "tricycle"))
    assert drop_stale_vectors_everywhere(s, ["t-0"]) >= 1


def forget(s, ix) -> None:
    from core.edits.forget import forget_resource

    assert forget_resource(s, "u").removed


def delete_everywhere(s, ix) -> None:
    from core.recall import delete_thread_everywhere

    delete_thread_everywhere(s, "t2")


def sql_delete(s, ix) -> None:
    """Another program deletes one message's pieces; its passage row stays."""
    with s.db.write() as conn:
        conn.exec_driver_sql(f"DELETE FROM {pieces.table_name(ix.dim)} WHERE message_id = 't-3'")


def sql_update(s, ix) -> None:
    """Another program rewrites a piece's vector in place."""
    with s.db.write() as conn:
        conn.exec_driver_sql(f"UPDATE {pieces.table_name(ix.dim)} SET embedding = "
                             f"(SELECT embedding FROM {pieces.table_name(ix.dim)} WHERE message_id = 't2-0' AND piece = 0) "
                             "WHERE message_id = 't-0'")


@pytest.mark.parametrize("change", [
    between,
    sql_delete,
    sql_update,
    lambda s, ix: reindex(s, ix.embedder, pieces="off"),
    lambda s, ix: ix.delete_thread("t2"),
    delete_everywhere,
    recall_off_edit,
    forget,
], ids=["a message saved between two", "a program deletes pieces", "a program rewrites pieces", "pieces turned off", "a thread deleted",
        "a thread deleted with recall off", "an edit with recall off", "the resource forgotten"])
def test_rewrites_and_deletes_by_another_process_are_seen_at_the_next_search(store, db_path, change):
    index = with_pieces(store)
    assert index.index_messages(seed(store) + seed(store, MORE, thread="t2")).ok
    before = answers(index)
    in_another_process(db_path, change)
    after = answers(index)
    assert after == fresh(db_path) and after != before


def test_a_pieces_table_without_rewrite_triggers_is_cached_until_any_write_then_a_writer_adds_them(store, db_path):
    """A pieces table made before its rewrite triggers: any write (an append too) empties the cache; the
    next writer's ``ensure_tables`` adds them."""
    index = with_pieces(store)
    assert index.index_messages(seed(store) + seed(store, MORE, thread="t2")).ok
    table = pieces.table_name(index.dim)
    with store.db.write() as conn:
        conn.exec_driver_sql(f'DROP TRIGGER "{table}_rewrites_au"')
        conn.exec_driver_sql(f'DROP TRIGGER "{table}_rewrites_ad"')
        conn.exec_driver_sql(f"DELETE FROM {STATE_TABLE} WHERE key = ?", (piece_table.rewrites_key(table),))
    reader_store = open_store(db_path)
    try:
        reader = RecallIndex.for_store(reader_store, Counting())
        answers(reader)
        assert asked(reader_store, lambda: answers(reader)) == set()
        assert index.index_messages(seed(store, TURN, thread="t3")).ok  # (this index wrote before: no ensure)
        got: list = []
        assert "t-0" in asked(reader_store, lambda: got.append(answers(reader)))  # (emptied)
        assert got[0] == fresh(db_path)
        in_another_process(db_path, lambda s, ix: ix.ensure_tables())
        with store.db.read() as conn:
            assert piece_table.has_rewrite_counter(conn, table)
            assert {(f"{table}_rewrites_au", table), (f"{table}_rewrites_ad", table)} <= set(catalog.triggers(conn))
    finally:
        reader_store.close()


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


def test_a_read_whose_counters_are_older_than_the_cache_reads_the_table_and_leaves_the_cache(store, db_path):
    index = RecallIndex.for_store(store, Counting())  # (pieces off: the hashing embedder's default)
    assert index.index_messages(seed(store)).ok
    index.set_pieces(True)
    assert index.index_pieces(["t-0"]) == (1, {})
    answers(index)  # (t-3 kept as having none)
    with store.db.read() as old:
        index.vector_set(old, "u", None)  # (this read's counters: before the next write)
        in_another_process(db_path, lambda s, ix: ix.index_pieces(["t-3"]))
        answers(index)  # (another connection: the cache moves on, t-3's pieces read)
        assert piece_reads(store, lambda: index.vectors.read_pieces(old, ["t-0", "t-3"])) == 1
    assert asked(store, lambda: answers(index)) == set()
