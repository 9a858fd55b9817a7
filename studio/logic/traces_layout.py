"""The traces pane's logic (no Qt): timeline layout, chat transcripts, filters, notices, formatting.

Everything here reshapes rows the trace readers already returned (``SpanRecord``, ``TraceSummary``,
``ReadResult`` flags); nothing reads a file. The pane and its widgets only paint these values.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from core.traces.live import RUNNING_KEY, running_writer
from core.traces.spans import (
    SpanRecord,
    TokenTotals,
    TraceFilters,
    TraceSummary,
    order_for_tree,
)
from studio.logic.dates import format_datetime, relative_time
from studio.logic.thread_labels import shown_title
from studio.selection import Selection

# One colour per span type, shared by the tree swatches, the timeline bars and the legend.
SPAN_COLORS: dict[str, str] = {
    "agent_run": "#4F9CF7",
    "model_generation": "#B07CE8",
    "model_step": "#8E6BBF",
    "memory_operation": "#3FB68B",
    "processor_run": "#D19A66",
    "tool_call": "#E0B050",
    "generic": "#8A8F98",
}
SPAN_LABELS: dict[str, str] = {
    "agent_run": "agent",
    "model_generation": "LLM",
    "model_step": "LLM step",
    "memory_operation": "memory",
    "processor_run": "processor",
    "tool_call": "tool",
    "generic": "span",
}
ERROR_COLOR = "#E5534B"
RUNNING_COLOR = "#D9A441"
UNFINISHED_COLOR = "#8A8F98"
OK_COLOR = "#3FB68B"
STATUS_COLORS = {"ok": OK_COLOR, "error": ERROR_COLOR, "running": RUNNING_COLOR, "unfinished": UNFINISHED_COLOR}
#: How a trace's status reads in the list: a run whose writer died is said to be so, never "ok" or "running".
STATUS_TEXT = {"unfinished": "never finished"}
NEVER_FINISHED = "never finished"


def status_text(summary: TraceSummary) -> str:
    """The run's status in a word or two: a run that ended without an error of its own while spans under it failed
    reads "ok, N err", not "error" (a turn that answered while its observer's call failed read as a failed turn;
    the tooltip says it in words, ``status_tip``)."""
    if summary.status == "error" and not summary.failed_itself:
        return f"ok, {summary.error_count:,} err"
    return STATUS_TEXT.get(summary.status, summary.status)


def status_tip(summary: TraceSummary) -> str:
    """The status column's tooltip: what the status means for this run."""
    if summary.status == "error" and not summary.failed_itself:
        spans = "span" if summary.error_count == 1 else "spans"
        return (f"The run itself ended without an error; {summary.error_count:,} {spans} under it failed (open the "
                "trace: failed spans are marked). The Status filter's \"error\" lists it.")
    if summary.status == "error":
        return "The run failed: its own span has an error (open the trace for it)."
    return status_text(summary)


def trace_label(summary: TraceSummary) -> str:
    """The Trace cell: the run's name, then the first words it was asked (every run of an agent is named "agent
    run: 'name'"; its input tells one from the next), a bidirectional or other control character in them written as
    its escape (``shown_title``: a user's words reorder nothing of the row). A cut cell ends in "…"; ``trace_tip``
    holds the whole."""
    return f"{summary.name} · “{shown_title(summary.input_text)}”" if summary.input_text else summary.name


def trace_short(summary: TraceSummary) -> tuple[str, ...]:
    """The Trace cell's shorter form (``short_forms``) when its whole does not fit (a run's input seldom does):
    the agent's name and the words, without "agent run:", so a cut cell still shows what tells the runs apart (at
    a narrow list, "agent run: 'notes-om' · …" read the same on every row)."""
    if not summary.input_text or not summary.entity_name or summary.span_type != "agent_run":
        return ()
    return (f"'{summary.entity_name}' · “{shown_title(summary.input_text)}”",)


