"""The Traces, Prompt Inspector and Observations panes with their side-by-side parts stacked (a narrow window):
the list a user reads keeps a useful number of rows there, not only the 3 rows of its least, and the page
scrolls to what is under it; side by side again (1,440 x 900) each part is as it was. In the app as launched
(themed, both themes) and unthemed. Rows are counted as a user sees them: whole in the view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QSplitter, QTreeView

from studio.selection import Selection

from .conftest import seeded_demo_folder
from .test_replay_inspector_columns import _window


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seeded_demo_folder(tmp_path_factory, "demo-stacked")


def _shown(demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, name: str,
           selection: Selection) -> tuple[Any, Any]:
    """(window, pane): a 1,440 px window on a copy of the demo, ``selection`` made and the pane ``name`` shown."""
    window = _window(demo_dir, tmp_path, make_window, qtbot, 1440)
    window.resources.set_selection(selection)
    window.show_tab(name)
    return window, window.panes[name]


def _whole_rows(tree: QTreeView) -> int:
    """The tree's rows whole in its view, from its first shown row down."""
    index, count, bottom = tree.indexAt(tree.viewport().rect().topLeft()), 0, tree.viewport().height()
    while index.isValid() and tree.visualRect(index).bottom() < bottom:
        count += 1
        index = tree.indexBelow(index)
    return count


def _whole_table_rows(table: Any) -> int:
    view = table.viewport().height()
    return sum(1 for r in range(table.model().rowCount())
               if table.rowViewportPosition(r) >= 0 and table.rowViewportPosition(r) + table.rowHeight(r) <= view)


def _stacks(pane: Any) -> QSplitter:
    return next(s for s in pane.findChildren(QSplitter) if s.property("stacksWhenNarrow"))


def _settle(window: Any, qtbot: Any, pane: Any, size: tuple[int, int]) -> None:
    window.resize(*size)
    qtbot.wait(50)
    qtbot.waitUntil(lambda: pane.height() >= pane.minimumSizeHint().height() or pane.height() >= pane.minimumHeight(),
                    timeout=5_000)
    qtbot.wait(100)


@pytest.mark.parametrize("theme", [None, "dark", "light"])
def test_traces_stacked_at_900_by_800_shows_eight_spans_and_side_by_side_at_1440_is_as_before(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, themed: str | None, theme: str | None) -> None:
    """At 900 x 800 the span tree went above the span's detail and kept its least, 3 rows: a run of 12 spans
    was read 3 at a time (found 2026-12-06 by a user). Stacked, it shows 8 whole rows, and the page scrolls to
    the detail's tabs; at 1,440 x 900 the tree and the detail are side by side, nothing scrolls, and the tree
    asks its 3 rows of least again."""
    from studio.panes.traces import STACKED_SPAN_ROWS
    from studio.widgets.record_table import LEAST_ROWS

    from .test_small_windows import _reachable

    window, pane = _shown(demo_dir, tmp_path, make_window, qtbot, "traces", Selection("li-wei", "liwei-shanghai"))
    qtbot.waitUntil(lambda: bool(pane.spans) and not pane.loading and pane.span_model.rowCount() > 0,
                    timeout=30_000)
    pane.tree.expandAll()
    page = window.pages[[p.spec.name for p in window.pages].index("traces")]
    lower = _stacks(pane)
    row = pane.tree.sizeHintForRow(0)
    assert row > 0
    for size in ((1440, 900), (900, 800), (1440, 900)):
        _settle(window, qtbot, pane, size)
        if size[0] == 1440:
            assert lower.orientation() == Qt.Orientation.Horizontal
            assert page.area.verticalScrollBar().maximum() == 0
            assert pane.tree.minimumHeight() < (LEAST_ROWS + 1) * row + pane.tree.header().height()
            assert _whole_rows(pane.tree) >= 12  # (the whole run, as before)
        else:
            assert lower.orientation() == Qt.Orientation.Vertical
            assert _whole_rows(pane.tree) >= STACKED_SPAN_ROWS, (pane.tree.viewport().height(), row)
            assert _reachable(page.area, pane.tabs, qtbot)
            page.area.verticalScrollBar().setValue(0)
    assert window.size().toTuple() == (1440, 900)
    window.session.pool.wait(20_000)


@pytest.mark.parametrize("theme", [None, "dark"])
def test_prompt_and_observations_stacked_at_720_keep_the_request_and_the_log_readable(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, themed: str | None, theme: str | None) -> None:
    """Stacked at 720 x 800, the inspector's request tabs had two lines of the request and its fragment table
    3 rows; the Observations log had two lines and its observation list one row. Stacked, the request tabs keep
    14 lines, the fragments 6 rows, the log and its list 24 lines between them; side by side again (1,440 x 900)
    they ask no more than before and nothing scrolls."""
    from studio.panes.observations import STACKED_LOG_LINES
    from studio.panes.prompt_inspector import MIN_FRAGMENT_ROWS, STACKED_FRAGMENT_ROWS, STACKED_REQUEST_LINES

    window, prompt = _shown(demo_dir, tmp_path, make_window, qtbot, "prompt", Selection("li-wei", "liwei-shanghai"))
    qtbot.waitUntil(lambda: prompt.preview is not None and not prompt.busy, timeout=30_000)
    assert prompt.fragment_model.rowCount() >= STACKED_FRAGMENT_ROWS
    lines = prompt.side_tabs.fontMetrics().lineSpacing()
    for size in ((1440, 900), (720, 800), (1440, 900)):
        _settle(window, qtbot, prompt, size)
        stacked = _stacks(prompt).orientation() == Qt.Orientation.Vertical
        assert stacked == (size[0] == 720), size
        rows = _whole_table_rows(prompt.fragment_table)
        if stacked:
            assert prompt.side_tabs.height() >= STACKED_REQUEST_LINES * lines
            assert rows >= STACKED_FRAGMENT_ROWS, rows
        else:
            assert prompt.side_tabs.minimumHeight() == 0 and rows >= MIN_FRAGMENT_ROWS

    window.resources.set_selection(Selection("sam", "sam-standup"))
    window.show_tab("observations")
    obs = window.panes["observations"]
    qtbot.waitUntil(lambda: obs.gen_model.rowCount() > 0, timeout=30_000)
    log_split = obs.log_view.parentWidget()
    assert isinstance(log_split, QSplitter)
    lines = log_split.fontMetrics().lineSpacing()
    for size in ((1440, 900), (720, 800), (1440, 900)):
        _settle(window, qtbot, obs, size)
        stacked = _stacks(obs).orientation() == Qt.Orientation.Vertical
        assert stacked == (size[0] == 720), size
        if stacked:
            assert log_split.height() >= STACKED_LOG_LINES * lines
            listed = obs.line_editor.list
            assert listed.viewport().height() >= 3 * listed.sizeHintForRow(0)
        else:
            assert log_split.minimumHeight() == 0
            page = window.pages[[p.spec.name for p in window.pages].index("observations")]
            assert page.area.verticalScrollBar().maximum() == 0
    assert window.size().toTuple() == (1440, 900)
    window.session.pool.wait(20_000)
