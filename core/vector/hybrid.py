"""Reciprocal rank fusion (RRF) of the vector and keyword rankings.

RRF uses ranks, not scores, because cosine similarities and BM25 scores live on unrelated scales (and
cosine scales differ by model, spec/embedder.md). A message's fused score is
``w_v / (k + rank_v) + w_k / (k + rank_k)`` with 1-based ranks; a list it is absent from adds nothing.
``k`` and the weights were tuned on LoCoMo's public split only (``bench/recall_locomo.py --sweep``):
k=5 with keyword weight 1.5 gave recall@10 .710 at depth 50 (k=60, equal weights: .643).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

RRF_K = 5.0
VECTOR_WEIGHT = 1.0
KEYWORD_WEIGHT = 1.5


@dataclass(frozen=True)
class Ranked:
    message_id: str
    thread_id: str | None
    resource_id: str | None
    score: float


@dataclass(frozen=True)
class Fused:
    message_id: str
    thread_id: str | None
    resource_id: str | None
    score: float
    vector_score: float | None
    keyword_score: float | None
    vector_rank: int | None
    keyword_rank: int | None


def fuse(
    vector: Sequence[Ranked],
    keyword: Sequence[Ranked],
    *,
    k: float = RRF_K,
    vector_weight: float = VECTOR_WEIGHT,
    keyword_weight: float = KEYWORD_WEIGHT,
) -> list[Fused]:
    """Fused list, best first; ties broken by vector score, then message id, so the order is stable."""
    entries: dict[str, dict[str, object]] = {}
    for rank, hit in enumerate(vector, start=1):
        e = entries.setdefault(hit.message_id, {"hit": hit, "score": 0.0})
        e["score"] = float(e["score"]) + vector_weight / (k + rank)  # type: ignore[arg-type]
        e["vector"] = (rank, hit.score)
    for rank, hit in enumerate(keyword, start=1):
        e = entries.setdefault(hit.message_id, {"hit": hit, "score": 0.0})
        e["score"] = float(e["score"]) + keyword_weight / (k + rank)  # type: ignore[arg-type]
        e["keyword"] = (rank, hit.score)
    out = []
    for mid, e in entries.items():
        first: Ranked = e["hit"]  # type: ignore[assignment]
        v = e.get("vector")
        kw = e.get("keyword")
        out.append(
            Fused(
                mid, first.thread_id, first.resource_id, float(e["score"]),  # type: ignore[arg-type]
                v[1] if v else None, kw[1] if kw else None,  # type: ignore[index]
                v[0] if v else None, kw[0] if kw else None,  # type: ignore[index]
            )
        )
    out.sort(key=lambda f: (-f.score, -(f.vector_score if f.vector_score is not None else -2.0), f.message_id))
    return out
