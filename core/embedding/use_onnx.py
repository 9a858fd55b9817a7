"""The default local embedder: Universal Sentence Encoder Multilingual v3, quantized, on onnxruntime.

The tokenizer (SentencePiece) lives inside the ONNX graph as an onnxruntime-extensions custom op, so
strings go in and 512-d unit vectors come out: no tokenizer files, no prefixes, no hub. It covers 16
languages including Chinese. The session loads in about 0.4 s.

A vector is a pure function of its text, whatever shares its call: a re-embed after a cache eviction,
a restart or a replay gives bit-identical vectors and therefore identical recall rankings. The pinned
graph alone cannot batch that way: it quantises activations with DynamicQuantizeLinear, whose scale is
taken over the whole batch tensor, so a text's vector would depend on its batch-mates (cosine
0.9994–0.9999 against the same text alone, measured). So:

* one text (a query, a single message) runs alone through the pinned graph;
* several texts are counted in tokens by the graph's own tokenizer (``use_graph.tokenizer_graph``,
  ~20 µs a text), sorted by count and cut into batches (at most ``batch_size`` texts and
  ``TOKEN_BUDGET`` padded tokens: a few texts a run); each batch runs as one true batch through
  ``use_graph.per_text_graph``: the pinned graph rewritten so every text's activations get their own
  scale and zero point and its word embeddings are summed in token order at any batch size. Each
  text's vector then equals, bit for bit, the one the pinned graph gives it alone, whatever the
  lengths in its batch (tests/core/test_embedding_use_batching.py: EN, ZH, mixed lengths);
* The runs, largest first, go to ``threads`` worker threads sharing the sessions, one intra-op thread
  each (onnxruntime releases the GIL while it runs).

The two derived graphs are written beside the model once (``provision install`` does it; otherwise the
first batched call does, ~2 s) from the local pinned file: nothing downloads. If they cannot be made
(no ``onnx`` package, a read-only models folder) every text runs alone: same vectors, about half the
speed; ``batching`` says which mode is on and why. ``batch_size=1`` asks for one text per run.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
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
    count_sorted_batches,
    empty,
    l2_normalise,
)
from core.embedding.provision import USE_M3_Q, ModelSpec, model_path, verify
from core.embedding.use_graph import batch_inputs, ensure_derived

USE_DIM = 512
DEFAULT_THREADS = 2
# Most texts in one run; with TOKEN_BUDGET it only binds for very short texts.
DEFAULT_BATCH_SIZE = 64
# Most padded tokens (texts x longest) in one run. Small runs are faster per text: the graph's
# [tokens, 1280] float tensors of a run stay in cache. One thread, 500 bench passages (~53 tokens):
# 4096 tokens (the old limit, 16 texts) ~650 passages per CPU-s, 256-320 ~700-800, 96 ~580
# (bench/embedder_speed.py sizes, 2 shared cores, 2026-12-03).
TOKEN_BUDGET = 256


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
        batch_size: int = DEFAULT_BATCH_SIZE,
        token_budget: int = TOKEN_BUDGET,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        if token_budget < 1:
            raise ValueError(f"token_budget must be at least 1, not {token_budget}")
        if threads < 1:
            raise ValueError(f"threads must be at least 1, not {threads}")
        self.spec = spec
        self.model_id: str = spec.model_id
        self.dim: int = USE_DIM
        self.threads = threads
        self.batch_size = batch_size
        self.token_budget = token_budget  # most padded tokens (texts x longest) in one run
        self._path = path
        # onnxruntime ships no type information, so sessions are Any to mypy.
        self._session: Any = None  # the pinned graph: one text per run
        self._per_text: Any = None  # the per-text rewrite: true batches
        self._tokenizer: Any = None
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self.load_seconds: float | None = None  # wall time of the last load, for the Studio and bench
        # "batches by token count", "one text per run (batch_size=1)" or why batching is off.
        self.batching: str = "not loaded" if batch_size > 1 else "one text per run (batch_size=1)"

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
        self._load()
        if len(texts) > 1 and self.batch_size > 1 and self._load_batching():
            counts = self._token_counts(texts)
            # (The tokenizer adds begin/end tokens, so every count is ≥ 2; a text without any would run alone.)
            batchable = [i for i, c in enumerate(counts) if c > 0]
            sorted_runs = count_sorted_batches([counts[i] for i in batchable], self.batch_size, self.token_budget)
            runs = [[batchable[j] for j in run] for run in sorted_runs]
            runs += [[i] for i, c in enumerate(counts) if c <= 0]
        else:
            counts = []
            runs = [[i] for i in range(len(texts))]
        # The graph already normalises; doing it again pins the invariant to float32 precision.
        return l2_normalise(self._run_all(texts, counts, runs))

    def _run(self, batch: list[str], counts: list[int]) -> Vectors:
        feed = {"inputs": np.array(batch, dtype=object)}
        if len(batch) == 1:
            # One text runs through the pinned graph: the reference, and faster for one text.
            out: Vectors = self._session.run(["outputs"], feed)[0]
        else:
            out = self._per_text.run(["outputs"], {**feed, **batch_inputs(counts)})[0]
        return out

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """How many tokens the model's own tokenizer makes of each text (begin and end included), the
        size its cost follows; loads the batching graphs, and raises ``EmbedderError`` without them."""
        self._load()
        if not self._load_batching():
            raise EmbedderError(f"token counts need the tokenizer graph: {self.batching}")
        return self._token_counts(texts) if texts else []

    def _token_counts(self, texts: Sequence[str]) -> list[int]:
        splits = self._tokenizer.run(None, {"inputs": np.array(list(texts), dtype=object)})[1]
        counts = np.diff(np.asarray(splits, dtype=np.int64))
        if counts.shape != (len(texts),):
            raise EmbedderError(f"the tokenizer graph returned {counts.shape[0]} counts for {len(texts)} texts")
        return [int(c) for c in counts]

    def _run_all(self, texts: Sequence[str], counts: list[int], runs: list[list[int]]) -> Vectors:
        """Every run (a list of indices), largest first, on ``threads`` workers; rows back in input order."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)

        def work(idx: list[int]) -> None:
            batch_counts = [counts[i] for i in idx] if len(idx) > 1 else []
            rows = np.asarray(self._run([texts[i] for i in idx], batch_counts), dtype=np.float32)
            if rows.shape != (len(idx), self.dim):
                raise EmbedderError(
                    f"embedder returned shape {rows.shape} for {len(idx)} texts; expected ({len(idx)}, {self.dim})"
                )
            out[idx] = rows

        # Largest first, so the workers finish together (text length stands in for tokens when uncounted).
        def size(idx: list[int]) -> int:
            return sum(counts[i] for i in idx) if counts else sum(len(texts[i]) for i in idx)

        runs = sorted(runs, key=lambda idx: -size(idx))
        if self.threads == 1 or len(runs) == 1:
            for idx in runs:
                work(idx)
            return out
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="use-embed")
            pool = self._pool
        for done in [pool.submit(work, idx) for idx in runs]:
            done.result()
        return out

    def _load(self) -> Any:
        if self._session is not None:
            return self._session
        with self._lock:
            if self._session is None:
                started = time.perf_counter()
                path = verify(self.spec, self.path)
                self._session = _open(path)
                self.load_seconds = time.perf_counter() - started
        return self._session

    def _load_batching(self) -> bool:
        """Open the tokenizer and per-text graphs (deriving them once); False, with the reason in
        ``batching``, if they cannot be had: every text then runs alone, with the same vectors."""
        if self._per_text is not None:
            return True
        with self._lock:
            if self._per_text is None and self.batching == "not loaded":
                try:
                    per_text, tokenizer = ensure_derived(verify(self.spec, self.path), self.spec.sha256)
                    self._tokenizer = _open(tokenizer)
                    self._per_text = _open(per_text)
                    self.batching = "batches by token count"
                except EmbedderError as exc:
                    self.batching = f"one text per run: {exc}"
        return self._per_text is not None

    def __repr__(self) -> str:
        return f"UseOnnxEmbedder(model_id={self.model_id!r}, path={str(self.path)!r}, batch_size={self.batch_size})"


