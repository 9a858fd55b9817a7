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


# The tags our working-memory prompt puts around the memory (and Mastra's hide rule strips from
# messages): a model echoes them back around the value it sends to the update tool.
OWN_TAGS = ("working_memory", "working_memory_data", "working_memory_template")
_TAG_RE = re.compile(r"<(/?)(%s)\s*>" % "|".join(OWN_TAGS))


def unwrap_own_tags(text: str) -> str:
    """``text`` without one enclosing pair of our own working-memory tags, when the whole value (blanks
    aside) is one such element: ``<working_memory>…</working_memory>`` gives what is inside, stripped.
    Anything else comes back unchanged: a memory that mentions a tag, two elements side by side, or a
    pair that closes before the end. Only the outer pair goes (a nested one stays)."""
    body = text.strip()
    first = _TAG_RE.match(body)
    if first is None or first.group(1):
        return text
    name = first.group(2)
    depth = 0
    for tag in _TAG_RE.finditer(body):
        if tag.group(2) != name:
            continue
        depth += -1 if tag.group(1) else 1
        if depth == 0:
            if tag.end() != len(body):
                return text  # the first element closes before the end: not one enclosing pair
            return body[first.end():tag.start()].strip()
    return text  # never closed
