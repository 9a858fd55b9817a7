"""Line wrapping that stays fast on a text holding a very long run without a space.

Qt's default wrap, at a word boundary or else anywhere, looks for a boundary along the whole run for each
line it breaks, so its cost grows with the square of the run: a 200,000-character message with no space
(a hex dump, a token, a blob a tool returned) held the UI thread 2 to 5 s when a viewer showed it
(offscreen, a 600 px viewer: 50,000 characters 0.16-0.55 s by the load; wrapped anywhere, 200,000 took
0.035 s). A viewer given such a text wraps it anywhere instead; any other text keeps the word wrap.
"""

from __future__ import annotations

import re

from PySide6.QtGui import QTextOption
from PySide6.QtWidgets import QPlainTextEdit, QTextEdit

LONG_RUN_CHARS = 5_000  # a run this long costs Qt's word wrap ~9 ms to show (10,000: ~14 ms), at load 10
# (the look-behind starts a match only where a run starts, so the search is one pass over the text)
_LONG_RUN = re.compile(r"(?<!\S)\S{%d}" % LONG_RUN_CHARS)


def has_long_run(text: str) -> bool:
    """True if ``text`` holds ``LONG_RUN_CHARS`` or more characters in a row with no white space."""
    return _LONG_RUN.search(text) is not None


def fit_wrap(view: QPlainTextEdit | QTextEdit, text: str) -> None:
    """Call just before ``view`` is given ``text`` (plain text or HTML) in place of what it shows: wrap
    anywhere if the text holds a long run. Where the mode changes, the view is emptied first: the new mode
    lays out the text it holds again, and the old text the other way costs what this avoids."""
    mode = (QTextOption.WrapMode.WrapAnywhere if has_long_run(text)
            else QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
    if view.wordWrapMode() != mode:
        view.clear()
        view.setWordWrapMode(mode)
