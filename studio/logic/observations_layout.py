"""What the Observations pane shows, as plain data: which rows to look up for a selection, the
observation log as readable HTML (chunks apart, date headers bold, priorities as drawn markers), the
two token bars against the record's thresholds, and one row per generation. No Qt here.

The observer writes priorities as emoji (🔴 🟡 🟢 ✅), which need a colour-emoji font most Linux set-ups
lack. The log shows each as an ``<img src="priority:…">`` whose picture the pane draws itself
(``studio.widgets.priority_marks``), so no font is involved.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterator, Mapping, Sequence

from core.edits.observations import is_observation_line
from core.observational import OMRecord, ThreadHints
from core.observational.records import Chunk, split_chunks
from core.observational.resource_scope import chunk_thread
from core.timeutil import parse_iso
from studio.logic.dates import format_datetime
from studio.logic.thread_labels import NO_DELEGATIONS, Delegations, resource_label, shown_title
from studio.selection import Selection

EMPTY_TEXT = ("No observational memory for this thread: the agent that writes it runs with observational memory "
              "off, or has not observed yet.")
EMPTY_RESOURCE_TEXT = ("No observational memory for this resource: no agent observes it with resource scope, "
                       "or none has observed yet.")
NO_SELECTION_TEXT = "Select a thread (or a resource) to see its observational memory."
EMPTY_LOG_TEXT = "Nothing observed yet."

_DATE_RE = re.compile(r"^\s*Date:\s*\S")

# emoji -> (marker name, colour, what it means); the pane draws each marker (no emoji font needed)
PRIORITY_MARKS: dict[str, tuple[str, str, str]] = {
    "🔴": ("high", "#E5534B", "high priority"),
    "🟡": ("medium", "#D9A441", "medium priority"),
    "🟢": ("low", "#3FB68B", "low priority"),
    "✅": ("done", "#3FB68B", "done"),
}
MARK_URL = "priority:"
REFLECTION_COLOUR = "#8E7CC3"  # a reflection's heading: apart from the observer's grey ones, readable on both themes
_MARK_RE = re.compile("|".join(map(re.escape, PRIORITY_MARKS)))


def _marks(escaped: str) -> str:
    """Escaped log text with each priority emoji replaced by its drawn marker."""
    def one(m: re.Match[str]) -> str:
        name, _colour, meaning = PRIORITY_MARKS[m.group(0)]
        return f'<img src="{MARK_URL}{name}" width="11" height="11" alt="{meaning}"/>'
    return _MARK_RE.sub(one, escaped)


@dataclass(frozen=True)
class Lookup:
    scope: str  # "thread" or "resource"
    thread_id: str | None
    resource_id: str | None


def lookups_for(selection: Selection) -> list[Lookup]:
    """Rows to try, in order: a thread's own record first, then its resource's (resource scope)."""
    out: list[Lookup] = []
    if selection.thread_id:
        out.append(Lookup("thread", selection.thread_id, selection.resource_id))
    if selection.resource_id:
        out.append(Lookup("resource", None, selection.resource_id))
    return out


def empty_text(selection: Selection) -> str:
    if selection.empty:
        return NO_SELECTION_TEXT
    return EMPTY_TEXT if selection.thread_id else EMPTY_RESOURCE_TEXT


# -- dates ------------------------------------------------------------------------------------------
def _parse(iso: str | None) -> datetime | None:
    if not iso:
        return None
    try:
        return parse_iso(iso)
    except ValueError:  # a hand-edited or foreign row: the cell shows the raw text
        return None


def format_when(iso: str | None) -> str:
    """The Studio's one date format (``studio.logic.dates``); unreadable values are shown as they
    are, missing ones as ``—``."""
    value = _parse(iso)
    return format_datetime(value) if value is not None else (iso or "—")


format_short = format_when  # table cells use the same format as everything else


# -- thresholds and bars ----------------------------------------------------------------------------
def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and value > 0:
        return int(value)
    return None


def thresholds(config: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(message_tokens, observation_tokens) from a record's ``config``: Mastra's nested layout
    (``observation.messageTokens``, ``reflection.observationTokens``) or flat keys."""
    observation, reflection = config.get("observation"), config.get("reflection")
    obs = observation if isinstance(observation, Mapping) else {}
    refl = reflection if isinstance(reflection, Mapping) else {}
    messages = _positive_int(obs.get("messageTokens")) or _positive_int(config.get("messageTokens")) \
        or _positive_int(config.get("message_tokens"))
    observations = _positive_int(refl.get("observationTokens")) or _positive_int(config.get("observationTokens")) \
        or _positive_int(config.get("observation_tokens"))
    return messages, observations


