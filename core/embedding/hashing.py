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
import threading
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
        # Texts are cut into lines and each distinct line is featurised once: a recall passage is the
        # previous message, a newline, then the message, so in a batch of a thread's messages every
        # text is a line of two passages. A text's vector is the sum of its lines' (words never span a
        # newline, and NFKC and case folding never act across one: U+000A neither decomposes nor
        # composes, so it splits a string into parts that normalise alone). Every weight is a multiple
        # of 0.5, so every sum is exact in any order: the vectors are those of featurising each text
        # whole (test_embedding_hashing).
        line_of: dict[str, int] = {}
        number = line_of.setdefault  # a line's index: the next one when it is new
        text_lines: list[int] = []  # each text's lines, as indexes into line_of, text after text
        starts: list[int] = []
        for text in texts:
            starts.append(len(text_lines))
            if "\n" in text:
                text_lines.extend([number(line, len(line_of)) for line in text.split("\n")])
            else:
                text_lines.append(number(text, len(line_of)))
        sums, worded = self._line_sums(list(line_of))
        per_text, rest = divmod(len(text_lines), len(texts))
        if per_text == 1 and not rest:  # one line per text
            out = sums[text_lines]
            has_words = worded[text_lines]
        elif not rest and (np.diff(starts) == per_text).all():
            # Every text of k lines (a batch of one-line messages: context and message): the sum of k
            # slices, a tenth of ``reduceat``'s cost over rows; exact in any order, as above.
            lines = np.asarray(text_lines, dtype=np.intp)
            out = sums[lines[::per_text]]
            for k in range(1, per_text):
                out += sums[lines[k::per_text]]
            has_words = np.logical_or.reduce(worded[lines].reshape(len(texts), per_text), axis=1)
        else:
            out = np.add.reduceat(sums[text_lines], starts, axis=0)
            has_words = np.logical_or.reduceat(worded[text_lines], starts)
        if not has_words.all():  # a text without words has one feature of its own
            index, weight = _empty_vector(self.dim)
            out[~has_words, index] = weight
        return l2_normalise(out.astype(np.float32))

    def _line_sums(self, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(each line's feature sums, float64; whether it has words), by one bincount over every
        feature of every word (row * dim + bucket): a per-line bincount cost more than hashing."""
        dim = self.dim
        words: list[str] = []
        counts: list[int] = []  # words per line
        for line in lines:
            found = _words(line)
            words.extend(found)
            counts.append(len(found))
        worded = np.fromiter(map(bool, counts), dtype=bool, count=len(lines))
        if not words:
            return np.zeros((len(lines), dim)), worded
        buckets, weights, sizes = _table(dim).features(words)
        rows = np.repeat(np.repeat(np.arange(len(lines), dtype=np.intp) * dim, counts), sizes)
        sums = np.bincount(buckets + rows, weights, minlength=len(lines) * dim)
        return sums.reshape(len(lines), dim), worded

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim})"


# ASCII letters folded to lower case, digits and "_" kept, every other ASCII byte a space: for an
# ASCII line, \w+ (Unicode \w is [A-Za-z0-9_] there) finds exactly the runs this leaves between
# spaces, and NFKC changes nothing and case folding is ``lower``.
_ASCII_WORDS = bytes(
    c + 32 if 65 <= c <= 90 else c if 48 <= c <= 57 or 97 <= c <= 122 or c == 95 else 32 for c in range(256)
)


def _words(line: str) -> list[str]:
    """The words of one line, NFKC-normalised and case-folded (``_WORD`` over them). An ASCII line (the
    usual one) by one byte translation and a split, a quarter of the regex's cost (a batch of passages
    featurises about one new line per message); any other line by the regex."""
    if line.isascii():
        return line.encode("ascii").translate(_ASCII_WORDS).decode("ascii").split()
    return _WORD.findall(unicodedata.normalize("NFKC", line).casefold())


def _features(text: str) -> Iterator[tuple[str, float]]:
    normalised = unicodedata.normalize("NFKC", text).casefold()
    found = False
    for word in _WORD.findall(normalised):
        found = True
        yield from _word_features(word)
    if not found:
        yield _EMPTY_FEATURE, 1.0


class _FeatureTable:
    """The (bucket, signed weight) features of every word met so far, for one dimension, in flat
    arrays (a word's features are consecutive; ``_start``/``_size`` per word id). A batch's words are
    looked up in a dict and their features gathered with a few array operations: one small array
    per word, joined per batch, cost several times more. Forgotten past ``MAX_WORDS`` (then rebuilt
    as words come back). Thread-safe."""

    MAX_WORDS = 65_536
    MAX_FEATURES = 262_144  # hashed features kept (long words of random letters bring many new trigrams)

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._lock = threading.Lock()
        self._clear()

    def _clear(self) -> None:
        self._ids: dict[str, int] = {}
        self._start = np.zeros(1024, dtype=np.intp)
        self._size = np.zeros(1024, dtype=np.intp)
        self._buckets = np.zeros(8192, dtype=np.intp)
        self._weights = np.zeros(8192, dtype=np.float64)
        self._used = 0
        self._signed: dict[str, int] = {}  # each feature met so far: its signed bucket (``_signed_bucket``)

    def _add_all(self, words: list[str]) -> None:
        """Give every word of ``words`` (new, distinct) its features, in one pass: their features are
        listed together, each distinct feature hashed once per table (``_signed``: most of a new word's
        trigrams were met before, in other words) and the flat arrays grow once, where a word at a time
        cost a few small array writes per word (a batch of messages brings many new words: numbers, names)."""
        features: list[str] = []
        weights: list[float] = []
        sizes: list[int] = []
        for word in words:
            if word.isascii():  # (no CJK: ``_word_features``'s plain branch, its lists built here)
                padded = f" {word} "
                features.append("w:" + word)
                features.extend(["c:" + padded[i : i + 3] for i in range(len(word))])
                weights.append(_WORD_WEIGHT)
                weights.extend(repeat(_NGRAM_WEIGHT, len(word)))
                sizes.append(len(word) + 1)
            else:
                pairs = _word_features(word)
                features.extend([f for f, _ in pairs])
                weights.extend([w for _, w in pairs])
                sizes.append(len(pairs))
        # Each feature's bucket as one signed int (bucket + 1, negative for a minus sign): an int array is
        # made in one pass, where (bucket, sign) pairs cost a tuple array's conversion.
        known = self._signed
        if len(known) > self.MAX_FEATURES:
            known.clear()
        found = list(map(known.get, features))
        if None in found:
            dim, at = self.dim, -1
            try:
                while True:  # the features not met before (``index`` skips the others at C speed)
                    at = found.index(None, at + 1)
                    feature = features[at]
                    value = known.get(feature)  # (met earlier in this batch)
                    if value is None:
                        value = known[feature] = _signed_bucket(feature, dim)
                    found[at] = value
            except ValueError:  # no None left
                pass
        signed = np.array(found, dtype=np.intp)
        buckets = np.abs(signed) - 1
        weights_array = np.array(weights, dtype=np.float64)
        np.negative(weights_array, out=weights_array, where=signed < 0)  # exact: ±1 times 1 or 0.5
        at, first = self._used, len(self._ids)
        end, last = at + len(buckets), first + len(words)
        if end > len(self._buckets):
            grow = max(2 * len(self._buckets), end)
            self._buckets = np.concatenate([self._buckets, np.zeros(grow - len(self._buckets), dtype=np.intp)])
            self._weights = np.concatenate([self._weights, np.zeros(grow - len(self._weights), dtype=np.float64)])
        if last > len(self._start):
            grow = max(2 * len(self._start), last)
            self._start = np.concatenate([self._start, np.zeros(grow - len(self._start), dtype=np.intp)])
            self._size = np.concatenate([self._size, np.zeros(grow - len(self._size), dtype=np.intp)])
        self._buckets[at:end] = buckets
        self._weights[at:end] = weights_array
        counts = np.array(sizes, dtype=np.intp)
        self._size[first:last] = counts
        self._start[first:last] = at + np.cumsum(counts) - counts
        self._used = end
        self._ids.update(zip(words, range(first, last)))

    def features(self, words: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(buckets, signed weights) of every feature of ``words`` in order, and each word's count."""
        with self._lock:
            if len(self._ids) > self.MAX_WORDS:  # (a batch's own new words may pass it; the next call forgets)
                self._clear()
            get = self._ids.get
            ids = list(map(get, words))
            if None in ids:
                self._add_all(list(dict.fromkeys(w for i, w in zip(ids, words) if i is None)))
                ids = list(map(get, words))
            at = np.fromiter(ids, dtype=np.intp, count=len(ids))
            starts, sizes = self._start[at], self._size[at]
            ends = np.cumsum(sizes)
            where = np.repeat(starts - ends + sizes, sizes) + np.arange(int(ends[-1]), dtype=np.intp)
            return self._buckets[where], self._weights[where], sizes


_tables: dict[int, _FeatureTable] = {}
_tables_lock = threading.Lock()


def _table(dim: int) -> _FeatureTable:
    found = _tables.get(dim)
    if found is None:
        with _tables_lock:
            found = _tables.setdefault(dim, _FeatureTable(dim))
    return found


@lru_cache(maxsize=64)
def _empty_vector(dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(bucket, signed weight) of the empty text's one feature."""
    index, sign = _bucket(_EMPTY_FEATURE, dim)
    return np.array([index], dtype=np.intp), np.array([sign], dtype=np.float64)


def _word_features(word: str) -> list[tuple[str, float]]:
    """A word's (feature, weight) pairs, in a fixed order (a list: a batch's new words are many)."""
    if _CJK.search(word):
        return ([("u:" + ch, _WORD_WEIGHT) for ch in word]
                + [("b:" + a + b, _WORD_WEIGHT) for a, b in zip(word, word[1:])])
    padded = f" {word} "
    return [("w:" + word, _WORD_WEIGHT)] + [("c:" + padded[i : i + 3], _NGRAM_WEIGHT) for i in range(len(padded) - 2)]


def _signed_bucket(feature: str, dim: int) -> int:
    """``_bucket`` as one int: bucket + 1, negated when the sign is minus (the feature tables keep them)."""
    index, sign = _hash_bucket(feature, dim)
    return index + 1 if sign > 0 else -(index + 1)


def _hash_bucket(feature: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    # The low bit picks the sign so colliding features cancel on average instead of piling up.
    return (value >> 1) % dim, (1.0 if value & 1 else -1.0)


_bucket = lru_cache(maxsize=65536)(_hash_bucket)
