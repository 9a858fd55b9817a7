"""The prompt inspector's logic (no Qt): options, what to assemble, and how the record is laid out.

The inspector never computes a prompt itself. ``studio.reads.assemble_preview`` (run in a worker)
calls ``Memory.assemble`` (the one code path the agent uses) and the layout functions here only
reshape its ``AssembledPrompt`` record into rows, bar segments and skip reasons for display.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Sequence

from core import AssembledPrompt, Fragment, Memory, MemoryOptions, Message
from core.agent_configs import AgentConfig
from core.storage import Store
from studio.logic.dates import format_datetime
from studio.logic.message_format import compact
from studio.logic.om_buffer_layout import MESSAGE_ROLES, observed_first, plain_marks
from studio.logic.short_ids import short_id

if TYPE_CHECKING:  # pragma: no cover
    from core.replay import TurnRecord

# Stable colours per source so the bar, the table and the legend agree (colour-blind-safe-ish hues).
SOURCE_COLORS: dict[str, str] = {
    "instructions": "#5B7DB1",
    "working-memory": "#D9A441",
    "message-history": "#3E9C8F",
    "semantic-recall": "#8E6BBF",
    "observational-memory": "#C65D7B",
    "input": "#6BA539",
    "context": "#8A8F98",
    "tools": "#A7785A",
}
_EXTRA = ["#4C9BD6", "#D4774A", "#7F9C3A", "#B55FA8", "#56A3A6", "#C9A227"]

ROLE_LABELS = {"system": "system", "user": "user", "assistant": "assistant", "tool": "tool", "tools": "tool defs"}


def source_color(source: str) -> str:
    if source in SOURCE_COLORS:
        return SOURCE_COLORS[source]
    digest = int(hashlib.sha1(source.encode()).hexdigest()[:6], 16)
    return _EXTRA[digest % len(_EXTRA)]


# -- options ---------------------------------------------------------------------------------------
HISTORY_BUDGET_OPTION = "message_history"  # {"max_tokens": n}: the history token budget


def _history_budget(opts: MemoryOptions) -> int | None:
    value = getattr(getattr(opts, HISTORY_BUDGET_OPTION, None), "max_tokens", None)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class InspectorOptions:
    """The memory settings the user can vary live. ``last_messages == 0`` means history is off;
    None means no count cap (the token budget, ``message_history.max_tokens``, bounds it).

    ``working_memory`` / ``observational`` are None for "as the agent has it". ``threshold`` None: no
    minimum score. ``history_tokens``: the history's token budget (0: none).
    """

    last_messages: int | None = 10
    recall: bool = False
    top_k: int = 4
    scope: Literal["resource", "thread"] = "resource"
    read_only: bool = False
    working_memory: bool | None = None
    observational: bool | None = None
    threshold: float | None = None
    message_range: tuple[int, int] = (1, 1)  # neighbours (before, after) of each recall hit
    history_tokens: int = 0

    @classmethod
    def from_memory_options(cls, opts: MemoryOptions) -> "InspectorOptions":
        sr = opts.semantic_recall
        lm = opts.last_messages
        return cls(
            last_messages=None if lm is None else 0 if lm is False else int(lm), recall=bool(sr.enabled),
            top_k=int(sr.top_k),
            scope=sr.scope, read_only=bool(opts.read_only), working_memory=bool(opts.working_memory.enabled),
            observational=bool(opts.observational_memory.enabled),
            threshold=None if sr.threshold is None else float(sr.threshold),
            message_range=(int(sr.message_range.before), int(sr.message_range.after)),
            history_tokens=_history_budget(opts) or 0,
        )

    def to_overrides(self) -> dict[str, Any]:
        """The per-call override dict handed to ``Memory.assemble(options=...)``."""
        before, after = self.message_range
        out: dict[str, Any] = {
            "last_messages": self.last_messages if self.last_messages is None or self.last_messages > 0 else False,
            "semantic_recall": {"enabled": self.recall, "top_k": self.top_k, "scope": self.scope,
                                "threshold": self.threshold, "message_range": {"before": before, "after": after}},
            "read_only": self.read_only,
        }
        if self.working_memory is not None:
            out["working_memory"] = {"enabled": self.working_memory}
        if self.observational is not None:
            out["observational_memory"] = {"enabled": self.observational}
        out[HISTORY_BUDGET_OPTION] = {"max_tokens": self.history_tokens or None}
        return out


_OPTION_LABELS = {"last_messages": "last messages", "recall": "semantic recall", "top_k": "top-K", "scope": "scope",
                  "read_only": "no writes", "working_memory": "working memory", "observational": "observational memory",
                  "threshold": "threshold", "message_range": "range", "history_tokens": "token budget"}


def _option_value(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return f"{value[0]} before, {value[1]} after"
    return "none" if value is None else str(value)


def options_ran_with(ran: InspectorOptions, shown: InspectorOptions) -> list[str]:
    """The options a stored turn ran with (its record's) that differ from those shown, in words
    ("last messages 10, not 3"); empty when they agree."""
    out = []
    for name, label in _OPTION_LABELS.items():
        if name in ("top_k", "scope", "threshold", "message_range") and not ran.recall:
            continue  # recall's settings did not matter to a turn that ran without recall
        was, now = getattr(ran, name), getattr(shown, name)
        if was != now:
            out.append(f"{label} {_option_value(was)}, not {_option_value(now)}")
    return out


@dataclass(frozen=True)
class StartingPoint:
    """Where the inspector's options came from, said in words the user sees."""

    base: MemoryOptions
    options: InspectorOptions
    agent: AgentConfig | None
    origin: str


def starting_point(agent: AgentConfig | None, reason: str) -> StartingPoint:
    if agent is None:
        base = MemoryOptions()
        return StartingPoint(base, InspectorOptions.from_memory_options(base), None,
                             f"Defaults ({reason})")
    base = agent.memory_options()
    when = format_datetime(agent.updated_at)
    by = f" by {agent.process}" if agent.process else ""
    return StartingPoint(base, InspectorOptions.from_memory_options(base), agent,
                         f"{reason}; registered {when}{by}")


# -- what to assemble ------------------------------------------------------------------------------
@dataclass(frozen=True)
class TurnRef:
    """A stored turn to re-assemble: its user message is the input; history ends just before it."""

    picked_id: str
    input: Message | None
    before: tuple[datetime, str]  # history strictly older than (createdAt, id)
    created_at: str | None

    @property
    def as_of(self) -> str:
        return self.input.id if self.input is not None else self.picked_id


@dataclass(frozen=True)
class PreviewRequest:
    thread_id: str | None
    resource_id: str | None
    base: MemoryOptions
    options: InspectorOptions
    memory_name: str = "default"
    text: str = ""  # the new user message (ignored for a stored turn)
    instructions: str = ""
    message_id: str | None = None  # set: re-assemble the stored turn this message belongs to
    # A stored turn with the agent's own options and instructions: rebuild exactly what was sent (its
    # record) rather than a what-if with the inspector's options.
    as_recorded: bool = False


@dataclass
class Preview:
    request: PreviewRequest
    prompt: AssembledPrompt
    turn: TurnRef | None = None
    notes: list[str] = field(default_factory=list)
    model: str | None = None  # the model the thread's replies record (whose context window this is)
    model_note: str = ""
    requests: list[Any] = field(default_factory=list)  # studio.logic.request_layout.RequestView, per model call
    notice: str | None = None  # shown first, as a warning: why the next turn will not send this exact prompt


MemoryFactory = Callable[[MemoryOptions, str, Any], Memory]


class EmbedderHolder:
    """Loads the embedding model once, on first need, on whichever worker asks (thread-safe).

    Without a loader, the model is the one the database's vectors come from (else the configured
    default; ``core.recall.models.store_embedder``), one per model and process, so the Studio searches
    a database indexed with e5 with e5, one indexed with USE with USE, and one indexed with the
    hashing embedder (the demo made without the model) with the same hashing features."""

    def __init__(self, loader: Callable[[], Any] | None = None) -> None:
        self._loader = loader
        self._value: Any = None
        self._lock = threading.Lock()

    def get(self, store: Store | None = None) -> Any:
        if self._loader is None:
            from core.embedding import shared_default_embedder

            if store is None:
                return shared_default_embedder()
            from core.recall.models import store_embedder

            return store_embedder(store)
        with self._lock:
            if self._value is None:
                self._value = self._loader()
            return self._value


def memory_options_for(req: PreviewRequest) -> MemoryOptions:
    """The Memory's own options: the agent's, with recall on/off as asked. Observational memory
    stays as configured: previews never call its observer, they only show what the model gets."""
    base = req.base
    sr = base.semantic_recall
    return base.with_(
        semantic_recall=replace(sr, enabled=req.options.recall, top_k=req.options.top_k, scope=req.options.scope),
    )


# -- layout ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FragmentRow:
    index: int
    role: str
    source: str
    kind: str
    stored_ids: tuple[str, ...]
    score: float | None
    tokens: int
    share: float  # of the prompt's total tokens
    preview: str
    text: str
    created_at: str | None
    color: str
    detail: Mapping[str, Any]
    observation_record: str | None = None  # an observation block's record (its ``stored_ids`` are messages only)
    # How many of its stored messages the next turn first observes (``observed_first``): they leave the window.
    observed_first: int = 0
    part_notes: tuple[tuple[int, int], ...] = ()  # where ``text`` names a part that is no text (``Fragment``'s)

    @property
    def text_label(self) -> str:
        """The Text cell: the preview, after a mark when the next turn first observes the row's messages."""
        return f"{OBSERVED_FIRST_MARK} · {self.preview}" if self.observed_first else self.preview

    @property
    def observed_first_tip(self) -> str:
        """Why a row is marked ``OBSERVED_FIRST_MARK`` (empty when it is not)."""
        if not self.observed_first:
            return ""
        which = "This message" if len(self.stored_ids) <= 1 else \
            f"{self.observed_first} of this fragment's {len(self.stored_ids)} messages"
        return (f"{which}: the next turn first observes it with the observer model (which this preview does not "
                "call), so it leaves the window and the observations made of it are added. The banner above says "
                "more.")

    @property
    def stored_label(self) -> str:
        if self.observation_record is not None:
            return f"record {short_id(self.observation_record)}"
        if not self.stored_ids:
            return ""
        if len(self.stored_ids) == 1:
            return short_id(self.stored_ids[0])
        return f"{len(self.stored_ids)} messages"

    @property
    def neighbour_of(self) -> str | None:
        """A recalled message that is not a hit itself but a ``message_range`` neighbour of one."""
        value = self.detail.get("context_of")
        return str(value) if value else None

    @property
    def score_label(self) -> str:
        """The fragment's own score; a recall neighbour has none (it came with its hit)."""
        if self.neighbour_of is not None:
            return "—"
        return "" if self.score is None else f"{self.score:.3f}"

    @property
    def score_tip(self) -> str:
        if self.neighbour_of is not None:
            hit = "" if self.score is None else f" (the hit scored {self.score:.3f})"
            return f"Neighbour of hit {self.neighbour_of}{hit}: recalled with it, not scored itself."
        return "" if self.score is None else f"score {self.score:.6f}"


def text_preview(text: str | None, limit: int = 140) -> str:
    """A fragment's text on one line for a table cell (the inspector's and Replay's): observational
    memory's priority emoji as words, since a cell has no colour-emoji font to draw them (they showed
    as empty boxes: "Date: Sep 14, 2026 * □ (15:32) …")."""
    flat = plain_marks(" ".join((text or "").split()))
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"



def fragment_preview(prompt: AssembledPrompt, f: Fragment) -> str:
    """A fragment's Text cell (the inspector's and Replay's): its text on one line, except for a message that called
    tools, which reads as the message list reads it, each call with what it returned, then the reply
    ("lookupOrder({"order_id": "CD-213"}) → {"status": "shipped"} · It has shipped."). Its text is the wire form the
    model reads (the calls' JSON, then each result), which the detail shows: in a cell it began
    '[{"id": "call_36_0", "type": "function", "function": {"name"…' and the call's name was cut."""
    wire = [prompt.messages[i] for i in f.message_indexes if 0 <= i < len(prompt.messages)]
    calls = tool_calls_text(wire)
    return text_preview(calls if calls is not None else f.text)


def tool_calls_text(wire: Sequence[Mapping[str, Any]]) -> str | None:
    """Chat messages that hold tool calls as one line (``fragment_preview``); None when none of them calls a tool."""
    if not any(m.get("role") == "assistant" and m.get("tool_calls") for m in wire):
        return None
    results = {m.get("tool_call_id"): m.get("content") for m in wire if m.get("role") == "tool"}
    parts: list[str] = []
    for m in wire:
        if m.get("role") != "assistant":
            continue
        said = _content_text(m.get("content"))
        if said.strip():
            parts.append(said)
        for call in m.get("tool_calls") or ():
            if not isinstance(call, Mapping):
                continue
            found = call.get("function")
            fn: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    pass
            line = f"{fn.get('name') or '?'}({compact(args if args not in (None, '') else {}, 80)})"
            cid = call.get("id")
            parts.append(f"{line} → {compact(_content_text(results[cid]), 120)}" if cid in results else f"{line} …")
    return " · ".join(parts)


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and "text" in p)
    return "" if content is None else str(content)


