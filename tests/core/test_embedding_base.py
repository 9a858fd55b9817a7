"""Shared helpers: batching must return rows in input order; normalisation must not make NaNs."""

from __future__ import annotations

import numpy as np
import pytest

from core.embedding.base import embed_in_batches, l2_normalise, length_sorted_batches


def test_length_sorted_batches_cover_every_index_once_in_small_groups() -> None:
    texts = ["x" * n for n in (5, 1, 9, 3, 7, 2, 8)]
    batches = list(length_sorted_batches(texts, 3))
    assert [len(b) for b in batches] == [3, 3, 1]
    assert sorted(i for b in batches for i in b) == list(range(len(texts)))
    lengths = [len(texts[i]) for b in batches for i in b]
    assert lengths == sorted(lengths)


def test_embed_in_batches_restores_input_order() -> None:
    texts = ["ccc", "a", "bbbbb", "dd", "", "eeee"]
    seen: list[list[str]] = []

    def run(batch: list[str]) -> np.ndarray:
        seen.append(batch)
        return np.array([[len(t), 1.0] for t in batch], dtype=np.float32)

    out = embed_in_batches(texts, 2, 2, run)
    assert out[:, 0].tolist() == [len(t) for t in texts]
    assert len(seen) == 3 and all(len(b) <= 2 for b in seen)


def test_embed_in_batches_rejects_a_wrong_number_of_rows() -> None:
    with pytest.raises(RuntimeError, match="shape"):
        embed_in_batches(["a", "b"], 8, 2, lambda batch: np.zeros((1, 2), dtype=np.float32))


def test_l2_normalise_keeps_zero_rows_zero() -> None:
    out = l2_normalise(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]], atol=1e-7)
