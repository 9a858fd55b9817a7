"""An unfiltered search of a large ``VectorSet`` scans its dimension-major copy, then re-scores the rows
that can reach the top k with the row-major product: the same rows and the same scores, to the bit, as
the whole row-major product ranked by score (ties by position)."""

from __future__ import annotations

import numpy as np
import pytest

from core.recall import matrix
from core.recall.matrix import VectorSet, single_blas_thread


def whole_product_top(m: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    with single_blas_thread():
        scores = m @ q
    best = np.lexsort((np.arange(len(scores)), -scores))[:k]
    return best, scores[best]


def vector_set(m: np.ndarray, cut: int) -> VectorSet:
    """A set of ``m``'s rows appended in two batches, searched in between (the copy then grows)."""
    vset = VectorSet(m.shape[1], "m")
    n = len(m)
    vset.message_ids = [f"m{i}" for i in range(n)]
    vset.thread_ids = ["t"] * n
    vset.resource_ids = ["u"] * n
    vset.append_vectors(m[:cut], ["t"] * cut)
    vset.search(m[0], 3)
    vset.append_vectors(m[cut:], ["t"] * (n - cut))
    return vset


@pytest.mark.parametrize("n,dim", [(2_048, 64), (2_051, 512), (5_003, 512), (10_000, 512), (12_347, 384)])
def test_the_scan_ranks_and_scores_as_the_whole_product(n, dim):
    rng = np.random.default_rng(n + dim)
    m = rng.standard_normal((n, dim)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    m[n // 2 : n // 2 + 30] = m[7]  # identical vectors (identical texts): exact ties, at the cut too
    m[-3:] = m[11]  # and in the last, partial group of rows
    vset = vector_set(m, n // 3)
    assert vset.n >= matrix.SCAN_MIN_ROWS
    queries = [rng.standard_normal(dim).astype(np.float32) for _ in range(12)] + [m[7].copy(), m[11] * 0.5, m[-1]]
    for q in queries:
        for k in (1, 10, 20, 31, 100):
            pos, scores = vset.search(q, k)
            want_pos, want_scores = whole_product_top(m, q, k)
            assert np.array_equal(pos, want_pos) and np.array_equal(scores, want_scores), (k,)
    assert vset._scan_t is not None or not matrix._groups_reproduce(dim)


def test_rescoring_gives_the_whole_products_bits_for_every_row_and_size():
    rng = np.random.default_rng(3)
    for dim in (16, 512):
        if not matrix._groups_reproduce(dim):
            pytest.skip("this BLAS groups rows otherwise: the scan is not used")
        for n in (*range(1, 13), 1_001, 1_002, 1_003, 1_004):
            m = rng.standard_normal((n, dim)).astype(np.float32)
            q = rng.standard_normal(dim).astype(np.float32)
            with single_blas_thread():
                full = m @ q
            rows = np.sort(rng.choice(n, min(n, 37), replace=False))
            assert np.array_equal(matrix._rescore(m, n, rows, q), full[rows])


def test_a_query_that_is_not_finite_and_small_sets_use_the_whole_product():
    rng = np.random.default_rng(4)
    m = rng.standard_normal((3_000, 32)).astype(np.float32)
    vset = vector_set(m, 1_000)
    q = rng.standard_normal(32).astype(np.float32)
    q[3] = np.nan
    pos, scores = vset.search(q, 5)
    assert len(pos) == 5 and np.isnan(scores).all()
    small = vector_set(m[:500], 100)
    pos, scores = small.search(m[4], 3)
    assert pos[0] == 4 and small._scan_t is None


def ranked_the_long_way(vset: VectorSet, q: np.ndarray, depth: int) -> list[tuple[str, float]]:
    """Each message's best row among the best ``2 * depth`` rows, the first ``depth`` messages."""
    pos, scores = vset.search(q, 2 * depth)
    out: dict[str, float] = {}
    for p, s in zip(pos.tolist(), scores.tolist()):
        out.setdefault(vset.message_ids[p], s)
    return list(out.items())[:depth]


@pytest.mark.parametrize("chunks", [False, True])
def test_ranked_asks_the_scan_for_depth_rows_only_when_each_message_has_one(chunks):
    rng = np.random.default_rng(7)
    n, dim = 3_001, 64
    m = rng.standard_normal((n, dim)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    m[1000:1040] = m[5]  # exact ties
    vset = vector_set(m, n // 2)
    if chunks:  # Mastra's chunks: several rows of one message, next to each other and apart
        vset.message_ids = [f"m{i // 2}" if i < 600 else f"m{i}" for i in range(n)]
        vset.message_ids[2_999] = vset.message_ids[5]
    assert vset.positions_of("m0") == ([0, 1] if chunks else [0])  # (maps the ids)
    assert vset._depth_suffices(m[0], 50, None, None) is (not chunks)
    assert not vset._depth_suffices(m[0], 50, "t", None) and not vset._depth_suffices(m[0], 2_000, None, None)
    for q in [rng.standard_normal(dim).astype(np.float32) for _ in range(10)] + [m[5].copy()]:
        for depth in (1, 10, 50):
            got = vset.ranked(q, depth, None)
            assert [(r.message_id, r.score) for r in got] == ranked_the_long_way(vset, q, depth)
        ids = [vset.message_ids[i] for i in (0, 1, 5, 1_020, 2_999)] + ["unknown"]
        cos = vset.cosines(q, ids)
        with single_blas_thread():
            whole = (vset.matrix @ q).tolist()
        for mid in ids[:-1]:  # (each message's best row; the bits of a gathered product may differ in the last place)
            assert cos[mid] == pytest.approx(max(whole[p] for p in vset.positions_of(mid)), abs=1e-6)
        assert "unknown" not in cos


def test_ranked_gathers_each_hits_fields_from_rows_appended_after_a_search():
    """``ranked``'s fields come from object arrays of the rows' ids, threads and resources (``_id_columns``):
    rows appended after they were built (the matrix growing meanwhile) are in them too."""
    rng = np.random.default_rng(11)
    n, first, dim = 2_600, 2_100, 32
    m = rng.standard_normal((n, dim)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    vset = VectorSet(dim, "m")
    vset.message_ids = [f"m{i}" for i in range(n)]
    vset.thread_ids = [f"t{i % 3}" if i % 7 else None for i in range(n)]
    vset.resource_ids = [f"u{i % 2}" for i in range(n)]
    vset.append_vectors(m[:first], vset.thread_ids[:first])
    vset.positions_of("m0")  # (maps the ids: the one-row-a-message path)

    def expected(q: np.ndarray, depth: int) -> list[tuple[str, str | None, str | None, float]]:
        pos, scores = vset.search(q, depth)
        return [(vset.message_ids[p], vset.thread_ids[p], vset.resource_ids[p], s)
                for p, s in zip(pos.tolist(), scores.tolist())]

    queries = [rng.standard_normal(dim).astype(np.float32) for _ in range(5)]
    for q in queries:
        assert vset._depth_suffices(q, 50, None, None)
        assert [tuple(r) for r in vset.ranked(q, 50, None)] == expected(q, 50)
    vset.append_vectors(m[first:], vset.thread_ids[first:])  # (past the matrix's capacity: it grows)
    for q in [*queries, m[n - 1].copy()]:
        got = [tuple(r) for r in vset.ranked(q, 50, None)]
        assert got == expected(q, 50)
        assert all(type(r[3]) is float for r in got)
    assert got[0][:3] == (f"m{n - 1}", vset.thread_ids[n - 1], vset.resource_ids[n - 1])  # an appended row


def test_appends_keep_the_rows_of_each_message_mapped():
    rng = np.random.default_rng(3)
    m = rng.standard_normal((300, 16)).astype(np.float32)
    vset = VectorSet(16, "m")
    vset.message_ids = [f"m{i % 250}" for i in range(300)]  # m0..m49 twice
    vset.thread_ids, vset.resource_ids = ["t"] * 300, ["u"] * 300
    vset.append_vectors(m[:100], ["t"] * 100)
    assert vset.positions_of("m7") == [7]
    vset.append_vectors(m[100:], ["t"] * 200)  # (the map is kept up to date, not rebuilt)
    assert vset.positions_of("m7") == [7, 257] and vset.positions_of("m120") == [120]
    rebuilt = VectorSet(16, "m")
    rebuilt.message_ids, rebuilt.thread_ids, rebuilt.resource_ids = list(vset.message_ids), ["t"] * 300, ["u"] * 300
    rebuilt.append_vectors(m, ["t"] * 300)
    assert all(rebuilt.positions_of(f"m{i}") == vset.positions_of(f"m{i}") for i in range(250))


def test_one_blas_thread_inside_and_the_count_as_it_was_after():
    if not matrix._BLAS:
        pytest.skip("threadpoolctl finds no BLAS library here")
    lib = matrix._BLAS[0]
    before = lib.get_num_threads()
    with single_blas_thread():
        assert all(b.get_num_threads() == 1 for b in matrix._BLAS)
    assert lib.get_num_threads() == before