def input_stored_ids(prompt: AssembledPrompt, inputs: Sequence[str]) -> dict[int, tuple[str, ...]]:
    """Fragment index -> the stored input message(s) it holds. The engine's input fragments carry no
    stored ids (a new input is not stored yet); a stored turn's input is a stored message, which can
    have been edited since, so its row must name it."""
    frags = [f for f in prompt.fragments if f.source == "input" and not f.stored_ids]
    if not frags or not inputs:
        return {}
    return {f.index: ids for f, ids in zip(frags, ids_per_input(len(frags), inputs))}


def ids_per_input(count: int, inputs: Sequence[str]) -> list[tuple[str, ...]]:
    """The stored messages each of a turn's ``count`` input fragments holds: one each when there are as many
    as ``inputs`` (its stored input messages, oldest first), else all of them each."""
    return [(i,) for i in inputs] if count == len(inputs) else [tuple(inputs)] * count


def recorded_input_ids(record: "TurnRecord | None", input_id: str | None) -> tuple[str, ...]:
    """A stored turn's input messages, oldest first: those its record names (a turn may send several),
    else its one input message (``input_id``; none for a new input)."""
    if record is not None and record.input_ids:
        return tuple(record.input_ids)
    return (input_id,) if input_id is not None else ()


def turn_input_ids(prompt: AssembledPrompt, turn: "TurnRef | None") -> tuple[str, ...]:
    """The stored input messages of the stored turn ``prompt`` rebuilds (none for a new input)."""
    return recorded_input_ids(prompt.replay.record if prompt.replay is not None else None,
                              turn.input.id if turn is not None and turn.input is not None else None)


