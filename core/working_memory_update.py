"""What an update of working memory returns or raises, and the whitespace rule the empty-template guard
compares by: below ``working_memory`` (the service) and ``working_memory_vnext`` (the vNext tool), which
both use them; ``core.working_memory`` re-exports them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.working_memory_schema import WorkingMemoryError


@dataclass(frozen=True)
class UpdateResult:
    success: bool
    message: str
    value: str | None = None
    reason: str | None = None  # the vNext tool's updateReason


def normalize_ws(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


class ConcurrentUpdateError(WorkingMemoryError):
    """The stored value changed since it was read; carries the current value so both can be shown."""

    def __init__(self, current: str | None) -> None:
        super().__init__("Working memory was changed by someone else since it was loaded; nothing was written.")
        self.current = current
