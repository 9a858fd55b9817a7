"""Accessibility of the Studio (session 24's walk): what a screen reader can say of each control."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QAccessible
from PySide6.QtWidgets import (QAbstractButton, QAbstractItemView, QAbstractSpinBox, QComboBox, QHeaderView, QLabel,
                               QLineEdit, QPlainTextEdit, QSlider, QTabWidget,
                               QTextEdit, QWidget)

from studio.selection import Selection

from .replay_data import RESOURCE, THREAD, build_replay_db

CONTROLS = (QAbstractButton, QAbstractItemView, QAbstractSpinBox, QComboBox, QLineEdit, QPlainTextEdit, QSlider,
            QTextEdit)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("a11y")
    build_replay_db(folder / "replay.db")
    return folder


def _where(widget: QWidget, top: QWidget) -> str:
    chain = []
    while widget is not None and widget is not top:
        chain.append(type(widget).__name__ + (f"#{widget.objectName()}" if widget.objectName() else ""))
        widget = widget.parentWidget()
    return " < ".join(chain[:4])


def unnamed_controls(top: QWidget) -> list[str]:
    """The shown controls under ``top`` a screen reader has no name for. A combo box counts as unnamed
    unless given a name: Qt names it by its current value ("resource"), even when a label's buddy."""
    buddies = {id(label.buddy()) for label in top.findChildren(QLabel) if label.buddy() is not None}
    found = []
    for widget in top.findChildren(QWidget):
        if not isinstance(widget, CONTROLS) or isinstance(widget, QHeaderView) or not widget.isVisible():
            continue
        if widget.objectName() == "qt_spinbox_lineedit":  # (a spin box's own field: the spin box is named)
            continue
        if widget.accessibleName().strip():
            continue
        if isinstance(widget, QComboBox):  # (even a buddy's label is not its name: Qt names it by its value)
            found.append(f"{type(widget).__name__} ({_where(widget, top)})")
            continue
        if id(widget) in buddies:
            continue
        face = QAccessible.queryAccessibleInterface(widget)
        if face is None or not face.text(QAccessible.Text.Name).strip():
            found.append(f"{type(widget).__name__} ({_where(widget, top)})")
    return found


def test_every_control_of_every_pane_has_an_accessible_name(template: Path, tmp_path: Path, make_window: Any,
                                                            qtbot: Any) -> None:
    """Inputs, lists, tables and text views beside a plain label had no name of their own (the label is
    another widget) and a combo box was named by its value, so a screen reader said "edit text", "spin box
    4", "table" or "resource, combo box" for most of the Studio's controls (found 2026-12-06 by the walk)."""
    folder = tmp_path / "data"
    shutil.copytree(template, folder)
    window = make_window()
    window.resize(1440, 900)
    window.open_database(str(folder / "replay.db"))
    qtbot.waitUntil(lambda: window.resources is not None and bool(window.resources.thread_rows()), timeout=20_000)
    window.resources.set_selection(Selection(RESOURCE, THREAD))
    found: dict[str, None] = {}
    for index in range(window.tabs.count()):
        window.tabs.setCurrentIndex(index)
        qtbot.wait(300)
        window.session.pool.wait(20_000)
        qtbot.wait(200)
        for text in unnamed_controls(window):
            found.setdefault(f"{window.tabs.tabText(index)}: {text}")
        page = window.tabs.widget(index)
        for inner in page.findChildren(QTabWidget):  # each tab of the pane's own tab widgets, shown in turn
            if not inner.isVisible():
                continue
            for tab in range(inner.count()):
                inner.setCurrentIndex(tab)
                qtbot.wait(50)
                for text in unnamed_controls(window):
                    found.setdefault(f"{window.tabs.tabText(index)} > {inner.tabText(tab)}: {text}")
    assert list(found) == [], "\n".join(found)


def test_every_control_of_the_dialogs_has_an_accessible_name(qtbot: Any, tmp_path: Path, make_window: Any) -> None:
    """The same for the dialogs: a field inside a form row that holds a button beside it (a file path and
    its Choose…) is not the row label's buddy, and the price grid, the command palette's field and list had
    no name."""
    from PySide6.QtCore import QSettings

    from studio.commands import CommandPalette
    from studio.logic.checks_layout import PinTarget
    from studio.preferences import Preferences
    from studio.widgets.export_dialog import ExportDialog
    from studio.widgets.fork_dialog import ForkDialog
    from studio.widgets.pin_dialog import PinDialog
    from studio.widgets.preferences_dialog import PreferencesDialog
    from studio.widgets.price_editor import PriceEditor

    window = make_window()
    prefs = Preferences(QSettings(str(tmp_path / "prefs.ini"), QSettings.Format.IniFormat))
    pin = PinTarget("food", "ada", "Any dessert ideas?", 3, "Messages recalled…", "semantic-recall", ("m1",))
    dialogs = [PinDialog(pin, str(tmp_path / "checks.json")), ForkDialog("A fork", "turn 2", True),
               ExportDialog("thread", "t-1", str(tmp_path), lambda *_a: None), PriceEditor({}),
               CommandPalette(window.commands, window)]
    preferences = PreferencesDialog(prefs)
    preferences.add_endpoint("Ollama")  # (the endpoint page: its fields)
    dialogs.append(preferences)
    found = []
    for dialog in dialogs:
        qtbot.addWidget(dialog)
        dialog.show()
        found += [f"{dialog.objectName() or type(dialog).__name__}: {text}" for text in unnamed_controls(dialog)]
        dialog.close()
    assert found == [], "\n".join(found)
