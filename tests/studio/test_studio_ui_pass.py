"""Defects found by using the Studio as its users do (windows of 1,100 and 1,500 px, screenshots looked
at): what each pane showed, checked in the real window offscreen."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from studio.selection import Selection

from .replay_data import RESOURCE, THREAD, build_replay_db


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ui-pass")
    build_replay_db(folder / "replay.db")
    return folder


@pytest.mark.parametrize("width", [1100, 1500])
def test_the_prompt_inspector_keeps_its_fragment_table_in_sight(template: Path, tmp_path: Path, make_window: Any,
                                                                qtbot: Any, width: int) -> None:
    """In a window 800 px high the request side (usage, settings and tool tables) asked ~350 px, and the
    splitter left the prompt's own table one row of a turn's eight fragments: the pane's reason to be was
    behind a scroll bar. The request scrolls in its tab now, and the table keeps four rows."""
    folder = tmp_path / "data"
    shutil.copytree(template, folder)
    window = make_window()
    window.resize(width, 800)
    window.open_database(str(folder / "replay.db"))
    qtbot.waitUntil(lambda: window.resources is not None and bool(window.resources.thread_rows()), timeout=20_000)
    window.resources.set_selection(Selection(RESOURCE, THREAD))
    window.show_tab("prompt")
    pane = window.panes["prompt"]
    qtbot.waitUntil(lambda: pane.preview is not None and not pane.busy and pane.fragment_model.rowCount() >= 4,
                    timeout=30_000)
    qtbot.wait(50)  # (laid out)
    table = pane.fragment_table
    row = table.verticalHeader().defaultSectionSize()
    assert table.viewport().height() >= 4 * row, (table.viewport().height(), row)
    assert pane.side_tabs.isVisible() and pane.request_view.isVisibleTo(pane)
    window.session.pool.wait(20_000)



@pytest.mark.parametrize("theme", ["dark", "light"])
def test_the_tab_bars_scroll_buttons_show_their_arrows(template: Path, tmp_path: Path, qtbot: Any, qapp: Any,
                                                        make_window: Any, theme: str) -> None:
    """In a 1,100 px window the nine tabs do not fit: Recall Playground, Replay and Checks are behind the tab
    bar's scroll buttons, which the theme drew as two blank boxes (its ``QToolButton`` padding, 8 px a
    side, left a 16 px button no room for its arrow), so nothing said more tabs were there."""
    from PySide6.QtWidgets import QToolButton

    from studio.theme import apply_theme

    saved = (qapp.palette(), qapp.styleSheet(), qapp.property("studioTheme"), qapp.style().name(), qapp.font())
    try:
        apply_theme(qapp, theme)
        folder = tmp_path / "data"
        shutil.copytree(template, folder)
        window = make_window()
        window.resize(1100, 800)
        window.open_database(str(folder / "replay.db"))
        qtbot.waitUntil(lambda: window.resources is not None and bool(window.resources.thread_rows()),
                        timeout=20_000)
        qtbot.waitUntil(lambda: len([b for b in window.tabs.tabBar().findChildren(QToolButton) if b.isVisible()])
                        == 2, timeout=5_000)
        buttons = [b for b in window.tabs.tabBar().findChildren(QToolButton) if b.isVisible()]
        assert len(buttons) == 2  # the tabs do not fit: the scroll buttons are shown
        for button in buttons:
            image = button.grab().toImage()
            back = image.pixelColor(2, image.height() // 2).lightness()  # (inside the border)
            drawn = [image.pixelColor(x, y).lightness() for x in range(image.width()) for y in range(image.height())]
            assert max(abs(v - back) for v in drawn) > 60, (button.objectName(), sorted(set(drawn)))
        window.session.pool.wait(20_000)
    finally:
        qapp.setPalette(saved[0])
        qapp.setStyleSheet(saved[1])
        qapp.setProperty("studioTheme", saved[2])
        qapp.setStyle(saved[3])
        qapp.setFont(saved[4])


def test_model_text_wraps_so_a_long_reply_is_read_without_scrolling_sideways(qtbot: Any) -> None:
    """Replay's fragment text, the received and rebuilt prompts, the reply and Re-Run's two replies (the
    ``prose`` viewers) did not wrap: a message of 4,000 words was one line behind a horizontal scroll bar,
    and Re-Run's stored reply read "Added: rice noodles, limes, tofu, green curry pa" in a 1,100 px window."""
    from PySide6.QtWidgets import QApplication

    from studio.widgets.code_editor import CodeEditor

    view = CodeEditor("prose", read_only=True)
    qtbot.addWidget(view)
    view.resize(320, 200)
    view.show()
    view.load("Added: rice noodles, limes, tofu, green curry paste, coconut milk, Thai basil. " * 8)
    QApplication.processEvents()  # (laid out)
    assert view.horizontalScrollBar().maximum() == 0
    assert view.document().firstBlock().layout().lineCount() > 1


