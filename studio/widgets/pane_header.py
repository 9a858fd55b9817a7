"""What every pane is built from: its layout, header row and captions, and the guard that drops
worker results arriving after the pane was closed.

Text that comes from the data (titles, ids, status lines) sits in *elastic* labels: their text is
cut (or wrapped) to the space there is, never the reverse. A plain QLabel asks for its whole text's
width, and a long line of message ids once pushed the window past the screen's edge.
"""

from __future__ import annotations

from typing import Any, Callable

import shiboken6
from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from studio.widgets.flow_layout import FlowLayout

ELASTIC_MIN_WIDTH = 40


def pane_layout(pane: QWidget) -> QVBoxLayout:
    """The pane's root layout, with the margins and spacing all panes share."""
    root = QVBoxLayout(pane)
    root.setContentsMargins(10, 8, 10, 8)
    root.setSpacing(6)
    return root


def pane_header(title: str, subtitle: QLabel | None = None) -> tuple[QHBoxLayout, QLabel, QLabel]:
    """(row, title label, subtitle label); callers add their buttons to the row."""
    from studio.widgets.elided_label import ElidedLabel

    row = QHBoxLayout()
    # Titles and subtitles name threads, resources and files (user data): shown as typed, never as markup,
    # and one that does not fit ends in "…" (whole in the tooltip), never cut with no mark.
    title_label = ElidedLabel(title)
    font = title_label.font()
    font.setPointSize(font.pointSize() + 2)
    font.setBold(True)
    title_label.setFont(font)
    if subtitle is None:
        subtitle = ElidedLabel("")
        subtitle.setStyleSheet("color: palette(placeholder-text);")
    elastic(title_label)
    elastic(subtitle)
    row.addWidget(title_label)
    row.addWidget(subtitle, 1)
    return row, title_label, subtitle


class _TitleBox(QWidget):
    """A pane's title and subtitle (``head``) as one item of ``header_bar``'s flow: it asks the title's whole
    text and ``beside``'s (else an elastic subtitle's least), so the flow puts the tools below before it cuts
    the title."""

    def __init__(self, head: QHBoxLayout, title: QLabel, beside: QLabel | None) -> None:
        super().__init__()
        head.setContentsMargins(0, 0, 0, 0)  # (a layout on a widget has the style's margins: none, as in the pane's)
        self.setLayout(head)
        self._title, self._beside = title, beside

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        layout = self.layout()
        spacing = max(layout.spacing(), 0) if layout is not None else 0
        beside = self._beside.sizeHint().width() if self._beside is not None else ELASTIC_MIN_WIDTH
        return QSize(self._title.sizeHint().width() + spacing + beside, super().sizeHint().height())


def header_bar(head: QHBoxLayout, title: QLabel, tools: QWidget, beside: QLabel | None = None) -> QWidget:
    """``pane_header``'s row and the pane's ``tools`` (a widget beside it) as a flow: on one row where the
    title's whole text (and ``beside``'s, a subtitle to keep whole) and the tools fit, the subtitle taking
    what is left; else the tools go on the row below. In one row at a 720 px window the title was elided
    to "Replay ·…", the tools keeping their width."""
    bar = QWidget()
    flow = FlowLayout(bar)
    flow.setContentsMargins(0, 0, 0, 0)
    flow.add(_TitleBox(head, title, beside), 1)
    flow.addWidget(tools)
    return bar


def caption(text: str) -> QLabel:
    """A bold section caption; one too long for its place ends in "…" (whole in the tooltip)."""
    from studio.widgets.elided_label import ElidedLabel

    label = ElidedLabel(text)
    label.setObjectName("caption")
    font = label.font()
    font.setBold(True)
    label.setFont(font)
    return elastic(label)


def elastic(label: QLabel, *, wrap: bool = False) -> QLabel:
    """Make ``label`` take the width it is given instead of its text's width (``wrap``: wrap the
    text onto more lines instead of cutting it). Returns the label.

    An explicit minimum width replaces the text's width as the layout's minimum, while the size hint
    (what the label gets when there is room) stays the whole text."""
    label.setMinimumWidth(ELASTIC_MIN_WIDTH)
    if wrap:
        label.setWordWrap(True)
    return label


def status_label(*, wrap: bool = False) -> QLabel:
    """The dim one-line status at the bottom of a pane; cut with "…" (whole in the tooltip). ``wrap``: a status that
    says what to do next (Working Memory's after a save) wraps onto more lines instead, never cut."""
    from studio.widgets.elided_label import ElidedLabel
    from studio.widgets.fitted_label import FittedLabel

    label: QLabel = FittedLabel("") if wrap else ElidedLabel("")
    label.setTextFormat(Qt.TextFormat.PlainText)  # (it names data: an agent, a version)
    label.setStyleSheet("color: palette(placeholder-text);")
    return elastic(label)


def alive_only(widget: QWidget, fn: Callable[..., Any]) -> Callable[..., None]:
    """Wrap a worker callback: results can arrive after the widget was closed; then they are dropped."""
    def call(*args: Any) -> None:
        if shiboken6.isValid(widget):
            fn(*args)
    return call
