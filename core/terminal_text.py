"""Text as the command line and reports print it for a person: control characters shown, never obeyed.

Titles, ids and message text come from users and models. Printed as they are, an escape sequence would
drive the terminal (hide text, retitle the window) and a newline would break a one-row-per-item table.
Machine output (``--json``) keeps the text exactly as stored.
"""

from __future__ import annotations

import unicodedata

_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def visible(text: str, *, keep: str = "") -> str:
    """``text`` with each control character not in ``keep`` written as an escape (``\\n``, ``\\x1b``)."""
    if not any(unicodedata.category(c) == "Cc" and c not in keep for c in text):
        return text
    return "".join(_NAMED.get(c, f"\\x{ord(c):02x}") if unicodedata.category(c) == "Cc" and c not in keep else c
                   for c in text)


def printable(text: str) -> str:
    """``text`` with every character ``str.isprintable`` refuses written as its Python escape: controls,
    and also format characters (bidi overrides, zero-width joiners), which ``visible`` leaves alone in
    stored text. For ids and the contents of a file quoted in a report or an error (an import's), where
    nothing should act on the terminal or a dialog, or hide. Printable text is returned unchanged."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


_ZWJ, _VS16 = "\u200d", "\ufe0f"


def _is_emoji_modifier(c: str) -> bool:
    return 0x1F3FB <= ord(c) <= 0x1F3FF  # skin tones: drawn inside the emoji before them


def display_width(text: str) -> int:
    """How many terminal columns ``text`` takes (``visible``'s output: no control characters): a wide or
    full-width character (``east_asian_width`` W or F: CJK, most emoji) takes 2, a symbol followed by the
    emoji selector (U+FE0F: "❤️") 2, combining marks, format characters (zero-width joiners, bidi marks)
    and variation selectors none; an emoji joined to the one before by a zero-width joiner ("👩‍💻") or a
    skin tone after an emoji adds nothing (one glyph, as terminals that draw such sequences show them)."""
    width = 0
    last = 0  # the width of the last character that took columns
    joined = False  # the character before was a zero-width joiner
    for c in text:
        if c == _VS16:
            if last == 1:
                width, last = width + 1, 2
            continue
        if unicodedata.category(c) in ("Mn", "Me", "Cf"):
            joined = joined or c == _ZWJ
            continue
        w = 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1
        if (joined or _is_emoji_modifier(c)) and last == 2 and w == 2:
            w = 0  # drawn in the glyph before
        joined = False
        width += w
        last = w or last
    return width


def pad(text: str, width: int, *, right: bool = False) -> str:
    """``text`` padded with spaces to ``width`` terminal columns (``display_width``), on the right (left
    aligned) unless ``right``; text already that wide or wider is returned as it is."""
    fill = " " * max(width - display_width(text), 0)
    return fill + text if right else text + fill


__all__ = ["display_width", "pad", "printable", "visible"]
