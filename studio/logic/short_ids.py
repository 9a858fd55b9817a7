"""Ids shortened for a table cell or a status line (no Qt): the one rule every pane uses.

The engine's message ids are UUIDv7 (``core.messages``), whose first twelve hex digits are the time in
milliseconds: every message written within a minute or so shares the first eight characters, so a
column of heads ("01a24241…") tells none of them apart. A UUID is therefore shown by its tail (the
random part); other ids (thread and resource names, Mastra's own ids) by their head. The full id is
always in the tooltip or the link.
"""

from __future__ import annotations

import re

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
TAIL = 8


def short_id(value: str, width: int = 10) -> str:
    """``value`` in about ``width`` characters: a UUID as "…" + its last eight characters, another id
    longer than ``width`` + 2 as its first ``width`` characters + "…"."""
    if _UUID.match(value):
        return "…" + value[-TAIL:]
    return value if len(value) <= width + 2 else value[:width] + "…"


__all__ = ["short_id"]
