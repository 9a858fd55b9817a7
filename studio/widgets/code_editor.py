"""Plain-text editors for JSON and Markdown: monospace, syntax colours, an error-line marker.

The document's own undo stack is the edit history: programmatic changes (revert, restore a version)
go through ``replace_all``, which is one undoable step, so Ctrl+Z after "Revert" brings the edit back.

``"prose"`` is for what a model read or wrote (prompt fragments, replies): headings and bold, but no
``label:`` colouring, which made ordinary sentences ("Quick heads-up: I'm allergic") look like fields.
Read-only prose viewers show observational memory's priority emoji (🔴 🟡 🟢 ✅), which the monospace
font and most desktops cannot draw, as coloured marks any font has; copying gives the emoji back.
"""

from __future__ import annotations

import re

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QEvent, QMimeData, QObject, Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QKeyEvent,
    QSyntaxHighlighter,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)
from PySide6.QtWidgets import QPlainTextEdit, QTextEdit, QWidget

from studio.logic.observations_layout import PRIORITY_MARKS
from studio.theme import readable
from studio.widgets.wrap_mode import fit_wrap


def mono_font(point_delta: int = 0) -> QFont:
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setStyleHint(QFont.StyleHint.Monospace)
    if point_delta:
        font.setPointSize(max(font.pointSize() + point_delta, 7))
    return font


def _fmt(colour: str, *, bold: bool = False, italic: bool = False) -> QTextCharFormat:
    f = QTextCharFormat()
    f.setForeground(QColor(colour))
    if bold:
        f.setFontWeight(QFont.Weight.Bold)
    f.setFontItalic(italic)
    return f


class JsonHighlighter(QSyntaxHighlighter):
    KEY = re.compile(r'"(?:[^"\\]|\\.)*"(?=\s*:)')
    STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
    NUMBER = re.compile(r"-?\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\b")
    LITERAL = re.compile(r"\b(?:true|false|null)\b")

    def __init__(self, document: QTextDocument) -> None:
        super().__init__(document)
        self.formats = {
            "key": _fmt("#4FA3D9"),
            "string": _fmt("#7DB46C"),
            "number": _fmt("#D19A66"),
            "literal": _fmt("#C678DD", bold=True),
        }

    def highlightBlock(self, text: str) -> None:
        for m in self.NUMBER.finditer(text):
            self.setFormat(m.start(), m.end() - m.start(), self.formats["number"])
        for m in self.LITERAL.finditer(text):
            self.setFormat(m.start(), m.end() - m.start(), self.formats["literal"])
        for m in self.STRING.finditer(text):
            self.setFormat(m.start(), m.end() - m.start(), self.formats["string"])
        for m in self.KEY.finditer(text):
            self.setFormat(m.start(), m.end() - m.start(), self.formats["key"])


# Priority emoji -> what a viewer shows instead, and its colour: a mark any font has, followed by an
# invisible character that says which emoji it stands for (so copying gives the emoji back).
_VIEW_MARKS = {emoji: (("✔" if name == "done" else "●") + tail, colour)
               for (emoji, (name, colour, _meaning)), tail in zip(PRIORITY_MARKS.items(),
                                                                  ("\u200b", "\u200c", "\u200d", "\u2060"))}
_TO_VIEW = re.compile("|".join(map(re.escape, _VIEW_MARKS)))
_FROM_VIEW = {shown: emoji for emoji, (shown, _colour) in _VIEW_MARKS.items()}
_FROM_VIEW_RE = re.compile("|".join(map(re.escape, _FROM_VIEW)))
_MARK_COLOURS = {shown: colour for shown, colour in _VIEW_MARKS.values()}


def view_marks(text: str) -> str:
    """``text`` with each priority emoji replaced by its viewer mark."""
    return _TO_VIEW.sub(lambda m: _VIEW_MARKS[m.group(0)][0], text)


def unview_marks(text: str) -> str:
    """The inverse of ``view_marks``."""
    return _FROM_VIEW_RE.sub(lambda m: _FROM_VIEW[m.group(0)], text)


