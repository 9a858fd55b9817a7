"""Text read back from the database when its bytes may not be valid UTF-8.

libSQL's driver panics (``pyo3_runtime.PanicException``, which is not an ``Exception``) when a TEXT
value holds invalid UTF-8, and the panic takes the whole result set with it: one bad byte written by
a crashed or foreign program made a whole thread unreadable. So columns that hold free text
(message content, titles, metadata, working memory) are selected as ``CAST(col AS BLOB)`` and
decoded here. Invalid bytes become U+FFFD and the value is marked, so callers can say so.

No imports from the rest of the engine: both ``core.messages`` and ``core.storage`` use it.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


class InvalidUtf8Text(str):
    """A stored value whose invalid UTF-8 bytes were replaced by U+FFFD when read."""

    invalid_utf8 = True


def decode_stored_text(value: Any) -> Any:
    """Bytes from a ``CAST(... AS BLOB)`` column as text; anything else (None, str, numbers) unchanged."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        return value
    raw = bytes(value)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        log.warning("stored text is not valid UTF-8 (byte %d of %d); unreadable bytes shown as U+FFFD",
                    exc.start, len(raw))
        return InvalidUtf8Text(raw.decode("utf-8", errors="replace"))


def is_invalid_utf8(value: Any) -> bool:
    return bool(getattr(value, "invalid_utf8", False))


def utf8_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as UTF-8 (a lone surrogate, from broken decoding), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate (U+{ord(text[exc.start]):04X} at character {exc.start})"
    return None
