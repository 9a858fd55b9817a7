"""What the main model (the "actor") receives from observational memory (spec §3.2, item 54).

In order, as system messages tagged ``observational-memory``: how to read the notes, an
``<observations>`` marker, one message per chunk of the log, then the thread's current task and
suggested response (last, so everything before them stays byte-identical between turns and
provider prompt caches keep hitting). Then a user-role continuation reminder sorts first among the
conversation messages. Storage keeps the raw log; only this view is trimmed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timezone

from core.messages import Message
from core.observational.records import OMRecord
from core.observational.store import ThreadHints
from core.timeutil import month_number

TAG = "observational-memory"
CONTINUATION_ID = "om-continuation"

CONTEXT_PROMPT = (
    "The observations below are your memory of earlier conversations with this user. The messages "
    "they were written from are no longer in your context; these notes replace them."
)

CONTEXT_INSTRUCTIONS = """\
HOW TO USE THEM: treat the notes as things you remember, not as a document the user gave you. \
Do not mention that you keep notes unless asked.

WHEN FACTS CHANGE: a later note overrides an earlier one on the same subject. If the user now says \
something that contradicts a note, believe the user.

PLANS AND DATES: a note about something planned ("plans to fly on Mar 9") may describe the past by \
now. Compare its date with today's before talking about it as upcoming.

THE LATEST MESSAGE COMES FIRST: answer what the user is asking now. Use the notes to inform the \
answer, not to steer the conversation back to old topics.

