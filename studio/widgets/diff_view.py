"""A read-only line diff: old/new line numbers, +/− markers, tinted backgrounds."""

from __future__ import annotations

from PySide6.QtGui import QColor, QTextBlockFormat, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QPlainTextEdit, QWidget

from studio.logic.diffing import DiffLine, stats
from studio.widgets.code_editor import mono_font

_BG = {"insert": QColor(63, 185, 80, 46), "delete": QColor(229, 83, 75, 46)}
_FG = {"insert": QColor("#57AB5A"), "delete": QColor("#E5534B")}
_MARK = {"equal": " ", "insert": "+", "delete": "−"}


class DiffView(QPlainTextEdit):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setFont(mono_font())
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self._lines: list[DiffLine] = []

    @property
    def lines(self) -> list[DiffLine]:
        return list(self._lines)

    def summary(self) -> str:
        return stats(self._lines).label()

    def set_diff(self, lines: list[DiffLine], *, empty_text: str = "(identical)") -> None:
        self._lines = list(lines)
        self.clear()
        cursor = QTextCursor(self.document())
        if not lines:
            cursor.insertText(empty_text)
            return
        width = len(str(max((ln.old_no or 0, ln.new_no or 0) for ln in lines)[0] or 1)) + 1
        gutter = QTextCharFormat()
        gutter.setForeground(self.palette().placeholderText().color())
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
            if ln.kind in _FG:
                mark.setForeground(_FG[ln.kind])
            cursor.insertText(f"{_MARK[ln.kind]} {ln.text}", mark)
        self.moveCursor(QTextCursor.MoveOperation.Start)
