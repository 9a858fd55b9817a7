"""Content that keeps its least size and scrolls where its window is smaller: a pane in a short main
window (900 x 700, or 1,440 x 900 at a scale of 2: 720 x 450), a dialog on a small screen.

``QScrollArea`` alone gave a content whose layout has a height for its width (a wrapping label: nearly
every pane and dialog) its preferred height, not its least: Replay took 1,171 px of a 770 px page and
scrolled where it fits. ``LeastSizeHolder`` asks the content's least size only, so where the content fits
it fills the view exactly as it did without a scroll area, and scrolls only below its least size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent, QObject, QSize, Qt, QTimer
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QDialog, QFrame, QScrollArea, QSizePolicy, QSplitter, QTabWidget, QVBoxLayout, QWidget

TITLE_BAR = 40  # px a window manager's title bar and frame may take from a screen's available height


def least_size(widget: QWidget) -> QSize:
    """What a layout gives ``widget`` at least: its minimum size where set, else its minimum size hint."""
    least, hint = widget.minimumSize(), widget.minimumSizeHint()
    return QSize(least.width() or max(hint.width(), 0), least.height() or max(hint.height(), 0))


class LeastSizeHolder(QWidget):
    """What a ``FitScroll`` scrolls: ``content`` laid over the whole holder, the holder asking the
    content's least size (no height for a width, so the scroll area never sizes it to its preferred)."""

    def __init__(self, content: QWidget, scroll: QScrollArea) -> None:
        super().__init__()
        self.content, self._scroll = content, scroll
        content.setParent(self)
        content.installEventFilter(self)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        least = least_size(self.content)
        layout = self.content.layout()
        width = self._scroll.width()  # (frameless: the view's width without a scroll bar, which fitting avoids)
        if (layout is not None and layout.hasHeightForWidth() and not self.content.minimumHeight()
                and width > least.width()):
            # A layout's least height is taken at its least width, where its wrapped labels need the most lines
            # (Replay's page asked 83 px more than at the width it has, and scrolled at 1,100 x 800): at a wider
            # view, the least height for that width; where that is more than the view, at the width left
            # beside the scroll bar it then shows (narrower, a label may need a line more).
            at_width = layout.minimumHeightForWidth(width)
            bar = self._scroll.verticalScrollBar().sizeHint().width()
            if at_width > self._scroll.height() and width - bar > least.width():
                at_width = max(at_width, layout.minimumHeightForWidth(width - bar))
            if 0 < at_width < least.height():
                least.setHeight(at_width)
        return least

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        return self.content.sizeHint().expandedTo(self.minimumSizeHint())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self.content.setGeometry(self.rect())
        QTimer.singleShot(0, self._follow)  # (a least height can follow the width given: a flow of options)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if watched is self.content and event.type() == QEvent.Type.LayoutRequest:
            self._resize_again()  # the content's least size may have changed
            QTimer.singleShot(0, self._follow)  # (and once the content has laid itself out)
        return False

    def _follow(self) -> None:
        if shiboken6.isValid(self) and not self.size().expandedTo(self.minimumSizeHint()) == self.size():
            self._resize_again()

    def _resize_again(self) -> None:
        self.updateGeometry()
        QCoreApplication.postEvent(self._scroll, QEvent(QEvent.Type.LayoutRequest))  # (it sizes the holder)