def _open(path: Path) -> Any:
    ort, library = _runtime()
    options = ort.SessionOptions()
    options.register_custom_ops_library(library)
    # One intra-op thread per run: the cores go to parallel runs instead (a second intra-op thread
    # did not speed up a single chat message).
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own untyped Fail/InvalidGraph errors
        raise EmbedderError(f"onnxruntime could not load {path}: {exc}") from exc


def _runtime() -> tuple[ModuleType, str]:
    """Import onnxruntime lazily (~60 ms) and find the extensions' custom-ops library."""
    try:
        ort = importlib.import_module("onnxruntime")
        library = _extensions_library()
    except ImportError as exc:
        raise EmbedderError(
            f"The local embedder needs onnxruntime and onnxruntime-extensions ({exc.name} is missing). "
            "Reinstall Memory Studio's dependencies (`make install` or `pip install memory-studio`)."
        ) from exc
    return ort, library


EXTENSIONS = "onnxruntime_extensions"
_EXTENSIONS_LIBRARY = "_extensions_pydll"  # the compiled library inside the package (its get_library_path())


def _extensions_library() -> str:
    """The path of onnxruntime-extensions' custom-ops library, found without importing the package.

    Its ``__init__`` imports ``onnx``, and with it ``ml_dtypes``, whose compiled module holds the GIL for
    about half a second while it loads; a session needs neither, only the library's path. Importing it
    on a worker froze the Studio's UI thread for that long on the first recall search. Falls back to
    the package's own ``get_library_path()`` when the file is not where this release keeps it."""
    loaded = sys.modules.get(EXTENSIONS)
    if loaded is not None:
        return str(loaded.get_library_path())
    spec = importlib.util.find_spec(EXTENSIONS)  # finds the package folder; runs none of its code
    if spec is None:
        raise ImportError(f"No module named {EXTENSIONS!r}", name=EXTENSIONS)
    for folder in spec.submodule_search_locations or ():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            candidate = Path(folder) / f"{_EXTENSIONS_LIBRARY}{suffix}"
            if candidate.is_file():
                return str(candidate)
    return str(importlib.import_module(EXTENSIONS).get_library_path())