def test_a_pane_title_that_does_not_fit_ends_in_an_ellipsis_and_says_all_of_it_on_hover(qtbot: Any) -> None:
    """Pane titles and subtitles were cut at the label's edge with no mark: "Replay · Weekly groceri" read
    like a title of its own (a 1,100 px window), and a subtitle lost its end without a sign."""
    from PySide6.QtWidgets import QApplication, QWidget

    from studio.widgets.pane_header import pane_header

    holder = QWidget()
    qtbot.addWidget(holder)
    row, title, subtitle = pane_header("Replay · Weekly groceries for the whole team offsite in Lisbon")
    holder.setLayout(row)
    subtitle.setText("thread ada-groceries · resource ada · options from agent 'chef'")
    holder.resize(260, 40)
    holder.show()
    QApplication.processEvents()
    assert title.text() == "Replay · Weekly groceries for the whole team offsite in Lisbon"  # the text stays whole
    assert title.toolTip() == title.text() and subtitle.toolTip() == subtitle.text()  # cut: all of it on hover
    subtitle.setToolTip("/data/observability.duckdb")  # a caller's own tooltip is kept
    holder.resize(900, 40)
    QApplication.processEvents()
    assert subtitle.toolTip() == "/data/observability.duckdb" and title.toolTip() == ""  # fits: no tooltip


def test_status_lines_captions_and_replays_input_end_in_an_ellipsis_when_cut(template: Path, tmp_path: Path,
                                                                             make_window: Any, qtbot: Any) -> None:
    """In a 1,100 px window Replay's status line read "… · Rebuilt now: identical to what" and its quoted
    input, the playgrounds' status lines, the Observations pane's count ("8 observation"), the Messages
    pane's "edited since it was stored" note, the section captions (a span's name above its details) were
    cut at their edge with no mark: every one of them ends in "…" now, its whole text on hover (Working
    Memory's configuration reason wraps)."""
    from studio.widgets.elided_label import ElidedLabel
    from studio.widgets.pane_header import caption

    folder = tmp_path / "data"
    shutil.copytree(template, folder)
    window = make_window()
    window.resize(1100, 800)
    window.open_database(str(folder / "replay.db"))
    qtbot.waitUntil(lambda: window.resources is not None and bool(window.resources.thread_rows()), timeout=20_000)
    replay = window.panes["replay"]
    labels = {"replay status": replay.status, "replay input": replay.input_label,
              "chat status": window.panes["chat"].status, "recall status": window.panes["recall"].status,
              "observation count": window.panes["observations"].line_editor.note,
              "message edited": window.panes["messages"].edited_label, "caption": caption("Spans")}
    for name, label in labels.items():
        assert isinstance(label, ElidedLabel), name
        label.setParent(window) if label.parent() is None else None
        label.setText("8 fragments · 7 messages · 653 tokens (o200k estimate) · model call 1 of 2 · " * 4)
        label.resize(300, label.height())
        assert label.elided() and label.toolTip() == label.text(), name
    assert window.panes["working_memory"].agent_reason.wordWrap()  # (its reason wraps instead)
    window.session.pool.wait(20_000)