def _model(section: Any) -> str | None:
    return str(section["model"]) if isinstance(section, Mapping) and section.get("model") else None


@dataclass(frozen=True)
class TokenBar:
    label: str
    value: int
    limit: int | None
    tooltip: str

    @property
    def percent(self) -> int:
        """0-100 for the progress bar; a value past the limit shows as full."""
        if not self.limit:
            return 0
        return max(0, min(100, round(100 * self.value / self.limit)))

    @property
    def text(self) -> str:
        if self.limit is None:
            return f"{self.value:,} tokens (no threshold recorded)"
        return f"{self.value:,} / {self.limit:,} tokens ({self.percent}%)"


def token_bars(record: OMRecord) -> tuple[TokenBar, TokenBar]:
    """Unobserved messages vs the observer's threshold; the log vs the reflector's threshold."""
    messages, observations = thresholds(record.config)
    obs_model = _model(record.config.get("observation")) or "unknown model"
    refl_model = _model(record.config.get("reflection")) or "unknown model"
    return (
        TokenBar("Messages", record.pending_message_tokens, messages,
                 f"Unobserved message tokens; the observer ({obs_model}) runs at "
                 f"{messages:,} tokens." if messages else f"Unobserved message tokens (observer: {obs_model})."),
        TokenBar("Observations", record.observation_token_count, observations,
                 f"Tokens of the observation log; the reflector ({refl_model}) rewrites it at "
                 f"{observations:,} tokens." if observations else f"Tokens of the observation log (reflector: "
                 f"{refl_model})."),
    )


# -- the log ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LogSection:
    heading: str
    lines: tuple[str, ...]
    reflection: bool = False  # the reflector's output (a reflection generation's first stretch), not the observer's


@dataclass(frozen=True)
class Reflection:
    """Where a reflection generation's log holds the reflector's output: its first ``end`` characters; the rest
    is the observer's (chunks appended since, and lines the reflector did not see when it ran in the background).
    ``at``: when it was written; ``replaced``: what it replaced, in words (said when the generation before it is
    not stored); ``exact``: False where the split is the first chunk's end only (see ``reflection_of``)."""

    at: str | None
    end: int
    replaced: str
    exact: bool = True

    @property
    def heading(self) -> str:
        when = f" at {format_when(self.at)}" if self.at else ""
        split = "" if self.exact else " (where it ends is not recorded: its first chunk)"
        return f"Reflection{when}: the reflector's rewrite{split} · replaced {self.replaced}"


def reflection_of(record: OMRecord, previous: OMRecord | None) -> Reflection | None:
    """The reflector's part of ``record``'s log (None: not a reflection generation). ``previous``: the generation
    before it, when stored. A reflection prepared in the background keeps its text on the generation it replaced
    (``bufferedReflection``) with how many of that log's lines it covers; the new log starts with that text. A
    reflection made in the turn is the whole new log until the observer appends a chunk (after a
    message-boundary line): its first chunk."""
    if record.origin_type != "reflection":
        return None
    log = record.active_observations
    at = record.last_reflection_at or record.created_at
    before = previous if previous is not None and previous.generation_count == record.generation_count - 1 else None
    prepared = (before.buffered_reflection or "").rstrip() if before is not None else ""
    if before is not None and prepared and log.startswith(prepared):
        seen = before.active_observations.splitlines()[:before.reflected_line_count or None]
        count = len([ln for ln in seen if is_observation_line(ln)])
        return Reflection(at, len(prepared),
                          f"the first {count:,} observation{'s' if count != 1 else ''} of generation "
                          f"{before.generation_count} (prepared in the background)")
    first = split_chunks(log)
    end = log.find(first[0].text) + len(first[0].text) if first else len(log)
    if before is None:
        replaced = (f"generation {record.generation_count - 1}, which is not stored here" if record.generation_count
                    else "no earlier generation stored")
    else:
        count = len(observation_lines(before.active_observations))
        replaced = (f"generation {before.generation_count}'s log ({count:,} observation{'s' if count != 1 else ''}, "
                    f"{before.observation_token_count:,} tokens)")
    # Exact only where the generation before says the reflection ran in the turn: one prepared in the background
    # whose text was edited since, or whose generation before is not stored, may end inside the first chunk.
    return Reflection(at, end, replaced, exact=before is not None and not prepared)


