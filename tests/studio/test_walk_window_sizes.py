"""The Studio in a large window (session 24's walk at 2,560 px): the spare width goes where the text is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from .conftest import seeded_demo_folder, theme_restored
from .test_replay_inspector_columns import _fits, _replay_at, _titles, _whole, _window


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seeded_demo_folder(tmp_path_factory, "demo-wide")


def _context_table(demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, width: int, resource: str,
                   thread: str) -> tuple[Any, Any]:
    """The window at ``width`` and Replay's context table on ``thread``'s third turn, laid out."""
    window = _window(demo_dir, tmp_path, make_window, qtbot, width)
    pane = _replay_at(window, qtbot, resource, thread, 2)
    pane.tabs.setCurrentIndex(0)
    table = pane.view.step_table
    qtbot.waitUntil(lambda: table.isVisible() and table.model().rowCount() >= 6, timeout=10_000)
    qtbot.wait(50)  # (laid out)
    return window, table


@pytest.mark.parametrize("theme", [None, "dark", "light"])
def test_replays_context_table_gives_a_wide_windows_room_to_the_fragments_text(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, themed: str | None, theme: str | None) -> None:
    """At a 2,560 px window Source and Why took ~45 % each of the spare width, ~500 px, mostly blank, and
    the fragment's text, what the table is read for, ~150 px: "You are a st…" (found 2026-12-06 by the
    walk). Each now takes what its usual text needs, the text the rest."""
    window, table = _context_table(demo_dir, tmp_path, make_window, qtbot, 2560, "sam", "sam-standup")
    _fits(table)
    titles, metrics = _titles(table), table.fontMetrics()
    _whole(table, "Source", extra=max(table.iconSize().width(), 16))
    why, text = table.columnWidth(titles.index("Why")), table.columnWidth(titles.index("Text"))
    assert why >= metrics.horizontalAdvance("observed by observational memory") + 8
    assert text >= table.viewport().width() // 3, (text, table.viewport().width())
    assert text > why and text > table.columnWidth(titles.index("Source"))
    window.session.pool.wait(20_000)


@pytest.mark.parametrize("theme", [None, "dark", "light"])
@pytest.mark.parametrize("width", [1100, 1440])
def test_replays_context_table_at_ordinary_widths_keeps_its_columns(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, width: int, themed: str | None,
        theme: str | None) -> None:
    """The caps change nothing where the shares are below them: at 1,100 and 1,440 px the source reads
    whole and the reason keeps its words as before."""
    window, table = _context_table(demo_dir, tmp_path, make_window, qtbot, width, "sam", "sam-standup")
    _fits(table)
    _whole(table, "Source", extra=max(table.iconSize().width(), 16))
    titles, metrics = _titles(table), table.fontMetrics()
    assert table.columnWidth(titles.index("Why")) >= metrics.horizontalAdvance("new message") + 8
    window.session.pool.wait(20_000)


@pytest.mark.parametrize("theme", ["dark", "light"])
def test_the_prompt_inspectors_options_wrap_inside_a_900_px_window(demo_dir: Path, tmp_path: Path, qapp: Any,
                                                                    make_window: Any, qtbot: Any, theme: str) -> None:
    """At a 900 px window the options' last row (Working memory, Observational memory, No writes from the
    agent) was one item wider than the bar: it ran past the bar's edge, "No writes from the ag" cut with no
    mark (found 2026-12-06 by the walk). Each option wraps on its own now, and every one is whole; and
    a row wrapped in a window short of height is not drawn below the bar, out of sight (the bar's least
    height was one row: ``FlowLayout`` now asks for its rows' height at its width)."""
    from studio.theme import apply_theme

    with theme_restored(qapp):
        apply_theme(qapp, theme)  # (the app's font: at least 10 pt)
        _options_whole_at_900(demo_dir, tmp_path, make_window, qtbot)


def _options_whole_at_900(demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any) -> None:
    from PySide6.QtCore import QPoint
    from PySide6.QtWidgets import QAbstractButton, QWidget

    from studio.selection import Selection

    window = _window(demo_dir, tmp_path, make_window, qtbot, 900)
    window.resize(900, 700)  # (short too: the pane has less height than its parts would like)
    window.resources.set_selection(Selection("sam", "sam-standup"))
    window.show_tab("prompt")
    pane = window.panes["prompt"]
    qtbot.waitUntil(lambda: pane.preview is not None and not pane.busy, timeout=30_000)
    qtbot.wait(50)  # (laid out)
    bar = pane.options_bar
    cut = []
    for control in bar.findChildren(QWidget):
        if not isinstance(control, QAbstractButton) or not control.isVisible():
            continue
        corner = control.mapTo(bar, QPoint(control.width(), control.height()))
        # (squeezed below what its text needs, or past the bar's edge or below its bottom: cut or unseen)
        if control.width() < control.sizeHint().width() or not bar.contentsRect().adjusted(0, 0, 1, 1).contains(corner):
            cut.append((control.text(), control.width(), control.sizeHint().width(), corner))
    assert cut == [], (cut, bar.contentsRect())
    window.session.pool.wait(20_000)


@pytest.mark.parametrize("theme", [None, "dark", "light"])
def test_replays_reasons_read_whole_side_by_side_before_the_stored_ids_are_shown(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, themed: str | None, theme: str | None) -> None:
    """At a 1,440 × 900 window, Replay's context table (side by side with the request, ~570 px) on ada's groceries
    showed the optional Stored column (89 px of short ids, said again under the table) while the reason read
    "working memory c…" (found 2026-12-07 by s33-walk5). Side by side, the reason gets "working memory changed"
    before Stored is shown. (A 1,440 px window stacks the request under the table now: side by side from ~1,700.)"""
    from studio.widgets.replay_turn import STACK_BELOW

    window, table = _context_table(demo_dir, tmp_path, make_window, qtbot, 1800, "ada", "ada-groceries")
    view = window.panes["replay"].view
    assert view.width() >= STACK_BELOW and view.orientation() == Qt.Orientation.Horizontal
    _fits(table)
    titles, metrics, model = _titles(table), table.fontMetrics(), table.model()
    reasons = {model.index(r, titles.index("Why")).data() for r in range(model.rowCount())}
    assert "working memory changed" in reasons
    assert table.columnWidth(titles.index("Why")) >= metrics.horizontalAdvance("working memory changed") + 8
    assert table.isColumnHidden(titles.index("Stored"))
    _whole(table, "Source", extra=max(table.iconSize().width(), 16))
    window.session.pool.wait(20_000)


@pytest.mark.parametrize("theme", [None, "dark", "light"])
@pytest.mark.parametrize("thread", [("ada", "ada-groceries"), ("sam", "sam-standup")])
def test_at_1440_px_replays_context_table_reads_every_reason_whole_and_gives_the_text_real_room(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, thread: tuple[str, str], themed: str | None,
        theme: str | None) -> None:
    """Replay is the debugger's main view, and at a 1,440 × 900 window its context table had ~575 px beside the
    request (whose recall table needs ~420): the fragment's text kept ~70 px ("Hi! I'A…"), the reasons read
    "observed by observati…" (found 2026-12-07 by s33-walk5 and walk6). The request goes under the table there
    now: every reason reads whole, the text has at least a quarter of the table, and the request side keeps its
    tabs (test_replay_inspector_columns: its recall table whole). In the themed app (10 pt) the text had 237 px of
    1,024 beside the stored ids (cut there, "record …7d…"): they wait for the text's quarter now."""
    window, table = _context_table(demo_dir, tmp_path, make_window, qtbot, 1440, *thread)
    _fits(table)
    titles, metrics, model = _titles(table), table.fontMetrics(), table.model()
    why = table.columnWidth(titles.index("Why"))
    for row in range(model.rowCount()):
        reason = model.index(row, titles.index("Why")).data() or ""
        assert metrics.horizontalAdvance(reason) + 8 <= why, (reason, why)
    assert table.columnWidth(titles.index("Text")) >= table.viewport().width() // 4, (
        table.columnWidth(titles.index("Text")), table.viewport().width())
    _whole(table, "Source", extra=max(table.iconSize().width(), 16))
    view = window.panes["replay"].view
    assert view.tabs.height() >= 150 and table.viewport().height() >= 6 * table.verticalHeader().defaultSectionSize()
    window.session.pool.wait(20_000)


@pytest.mark.parametrize("theme", [None, "dark", "light"])
def test_at_1440_px_replays_header_names_whose_options_whole_and_how_they_were_chosen_on_hover(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, themed: str | None, theme: str | None) -> None:
    """Replay's header at a 1,440 px window read "… · options from agent 'chef' (agen…": the reason named the agent
    again, "(agent 'chef' answered last in this thread)" (found 2026-12-07 by s33-walk5). The header names the agent
    whole; how it was chosen is in the tooltip. In the themed app (10 pt) the subtitle was still cut beside the
    header's tools: it leaves the resource to the tooltip (the thread list and the thread picker beside it name it)."""
    window, _table = _context_table(demo_dir, tmp_path, make_window, qtbot, 1440, "sam", "sam-standup")
    subtitle = window.panes["replay"].subtitle
    assert subtitle.text() == "thread sam-standup · options from agent 'notes-om'", subtitle.text()
    assert not subtitle.elided(), (subtitle.text(), subtitle.width())
    assert "options from agent 'notes-om' (agent 'notes-om' answered last in this thread)" in subtitle.toolTip()
    assert "thread sam-standup · resource sam · options from" in subtitle.toolTip()
    window.session.pool.wait(20_000)
