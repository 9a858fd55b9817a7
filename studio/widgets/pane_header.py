"""What every pane is built from: its layout, header row and captions, and the guard that drops
worker results arriving after the pane was closed."""

from __future__ import annotations

from typing import Any, Callable

import shiboken6
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget


def pane_layout(pane: QWidget) -> QVBoxLayout:
    """The pane's root layout, with the margins and spacing all panes share."""
    root = QVBoxLayout(pane)
    root.setContentsMargins(10, 8, 10, 8)
    root.setSpacing(6)
    return root


def pane_header(title: str, subtitle: QLabel | None = None) -> tuple[QHBoxLayout, QLabel, QLabel]:
    """(row, title label, subtitle label); callers add their buttons to the row."""
    row = QHBoxLayout()
    title_label = QLabel(title)
    font = title_label.font()
    font.setPointSize(font.pointSize() + 2)
    font.setBold(True)
    title_label.setFont(font)
    if subtitle is None:
        subtitle = QLabel("")
        subtitle.setStyleSheet("color: palette(placeholder-text);")
    row.addWidget(title_label)
    row.addWidget(subtitle, 1)
    return row, title_label, subtitle


def caption(text: str) -> QLabel:
    """A bold section caption."""
    label = QLabel(text)
    label.setObjectName("caption")
    font = label.font()
    font.setBold(True)
    label.setFont(font)
    return label


def alive_only(widget: QWidget, fn: Callable[..., Any]) -> Callable[..., None]:
    """Wrap a worker callback: results can arrive after the widget was closed; then they are dropped."""
    def call(*args: Any) -> None:
        if shiboken6.isValid(widget):
            fn(*args)
    return call