class FitScroll(QScrollArea):
    """A frameless scroll area around one content (``hold``). It asks the content's own size (a plain
    ``QScrollArea`` caps its size hint at 36 x 24 lines); ``screen_bound``: its least size is at most the
    screen's available area (a dialog), so a dialog taller than a small screen scrolls inside instead."""

    def __init__(self, parent: QWidget | None = None, *, screen_bound: bool = False) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidgetResizable(True)
        # Never a stop of its own for Tab, nor the first focus of a dialog (the Forget dialog's table lost
        # its first focus to it); Tab still brings the next control into sight (``QScrollArea``).
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self._screen_bound = screen_bound

    def hold(self, content: QWidget) -> LeastSizeHolder:
        """Scroll ``content``; each tab widget in it asks the least height of the page it shows only."""
        for tabs in content.findChildren(QTabWidget):
            least_of_page_shown(tabs)
        holder = LeastSizeHolder(content, self)
        self.setWidget(holder)
        holder.show()  # (added to a scroll area on screen, a widget stays hidden until shown)
        return holder

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        holder = self.widget()
        return holder.sizeHint() if holder is not None else super().sizeHint()

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        holder = self.widget()
        if holder is None or not self._screen_bound:
            return super().minimumSizeHint()
        least = holder.minimumSizeHint()
        room = self.screen().availableGeometry().size() - QSize(0, TITLE_BAR)
        bar = self.verticalScrollBar().sizeHint().width()
        # (scrolled, it needs a scroll bar's width beside the content's least width)
        return QSize(min(least.width() + (bar if least.height() > room.height() else 0), room.width()),
                     min(least.height(), room.height()))