def log_sections(active_observations: str, thread_titles: Mapping[str, str] | None = None,
                 reflection: Reflection | None = None) -> list[LogSection]:
    """One section per chunk; the heading says when the chunk was observed (the boundary time) and,
    in a resource-scoped log, which thread it came from (``thread_titles``: id → title). ``reflection``:
    the log is a reflection generation's, its reflector's part a section of its own and every other chunk
    said to be the observer's."""
    if reflection is None:
        return [_section(n, chunk, thread_titles) for n, chunk in enumerate(split_chunks(active_observations), 1)]
    head, rest = active_observations[:reflection.end], active_observations[reflection.end:]
    out = [LogSection(reflection.heading, _lines(head), reflection=True)] if head.strip() else []
    for n, chunk in enumerate(split_chunks(rest), start=2 if out else 1):
        section = _section(n, chunk, thread_titles)
        if chunk.boundary:
            out.append(LogSection(section.heading + " · the observer's", section.lines))
        else:  # (the reflection's chunk goes on: its lines as stored, a sub-point's indent kept)
            lines = _lines(rest[:rest.find(chunk.text) + len(chunk.text)].strip("\n"))
            out.append(LogSection(section.heading + " · the observer's lines the reflector did not see", lines))
    return out


def _lines(text: str) -> tuple[str, ...]:
    return tuple(ln.rstrip() for ln in text.splitlines() if not _THREAD_TAG_RE.match(ln.strip()))


def _section(n: int, chunk: Chunk, thread_titles: Mapping[str, str] | None) -> LogSection:
    when = f" · after {format_when(chunk.boundary)}" if chunk.boundary else ""
    source = chunk_source(chunk.text, thread_titles)
    origin = f" · from {source}" if source else ""
    return LogSection(f"Chunk {n}{when}{origin}", _lines(chunk.text))


_THREAD_TAG_RE = re.compile(r"^</?thread\b[^>]*>$")


def chunk_source(text: str, titles: Mapping[str, str] | None = None) -> str | None:
    """"thread <id> (<title>)" for a chunk of a resource-scoped log; None when it names no thread."""
    thread = chunk_thread(text)
    if thread is None:
        return None
    title = (titles or {}).get(thread)
    return f"thread {shown_title(thread)} ({shown_title(title)})" if title else f"thread {shown_title(thread)}"


def empty_log_text(record: OMRecord | None) -> str:
    """Why the current log of ``record`` is empty, from the record's own figures: its unobserved messages below
    the observer's threshold, at or past it (the next turn, or the background, observes them), or the observer
    failing (its back-off: how often, why, when it is tried again). None: no cause claimed."""
    if record is None:
        return EMPTY_LOG_TEXT
    from core.observational.buffer import backoff_of

    backoff = backoff_of(record.studio, "observer")
    if backoff is not None:
        return (f"Nothing observed yet: the observer failed {backoff.failures}× ({backoff.error or 'no reason kept'}); "
                f"the messages stay unobserved, and it is tried again after {format_when(backoff.retry_at)}.")
    limit, _ = thresholds(record.config)
    pending = record.pending_message_tokens
    if limit is None:
        return EMPTY_LOG_TEXT
    if pending < limit:
        return (f"Nothing observed yet: the unobserved messages are still below the threshold ({pending:,} of "
                f"{limit:,} tokens).")
    observation = record.config.get("observation")
    buffered = isinstance(observation, Mapping) and bool(observation.get("bufferTokens"))
    return (f"Nothing observed yet: the unobserved messages ({pending:,} tokens) have reached the threshold "
            f"({limit:,}); " + ("what the background observer buffers is activated at the next turn." if buffered
                                else "the next turn observes them."))


