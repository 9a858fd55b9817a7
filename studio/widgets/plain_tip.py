"""Tooltips that show their text as written.

Qt draws a tooltip as rich text whenever its first line looks like markup (``Qt.mightBeRichText``: a
known HTML tag anywhere in that line, or "&lt;"), and no flag makes one plain. Tooltips here carry
stored data (a thread title, a resource id, a span's name from a trace file, a tool's description from
a turn record): a thread titled ``<b style="font-size:60px">…`` or a span named ``<img src="file:…">``
was drawn as markup, the image read from the disk. ``plain_tip`` is the one way a tooltip that may hold
data is made: such text is escaped into a paragraph that keeps its spaces and line breaks; any other
text comes back unchanged (Qt shows it as plain text already)."""

from __future__ import annotations

import html

from PySide6.QtGui import Qt  # (mightBeRichText is QtGui's)


def plain_tip(text: str) -> str:
    """``text`` as a tooltip Qt shows exactly as written (never as markup)."""
    if not text or not Qt.mightBeRichText(text):
        return text
    return "<p style='white-space:pre-wrap'>" + html.escape(text, quote=False) + "</p>"


def rich_tip(text: str) -> str:
    """``text`` as written, in a tooltip Qt wraps to its width (a plain one is a single line as wide as
    the text): for stored text of any length."""
    return "<p style='white-space:pre-wrap'>" + html.escape(text, quote=False) + "</p>"
