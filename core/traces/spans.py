"""The shapes of the observability domain: one span row, one trace summary, read results.

Column names and their order mirror Mastra's ``mastra_ai_spans`` table exactly, so the same
``SpanRecord`` comes back whether it was read from our DuckDB file or from a Mastra libSQL
database. Python attributes are snake_case; ``COLUMNS`` maps them to the camelCase columns.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from core.timeutil import as_utc, parse_optional_iso

SPANS_TABLE = "mastra_ai_spans"


class SpanType(str, enum.Enum):
    """The span types we emit (Mastra's enum has more; unknown values read back as plain str)."""

    AGENT_RUN = "agent_run"
    MODEL_GENERATION = "model_generation"
    MODEL_STEP = "model_step"
    PROCESSOR_RUN = "processor_run"
    MEMORY_OPERATION = "memory_operation"
    TOOL_CALL = "tool_call"
    GENERIC = "generic"


ColumnKind = Literal["text", "bool", "ts", "json"]

# (column, attribute, kind) in Mastra's DDL order. "json" columns are Mastra's jsonb columns.
COLUMNS: tuple[tuple[str, str, ColumnKind], ...] = (
    ("traceId", "trace_id", "text"),
    ("spanId", "span_id", "text"),
    ("name", "name", "text"),
    ("spanType", "span_type", "text"),
    ("isEvent", "is_event", "bool"),
    ("startedAt", "started_at", "ts"),
    ("parentSpanId", "parent_span_id", "text"),
    ("entityType", "entity_type", "text"),
    ("entityId", "entity_id", "text"),
    ("entityName", "entity_name", "text"),
    ("parentEntityType", "parent_entity_type", "text"),
    ("parentEntityId", "parent_entity_id", "text"),
    ("parentEntityName", "parent_entity_name", "text"),
    ("rootEntityType", "root_entity_type", "text"),
    ("rootEntityId", "root_entity_id", "text"),
    ("rootEntityName", "root_entity_name", "text"),
    ("userId", "user_id", "text"),
    ("organizationId", "organization_id", "text"),
    ("resourceId", "resource_id", "text"),
    ("runId", "run_id", "text"),
    ("sessionId", "session_id", "text"),
    ("threadId", "thread_id", "text"),
    ("requestId", "request_id", "text"),
    ("environment", "environment", "text"),
    ("serviceName", "service_name", "text"),
    ("scope", "scope", "json"),
    ("entityVersionId", "entity_version_id", "text"),
    ("parentEntityVersionId", "parent_entity_version_id", "text"),
    ("rootEntityVersionId", "root_entity_version_id", "text"),
    ("experimentId", "experiment_id", "text"),
    ("source", "source", "text"),
    ("metadata", "metadata", "json"),
    ("tags", "tags", "json"),
    ("attributes", "attributes", "json"),
    ("links", "links", "json"),
    ("input", "input", "json"),
    ("output", "output", "json"),
    ("error", "error", "json"),
    ("endedAt", "ended_at", "ts"),
    ("requestContext", "request_context", "json"),
    ("createdAt", "created_at", "ts"),
    ("updatedAt", "updated_at", "ts"),
)
COLUMN_NAMES: tuple[str, ...] = tuple(c for c, _, _ in COLUMNS)


def decode_json(value: object) -> Any:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8")
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            # Text that is not JSON is kept as it is rather than losing the row.
            return value
    return value


@dataclass(frozen=True)
class SpanRecord:
    """One row of ``mastra_ai_spans``; frozen because a stored span is a fact, not a draft."""

    trace_id: str
    span_id: str
    name: str
    span_type: str
    started_at: datetime
    is_event: bool = False
    parent_span_id: str | None = None
    entity_type: str | None = None
    entity_id: str | None = None
    entity_name: str | None = None
    parent_entity_type: str | None = None
    parent_entity_id: str | None = None
    parent_entity_name: str | None = None
    root_entity_type: str | None = None
    root_entity_id: str | None = None
    root_entity_name: str | None = None
    user_id: str | None = None
    organization_id: str | None = None
    resource_id: str | None = None
    run_id: str | None = None
    session_id: str | None = None
    thread_id: str | None = None
    request_id: str | None = None
    environment: str | None = None
    service_name: str | None = None
    scope: Any = None
    entity_version_id: str | None = None
    parent_entity_version_id: str | None = None
    root_entity_version_id: str | None = None
    experiment_id: str | None = None
    source: str | None = None
    metadata: Any = None
    tags: Any = None
    attributes: Any = None
    links: Any = None
    input: Any = None
    output: Any = None
    error: Any = None
    ended_at: datetime | None = None
    request_context: Any = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def running(self) -> bool:
        """Not ended yet. A point event (``isEvent``; Mastra leaves its ``endedAt`` null) never runs."""
        return self.ended_at is None and not self.is_event

    @property
    def duration_ms(self) -> float | None:
        """Milliseconds from start to end; 0 for a point event; None while running."""
        if self.ended_at is None:
            return 0.0 if self.is_event else None
        return (self.ended_at - self.started_at).total_seconds() * 1000.0

    def to_json_dict(self) -> dict[str, Any]:
        """camelCase, JSON-safe: the spill-file line format and a debugging view."""
        out: dict[str, Any] = {}
        for column, attr, kind in COLUMNS:
            value = getattr(self, attr)
            if kind == "ts" and value is not None:
                value = as_utc(value).isoformat()  # full precision: DuckDB keeps microseconds
            out[column] = value
        return out

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> SpanRecord:
        return cls.from_row([data.get(c) for c in COLUMN_NAMES], json_decoded=True)

    @classmethod
    def from_row(cls, row: Sequence[object], *, json_decoded: bool = False) -> SpanRecord:
        """Build from values in ``COLUMNS`` order, whatever the backend's native types."""
        kwargs: dict[str, Any] = {}
        for (_, attr, kind), value in zip(COLUMNS, row, strict=True):
            if kind == "ts":
                value = parse_optional_iso(value)
            elif kind == "bool":
                value = bool(value)
            elif kind == "json" and not json_decoded:
                value = decode_json(value)
            kwargs[attr] = value
        return cls(**kwargs)


_RECORD_FIELDS = frozenset(f.name for f in fields(SpanRecord))
assert _RECORD_FIELDS == {a for _, a, _ in COLUMNS}, "COLUMNS and SpanRecord drifted apart"


@dataclass(frozen=True)
class TraceFilters:
    resource_id: str | None = None
    thread_id: str | None = None
    status: Literal["ok", "error", "running"] | None = None
    name: str | None = None  # case-insensitive substring of the root span name or entity name
    since: datetime | None = None


@dataclass(frozen=True)
class ModelUsage:
    """Tokens one model used (summed over ``model_generation`` spans), for cost estimates.

    ``model`` is the span's ``attributes.model`` (ours: ``provider/name``); ``base_url`` is known when
    the run's root span describes its model (ours do), so a local server can be told apart.
    """

    model: str
    provider: str | None = None
    base_url: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0


@dataclass(frozen=True)
class TraceSummary:
    """One line of the traces table: the root span plus totals over the whole trace."""

    trace_id: str
    name: str
    span_type: str
    entity_name: str | None
    started_at: datetime
    ended_at: datetime | None
    duration_ms: float | None
    #: "running": the root has not ended; "unfinished": it never will, the process writing it is gone
    #: (``core.traces.live``); neither has an end time or a duration.
    status: Literal["ok", "error", "running", "unfinished"]
    span_count: int
    error_count: int
    input_tokens: int
    output_tokens: int
    total_tokens: int
    thread_id: str | None
    resource_id: str | None
    models: tuple[ModelUsage, ...] = ()  # the totals above, split by model
    #: The root span has an error of its own. With status "error" and not this, the run itself finished and only
    #: spans under it failed (an agent turn that answered while its background observer's call failed).
    failed_itself: bool = False
    #: The first words of what the run was asked (``input_words`` of the root's input): what tells one run of an
    #: agent from the next, all named "agent run: 'name'". None: the root holds no text input.
    input_text: str | None = None


#: How much of a run's input a trace summary keeps (the list shows its start; the tooltip all of it).
INPUT_WORDS = 200


def input_words(value: object, limit: int = INPUT_WORDS) -> str | None:
    """The words a run was asked, from its root span's input: ours ``{"message": text}`` (a list of texts: the
    last), Mastra's messages (the last user message's text; content as text or parts), or plain text. Whitespace
    collapsed, at most ``limit`` characters (a longer one ends in "…"); None when there is no text."""
    text = _asked(value)
    if not text:
        return None
    words = " ".join(text.split())
    if not words:
        return None
    return words if len(words) <= limit else words[: limit - 1].rstrip() + "…"


def _asked(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        for key in ("message", "messages", "input", "prompt"):
            if key in value:
                return _asked(value[key])
        if "content" in value:
            return _content(value["content"])
        return None
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        items = list(value)
        users = [m for m in items if isinstance(m, Mapping) and m.get("role") == "user"]
        for item in reversed(users or items):
            text = _asked(item)
            if text and text.strip():
                return text
    return None


def _content(content: object) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):
        texts = [str(p.get("text")) for p in content if isinstance(p, Mapping) and p.get("text")]
        return " ".join(texts) or None
    return None


@dataclass(frozen=True)
class PruneResult:
    traces_deleted: int = 0
    spans_deleted: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    compacted: bool = False
    busy: bool = False  # the file stayed locked for the whole budget; nothing was deleted
    not_compacted: str = ""  # why a compaction that was due did not run (the prune command says it)


T = TypeVar("T")


class ReadResult(list[T], Generic[T]):
    """A list that also says how fresh it is, so callers that ignore the flags still work.

    ``busy``: the file stayed locked by a writer for the whole retry budget.
    ``stale``: the rows are the last good answer to the same question, not a fresh read.
    ``missing``: there is no trace store yet (no file, or no table in it).
    ``unfinished``: (``get_trace``) the ids of its spans that never ended because the process writing
    them is gone (``core.traces.live``); a span without an end that is not among them is running.
    """

    def __init__(
        self,
        items: Iterable[T] = (),
        *,
        busy: bool = False,
        stale: bool = False,
        missing: bool = False,
        waited_s: float = 0.0,
        unfinished: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(items)
        self.busy = busy
        self.stale = stale
        self.missing = missing
        self.waited_s = waited_s
        self.unfinished = unfinished


class ReadCount(int):
    """An int with the same freshness flags as ``ReadResult``."""

    busy: bool
    stale: bool
    missing: bool
    waited_s: float

    def __new__(
        cls,
        value: int,
        *,
        busy: bool = False,
        stale: bool = False,
        missing: bool = False,
        waited_s: float = 0.0,
    ) -> ReadCount:
        obj = super().__new__(cls, value)
        obj.busy, obj.stale, obj.missing, obj.waited_s = busy, stale, missing, waited_s
        return obj


@dataclass
class TokenTotals:
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0

    def add_usage(self, attributes: object) -> None:
        """Add a model_generation span's ``attributes.usage``, whichever key spelling it uses."""
        if not isinstance(attributes, Mapping):
            return
        usage = attributes.get("usage")
        if not isinstance(usage, Mapping):
            return
        inp = _first_int(usage, "inputTokens", "promptTokens", "input_tokens", "prompt_tokens")
        out = _first_int(usage, "outputTokens", "completionTokens", "output_tokens", "completion_tokens")
        total = _first_int(usage, "totalTokens", "total_tokens") or inp + out
        self.input_tokens += inp
        self.output_tokens += out
        self.total_tokens += total


class UsageByModel:
    """Adds ``model_generation`` usage up per (model, base URL), for one trace or many."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str | None], list[Any]] = {}

    def add(self, attributes: object, base_urls: Mapping[str, str] | None = None) -> None:
        """One model span's attributes; ``base_urls``: model id -> base URL from its run's root span."""
        if not isinstance(attributes, Mapping):
            return
        totals = TokenTotals()
        totals.add_usage(attributes)
        model = attributes.get("model")
        name = str(model.get("model_id") or model.get("model") or "?") if isinstance(model, Mapping) \
            else str(model or "unknown model")
        provider = attributes.get("provider")
        base_url = (base_urls or {}).get(name)
        row = self._rows.setdefault((name, base_url), [provider if isinstance(provider, str) else None, 0, 0, 0])
        row[1] += totals.input_tokens
        row[2] += totals.output_tokens
        row[3] += 1

    def result(self) -> tuple[ModelUsage, ...]:
        return tuple(ModelUsage(name, provider, url, inp, out, calls)
                     for (name, url), (provider, inp, out, calls) in sorted(self._rows.items(),
                                                                             key=lambda kv: (kv[0][0], kv[0][1] or "")))


def root_base_urls(attributes: object) -> dict[str, str]:
    """model id -> base URL, from a run span whose ``attributes.model`` describes the model (ours do)."""
    model = attributes.get("model") if isinstance(attributes, Mapping) else None
    if isinstance(model, Mapping) and model.get("model_id") and model.get("base_url"):
        return {str(model["model_id"]): str(model["base_url"])}
    return {}


def _first_int(usage: Mapping[str, Any], *keys: str) -> int:
    """Mastra writes camelCase usage; OpenAI-shaped usage (our models) is snake_case."""
    for key in keys:
        value = usage.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value)
    return 0


def order_for_tree(spans: Iterable[SpanRecord]) -> list[SpanRecord]:
    """Depth-first pre-order, siblings by start time; spans whose parent is absent become roots.

    The order never depends on the order the spans come in (a query without ORDER BY), so one trace
    read alone (``get_trace``) and in a batch (``get_traces``) comes out the same, spans caught in a
    parent cycle included."""
    items = sorted(spans, key=lambda s: (s.started_at, s.span_id))
    ids = {s.span_id for s in items}
    children: dict[str | None, list[SpanRecord]] = {}
    for span in items:
        parent = span.parent_span_id if span.parent_span_id in ids else None
        children.setdefault(parent, []).append(span)
    for group in children.values():
        group.sort(key=lambda s: (s.started_at, s.span_id))
    ordered: list[SpanRecord] = []
    stack = list(reversed(children.get(None, [])))
    seen: set[str] = set()
    while stack:
        span = stack.pop()
        if span.span_id in seen:  # a cycle in foreign data must not loop forever
            continue
        seen.add(span.span_id)
        ordered.append(span)
        stack.extend(reversed(children.get(span.span_id, [])))
    # Spans caught in a parent cycle have no root; keep them rather than hide them.
    ordered.extend(s for s in items if s.span_id not in seen)
    return ordered


def span_depths(ordered: Sequence[SpanRecord]) -> dict[str, int]:
    """Indentation level of each span of a trace, for tree views."""
    depth: dict[str, int] = {}
    for span in ordered:
        parent = span.parent_span_id
        depth[span.span_id] = depth[parent] + 1 if parent in depth else 0
    return depth

