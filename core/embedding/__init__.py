"""Text embedders: one small interface, a local default, a remote option, a lexical fallback, a cache.

Vocabulary: an *embedder* maps texts to unit-length float32 rows; its *model_id* names the vector
space (e.g. ``use-multilingual-v3-q@b8b05b01``) and is stored beside every vector.

The ONNX, provisioning and OpenAI modules load on first attribute access (PEP 562). That keeps
``import core.embedding`` light (no onnxruntime, openai or keyring), and it keeps
``python -m core.embedding.provision`` from importing its own module twice (runpy warns if the
package import has already loaded it).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from core.embedding.base import (
    DEFAULT_BATCH_SIZE,
    Embedder,
    EmbedderError,
    EmbeddingServiceError,
    Kind,
    ModelChecksumError,
    ModelNotInstalledError,
    Vectors,
    l2_normalise,
)
from core.embedding.cache import CachedEmbedder, CacheStats
from core.embedding.hashing import HashingEmbedder
from core.lazy_names import lazy_names

if TYPE_CHECKING:
    from core.embedding.openai_embedder import OpenAIEmbedder
    from core.embedding.provision import (
        INSTALL_COMMAND,
        USE_M3_Q,
        ModelSpec,
        ModelStatus,
        ProvisionError,
        models_dir,
    )
    from core.embedding.use_onnx import UseOnnxEmbedder

_LAZY = {
    "UseOnnxEmbedder": "core.embedding.use_onnx",
    "OpenAIEmbedder": "core.embedding.openai_embedder",
    "INSTALL_COMMAND": "core.embedding.provision",
    "USE_M3_Q": "core.embedding.provision",
    "ModelSpec": "core.embedding.provision",
    "ModelStatus": "core.embedding.provision",
    "ProvisionError": "core.embedding.provision",
    "models_dir": "core.embedding.provision",
}

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "INSTALL_COMMAND",
    "USE_M3_Q",
    "CacheStats",
    "CachedEmbedder",
    "Embedder",
    "EmbedderError",
    "EmbeddingServiceError",
    "HashingEmbedder",
    "Kind",
    "ModelChecksumError",
    "ModelNotInstalledError",
    "ModelSpec",
    "ModelStatus",
    "OpenAIEmbedder",
    "ProvisionError",
    "UseOnnxEmbedder",
    "Vectors",
    "default_embedder",
    "shared_default_embedder",
    "l2_normalise",
    "models_dir",
]


def default_embedder(*, cache_entries: int = 10_000) -> CachedEmbedder:
    """The local USE model behind a cache, checked now so a missing model fails at construction.

    Raises ``ModelNotInstalledError`` whose message names the install command. There is deliberately
    no silent fallback to ``HashingEmbedder``: a caller that wants one must choose it explicitly.
    """
    from core.embedding.use_onnx import UseOnnxEmbedder

    inner = UseOnnxEmbedder()
    inner.check()
    return CachedEmbedder(inner, max_entries=cache_entries)


_shared: CachedEmbedder | None = None
_shared_lock = threading.Lock()


def shared_default_embedder() -> CachedEmbedder:
    """One default embedder per process (the ONNX session and its cache are shared by every Memory
    that did not bring its own embedder)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = default_embedder()
        return _shared


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), listed=__all__)
