"""The thread tree's first column: a delegation's row keeps who delegated, to which agent, and that it is one.

The tree cuts a long text in the middle (``Qt.ElideMiddle``: a series of alike titles differs at its end).
"ada → helper (delegation)" in the ~165 px a 1,100 px window gives the column was cut to "ada → he…egation)":
the agent's name and the mark were gone. A delegation's row is fitted here instead, before Qt draws it,
to the width its text has (``thread_labels.fit_resource_label``: the least telling part goes first). Every
other row is drawn as the view draws it, but for an untitled thread's first words ("“Summarise my notes about…”"),
which are cut at their end: cut in the middle they read "“Summa…bout…”". The tooltip keeps the whole label and the
stored id."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtWidgets import QStyledItemDelegate, QStyleOptionViewItem, QWidget

from studio.logic.thread_labels import fit_resource_label, is_delegation
from studio.models.resource_tree import ResourceTreeModel, TreeRoles
from studio.widgets.item_text import text_room


class ResourceLabelDelegate(QStyledItemDelegate):
    def __init__(self, model: ResourceTreeModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model = model  # (its ``delegations``: the Mastra-written ones the data proves)

    def initStyleOption(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:  # noqa: N802
        super().initStyleOption(option, index)
        if index.column() == 0 and index.data(TreeRoles.OPENING):
            option.textElideMode = Qt.TextElideMode.ElideRight
            return
        if index.column() != 0 or index.data(TreeRoles.KIND) != "resource":
            return
        resource_id = index.data(TreeRoles.RESOURCE_ID)
        known = self._model.delegations
        if not isinstance(resource_id, str) or not is_delegation(resource_id, known):
            return
        metrics = option.fontMetrics  # (the row's italic font, set above)
        option.text = fit_resource_label(resource_id, text_room(option), metrics.horizontalAdvance, known)


__all__ = ["ResourceLabelDelegate"]
