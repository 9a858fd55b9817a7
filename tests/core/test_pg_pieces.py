"""Piece vectors (``core.recall.pieces``) on Postgres: the side table ``memory_studio_recall_pieces_<dim>``
(``pg_pieces``, ``PgVectors``' piece methods) answers as libSQL's does (``piece_table``), and the one
search pipeline ranks the same way over both backends.

Real PostgreSQL + pgvector (the pgserver wheel) next to a libSQL file holding the same messages."""

from __future__ import annotations

import numpy as np
import pytest

from core import open_store
from core.embedding import HashingEmbedder
from core.recall import RecallIndex, pieces
from core.recall.pg_vectors import PgVectors
from core.recall.types import PieceRow

from .test_recall_pieces import (LONG, QUERY, TEXTS, edit, searched_before_and_after_pieces, seed,  # (libSQL's tests'
                                 stored_pieces)  # conversation and steps)

DIM = 8
MODEL = "test-model@1"


def unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return (v / np.linalg.norm(v)).astype(np.float32)


def passage_row(mid: str, thread: str, resource: str, text: str, vec: np.ndarray, model: str = MODEL):
    meta = {"message_id": mid, "thread_id": thread, "resource_id": resource, "content": text,
            "created_at": "2026-01-01T00:00:00.000Z"}
    return (mid, vec, meta, model)


def piece_rows(mid: str, thread: str, resource: str, text: str, vecs: list[np.ndarray]) -> list[PieceRow]:
    digest = pieces.text_hash(text)
    return [PieceRow(mid, thread, resource, j, j, j + 1, digest, v) for j, v in enumerate(vecs)]


@pytest.fixture
def pg(pg_url):
    store = open_store(pg_url)
    vectors = PgVectors(DIM, MODEL)
    vectors.open(store.db)
    vectors.ensure(store.db)
    yield store, vectors
    vectors.close()
    store.close()


def test_pieces_are_written_and_read_back_as_stored(pg):
    store, vectors = pg
    rng = np.random.default_rng(1)
    p = unit(rng.normal(size=DIM))
    vs = [unit(rng.normal(size=DIM)) for _ in range(3)]
    with store.db.write() as conn:
        vectors.upsert(conn, [passage_row("m1", "t1", "u", "the text", p)])
        vectors.write_pieces(conn, ["m1"], piece_rows("m1", "t1", "u", "the text", vs))
    with store.db.read() as conn:
        got = vectors.read_pieces(conn, ["m1", "m2"])
        assert vectors.piece_hashes(conn, ["m1", "m2"]) == {"m1": pieces.text_hash("the text")}
        assert vectors.piece_counts(conn) == {MODEL: 1}
    assert list(got) == ["m1"]
    found = got["m1"]
    assert found.content == "the text" and found.spans == ((0, 1), (1, 2), (2, 3))
    assert np.array_equal(found.passage, p)  # float32 bit for bit, both ways
    assert found.vectors.dtype == np.float32 and np.array_equal(found.vectors, np.stack(vs))


def test_only_pieces_cut_from_the_passage_rows_text_of_this_model_are_read(pg):
    store, vectors = pg
    rng = np.random.default_rng(2)
    other = PgVectors(DIM, "other-model@1")
    other.open(store.db)
    with store.db.write() as conn:
        vectors.upsert(conn, [passage_row("now", "t1", "u", "text now", unit(rng.normal(size=DIM))),
                              passage_row("edited", "t1", "u", "edited text", unit(rng.normal(size=DIM))),
                              passage_row("alone", "t1", "u", "no passage of this model", unit(rng.normal(size=DIM)),
                                          model="other-model@1")])
        vectors.write_pieces(conn, ["now", "edited", "alone"], [
            *piece_rows("now", "t1", "u", "text now", [unit(rng.normal(size=DIM)) for _ in range(2)]),
            *piece_rows("edited", "t1", "u", "the text before the edit", [unit(rng.normal(size=DIM)) for _ in range(2)]),
            *piece_rows("alone", "t1", "u", "no passage of this model", [unit(rng.normal(size=DIM)) for _ in range(2)]),
        ])
        # another model's pieces of the same message: kept apart
        other.write_pieces(conn, ["now"], piece_rows("now", "t1", "u", "text now", [unit(rng.normal(size=DIM))] * 3))
    with store.db.read() as conn:
        assert set(vectors.read_pieces(conn, ["now", "edited", "alone"])) == {"now"}
        assert len(vectors.read_pieces(conn, ["now"])["now"].spans) == 2
        assert vectors.piece_counts(conn) == {MODEL: 3, "other-model@1": 1}
        assert vectors.piece_hashes(conn, ["edited"]) == {"edited": pieces.text_hash("the text before the edit")}
    # a write replaces this model's pieces of the listed messages (none: left with none), not the other's
    with store.db.write() as conn:
        vectors.write_pieces(conn, ["now", "edited"], piece_rows("edited", "t1", "u", "edited text",
                                                                [unit(rng.normal(size=DIM)) for _ in range(4)]))
    with store.db.read() as conn:
        got = vectors.read_pieces(conn, ["now", "edited"])
        assert set(got) == {"edited"} and len(got["edited"].spans) == 4
        assert vectors.piece_counts(conn) == {MODEL: 2, "other-model@1": 1}
    other.close()


