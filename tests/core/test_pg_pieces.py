"""Piece vectors (``core.recall.pieces``) on Postgres: the side table ``memory_studio_recall_pieces_<dim>``
(``pg_pieces``, ``PgVectors``' piece methods) answers as libSQL's does (``piece_table``), and the one
search pipeline ranks the same way over both backends.

Real PostgreSQL + pgvector (the pgserver wheel) next to a libSQL file holding the same messages."""

from __future__ import annotations

import numpy as np
import pytest

from core import open_store
from core.embedding import HashingEmbedder
from core.recall import RecallIndex, pieces, search
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


def test_a_rewrite_by_another_process_or_by_a_programs_own_sql_is_read_as_it_is_now(pg, pg_url):
    """Nothing of a read is kept: each answers the rows as they are, as a process that read nothing before."""
    store, vectors = pg
    rng = np.random.default_rng(5)
    ids = [f"m{i}" for i in range(4)]
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
    assert _same(first, fresh())
    if pieces.dots_by_row(DIM):  # (p·v as the search computes it stacked)
        held = [first[m] for m in ids]
        stacked = pieces.passage_dots(np.concatenate([e.vectors for e in held]),
                                      np.concatenate([np.repeat(e.passage[None], len(e.spans), 0) for e in held]))
        assert np.array_equal(np.concatenate([e.passage_dots for e in held]), stacked)
    # another process rewrites one message's pieces and another's passage row
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
    assert np.array_equal(now["m1"].vectors, np.stack(new_pieces)) and len(now["m1"].spans) == 2
    assert np.array_equal(now["m2"].passage, new_passage) and np.array_equal(now["m2"].vectors, first["m2"].vectors)
    assert np.array_equal(now["m0"].vectors, first["m0"].vectors) and _same(now, fresh())
    # a piece row deleted by a program's own SQL
    with store.db.write() as conn:
        conn.exec_driver_sql(f'DELETE FROM "{pieces.table_name(DIM)}" WHERE message_id = ? AND piece = 1', ("m0",))
    with store.db.read() as conn:
        now = vectors.read_pieces(conn, ids)
    assert now["m0"].spans == ((0, 1), (2, 3)) and np.array_equal(now["m0"].vectors, first["m0"].vectors[[0, 2]])
    assert _same(now, fresh())
    # pieces gone (forget): nothing
    with store.db.write() as conn:
        vectors.delete_pieces(conn, "resource_id", ["u"])
    with store.db.read() as conn:
        assert vectors.read_pieces(conn, ids) == {} and vectors.estimate_pieces(conn, ids, unit(rng.normal(size=DIM))) == {}


def _same(a, b) -> bool:
    """Two ``read_pieces`` answers equal field by field, the vectors and p·v to the bit."""
    return a.keys() == b.keys() and all(
        a[m].content == b[m].content and a[m].spans == b[m].spans and np.array_equal(a[m].passage, b[m].passage)
        and np.array_equal(a[m].vectors, b[m].vectors)
        and (a[m].passage_dots is None) == (b[m].passage_dots is None)
        and (a[m].passage_dots is None or np.array_equal(a[m].passage_dots, b[m].passage_dots)) for m in a)


def _exact_best(found, q: np.ndarray) -> float:
    """A message's best mixed row as ``search._with_pieces`` computes it (q.p, q.v in float32; p.v in float64)."""
    q_v = found.vectors @ q
    p_v = pieces.passage_dots(found.vectors, np.repeat(found.passage[None], len(found.spans), 0))
    return float(pieces.mixed_scores(np.float32(found.passage @ q), q_v, p_v).max())


