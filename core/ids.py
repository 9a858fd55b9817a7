"""Which strings may be ids: the one rule every entry point that takes a thread, resource or message
id applies.

libSQL stores a NUL character in full but hands strings to SQLite as C strings, so a parameter is
cut at its first NUL: ``"r1\\x00evil"`` is looked up, compared and stored as ``"r1"``, and two ids
collide (a thread created for ``r1\\x00evil`` reads back as owned by ``r1``). A lone surrogate has no
UTF-8 form at all and makes the driver fail with a bare ``ValueError``. Everything else round-trips
exactly (checked by a property test over arbitrary text), so only these two are refused.

A *new* id that arrives from outside (a gateway request, an MCP call, an import file) is held to a
stricter rule, ``new_id_problem``: printable text (no control, format or separator characters other
than the space: an escape sequence drives the terminal that prints it, a bidirectional override or a
zero-width character makes two ids look alike) of at most ``MAX_NEW_ID`` characters, so every id
such a surface creates can be named again by the gateway's chat route. Rows other tools wrote keep
working: the rule is asked only where a surface would create a thread, resource or message.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Callable, Iterable

# A surrogate code point on its own (Python strings may hold them; UTF-8 cannot).
_SURROGATE = re.compile("[\ud800-\udfff]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def id_problem(value: object) -> str | None:
    """Why ``value`` cannot be stored as an id, or None when it can."""
    if not isinstance(value, str):
        return f"an id must be a string, got {type(value).__name__}"
    if "\x00" in value:
        return "it contains a NUL character (\\x00), which the database would cut the id at"
    match = _SURROGATE.search(value)
    if match is not None:
        return (f"it contains a lone surrogate (U+{ord(match.group()):04X}), which has no UTF-8 form; "
                "decode the text properly before using it as an id")
    return None


#: The longest id a gateway, MCP or import client may create.
MAX_NEW_ID = 256
#: How much of a client's value an error message repeats (``shown``).
SHOWN_CHARS = 80


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for an error message that repeats what a client sent, cut to its first ``limit``
    characters and "…" when longer (with the full length): a refused id or field may be as large as the
    request body, and an answer (and the log line beside it) repeating it whole would be as large again."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}… ({len(value):,} characters)"
    text = repr(value)
    return text if len(text) <= limit + 2 else text[:limit] + "…"


def clipped(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` as it is when short, else ``shown``'s cut without the quotes (for messages that print an id
    bare)."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def new_id_problem(value: object) -> str | None:
    """Why ``value`` may not become a new id through an untrusted surface (``id_problem``'s reasons, then
    length and printability, naming the first character that is not printable), or None."""
    problem = id_problem(value)
    if problem is not None:
        return problem
    assert isinstance(value, str)
    if not value:
        return "it is empty (a thread without an owner would be anyone's)"
    if len(value) > MAX_NEW_ID:
        return f"it is {len(value):,} characters long; an id may have at most {MAX_NEW_ID}"
    if not value.isprintable():
        bad = next(c for c in value if not c.isprintable())
        kind = "a control character" if unicodedata.category(bad) == "Cc" else "a character that is not printable"
        return f"it contains {kind} (U+{ord(bad):04X}); an id must be printable text"
    return None


def check_id(value: object, what: str, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` naming ``what`` (``"thread id"``, ``"resource id"``...) when ``value`` is unusable."""
    problem = id_problem(value)
    if problem is not None:
        raise error(f"The {what} {shown(value)} cannot be used: {problem}. Use an id without it.")


def check_ids(values: Iterable[tuple[object, str]], error: type[Exception] = ValueError) -> None:
    """``check_id`` for many ``(value, what)`` pairs; one regex pass when all are fine (the save path)."""
    pairs = [(v, w) for v, w in values if v is not None]
    texts = [v for v, _ in pairs if isinstance(v, str)]
    if len(texts) == len(pairs) and not _UNSTORABLE.search("".join(texts)):
        return
    for value, what in pairs:
        check_id(value, what, error)


def check_optional_id(value: object, what: str, error: type[Exception] = ValueError) -> None:
    """``check_id`` for ids that may be absent (None or empty means "not given")."""
    if value is not None and value != "":
        check_id(value, what, error)


def lone_surrogate(value: Any) -> str | None:
    """Where text in ``value`` (a string, or JSON-like data holding strings, keys included) has a lone
    surrogate, which no UTF-8 text can hold: a description naming the (first) code point, or None."""
    return first_in_strings(value, surrogate_in)


def surrogate_in(text: str) -> int | None:
    """The code point of the first lone surrogate of ``text``, or None. A surrogate is the one code point UTF-8
    cannot encode, and encoding is several times faster than searching for one (Figures)."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return ord(text[exc.start])
    return None


def first_in_strings(value: Any, find: Callable[[str], int | None]) -> str | None:
    """``lone_surrogate``'s walk over ``value`` with ``find`` asking each string (the tests and the bench give it
    the regex search it replaced)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found = find(item)
            if found is not None:
                return f"a lone surrogate (U+{found:04X}), which has no UTF-8 form"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return None


__all__ = ["MAX_NEW_ID", "SHOWN_CHARS", "check_id", "clipped", "check_ids", "check_optional_id", "id_problem", "first_in_strings", "lone_surrogate", "new_id_problem", "shown", "surrogate_in"]
