"""CachedEmbedder: each distinct text reaches the model once; results are unchanged by caching."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest

from core.embedding import CachedEmbedder, Embedder, HashingEmbedder, Kind


class CountingEmbedder:
    """Records every text it is asked for; embeds by hashing, with a prefix when kind matters."""

    def __init__(self, kind_sensitive: bool = True) -> None:
        self.kind_sensitive = kind_sensitive
        self.model_id = "counting@1"
        self.dim = 32
        self.calls: list[list[str]] = []
        self._lock = threading.Lock()
        self._inner = HashingEmbedder(dim=32)

    def embed(self, texts: Sequence[str], kind: Kind = "passage") -> np.ndarray:
        with self._lock:
            self.calls.append(list(texts))
        prefixed = [f"{kind}: {t}" if self.kind_sensitive else t for t in texts]
        return self._inner.embed(prefixed, kind)

    @property
    def embedded(self) -> list[str]:
        return [t for call in self.calls for t in call]


def test_same_text_is_embedded_once_and_counted() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner)
    first = cache.embed(["alpha", "beta"])
    second = cache.embed(["beta", "alpha", "gamma"])
    assert inner.embedded == ["alpha", "beta", "gamma"]
    assert np.array_equal(second[0], first[1]) and np.array_equal(second[1], first[0])
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.entries) == (2, 3, 3)
    assert stats.hit_rate == pytest.approx(0.4)
    assert (cache.hits, cache.misses) == (2, 3)


def test_repeats_inside_one_call_reach_the_model_once() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner)
    out = cache.embed(["x", "y", "x", "x"])
    assert inner.calls == [["x", "y"]]
    assert np.array_equal(out[0], out[2]) and np.array_equal(out[0], out[3])
    assert (cache.hits, cache.misses) == (2, 2)


def test_results_equal_the_uncached_embedder() -> None:
    texts = ["one", "two", "three", "one"]
    direct = HashingEmbedder(dim=32).embed(texts)
    cached = CachedEmbedder(HashingEmbedder(dim=32)).embed(texts)
    assert np.array_equal(direct, cached)
    assert cached.dtype == np.float32 and cached.shape == (4, 32)


def test_kind_is_part_of_the_key_only_for_kind_sensitive_models() -> None:
    sensitive = CountingEmbedder(kind_sensitive=True)
    cache = CachedEmbedder(sensitive)
    cache.embed(["hello"], "query")
    cache.embed(["hello"], "passage")
    assert sensitive.embedded == ["hello", "hello"]

    insensitive = CountingEmbedder(kind_sensitive=False)
    cache = CachedEmbedder(insensitive)
    q = cache.embed(["hello"], "query")
    p = cache.embed(["hello"], "passage")
    assert insensitive.embedded == ["hello"]
    assert np.array_equal(q, p)


def test_least_recently_used_entries_are_evicted() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, max_entries=2)
    cache.embed(["a"])
    cache.embed(["b"])
    cache.embed(["a"])  # refresh a, so b is now the oldest
    cache.embed(["c"])  # evicts b
    assert cache.stats().entries == 2
    cache.embed(["a"])
    cache.embed(["b"])
    assert inner.embedded == ["a", "b", "c", "b"]


def test_callers_cannot_corrupt_the_cache_by_editing_results() -> None:
    cache = CachedEmbedder(HashingEmbedder(dim=16))
    first = cache.embed(["text"])
    expected = first.copy()
    first[:] = 0.0
    assert np.array_equal(cache.embed(["text"]), expected)


def test_delegates_identity_and_satisfies_the_protocol() -> None:
    inner = HashingEmbedder(dim=48)
    cache = CachedEmbedder(inner)
    assert isinstance(cache, Embedder)
    assert cache.model_id == inner.model_id
    assert cache.dim == 48
    assert cache.embed([]).shape == (0, 48)


def test_concurrent_callers_get_correct_vectors() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, max_entries=50)
    texts = [f"message number {i}" for i in range(40)]
    expected = CountingEmbedder().embed(texts)
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def worker(offset: int) -> None:
        try:
            start.wait()
            for round_ in range(5):
                order = texts[offset:] + texts[:offset]
                got = cache.embed(order)
                want = np.concatenate([expected[offset:], expected[:offset]])
                assert np.array_equal(got, want), f"worker {offset} round {round_}"
        except BaseException as exc:  # noqa: BLE001  # re-raised in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k * 5,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    stats = cache.stats()
    assert stats.hits + stats.misses == 8 * 5 * 40
    assert stats.entries == 40
    assert set(inner.embedded) == set(texts)
