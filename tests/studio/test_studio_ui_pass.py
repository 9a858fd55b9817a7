"""Defects found by using the Studio as its users do (windows of 1,100 and 1,500 px, screenshots looked
at): what each pane showed, checked in the real window offscreen."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from studio.selection import Selection

from .conftest import theme_restored
from .replay_data import RESOURCE, THREAD, build_replay_db


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ui-pass")
    build_replay_db(folder / "replay.db")
    return folder


def _opened(template: Path, tmp_path: Path, make_window: Any, qtbot: Any, width: int, height: int = 800) -> Any:
    """A window of ``width`` × ``height`` on a copy of the replay template, its thread tree loaded."""
    folder = tmp_path / "data"
    shutil.copytree(template, folder)
    window = make_window()
    window.resize(width, height)
    window.open_database(str(folder / "replay.db"))
    qtbot.waitUntil(lambda: window.resources is not None and bool(window.resources.thread_rows()), timeout=20_000)
    return window


@pytest.mark.parametrize("width", [1100, 1500])
def test_the_prompt_inspector_keeps_its_fragment_table_in_sight(template: Path, tmp_path: Path, make_window: Any,
                                                                qtbot: Any, width: int) -> None:
    """In a window 800 px high the request side (usage, settings and tool tables) asked ~350 px, and the
    splitter left the prompt's own table one row of a turn's eight fragments: the pane's reason to be was
    behind a scroll bar. The request scrolls in its tab now, and the table keeps four rows."""
    window = _opened(template, tmp_path, make_window, qtbot, width)
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
    """In a 1,100 px window the nine tabs did not fit: Recall Playground, Replay and Checks were behind the
    tab bar's scroll buttons, which the theme drew as two blank boxes (its ``QToolButton`` padding, 8 px a
    side, left a 16 px button no room for its arrow), so nothing said more tabs were there. (Their short
    titles fit at 1,100 px now; the scroll buttons are still the last resort of a narrower window.)"""
    from PySide6.QtWidgets import QToolButton

    from studio.theme import apply_theme

    with theme_restored(qapp):
        apply_theme(qapp, theme)
        folder = tmp_path / "data"
        shutil.copytree(template, folder)
        window = make_window()
        window.resize(900, 800)  # (the short titles don't fit either)
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

    window = _opened(template, tmp_path, make_window, qtbot, 1100)
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

    window = _opened(template, tmp_path, make_window, qtbot, 1100)
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


def _tabs_in_sight(tabs: Any) -> None:
    """Every shown tab of ``tabs`` lies inside its tab bar, with its whole title (no scroll arrows, no
    "…"), and its tooltip names it in full."""
    from PySide6.QtWidgets import QToolButton

    bar = tabs.tabBar()
    assert not [b for b in bar.findChildren(QToolButton) if b.isVisible()], tabs.objectName()  # no arrows
    metrics = bar.fontMetrics()
    for index in range(bar.count()):
        if not bar.isTabVisible(index):
            continue
        rect, text = bar.tabRect(index), bar.tabText(index)
        assert rect.left() >= 0 and rect.right() < bar.width() <= tabs.width(), (text, rect, bar.width())
        assert rect.width() >= metrics.horizontalAdvance(text) + 6, (text, rect.width())  # not cut
        assert bar.tabToolTip(index).startswith(text) or len(bar.tabToolTip(index)) > len(text), text


@pytest.mark.parametrize("width", [1100, 1360, 1800])
def test_every_tab_is_in_sight_at_ordinary_window_widths(template: Path, tmp_path: Path, make_window: Any,
                                                         qtbot: Any, width: int) -> None:
    """At a 1,100 px window the Traces pane's span detail showed "Messages, Input, Outp" and hid Attributes,
    Error and Span JSON behind the tab bar's scroll arrows; Replay's request side hid Recall and Tokens
    the same way up to ~1,450 px, and so did the window's own tabs (Recall Playground, Replay, Checks).
    While the full titles don't fit, the tabs show shorter ones ("Attrs", "Recall"), the full title
    on hover."""
    from PySide6.QtWidgets import QApplication

    window = _opened(template, tmp_path, make_window, qtbot, width)
    window.resources.set_selection(Selection(RESOURCE, THREAD))
    QApplication.processEvents()
    _tabs_in_sight(window.tabs)
    assert window.tabs.tabBar().tabToolTip(6) == "Recall Playground (Ctrl+7)"

    window.show_tab("traces")
    traces = window.panes["traces"]
    qtbot.waitUntil(lambda: not traces.loading and bool(traces.traces) and bool(traces.spans), timeout=20_000)
    llm = next(r.span.span_id for r in traces.layout_model.rows if r.span.span_type == "model_generation")
    assert traces.select_span(llm)
    qtbot.wait(50)  # (laid out)
    assert traces.tabs.isTabVisible(0)  # (a model call: its Messages tab too)
    _tabs_in_sight(traces.tabs)
    assert traces.tabs.tabToolTip(3).startswith("Attributes")

    window.show_tab("replay")
    replay = window.panes["replay"]
    qtbot.waitUntil(lambda: replay.step is not None and not replay.busy, timeout=30_000)
    qtbot.wait(50)
    _tabs_in_sight(replay.view.tabs)
    window.session.pool.wait(20_000)


@pytest.mark.parametrize("width", [1100, 1360, 1440, 1800])
def test_working_memory_versions_fit_their_table_at_ordinary_window_widths(template: Path, tmp_path: Path,
                                                                           make_window: Any, qtbot: Any,
                                                                           width: int) -> None:
    """Working Memory > History at a 1,100 px window: the versions' table had ~275 px beside the diff, and
    its Size ("123 chars · 41 tokens"), Reason and Note columns sat behind a sideways scroll bar (~420 px
    at 1,360 px, Note and Reason still out of sight). Below 1,100 px the diff goes under the versions,
    and the columns are fitted to the table (the note gives way first, ending in "…")."""
    from PySide6.QtCore import Qt

    window = _opened(template, tmp_path, make_window, qtbot, width)
    window.resources.set_selection(Selection(RESOURCE, THREAD))
    window.show_tab("working_memory")
    wm = window.panes["working_memory"]
    qtbot.waitUntil(lambda: wm.snapshot is not None and wm.version_model.rowCount() > 0, timeout=30_000)
    wm.tabs.setCurrentIndex(1)
    qtbot.wait(50)  # (laid out)
    table = wm.history.table
    header = table.horizontalHeader()
    assert header.length() <= table.viewport().width(), (header.length(), table.viewport().width())
    assert table.horizontalScrollBar().maximum() == 0
    metrics = table.fontMetrics()
    titles = [table.model().headerData(c, Qt.Orientation.Horizontal) for c in range(header.count())]
    for row in wm.version_model.rows():
        for title, text in (("Saved", table.model().index(0, 1).data()), ("Size", row.size), ("Author", row.author)):
            column = titles.index(title)
            assert not table.isColumnHidden(column) and table.columnWidth(column) >= metrics.horizontalAdvance(text), \
                (title, text, table.columnWidth(column))
    assert not table.isColumnHidden(titles.index("Note"))
    window.session.pool.wait(20_000)


def test_replays_what_if_and_rerun_tables_fit_a_1100_px_window(template: Path, tmp_path: Path, make_window: Any,
                                                               qtbot: Any) -> None:
    """At a 1,100 px window What-If's turn table ran ~100 px past its edge (Changed and Why behind a sideways
    scroll bar) and Re-Run's figures ("Prompt tokens, our o200k estimate" sized to its text) pushed the
    Re-run column out of sight. Both are fitted to their place now: What-If's Entering / Leaving /
    Changed give way first (Δ's tooltip counts them), a cut cell ends in "…" with its whole on hover."""
    from PySide6.QtCore import Qt

    window = _opened(template, tmp_path, make_window, qtbot, 1100)
    window.resources.set_selection(Selection(RESOURCE, THREAD))
    window.show_tab("replay")
    pane = window.panes["replay"]
    qtbot.waitUntil(lambda: pane.step is not None and not pane.busy, timeout=30_000)
    panel = pane.what_if
    pane.tabs.setCurrentWidget(panel)
    panel.last_spin.setValue(1)
    with qtbot.waitSignal(panel.finished, timeout=60_000):
        panel.run()
    rerun = pane.rerun
    pane.tabs.setCurrentWidget(rerun)
    rerun.model_combo.setCurrentIndex(0)
    with qtbot.waitSignal(rerun.finished, timeout=60_000):
        rerun.run()
    for holder, table in ((panel, panel.table), (rerun, rerun.figures), (rerun, rerun.differences)):
        pane.tabs.setCurrentWidget(holder)
        qtbot.wait(50)  # (laid out)
        header = table.horizontalHeader()
        assert table.model().rowCount() > 0
        assert header.length() <= table.viewport().width(), (table.objectName(), header.length(),
                                                             table.viewport().width())
        assert table.horizontalScrollBar().maximum() == 0
        last = table.model().columnCount() - 1
        assert not table.isColumnHidden(last) and table.columnWidth(last) >= 40
        for row in range(table.model().rowCount()):
            for column in range(table.model().columnCount()):
                index = table.model().index(row, column)
                cut = table.fontMetrics().horizontalAdvance(index.data() or "") > table.columnWidth(column) - 8
                if not table.isColumnHidden(column) and cut:
                    assert index.data(Qt.ItemDataRole.ToolTipRole), (index.data(), column)  # (whole on hover)
    titles = [panel.model.headerData(c, Qt.Orientation.Horizontal) for c in range(panel.model.columnCount())]
    assert "entering" in panel.model.index(0, titles.index("Δ")).data(Qt.ItemDataRole.ToolTipRole)
    window.session.pool.wait(20_000)


def test_the_request_panels_title_has_the_panels_width_not_a_column_beside_its_button(qtbot: Any) -> None:
    """In the Prompt Inspector's request panel at a 1,100 px window (~320 px), "Model call 1 of 1 · preview:
    what the engine would send now" sat beside the Copy Request Body button and wrapped a word a line in a
    ~45 px column. The title has its own line now, the button under it."""
    from PySide6.QtWidgets import QApplication

    from studio.widgets.request_view import RequestPanel

    panel = RequestPanel()
    qtbot.addWidget(panel)
    panel.title.setText("Model call 1 of 1 · preview: what the engine would send now")
    panel.resize(320, 600)
    panel.show()
    QApplication.processEvents()
    assert panel.title.width() >= panel.width() - 12, (panel.title.width(), panel.width())
    assert panel.copy_btn.geometry().top() >= panel.title.geometry().bottom()  # (under it)
    line = panel.title.fontMetrics().lineSpacing()
    assert panel.title.heightForWidth(panel.title.width()) <= 3 * line


@pytest.mark.parametrize("theme", [None, "dark"])
@pytest.mark.parametrize("width", [1100, 1440, 1800])
def test_replays_recall_table_fits_with_its_scores_in_sight(template: Path, tmp_path: Path, themed: str | None,
                                                            theme: str | None, make_window: Any,
                                                            qtbot: Any, width: int) -> None:
    """Replay's Recall tab at a 1,440 px window: the whole message ids pushed Keyword, Fused and Window past the
    table's edge, behind a sideways scroll bar (docs/screenshots/replay-recall.png). It is fitted now: short
    message ids (whole on hover, with how to open them), every score and the window whole, the thread taking
    the rest; the rank is left out while the thread would be cut short (the message's tooltip says it)."""
    from PySide6.QtCore import Qt

    from studio.logic.replay_layout import RecallRow

    window = _opened(template, tmp_path, make_window, qtbot, width, height=900)
    window.resources.set_selection(Selection(RESOURCE, THREAD))
    window.show_tab("replay")
    pane = window.panes["replay"]
    qtbot.waitUntil(lambda: pane.step is not None and not pane.busy, timeout=30_000)
    view = pane.view
    rows = [RecallRow(1, "01a24563-ebfa-7304-beba-4a082d46ecda", "liwei-shanghai", 0.434, 12.607, 0.0328, 3, False),
            RecallRow(2, "01a24563-ebf3-7a69-bb46-f52f1a2229b1", "liwei-lisbon-restaurants", 0.397, None, 0.0161, 3,
                      True)]
    view.recall_model.set_rows(rows)
    table = view.recall_table
    view.tabs.setCurrentWidget(view.recall_page)
    qtbot.waitUntil(lambda: table.isVisible() and table.viewport().width() > 0, timeout=10_000)
    qtbot.wait(50)  # (laid out)
    model, metrics = table.model(), table.fontMetrics()
    titles = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(model.columnCount())]
    assert table.horizontalHeader().length() <= table.viewport().width(), (table.horizontalHeader().length(),
                                                                            table.viewport().width())
    assert table.horizontalScrollBar().maximum() == 0
    for title in ("Vector", "Keyword", "Fused"):
        column = titles.index(title)
        assert not table.isColumnHidden(column)
        for row in range(len(rows)):
            text = model.index(row, column).data() or ""
            assert metrics.horizontalAdvance(text) <= table.columnWidth(column) - 8, (title, text)  # whole
    for row in range(len(rows)):
        for column in range(model.columnCount()):
            index = model.index(row, column)
            if metrics.horizontalAdvance(index.data() or "") > table.columnWidth(column) - 8:
                assert index.data(Qt.ItemDataRole.ToolTipRole), (index.data(), column)  # (whole on hover)
    message = model.index(0, titles.index("Message")).data(Qt.ItemDataRole.ToolTipRole)
    assert rows[0].message_id in message and "rank 1, with 3 messages around it" in message  # (the rank, when left out)
    assert not table.isColumnHidden(titles.index("Window"))  # (it was left out at 1,440 px: the request side ~450 px)
    # (the rank was left out at 1,440 px, where the request side had ~450 px; the request goes under the context
    # table there now, s33-walk7, and the recall table has the view's width)
    assert not table.isColumnHidden(titles.index("#"))
    # the thread takes the rest: a few characters at least (it ends in "…", whole on hover, checked above)
    assert table.columnWidth(titles.index("Thread")) >= metrics.horizontalAdvance("liwei-s…") + 8
    window.session.pool.wait(20_000)
