"""The header row every pane starts with: a bold title and a dimmer line beside it."""

from __future__ import annotations

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
