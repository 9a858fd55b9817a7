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


__all__ = ["printable", "visible"]
