"""Content that keeps its least size and scrolls where its window is smaller: a pane in a short main
window (900 x 700, or 1,440 x 900 at a scale of 2: 720 x 450), a dialog on a small screen.

``QScrollArea`` alone gave a content whose layout has a height for its width (a wrapping label: nearly
every pane and dialog) its preferred height, not its least: Replay took 1,171 px of a 770 px page and
scrolled where it fits. ``LeastSizeHolder`` asks the content's least size only, so where the content fits
it fills the view exactly as it did without a scroll area, and scrolls only below its least size.
"""

from __future__ import annotations

import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent, QObject, QSize, Qt, QTimer
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QDialog, QFrame, QScrollArea, QSizePolicy, QTabWidget, QVBoxLayout, QWidget

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

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if isinstance(watched, QWidget) and event.type() in (QEvent.Type.Resize, QEvent.Type.LayoutRequest):
            _fit_least_height(watched)
        return False


def _fit_least_height(widget: QWidget) -> None:
    layout = widget.layout()
    if layout is None or widget.width() <= 0:
        return
    hint = widget.minimumSizeHint().height()  # (its layout's least height at its least width)
    at_width = layout.minimumHeightForWidth(widget.width()) if layout.hasHeightForWidth() else 0
    least = at_width if 0 < at_width < hint else 0  # (0: the hint, as if never set)
    if widget.minimumHeight() != least:
        widget.setMinimumHeight(least)


def least_height_at_width(widget: QWidget) -> None:
    """``widget`` (a part of a vertical splitter) asks, as its least height, what its layout needs at the
    width it has, never more than its minimum size hint. A splitter asks its parts' minimum size hints,
    which are taken at their least widths, where their wrapped labels need the most lines, and by a wrapped
    label's preferred height (a label whose size policy cannot shrink): Replay's context table and its
    fragment asked 48 px more than they need at 1,100 x 800, and the pane's page scrolled there."""
    watcher = _LeastAtWidth(widget)
    widget.installEventFilter(watcher)
    _fit_least_height(widget)


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


__all__ = ["FitScroll", "LeastSizeHolder", "dialog_body", "least_height_at_width", "least_of_page_shown", "least_size"]