def trace_tip(summary: TraceSummary) -> str:
    """The Trace cell's tooltip: the name, what the run was asked (as the summary keeps it), the trace id."""
    asked = f"\nasked: “{summary.input_text}”" if summary.input_text else ""
    return f"{summary.name}{asked}\ntrace {summary.trace_id}"


def trace_duration_text(summary: TraceSummary) -> str:
    """A run in progress reads "running"; one whose writer died "never finished": no made-up duration."""
    return NEVER_FINISHED if summary.status == "unfinished" else format_duration(summary.duration_ms)


#: What the Status and Duration cells of a run whose writer died read where "never finished" does not fit (the
#: list at a 1,100 or 1,500 px window cut it to "never …" and "never fi…"): the one word, then in Duration no
#: figure at all (the Status cell beside it says why); the tooltips say "never finished" whole.
UNFINISHED = "unfinished"
UNFINISHED_FORMS = (UNFINISHED, "—")  # a Duration cell's (the list's and the span tree's)


def status_short(summary: TraceSummary) -> tuple[str, ...]:
    """The Status cell's shorter forms (``short_forms``): "unfinished" for "never finished", and "ok, err" for a
    run with so many failed spans that "ok, 1,234 err" is wider than the column (the tooltip and the Spans
    cell's tooltip count them)."""
    if summary.status == "unfinished":
        return (UNFINISHED,)
    if summary.status == "error" and not summary.failed_itself:
        return ("ok, err",)
    return ()


def duration_short(summary: TraceSummary) -> tuple[str, ...]:
    """The Duration cell's shorter forms: a run that never finished has no duration to shorten."""
    return UNFINISHED_FORMS if summary.status == "unfinished" else ()


ROLE_COLORS = {"system": "#8A8F98", "user": "#4F9CF7", "assistant": "#3FB68B", "tool": "#E0B050"}


def span_color(span_type: str) -> str:
    return SPAN_COLORS.get(span_type, SPAN_COLORS["generic"])


def span_label(span_type: str) -> str:
    return SPAN_LABELS.get(span_type, span_type)


# -- timeline --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimelineRow:
    """One span placed on the trace's time axis; ``offset`` and ``width`` are fractions of it."""

    index: int
    span: SpanRecord
    depth: int
    parent: int | None
    children: tuple[int, ...]
    offset: float
    width: float
    start_ms: float  # from the trace's first start
    duration_ms: float | None  # None while the span is still running
    running: bool
    error: bool
    #: Never ended: the process writing it is gone (``ReadResult.unfinished``); not running either.
    unfinished: bool = False

    @property
    def event(self) -> bool:
        """A point event (Mastra's ``isEvent``): a moment, not an interval."""
        return bool(self.span.is_event)

    @property
    def duration_text(self) -> str:
        if self.unfinished:
            return NEVER_FINISHED
        return "event" if self.event else format_duration(self.duration_ms)

    @property
    def color(self) -> str:
        if self.error:
            return ERROR_COLOR
        return UNFINISHED_COLOR if self.unfinished else span_color(self.span.span_type)


@dataclass(frozen=True)
class TraceLayout:
    rows: tuple[TimelineRow, ...]
    roots: tuple[int, ...]
    start: datetime | None
    total_ms: float

    def row_of(self, span_id: str) -> TimelineRow | None:
        return next((r for r in self.rows if r.span.span_id == span_id), None)


def _ms(a: datetime, b: datetime) -> float:
    return (b - a).total_seconds() * 1000.0