@pytest.mark.parametrize("dim", [8, 384])
def test_the_servers_estimates_bound_the_searchs_own_scores_and_name_the_messages_read_would_answer(pg, dim):
    """``estimate_pieces`` answers the messages ``read_pieces`` answers (not one whose pieces are stale, of
    another model, or without a passage row), with their pieces' count, and each exact score (as the search
    computes it) lies within the estimate's bound: vectors of unit length, slightly off it (the search uses
    them as they are), far off it (scaled), a zero piece, and a piece almost opposite its passage (no bound)."""
    store, _ = pg
    vectors = PgVectors(dim, MODEL)
    vectors.open(store.db)
    vectors.ensure(store.db)
    rng = np.random.default_rng(dim)
    ids = []
    with store.db.write() as conn:
        for i in range(60):
            mid = f"m{i}"
            ids.append(mid)
            p = unit(rng.normal(size=dim))
            vs = [unit(rng.normal(size=dim) + 2 * p) for _ in range(int(rng.integers(1, 6)))]
            if i % 5 == 1:  # (within ``unit_rows``' tolerance: used as stored)
                p = (p * np.float32(1 + 5e-5)).astype(np.float32)
                vs = [(v * np.float32(1 - 8e-5)).astype(np.float32) for v in vs]
            if i % 5 == 2:  # (far off: scaled by the search, divided by the server)
                p = (p * np.float32(3.5)).astype(np.float32)
                vs = [(v * np.float32(0.25)).astype(np.float32) for v in vs]
            if i == 3:
                vs.append(np.zeros(dim, dtype=np.float32))
            if i == 4:
                vs.append((-p + np.float32(1e-3) * unit(rng.normal(size=dim))).astype(np.float32))
            text = f"text {mid}"
            vectors.upsert(conn, [passage_row(mid, "t1", "u", text, p)])
            vectors.write_pieces(conn, [mid], piece_rows(mid, "t1", "u", "an older text" if i == 7 else text, vs))
        vectors.write_pieces(conn, ["alone"], piece_rows("alone", "t1", "u", "x", [unit(rng.normal(size=dim))] * 2))
    for _ in range(5):
        q = unit(rng.normal(size=dim))
        with store.db.read() as conn:
            got = vectors.read_pieces(conn, [*ids, "alone"])
            estimates = vectors.estimate_pieces(conn, [*ids, "alone"], q)
        assert set(estimates) == set(got) == set(ids) - {"m7"}
        for mid, found in got.items():
            e = estimates[mid]
            assert e.pieces == len(found.spans)
            assert abs(_exact_best(found, q) - e.score) <= e.bound, (mid, e)
        assert estimates["m4"].bound == float("inf")  # (a piece almost opposite its passage)
        assert max(e.bound for m, e in estimates.items() if m != "m4") < 1e-3
    vectors.close()


def test_which_messages_a_search_must_read_by_their_bounds():
    est = pieces.PieceEstimate
    scan = [0.9, 0.8, 0.7, 0.6, 0.5]
    # no pieces: scored by the scan (exact); the rest by their estimates' bounds
    estimates = [None, est(2, 0.85, 0.01), est(3, 0.75, 0.01), est(1, 0.5, 0.01), est(2, 0.79, float("inf"))]
    assert pieces.must_read(scan, estimates, 2) == [1, 4]  # (the 2nd best lower bound .84: m2's .76 is under)
    assert pieces.must_read(scan, estimates, 3) == [1, 2, 4]
    assert pieces.must_read(scan, estimates, 5) == [1, 2, 3, 4]  # (every message answered: all read)
    assert pieces.must_read(scan, estimates, 0) == []
    tie = [None, est(1, 0.85, 0.0), est(1, 0.9, 0.0)]  # (an upper bound equal to the cut: read, it may tie)
    assert pieces.must_read([0.9, 0.1, 0.1], tie, 1) == [2]
    assert pieces.must_read([0.9, 0.1, 0.1], [None, None, est(1, 0.5, 0.1)], 1) == []
    one = lambda score, least, off: float(pieces.bounds(512, np.array([score]), np.array([least]), np.array([off]))[0])  # noqa: E731
    assert one(0.5, 2.0, 1e-7) < 3e-4
    assert one(0.5, 2.0, 1e-4) > one(0.5, 2.0, 0.0) + 1e-4  # (a vector the search uses unscaled)
    assert one(0.5, 0.01, 1e-7) == float("inf")  # (p·v near -1)
    assert one(float("nan"), 2.0, 1e-7) == one(0.5, float("nan"), 0.0) == one(0.5, 2.0, float("nan")) == float("inf")


def test_a_zero_padded_product_gives_each_row_the_bits_of_the_whole_one():
    assert pieces.rows_alone(256) in (True, False)  # (checked once; where it fails, searches read everything)
    rng = np.random.default_rng(3)
    full = rng.standard_normal((883, 512), dtype=np.float32)
    q = rng.standard_normal(512, dtype=np.float32)
    some = rng.random(883) < 0.05
    padded = np.zeros_like(full)
    padded[some] = full[some]
    assert np.array_equal((padded @ q)[some], (full @ q)[some]) == pieces.rows_alone(512)


