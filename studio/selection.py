"""What the user is looking at; panes receive it from the main window."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Selection:
    resource_id: str | None = None
    thread_id: str | None = None
    message_id: str | None = None  # a stored turn picked in the message view, if any

    @property
    def empty(self) -> bool:
        return self.resource_id is None and self.thread_id is None