class MarkdownHighlighter(QSyntaxHighlighter):
    HEADING = re.compile(r"^\s{0,3}#{1,6}\s.*$")
    BULLET = re.compile(r"^\s*(?:[-*+]|\d+\.)\s")
    BOLD = re.compile(r"\*\*[^*]+\*\*|__[^_]+__")
    LABEL = re.compile(r"^\s*(?:[-*+]\s+)?([^:\n]{1,40}):")
    PLACEHOLDER = re.compile(r"\[[^\]]*\]")

    def __init__(self, document: QTextDocument, *, labels: bool = True) -> None:
        super().__init__(document)
        self.labels = labels
        self.heading = _fmt("#E0B050", bold=True)
        self.bullet = _fmt("#8A8F98")
        self.bold = _fmt("#4FA3D9", bold=True)
        self.label = _fmt("#4FA3D9")
        self.placeholder = _fmt("#8A8F98", italic=True)
        self.part_note_blocks: frozenset[int] = frozenset()  # (``CodeEditor.load``: upright, no Markdown)

    def highlightBlock(self, text: str) -> None:
        if self.currentBlock().blockNumber() in self.part_note_blocks:
            return  # (the editor shades it; a typed "[…]" is a grey italic placeholder)
        if self.HEADING.match(text):
            self.setFormat(0, len(text), self.heading)
            return
        m = self.BULLET.match(text)
        if m:
            self.setFormat(0, m.end(), self.bullet)
        lab = self.LABEL.match(text) if self.labels else None
        if lab:
            self.setFormat(lab.start(1), lab.end(1) - lab.start(1) + 1, self.label)
        for b in self.BOLD.finditer(text):
            self.setFormat(b.start(), b.end() - b.start(), self.bold)
        for ph in self.PLACEHOLDER.finditer(text):
            self.setFormat(ph.start(), ph.end() - ph.start(), self.placeholder)
        mark_priorities(self, text)


def mark_priorities(highlighter: QSyntaxHighlighter, text: str) -> None:
    """Colour the viewer marks that stand for priority emoji (``view_marks``): each mark's colour is one
    for both themes, shaded to read at 4.5:1 on the view's background (the amber read 2.2:1 and the green
    2.5:1 on the light theme's white). ``CodeEditor`` highlights again on a change of theme."""
    view: QObject | None = highlighter.document()
    while view is not None and not isinstance(view, QWidget):
        view = view.parent()  # (a plain text edit's document belongs to its text control, that to the edit)
    backgrounds = ((view.palette().base().color(), view.palette().window().color())
                   if isinstance(view, QWidget) else ())
    for i, ch in enumerate(text):
        if ch in "●✔" and i + 1 < len(text) and (ch + text[i + 1]) in _MARK_COLOURS:
            colour = readable(QColor(_MARK_COLOURS[ch + text[i + 1]]), *backgrounds)
            highlighter.setFormat(i, 1, _fmt(colour.name(), bold=True))


class ProseHighlighter(MarkdownHighlighter):
    """Headings, bold and priority marks; no ``label:`` colours (model text is prose)."""

    def __init__(self, document: QTextDocument) -> None:
        super().__init__(document, labels=False)




#: What starts a new block when a ``QTextDocument`` takes plain text (``\u2028`` does not: a line break in a block).
_BLOCK_BREAK = re.compile("\r\n|[\r\n\u2029]")
#: What a pane says beside a viewer with part notes (``CodeEditor.load``).
PART_NOTES_HINT = ("Shaded lines name a part of the message that is no text (an image, a file, audio): the model "
                   "was sent the part itself. Text typed to look like one is not shaded.")


def note_blocks(text: str, spans: Sequence[tuple[int, int]]) -> list[int]:
    """The block (line) numbers of a viewer loaded with ``text`` that hold the part notes at ``spans``
    (``Fragment.part_notes``: character ranges, each a whole line): counted as the document breaks lines, which a
    carriage return or a paragraph separator in a message's text does too."""
    return [len(_BLOCK_BREAK.findall(text, 0, start)) for start, _ in spans]


INDENT = "  "  # what Tab inserts: the JSON the Studio formats is indented by two (``pretty_json``), as a Markdown list


