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


# -- contrast (WCAG 2 AA: 4.5:1 for body text), computed from the themes' palettes and style sheets ----------

TEXT_ON = {  # a palette's text colour: the backgrounds it is drawn on
    "WindowText": ("Window", "Base", "AlternateBase"),
    "Text": ("Base", "AlternateBase"),
    # (labels say what a pane shows and why in it: "color: palette(placeholder-text)" on the window)
    "PlaceholderText": ("Window", "Base", "AlternateBase", "Button"),
    "Link": ("Window", "Base", "AlternateBase"),
    "ButtonText": ("Button",),
    "ToolTipText": ("ToolTipBase",),
    "HighlightedText": ("Highlight",),
}


@pytest.mark.parametrize("theme", ["dark", "light"])
def test_the_text_colours_of_both_themes_reach_aa_contrast(theme: str) -> None:
    """The muted text (captions, explanations, where a setting came from, the empty states) was 4.3:1
    (dark) and 4.2:1 (light) on the window; the error text of labels, one red for both themes, 3.4:1 on
    the light theme, and the warnings' amber 2.1:1 (found 2026-12-06 by the walk, computed from the
    palettes)."""
    import re

    from PySide6.QtGui import QColor

    from studio.assets import resources_dir
    from studio.theme import _PALETTES, AA_BODY_TEXT, TONES, contrast

    colours = _PALETTES[theme]
    low = [f"{fg} on {bg}: {contrast(QColor(colours[fg]), QColor(colours[bg])):.2f}"
           for fg, backgrounds in TEXT_ON.items() for bg in backgrounds
           if contrast(QColor(colours[fg]), QColor(colours[bg])) < AA_BODY_TEXT]
    low += [f"{tone} text on {bg}: {contrast(QColor(value), QColor(colours[bg])):.2f}"
            for tone, value in TONES[theme].items() for bg in ("Window", "Base", "AlternateBase")
            if contrast(QColor(value), QColor(colours[bg])) < AA_BODY_TEXT]
    sheet = re.sub(r"/\*.*?\*/", "", (resources_dir() / "themes" / f"{theme}.qss").read_text(), flags=re.S)
    for selector, body in re.findall(r"([^{}]+)\{([^}]*)\}", sheet):
        text = re.search(r"(?<![-\w])color:\s*(#[0-9a-fA-F]{6})", body)
        if text is None:
            continue
        ground = re.search(r"background:\s*(#[0-9a-fA-F]{6})", body)
        bg = ground.group(1) if ground else colours["Window"]
        ratio = contrast(QColor(text.group(1)), QColor(bg))
        if ratio < AA_BODY_TEXT:
            low.append(f"{selector.strip()} ({text.group(1)} on {bg}): {ratio:.2f}")
    assert low == []


