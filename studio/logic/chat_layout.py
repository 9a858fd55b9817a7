"""How the chat playground reads: the transcript (stored messages, then the turn streaming in) and one
line about an agent's memory. Pure functions; no Qt, no I/O."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from core import MemoryOptions
from studio.logic.dates import format_datetime
from studio.logic.message_format import ROLE_COLOURS, MessageRow

PROMPT_SCHEME = "prompt:"  # transcript links: prompt:<user message id> opens that turn in the inspector
DIM = "#8a8f98"
ERROR = "#e5534b"
WAITING_FOR_MODEL = "waiting for the model"  # what a turn waits for before its reply, unless memory works first


@dataclass(frozen=True)
class Entry:
    """One transcript bubble. ``turn_id`` is the user message that started its turn (the prompt link)."""

    role: str
    text: str
    turn_id: str | None = None
    id: str | None = None
    state: str = "stored"  # stored | streaming | failed
    note: str = ""
    waiting: str = WAITING_FOR_MODEL  # said while a streaming reply has no text yet (``chat_runner.waiting_for``)


def entries_from_rows(rows: Sequence[MessageRow]) -> list[Entry]:
    """Stored messages as bubbles; each links to the prompt of the turn it belongs to."""
    out: list[Entry] = []
    turn: str | None = None
    for r in rows:
        if r.role == "user":
            turn = r.id
        if r.role == "system":
            continue
        out.append(Entry(r.role, r.preview, turn, r.id))
    return out


def with_delta(entries: list[Entry], piece: str) -> list[Entry]:
    """The streaming reply (the last entry) with one more piece of text."""
    if not entries or entries[-1].state != "streaming":
        return entries
    last = entries[-1]
    return [*entries[:-1], replace(last, text=last.text + piece)]


def waiting(entries: list[Entry], what: str) -> list[Entry]:
    """The streaming reply (the last entry) waiting for ``what`` instead."""
    if not entries or entries[-1].state != "streaming":
        return entries
    return [*entries[:-1], replace(entries[-1], waiting=what)]


def failed(entries: list[Entry], turn_id: str, why: str, *, stored: str | None = None) -> list[Entry]:
    """The entries of a failed turn stay visible, marked as not saved; ``stored``: the id of its message when that
    was stored all the same (observational memory stores a message it observes before the model is asked)."""
    return [replace(e, state="failed", note=why)
            if e.turn_id == turn_id and e.state != "stored" and (stored is None or e.id != stored) else e
            for e in entries]


def transcript_html(entries: Sequence[Entry], *, busy: bool = False) -> str:
    esc = html.escape
    parts = []
    for e in entries:
        colour = ROLE_COLOURS.get(e.role, DIM)
        link = (f" · <a href='{PROMPT_SCHEME}{esc(e.turn_id)}'>prompt</a>"
                if e.turn_id and e.state == "stored" else "")
        tail = ""
        if e.state == "streaming" and e.role != "user":  # (the reply coming in; the user's message is whole)
            tail = " <span style='color:%s'>▍</span>" % DIM
        head = f"<b style='color:{colour}'>{esc(e.role)}</b>{link}"
        if e.state == "failed":
            head += f" <span style='color:{ERROR}'>· not saved</span>"
        body = esc(e.text).replace("\n", "<br>") if e.text else (
            f"<span style='color:{DIM}'>{esc(e.waiting)}…</span>" if e.state == "streaming" else "")
        note = f"<br><span style='color:{DIM}'>{esc(e.note)}</span>" if e.note else ""
        parts.append(f"<p style='margin:6px 0'>{head}<br>{body}{tail}{note}</p>")
    if not parts and not busy:
        parts.append(f"<p style='color:{DIM}'>No messages yet. Type one below: the agent answers with its "
                     "memory, and the other panes follow.</p>")
    return "".join(parts)


def unreadable_html() -> str:
    """The transcript when the thread's messages could not be read (the banner says why): never the
    empty thread's "No messages yet"."""
    return (f"<p style='color:{DIM}'>The messages of this thread could not be read, so none are shown; "
            "the reason is above.</p>")


def memory_summary(opts: MemoryOptions) -> str:
    """One line: what this agent's memory brings into each turn."""
    bits = []
    last = opts.last_messages
    om = opts.observational_memory
    if om.enabled:  # (the engine runs no message history then: observational memory brings the raw tail)
        bits.append(f"observational memory ({om.scope}) in place of message history")
    else:
        bits.append(f"last {last} messages" if last else "no history")
    wm = opts.working_memory
    if wm.enabled:
        bits.append(f"working memory ({wm.scope}{', schema' if wm.schema is not None else ''})")
    sr = opts.semantic_recall
    if sr.enabled:
        rng = sr.message_range
        bits.append(f"recall {sr.mode} top {sr.top_k}, range {rng.before}/{rng.after}, {sr.scope}"
                    + (f", threshold {sr.threshold:g}" if sr.threshold is not None else ""))
    if opts.read_only:
        bits.append("memory is not updated by the agent")
    return "Memory: " + " · ".join(bits)


_OM = "observational-memory"  # the processor whose notes say what observational memory did in a turn
_STAMP = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")


def memory_problem(notes: Iterable[Mapping[str, Any]]) -> str:
    """What a turn's prompts' notes (``AssembledPrompt.notes``, one per model call) say of observational memory's
    observer or reflector failing, for the person chatting: the first failure of each, its time in the Studio's
    format, and what it means and what to do. Every turn notes an observer failure until an observation succeeds
    (a background observer's too, which no reply shows otherwise), so this holds until memory works again. ""
    when the turn noted none."""
    errors: dict[str, str] = {}
    for prompt_notes in notes:
        om = prompt_notes.get(_OM) or {}
        for key in ("observationError", "reflectionError"):
            error = om.get(key) if isinstance(om, Mapping) else None
            if key not in errors and isinstance(error, str) and error.strip():
                errors[key] = _STAMP.sub(lambda m: format_datetime(m.group(0)), error.strip().rstrip("."))
    lines = []
    if "observationError" in errors:
        lines.append(f"Observational memory could not observe this conversation: {errors['observationError']}. "
                     "Nothing is lost: the messages not observed are still sent to the model as they are, and a "
                     "later turn tries again.")
    if "reflectionError" in errors:
        lines.append(f"Observational memory could not condense its observations: {errors['reflectionError']}. "
                     "The observations are kept as they are, and a later turn tries again.")
    if lines:
        lines.append("In the chat the chosen model observes too: if this keeps happening, check that it is running, "
                     "or choose a model that follows the observer's instructions better.")
    return "\n".join(lines)