def test_ctrl_f_in_the_traces_pane_filters_traces_and_elsewhere_the_threads(template: Path, tmp_path: Path,
                                                                            make_window: Any, qtbot: Any) -> None:
    """View > Filter Threads and the Traces pane's "Filter Traces by Name" both had Ctrl+F: with the focus in
    the Traces pane Qt found two shortcuts for the key ("Ambiguous shortcut overload") and ran neither, so
    Ctrl+F did nothing there. One shortcut now: the pane's own filter while the focus is in it."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication

    folder = tmp_path / "data"
    shutil.copytree(template, folder)
    window = make_window()
    window.resize(1100, 800)
    window.open_database(str(folder / "replay.db"))
    qtbot.waitUntil(lambda: window.resources is not None and bool(window.resources.thread_rows()), timeout=20_000)
    window.activateWindow()
    window.show_tab("traces")
    traces = window.panes["traces"]
    qtbot.waitUntil(lambda: not traces.loading, timeout=20_000)
    traces.tree.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is traces.tree, timeout=5_000)
    qtbot.keyClick(traces.tree, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert QApplication.focusWidget() is traces.filter_edit
    tree = window.resources.tree
    tree.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is tree, timeout=5_000)
    qtbot.keyClick(tree, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert QApplication.focusWidget() is window.resources.filter  # outside the pane: the threads' filter
    # Ctrl let go: the keyboard state outlives the test (a Ctrl left down makes a later test's selectRow
    # extend the selection).
    qtbot.keyRelease(window.resources.filter, Qt.Key.Key_Control)
    assert QApplication.keyboardModifiers() == Qt.KeyboardModifier.NoModifier
    window.session.pool.wait(20_000)


def test_the_request_usage_tables_headings_are_whole_in_the_inspectors_panel(qtbot: Any) -> None:
    """At a 1,440 px window the inspector's request panel is ~450 px: the usage table's row names and
    "Server-reported" had 120 and 130 px fixed, and the last heading, right-aligned in what was left, lost
    its start ("ur estimate (o200k_base)"). The columns are fitted to the panel now."""
    from PySide6.QtGui import QFont, QFontMetrics
    from PySide6.QtWidgets import QApplication

    from studio.logic.request_layout import ESTIMATE
    from studio.widgets.request_view import RequestPanel

    panel = RequestPanel()
    qtbot.addWidget(panel)
    panel.resize(450, 600)
    panel.show()
    QApplication.processEvents()
    table = panel.usage_table
    bold = QFont(table.horizontalHeader().font())
    bold.setWeight(QFont.Weight.DemiBold)
    need = QFontMetrics(bold).horizontalAdvance(ESTIMATE)
    # (the width of the Studio's own font at ~450 px: the row names, the server's column and this heading)
    panel.resize(450 + (250 + need + 4) - table.viewport().width(), 600)
    QApplication.processEvents()
    last = table.model().columnCount() - 1
    assert table.columnWidth(last) >= need + 8, (table.columnWidth(last), need)
    assert table.horizontalHeader().length() <= table.viewport().width()  # and nothing past the edge


def test_the_template_tabs_no_versions_line_wraps_instead_of_being_cut(qtbot: Any) -> None:
    """Working Memory > Template / schema in a 1,100 px window: "No Studio versions yet: the agent's own
    template or schema is in effect." read "No Studio versions ye", cut at the label's edge beside Restore
    into Editor. It wraps now, so all of it is read."""
    from PySide6.QtWidgets import QApplication

    from studio.widgets.template_editor import TemplateEditor

    editor = TemplateEditor()
    qtbot.addWidget(editor)
    editor.resize(700, 600)
    editor.show()
    editor.set_state("template", "# Profile\n- **Name**:", [], "In effect: the agent's own template.")
    QApplication.processEvents()
    label = editor.diff_label
    assert label.text().startswith("No Studio versions yet")
    assert label.fontMetrics().horizontalAdvance(label.text()) > label.width()  # (longer than its place)
    assert label.wordWrap() and label.height() >= label.heightForWidth(label.width())  # on as many lines as it needs