OBSERVATIONAL_SOURCE = "observational-memory"


def observation_record_of(f: Fragment) -> str | None:
    """The observational-memory record an observation block (or its continuation reminder) was read from. The
    engine names it among the fragment's stored ids, which for every other fragment are stored messages (so are
    those of observational memory's unobserved messages and its other-conversations block): Edit Stored Message…
    on the record's id found no message."""
    if f.source != OBSERVATIONAL_SOURCE or not f.stored_ids or f.detail.get("part") in (None, "other-conversations"):
        return None
    return f.stored_ids[0]


def message_ids(f: Fragment) -> tuple[str, ...]:
    """The stored messages behind fragment ``f`` (none for an observation block: its record is not a message)."""
    return () if observation_record_of(f) is not None else tuple(f.stored_ids)


#: What the fragment table says of a row whose messages the next turn first observes (``FragmentRow.text_label``).
OBSERVED_FIRST_MARK = "will be observed first"


def fragment_rows(prompt: AssembledPrompt, inputs: Sequence[str] = ()) -> list[FragmentRow]:
    """One row per fragment. ``inputs``: a stored turn's input message ids, which its input fragments hold. A row
    holding messages the next turn first observes (``observed_first``) says how many."""
    total = max(prompt.total_tokens, 1)
    input_stored = input_stored_ids(prompt, inputs)
    first = frozenset(observed_first(prompt))
    rows = [_row(f, total, input_stored.get(f.index), fragment_preview(prompt, f)) for f in prompt.fragments]
    if not first:
        return rows
    return [replace(r, observed_first=sum(1 for i in r.stored_ids if i in first)) if f.role in MESSAGE_ROLES else r
            for r, f in zip(rows, prompt.fragments)]