def test_deletes_take_every_models_pieces_by_message_thread_and_resource(pg):
    store, vectors = pg
    rng = np.random.default_rng(3)
    other = PgVectors(DIM, "other-model@1")
    other.open(store.db)
    layout = [("a", "t1", "u1"), ("b", "t1", "u1"), ("c", "t2", "u1"), ("d", "t3", "u2"), ("e", "t4", "u3")]
    with store.db.write() as conn:
        for mid, tid, rid in layout:
            vectors.upsert(conn, [passage_row(mid, tid, rid, f"text {mid}", unit(rng.normal(size=DIM)))])
            rows = piece_rows(mid, tid, rid, f"text {mid}", [unit(rng.normal(size=DIM)) for _ in range(2)])
            vectors.write_pieces(conn, [mid], rows)
            other.write_pieces(conn, [mid], rows)

    def left() -> set[tuple[str, str]]:
        with store.db.read() as conn:
            return {(r[0], r[1]) for r in conn.exec_driver_sql(
                f'SELECT DISTINCT message_id, model_id FROM "{pieces.table_name(DIM)}"')}

    with store.db.write() as conn:
        vectors.delete(conn, "message_id", ["a"])  # the index's delete: passage rows and pieces
    assert {m for m, _ in left()} == {"b", "c", "d", "e"}
    with store.db.write() as conn:
        vectors.delete(conn, "thread_id", ["t1"])
    assert {m for m, _ in left()} == {"c", "d", "e"}
    with store.db.write() as conn:
        vectors.delete_pieces(conn, "resource_id", ["u1"])  # (forget of a resource)
    assert {m for m, _ in left()} == {"d", "e"}
    with store.db.write() as conn:
        PgVectors.delete_thread_everywhere(conn, "t3")  # the Studio's Delete Thread
    assert left() == {("e", MODEL), ("e", "other-model@1")}
    with pytest.raises(ValueError):
        with store.db.write() as conn:
            vectors.delete_pieces(conn, "content", ["x"])
    other.close()



def three_pieces_each(store, vectors, rng, ids) -> None:
    """Each message a passage row of text "text <id>" and three random pieces cut from it."""
    with store.db.write() as conn:
        for mid in ids:
            vectors.upsert(conn, [passage_row(mid, "t1", "u", f"text {mid}", unit(rng.normal(size=DIM)))])
            vectors.write_pieces(conn, [mid], piece_rows(mid, "t1", "u", f"text {mid}",
                                                         [unit(rng.normal(size=DIM)) for _ in range(3)]))