REMINDERS: text inside <system-reminder> tags comes from the memory system, not from the user; \
follow it silently."""

CONTINUATION_TEXT = (
    "<system-reminder>Carry on with this conversation naturally and answer the most recent message. "
    "Your memory of what came before is in the observations above; use it as background, without "
    "recapping it or saying that it was summarised.\n\n"
    "Every message after this reminder is more recent than the observations and takes precedence "
    "over them.</system-reminder>"
)

_DATE_HEADER_RE = re.compile(r"^(\s*Date:\s*)([A-Z][a-z]{2,8})\s+(\d{1,2}),\s*(\d{4})\s*$", re.M)
_TAG_RE = re.compile(r"[ \t]*\[[^\[\]\n]{1,60}\](?!\()")
_LOW_PRIORITY_RE = re.compile(r"(🟡|🟢)\s?")


@dataclass(frozen=True)
class ContextBlock:
    text: str
    part: str  # "instructions" | "other-conversations" | "open" | "chunk" | "current-task" | "suggested-response"
    chunk_index: int | None = None


#: How date headers are annotated in the actor's view. 1: this engine's first rules ("9 days ago",
#: no gap lines, inline dates left alone), kept for rebuilding turns recorded with them (a record
#: without the key). 2: Mastra 1.71's (``formatRelativeTime``, gap lines between headers, inline
#: ``(estimated …)`` / ``(meaning …)`` dates expanded), what a new turn sends.
LEGACY_DATES, MASTRA_DATES = 1, 2
DATE_STYLE = MASTRA_DATES


def relative_label(day: datetime, now: datetime, style: int = DATE_STYLE) -> str:
    """How long before ``now`` (or after it) ``day`` was, in whole calendar days (UTC)."""
    days = (now.date() - day.date()).days
    if style == LEGACY_DATES:
        return _legacy_label(days)
    if days == 0:
        return "today"
    if days == 1:
        return "yesterday"
    if days == -1:
        return "tomorrow"
    return f"{_span(days)} ago" if days > 0 else f"in {_span(-days)}"


def _span(days: int, *, years: bool = True) -> str:
    """Mastra's wording of a number of days (2 or more): "N days" to 6, "1 week" to 13, "N weeks" to 29,
    "1 month" to 59, then "N months" (N = days // 30), from 365 "N year(s)" unless ``years`` is False."""
    if days < 7:
        return f"{days} days"
    if days < 14:
        return "1 week"
    if days < 30:
        return f"{days // 7} weeks"
    if days < 60:
        return "1 month"
    if days < 365 or not years:
        return f"{days // 30} months"
    n = days // 365
    return f"{n} year{'s' if n > 1 else ''}"


def _legacy_label(days: int) -> str:
    if days < 0:
        return "in the future"
    if days == 0:
        return "today"
    if days == 1:
        return "yesterday"
    if days < 14:
        return f"{days} days ago"
    if days < 60:
        return f"{days // 7} weeks ago"
    if days < 365:
        months = days // 30
        return f"{months} month{'s' if months != 1 else ''} ago"
    years = days // 365
    return f"{years} year{'s' if years != 1 else ''} ago"


def gap_label(before: date, after: date) -> str | None:
    """The line Mastra puts between two date headers more than a day apart (None: a day or less)."""
    days = (after - before).days
    return f"[{_span(days, years=False)} later]" if days > 1 else None


def _month_day(month: str, day: str, year: str) -> date | None:
    """A date from a month name (its first three letters count, as JavaScript's parser reads them)."""
    number = month_number(month)
    try:
        return date(int(year), number, int(day)) if number is not None else None
    except ValueError:
        return None


_SIMPLE_DATE = re.compile(r"([A-Z][a-z]+)\s+(\d{1,2}),?\s+(\d{4})")
_RANGE_DATE = re.compile(r"([A-Z][a-z]+)\s+(\d{1,2})-\d{1,2},?\s+(\d{4})")
_VAGUE_DATE = re.compile(r"(late|early|mid)[- ]?(?:to[- ]?(?:late|early|mid)[- ]?)?([A-Z][a-z]+)\s+(\d{4})", re.I)
_CROSS_MONTH = re.compile(r"([A-Z][a-z]+)\s+to\s+(?:early\s+)?([A-Z][a-z]+)\s+(\d{4})", re.I)
_VAGUE_DAY = {"early": "7", "mid": "15", "late": "23"}


def date_in(text: str) -> date | None:
    """The date an inline estimate names: "May 30, 2023", "May 27-28, 2023" (its first day), "late
    April 2023" (the 7th, 15th or 23rd), "April to early May 2023" (the 1st of the second month)."""
    m = _SIMPLE_DATE.search(text)
    found = _month_day(*m.groups()) if m else None
    if found is None and (m := _RANGE_DATE.search(text)):
        found = _month_day(*m.groups())
    if found is None and (m := _VAGUE_DATE.search(text)):
        found = _month_day(m.group(2), _VAGUE_DAY[m.group(1).lower()], m.group(3))
    if found is None and (m := _CROSS_MONTH.search(text)):
        found = _month_day(m.group(2), "1", m.group(3))
    return found


_INLINE_DATE = re.compile(r"\((estimated|meaning)\s+([^)]+\d{4})\)", re.I)
_FUTURE_INTENT = re.compile(
    r"\bwill\s+(?:be\s+)?\w+\b|\bplans?\s+to\b|\bplanning\s+to\b|\blooking\s+forward\s+to\b|"
    r"\bgoing\s+to\b|\bintends?\s+to\b|\bwants?\s+to\b|\bneeds?\s+to\b|\babout\s+to\b", re.I)


def _expand_inline_dates(text: str, now: datetime) -> str:
    """"(estimated May 27, 2023)" -> "(estimated May 27, 2023 - 3 weeks ago)"; a past date on a line that
    states an intention ("plans to", "will") also says ", likely already happened"."""

    def expand(m: re.Match[str]) -> str:
        when = date_in(m.group(2))
        if when is None:
            return m.group(0)
        label = relative_label(datetime(when.year, when.month, when.day, tzinfo=timezone.utc), now)
        line = text[text.rfind("\n", 0, m.start()) + 1:m.start()]
        past = datetime(when.year, when.month, when.day, tzinfo=timezone.utc) < now
        tail = ", likely already happened" if past and _FUTURE_INTENT.search(line) else ""
        return f"({m.group(1)} {m.group(2)} - {label}{tail})"

    return _INLINE_DATE.sub(expand, text)


_MASTRA_HEADER_RE = re.compile(r"^(Date:\s*)([A-Z][a-z]+) (\d{1,2}), (\d{4})$", re.M)

# What ``relative_label`` writes in either style, and where the actor's view puts it (after a date header,
# inside an inline estimate with a past intention's tail): the only text of a block that depends on ``now``.
_LABEL = (r"(?:today|yesterday|tomorrow|in the future|\d+ (?:days?|weeks?|months?|years?) ago"
          r"|in \d+ (?:days?|weeks?|months?|years?))")
_HEADER_LABEL_RE = re.compile(r"^(Date:\s*[A-Z][a-z]+ \d{1,2}, \d{4}) \(" + _LABEL + r"\)$", re.M)
_INLINE_LABEL_RE = re.compile(r" - " + _LABEL + r"(?:, likely already happened)?\)")


def without_relative_dates(text: str) -> str:
    """A block of the actor's view without its "(3 days ago)"-style labels: two blocks equal this way hold the
    same observations, shown on different days (Replay says "time passed", not "observed")."""
    return _INLINE_LABEL_RE.sub(")", _HEADER_LABEL_RE.sub(r"\1", text))


def _with_relative_date(match: re.Match[str], now: datetime) -> str:
    prefix, month, day, year = match.groups()
    found = _month_day(month, day, year)
    if found is None:
        return match.group(0)
    when = datetime(found.year, found.month, found.day, tzinfo=timezone.utc)
    return f"{prefix}{month} {day}, {year} ({relative_label(when, now, LEGACY_DATES)})"


def _trimmed(text: str) -> str:
    out: list[str] = []
    for line in text.splitlines():
        indent = line[: len(line) - len(line.lstrip())]
        body = _LOW_PRIORITY_RE.sub("", line.strip())
        body = _TAG_RE.sub("", body).replace("->", " ")
        body = re.sub(r"[ \t]{2,}", " ", body).strip()
        if body in ("*", "-"):
            continue
        out.append(indent[:4] + body if body else "")
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def optimize_chunk(text: str, now: datetime, *, style: int = DATE_STYLE,
                   previous: list[date] | None = None) -> str:
    """The actor's view of a chunk: only 🔴 and ✅ markers stay, ``[tags]`` go, ``->`` becomes a space,
    runs of spaces shrink, and date headers say how long ago they were. In Mastra's style (``style``
    2) inline estimated dates say it too, and a line such as "[2 weeks later]" comes before a header
    more than a day after the one before it (``previous``: the last header of the chunks before, kept
    up to date, so the log reads as one text as in Mastra)."""
    collapsed = _trimmed(text)
    if style == LEGACY_DATES:
        return _DATE_HEADER_RE.sub(lambda m: _with_relative_date(m, now), collapsed)
    expanded = _expand_inline_dates(collapsed, now)
    last = previous if previous is not None else []
    out: list[str] = []
    at = 0
    for m in _MASTRA_HEADER_RE.finditer(expanded):
        when = _month_day(m.group(2), m.group(3), m.group(4))
        if when is None:
            continue
        out.append(expanded[at:m.start()])
        gap = gap_label(last[-1], when) if last else None
        if gap:
            out.append(f"\n{gap}\n\n")
        label = relative_label(datetime(when.year, when.month, when.day, tzinfo=timezone.utc), now)
        out.append(f"{m.group(1)}{m.group(2)} {m.group(3)}, {m.group(4)} ({label})")
        at = m.end()
        last[:] = [when]
    out.append(expanded[at:])
    return "".join(out).strip()


def context_blocks(record: OMRecord | None, hints: ThreadHints, now: datetime,
                   other_conversations: str = "", *, style: int = DATE_STYLE) -> list[ContextBlock]:
    """The system messages, in order. Empty when there is nothing observed yet (and, in resource
    scope, no other conversation has unobserved messages: ``other_conversations`` is then the only
    block)."""
    chunks = [c for c in (record.chunks if record is not None else [])]
    others = [ContextBlock(other_conversations, "other-conversations")] if other_conversations else []
    if not chunks:
        return others
    blocks = [ContextBlock(f"{CONTEXT_PROMPT}\n\n{CONTEXT_INSTRUCTIONS}", "instructions"), *others,
              ContextBlock("<observations>", "open")]
    previous: list[date] = []  # the last date header so far (Mastra's gap lines run across chunks)
    for i, chunk in enumerate(chunks):
        text = optimize_chunk(chunk.text, now, style=style, previous=previous)
        if text:
            blocks.append(ContextBlock(text, "chunk", i))
    if hints.current_task:
        blocks.append(ContextBlock(f"<current-task>\n{hints.current_task}\n</current-task>", "current-task"))
    if hints.suggested_response:
        blocks.append(ContextBlock(
            f"<suggested-response>\n{hints.suggested_response}\n</suggested-response>", "suggested-response"))
    return blocks


def continuation_message(thread_id: str | None, resource_id: str | None) -> Message:
    """User-role reminder dated at the epoch, so it sorts before every real conversation message."""
    return Message.user(CONTINUATION_TEXT, id=CONTINUATION_ID, thread_id=thread_id, resource_id=resource_id,
                        created_at=datetime(1970, 1, 1, tzinfo=timezone.utc))


__all__ = [
    "CONTEXT_INSTRUCTIONS",
    "CONTEXT_PROMPT",
    "CONTINUATION_ID",
    "CONTINUATION_TEXT",
    "TAG",
    "ContextBlock",
    "context_blocks",
    "continuation_message",
    "optimize_chunk",
    "relative_label",
]
