"""Table cells drawn in the longest of their forms that fits the column, the whole on hover.

Replay's context table at a 900 px window has ~530 px for eight columns: the reason "observed by
observational memory" was cut to "observed by ob…", the stored record "record …303fa4c0" to
"record …303f…" (its distinguishing end gone). A cell whose model gives shorter forms of its text
(``record_table.SHORT_ROLE``, each made of the text's own words: ``replay_layout.REASON_SHORT``) is drawn
here in the first form that fits whole: its text where it fits, else the most telling shorter form that
does, else the shortest cut with "…". The model's text, its tooltip and what a screen reader reads stay
the whole text.
"""

from __future__ import annotations

from typing import Callable, Sequence

from PySide6.QtCore import QModelIndex, QPersistentModelIndex
from PySide6.QtWidgets import QAbstractItemView, QStyledItemDelegate, QStyleOptionViewItem

from studio.widgets.item_text import text_room
from studio.widgets.record_table import SHORT_ROLE

_Index = QModelIndex | QPersistentModelIndex


def fitting_form(forms: Sequence[str], room: int, advance: Callable[[str], int]) -> str:
    """The first of ``forms`` (the whole text first) ``room`` px hold whole, else the last one."""
    return next((f for f in forms if advance(f) <= room), forms[-1])


class ShortFormDelegate(QStyledItemDelegate):
    def initStyleOption(self, option: QStyleOptionViewItem, index: _Index) -> None:  # noqa: N802 - Qt's name
        super().initStyleOption(option, index)
        forms = index.data(SHORT_ROLE)
        if not forms or not option.text:
            return
        option.text = fitting_form((option.text, *forms), text_room(option), option.fontMetrics.horizontalAdvance)

    def shown_text(self, view: QAbstractItemView, index: _Index) -> str:
        """The text drawn in ``index``'s cell of ``view`` (before Qt cuts what still does not fit with "…")."""
        option = QStyleOptionViewItem()
        view.initViewItemOption(option)
        option.rect = view.visualRect(index)
        self.initStyleOption(option, index)
        return option.text


def draw_short_forms(view: QAbstractItemView) -> ShortFormDelegate:
    """Give ``view`` the delegate (its cells without shorter forms are drawn as before)."""
    delegate = ShortFormDelegate(view)
    view.setItemDelegate(delegate)
    return delegate


__all__ = ["ShortFormDelegate", "draw_short_forms", "fitting_form"]