def test_vectors_read_before_are_not_sent_again_and_a_rewrite_by_another_process_is_read(pg, pg_url, monkeypatch):
    from core.recall import pg_pieces

    store, vectors = pg
    rng = np.random.default_rng(5)
    ids = [f"m{i}" for i in range(4)]
    three_pieces_each(store, vectors, rng, ids)
    sent: list[int] = []
    decode = pg_pieces._floats
    monkeypatch.setattr(pg_pieces, "_floats", lambda rows, dim: (sent.append(len(rows)), decode(rows, dim))[1])
    with store.db.read() as conn:
        first = vectors.read_pieces(conn, ids)
    with store.db.read() as conn:
        again = vectors.read_pieces(conn, ids)
    assert sent == [4 * 4, 0]  # (each message's 3 pieces and passage, then nothing)
    assert all(np.array_equal(first[m].vectors, again[m].vectors) and np.array_equal(first[m].passage, again[m].passage)
               for m in ids)
    # another process rewrites one message's pieces and another's passage row: both are read anew
    other = open_store(pg_url)
    writer = PgVectors(DIM, MODEL)
    writer.open(other.db)
    new_pieces = [unit(rng.normal(size=DIM)) for _ in range(2)]
    new_passage = unit(rng.normal(size=DIM))
    with other.db.write() as conn:
        writer.write_pieces(conn, ["m1"], piece_rows("m1", "t1", "u", "text m1", new_pieces))
        writer.upsert(conn, [passage_row("m2", "t1", "u", "text m2", new_passage)])
    writer.close()
    other.close()
    with store.db.read() as conn:
        now = vectors.read_pieces(conn, ids)
    assert sent[2] == 2 + 1  # m1's two new pieces, m2's new passage row
    assert np.array_equal(now["m1"].vectors, np.stack(new_pieces)) and len(now["m1"].spans) == 2
    assert np.array_equal(now["m2"].passage, new_passage) and np.array_equal(now["m2"].vectors, first["m2"].vectors)
    assert np.array_equal(now["m0"].vectors, first["m0"].vectors)
    # pieces gone (forget): nothing, and nothing kept of them
    with store.db.write() as conn:
        vectors.delete_pieces(conn, "resource_id", ["u"])
    with store.db.read() as conn:
        assert vectors.read_pieces(conn, ids) == {}
    assert vectors.status()["piece_cache_messages"] == 0

def _same(a, b) -> bool:
    """Two ``read_pieces`` answers equal field by field, the vectors and p·v to the bit."""
    return a.keys() == b.keys() and all(
        a[m].content == b[m].content and a[m].spans == b[m].spans and np.array_equal(a[m].passage, b[m].passage)
        and np.array_equal(a[m].vectors, b[m].vectors)
        and (a[m].passage_dots is None) == (b[m].passage_dots is None)
        and (a[m].passage_dots is None or np.array_equal(a[m].passage_dots, b[m].passage_dots)) for m in a)


def test_a_kept_answer_is_reused_only_while_its_rows_are_the_same_and_equals_a_fresh_read(pg, pg_url):
    """The process keeps each message's answer with the rows it was made from; a read whose rows are those
    (none sent) answers with it, and one whose rows differ without any vector being sent (a piece row
    deleted by a program's own SQL: the others keep their version) makes it anew. Every answer equals
    that of a process that holds nothing, p·v included (as the search would compute it stacked)."""
    store, vectors = pg
    rng = np.random.default_rng(9)
    ids = [f"m{i}" for i in range(3)]
    three_pieces_each(store, vectors, rng, ids)

    def fresh():
        other = open_store(pg_url)
        reader = PgVectors(DIM, MODEL)
        reader.open(other.db)
        try:
            with other.db.read() as conn:
                return reader.read_pieces(conn, ids)
        finally:
            reader.close()
            other.close()

    with store.db.read() as conn:
        first = vectors.read_pieces(conn, ids)
        again = vectors.read_pieces(conn, ids)
    assert all(again[m] is first[m] for m in ids)  # (the kept answers themselves)
    assert _same(again, fresh())
    if pieces.dots_by_row(DIM):
        held = [first[m] for m in ids]
        stacked = pieces.passage_dots(np.concatenate([e.vectors for e in held]),
                                      np.concatenate([np.repeat(e.passage[None], len(e.spans), 0) for e in held]))
        assert np.array_equal(np.concatenate([e.passage_dots for e in held]), stacked)
    with store.db.write() as conn:
        conn.exec_driver_sql(f'DELETE FROM "{pieces.table_name(DIM)}" WHERE message_id = ? AND piece = 1', ("m0",))
    with store.db.read() as conn:
        now = vectors.read_pieces(conn, ids)
    assert now["m0"].spans == ((0, 1), (2, 3)) and np.array_equal(now["m0"].vectors, first["m0"].vectors[[0, 2]])
    assert now["m1"] is first["m1"] and _same(now, fresh())


def _statements(store):
    """The statements ``store``'s connections run, as a list that grows (SQLAlchemy's event)."""
    import sqlalchemy as sa

    seen: list[str] = []
    sa.event.listen(store.db.engine, "before_cursor_execute",
                    lambda conn, cur, statement, *rest: seen.append(statement))
    return seen