def layout_trace(spans: Sequence[SpanRecord], now: datetime | None = None,
                 unfinished: frozenset[str] = frozenset()) -> TraceLayout:
    """Tree order, depth, and a waterfall position for every span of one trace.

    A span that has not ended runs to ``now`` when given (a live trace), else to the trace's end;
    one in ``unfinished`` (its writer died: it never ends) is drawn to the trace's last known moment
    and never to ``now``, marked so rather than running.
    Offsets and widths are clamped to [0, 1] so clock skew in foreign data cannot draw outside.
    """
    ordered = order_for_tree(spans)
    if not ordered:
        return TraceLayout((), (), None, 0.0)
    start = min(s.started_at for s in ordered)
    ends = [s.ended_at or s.started_at for s in ordered]
    end = max(ends)
    if now is not None and any(s.running and s.span_id not in unfinished for s in ordered):
        end = max(end, now)
    total = max(_ms(start, end), 0.0)
    index_of = {s.span_id: i for i, s in enumerate(ordered)}
    parents: list[int | None] = []
    depth: list[int] = []
    children: dict[int, list[int]] = {}
    for i, span in enumerate(ordered):
        parent = index_of.get(span.parent_span_id) if span.parent_span_id else None
        if parent is not None and parent >= i:  # a cycle in foreign data: show it as a root
            parent = None
        parents.append(parent)
        depth.append(depth[parent] + 1 if parent is not None else 0)
        if parent is not None:
            children.setdefault(parent, []).append(i)
    rows: list[TimelineRow] = []
    for i, span in enumerate(ordered):
        begin = _ms(start, span.started_at)
        stop = _ms(start, span.ended_at) if span.ended_at is not None else (begin if span.is_event else total)
        if total > 0:
            offset = min(max(begin / total, 0.0), 1.0)
            width = min(max((stop - begin) / total, 0.0), 1.0 - offset)
        else:
            offset, width = 0.0, 1.0 if span.running else 0.0
        rows.append(TimelineRow(
            index=i, span=span, depth=depth[i], parent=parents[i], children=tuple(children.get(i, ())),
            offset=offset, width=width, start_ms=begin, duration_ms=span.duration_ms,
            running=span.running and span.span_id not in unfinished, error=has_error(span),
            unfinished=span.span_id in unfinished,
        ))
    roots = tuple(i for i, p in enumerate(parents) if p is None)
    return TraceLayout(tuple(rows), roots, start, total)


def has_error(span: SpanRecord) -> bool:
    return span.error is not None and span.error != {} and span.error != ""


def time_ticks(total_ms: float, count: int = 4) -> list[tuple[float, str]]:
    """Round tick marks across the axis: (fraction, label), at most ``count`` + 1 of them."""
    if total_ms <= 0:
        return [(0.0, "0 ms")]
    raw = total_ms / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    ticks = []
    value = 0.0
    while value <= total_ms + 1e-9:
        ticks.append((value / total_ms, format_duration(value)))
        value += step
    return ticks


# -- formatting ------------------------------------------------------------------------------------
def format_duration(ms: float | None) -> str:
    if ms is None:
        return "running"
    if ms < 0:
        ms = 0.0
    if ms == 0:
        return "0 ms"
    if ms < 10:
        return f"{ms:.2f} ms"
    if ms < 1000:
        return f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes}m {rest:02d}s"


def format_started(value: datetime | None) -> str:
    """When a trace or span started, in the Studio's one date format (``studio.logic.dates``)."""
    return format_datetime(value) if value is not None else ""


def format_tokens(summary: TraceSummary) -> str:
    return f"{summary.total_tokens:,}" if summary.total_tokens else ""


def tokens_tooltip(summary: TraceSummary) -> str:
    if not summary.total_tokens:
        return "No model_generation span reported usage."
    return (f"{summary.input_tokens:,} input + {summary.output_tokens:,} output = "
            f"{summary.total_tokens:,} tokens (sum over the trace's model_generation spans)")


def format_spans(summary: TraceSummary) -> str:
    if summary.error_count:
        return f"{summary.span_count} ({summary.error_count} err)"
    return str(summary.span_count)


def spans_short(summary: TraceSummary) -> tuple[str, ...]:
    """The Spans cell's shorter form where "12 (1 err)" does not fit (a narrow window cut it to "12 (1 …"): the
    count alone, whole; the Status column ("ok, 1 err") and the cell's tooltip say the errors."""
    return (str(summary.span_count),) if summary.error_count else ()


