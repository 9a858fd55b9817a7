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
    from core.embedding.e5_nano import E5NanoEmbedder
    from core.embedding.models import LocalModel, local_model, local_model_of
    from core.embedding.use_onnx import UseOnnxEmbedder

_LAZY = {
    "UseOnnxEmbedder": "core.embedding.use_onnx",
    "E5NanoEmbedder": "core.embedding.e5_nano",
    "LocalModel": "core.embedding.models",
    "local_model": "core.embedding.models",
    "local_model_of": "core.embedding.models",
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
    "E5NanoEmbedder",
    "Embedder",
    "EmbedderError",
    "EmbeddingServiceError",
    "HashingEmbedder",
    "LocalModel",
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
    "local_model",
    "local_model_of",
    "models_dir",
]


def default_embedder(model: str | None = None, *, cache_entries: int = 10_000) -> CachedEmbedder:
    """A local model behind a cache, checked now so a missing model fails at construction.

    ``model`` is a local model's name (``use``, ``e5``; ``core.embedding.models``); None means the
    configured one (``$MEMORY_STUDIO_EMBEDDER``, else ``use``). Raises ``ModelNotInstalledError``
    whose message says how to install it. There is deliberately no silent fallback to
    ``HashingEmbedder``: a caller that wants one must choose it explicitly.
    """
    from core.embedding.models import configured_model, local_model

    chosen = configured_model() if model is None else local_model(model)
    inner = chosen.factory()
    check = getattr(inner, "check", None)
    if callable(check):
        check()
    return CachedEmbedder(inner, max_entries=cache_entries)


_shared: dict[str, CachedEmbedder] | None = None
_shared_lock = threading.Lock()


def shared_default_embedder(model: str | None = None) -> CachedEmbedder:
    """One embedder per local model and process (its session and its cache are shared by every Memory
    that did not bring its own embedder). ``model`` as for ``default_embedder``."""
    from core.embedding.models import configured_model, local_model

    global _shared
    name = (configured_model() if model is None else local_model(model)).name
    with _shared_lock:
        if _shared is None:
            _shared = {}
        if name not in _shared:
            _shared[name] = default_embedder(name)
        return _shared[name]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), listed=__all__)
