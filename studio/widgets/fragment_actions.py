"""The actions a prompt fragment offers (the inspector's fragment table, Replay's fragment list):
Edit Stored Message… (the message behind it; a menu when there are several) and Pin… (a memory
check). The panes build a ``PinTarget`` and emit it; the main window routes both to the Edit actions
and the Checks view."""

from __future__ import annotations

from typing import Callable, Sequence

from PySide6.QtCore import QPoint
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QWidget


def fragment_menu(parent: QWidget, stored_ids: Sequence[str], on_edit: Callable[[str], None],
                  on_pin: Callable[[], None] | None, pin_disabled_why: str = "") -> QMenu:
    """A context menu: Edit Stored Message… (one per message when there are several), then Pin…."""
    menu = QMenu(parent)
    menu.setObjectName("fragmentMenu")

    def edit_action(owner: QMenu, title: str, message_id: str) -> None:
        action = QAction(title, owner)
        action.triggered.connect(lambda _checked=False: on_edit(message_id))
        owner.addAction(action)

    if len(stored_ids) == 1:
        edit_action(menu, "Edit Stored Message…", stored_ids[0])
    elif stored_ids:
        sub = menu.addMenu("Edit Stored Message")
        for mid in stored_ids[:20]:
            edit_action(sub, f"{mid}…", mid)
    else:
        none = menu.addAction("Edit Stored Message… (not from a stored message)")
        none.setEnabled(False)
    pin = QAction("Pin…", menu)
    pin.setObjectName("pinAction")
    if on_pin is not None:
        pin.triggered.connect(on_pin)
    else:
        pin.setEnabled(False)
        pin.setText(f"Pin… ({pin_disabled_why})" if pin_disabled_why else "Pin…")
    menu.addAction(pin)
    return menu


def popup(menu: QMenu, widget: QWidget, pos: QPoint) -> None:
    menu.popup(widget.mapToGlobal(pos))


__all__ = ["fragment_menu", "popup"]
