"""Keeps a table's columns as wide as its pane on every resize (``studio.logic.column_fit``).

Before this, Replay's context table was ~1,070 px of columns in a ~520 px pane at a 1,500 px window, and
the recall playground's lists ran past their edges at 1,100 and 1,500 px (Status and scores out of
sight): the narrow columns now get what their usual text needs, the wider ones a share of the rest, the
last what is left; a cut cell ends in "…" and its tooltip holds the whole.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QHeaderView, QTableView, QTreeView

from studio.logic.column_fit import fit_columns


FitView = QTableView | QTreeView  # (a tree's columns too: the Traces pane's span tree)


def titles_of(table: FitView) -> dict[str, int]:
    """Each column's title and its (logical) index."""
    model = table.model()
    return {str(model.headerData(c, Qt.Orientation.Horizontal)): c for c in range(model.columnCount())}


def header_of(view: FitView) -> QHeaderView:
    """The column header: a table's horizontal one, a tree's one."""
    return view.horizontalHeader() if isinstance(view, QTableView) else view.header()


class FitToPane(QObject):
    """``samples``: each narrow column's widest usual text (it gets that width); ``shares``: each wider
    column's share of what is left (at least its title and its ``floors`` sample, at most its ``caps``
    sample, when given);
    ``last``: the column that takes the rest (at least its title, or ``rest_sample``, and ``last_share`` of the
    table: asked of the layout too unless ``share_in_least`` is False); ``optional``:
    columns hidden, in this order, while the table cannot hold the others (what they show is said
    elsewhere; settable: what is said elsewhere may change); ``left_out``: columns hidden whatever the width
    (settable: a column that has nothing to say in the table's present mode); ``decorated``: columns that draw
    a swatch before their text (their sample or floor gets the swatch's width as well); ``roomy``: optional
    columns shown only where the shared ones get their ``optional_room`` samples (``column_fit.fit_columns``) and the
    last column its sample's room or ``last_room_share`` of the table, whichever is wider; ``short_floors``:
    (column, sample) pairs that give way first, in order, where even the minima do not fit, each column down to its
    sample (a short form of each of its cells)."""

    def __init__(self, table: FitView, samples: Mapping[str, str], shares: Mapping[str, float], last: str,
                 *, pad: int = 16, caps: Mapping[str, str] | None = None, floors: Mapping[str, str] | None = None,
                 rest_sample: str | None = None, optional: Sequence[str] = (), last_share: float = 0.0,
                 last_least: int = 0, decorated: Sequence[str] = (), left_out: Sequence[str] = (),
                 share_in_least: bool = True, optional_room: Mapping[str, str] | None = None,
                 roomy: Sequence[str] = (), last_room_share: float = 0.0,
                 short_floors: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(table)
        self.table = table
        self.samples, self.shares, self.last, self.pad = dict(samples), dict(shares), last, pad
        self.caps, self.floors = dict(caps or {}), dict(floors or {})
        self.rest_sample, self.optional = rest_sample, tuple(optional)
        # The last column's least also as a share of the table's width and in pixels (the recall lists'
        # message: at least half of its list, at least ``last_least``): the others give way first.
        self.last_share, self.last_least = last_share, last_least
        # False: the share is taken where the table has room, never asked of the layout (``least``).
        self.share_in_least = share_in_least
        # An optional column of ``roomy`` shows only where each shared column has its ``optional_room`` sample too.
        self.optional_room, self.roomy = dict(optional_room or {}), tuple(roomy)
        # ... and the last column at least this share of the table as its room (its sample's, whichever is wider).
        self.last_room_share = last_room_share
        self.decorated = tuple(decorated)
        self.left_out = tuple(left_out)
        # Where even the minima do not fit, these columns (shared, or the last) give way first, in this order, each
        # down to its sample (a short form of each of its cells reads whole there: ``short_forms``; a column may come
        # again with a shorter one), before any other column is cut (settable).
        self.short_floors = list(short_floors)
        table.setTextElideMode(Qt.TextElideMode.ElideRight)
        header = header_of(table)
        header.setStretchLastSection(False)  # (a stretched section never went below 100 px: set here instead)
        for column in titles_of(table).values():  # (a section sized to its contents ignored the widths set)
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
        table.viewport().installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if event.type() == QEvent.Type.Resize:
            self.fit()
        return False

    def _widths(self) -> tuple[dict[str, int], dict[str, int], dict[str, int], int]:
        """The fixed columns' widths, the shared ones' minima and caps, and the last column's least."""
        metrics, titles = self.table.fontMetrics(), self._titles()
        swatch = self.table.iconSize().width() if self.table.iconSize().isValid() else 0
        swatch = max(swatch, self.table.style().pixelMetric(self.table.style().PixelMetric.PM_SmallIconSize)) + 6

        def pad_of(title: str) -> int:
            return self.pad + (swatch if title in self.decorated else 0)

        bold = QFont(header_of(self.table).font())
        bold.setWeight(QFont.Weight.DemiBold)  # (the themes draw the headings at weight 600)
        heading = QFontMetrics(bold)
        fixed = {t: max(metrics.horizontalAdvance(sample), heading.horizontalAdvance(t)) + pad_of(t)
                 for t, sample in self.samples.items() if t in titles}
        minimum = {t: max(heading.horizontalAdvance(t), metrics.horizontalAdvance(self.floors.get(t, ""))) + pad_of(t)
                   for t in self.shares}
        # (never below the column's minimum: a floor that grew with the rows, Replay's widest source, wins)
        caps = {t: max(metrics.horizontalAdvance(sample) + pad_of(t), minimum.get(t, 0))
                for t, sample in self.caps.items()}
        rest = metrics.horizontalAdvance(self.rest_sample or self.last) + pad_of(self.last)  # the last column's least
        return fixed, minimum, caps, rest

    def _titles(self) -> dict[str, int]:
        """The columns that are fitted: every one but those ``left_out``."""
        return {t: c for t, c in titles_of(self.table).items() if t not in self.left_out}

    def least(self) -> int:
        """The narrowest the table can be without scrolling sideways (the optional columns left out), its
        frame and vertical scroll bar included."""
        fixed, minimum, _caps, rest = self._widths()
        others = sum(w for t, w in {**fixed, **minimum}.items() if t not in self.optional)
        last = max(rest, self.last_least)
        inner = others + last
        if 0 < self.last_share < 1 and self.share_in_least:  # (the last column's share is at least ``last``, the
            # others' share ``others``)
            inner = max(math.ceil(last / self.last_share), math.ceil(others / (1 - self.last_share)))
        chrome = self.table.width() - self.table.viewport().width() if self.table.isVisible() else 0
        chrome = max(chrome, 2 * self.table.frameWidth() + self.table.verticalScrollBar().sizeHint().width())
        return inner + chrome

    def hold_least(self) -> None:
        """The table asks ``least`` as its least width: a layout or splitter gives it that (a stacking splitter
        stacks first) rather than cut its columns and scroll it sideways (Observations' generations at a
        900 px window: Created cut, "refle…", on a ~220 px side)."""
        self.table.setMinimumWidth(self.least())

    def fit(self) -> None:
        table = self.table
        metrics, pad = table.fontMetrics(), self.pad
        titles = self._titles()
        fixed, minimum, caps, rest = self._widths()
        header_of(table).setMinimumSectionSize(min(rest, metrics.horizontalAdvance("#") + pad))
        total = table.viewport().width()
        least = max(rest, self.last_least)
        rest = max(least, int(total * self.last_share))
        optional = [t for t in self.optional if t in titles]
        room = {t: metrics.horizontalAdvance(sample) + pad for t, sample in self.optional_room.items()}
        if self.last_room_share:
            room[self.last] = max(room.get(self.last, 0), int(total * self.last_room_share))
        widths = fit_columns(total, fixed, self.shares, minimum, last=self.last, rest=rest,
                             maximum=caps, optional=optional, room=room, roomy=self.roomy)
        over = sum(widths.values()) - total
        if over > 0 and rest > least:  # (the last column's share gives way, down to its least, before the edge)
            widths = fit_columns(total, fixed, self.shares, minimum, last=self.last, rest=max(least, rest - over),
                                 maximum=caps, optional=optional)
        over = sum(widths.values()) - total
        for title, sample in self.short_floors:  # (Replay's reasons at a 900 px window, before the source)
            if title in widths and over > 0:
                least_here = max(metrics.horizontalAdvance(sample) + pad, metrics.horizontalAdvance("Mm…") + pad)
                give = min(over, max(0, widths[title] - least_here))
                widths[title] -= give
                over -= give
        if over > 0:  # even the minima don't fit (a larger font): the shared columns, then the last one (not
            # below its share of the table nor its least in pixels), give way to a few characters, ending in "…"
            floor = metrics.horizontalAdvance("Mm…") + pad
            floors = {t: floor for t in self.shares}
            floors[self.last] = max(floor, self.last_least, int(total * self.last_share))
            # Then the fixed columns, widest first, down to a few characters: a table narrower than its least
            # (Checks at a 720 px window, 1 px) still ends at its edge, with no sideways scroll bar.
            fixed_order = sorted((t for t in fixed if t in widths), key=lambda t: -widths[t])
            floors.update({t: min(floor, widths[t]) for t in fixed_order})
            for title in (*self.shares, self.last, *fixed_order):
                if title in widths and over > 0:
                    give = min(over, max(0, widths[title] - floors[title]))
                    widths[title] -= give
                    over -= give
        for title, column in titles_of(table).items():
            hidden = title not in widths
            if table.isColumnHidden(column) != hidden:
                table.setColumnHidden(column, hidden)
            if not hidden:
                table.setColumnWidth(column, widths[title])