def test_a_scope_without_pieces_is_not_read_again_until_a_pieces_write_is_logged(pg, pg_url):
    store, vectors = pg
    rng = np.random.default_rng(4)
    with store.db.write() as conn:
        vectors.upsert(conn, [passage_row("x", "t1", "u", "text x", unit(rng.normal(size=DIM)))])
    seen = _statements(store)
    for _ in range(2):
        with store.db.read() as conn:
            before = len(seen)
            assert vectors.has_pieces(conn, "u", None) is False
            assert vectors.has_pieces(conn, None, "t1") is False
            looked = [s for s in seen[before:] if pieces.TABLE_PREFIX in s]
    assert looked == []  # (the second read: the log said nothing moved, nothing looked at)
    with store.db.read() as conn:
        before = len(seen)
        assert vectors.has_pieces(conn, "u", None) is False
        assert vectors.has_pieces(conn, "u", "t1") is False  # (a resource's thread: the resource's answer)
        assert vectors.has_pieces(conn, None, "t1") is False
        asked = seen[before:]
    assert not [s for s in asked if pieces.TABLE_PREFIX in s], asked  # the log said nothing moved: no read
    # Another process writes pieces of the scope: this one's next read is told by the log, and looks.
    writer_store = open_store(pg_url)
    writer = PgVectors(DIM, MODEL)
    writer.open(writer_store.db)
    writer.ensure(writer_store.db)
    with writer_store.db.write() as conn:
        writer.upsert(conn, [passage_row("y", "t2", "u", "text y", unit(rng.normal(size=DIM)))])
        writer.write_pieces(conn, ["y"], piece_rows("y", "t2", "u", "text y", [unit(rng.normal(size=DIM))] * 2))
    with store.db.read() as conn:
        assert vectors.has_pieces(conn, "u", None) is True
        assert vectors.has_pieces(conn, None, "t1") is False
        assert vectors.has_pieces(conn, None, "t2") is True
        assert vectors.has_pieces(conn, "other", None) is False
    # ... and when they go (forget of the resource), a False again
    with writer_store.db.write() as conn:
        writer.delete_pieces(conn, "resource_id", ["u"])
    with store.db.read() as conn:
        assert vectors.has_pieces(conn, "u", None) is False
    writer.close()
    writer_store.close()


def test_an_existing_database_gets_its_pieces_table_with_logged_writes_at_its_next_write(pg_url):
    from core.recall import pg_changes
    from core.storage.catalog import has_table

    store = open_store(pg_url)
    table = pieces.table_name(DIM)
    try:
        first = PgVectors(DIM, MODEL)
        first.open(store.db)
        first.ensure(store.db)
        with store.db.write() as conn:  # a database of before: its vector table, no pieces table
            conn.exec_driver_sql(f'DROP TABLE "{table}"')
        later = PgVectors(DIM, MODEL)
        later.open(store.db)
        assert later.info is not None and later.pieces_table is None
        with store.db.read() as conn:
            assert later.read_pieces(conn, ["m"]) == {} and later.has_pieces(conn, "u", None) is False
            assert later.piece_counts(conn) == {} and later.piece_hashes(conn, ["m"]) == {}
        later.ensure(store.db)
        with store.db.read() as conn:
            assert has_table(conn, table) and pg_changes.has_log(conn, table)
        assert later.pieces_table == table
        first.close()
        later.close()
    finally:
        store.close()


# -- the index and the search pipeline over Postgres, against libSQL ----------------------------------

_TOPICS = ["the old bicycle", "the museum downtown", "pottery class", "the community garden", "a jazz concert",
           "the pumpkin soup", "our camping trip", "the adoption agency", "my painting of a sunset", "the marathon"]
_DOING = ["we talked about", "I finally finished", "my sister loved", "everyone asked about", "I keep thinking of",
          "the kids laughed at", "we planned", "I wrote a poem about"]


