"""Keeps every tab of a tab widget in sight: while the full titles do not fit its width, the tabs show
shorter ones with less padding, and a title still too long ends in "…"; each tab's tooltip holds its
full title.

Qt's own answer to a crowded tab bar is a pair of scroll arrows, and the tabs past them are out of
sight: at a 1,100 px window the Traces pane's span detail showed "Messages, Input, Outp" and hid
Attributes, Error and Span JSON, and Replay's request side hid Tokens even at 1,440 px.
"""

from __future__ import annotations

from typing import Sequence

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QTabWidget


class FittedTabs(QObject):
    """``titles``: for each tab in order, its full title, its short title, and (optionally) its tooltip
    (the full title when not given). Tabs added later (a main window's, on each database opened) are
    fitted by calling ``fit()``."""

    def __init__(self, tabs: QTabWidget, titles: Sequence[tuple[str, str] | tuple[str, str, str]], *,
                 scroll: bool = False) -> None:
        """``scroll``: when even the short titles do not fit, the tab bar's scroll arrows (a main window's
        tabs: whole titles); otherwise the titles end in "…" (a pane's few tabs: all in sight)."""
        super().__init__(tabs)
        self.tabs = tabs
        self.titles = [(t[0], t[1]) for t in titles]
        self.tips = [t[2] if len(t) > 2 else t[0] for t in titles]
        self.short = False
        self._pads: list[int] = []
        if not scroll:
            tabs.setUsesScrollButtons(False)  # (a tab past the arrows was out of sight)
            tabs.setElideMode(Qt.TextElideMode.ElideRight)  # (the last resort: a cut title ends in "…")
        tabs.installEventFilter(self)
        self.fit()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if event.type() in (QEvent.Type.Resize, QEvent.Type.Show, QEvent.Type.StyleChange,
                            QEvent.Type.FontChange):
            self.fit()
        return False

    def needed(self, short: bool) -> int:
        """The tab bar's width with the full (or the short) titles, none cut, at the theme's own padding."""
        bar = self.tabs.tabBar()
        metrics = bar.fontMetrics()
        count = min(len(self.titles), bar.count())
        if not self.short or len(self._pads) != count:  # (measured with the theme's padding)
            self._pads = [max(0, bar.tabSizeHint(i).width() - metrics.horizontalAdvance(bar.tabText(i)))
                          for i in range(count)]
        return sum(self._pads[i] + metrics.horizontalAdvance(brief if short else full)
                   for i, (full, brief) in enumerate(self.titles[:count]) if bar.isTabVisible(i))

    def room(self) -> int:
        """The width the tab bar may take: the tab widget's, less its corner widgets."""
        width = self.tabs.width()
        for corner in (Qt.Corner.TopLeftCorner, Qt.Corner.TopRightCorner):
            widget = self.tabs.cornerWidget(corner)
            if widget is not None and widget.isVisible():
                width -= widget.width()
        return width

    def fit(self) -> None:
        short = self.needed(short=False) > self.room()
        bar = self.tabs.tabBar()
        if short != self.short:  # the short titles also come with less padding (the themes' "compact" tabs)
            self.short = short
            bar.setProperty("compact", short)
            bar.style().unpolish(bar)
            bar.style().polish(bar)
        for index, (full, brief) in enumerate(self.titles[:bar.count()]):
            title = brief if short else full
            if bar.tabText(index) != title:
                bar.setTabText(index, title)
            if bar.tabToolTip(index) != self.tips[index]:
                bar.setTabToolTip(index, self.tips[index])


__all__ = ["FittedTabs"]
