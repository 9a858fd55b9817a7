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

# Memory Studio's key inside the row's ``metadata`` JSON (Mastra leaves other keys alone).
STUDIO_KEY = "memoryStudio"

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


@dataclass(frozen=True)
class BufferedChunk:
    """One observation made in the background and not yet shown to the model (Mastra's
    ``BufferedObservationChunk``, stored as JSON in ``bufferedObservationChunks``). It covers the
    thread's messages up to ``last_observed_at`` / ``last_observed_message_id``; activation appends
    it to the log and moves the thread's cursor there."""

    id: str
    observations: str
    token_count: int
    message_ids: tuple[str, ...]
    message_tokens: int
    last_observed_at: str
    last_observed_message_id: str | None
    created_at: str
    cycle_id: str = ""
    thread_id: str | None = None
    current_task: str | None = None
    suggested_response: str | None = None
    thread_title: str | None = None

    @property
    def cursor(self) -> tuple[str, str]:
        """(createdAt, id) of the newest message it covers; everything at or before it is covered."""
        return self.last_observed_at, self.last_observed_message_id or "\uffff"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "cycleId": self.cycle_id or self.id, "observations": self.observations,
            "tokenCount": self.token_count, "messageIds": list(self.message_ids),
            "messageTokens": self.message_tokens, "lastObservedAt": self.last_observed_at,
            "lastObservedMessageId": self.last_observed_message_id, "createdAt": self.created_at,
        }
        for key, value in (("threadId", self.thread_id), ("currentTask", self.current_task),
                           ("suggestedContinuation", self.suggested_response), ("threadTitle", self.thread_title)):
            if value:
                out[key] = value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "BufferedChunk | None":
        """A stored chunk (ours or Mastra's); None when it lacks what activation needs."""
        text = data.get("observations") or data.get("content")
        when = data.get("lastObservedAt") or data.get("createdAt")
        if not isinstance(text, str) or not text.strip() or not isinstance(when, str):
            return None

        def opt(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) and value.strip() else None

        ids = data.get("messageIds")
        return cls(
            id=str(data.get("id") or data.get("cycleId") or when), observations=text,
            token_count=int(data.get("tokenCount") or 0),
            message_ids=tuple(str(i) for i in ids) if isinstance(ids, list) else (),
            message_tokens=int(data.get("messageTokens") or 0), last_observed_at=when,
            last_observed_message_id=opt("lastObservedMessageId"), created_at=str(data.get("createdAt") or when),
            cycle_id=str(data.get("cycleId") or ""), thread_id=opt("threadId"), current_task=opt("currentTask"),
            suggested_response=opt("suggestedContinuation") or opt("suggestedResponse"),
            thread_title=opt("threadTitle"),
        )


def parse_chunks(value: Any) -> list[BufferedChunk]:
    raw = load_json(value) if value not in (None, "") else None
    if not isinstance(raw, list):
        return []
    return [c for c in (BufferedChunk.from_json(item) for item in raw if isinstance(item, Mapping)) if c is not None]


@dataclass
class OMRecord:
    """One row of ``mastra_observational_memory``, the buffering columns included; ``raw`` keeps the
    whole row for the Studio's detail view."""

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
    buffered_reflection: str | None = None
    buffered_reflection_tokens: int = 0
    reflected_line_count: int = 0
    is_buffering_observation: bool = False
    is_buffering_reflection: bool = False

    @property
    def chunks(self) -> list[Chunk]:
        return split_chunks(self.active_observations)

    @property
    def buffered(self) -> list[BufferedChunk]:
        """Observations made in the background and not yet activated, oldest first."""
        return parse_chunks(self.buffered_observation_chunks)

    @property
    def studio(self) -> dict[str, Any]:
        """Memory Studio's own bookkeeping in the row's ``metadata`` (key ``memoryStudio``): recent
        buffering events, back-off after failed model calls, when each chunk joined the log."""
        value = self.metadata.get(STUDIO_KEY)
        return dict(value) if isinstance(value, Mapping) else {}

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
            buffered_reflection=row.get("bufferedReflection") or None,
            buffered_reflection_tokens=int(row.get("bufferedReflectionTokens") or 0),
            reflected_line_count=int(row.get("reflectedObservationLineCount") or 0),
            is_buffering_observation=bool(row.get("isBufferingObservation")),
            is_buffering_reflection=bool(row.get("isBufferingReflection")),
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
            "bufferedObservationChunks": [c.to_json() for c in self.buffered],
            "bufferedReflection": self.buffered_reflection,
            "reflectedObservationLineCount": self.reflected_line_count,
            "isBufferingObservation": self.is_buffering_observation,
            "isBufferingReflection": self.is_buffering_reflection,
            "metadata": self.metadata,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        }


def merge_observed_ids(old: list[str], new: list[str]) -> list[str]:
    seen = set(old)
    merged = list(old) + [i for i in new if i not in seen]
    return merged[-MAX_OBSERVED_IDS:]