class _ScreenBound(QObject):
    """Keeps a dialog inside its screen's available area when it is shown (a size asked in code, 760 x 480,
    was taller than a 720 x 450 screen: its buttons were off the screen)."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if isinstance(watched, QDialog) and event.type() == QEvent.Type.Show:
            room = watched.screen().availableGeometry().size() - QSize(0, TITLE_BAR)
            if watched.width() > room.width() or watched.height() > room.height():
                watched.resize(watched.size().boundedTo(room))
        return False


class _LeastAtWidth(QObject):
    """``least_height_at_width``'s watcher: sets its widget's least height again when the widget's width
    or its content changes."""

    def __init__(self, widget: QWidget, grow: bool, shrink: bool = True) -> None:
        super().__init__(widget)
        self.grow, self.shrink = grow, shrink

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if isinstance(watched, QWidget) and event.type() in (QEvent.Type.Resize, QEvent.Type.LayoutRequest):
            _fit_least_height(watched, self.grow, self.shrink)
        return False


def _fit_least_height(widget: QWidget, grow: bool = False, shrink: bool = True) -> None:
    layout = widget.layout()
    if layout is None or widget.width() <= 0:
        return
    hint = widget.minimumSizeHint().height()  # (its layout's least height at its least width)
    at_width = layout.minimumHeightForWidth(widget.width()) if layout.hasHeightForWidth() else 0
    wanted = 0 < at_width and ((grow and at_width > hint) or (shrink and at_width < hint))
    least = at_width if wanted else 0  # (0: the hint, as if never set)
    if widget.minimumHeight() != least:
        widget.setMinimumHeight(least)


def least_height_at_width(widget: QWidget, *, grow: bool = False, shrink: bool = True) -> None:
    """``widget`` (a part of a vertical splitter) asks, as its least height, what its layout needs at the
    width it has, never more than its minimum size hint. A splitter asks its parts' minimum size hints,
    which are taken at their least widths, where their wrapped labels need the most lines, and by a wrapped
    label's preferred height (a label whose size policy cannot shrink): Replay's context table and its
    fragment asked 48 px more than they need at 1,100 x 800, and the pane's page scrolled there. ``grow``: also
    more than the hint where its layout needs more at that width (wrapped labels over a table: the hint counts
    a wrapped label's least lines, and the table below them was squeezed to its header). ``shrink`` False: never
    less than the hint (a part whose content was squeezed below it)."""
    watcher = _LeastAtWidth(widget, grow, shrink)
    widget.installEventFilter(watcher)
    _fit_least_height(widget, grow, shrink)


class _StackWhenNarrow(QObject):
    """``stack_when_narrow``'s watcher."""

    def __init__(self, split: QSplitter, share: int, needs: Mapping[int, Callable[[], int]],
                 stacked: Callable[[bool], None] | None) -> None:
        super().__init__(split)
        self.split, self.share, self.needs, self.stacked = split, share, dict(needs), stacked

    def side_by_side_least(self) -> int:
        """The width the parts need side by side: their least widths and the handles between them."""
        shown = [(i, p) for i, p in enumerate(self.split.widget(i) for i in range(self.split.count()))
                 if p is not None and not p.isHidden()]
        widths = [self.needs[i]() if i in self.needs else least_size(p).width() for i, p in shown]
        return sum(widths) + self.split.handleWidth() * max(len(shown) - 1, 0)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if watched is self.split and isinstance(event, QResizeEvent):
            self.follow(event.size().width(), event.size().height())
        elif watched is self.split and event.type() == QEvent.Type.LayoutRequest:
            self._fit_least()  # (a part's least size changed: what it loaded, its width)
        return False

    def follow(self, width: int, height: int) -> None:
        split = self.split
        if width <= 0:
            return
        want = Qt.Orientation.Horizontal if width >= self.side_by_side_least() else Qt.Orientation.Vertical
        if want != split.orientation():
            split.setOrientation(want)
            if self.stacked is not None:  # (first: a part's least height stacked counts in the sizes below)
                self.stacked(want == Qt.Orientation.Vertical)
            whole = width if want == Qt.Orientation.Horizontal else height
            first = whole * self.share // 100
            split.setSizes([first, max(whole - first, 0)])
        self._fit_least()

    def _fit_least(self) -> None:
        """Its least width is its widest part's. Stacked, its least height is its parts' one above the other, said
        outright: a page's least height is taken at the width it has (``LeastSizeHolder``), where a layout counted
        less than that and the stacked parts were cut (the Observations pane's buffer at 720 px)."""
        split = self.split
        parts = [split.widget(i) for i in range(split.count())]
        shown = [p for p in parts if p is not None and not p.isHidden()]
        if split.orientation() == Qt.Orientation.Vertical:
            least = sum(least_size(p).height() for p in shown) + split.handleWidth() * max(len(shown) - 1, 0)
        else:
            least = 0
        if split.minimumHeight() != least:
            split.setMinimumHeight(least)
        # Its least width is its widest part's, stacked or not: side by side it asked its parts' widths added
        # up, a page scrolls sideways to give it that, and it then never had less to stack at (the Observations
        # pane made narrow from a wide window, 720 x 800, read sideways with its parts side by side).
        widest = max((least_size(p).width() for p in shown), default=0)
        if split.minimumWidth() != widest:
            split.setMinimumWidth(widest)


def stack_when_narrow(split: QSplitter, share: int = 50, needs: Mapping[int, Callable[[], int]] | None = None,
                      stacked: Callable[[bool], None] | None = None) -> None:
    """``split`` (horizontal) puts its parts one under the other while it is narrower than their least widths
    side by side, and side by side again once it is wide enough (``share``: the first part's percentage of
    the length after a switch). Side by side in a narrower splitter, each part had less than its least width
    and was cut at its edge (the Traces pane's span tree at a 900 px window: its Timeline out of sight); Replay's
    turn view stacks in the same way. Stacked, the page scrolls below the parts' least heights. ``needs``: the
    width side by side of a part (by index) whose least width says less than it needs (a scroll area whose
    content scrolls up and down only), asked at each resize; none of it changes a least size. The splitter's
    least width is its widest part's, side by side too (it stacks rather than have a page scroll sideways to give
    it its parts' widths added up). ``stacked``: told
    True when the parts go one under the other and False when they go side by side again, before the sizes
    are shared out (a pane asks more rows of a list stacked, where the list no longer has the whole height:
    the Traces pane's span tree showed 3 rows at 900 x 800)."""
    watcher = _StackWhenNarrow(split, share, needs or {}, stacked)
    split.installEventFilter(watcher)
    watcher._fit_least()  # (now: a pane's least width is taken when it is built, before its first resize)
    split.setProperty("stacksWhenNarrow", True)  # (followed from its first resize: the sizes set in code stay)


def least_of_page_shown(tabs: QTabWidget) -> None:
    """``tabs`` asks the least height of the page shown only, not of the tallest page (a tab widget's pages
    are stacked, and a stack asks its tallest page's least height): Replay's What-If page made its pane
    230 px taller than a 900 px window on every tab, so the pane scrolled where the Turn tab fits."""
    policies: dict[int, QSizePolicy.Policy] = {}

    def follow(_index: int = -1) -> None:
        for i in range(tabs.count()):
            page = tabs.widget(i)
            if page is None:
                continue
            policy = page.sizePolicy()
            key = id(page)
            if key not in policies:
                policies[key] = policy.verticalPolicy()
            policy.setVerticalPolicy(policies[key] if i == tabs.currentIndex() else QSizePolicy.Policy.Ignored)
            page.setSizePolicy(policy)

    tabs.currentChanged.connect(follow)
    follow()


class SideWidth(QObject):
    """A horizontal splitter's first part (the main window's thread list) sized to the splitter's width: at
    least ``least_share`` of it (between ``floor`` and ``most_least`` px), and the width the user wants (the
    ``wanted`` px it starts at, or where they last dragged it) while that is at most ``share`` of it. A fixed
    least of 340 px and a splitter that keeps its first part's size left a 720 px window's panes ~320 px,
    cut sideways."""

    def __init__(self, split: QSplitter, *, wanted: int, most_least: int, floor: int, least_share: float,
                 share: float) -> None:
        super().__init__(split)
        self.split, self.wanted = split, wanted
        self.most_least, self.floor, self.least_share, self.share = most_least, floor, least_share, share
        split.splitterMoved.connect(self._dragged)  # (a user's drag only: ``setSizes`` does not emit it)
        split.installEventFilter(self)
        self.fit()

    def least(self, width: int) -> int:
        return min(self.most_least, max(self.floor, int(width * self.least_share)))

    def width_at(self, width: int) -> int:
        """The first part's width in a splitter ``width`` px wide."""
        return min(self.wanted, max(self.least(width), int(width * self.share)))

    def _dragged(self, _pos: int, _index: int) -> None:
        first = self.split.widget(0)
        if first is not None:
            self.wanted = first.width()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if watched is self.split and event.type() == QEvent.Type.Resize:
            self.fit()
        return False

    def fit(self) -> None:
        split, width = self.split, self.split.width()
        first = split.widget(0)
        if first is None or split.count() < 2 or width <= 0:
            return
        first.setMinimumWidth(self.least(width))
        want = self.width_at(width)
        if first.width() != want:
            rest = max(width - want - split.handleWidth(), 0)
            split.setSizes([want, rest, *[0] * (split.count() - 2)])


def dialog_body(dialog: QDialog) -> QWidget:
    """The widget to give ``dialog``'s layout (``QVBoxLayout(dialog_body(self))``): the dialog shows it
    in a ``FitScroll`` bound to the screen, and is kept inside its screen when shown. Where the dialog
    fits, it looks and sizes as it did with the layout on itself."""
    outer = QVBoxLayout(dialog)
    # A layout on a window has wider margins than one on a child widget (the style's): the difference
    # goes around the scroll area, so the content sits where it sat with the layout on the dialog.
    window = outer.contentsMargins()
    probe = QWidget(dialog)
    child = QVBoxLayout(probe).contentsMargins()
    probe.deleteLater()
    outer.setContentsMargins(max(window.left() - child.left(), 0), max(window.top() - child.top(), 0),
                             max(window.right() - child.right(), 0), max(window.bottom() - child.bottom(), 0))
    outer.setSpacing(0)
    scroll = FitScroll(dialog, screen_bound=True)
    scroll.setObjectName("dialogScroll")
    body = QWidget()
    body.setObjectName("dialogBody")
    scroll.hold(body)
    outer.addWidget(scroll)
    bound = _ScreenBound(dialog)
    dialog.installEventFilter(bound)
    return body


__all__ = ["FitScroll", "LeastSizeHolder", "SideWidth", "dialog_body", "least_height_at_width", "least_of_page_shown", "least_size",
           "stack_when_narrow"]