def conversation(n: int, seed: int) -> list[str]:
    """``n`` messages of two speakers, long ones (several sentences and clauses) among short ones."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        name = ("Caroline", "Melanie")[i % 2]
        k = int(rng.integers(1, 4))
        sentences = []
        for _ in range(k):
            a, b = rng.choice(len(_TOPICS), 2, replace=False)
            d1, d2 = rng.choice(len(_DOING), 2, replace=False)
            sentences.append(f"Last week {_DOING[d1]} {_TOPICS[a]}, and then {_DOING[d2]} {_TOPICS[b]} together.")
        out.append(f"{name}: " + " ".join(sentences))
    return out


def with_pieces(store, on: bool = True) -> RecallIndex:
    index = RecallIndex.for_store(store, HashingEmbedder(256))
    index.ensure_tables()
    index.set_pieces(on)  # (the hashing embedder's default is off)
    return index


def hashes(index: RecallIndex, ids) -> dict[str, str]:
    with index.store.db.read() as conn:
        return index.vectors.piece_hashes(conn, ids)


@pytest.fixture
def both(tmp_path, pg_url):
    """A libSQL file and a Postgres database, empty."""
    lib, pg = open_store(tmp_path / "m.db"), open_store(pg_url)
    yield lib, pg
    lib.close()
    pg.close()


def test_vector_mode_ranks_a_message_by_its_piece_on_postgres_with_libsqls_scores(both):
    got = {}
    for store in both:
        index = RecallIndex.for_store(store, HashingEmbedder(256))
        got[store.capabilities.server] = searched_before_and_after_pieces(index)
    (lib_before, lib_after), (pg_before, pg_after) = got[False], got[True]
    assert pg_before[0].message_id == "t-1" and pg_after[0].message_id == "t-0"  # by its museum piece
    assert [h.message_id for h in pg_after] == [h.message_id for h in lib_after]
    assert [h.score for h in pg_after] == pytest.approx([h.score for h in lib_after], abs=1e-6)
    # a message without pieces keeps its passage cosine
    assert next(h.score for h in pg_after if h.message_id == "t-1") == next(
        h.score for h in pg_before if h.message_id == "t-1")


def test_the_same_order_as_libsql_for_the_same_messages(both):
    texts = conversation(60, seed=5)
    lists = {}
    for store in both:
        index = with_pieces(store)
        assert index.index_messages(seed(store, texts)).ok
        queries = (*_TOPICS, "my sister loved the marathon", "we planned our camping trip")
        found = [index.search(q, resource_id="u", mode="vector", top_k=10).hits for q in queries]
        index.set_pieces(False)  # (searches without pieces from now on)
        lists[store.capabilities.server] = [
            (hits, index.search(q, resource_id="u", mode="vector", top_k=10).hits) for q, hits in zip(queries, found)]
    moved = 0
    for (lib, lib_plain), (pg, pg_plain) in zip(lists[False], lists[True]):
        assert [h.message_id for h in pg] == [h.message_id for h in lib]
        assert [h.score for h in pg] == pytest.approx([h.score for h in lib], abs=1e-6)
        assert [h.message_id for h in pg_plain] == [h.message_id for h in lib_plain]
        moved += [h.message_id for h in pg] != [h.message_id for h in pg_plain]
    assert moved >= 6  # (pieces changed most lists: the comparison is of the pieces' ranking)


def test_hybrid_answers_on_postgres_do_not_change_with_pieces(pg_url, pg_server):
    url, drop = pg_server.fresh_database()
    store, other = open_store(pg_url), open_store(url)
    try:
        index = with_pieces(store)
        assert index.index_messages(seed(store)).ok and index.piece_counts() == {index.model_id: 2}
        plain = RecallIndex.for_store(other, HashingEmbedder(256))
        assert plain.index_messages(seed(other)).ok and not plain.pieces
        for query in (QUERY, "pumpkin soup", "pottery bowls", "bicycle chain"):
            assert index.search(query, resource_id="u", mode="hybrid", top_k=4).hits == \
                plain.search(query, resource_id="u", mode="hybrid", top_k=4).hits
    finally:
        store.close()
        other.close()
        drop()


def test_a_postgres_database_without_pieces_searches_as_before_and_reads_no_pieces(pg_url):
    store = open_store(pg_url)
    try:
        index = RecallIndex.for_store(store, HashingEmbedder(256))
        assert index.index_messages(seed(store)).ok
        before = index.search(QUERY, resource_id="u", mode="vector", top_k=4).hits
        with store.db.write() as conn:  # a database of before: no pieces table at all
            conn.exec_driver_sql(f'DROP TABLE "{pieces.table_name(index.dim)}"')
        store.close()
        store = open_store(pg_url)  # (a process opened now)
        again = RecallIndex.for_store(store, HashingEmbedder(256))
        again.set_pieces(True)
        seen = _statements(store)
        for _ in range(2):
            assert again.search(QUERY, resource_id="u", mode="vector", top_k=4).hits == before
        assert not [s for s in seen if pieces.TABLE_PREFIX in s]
        # with the table there and pieces on, a scope without any: one look, then none
        again.ensure_tables()
        assert again.search(QUERY, resource_id="u", mode="vector", top_k=4).hits == before
        seen.clear()
        assert again.search(QUERY, resource_id="u", mode="vector", top_k=4).hits == before
        assert not [s for s in seen if pieces.TABLE_PREFIX in s]
    finally:
        store.close()


def test_edits_deletes_forget_and_reindex_keep_pieces_right_on_postgres(pg_url):
    from core.edits.forget import forget_resource
    from core.recall import reindex

    store = open_store(pg_url)
    try:
        index = with_pieces(store)
        msgs = seed(store, [TEXTS[3], LONG, TEXTS[1]])
        assert index.index_messages(msgs).ok
        old = stored_pieces(index, ["t-1"])["t-1"]
        # an edit of the previous message moves t-1's passage, not its pieces
        edit(store, msgs[0], "Melanie: else")
        assert index.refresh_messages(["t-0"]).ok
        kept = stored_pieces(index, ["t-1"])["t-1"]
        assert np.array_equal(kept.vectors, old.vectors) and not np.array_equal(kept.passage, old.passage)
        # its own edit gives it new pieces; an edit to a short text leaves it none
        new_text = LONG.replace("museum downtown", "aquarium by the harbour")
        edit(store, msgs[1], new_text)
        assert index.refresh_messages(["t-1"]).ok
        assert hashes(index, ["t-1"]) == {"t-1": pieces.text_hash(new_text)} and stored_pieces(index, ["t-1"])["t-1"].content == new_text
        assert index.search("aquarium by the harbour", resource_id="u", mode="vector", top_k=1).hits[0].message_id == "t-1"
        edit(store, msgs[1], "never mind")
        assert index.refresh_messages(["t-1"]).ok and hashes(index, ["t-1"]) == {}

        # deletes: a message, a thread, the resource (forget); nothing naming it is left
        more = seed(store, [LONG, TEXTS[3]], thread="t2") + seed(store, [LONG, TEXTS[3]], thread="t3")
        assert index.index_messages(more).ok
        assert set(hashes(index, [m.id for m in more])) == {"t2-0", "t2-1", "t3-0", "t3-1"}
        store.memory.delete_messages(["t2-1"])
        index.refresh_messages(["t2-1"])
        assert set(hashes(index, [m.id for m in more])) == {"t2-0", "t3-0", "t3-1"}
        index.delete_thread("t2")
        assert set(hashes(index, [m.id for m in more])) == {"t3-0", "t3-1"}
        table = pieces.table_name(index.dim)
        report = forget_resource(store, "u")
        assert report.removed.get(f"piece vectors ({table})") == 6 + 2 and not report.leftovers
        with store.db.read() as conn:
            assert conn.exec_driver_sql(f'SELECT count(*) FROM "{table}"').scalar() == 0

        # reindex: pieces for messages indexed before, and dropped when turned off
        plain = RecallIndex.for_store(store, HashingEmbedder(256))
        plain.set_pieces(False)
        again = seed(store, resource="u2")
        assert plain.index_messages(again).ok and hashes(plain, [m.id for m in again]) == {}
        report = reindex(store, plain.embedder, pieces="on")
        assert report.pieces_written == 2 and set(hashes(plain, [m.id for m in again])) == {"t-0", "t-3"}
        assert plain.search(QUERY, resource_id="u2", mode="vector", top_k=1).hits[0].message_id == "t-0"
        report = reindex(store, plain.embedder, pieces="off")
        assert report.pieces_dropped == 2 and hashes(plain, [m.id for m in again]) == {}
    finally:
        store.close()


def test_with_recall_off_an_edit_drops_old_pieces_and_a_deleted_thread_takes_its_own_on_postgres(pg_url):
    from core.recall import delete_thread_everywhere
    from core.recall.index import drop_stale_vectors_everywhere
    from core.recall.models import stored_piece_counts

    store = open_store(pg_url)
    try:
        index = with_pieces(store)
        msgs = seed(store) + seed(store, [LONG], thread="t2")
        assert index.index_messages(msgs).ok
        assert stored_piece_counts(store) == {index.model_id: 3}
        text = LONG.replace("bicycle", "tricycle")  # (saved by a process with recall off)
        edit(store, msgs[0], text)
        assert drop_stale_vectors_everywhere(store, ["t-0", "t-3"]) >= 1
        assert set(hashes(index, ["t-0", "t-3"])) == {"t-3"}  # (t-3's text is as it was: its pieces stay)
        delete_thread_everywhere(store, "t2")
        assert hashes(index, ["t2-0"]) == {} and stored_piece_counts(store) == {index.model_id: 1}
    finally:
        store.close()
