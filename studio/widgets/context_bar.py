"""The context-window bar: how full the window is, and what the prompt is made of, by source.

Two strips, because a 500-token prompt in a 128k window is an invisible sliver: the top strip is the
window (to scale), the bottom strip is the prompt itself (100% = this prompt), both in source colours.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPaintEvent, QMouseEvent
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from studio.logic.prompt_layout import ContextUsage
from studio.widgets.plain_tip import plain_tip

STRIP = 10
GAP = 6
LEGEND_H = 18
HEAD_H = 18  # a header line


class ContextBar(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("contextBar")
        self._usage: ContextUsage | None = None
        self._hits: list[tuple[QRectF, str]] = []
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(480, HEAD_H * len(self.head_lines(480)) + STRIP * 2 + GAP * 2
                     + LEGEND_H * self._legend_rows(480) + 4)

    def minimumSizeHint(self) -> QSize:
        return QSize(200, self.sizeHint().height())

    @property
    def usage(self) -> ContextUsage | None:
        return self._usage

    def set_usage(self, usage: ContextUsage | None) -> None:
        self._usage = usage
        self._fit_height()  # the legend may need another row (or one fewer) for the new sources
        self.setToolTip(plain_tip(f"{usage.summary}\n{usage.window_owner}\ntokenizer: {usage.tokenizer}")
                        if usage else "")
        self.updateGeometry()
        self.update()

    def legend_items(self) -> list[str]:
        if self._usage is None:
            return []
        total = max(sum(s.tokens for s in self._usage.segments), 1)
        return [f"{s.source}  {s.tokens:,}  ({100 * s.tokens / total:.0f}%)" for s in self._usage.segments]

    def _legend_rows(self, width: int) -> int:
        items = self.legend_items()
        if not items:
            return 1
        fm = self.fontMetrics()
        rows, x = 1, 0
        for text in items:
            w = 14 + fm.horizontalAdvance(text) + 18
            if x and x + w > width:
                rows, x = rows + 1, 0
            x += w
        return rows

    def _fit_height(self) -> None:
        width = max(self.width(), 1)
        self.setFixedHeight(HEAD_H * len(self.head_lines(width)) + STRIP * 2 + GAP * 2
                            + LEGEND_H * self._legend_rows(width) + 4)

    def head_lines(self, width: int) -> list[str]:
        """The header's lines at ``width`` (the tokenizer drawn right of the first): the totals and whose
        window it is on one line where they fit, else whose window on a line of its own (on one line, at a
        1,440 px window it read "(the model of this thread's last…"); a line still too long ends in "…"."""
        u = self._usage
        if u is None:
            return ["No prompt assembled yet."]
        fm = self.fontMetrics()
        room = max(width - fm.horizontalAdvance(f"tokenizer: {u.tokenizer}") - 12, 40)
        totals = f"Context window  {u.summary}" + ("  — OVER THE WINDOW" if u.over else "")
        whole = f"{totals}  · {u.window_owner}"
        if fm.horizontalAdvance(whole) <= room:
            return [whole]
        elide = Qt.TextElideMode.ElideRight
        return [fm.elidedText(totals, elide, room), fm.elidedText(u.window_owner, elide, max(width, 40))]

    def resizeEvent(self, event: object) -> None:  # legend may wrap differently
        self._fit_height()
        super().resizeEvent(event)  # type: ignore[arg-type]

    def paintEvent(self, _event: QPaintEvent) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        text_col = pal.windowText().color()
        dim = pal.placeholderText().color()
        w = self.width()
        self._hits = []
        u = self._usage
        fm = self.fontMetrics()
        y = 0
        if u is None:
            p.setPen(dim)
            p.drawText(0, fm.ascent() + 2, "No prompt assembled yet.")
            return
        # Header: totals and whose window it is on the left (whose window under them where both do not fit),
        # tokenizer right; never wider.
        tok = f"tokenizer: {u.tokenizer}"
        lines = self.head_lines(w)
        for i, line in enumerate(lines):
            p.setPen(text_col if not u.over or i else QColor("#E5534B"))
            p.drawText(0, HEAD_H * i + fm.ascent() + 1, line)
        p.setPen(dim)
        p.drawText(w - fm.horizontalAdvance(tok), fm.ascent() + 1, tok)
        y = HEAD_H * len(lines)
        # Strip 1: the window, to scale.
        self._strip(p, QRectF(0, y, w, STRIP), [(s.source, s.tokens / u.window, s.color) for s in u.segments],
                    free=True)
        y += STRIP + GAP
        # Strip 2: the prompt's composition.
        total = max(sum(s.tokens for s in u.segments), 1)
        self._strip(p, QRectF(0, y, w, STRIP), [(s.source, s.tokens / total, s.color) for s in u.segments],
                    free=False)
        y += STRIP + GAP
        # Legend chips.
        x = 0.0
        for seg, text in zip(u.segments, self.legend_items()):
            cw = 14 + fm.horizontalAdvance(text) + 18
            if x and x + cw > w:
                x, y = 0.0, y + LEGEND_H
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(QColor(seg.color))
            p.drawRoundedRect(QRectF(x, y + 4, 10, 10), 2, 2)
            p.setPen(text_col)
            p.drawText(int(x + 14), int(y + 4 + fm.ascent() - 1), text)
            self._hits.append((QRectF(x, y, cw, LEGEND_H), f"{seg.source}: {seg.tokens:,} tokens"))
            x += cw

    def _strip(self, p: QPainter, rect: QRectF, parts: list[tuple[str, float, str]], *, free: bool) -> None:
        path = QPainterPath()
        path.addRoundedRect(rect, 3, 3)
        p.save()
        p.setClipPath(path)
        # The unused part of the window follows the theme (a fixed dark grey stayed dark in light mode).
        p.fillRect(rect, self.palette().mid().color() if free else self.palette().base().color())
        x = rect.left()
        for source, frac, colour in parts:
            seg_w = max(rect.width() * min(frac, 1.0), 2.0 if frac > 0 else 0.0)
            r = QRectF(x, rect.top(), seg_w, rect.height())
            p.fillRect(r, QColor(colour))
            self._hits.append((r, f"{source}: {frac * 100:.1f}%"))
            x += seg_w
            if x >= rect.right():
                break
        p.restore()

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        pos = event.position()
        for rect, text in self._hits:
            if rect.contains(pos):
                QToolTip.showText(event.globalPosition().toPoint(), text, self)
                return
        QToolTip.hideText()
