"""The working set of one turn: conversation messages by source, and system messages by tag.

Every entry keeps its provenance (which processor added it, from which stored rows, with what score),
because the assembled-prompt record is built from this list and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Literal

from core.messages import Message

Source = Literal["input", "memory", "response", "context", "system"]
SOURCES = ("input", "memory", "response", "context", "system")


@dataclass
class Provenance:
    """Where a prompt fragment came from."""

    processor_id: str  # "input", "context", "instructions", or a processor id such as "semantic-recall"
    stored_ids: tuple[str, ...] = ()
    score: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Entry:
    message: Message
    source: Source
    provenance: Provenance
    seq: int  # insertion order; breaks createdAt ties so ordering is stable
    # An input that memory holds already, unchanged: the same message sent again by id (a retry).
    resent: bool = False


@dataclass
class SystemEntry:
    text: str
    tag: str | None
    provenance: Provenance
    seq: int


class MessageList:
    def __init__(self, *, thread_id: str | None = None, resource_id: str | None = None) -> None:
        self.thread_id = thread_id
        self.resource_id = resource_id
        self._entries: dict[str, Entry] = {}
        self._system: list[SystemEntry] = []
        self._seq = 0

    # -- adding ----------------------------------------------------------------------------------
    def add(self, messages: Message | Iterable[Message], source: Source, provenance: Provenance | None = None) -> None:
        batch = [messages] if isinstance(messages, Message) else list(messages)
        prov_default = provenance or Provenance(source)
        last_time = None
        for msg in batch:
            if msg.role == "system":
                if source == "memory":
                    continue  # old databases sometimes stored system rows; memory never loads them
                self.add_system(msg.text, None, provenance or Provenance(source, (msg.id,)))
                continue
            if not msg.created_at_given and last_time is not None and msg.created_at <= last_time:
                # Messages added together keep their order even when created in the same millisecond.
                msg = msg.copy(created_at=last_time + timedelta(milliseconds=1))
            last_time = msg.created_at
            if msg.thread_id is None and self.thread_id is not None and source in ("input", "response"):
                msg = msg.copy(thread_id=self.thread_id, resource_id=msg.resource_id or self.resource_id)
            existing = self._entries.get(msg.id)
            if existing is not None:
                if source == "memory":
                    # Live content layered on the stored copy (a message sent again by id): keep the
                    # live text, take the stored time so the message stays where it was in the
                    # conversation, whether its text changed or not.
                    if existing.message.created_at != msg.created_at:
                        existing.message = existing.message.copy(created_at=msg.created_at)
                    if existing.source == "input" and existing.message.content_key() == msg.content_key():
                        existing.resent = True
                    continue
                if existing.message.content_key() == msg.content_key():
                    continue
                # Newer content replaces the older copy; it keeps the original place in time.
                self._entries[msg.id] = Entry(
                    msg.copy(created_at=existing.message.created_at), existing.source, existing.provenance, existing.seq
                )
                continue
            self._seq += 1
            self._entries[msg.id] = Entry(msg, source, prov_default, self._seq)

    def add_system(self, text: str, tag: str | None, provenance: Provenance) -> bool:
        """Add a system message; identical text within the same tag is sent once. Returns False on dedupe."""
        if not text:
            return False
        for entry in self._system:
            if entry.tag == tag and entry.text == text:
                return False
        self._seq += 1
        self._system.append(SystemEntry(text, tag, provenance, self._seq))
        return True

    def clear_system(self, tag: str) -> None:
        self._system = [e for e in self._system if e.tag != tag]

    def remove(self, ids: Iterable[str]) -> None:
        for mid in ids:
            self._entries.pop(mid, None)

    def remove_system_entries(self, entries: Iterable[SystemEntry]) -> None:
        """Drop these system entries (by identity: two entries may hold the same text under two tags)."""
        gone = {id(e) for e in entries}
        self._system = [e for e in self._system if id(e) not in gone]

    # -- reading ---------------------------------------------------------------------------------
    def conversation(self) -> list[Entry]:
        """Non-system entries, ordered by createdAt (insertion order breaks ties)."""
        return sorted(self._entries.values(), key=lambda e: (e.message.created_at, e.seq))

    def system_entries(self) -> list[SystemEntry]:
        """Untagged system messages first, then tagged groups in the order their tag first appeared."""
        untagged = [e for e in self._system if e.tag is None]
        tags: list[str] = []
        for e in self._system:
            if e.tag is not None and e.tag not in tags:
                tags.append(e.tag)
        grouped = [e for tag in tags for e in self._system if e.tag == tag]
        return untagged + grouped

    def messages(self, *sources: Source) -> list[Message]:
        wanted = set(sources or SOURCES)
        return [e.message for e in self.conversation() if e.source in wanted]

    def ids(self) -> set[str]:
        return set(self._entries)

    def entry(self, message_id: str) -> Entry | None:
        return self._entries.get(message_id)

    def memory_after_resent(self) -> list[Entry]:
        """Memory entries that sort after the first input sent again unchanged (``Entry.resent``)."""
        order = self.conversation()
        first = next((i for i, e in enumerate(order) if e.source == "input" and e.resent), None)
        return [] if first is None else [e for e in order[first + 1:] if e.source == "memory"]

    def memory_from(self, cutoff: tuple[datetime, str]) -> list[Entry]:
        """Memory entries (not system messages) whose (createdAt, id) is ``cutoff`` or later."""
        return [e for e in self._entries.values()
                if e.source == "memory" and (e.message.created_at, e.message.id) >= cutoff]

    def last_user_message(self) -> Message | None:
        for entry in reversed(self.conversation()):
            if entry.message.role in ("user", "signal") and entry.source in ("input", "memory", "context"):
                if entry.source == "input":
                    return entry.message
        for entry in reversed(self.conversation()):
            if entry.message.role in ("user", "signal"):
                return entry.message
        return None

    def new_messages(self) -> list[Message]:
        """What this turn produced: the caller's input and the model's response (never context)."""
        return self.messages("input", "response")