def test_piece_rows_are_kept_whole_in_the_row_also_in_a_table_made_before(pg_url):
    """A 512-d piece row is over the size at which Postgres moves a value out of line: every column is
    kept in the row (its ``text_hash`` had been moved to the TOAST table, read at ~3 buffers a piece)."""
    store = open_store(pg_url)
    vectors = PgVectors(512, MODEL)
    vectors.open(store.db)
    vectors.ensure(store.db)
    table = pieces.table_name(512)
    rng = np.random.default_rng(6)

    def out_of_line() -> int:
        with store.db.read() as conn:
            return conn.exec_driver_sql(f'SELECT count(pg_column_toast_chunk_id(text_hash)) + '
                                        f'count(pg_column_toast_chunk_id(embedding)) FROM "{table}"').scalar()

    def storage() -> set[str]:
        with store.db.read() as conn:
            return {r[0] for r in conn.exec_driver_sql(
                "SELECT attstorage FROM pg_attribute WHERE attrelid = CAST(? AS regclass) AND attnum > 0 "
                "AND atttypid IN (CAST('text' AS regtype), CAST('vector' AS regtype))", (f'"{table}"',))}

    try:
        with store.db.write() as conn:
            vectors.write_pieces(conn, ["m"], piece_rows("m", "t1", "u", "text", [unit(rng.normal(size=512))] * 3))
        assert out_of_line() == 0 and storage() == {"m"}
        with store.db.write() as conn:  # (a table of before: its text columns as Postgres makes them)
            conn.exec_driver_sql(f'ALTER TABLE "{table}" ALTER COLUMN text_hash SET STORAGE EXTENDED')
            vectors.write_pieces(conn, ["m"], piece_rows("m", "t1", "u", "text", [unit(rng.normal(size=512))] * 3))
        assert out_of_line() == 3 and storage() == {"m", "x"}
        later = PgVectors(512, MODEL)  # (a writer of today opening that database: its ensure sets them)
        later.open(store.db)
        later.ensure(store.db)
        later.close()
        assert storage() == {"m"}
        with store.db.write() as conn:
            vectors.write_pieces(conn, ["m"], piece_rows("m", "t1", "u", "text", [unit(rng.normal(size=512))] * 3))
        assert out_of_line() == 0
    finally:
        vectors.close()
        store.close()


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


def test_a_search_reads_only_the_messages_that_could_be_among_its_best_and_answers_as_reading_all(pg_url):
    """Vector mode on Postgres reads the pieces of only the messages the server's estimates cannot rule out,
    and answers exactly (ids, scores to the bit, the winning piece) what reading every re-scored message
    answers, ties at the cut included (two threads hold the same messages: equal scores, the scan's order)."""
    store = open_store(pg_url)
    try:
        index = with_pieces(store)
        texts = conversation(70, seed=11)
        msgs = seed(store, texts) + seed(store, texts[:20], thread="t2")
        assert index.index_messages(msgs).ok
        backend = index.vectors
        asked: list[int] = []
        read = backend.read_pieces

        def counted(conn, ids):
            asked.append(len(ids))
            return read(conn, ids)

        backend.read_pieces = counted  # (an instance attribute: what this index's searches call)
        queries = (*_TOPICS, "my sister loved the marathon", "we planned our camping trip", "Caroline: pottery")
        reads: list[int] = []
        ties = 0
        for top_k in (1, 3, 10, 40):
            for query in queries:
                asked.clear()
                found = search.run(index, query, resource_id="u", thread_id=None, top_k=top_k, mode="vector")
                partial = asked[:]
                backend.estimates_pieces = False  # (every re-scored message read: the reference)
                try:
                    asked.clear()
                    whole = search.run(index, query, resource_id="u", thread_id=None, top_k=top_k, mode="vector")
                finally:
                    del backend.estimates_pieces
                assert found.vector == whole.vector and len(found.vector) == top_k  # (ids and scores, to the bit)
                assert found.by_piece == whole.by_piece and found.by_piece  # (which piece won, and its text)
                assert len(partial) == 1 and asked == [90]  # (all 90 messages re-scored, one read each)
                assert partial[0] < 90 if top_k < 40 else partial[0] <= 90
                reads.append(partial[0])
                ties += len({r.score for r in found.vector}) < len(found.vector)
        assert backend.estimates_pieces is True
        assert ties >= 10 and np.median(reads) < 30  # (answers with equal scores; most searches read few)
    finally:
        store.close()


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
