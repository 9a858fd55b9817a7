"""A read-only text viewer inside a scrolling page asks, as its least height, the height of its whole text
(up to a cap), so the page scrolls as one instead of the viewer scrolling inside it.

Working Memory's JSON viewers ("Stored now", "Result after save", an agent's resolved configuration) had
their own scroll bars inside the pane's scrolling page: a user scrolled two things to read one value. Grown
to their text, the page's scroll bar is the one to use; only a text taller than ``cap_lines`` still scrolls
inside its viewer (a page as tall as a very long value would bury what is under it).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QPlainTextEdit

CAP_LINES = 30  # about half a 1,440 x 900 window's page
LEAST_LINES = 3  # an empty or one-line value still reads as a box


class _GrowToContent(QObject):
    def __init__(self, view: QPlainTextEdit, cap_lines: int) -> None:
        super().__init__(view)
        self.view, self.cap_lines = view, cap_lines

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        # (the viewport's resize too: a sideways scroll bar shown or hidden leaves the viewer its size)
        if event.type() in (QEvent.Type.Resize, QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self.fit()
        return False

    def fit(self, *_: object) -> None:
        view = self.view
        line = view.fontMetrics().lineSpacing()
        cap = self.cap_lines * line
        layout = view.document().documentLayout()
        text = 0.0
        block = view.document().begin()
        while block.isValid() and text <= cap:  # (at most the cap's worth of blocks laid out: a long value is cheap)
            text += layout.blockBoundingRect(block).height()
            block = block.next()
        # What the viewer takes around its text: its frame, and a sideways scroll bar where a JSON line is wider
        # than the viewer (the bar sat over the last line otherwise).
        bar = view.horizontalScrollBar()
        chrome = view.height() - view.contentsRect().height()  # (the frame: the same at any height)
        if bar.maximum() > 0:
            chrome += bar.sizeHint().height()
        chrome += int(2 * view.document().documentMargin())
        least = int(max(min(text, cap), LEAST_LINES * line)) + chrome + 1
        if view.minimumHeight() != least:
            view.setMinimumHeight(least)


def grow_to_content(view: QPlainTextEdit, cap_lines: int = CAP_LINES) -> None:
    """``view``'s least height follows its text: every line of it, at most ``cap_lines`` lines."""
    watcher = _GrowToContent(view, cap_lines)
    view.installEventFilter(watcher)
    view.viewport().installEventFilter(watcher)
    view.document().documentLayout().documentSizeChanged.connect(watcher.fit)
    view.horizontalScrollBar().rangeChanged.connect(watcher.fit)
    watcher.fit()
