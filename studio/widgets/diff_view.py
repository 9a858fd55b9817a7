"""A read-only line diff: old/new line numbers, +/− markers, tinted backgrounds."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent
from PySide6.QtGui import QColor, QTextBlockFormat, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QPlainTextEdit, QWidget

from studio.logic.diffing import DiffLine, stats
from studio.theme import readable
from studio.widgets.code_editor import mono_font

_BG = {"insert": QColor(63, 185, 80, 46), "delete": QColor(229, 83, 75, 46)}
_FG = {"insert": QColor("#57AB5A"), "delete": QColor("#E5534B")}
_MARK = {"equal": " ", "insert": "+", "delete": "−"}


def _over(tint: QColor, base: QColor) -> QColor:
    """``tint`` (translucent) laid on ``base``: the colour a line's background shows."""
    a = tint.alphaF()
    return QColor.fromRgbF(*(t * a + b * (1 - a) for t, b in ((tint.redF(), base.redF()),
                                                             (tint.greenF(), base.greenF()),
                                                             (tint.blueF(), base.blueF()))))


def line_colours(base: QColor) -> dict[str, tuple[QColor, QColor]]:
    """Each changed line's (background, text colour) on a view whose background is ``base``: the text's
    colour is one for both themes, shaded to read at 4.5:1 on its tinted line (the green read 2.4:1 and
    the red 3.0:1 on the light theme, the red 3.8:1 on the dark one)."""
    return {kind: (_BG[kind], readable(_FG[kind], _over(_BG[kind], base))) for kind in _BG}


class DiffView(QPlainTextEdit):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setFont(mono_font())
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self._lines: list[DiffLine] = []
        self._empty_text = "(identical)"

    @property
    def lines(self) -> list[DiffLine]:
        return list(self._lines)

    def summary(self) -> str:
        return stats(self._lines).label()

    def set_diff(self, lines: list[DiffLine], *, empty_text: str = "(identical)") -> None:
        self._lines = list(lines)
        self._empty_text = empty_text
        self.clear()
        cursor = QTextCursor(self.document())
        if not lines:
            cursor.insertText(empty_text)
            return
        width = len(str(max((ln.old_no or 0, ln.new_no or 0) for ln in lines)[0] or 1)) + 1
        gutter = QTextCharFormat()
        gutter.setForeground(self.palette().placeholderText().color())
        colours = line_colours(self.palette().base().color())
        for i, ln in enumerate(lines):
            block = QTextBlockFormat()
            if ln.kind in _BG:
                block.setBackground(_BG[ln.kind])
            if i == 0:
                cursor.setBlockFormat(block)
            else:
                cursor.insertBlock(block)
            old = str(ln.old_no) if ln.old_no else ""
            new = str(ln.new_no) if ln.new_no else ""
            cursor.insertText(f"{old:>{width}} {new:>{width}} ", gutter)
            mark = QTextCharFormat()
            if ln.kind in colours:
                mark.setForeground(colours[ln.kind][1])
            cursor.insertText(f"{_MARK[ln.kind]} {ln.text}", mark)
        self.moveCursor(QTextCursor.MoveOperation.Start)

    def changeEvent(self, event: Any) -> None:  # noqa: N802 - Qt's name
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self._lines:
            bars = (self.verticalScrollBar(), self.horizontalScrollBar())
            at = [bar.value() for bar in bars]
            self.set_diff(self._lines, empty_text=self._empty_text)  # the text's colours follow the theme
            for bar, value in zip(bars, at):
                bar.setValue(value)