@pytest.mark.parametrize("theme", ["dark", "light"])
def test_a_tables_state_colours_are_readable_on_either_theme(theme: str, qapp: Any) -> None:
    """A table column's colour (a check's state, a trace's status, a version's author, a blocked buffer
    event) is one for both themes: the checks' "error" amber read 2.2:1 on the light theme's rows and their
    red 3.7:1. The model gives the nearest shade that reads at 4.5:1 on the theme's rows."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QColor, QPalette

    from studio.logic.checks_layout import COLOURS
    from studio.logic.traces_layout import ERROR_COLOR, RUNNING_COLOR
    from studio.theme import AA_BODY_TEXT, apply_theme, contrast
    from studio.widgets.record_table import Column, RecordTableModel

    from .conftest import theme_restored

    wanted = sorted({*COLOURS.values(), ERROR_COLOR, RUNNING_COLOR, "#D9A441", "#4FA3D9", "#8A8F98"})
    with theme_restored(qapp):
        apply_theme(qapp, theme)
        model: RecordTableModel[str] = RecordTableModel([Column("State", lambda c: c, foreground=lambda c: c)])
        model.set_rows(wanted)
        pal = qapp.palette()
        rows = (pal.color(QPalette.ColorRole.Base), pal.color(QPalette.ColorRole.AlternateBase))
        shown = {c: model.data(model.index(i, 0), Qt.ItemDataRole.ForegroundRole) for i, c in enumerate(wanted)}
        low = [f"{c} shown as {shown[c].name()}: {min(contrast(shown[c], bg) for bg in rows):.2f}"
               for c in wanted if min(contrast(shown[c], bg) for bg in rows) < AA_BODY_TEXT]
        assert low == []
        # a colour that reads already is left as it is
        assert all(shown[c] == QColor(c) for c in wanted if min(contrast(QColor(c), bg) for bg in rows) >= 4.5)


@pytest.mark.parametrize("theme", ["dark", "light"])
def test_the_keyboard_focus_is_visible_on_every_kind_of_control(theme: str, qapp: Any, qtbot: Any) -> None:
    """Tabbing onto a tool button (Save, Revert, Undo in Working Memory, Replay's steps, Traces' Refresh)
    changed no pixel: the theme's border for tool buttons hid Fusion's focus frame; a read-only text view
    (a message's detail, a span's input, Recall's explanation) and a list changed none either (found
    2026-12-06 by the walk, each control grabbed before and after a Tab)."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QStandardItem, QStandardItemModel
    from PySide6.QtWidgets import (QCheckBox, QHBoxLayout, QListView, QPushButton, QRadioButton, QSpinBox, QTableView,
                                   QTextBrowser, QToolButton, QTreeView)

    from studio.theme import apply_theme

    from .conftest import theme_restored

    def build(kind: type) -> QWidget:
        widget = kind()
        if kind in (QToolButton, QPushButton, QCheckBox, QRadioButton):
            widget.setText("Save")
        if kind is QComboBox:
            widget.addItems(["one", "two"])
        if kind in (QTableView, QTreeView, QListView):
            model = QStandardItemModel(3, 2, widget)
            for row in range(3):
                for col in range(2):
                    model.setItem(row, col, QStandardItem(f"{row}{col}"))
            widget.setModel(model)
        if kind is QTextBrowser:
            widget.setPlainText("A stored message, shown read-only.")
        widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        return widget

    kinds = (QToolButton, QPushButton, QCheckBox, QRadioButton, QComboBox, QSpinBox,
             QLineEdit, QTableView, QTreeView, QListView, QTextBrowser, QPlainTextEdit)
    unseen = []
    with theme_restored(qapp):
        apply_theme(qapp, theme)
        for kind in kinds:
            host = QWidget()
            row = QHBoxLayout(host)
            before = QLineEdit()
            widget = build(kind)
            row.addWidget(before)
            row.addWidget(widget)
            host.resize(360, 120)
            qtbot.addWidget(host)
            host.show()
            qtbot.waitExposed(host)
            before.setFocus()
            qtbot.waitUntil(before.hasFocus)
            unfocused = widget.grab().toImage()
            qtbot.keyClick(before, Qt.Key.Key_Tab)  # (a Tab: Fusion draws some focus frames only after one)
            qtbot.waitUntil(widget.hasFocus)
            if widget.grab().toImage() == unfocused:
                unseen.append(kind.__name__)
            host.close()
    assert unseen == []


@pytest.mark.parametrize("theme", ["dark", "light"])
@pytest.mark.parametrize("kind_name", ["QCheckBox", "QRadioButton"])
def test_the_keyboard_focus_on_a_check_box_or_radio_button_stands_out(theme: str, kind_name: str, qapp: Any,
                                                                     qtbot: Any) -> None:
    """Tabbing onto a check box or a radio button (the Prompt Inspector's options, Chat's settings, the export and
    forget dialogs) changed only a faint ring: Fusion draws it in the selection colour, 1.5:1 against what it
    replaced on the dark theme (found 2026-12-07). The focus now changes pixels by at least 3:1 (WCAG 2.2's focus
    appearance), checked or not, and the control keeps its size."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QColor
    from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QRadioButton

    from studio.theme import apply_theme, contrast

    from .conftest import theme_restored

    kind = {"QCheckBox": QCheckBox, "QRadioButton": QRadioButton}[kind_name]
    with theme_restored(qapp):
        apply_theme(qapp, theme)
        for checked in (False, True):
            host = QWidget()
            row = QHBoxLayout(host)
            before, widget = QLineEdit(), kind("Save the turn")
            widget.setChecked(checked)
            widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            row.addWidget(before)
            row.addWidget(widget)
            qtbot.addWidget(host)
            host.show()
            qtbot.waitExposed(host)
            before.setFocus()
            qtbot.waitUntil(before.hasFocus)
            plain, size = widget.grab().toImage(), widget.size()
            qtbot.keyClick(before, Qt.Key.Key_Tab)  # (a Tab: Fusion draws its focus frame only after one)
            qtbot.waitUntil(widget.hasFocus)
            focused = widget.grab().toImage()
            assert widget.size() == size and focused.size() == plain.size()
            strongest = max((contrast(QColor(focused.pixel(x, y)), QColor(plain.pixel(x, y)))
                             for y in range(plain.height()) for x in range(plain.width())
                             if focused.pixel(x, y) != plain.pixel(x, y)), default=1.0)
            assert strongest >= 3.0, (theme, kind_name, checked, round(strongest, 2))
            host.close()
