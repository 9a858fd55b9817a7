"""The room an item view's cell gives its text, as the style draws it.

A delegate that fits a cell's text before Qt draws it (cut each line, pick a shorter form, fit a label)
needs the width the text is drawn in: the style's text rectangle less the margin it keeps on either side.
"""

from __future__ import annotations

from PySide6.QtWidgets import QApplication, QStyle, QStyleOptionViewItem


def text_room(option: QStyleOptionViewItem) -> int:
    """The width ``option``'s text is drawn in (its style's ``SE_ItemViewItemText`` rectangle, less the focus
    frame's margin and a pixel on either side, as ``QCommonStyle`` draws an item's text)."""
    widget = option.widget
    style = widget.style() if widget is not None else QApplication.style()
    room = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, option, widget).width()
    return room - 2 * (style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, widget) + 1)


__all__ = ["text_room"]
