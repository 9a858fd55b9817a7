"""An in-memory LRU cache in front of any embedder, so the same text is embedded once.

Keys are ``(model_id, sha256(kind, text))``: the model id keeps vectors of two models apart, the hash
keeps keys small whatever the text length. For embedders that declare ``kind_sensitive = False``
(USE, hashing) the kind is left out of the key, so the common turn "search with the user's message,
then store it" costs one embedding, not two.

Thread-safe: the lock guards only the table, never a call into the model, so threads embedding
different texts do not wait for each other. Two threads missing on the same text at the same moment
may both embed it; the result is the same vector, stored once.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.embedding.base import Embedder, EmbedderError, Kind, Vectors, check_call, empty


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int  # texts that went to the inner embedder
    entries: int
    max_entries: int

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class CachedEmbedder:
    """Wraps ``inner``; same ``model_id`` and ``dim``, so the cache is invisible to the vector index."""

    def __init__(self, inner: Embedder, max_entries: int = 10_000) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self.inner = inner
        self.max_entries = max_entries
        self._kind_sensitive = bool(getattr(inner, "kind_sensitive", True))
        self._table: OrderedDict[tuple[str, str], Vectors] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def kind_sensitive(self) -> bool:
        return self._kind_sensitive

    def check(self) -> None:
        """Forward to the inner embedder's ``check`` (model installed, endpoint reachable), if it has one."""
        check = getattr(self.inner, "check", None)
        if callable(check):
            check()

    def embed(self, texts: Sequence[str], kind: Kind = "passage") -> Vectors:
        check_call(texts, kind)
        if not texts:
            return empty(self.dim)
        model_id = self.inner.model_id
        keys = [(model_id, self._digest(text, kind)) for text in texts]
        rows: list[Vectors | None] = [None] * len(texts)
        missing: dict[tuple[str, str], list[int]] = {}  # key -> positions; dedupes repeats in one call
        with self._lock:
            for pos, key in enumerate(keys):
                cached = self._table.get(key)
                if cached is not None:
                    self._table.move_to_end(key)
                    rows[pos] = cached
                    self._hits += 1
                elif key in missing:
                    missing[key].append(pos)
                    self._hits += 1  # a repeat within the call is served by its first occurrence
                else:
                    missing[key] = [pos]
                    self._misses += 1
        if missing:
            firsts = [positions[0] for positions in missing.values()]
            fresh = self.inner.embed([texts[p] for p in firsts], kind)
            if fresh.shape[0] != len(firsts):
                raise EmbedderError(f"{self.inner!r} returned {fresh.shape[0]} vectors for {len(firsts)} texts")
            with self._lock:
                for (key, positions), vector in zip(missing.items(), fresh):
                    stored = vector.copy()
                    stored.flags.writeable = False  # shared between callers; nobody may edit it
                    self._table[key] = stored
                    self._table.move_to_end(key)
                    for p in positions:
                        rows[p] = stored
                while len(self._table) > self.max_entries:
                    self._table.popitem(last=False)
        return np.stack([r for r in rows if r is not None]).astype(np.float32, copy=False)

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, len(self._table), self.max_entries)

    @property
    def hits(self) -> int:
        return self._hits

    @property
    def misses(self) -> int:
        return self._misses

    def clear(self) -> None:
        """Drop the vectors; the counters keep counting (they describe the session, not the table)."""
        with self._lock:
            self._table.clear()

    def _digest(self, text: str, kind: Kind) -> str:
        scope = kind if self._kind_sensitive else "*"
        # surrogatepass: chat text can carry lone surrogates (broken emoji); they must hash, not raise.
        data = scope.encode() + b"\0" + text.encode("utf-8", "surrogatepass")
        return hashlib.sha256(data).hexdigest()

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, max_entries={self.max_entries})"
