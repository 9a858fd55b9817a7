"""A deterministic, offline, *lexical* embedder: the feature-hashing trick, no model.

For tests and as a labelled fallback when no real model is installed. Texts that share words or
character n-grams get similar vectors; paraphrases and translations do not (it has no idea that
"peanut" and "花生" mean the same). Its model_id starts with ``hashing-`` so nobody mistakes its
vectors, or the recall they produce, for semantic ones.

Features, each hashed to a signed bucket with blake2b (stable across processes, unlike ``hash()``):
- word unigrams (weight 1.0), after NFKC and case folding;
- character trigrams of each word padded with spaces (weight 0.5), which tolerate plurals and typos;
- for CJK text, which has no spaces, character unigrams and bigrams instead of whole runs.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterator, Sequence
from functools import lru_cache
from itertools import repeat

import numpy as np

from core.embedding.base import Kind, Vectors, check_call, empty, l2_normalise

_WORD = re.compile(r"\w+", re.UNICODE)
# Han, Hiragana/Katakana, Hangul: scripts written without spaces between words.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_WORD_WEIGHT = 1.0
_NGRAM_WEIGHT = 0.5
# Gives the empty text a fixed unit vector, so every row the embedder returns has length 1.
_EMPTY_FEATURE = "\x00empty"
MODEL_ID_PREFIX = "hashing-ngram-v1@d"  # + the dimension: the id stored beside each vector
_NO_WORDS = "\x00"  # in a batch's word list: the text has no words (its one feature is _EMPTY_FEATURE)


class HashingEmbedder:
    """Hashed word and character n-gram features, L2-normalised. Crude, fast, deterministic."""

    semantic = False  # lexical only; the Studio shows this so fallback recall is not over-trusted
    kind_sensitive = False

    def __init__(self, dim: int = 64) -> None:
        if dim < 8:
            raise ValueError(f"dim must be at least 8, not {dim}")
        self.dim: int = dim
        self.model_id: str = f"{MODEL_ID_PREFIX}{dim}"

    @classmethod
    def for_model_id(cls, model_id: str | None) -> HashingEmbedder | None:
        """The embedder that wrote vectors with this id (its dimension is all it needs), else None.

        A database indexed with hashing vectors (the demo made without the model, tests) is searched
        with the same features again, so its stored vectors stay comparable with the query's."""
        if not model_id or not model_id.startswith(MODEL_ID_PREFIX):
            return None
        digits = model_id[len(MODEL_ID_PREFIX):]
        if not digits.isdecimal() or int(digits) < 8:
            return None
        return cls(int(digits))

    def embed(self, texts: Sequence[str], kind: Kind = "passage") -> Vectors:
        check_call(texts, kind)  # no prefixes: queries and passages share one feature space
        if not texts:
            return empty(self.dim)
        # One bincount for the whole batch (row * dim + bucket): a per-text bincount cost more than hashing.
        # Each word's (buckets, weights) is cached; the batch's words are looked up in one pass and
        # their parts joined once, each part's row offset coming from ``repeat`` (a per-text
        # concatenate, or a Python loop over words, cost as much as the rest).
        words: list[str] = []
        counts: list[int] = []  # words per text (a text without words has the empty feature)
        for text in texts:
            found = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
            words.extend(found or (_NO_WORDS,))
            counts.append(len(found) or 1)
        parts = list(map(_word_vector, words, repeat(self.dim, len(words))))
        indexes = [p[0] for p in parts]
        sizes = np.fromiter(map(len, indexes), dtype=np.intp, count=len(indexes))
        word_offsets = np.repeat(np.arange(len(texts), dtype=np.intp) * self.dim, counts)
        # Every weight is a multiple of 0.5, so the sums are exact in any order (and in float32).
        sums = np.bincount(np.concatenate(indexes) + np.repeat(word_offsets, sizes),
                           np.concatenate([p[1] for p in parts]), minlength=len(texts) * self.dim)
        out = sums.reshape(len(texts), self.dim).astype(np.float32)
        return l2_normalise(out)

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim})"


def _features(text: str) -> Iterator[tuple[str, float]]:
    normalised = unicodedata.normalize("NFKC", text).casefold()
    found = False
    for word in _WORD.findall(normalised):
        found = True
        yield from _word_features(word)
    if not found:
        yield _EMPTY_FEATURE, 1.0


@lru_cache(maxsize=65536)
def _word_vector(word: str, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(buckets, signed weights) of one word's features: words repeat, so each is hashed once.
    ``_NO_WORDS`` (never a word: ``\\w+`` does not match it) stands for a text without words."""
    if word == _NO_WORDS:
        return _empty_vector(dim)
    pairs = [(_bucket(f, dim), w) for f, w in _word_features(word)]
    return (np.array([b[0] for b, _ in pairs], dtype=np.intp),
            np.array([b[1] * w for b, w in pairs], dtype=np.float64))


@lru_cache(maxsize=64)
def _empty_vector(dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(bucket, signed weight) of the empty text's one feature."""
    index, sign = _bucket(_EMPTY_FEATURE, dim)
    return np.array([index], dtype=np.intp), np.array([sign], dtype=np.float64)


def _word_features(word: str) -> Iterator[tuple[str, float]]:
    if _CJK.search(word):
        chars = list(word)
        for ch in chars:
            yield "u:" + ch, _WORD_WEIGHT
        for a, b in zip(chars, chars[1:]):
            yield "b:" + a + b, _WORD_WEIGHT
        return
    yield "w:" + word, _WORD_WEIGHT
    padded = f" {word} "
    for i in range(len(padded) - 2):
        yield "c:" + padded[i : i + 3], _NGRAM_WEIGHT


@lru_cache(maxsize=65536)
def _bucket(feature: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    # The low bit picks the sign so colliding features cancel on average instead of piling up.
    return (value >> 1) % dim, (1.0 if value & 1 else -1.0)