def log_paragraphs(active_observations: str, thread_titles: Mapping[str, str] | None = None,
                   reflection: Reflection | None = None, empty: str = EMPTY_LOG_TEXT) -> Iterator[str]:
    """The log as HTML paragraphs, made as they are asked for: a pane can show a long log a slice at a
    time (``ObservationLogView.show_log``) instead of all of it in one go. A reflection's part is headed
    in bold in its own colour, the observer's chunks in grey as in any log. ``empty``: what an empty log says."""
    sections = log_sections(active_observations, thread_titles, reflection)
    if not sections:
        yield f"<p><i>{html.escape(empty)}</i></p>"
        return
    for i, section in enumerate(sections):
        if i:
            yield "<hr/>"
        style = f"color: {REFLECTION_COLOUR}; font-weight: bold;" if section.reflection else "color: gray;"
        yield f"<p style='{style} font-size: small;'>{html.escape(section.heading)}</p>"
        for line in section.lines:
            if not line.strip():
                continue
            text = _marks(html.escape(line.strip()))
            if _DATE_RE.match(line):
                yield f"<p style='margin-top: 6px;'><b>{text}</b></p>"
            else:
                indent = 16 + 12 * ((len(line) - len(line.lstrip())) // 2)
                yield f"<p style='margin: 1px 0 1px {indent}px;'>{text}</p>"


@dataclass(frozen=True)
class LogText:
    """A generation's log as the pane shows it, made on the worker that reads it (``studio.reads``):
    the log view's paragraphs and, for the current generation, the editable observation lines."""

    paragraphs: tuple[str, ...]
    lines: tuple[str, ...] = ()
    reflection: Reflection | None = None  # a reflection generation's: where the reflector's output ends
    reflected: int = 0  # of ``lines``, how many (the first) are the reflector's; the rest are the observer's


def observation_lines(active_observations: str) -> tuple[str, ...]:
    """The observations of a log, one per line, as stored (not dates, boundaries or tags)."""
    return tuple(ln.strip() for ln in active_observations.splitlines() if is_observation_line(ln))


def log_text(record: OMRecord, thread_titles: Mapping[str, str] | None = None, *, current: bool,
             previous: OMRecord | None = None) -> LogText:
    """``record``'s ``LogText``; only the current generation lists its lines (only it can be edited).
    ``previous``: the generation before it (what a reflection replaced)."""
    reflection = reflection_of(record, previous)
    log = record.active_observations
    reflected = len(observation_lines(log[:reflection.end])) if reflection is not None and current else 0
    # Only the current generation's figures are the record's now: an earlier one's log says no cause.
    return LogText(tuple(log_paragraphs(log, thread_titles, reflection, empty_log_text(record if current else None))),
                   observation_lines(log) if current else (), reflection, reflected)


def log_texts(history: Sequence[OMRecord], thread_titles: Mapping[str, str] | None = None) -> dict[str, LogText]:
    """Every generation's ``LogText`` by record id (``history`` newest first: the first is current)."""
    return {r.id: log_text(r, thread_titles, current=i == 0, previous=history[i + 1] if i + 1 < len(history) else None)
            for i, r in enumerate(history)}


def log_html(active_observations: str, thread_titles: Mapping[str, str] | None = None) -> str:
    return "\n".join(log_paragraphs(active_observations, thread_titles))


# -- hints --------------------------------------------------------------------------------------------
def hint_rows(hints: ThreadHints) -> list[tuple[str, str]]:
    """(label, text) for the hints the observer left; missing ones say so."""
    return [
        ("Current task", hints.current_task or "—"),
        ("Suggested response", hints.suggested_response or "—"),
        ("Last observed", format_when(hints.last_observed_at) if hints.last_observed_at else "—"),
    ]


# -- generations --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GenerationRow:
    record_id: str
    number: int
    origin: str
    created: str
    updated: str
    tokens: int
    current: bool
    created_at: str | None = None  # the stored values, for the relative time on hover
    updated_at: str | None = None


def generation_rows(history: Sequence[OMRecord]) -> list[GenerationRow]:
    """Newest first, as ``load_history`` returns them; the first row is the current generation."""
    return [GenerationRow(r.id, r.generation_count, r.origin_type, format_short(r.created_at),
                          format_short(r.updated_at), r.observation_token_count, i == 0, r.created_at,
                          r.updated_at)
            for i, r in enumerate(history)]


def subtitle(lookup: Lookup | None, history: Sequence[OMRecord], known: Delegations = NO_DELEGATIONS) -> str:
    """The pane's header line; a delegation's resource named as the tree names it (``resource_label``)."""
    if lookup is None or not history:
        return ""
    what = (f"thread {shown_title(lookup.thread_id or '')}" if lookup.scope == "thread"
            else f"resource {resource_label(lookup.resource_id or '', known)}")
    n = len(history)
    return f"{what} · {lookup.scope} scope · {n} generation{'s' if n != 1 else ''}"


__all__ = [
    "EMPTY_TEXT",
    "chunk_source",
    "MARK_URL",
    "PRIORITY_MARKS",
    "GenerationRow",
    "LogSection",
    "LogText",
    "REFLECTION_COLOUR",
    "Reflection",
    "Lookup",
    "TokenBar",
    "empty_text",
    "format_short",
    "format_when",
    "generation_rows",
    "hint_rows",
    "log_html",
    "log_paragraphs",
    "log_text",
    "log_texts",
    "observation_lines",
    "reflection_of",
    "log_sections",
    "lookups_for",
    "subtitle",
    "thresholds",
    "token_bars",
]
