"""Text read back from the database when its bytes may not be valid UTF-8.

libSQL's driver panics (``pyo3_runtime.PanicException``, which is not an ``Exception``) when a TEXT
value holds invalid UTF-8, and the panic takes the whole result set with it: one bad byte written by
a crashed or foreign program made a whole thread unreadable. So columns that hold free text
(message content, titles, metadata, working memory) are selected as ``CAST(col AS BLOB)`` and
decoded here. Invalid bytes become U+FFFD and the value is marked, so callers can say so.

No imports from the rest of the engine: both ``core.messages`` and ``core.storage`` use it.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from typing import Any, Callable

from core.errors import MemoryStudioError

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


def stored_json(value: Any, *, default: Callable[[Any], Any] | None = None,
                separators: tuple[str, str] = (",", ":")) -> str:
    """``value`` as the JSON text a row stores. A float that is not finite (NaN, Infinity: a tool's result,
    an API caller's metadata) is written ``null``, as JavaScript's ``JSON.stringify`` writes it: Python's
    ``json`` would write the bare word ``NaN``, which is not JSON, and Mastra's ``JSON.parse`` of the row, an
    export of it and our own import then all fail."""
    return json_text(value, ensure_ascii=False, separators=separators, default=default)


def json_text(value: Any, **options: Any) -> str:
    """``json.dumps(value, **options)``, byte for byte, when every float in ``value`` is finite; a float that
    is not (NaN, Infinity) is written ``null``, and such a float as a key ``"NaN"`` / ``"Infinity"``, as
    ``JSON.stringify`` writes them. Every JSON the engine stores or writes to a file goes through here (or
    ``stored_json``), so no reader (Mastra's ``JSON.parse``, Postgres, our import) meets a bare ``NaN``."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:  # (rare: only a value holding such a float pays for the walk; a cycle raises again)
        return json.dumps(_finite(value, options.get("default")), allow_nan=False, **options)


def finite_json(value: Any) -> Any:
    """``value`` itself when every float in it is finite; else a copy in which each NaN or Infinity is None
    (as a key, ``"NaN"`` / ``"Infinity"``): the value ``json_text`` writes, for JSON another library
    serialises (a model call's request body, which the ``openai`` client dumps with ``allow_nan=False``).
    Objects JSON cannot hold are left as they are, for the serialiser to refuse."""
    try:
        json.dumps(value, allow_nan=False, default=_as_null)
    except ValueError as exc:  # a non-finite float (or a cycle, which the serialiser will refuse itself)
        if "Circular" in str(exc):
            return value
        return _finite(value, None)
    return value


def _as_null(value: Any) -> None:
    return None


def _finite(value: Any, default: Callable[[Any], Any] | None) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {_finite_key(k): _finite(v, default) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v, default) for v in value]
    if default is not None and not isinstance(value, (str, int, bool, type(None))):
        return _finite(default(value), None)
    return value


def _finite_key(key: Any) -> Any:
    if isinstance(key, float) and not math.isfinite(key):
        return "NaN" if math.isnan(key) else "Infinity" if key > 0 else "-Infinity"
    return key


class NumberBeyondDouble(MemoryStudioError, ValueError):
    """A JSON number beyond a double's range (``1e400``, an integer of 309 digits or more): Mastra (and any
    JavaScript reader) reads it as Infinity, which JSON cannot hold, and Python's parser reads ``1e400`` as
    infinity, stored as null. ``number``: the number as sent, cut to its first 20 characters when long."""

    def __init__(self, text: str, unit: str = "characters") -> None:
        self.number = text if len(text) <= 40 else f"{text[:20]}…({len(text):,} {unit})"
        super().__init__(self.number)


def nul_path(value: Any) -> str | None:
    """Where the first NUL character (U+0000) in a JSON value's strings or keys is, as a path (``note``,
    ``tags[2]``, ``a.b``; ``the key 'k\\x00' of a`` for a key; ``(the value)`` for a string at the top), or None.
    PostgreSQL stores no NUL in a JSONB document ("unsupported Unicode escape sequence"), libSQL keeps it."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return path or "(the value)"
        elif isinstance(item, dict):
            for key in item:
                if isinstance(key, str) and "\x00" in key:
                    return f"the key {key!r}" + (f" of {path}" if path else "")
            stack.extend((inner, f"{path}.{key}" if path else str(key)) for key, inner in reversed(item.items()))
        elif isinstance(item, (list, tuple)):
            stack.extend((inner, f"{path}[{i}]") for i, inner in reversed(list(enumerate(item))))
    return None


def json_double(text: str) -> float:
    """``json.loads``' ``parse_float``: the number, or ``NumberBeyondDouble`` for one no double holds."""
    value = float(text)
    if math.isinf(value):
        raise NumberBeyondDouble(text)
    return value


def json_whole(text: str) -> int:
    """``json.loads``' ``parse_int``: the integer, or ``NumberBeyondDouble`` for one beyond a double's range (an
    integer is kept exact as Python reads it, but every JavaScript reader reads it as a double)."""
    if len(text) - text.startswith("-") > 309:
        # 310 digits or more (JSON writes no leading zero): beyond a double, and past 4,300 digits ``int`` would
        # refuse it in Python's words ("Exceeds the limit (4300 digits) for integer string conversion").
        raise NumberBeyondDouble(text, "digits")
    value = int(text)
    if len(text) > 300 and abs(value) > sys.float_info.max:  # (309 digits at least; shorter ones never are)
        raise NumberBeyondDouble(text, "digits")
    return value


def integer_beyond_double(value: Any) -> str | None:
    """The first integer in an already parsed ``value`` (dicts, lists) that ``json_whole`` would refuse, as it names
    it, or None: the same rule for values no JSON text of ours was parsed for (an MCP client's arguments, a model's
    tool call, an in-process caller). (A float beyond a double is infinity already: ``allow_nan=False`` and
    ``json_text`` deal with those.)"""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int):
            if abs(item) > sys.float_info.max:
                # (str() of an int past 4,300 digits raises: its first digits are not worth the arithmetic)
                digits = str(item) if item.bit_length() < 14_000 else f"an integer of {item.bit_length():,} bits"
                return NumberBeyondDouble(digits, "digits").number
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return None