def _row(f: Fragment, total: int, stored: tuple[str, ...] | None = None, preview: str | None = None) -> FragmentRow:
    return FragmentRow(
        index=f.index, role=ROLE_LABELS.get(f.role, f.role), source=f.source, kind=f.kind,
        stored_ids=stored if stored is not None else message_ids(f), score=f.score, tokens=f.tokens, share=f.tokens / total,
        preview=text_preview(f.text) if preview is None else preview, text=f.text, created_at=f.created_at,
        color=source_color(f.source),
        detail=dict(f.detail), observation_record=observation_record_of(f),
        part_notes=f.part_notes,
    )


@dataclass(frozen=True)
class BarSegment:
    source: str
    tokens: int
    fraction: float  # of the context window
    color: str


PRIMER_SOURCE = "reply primer"  # the tokens the chat format adds for the reply (counted in the total)
PRIMER_COLOR = "#6E7781"


@dataclass(frozen=True)
class ContextUsage:
    """The prompt against its context window. ``segments`` add up to ``total`` exactly: the reply
    primer the chat format adds is a segment of its own, not a gap between the two."""

    segments: tuple[BarSegment, ...]
    total: int
    window: int
    tokenizer: str
    model: str | None = None  # the model whose window this is, when the thread records one
    model_note: str = ""  # where that model name comes from

    @property
    def window_owner(self) -> str:
        """Which model the window belongs to, in words."""
        if self.model:
            return f"window of {self.model}" + (f" ({self.model_note})" if self.model_note else "")
        return "window of an unknown model" + (f" ({self.model_note})" if self.model_note else "")

    @property
    def free(self) -> int:
        return max(self.window - self.total, 0)

    @property
    def over(self) -> bool:
        return self.total > self.window

    @property
    def summary(self) -> str:
        pct = 100.0 * self.total / self.window if self.window else 0.0
        return f"{self.total:,} / {self.window:,} tokens ({pct:.1f}%)"


