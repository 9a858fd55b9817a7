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
from datetime import datetime, timezone

from core.messages import Message
from core.observational.records import OMRecord
from core.observational.store import ThreadHints

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


def relative_label(day: datetime, now: datetime) -> str:
    days = (now.date() - day.date()).days
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


def _with_relative_date(match: re.Match[str], now: datetime) -> str:
    prefix, month, day, year = match.groups()
    try:
        when = datetime.strptime(f"{month[:3]} {day} {year}", "%b %d %Y").replace(tzinfo=timezone.utc)
    except ValueError:
        return match.group(0)
    return f"{prefix}{month} {day}, {year} ({relative_label(when, now)})"


def optimize_chunk(text: str, now: datetime) -> str:
    """The actor's view of a chunk: only 🔴 and ✅ markers stay, ``[tags]`` go, ``->`` becomes a space,
    runs of spaces shrink, and date headers say how long ago they were."""
    out: list[str] = []
    for line in text.splitlines():
        indent = line[: len(line) - len(line.lstrip())]
        body = _LOW_PRIORITY_RE.sub("", line.strip())
        body = _TAG_RE.sub("", body).replace("->", " ")
        body = re.sub(r"[ \t]{2,}", " ", body).strip()
        if body in ("*", "-"):
            continue
        out.append(indent[:4] + body if body else "")
    collapsed = re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()
    return _DATE_HEADER_RE.sub(lambda m: _with_relative_date(m, now), collapsed)


def context_blocks(record: OMRecord | None, hints: ThreadHints, now: datetime,
                   other_conversations: str = "") -> list[ContextBlock]:
    """The system messages, in order. Empty when there is nothing observed yet (and, in resource
    scope, no other conversation has unobserved messages: ``other_conversations`` is then the only
    block)."""
    chunks = [c for c in (record.chunks if record is not None else [])]
    others = [ContextBlock(other_conversations, "other-conversations")] if other_conversations else []
    if not chunks:
        return others
    blocks = [ContextBlock(f"{CONTEXT_PROMPT}\n\n{CONTEXT_INSTRUCTIONS}", "instructions"), *others,
              ContextBlock("<observations>", "open")]
    for i, chunk in enumerate(chunks):
        text = optimize_chunk(chunk.text, now)
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
