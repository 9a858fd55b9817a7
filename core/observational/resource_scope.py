"""Resource-scoped observational memory: one log for all of a user's threads.

Observations made in one thread reach the user's other threads. Each observed batch is wrapped in
``<thread id="…">`` … ``</thread>`` when it joins the shared log, so the model (and the Studio) can
tell which conversation a note came from. Messages of the user's *other* threads that no
observation covers yet are shown too, in one system block (Mastra's "other conversations" block; the
wording here is ours). Each thread keeps its own cursor in its metadata, as in thread scope.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from core.observational.observer import format_history
from core.observational.store import thread_hints, unobserved_messages

if TYPE_CHECKING:  # pragma: no cover
    from core.messages import Message
    from core.observational.records import OMRecord
    from core.storage import Store
    from core.storage.memory_store import ParsedRows

#: Threads of the resource looked at for unobserved messages (most recently created first).
MAX_OTHER_THREADS = 50

_THREAD_OPEN_RE = re.compile(r'^\s*<thread id="([^"]*)"[^>]*>\s*$', re.M)
_ANY_THREAD_TAG_RE = re.compile(r"</?thread\b[^>]*>", re.I)

OTHER_CONVERSATIONS_INTRO = (
    "Below are recent messages from this user's OTHER conversations that your observations do not "
    "cover yet. They are background for reference, not the conversation you are in: answer the "
    "current conversation."
)


def attributed(thread_id: str, observations: str) -> str:
    """A batch of observations marked with the thread it came from (the observer's own thread tags,
    if it wrote any, are dropped: attribution is ours to add)."""
    body = _ANY_THREAD_TAG_RE.sub("", observations).strip()
    return f'<thread id="{thread_id}">\n{body}\n</thread>'


def chunk_thread(text: str) -> str | None:
    """The thread a chunk of the shared log came from (None: not attributed, e.g. a reflection)."""
    match = _THREAD_OPEN_RE.search(text)
    return match.group(1) if match else None


def threads_of(text: str) -> list[str]:
    """Every thread a stretch of the log names, in order of first mention."""
    seen: list[str] = []
    for tid in _THREAD_OPEN_RE.findall(text):
        if tid not in seen:
            seen.append(tid)
    return seen


def other_unobserved(store: "Store", *, resource_id: str, current_thread: str,
                     record: "OMRecord | None", parsed: "ParsedRows | None" = None) -> dict[str, list["Message"]]:
    """The other threads' messages that no observation covers, by thread (each by its own cursor); ``parsed``:
    rows read before (``unobserved_messages``)."""
    page = store.memory.list_threads(resource_id=resource_id, per_page=MAX_OTHER_THREADS)
    out: dict[str, list[Message]] = {}
    for thread in page.threads:
        if thread.id == current_thread:
            continue
        msgs = unobserved_messages(store, thread_id=thread.id, resource_id=resource_id, record=record,
                                   hints=thread_hints(thread.metadata), parsed=parsed)
        if msgs:
            out[thread.id] = msgs
    return out


def other_conversations_block(others: Mapping[str, Sequence["Message"]]) -> str:
    """The system block showing other threads' unobserved messages (empty when there are none)."""
    sections = []
    for thread_id, msgs in _oldest_first(others):
        history = format_history(msgs).replace("## New Message History to Observe\n\n", "", 1).rstrip()
        sections.append(f'<conversation thread="{thread_id}">\n{history}\n</conversation>')
    if not sections:
        return ""
    return f"{OTHER_CONVERSATIONS_INTRO}\n\n<other-conversations>\n" + "\n".join(sections) + "\n</other-conversations>"


def _oldest_first(groups: Mapping[str, Sequence["Message"]]) -> list[tuple[str, Sequence["Message"]]]:
    return sorted(((tid, msgs) for tid, msgs in groups.items() if msgs),
                  key=lambda item: (item[1][0].created_at, item[0]))


def observation_order(own_thread: str, own: Sequence["Message"],
                      others: Mapping[str, Sequence["Message"]]) -> list[tuple[str, list["Message"]]]:
    """Threads to observe, oldest unobserved message first, so no thread's messages wait forever."""
    groups: dict[str, Sequence[Message]] = dict(others)
    if own:
        groups[own_thread] = own
    return [(tid, list(msgs)) for tid, msgs in _oldest_first(groups)]


def flat(groups: Mapping[str, Iterable["Message"]]) -> list["Message"]:
    return [m for msgs in groups.values() for m in msgs]


__all__ = [
    "MAX_OTHER_THREADS",
    "OTHER_CONVERSATIONS_INTRO",
    "attributed",
    "chunk_thread",
    "flat",
    "observation_order",
    "other_conversations_block",
    "other_unobserved",
    "threads_of",
]
