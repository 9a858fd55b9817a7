"""Accessible names: what a screen reader says for a control.

Qt names a button by its text, but an input, a list or a text view beside a plain ``QLabel`` has no name
of its own (the label is another widget), and a combo box is named by its current value: a screen reader
read "edit text", "spin box 4" or "resource, combo box". ``label_for`` makes the label the control's buddy
and gives the control the label's words as its name; ``named`` names a control that has no label."""

from __future__ import annotations

from typing import TypeVar

from PySide6.QtWidgets import QLabel, QWidget

W = TypeVar("W", bound=QWidget)


def named(widget: W, name: str) -> W:
    widget.setAccessibleName(name)
    return widget


def label_for(text: str, widget: QWidget, name: str | None = None) -> QLabel:
    """A label for ``widget`` (its buddy); the widget's accessible name is ``name`` or the label's text
    (unless it has one already)."""
    label = QLabel(text)
    label.setBuddy(widget)
    if not widget.accessibleName():
        widget.setAccessibleName(name or text.replace("&", ""))
    return label
