"""The default local embedder: Universal Sentence Encoder Multilingual v3, quantized, on onnxruntime.

The tokenizer (SentencePiece) lives inside the ONNX graph as an onnxruntime-extensions custom op, so
strings go in and 512-d unit vectors come out: no tokenizer files, no prefixes, no hub. It covers 16
languages including Chinese. On 2 CPU cores it embeds about 350-500 chat messages/s one at a time
and 700-1000/s in batches (bench/embedder_speed.py); the session loads in about 0.4 s.

Batching changes vectors slightly. The graph quantises activations with DynamicQuantizeLinear, whose
scale is taken over the whole batch tensor, so a text's vector depends on which texts share its batch
(cosine 0.9994–0.9999 against the same text alone, measured). We therefore run one text per call by
default, which makes a vector a pure function of its text: a re-embed after a cache eviction, a
restart or a replay gives bit-identical vectors and therefore identical recall rankings.

A batch is still fast: its texts, longest first, are dealt to ``threads`` worker threads, each
running one text at a time on the shared session with one intra-op thread (onnxruntime releases the
GIL while it runs). A text's run is the same computation whatever thread makes it — measured
bit-identical against one-at-a-time with 1 or 2 intra-op threads — and a second intra-op thread
did not speed up a single chat message anyway, so the cores go to separate texts instead
(about 2x the one-thread rate on 2 cores; bench/recall_speed.py). Backfills that prefer raw speed
over the guarantee can pass ``batch_size=64`` (true batches).
"""

from __future__ import annotations

import importlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from core.embedding.base import (
    EmbedderError,
    Kind,
    Vectors,
    check_call,
    embed_in_batches,
    empty,
    l2_normalise,
)
from core.embedding.provision import USE_M3_Q, ModelSpec, model_path, verify

USE_DIM = 512
DEFAULT_THREADS = 2
# One text per run keeps vectors independent of batch-mates; see the module docstring.
EXACT_BATCH_SIZE = 1
PARALLEL_MIN_TEXTS = 4  # below this, worker threads cost more than they give


class UseOnnxEmbedder:
    """USE-multilingual-v3 (quantized ONNX). Loads lazily on the first ``embed``; ``check`` fails early."""

    semantic = True
    kind_sensitive = False  # no query/passage prefixes

    def __init__(
        self,
        path: Path | None = None,
        *,
        spec: ModelSpec = USE_M3_Q,
        threads: int = DEFAULT_THREADS,
        batch_size: int = EXACT_BATCH_SIZE,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        self.spec = spec
        self.model_id: str = spec.model_id
        self.dim: int = USE_DIM
        self.threads = threads
        self.batch_size = batch_size
        self._path = path
        # onnxruntime ships no type information, so the session is Any to mypy.
        self._session: Any = None
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self.load_seconds: float | None = None  # wall time of the last load, for the Studio and bench

    @property
    def path(self) -> Path:
        # Resolved on use, not at construction, so $MEMORY_STUDIO_MODELS set later still counts.
        return self._path if self._path is not None else model_path(self.spec)

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def check(self) -> None:
        """Raise ``ModelNotInstalledError`` (naming the install command) if embedding would fail to load."""
        verify(self.spec, self.path)
        _runtime()

    def embed(self, texts: Sequence[str], kind: Kind = "passage") -> Vectors:
        check_call(texts, kind)  # USE has no query/passage prefixes; both kinds embed identically
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"embed() texts must be str, got {type(t).__name__}")
        if not texts:
            return empty(self.dim)
        session = self._load()

        def run(batch: list[str]) -> Vectors:
            out: Vectors = session.run(["outputs"], {"inputs": np.array(batch, dtype=object)})[0]
            return out

        if self.batch_size == EXACT_BATCH_SIZE and self.threads > 1 and len(texts) >= PARALLEL_MIN_TEXTS:
            rows = self._one_at_a_time_in_parallel(texts, run)
        else:
            rows = embed_in_batches(texts, self.batch_size, self.dim, run)
        # The graph already normalises; doing it again pins the invariant to float32 precision.
        return l2_normalise(rows)

    def _one_at_a_time_in_parallel(self, texts: Sequence[str], run: Any) -> Vectors:
        """Every text in its own run, the runs spread over ``threads`` workers (longest texts dealt first,
        so the workers finish together)."""
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        shares = [order[w :: self.threads] for w in range(self.threads)]
        out = np.empty((len(texts), self.dim), dtype=np.float32)

        def work(share: list[int]) -> None:
            for i in share:
                row = np.asarray(run([texts[i]]), dtype=np.float32)
                if row.shape != (1, self.dim):
                    raise EmbedderError(f"embedder returned shape {row.shape} for one text; expected (1, {self.dim})")
                out[i] = row[0]

        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="use-embed")
            pool = self._pool
        for done in [pool.submit(work, share) for share in shares if share]:
            done.result()
        return out

    def _load(self) -> Any:
        if self._session is not None:
            return self._session
        with self._lock:
            if self._session is None:
                started = time.perf_counter()
                path = verify(self.spec, self.path)
                ort, library = _runtime()
                options = ort.SessionOptions()
                options.register_custom_ops_library(library)
                # One text per run: one intra-op thread each, the cores go to parallel runs instead.
                options.intra_op_num_threads = 1 if self.batch_size == EXACT_BATCH_SIZE else self.threads
                options.inter_op_num_threads = 1
                try:
                    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                except Exception as exc:  # onnxruntime raises its own untyped Fail/InvalidGraph errors
                    raise EmbedderError(f"onnxruntime could not load {path}: {exc}") from exc
                self._session = session
                self.load_seconds = time.perf_counter() - started
        return self._session

    def __repr__(self) -> str:
        return f"UseOnnxEmbedder(model_id={self.model_id!r}, path={str(self.path)!r}, batch_size={self.batch_size})"


def _runtime() -> tuple[ModuleType, str]:
    """Import onnxruntime and the extensions library lazily: importing them costs ~0.2 s."""
    try:
        ort = importlib.import_module("onnxruntime")
        extensions = importlib.import_module("onnxruntime_extensions")
    except ImportError as exc:
        raise EmbedderError(
            f"The local embedder needs onnxruntime and onnxruntime-extensions ({exc.name} is missing). "
            "Reinstall Memory Studio's dependencies (`make install` or `pip install memory-studio`)."
        ) from exc
    return ort, str(extensions.get_library_path())
