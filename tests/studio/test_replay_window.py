"""Replay inside the main window: Replay From Here on a message, the turn's trace one click away and Back,
the pane's commands in the palette, and the fork's source in the thread tree."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from studio.commands import CommandPalette
from studio.main_window import PANES, REPLAY
from studio.selection import Selection

from .replay_data import RESOURCE, THREAD, TURNS, build_replay_db


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("replay-window")
    return folder, build_replay_db(folder / "replay.db")


@pytest.fixture
def window(template: tuple[Path, dict[str, Any]], tmp_path: Path, make_window: Any, qtbot: Any) -> Any:
    folder = tmp_path / "data"
    shutil.copytree(template[0], folder)
    w = make_window()
    w.resize(1500, 900)
    w.open_database(str(folder / "replay.db"))
    qtbot.waitUntil(lambda: w.resources is not None and len(w.resources.thread_rows()) == 2, timeout=20_000)
    yield w
    if w.session is not None:
        w.session.pool.wait(20_000)


def test_replay_from_here_opens_the_turn_of_that_message(qtbot: Any, window: Any,
                                                         template: tuple[Path, dict[str, Any]]) -> None:
    window.resources.set_selection(Selection(RESOURCE, THREAD))
    qtbot.waitUntil(lambda: window.selection.thread_id == THREAD, timeout=10_000)
    turn_input = template[1]["turns"][2]
    pane = window.messages_pane
    qtbot.waitUntil(lambda: pane.model.rowCount() > 0, timeout=10_000)
    assert not window.commands.command("replay.from_here").is_enabled  # no message picked yet
    pane.jump_to(turn_input)
    qtbot.waitUntil(lambda: window.selection.message_id == turn_input, timeout=10_000)
    # The reply of that turn: Replay From Here on it opens the same turn.
    row = pane.model.find_loaded(turn_input)
    pane.view.setCurrentIndex(pane.model.index(row + 1))
    qtbot.waitUntil(lambda: window.selection.message_id not in (None, turn_input), timeout=10_000)

    pane.view.customContextMenuRequested.emit(pane.view.visualRect(pane.model.index(row + 1)).center())
    menu = window.message_menu
    assert [a.text() for a in menu.actions()] == ["Replay From Here"]
    menu.actions()[0].trigger()
    replay = window.panes["replay"]
    qtbot.waitUntil(lambda: replay.step is not None and not replay.busy, timeout=30_000)
    assert window.current_pane() is replay
    assert replay.step.index == 2 and replay.step.turn.input_text == TURNS[2]
    menu.close()


def test_the_turns_trace_is_one_click_away_and_back_returns(qtbot: Any, window: Any,
                                                            template: tuple[Path, dict[str, Any]]) -> None:
    window.resources.set_selection(Selection(RESOURCE, THREAD))
    window.show_tab("replay")
    replay = window.panes["replay"]
    qtbot.waitUntil(lambda: replay.step is not None and not replay.busy, timeout=30_000)
    replay.go_to(3)
    qtbot.waitUntil(lambda: replay.step.index == 3 and not replay.busy, timeout=20_000)
    assert not window.back_btn.isVisible()
    replay.trace_btn.click()
    traces = window.panes["traces"]
    expected = template[1]["trace_ids"][3]
    qtbot.waitUntil(lambda: traces.trace_id == expected and bool(traces.spans), timeout=30_000)
    assert window.current_pane() is traces
    assert window.back_btn.isVisible() and window.back_btn.text() == "◀ Back to Replay"
    window.back_btn.click()
    assert window.current_pane() is replay and not window.back_btn.isVisible()
    assert replay.step.index == 3  # where the user was
    assert not window.commands.command("view.back").is_enabled


def test_replay_commands_are_in_the_palette_and_the_view_menu(qtbot: Any, window: Any) -> None:
    titles = [a.text() for a in window.menus["View"].actions()]
    assert "Show Replay" in titles and "Replay From Here" in titles and "Go Back" in titles
    window.resources.set_selection(Selection(RESOURCE, THREAD))
    window.commands.run("view.tab.replay")
    replay = window.panes["replay"]
    qtbot.waitUntil(lambda: replay.step is not None and not replay.busy, timeout=30_000)
    palette = CommandPalette(window.commands, window)
    qtbot.addWidget(palette)
    palette.input.setText("next turn")
    assert "Next Turn" in palette.visible_titles()
    keys = [k.toString() for k in window.panes["replay"].commands.action("replay.next").shortcuts()]
    assert keys == ["Alt+Right", "J"]
    assert window.panes["replay"].commands.action("replay.next").shortcutContext() == \
        Qt.ShortcutContext.WidgetWithChildrenShortcut


def test_a_fork_shows_its_source_in_the_thread_tree(qtbot: Any, window: Any) -> None:
    window.resources.set_selection(Selection(RESOURCE, THREAD))
    window.show_tab("replay")
    replay = window.panes["replay"]
    qtbot.waitUntil(lambda: replay.step is not None and not replay.busy, timeout=30_000)
    replay.commands.run("replay.fork")
    dialog = replay.fork_dialog
    dialog.name_edit.setText("What if Braga first")
    with qtbot.waitSignal(replay.forked, timeout=20_000) as blocker:
        dialog.buttons.button(dialog.buttons.StandardButton.Ok).click()
    fork = blocker.args[0]
    qtbot.waitUntil(lambda: window.selection.thread_id == fork.id, timeout=20_000)  # the tree shows the fork
    index = window.resources.tree.currentIndex()
    tip = index.data(Qt.ItemDataRole.ToolTipRole)
    assert f"Forked from thread {THREAD} at message" in tip
    qtbot.waitUntil(lambda: replay.source is not None and replay.source.thread_id == fork.id, timeout=20_000)
    assert f"Forked from thread {THREAD}" in replay.subtitle.toolTip()


def test_the_window_never_grows_while_replaying(qtbot: Any, window: Any) -> None:
    width = max(1500, window.minimumSizeHint().width())  # other panes set the floor; Replay must not raise it
    window.resize(width, 860)
    qtbot.waitUntil(lambda: window.width() == width, timeout=5_000)
    window.resources.set_selection(Selection(RESOURCE, THREAD))
    window.show_tab("replay")
    replay = window.panes["replay"]
    qtbot.waitUntil(lambda: replay.step is not None and not replay.busy, timeout=30_000)
    assert replay.minimumSizeHint().width() < 800
    for tab in range(replay.tabs.count()):
        replay.tabs.setCurrentIndex(tab)
    panel = replay.what_if
    with qtbot.waitSignal(panel.finished, timeout=60_000):
        panel.run()
    with qtbot.waitSignal(panel.opened, timeout=20_000):
        panel.open_row(7)
    with qtbot.waitSignal(replay.rerun.finished, timeout=30_000):
        replay.rerun.run()
    replay.view.step_table.selectRow(1)
    QApplication.processEvents()
    assert window.width() == width
    assert replay.minimumSizeHint().width() < 800


def test_stepping_keys_work_right_after_switching_to_replay(qtbot: Any, window: Any) -> None:
    """Issue 16: J/K and Alt+arrows stepped only after a click into the pane, and Alt+Left pressed on the
    tab bar switched tabs instead of stepping."""
    window.activateWindow()
    window.resources.set_selection(Selection(RESOURCE, THREAD))
    replay = window.panes["replay"]
    window.show_tab("replay")
    qtbot.waitUntil(lambda: replay.step is not None and not replay.busy, timeout=30_000)
    window.show_tab("messages")
    window.messages_pane.view.setFocus()
    window.tabs.setCurrentIndex(PANES.index(REPLAY))  # as a click on the tab does
    qtbot.waitUntil(lambda: QApplication.focusWidget() is not None and replay.isAncestorOf(QApplication.focusWidget()),
                    timeout=10_000)
    start = replay.index
    assert start == len(TURNS) - 1
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_K)
    qtbot.waitUntil(lambda: replay.step is not None and replay.step.index == start - 1 and not replay.busy,
                    timeout=30_000)
    bar = window.tabs.tabBar()
    bar.setFocus()
    qtbot.keyClick(bar, Qt.Key.Key_Left, Qt.KeyboardModifier.AltModifier)
    assert window.current_pane() is replay
    qtbot.waitUntil(lambda: replay.step is not None and replay.step.index == start - 2 and not replay.busy,
                    timeout=30_000)
    qtbot.keyClick(bar, Qt.Key.Key_Left)  # a plain arrow on the tab bar still moves between tabs
    assert window.current_pane() is not replay


def test_the_context_table_fits_its_pane_and_a_cut_cell_has_its_whole_text_in_the_tooltip(
        qtbot: Any, window: Any) -> None:
    """At a 1500 px wide window the context table's columns came to ~1,070 px in a ~520 px pane: Why and
    Text were out of sight behind a horizontal scroll bar."""
    from PySide6.QtWidgets import QApplication

    window.resources.set_selection(Selection(RESOURCE, THREAD))
    window.show_tab("replay")
    replay = window.panes["replay"]
    qtbot.waitUntil(lambda: replay.step is not None and not replay.busy, timeout=30_000)
    QApplication.processEvents()
    table = replay.view.step_table
    header, model = table.horizontalHeader(), table.model()
    titles = [str(model.headerData(c, Qt.Orientation.Horizontal)) for c in range(model.columnCount())]
    assert header.length() <= table.viewport().width()
    assert table.horizontalScrollBar().maximum() == 0
    from studio.logic.replay_layout import STEP_OPTIONAL

    for column, title in enumerate(titles):  # every column on screen, its title readable (but those that give
        if table.isColumnHidden(column):    # way to the source, the reason and the text: see STEP_OPTIONAL)
            assert title in STEP_OPTIONAL, title
            continue
        assert header.sectionSize(column) >= table.fontMetrics().horizontalAdvance(title), title
    why, source = titles.index("Why"), titles.index("Source")
    left = next(r for r in range(model.rowCount()) if model.index(r, why).data())
    tip = Qt.ItemDataRole.ToolTipRole
    assert model.index(left, why).data(tip) == model.index(left, why).data()  # cut cells say all of it on hover
    assert model.index(left, source).data(tip).startswith(model.index(left, source).data() + " · role ")

    window.resize(1400, 800)  # and it follows the pane when the window narrows
    QApplication.processEvents()
    assert header.length() <= table.viewport().width()


@pytest.mark.parametrize("theme", [None, "dark", "light"])
def test_in_a_narrow_window_the_turn_stacks_so_every_column_is_readable(qtbot: Any, themed: str | None, window: Any,
                                                                         theme: str | None) -> None:
    """In a 1,100 px window the context table had ~385 px beside the request tabs, below what its columns'
    titles need (~470): Source, Why and Text sat behind a horizontal scroll bar, and "Received vs Rebuilt
    Now" was two ~150 px columns. Below ``STACK_BELOW`` the tabs go under the table; wider, beside it."""
    from PySide6.QtWidgets import QApplication

    from studio.widgets.replay_turn import STACK_BELOW

    window.resize(1100, 800)
    window.resources.set_selection(Selection(RESOURCE, THREAD))
    window.show_tab("replay")
    replay = window.panes["replay"]
    qtbot.waitUntil(lambda: replay.step is not None and not replay.busy, timeout=30_000)
    QApplication.processEvents()
    view, table = replay.view, replay.view.step_table
    header, model = table.horizontalHeader(), table.model()
    assert table.horizontalScrollBar().maximum() == 0 and header.length() <= table.viewport().width()
    for column in range(model.columnCount()):
        title = str(model.headerData(column, Qt.Orientation.Horizontal))
        assert header.sectionSize(column) >= table.fontMetrics().horizontalAdvance(title), title
    assert view.width() < STACK_BELOW and view.orientation() == Qt.Orientation.Vertical
    assert view.tabs.height() >= 150 and table.viewport().height() >= 3 * table.verticalHeader().defaultSectionSize()

    window.resize(1800, 800)  # wide enough again: side by side, and still no scroll bar
    QApplication.processEvents()
    assert view.width() >= STACK_BELOW and view.orientation() == Qt.Orientation.Horizontal
    assert table.horizontalScrollBar().maximum() == 0