def context_usage(prompt: AssembledPrompt, model: str | None = None, model_note: str = "") -> ContextUsage:
    """Tokens by source in prompt order (first appearance), then the reply primer, against the
    context window of ``model`` (the window size itself is the memory option ``context_window``)."""
    window = max(int(prompt.context_window or 0), 1)
    by_source = prompt.tokens_by_source()
    order: list[str] = []
    for f in prompt.fragments:
        if f.source not in order:
            order.append(f.source)
    segs = [BarSegment(s, by_source[s], by_source[s] / window, source_color(s)) for s in order]
    primer = prompt.total_tokens - sum(by_source.values())
    if primer:
        segs.append(BarSegment(PRIMER_SOURCE, primer, primer / window, PRIMER_COLOR))
    return ContextUsage(tuple(segs), prompt.total_tokens, window, prompt.tokenizer, model, model_note)


def token_sum_text(prompt: AssembledPrompt) -> str:
    """The total as the sum the table shows: fragments plus the reply primer."""
    fragments = sum(f.tokens for f in prompt.fragments)
    primer = prompt.total_tokens - fragments
    tail = f" + {primer:,} reply primer" if primer else ""
    return f"{fragments:,} in {len(prompt.fragments)} fragments{tail} = {prompt.total_tokens:,} tokens"


@dataclass(frozen=True)
class SkipRow:
    processor: str
    reason: str


def skipped_rows(prompt: AssembledPrompt) -> list[SkipRow]:
    """Processors that added nothing, with the engine's reason, in the order the processors ran."""
    ran = list(prompt.processors)
    order = {pid: i for i, pid in enumerate(ran)}
    rows = [SkipRow(pid, why) for pid, why in prompt.skipped.items()]
    return sorted(rows, key=lambda r: order.get(r.processor, len(ran)))


def fragment_header(row: FragmentRow) -> str:
    """The provenance line above a fragment's full text in the detail view."""
    bits = [f"#{row.index}", row.role, f"from {row.source}", f"{row.tokens:,} tokens"]  # as the table writes it
    if row.neighbour_of is not None:
        bits.append(f"neighbour of hit {row.neighbour_of}")
    elif row.score is not None:
        bits.append(f"score {row.score:.3f}")
    if row.created_at:
        bits.append(format_datetime(row.created_at))
    if row.observed_first:
        bits.append(OBSERVED_FIRST_MARK)  # (the table's mark, where the full text is read)
    return " · ".join(bits)
