"""The Studio's undo stack for memory edits (pure: no Qt, no I/O).

Each explicit edit the user made in the Studio (a message edited or deleted, an observation edited
or deleted) is pushed as an ``EditRecord``. Undo and redo both ask the engine to revert the target's
newest change (``Memory.undo_message_edit`` / ``undo_observation_edit``: undoing an undo redoes), so
the stack only decides *which* target comes next. A record moves between the two lists only after the
engine did it; a refused undo (the message changed since) leaves the stack as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from core.errors import MemoryStudioError

Kind = Literal["message", "observation"]


class MessageGoneError(MemoryStudioError, LookupError):
    """The message an edit names is no longer stored (deleted, or its thread, since the view was read)."""


@dataclass(frozen=True)
class EditRecord:
    kind: Kind
    target_id: str  # message id, or observation generation (row) id
    resource_id: str
    thread_id: str | None
    label: str  # "edit of message 3f2a…", shown in menus and the status bar


@dataclass
class EditHistory:
    limit: int = 100
    done: list[EditRecord] = field(default_factory=list)
    undone: list[EditRecord] = field(default_factory=list)

    def push(self, record: EditRecord) -> None:
        """A new edit: it can be undone, and what was undone before can no longer be redone."""
        self.done.append(record)
        del self.done[:-self.limit]
        self.undone.clear()

    @property
    def next_undo(self) -> EditRecord | None:
        return self.done[-1] if self.done else None

    @property
    def next_redo(self) -> EditRecord | None:
        return self.undone[-1] if self.undone else None

    def did_undo(self, record: EditRecord) -> None:
        if self.done and self.done[-1] == record:
            self.undone.append(self.done.pop())

    def did_redo(self, record: EditRecord) -> None:
        if self.undone and self.undone[-1] == record:
            self.done.append(self.undone.pop())

    def forget(self, resource_id: str) -> None:
        """A forgotten resource's edits can be neither undone nor redone."""
        self.done = [r for r in self.done if r.resource_id != resource_id]
        self.undone = [r for r in self.undone if r.resource_id != resource_id]

    def forget_thread(self, thread_id: str) -> None:
        """A deleted thread's edits (its messages and their versions are gone) can be neither undone nor redone."""
        self.done = [r for r in self.done if r.thread_id != thread_id]
        self.undone = [r for r in self.undone if r.thread_id != thread_id]

    def clear(self) -> None:
        self.done.clear()
        self.undone.clear()


__all__ = ["EditHistory", "EditRecord", "Kind"]
