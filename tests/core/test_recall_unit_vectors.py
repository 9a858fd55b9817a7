"""Vectors another program wrote that are not of unit length are scored by their cosine, as Mastra's libSQL
(``vector_distance_cos``) and pgvector (``<=>``) score them: a long row must not outrank every other row by its
length alone. Our own unit rows are kept bit for bit."""

from __future__ import annotations

import numpy as np

from core.embedding import HashingEmbedder
from core.recall import RecallIndex
from core.recall.ivf_packs import usable
from core.recall.vector_table import UNIT_TOLERANCE, RawRow, decode, unit_rows
from tests.core.test_recall_queued_edits import indexed_thread


def test_unit_rows_keep_unit_rows_bit_for_bit_and_scale_the_others():
    rng = np.random.default_rng(7)
    unit = rng.standard_normal((50, 64)).astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    assert unit_rows(unit) is unit  # nothing off: the same array, no copy
    rows = unit.copy()
    rows[3] *= np.float32(1e30)
    rows[7] *= np.float32(3.0)
    rows[9] = 0.0
    rows[11] *= np.float32(1 + UNIT_TOLERANCE / 10)  # within the tolerance: kept as it is
    out = unit_rows(rows)
    assert np.array_equal(np.delete(out, [3, 7, 9, 11], axis=0), np.delete(unit, [3, 7, 9, 11], axis=0))
    assert np.array_equal(out[11], rows[11])
    for i in (3, 7):
        assert abs(float(np.linalg.norm(out[i].astype(np.float64))) - 1) < 1e-6
        assert np.allclose(out[i], unit[i], atol=1e-6)
    assert not out[9].any()
    assert np.array_equal(rows[3], unit[3] * np.float32(1e30))  # the caller's array is left alone
    blob = (unit[5] * np.float32(4.0)).astype("<f4").tobytes()
    decoded = decode(blob, 64)
    assert decoded is not None and np.allclose(decoded, unit[5], atol=1e-6)
    # The rows an IVF pack is built from (read one by one, scaled together) come out of unit length too.
    packed = usable([RawRow(1, blob, "m5", "t", "u", None), RawRow(2, unit[6].astype("<f4").tobytes(), "m6", "t", "u",
                                                                   None)], "model", 64, "u")
    assert np.allclose(packed.vectors[0], unit[5], atol=1e-6) and np.array_equal(packed.vectors[1], unit[6])


def test_a_long_vector_another_program_wrote_is_scored_by_its_cosine(tmp_path):
    gen = indexed_thread(tmp_path / "v.db", 64)
    store, index = next(gen)
    try:
        before = {mode: [h.message_id for h in index.search("dinner", resource_id="u", mode=mode, top_k=3).hits]
                  for mode in ("vector", "hybrid")}
        with store.db.read() as conn:
            (table,) = [r[0] for r in conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'memory_messages_%'")]
            target, blob = conn.exec_driver_sql(
                f"SELECT vector_id, embedding FROM {table} ORDER BY vector_id DESC LIMIT 1").one()
        kept = np.frombuffer(bytes(blob), dtype="<f4").copy()
        assert target not in before["vector"] + before["hybrid"]  # a row the query does not find
        # Another program rewrites that row as a very long vector in its own direction: its cosine, not its
        # length, decides (unscaled, it would rank first in every search with a "score" of about 1e29).
        with store.db.write() as conn:
            conn.exec_driver_sql(f"UPDATE {table} SET embedding = ? WHERE vector_id = ?",
                                 ((kept * np.float32(1e30)).astype("<f4").tobytes(), target))
        fresh = RecallIndex.for_store(store, HashingEmbedder(64))
        for mode in ("vector", "hybrid"):
            found = fresh.search("dinner", resource_id="u", mode=mode, top_k=3)
            assert [h.message_id for h in found.hits] == before[mode]
            assert all(h.score <= 1.0 + 1e-6 for h in found.hits)
        query = HashingEmbedder(64).embed(["dinner"], "query")[0]
        scores = {h.message_id: h.score for h in fresh.search("dinner", resource_id="u", mode="vector",
                                                               top_k=50, threshold=-1.0).hits}
        assert abs(scores[target] - float(np.dot(query, kept / np.linalg.norm(kept)))) < 1e-5
    finally:
        gen.close()


def test_a_pack_written_before_rows_were_scaled_is_scaled_when_read():
    """An IVF pack keeps the vectors it was built from; one built before rows were scaled on load may hold
    a long row: the set made of it scales it (and uses a pack of unit rows as it is, without a copy)."""
    from core.recall.matrix import VectorSet

    rng = np.random.default_rng(3)
    unit = rng.standard_normal((40, 32)).astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    query = unit[17]
    away = unit[5] - float(unit[5] @ query) * query  # row 5: a small positive cosine with the query
    unit[5] = (away / np.linalg.norm(away) * np.float32(0.999) + np.float32(0.045) * query).astype(np.float32)
    unit[5] /= np.linalg.norm(unit[5])
    ids, threads = [f"m{i}" for i in range(40)], ["t"] * 40
    plain = VectorSet.of_rows(32, "model", unit, ids, threads, ["u"] * 40, [None] * 40)
    assert np.shares_memory(plain.matrix, unit)
    packed = unit.copy()
    packed[5] *= np.float32(1e30)
    vset = VectorSet.of_rows(32, "model", packed, ids, threads, ["u"] * 40, [None] * 40)
    positions, scores = vset.search(query, 3)
    want_pos, want_scores = plain.search(query, 3)
    assert 5 not in want_pos.tolist()
    assert positions.tolist() == want_pos.tolist() and np.allclose(scores, want_scores, atol=1e-6)