def pretty_json(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


# -- filters and notices ---------------------------------------------------------------------------
Status = Literal["ok", "error", "running"]


def filters_for(selection: Selection, *, all_threads: bool, name: str = "",
                status: Status | None = None) -> TraceFilters:
    """The thread (or resource) in view narrows the list unless the user asked for all threads."""
    thread = resource = None
    if not all_threads:
        if selection.thread_id is not None:
            thread = selection.thread_id
        elif selection.resource_id is not None:
            resource = selection.resource_id
    return TraceFilters(resource_id=resource, thread_id=thread, status=status, name=name.strip() or None)


@dataclass(frozen=True)
class Notice:
    level: Literal["info", "warning", "error"]
    text: str


def store_notice(*, busy: bool, stale: bool, missing: bool, location: str, kind: str,
                 age_s: float | None = None, empty: bool = False, filtered: bool = False) -> Notice | None:
    """What the banner says about the trace store's state, or None when all is well."""
    if kind == "memory":
        return Notice("info", "This database is in memory: its agent runs keep no trace file to browse.")
    if missing:
        if kind == "libsql":
            return Notice("info", f"No traces yet: this database has no rows in mastra_ai_spans ({location}).")
        return Notice("info", f"No traces yet: agent runs write them to {location}.")
    if busy:
        # An agent's writer lets go of the file within seconds when a reader waits (``core/traces/locking.py``);
        # a program that does not know that (the duckdb shell, a notebook) holds it until closed, which
        # "being written… Retrying…" left the user to wait out for ever.
        held = ("Another process has the trace file open (an agent writing to it, or a program such as the "
                "duckdb shell)")
        advice = ("Retrying… If it stays busy, close the file in that program: an agent lets go of it within "
                  "seconds of its last turn.")
        if kind == "libsql":
            # The spans are in the database itself: in a rollback journal mode another program's transaction
            # (or VACUUM) keeps every reader out until it ends.
            held = ("Another program holds the database's lock (Mastra writing, or a program such as the "
                    "sqlite3 shell in a transaction or a VACUUM)")
            advice = ("Retrying… If it stays busy, let that program finish its transaction, or close the "
                      "database there.")
        if stale:
            ago = f"{age_s:.0f} s ago" if age_s is not None else "earlier"
            return Notice("warning", f"{held}; showing results from {ago}. {advice}")
        return Notice("warning", f"{held}; nothing could be read yet. {advice}")
    if empty and not filtered:
        return Notice("info", f"No traces yet: agent runs write them to {location}.")
    return None


def empty_list_notice(filters: TraceFilters) -> Notice | None:
    """What the banner says when the list is empty because of what it is narrowed to (``store_notice`` says
    nothing then): a thread whose messages no traced run wrote (an import, MCP's ``remember``) showed a blank list
    under "Thread …: no model call reported token usage", and nothing said why or how to see other runs (found by
    s36-rest8's walk of the app). None when the list is not narrowed."""
    narrowed = [f"status {filters.status}"] if filters.status else []
    narrowed += [f"name “{filters.name}”"] if filters.name else []
    narrowed += [f"since {format_datetime(filters.since)}"] if filters.since else []
    if narrowed:
        return Notice("info", f"No run matches the filter ({', '.join(narrowed)}). Any status and an empty filter "
                              "list every run" + (" of this thread." if filters.thread_id else "."))
    scope = "thread" if filters.thread_id else "resource" if filters.resource_id else None
    if scope is None:
        return None
    return Notice("info", f"No traced run of this {scope}: its messages were saved without one (an import, an MCP "
                          "client's remember, a program of your own), or its runs wrote to another trace file. "
                          "All Threads lists the runs of every thread.")


def read_error_notice(error: str, *, broken: bool, location: str | None, retry_s: float,
                      server: bool = False) -> Notice:
    """What the banner says when the runs list could not be read (an error, not a busy file): what
    happened, that the pane reads again by itself in ``retry_s`` (it backs off while the error lasts),
    and what the user can do meanwhile. The pane read no more after such an error until File > Reload.
    ``server``: the spans are a table of a database server (Postgres), which has no trace file to check:
    the error (the storage's own sentence) already says what to do about the server."""
    where = f" ({location})" if location else ""
    text = f"Traces could not be read: {error.rstrip('.! ')}."
    if broken:
        # A damaged (or foreign) trace file: say what it holds and how the user gets a working one.
        text += (" The trace file holds traces only (no conversation): the next traced turn moves it aside "
                 "(its name ending in .broken- and the time) and starts a new one; or delete it, then Reload.")
    elif not server:
        text += (f" Check that the trace file{where} exists and can be read by you, and that no other program "
                 "has it open with other settings.")
    text += f" The pane tries again by itself (next in {retry_s:.0f} s); Reload (F5) tries now."
    return Notice("error", text)


# -- span detail -----------------------------------------------------------------------------------
def span_usage(span: SpanRecord) -> TokenTotals | None:
    totals = TokenTotals()
    totals.add_usage(span.attributes)
    return totals if totals.total_tokens or totals.input_tokens or totals.output_tokens else None


def span_facts(span: SpanRecord, trace_start: datetime | None = None,
               unfinished: bool = False) -> list[tuple[str, str]]:
    """(label, value) lines for the detail header: only the facts this span actually has.
    ``unfinished``: the span never ended because the process writing it is gone."""
    facts: list[tuple[str, str]] = [("type", span.span_type)]
    when = format_started(span.started_at)
    if trace_start is not None:
        when += f"  (+{format_duration(_ms(trace_start, span.started_at))})"
    facts.append(("started", f"{when}  ({relative_time(span.started_at)})"))
    if unfinished:
        facts.append(("duration", f"never finished: {writer_text(span)} ended before this span did"))
    elif span.running and running_writer(span.metadata):
        facts.append(("duration", f"running, written by {writer_text(span)}"))
    else:
        facts.append(("duration", "point event" if span.is_event else format_duration(span.duration_ms)))
    if span.entity_name or span.entity_id:
        facts.append(("entity", f"{span.entity_type or ''} {span.entity_name or span.entity_id}".strip()))
    if span.thread_id:
        facts.append(("thread", span.thread_id))
    if span.resource_id:
        facts.append(("resource", span.resource_id))
    usage = span_usage(span)
    if usage is not None:
        facts.append(("tokens", f"{usage.input_tokens:,} in · {usage.output_tokens:,} out · "
                                f"{usage.total_tokens:,} total"))
    attrs = span.attributes if isinstance(span.attributes, Mapping) else {}
    if isinstance(attrs.get("model"), str):
        facts.append(("model", str(attrs["model"])))
    facts.append(("span id", span.span_id))
    return facts


def writer_text(span: SpanRecord) -> str:
    """The process a running row names (``core.traces.live``), as a person reads it."""
    mark = span.metadata.get(RUNNING_KEY) if isinstance(span.metadata, Mapping) else None
    if not isinstance(mark, Mapping):
        return "the process writing it"
    host = f" on {mark['host']}" if mark.get("host") else ""
    return f"the process writing it (pid {mark.get('pid', '?')}{host})"


def error_parts(error: Any) -> tuple[str, str]:
    """(headline, stack) of a span error in our shape or Mastra's (message, name, details.stack)."""
    if error is None:
        return "", ""
    if isinstance(error, str):
        return error, ""
    if not isinstance(error, Mapping):
        return str(error), ""
    message = str(error.get("message") or error.get("name") or "error")
    name = error.get("name") or error.get("id")
    headline = f"{name}: {message}" if name and name != message else message
    raw_details = error.get("details")
    details: Mapping[str, Any] = raw_details if isinstance(raw_details, Mapping) else {}
    stack = error.get("stack") or details.get("stack") or ""
    if not stack:
        extra = {k: v for k, v in error.items() if k not in ("message", "name")}
        stack = pretty_json(extra) if extra else ""
    return headline, str(stack)


# -- chat transcripts ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolCallView:
    id: str
    name: str
    arguments: str  # pretty JSON when it parses


@dataclass(frozen=True)
class ChatTurn:
    role: str
    text: str
    tool_calls: tuple[ToolCallView, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class Transcript:
    messages: tuple[ChatTurn, ...]
    response: ChatTurn | None
    tools: tuple[str, ...]
    usage: TokenTotals | None


def _pretty_args(value: Any) -> str:
    if isinstance(value, str):
        try:
            return json.dumps(json.loads(value), indent=2, ensure_ascii=False)
        except ValueError:
            return value
    return pretty_json(value)


def _tool_call(raw: Mapping[str, Any]) -> ToolCallView:
    raw_fn = raw.get("function")
    fn: Mapping[str, Any] = raw_fn if isinstance(raw_fn, Mapping) else {}
    name = fn.get("name") or raw.get("toolName") or raw.get("name") or "?"
    args = fn.get("arguments") if fn else raw.get("args", raw.get("input", raw.get("arguments")))
    return ToolCallView(str(raw.get("id") or raw.get("toolCallId") or ""), str(name), _pretty_args(args))


def _content_text(content: Any, calls: list[ToolCallView]) -> str:
    """Text of a message's content: a string, or parts (OpenAI and AI SDK shapes)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        content = [content]
    if not isinstance(content, Sequence):
        return str(content)
    texts: list[str] = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text", "reasoning"):
            prefix = "[reasoning] " if kind == "reasoning" else ""
            texts.append(prefix + str(part.get("text", "")))
        elif kind == "tool-call":
            calls.append(_tool_call(part))
        elif kind == "tool-result":
            result = part.get("result", part.get("output"))
            texts.append(f"{part.get('toolName', 'tool')} → {pretty_json(result)}")
        elif kind in ("image", "image_url", "file"):
            media = part.get("mimeType") or part.get("mediaType")
            texts.append(f"[{kind}: {media}]" if media else f"[{kind}]")
        else:
            texts.append(pretty_json(part))
    return "\n".join(t for t in texts if t)


def chat_turn(raw: Any) -> ChatTurn | None:
    if not isinstance(raw, Mapping):
        return None
    calls: list[ToolCallView] = []
    text = _content_text(raw.get("content", raw.get("text")), calls)
    for call in raw.get("tool_calls") or raw.get("toolCalls") or ():
        if isinstance(call, Mapping):
            calls.append(_tool_call(call))
    role = str(raw.get("role") or "assistant")
    return ChatTurn(role, text, tuple(calls), raw.get("tool_call_id") or raw.get("toolCallId"), raw.get("name"))


def messages_from_input(value: Any) -> list[ChatTurn]:
    """The messages a model was sent: ``{"messages": [...]}``, a bare list, or ``{"prompt": "..."}``."""
    raw: Any = value
    if isinstance(value, Mapping):
        raw = value.get("messages")
        if raw is None and isinstance(value.get("prompt"), (str, list)):
            prompt = value["prompt"]
            raw = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        system = value.get("system")
        if isinstance(system, str):  # AI SDK style: the system prompt sits apart
            raw = [{"role": "system", "content": system}, *(raw if isinstance(raw, list) else [])]
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        return []
    return [t for t in (chat_turn(m) for m in raw) if t is not None]


def response_from_output(value: Any) -> ChatTurn | None:
    if value is None:
        return None
    if isinstance(value, str):
        return ChatTurn("assistant", value)
    if not isinstance(value, Mapping):
        return None
    if "role" in value or "content" in value:
        return chat_turn(value)
    if isinstance(value.get("choices"), Sequence) and value["choices"]:
        first = value["choices"][0]
        if isinstance(first, Mapping) and isinstance(first.get("message"), Mapping):
            return chat_turn(first["message"])
    calls = [_tool_call(c) for c in value.get("toolCalls") or value.get("tool_calls") or () if isinstance(c, Mapping)]
    text = value.get("text")
    if text is None and not calls:
        return None
    return ChatTurn("assistant", str(text or ""), tuple(calls))


def _tool_names(value: Any) -> tuple[str, ...]:
    tools = value.get("tools") if isinstance(value, Mapping) else None
    names: list[str] = []
    if isinstance(tools, Mapping):
        names = [str(k) for k in tools]
    elif isinstance(tools, Sequence) and not isinstance(tools, str):
        for tool in tools:
            if isinstance(tool, Mapping):
                raw_fn = tool.get("function")
                fn: Mapping[str, Any] = raw_fn if isinstance(raw_fn, Mapping) else tool
                names.append(str(fn.get("name") or tool.get("id") or "?"))
            elif isinstance(tool, str):
                names.append(tool)
    return tuple(names)


def chat_transcript(span: SpanRecord) -> Transcript | None:
    """The conversation a ``model_generation`` span carried, or None when its input is not one."""
    if span.span_type not in ("model_generation", "model_step"):
        return None
    messages = messages_from_input(span.input)
    response = response_from_output(span.output)
    if not messages and response is None:
        return None
    return Transcript(tuple(messages), response, _tool_names(span.input), span_usage(span))


# Card and code colours of the transcript for each theme (the text browser has the theme's base).
CARD_COLORS = {True: ("#1c1f25", "#aab2bf"), False: ("#f0f3f6", "#57606a")}


def _turn_html(turn: ChatTurn, label: str | None = None, dark: bool = True) -> str:
    card, code = CARD_COLORS[dark]
    colour = ROLE_COLORS.get(turn.role, "#8A8F98")
    title = html.escape(label or turn.role)
    if turn.name:
        title += f" <span style='color:#7d8590'>({html.escape(turn.name)})</span>"
    if turn.tool_call_id:
        title += f" <span style='color:#7d8590'>for {html.escape(turn.tool_call_id)}</span>"
    body = ""
    if turn.text:
        body += f"<pre style='white-space:pre-wrap; margin:2px 0 0 0'>{html.escape(turn.text)}</pre>"
    for call in turn.tool_calls:
        body += (f"<div style='color:{ROLE_COLORS['tool']}; margin-top:4px'>→ tool call "
                 f"<b>{html.escape(call.name)}</b> <span style='color:#7d8590'>{html.escape(call.id)}</span></div>"
                 f"<pre style='white-space:pre-wrap; margin:0; color:{code}'>{html.escape(call.arguments)}</pre>")
    if not body:
        body = "<div style='color:#7d8590'><i>(empty)</i></div>"
    return (f"<table width='100%' cellspacing='0' cellpadding='6' style='margin-bottom:6px'>"
            f"<tr><td width='4' style='background:{colour}'></td>"
            f"<td style='background:{card}'><div style='color:{colour}; font-weight:600'>{title}</div>"
            f"{body}</td></tr></table>")


def transcript_html(transcript: Transcript, dark: bool = True) -> str:
    """The transcript as simple HTML for a read-only text browser (all text escaped)."""
    parts = []
    meta = [f"{len(transcript.messages)} messages sent"]
    if transcript.tools:
        meta.append("tools offered: " + ", ".join(transcript.tools))
    if transcript.usage is not None:
        u = transcript.usage
        meta.append(f"{u.input_tokens:,} in · {u.output_tokens:,} out tokens")
    parts.append(f"<div style='color:#7d8590; margin-bottom:6px'>{html.escape(' · '.join(meta))}</div>")
    parts.extend(_turn_html(t, dark=dark) for t in transcript.messages)
    if transcript.response is not None:
        parts.append("<div style='color:#7d8590; margin:8px 0 4px 0'>── model response ──</div>")
        parts.append(_turn_html(transcript.response, "assistant (response)", dark=dark))
    return "".join(parts)
