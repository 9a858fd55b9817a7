"""One observational-memory generation as plain data, in the layout of Mastra's
``mastra_observational_memory`` table (spec §1.2), plus the chunk delimiter of ``activeObservations``.

A *record* is one row, i.e. one generation: the first row of a lookup key is the ``initial``
generation (``generationCount`` 0) and every reflection starts a new row with the count raised by
one. Observations appended between reflections go into the current row, separated by a
message-boundary line so the chunks can be told apart later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from core.storage.memory_store import load_json

# ``activeObservations`` chunk separator, byte-compatible with Mastra's (spec §1.3).
BOUNDARY_TEMPLATE = "\n\n--- message boundary ({iso}) ---\n\n"
_BOUNDARY_RE = re.compile(r"\n*--- message boundary \(([^)\n]*)\) ---\n*")

# The id list guards only against ties at the cursor; the cursor does the real work. Capping it keeps
# a long thread's row from growing without bound.
MAX_OBSERVED_IDS = 1000


def lookup_key(scope: str, *, thread_id: str | None, resource_id: str | None) -> str:
    """``thread:<id>`` or ``resource:<id>``, the key Mastra looks rows up by."""
    if scope == "resource":
        if not resource_id:
            raise ValueError("Resource-scoped observational memory needs a resource id.")
        return f"resource:{resource_id}"
    if not thread_id:
        raise ValueError("Thread-scoped observational memory needs a thread id.")
    return f"thread:{thread_id}"


@dataclass(frozen=True)
class Chunk:
    """One stretch of observations, and the boundary time that preceded it (None for the first)."""

    text: str
    boundary: str | None = None


def split_chunks(active: str) -> list[Chunk]:
    """Split ``activeObservations`` on message-boundary lines; empty chunks are dropped."""
    if not active:
        return []
    chunks: list[Chunk] = []
    last_end = 0
    boundary: str | None = None
    for match in _BOUNDARY_RE.finditer(active):
        text = active[last_end:match.start()].strip()
        if text:
            chunks.append(Chunk(text, boundary))
        boundary = match.group(1)
        last_end = match.end()
    tail = active[last_end:].strip()
    if tail:
        chunks.append(Chunk(tail, boundary))
    return chunks


def append_chunk(active: str, new: str, boundary_iso: str) -> str:
    new = new.strip()
    if not active.strip():
        return new
    return active.rstrip() + BOUNDARY_TEMPLATE.format(iso=boundary_iso) + new


def _json_list(value: Any) -> list[str]:
    value = load_json(value) if value != "" else None  # text or JSONB; unparseable counts as empty
    return [str(v) for v in value] if isinstance(value, list) else []


def _json_obj(value: Any) -> dict[str, Any]:
    value = load_json(value) if value != "" else None
    return dict(value) if isinstance(value, Mapping) else {}


@dataclass
class OMRecord:
    """One row of ``mastra_observational_memory``. Buffering columns are read but never written
    (this engine observes synchronously); ``raw`` keeps the whole row for the Studio's detail view."""

    id: str
    lookup_key: str
    scope: str
    resource_id: str | None
    thread_id: str | None
    active_observations: str
    origin_type: str
    config: dict[str, Any]
    generation_count: int
    last_observed_at: str | None
    last_reflection_at: str | None
    pending_message_tokens: int
    total_tokens_observed: int
    observation_token_count: int
    is_observing: bool
    is_reflecting: bool
    observed_message_ids: list[str]
    observed_timezone: str | None
    buffered_observation_chunks: str | None
    metadata: dict[str, Any]
    created_at: str
    updated_at: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def chunks(self) -> list[Chunk]:
        return split_chunks(self.active_observations)

    @property
    def is_empty(self) -> bool:
        return not self.active_observations.strip()

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "OMRecord":
        return cls(
            id=row["id"],
            lookup_key=row["lookupKey"],
            scope=row["scope"],
            resource_id=row.get("resourceId"),
            thread_id=row.get("threadId"),
            active_observations=row.get("activeObservations") or "",
            origin_type=row.get("originType") or "initial",
            config=_json_obj(row.get("config")),
            generation_count=int(row.get("generationCount") or 0),
            last_observed_at=row.get("lastObservedAt"),
            last_reflection_at=row.get("lastReflectionAt"),
            pending_message_tokens=int(row.get("pendingMessageTokens") or 0),
            total_tokens_observed=int(row.get("totalTokensObserved") or 0),
            observation_token_count=int(row.get("observationTokenCount") or 0),
            is_observing=bool(row.get("isObserving")),
            is_reflecting=bool(row.get("isReflecting")),
            observed_message_ids=_json_list(row.get("observedMessageIds")),
            observed_timezone=row.get("observedTimezone"),
            buffered_observation_chunks=row.get("bufferedObservationChunks"),
            metadata=_json_obj(row.get("metadata")),
            created_at=row["createdAt"],
            updated_at=row["updatedAt"],
            raw=dict(row),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, camelCase like the table (for the Studio and the CLI)."""
        return {
            "id": self.id,
            "lookupKey": self.lookup_key,
            "scope": self.scope,
            "resourceId": self.resource_id,
            "threadId": self.thread_id,
            "activeObservations": self.active_observations,
            "originType": self.origin_type,
            "config": self.config,
            "generationCount": self.generation_count,
            "lastObservedAt": self.last_observed_at,
            "lastReflectionAt": self.last_reflection_at,
            "pendingMessageTokens": self.pending_message_tokens,
            "totalTokensObserved": self.total_tokens_observed,
            "observationTokenCount": self.observation_token_count,
            "isObserving": self.is_observing,
            "isReflecting": self.is_reflecting,
            "observedMessageIds": list(self.observed_message_ids),
            "observedTimezone": self.observed_timezone,
            "metadata": self.metadata,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        }


def merge_observed_ids(old: list[str], new: list[str]) -> list[str]:
    seen = set(old)
    merged = list(old) + [i for i in new if i not in seen]
    return merged[-MAX_OBSERVED_IDS:]