class CodeEditor(QPlainTextEdit):
    """A monospace editor; ``language`` is "json", "markdown", "prose" (model text: prompt fragments,
    replies) or "" (plain). Markdown and prose wrap at the widget's width; a reply or a message of the
    model's on one line was read by scrolling sideways, a window's width at a time.

    The keyboard of an editable JSON or Markdown one (working memory, its template or schema), as in a code
    editor: Tab indents (spaces up to the next stop of ``INDENT``; every line of a selection over several),
    Ctrl+] and Ctrl+[ indent and outdent the lines, and Shift+Tab, Ctrl+Tab and Ctrl+Shift+Tab leave it
    (back, on, back). Qt's own Tab typed a tab character into JSON indented with spaces, and Ctrl+Tab switched
    the pane's tab under the cursor. A plain one (a message's text, stored as typed) keeps Qt's keys; a
    read-only viewer takes no Tab: it moves the focus on, as everywhere else."""

    def __init__(self, language: str = "", parent: QWidget | None = None, *, read_only: bool = False) -> None:
        super().__init__(parent)
        self.setFont(mono_font())
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth if language in ("markdown", "prose")
                             else QPlainTextEdit.LineWrapMode.NoWrap)
        self.setTabStopDistance(self.fontMetrics().horizontalAdvance(" ") * 2)
        self.setReadOnly(read_only)
        self.highlighter: QSyntaxHighlighter | None = None
        self.part_note_blocks: list[int] = []  # the lines shaded as part notes (``load``)
        self.set_language(language)

    def set_language(self, language: str) -> None:
        self.language = language
        if self.highlighter is not None:
            self.highlighter.setDocument(None)
        self.highlighter = {
            "json": JsonHighlighter, "markdown": MarkdownHighlighter, "prose": ProseHighlighter,
        }.get(language, lambda _d: None)(self.document())

    def changeEvent(self, event: Any) -> None:  # noqa: N802 - Qt's name
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self.shows_marks and self.highlighter is not None:
            self.highlighter.rehighlight()  # the priority marks' colours follow the theme
        if event.type() == QEvent.Type.PaletteChange and self.part_note_blocks:
            self._shade(self.part_note_blocks)  # and the part notes' shade

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt's name
        if self.language not in ("json", "markdown"):
            super().keyPressEvent(event)
            return
        key, mods = event.key(), event.modifiers()
        ctrl, shift = bool(mods & Qt.KeyboardModifier.ControlModifier), bool(mods & Qt.KeyboardModifier.ShiftModifier)
        if key in (Qt.Key.Key_Tab, Qt.Key.Key_Backtab):
            if key == Qt.Key.Key_Tab and not (ctrl or shift) and not self.isReadOnly():
                self.indent()
            else:  # (Shift+Tab arrives as Backtab; Ctrl+Shift+Tab as either)
                QWidget.focusNextPrevChild(self, key == Qt.Key.Key_Tab and not shift)
            event.accept()
            return
        if ctrl and not shift and key in (Qt.Key.Key_BracketRight, Qt.Key.Key_BracketLeft) and not self.isReadOnly():
            self.indent(lines=True) if key == Qt.Key.Key_BracketRight else self.outdent()
            event.accept()
            return
        super().keyPressEvent(event)

    def _lines(self) -> tuple[QTextCursor, int, int]:
        """A cursor for one edit block, and the first and last block numbers the selection touches."""
        cursor = self.textCursor()
        doc = self.document()
        first = doc.findBlock(cursor.selectionStart()).blockNumber()
        end = doc.findBlock(cursor.selectionEnd())
        last = end.blockNumber()
        if cursor.hasSelection() and last > first and cursor.selectionEnd() == end.position():
            last -= 1  # (a selection ending at a line's start does not take that line)
        return cursor, first, last

    def indent(self, *, lines: bool = False) -> None:
        """Tab: spaces to the next indent stop at the cursor (replacing a selection within a line); with a
        selection over several lines, or ``lines``, ``INDENT`` before each line. One undoable step."""
        cursor, first, last = self._lines()
        if not lines and first == last:
            column = cursor.selectionStart() - cursor.document().findBlock(cursor.selectionStart()).position()
            cursor.insertText(" " * (len(INDENT) - column % len(INDENT)))
            self.setTextCursor(cursor)
            return
        cursor.beginEditBlock()
        for number in range(first, last + 1):
            at = QTextCursor(self.document().findBlockByNumber(number))
            at.insertText(INDENT)
        cursor.endEditBlock()

    def outdent(self) -> None:
        """Ctrl+[: up to ``INDENT``'s width of spaces (or one tab) off the start of each line the selection
        touches. One undoable step."""
        cursor, first, last = self._lines()
        cursor.beginEditBlock()
        for number in range(first, last + 1):
            block = self.document().findBlockByNumber(number)
            text = block.text()
            lead = text[:len(INDENT)]
            cut = 1 if text.startswith("\t") else len(lead) - len(lead.lstrip(" "))
            if cut:
                at = QTextCursor(block)
                at.movePosition(QTextCursor.MoveOperation.Right, QTextCursor.MoveMode.KeepAnchor, cut)
                at.removeSelectedText()
        cursor.endEditBlock()

    def replace_all(self, text: str) -> None:
        """Replace the whole text as one undoable edit (unlike ``setPlainText``, which wipes undo)."""
        if text == self.toPlainText():
            return
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        cursor.select(QTextCursor.SelectionType.Document)
        cursor.insertText(text)
        cursor.endEditBlock()

    @property
    def shows_marks(self) -> bool:
        """A read-only viewer of model text ("prose") draws priority emoji as marks (``view_marks``)."""
        return self.isReadOnly() and self.language == "prose"

    def load(self, text: str, part_notes: Sequence[tuple[int, int]] = ()) -> None:
        """Show freshly loaded data: not undoable (there is nothing of the user's to bring back). ``part_notes``
        (a fragment's: ``note_blocks``) are shaded lines, so a note naming an image reads apart from text that
        looks like one."""
        fit_wrap(self, text)  # (a 200,000-character run with no space held the UI thread seconds)
        had, self.part_note_blocks = self.part_note_blocks, note_blocks(text, part_notes)
        if isinstance(self.highlighter, MarkdownHighlighter):
            self.highlighter.part_note_blocks = frozenset(self.part_note_blocks)
        self.setPlainText(view_marks(text) if self.shows_marks else text)
        self.document().setModified(False)
        if had or self.part_note_blocks:  # (an editor's own marks, an error line, are left as they are)
            self._shade(self.part_note_blocks)

    def _shade(self, blocks: Sequence[int]) -> None:
        """Part notes: in the link colour on a band a quarter of the selection colour, upright (the highlighter
        leaves their lines alone; a typed "[…]" is a grey italic placeholder: ``MarkdownHighlighter.PLACEHOLDER``)."""
        palette = self.palette()
        base, accent = palette.base().color(), palette.highlight().color()
        band = QColor(round(0.75 * base.red() + 0.25 * accent.red()),
                      round(0.75 * base.green() + 0.25 * accent.green()),
                      round(0.75 * base.blue() + 0.25 * accent.blue()))
        fmt = QTextCharFormat()
        fmt.setBackground(band)
        fmt.setForeground(readable(palette.link().color(), band))
        fmt.setProperty(QTextFormat.Property.FullWidthSelection, True)
        selections = []
        for number in blocks:
            block = self.document().findBlockByNumber(number)
            if not block.isValid():
                continue
            cursor = QTextCursor(block)
            cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
            sel = QTextEdit.ExtraSelection()
            sel.format, sel.cursor = fmt, cursor
            selections.append(sel)
        self.setExtraSelections(selections)

    def text(self) -> str:
        """The text as loaded or edited (a viewer's marks back as the emoji they stand for)."""
        return unview_marks(self.toPlainText()) if self.shows_marks else self.toPlainText()

    def createMimeDataFromSelection(self) -> QMimeData:  # noqa: N802 - Qt's name
        data = super().createMimeDataFromSelection()
        if self.shows_marks and data.hasText():
            data.setText(unview_marks(data.text()))
        return data

    def mark_error_line(self, line: int | None) -> None:
        """Underline a 1-based line in red (a JSON syntax error), or clear the mark."""
        if line is None:
            self.setExtraSelections([])
            return
        block = self.document().findBlockByNumber(max(line - 1, 0))
        sel = QTextEdit.ExtraSelection()
        fmt = QTextCharFormat()
        fmt.setBackground(QColor(229, 83, 75, 40))
        fmt.setProperty(QTextFormat.Property.FullWidthSelection, True)
        sel.format = fmt
        cur = QTextCursor(block)
        sel.cursor = cur
        self.setExtraSelections([sel])


def error_line(problem: str | None) -> int | None:
    """The line number in a "JSON syntax: line N, column M" problem, if any."""
    if not problem:
        return None
    m = re.search(r"line (\d+)", problem)
    return int(m.group(1)) if m and problem.startswith("JSON syntax") else None


ALIGN_TOP = Qt.AlignmentFlag.AlignTop
