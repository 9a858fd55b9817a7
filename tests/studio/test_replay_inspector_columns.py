"""Replay's and the Prompt Inspector's tables in the main window at 1,100 and 1,440 px, in both themes, on
the demo data: the columns a user needs are in sight, whole where they must be read whole, and nothing
needed is behind a sideways scroll bar. A column that gives way is said elsewhere (a tooltip)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from studio.selection import Selection

from .conftest import seeded_demo_folder

WIDTHS = [1100, 1440]
THEMES = ["dark", "light"]
TIP = Qt.ItemDataRole.ToolTipRole


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seeded_demo_folder(tmp_path_factory, "demo-columns")


def _window(demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, width: int) -> Any:
    folder = tmp_path / "demo"
    shutil.copytree(demo_dir, folder)
    window = make_window()
    window.resize(width, 900)
    window.open_database(str(folder / "memory.db"))
    qtbot.waitUntil(lambda: window.resources is not None and len(window.resources.thread_rows()) >= 6,
                    timeout=20_000)
    return window


def _replay_at(window: Any, qtbot: Any, resource: str, thread: str, index: int) -> Any:
    window.resources.set_selection(Selection(resource, thread))
    window.show_tab("replay")
    pane = window.panes["replay"]
    qtbot.waitUntil(lambda: pane.source is not None and pane.source.thread_id == thread and pane.step is not None
                    and not pane.busy, timeout=30_000)
    pane.go_to(index)
    qtbot.waitUntil(lambda: pane.step is not None and pane.step.index == index and not pane.busy, timeout=30_000)
    return pane


def _titles(table: Any) -> list[str]:
    model = table.model()
    return [model.headerData(c, Qt.Orientation.Horizontal) for c in range(model.columnCount())]


def _fits(table: Any) -> None:
    """The shown columns end inside the table: no sideways scroll bar."""
    assert table.horizontalHeader().length() <= table.viewport().width(), (table.objectName(),
                                                                            table.horizontalHeader().length(),
                                                                            table.viewport().width())
    assert table.horizontalScrollBar().maximum() == 0


def _whole(table: Any, title: str, extra: int = 0) -> None:
    """Column ``title`` is shown and every cell of it reads whole (``extra``: a swatch before the text)."""
    titles, model, metrics = _titles(table), table.model(), table.fontMetrics()
    column = titles.index(title)
    assert not table.isColumnHidden(column), (title, titles)
    for row in range(model.rowCount()):
        text = model.index(row, column).data() or ""
        assert metrics.horizontalAdvance(text) + extra + 8 <= table.columnWidth(column), \
            (title, text, table.columnWidth(column))


def _cut_cells_say_it_on_hover(table: Any) -> None:
    model, metrics = table.model(), table.fontMetrics()
    for row in range(model.rowCount()):
        for column in range(model.columnCount()):
            index = model.index(row, column)
            if not table.isColumnHidden(column) and \
                    metrics.horizontalAdvance(index.data() or "") + 8 > table.columnWidth(column):
                assert index.data(TIP), (_titles(table)[column], index.data())


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("width", WIDTHS)
def test_replays_context_table_shows_each_fragments_source_reason_and_text(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, themed: str, width: int, theme: str) -> None:
    """Replay's context table at a 1,440 px window (~575 px beside the request) cut the source to "mess…"
    and "instru…" ("observational-…" on the stand-up thread), the reason to "working …" and the text to
    "You ar…" (docs/screenshots/replay-pane.png); at 1,100 px "message-hist…". The source reads whole now
    and the reason and text keep a few words: Role gives way first (the source's tooltip says it), then
    Stored (the fragment's details link them)."""
    window = _window(demo_dir, tmp_path, make_window, qtbot, width)
    for resource, thread in (("li-wei", "liwei-shanghai"), ("sam", "sam-standup")):
        pane = _replay_at(window, qtbot, resource, thread, 2)
        pane.tabs.setCurrentIndex(0)
        table = pane.view.step_table
        qtbot.waitUntil(lambda t=table: t.isVisible() and t.model().rowCount() >= 6, timeout=10_000)
        qtbot.wait(50)  # (laid out)
        _fits(table)
        titles, metrics = _titles(table), table.fontMetrics()
        hidden = {t for t in titles if table.isColumnHidden(titles.index(t))}
        assert hidden <= {"Role", "Stored"}, hidden
        swatch = max(table.iconSize().width(), 16)
        for title in ("#", "Change", "Tokens"):
            _whole(table, title)
        _whole(table, "Source", extra=swatch)
        assert table.columnWidth(titles.index("Why")) >= metrics.horizontalAdvance("new message") + 8
        assert table.columnWidth(titles.index("Text")) >= metrics.horizontalAdvance("You are a") + 8
        _cut_cells_say_it_on_hover(table)
        if "Role" in hidden:
            model = table.model()
            for row in range(model.rowCount()):
                role = model.index(row, titles.index("Role")).data()
                assert f"role {role}" in model.index(row, titles.index("Source")).data(TIP)
    window.session.pool.wait(20_000)


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("width", WIDTHS)
def test_replays_recall_table_shows_the_window_of_each_hit(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, themed: str, width: int, theme: str) -> None:
    """Replay > Recall at a 1,440 px window left its Window column out (the request side is ~450 px there),
    so how many messages around each hit the model got was never in sight. The window and every score are
    whole at both widths; the rank gives way first (the rows are in rank order, the message's tooltip says
    it), the thread ends in "…", whole on hover."""
    window = _window(demo_dir, tmp_path, make_window, qtbot, width)
    pane = _replay_at(window, qtbot, "li-wei", "liwei-shanghai", 2)
    pane.tabs.setCurrentIndex(0)
    view = pane.view
    table = view.recall_table
    view.tabs.setCurrentWidget(view.recall_page)
    qtbot.waitUntil(lambda: table.isVisible() and view.recall_model.rowCount() > 0, timeout=10_000)
    qtbot.wait(50)  # (laid out)
    _fits(table)
    for title in ("Message", "Vector", "Keyword", "Fused", "Window"):
        _whole(table, title)
    titles, model = _titles(table), table.model()
    assert not table.isColumnHidden(titles.index("Thread"))
    assert table.columnWidth(titles.index("Thread")) >= table.fontMetrics().horizontalAdvance("liwei-s…") + 8
    _cut_cells_say_it_on_hover(table)
    if table.isColumnHidden(titles.index("#")):
        for row in range(model.rowCount()):
            assert f"rank {model.index(row, 0).data()}," in model.index(row, titles.index("Message")).data(TIP)
    window.session.pool.wait(20_000)


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("width", WIDTHS)
def test_the_inspectors_recalled_messages_fit_without_a_sideways_scroll_bar(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, themed: str, width: int, theme: str) -> None:
    """The Prompt Inspector's recalled messages (under a semantic-recall fragment) at a 1,100 px window:
    ~470 px of columns in a ~360 px table, Thread and Role behind a sideways scroll bar. Role, then Keyword
    give way now (the score's tooltip says both); the message, how it was found, its score and thread stay."""
    window = _window(demo_dir, tmp_path, make_window, qtbot, width)
    window.resources.set_selection(Selection("li-wei", "liwei-shanghai"))
    window.show_tab("prompt")
    prompt = window.panes["prompt"]
    qtbot.waitUntil(lambda: prompt.preview is not None and not prompt.busy, timeout=30_000)
    prompt.message_edit.setText("Any restaurant tips for Lisbon?")
    prompt.recall_check.setChecked(True)
    qtbot.waitUntil(lambda: not prompt.busy and prompt.preview is not None and prompt.preview.request.options.recall
                    and any(r.source == "semantic-recall" for r in prompt.fragment_model.rows()), timeout=30_000)
    row = next(i for i, r in enumerate(prompt.fragment_model.rows()) if r.source == "semantic-recall")
    prompt.fragment_table.selectRow(row)
    table = prompt.recalled_table
    qtbot.waitUntil(lambda: table.isVisible() and prompt.recalled_model.rowCount() > 0, timeout=10_000)
    qtbot.wait(50)  # (laid out)
    _fits(table)
    titles, model = _titles(table), table.model()
    hidden = {t for t in titles if table.isColumnHidden(titles.index(t))}
    assert hidden <= {"Role", "Keyword"}, hidden
    for title in ("Message", "Score", "Vector"):
        _whole(table, title)
    for title in ("Found as", "Thread"):
        assert not table.isColumnHidden(titles.index(title))
    _cut_cells_say_it_on_hover(table)
    for r in range(model.rowCount()):
        tip = model.index(r, titles.index("Score")).data(TIP)
        for title in hidden:
            value = model.index(r, titles.index(title)).data() or "(none)"
            assert f"{title.lower()} {value}" in tip, (title, tip)
    window.session.pool.wait(20_000)


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("width", WIDTHS)
def test_the_other_replay_and_inspector_tables_keep_every_column_in_sight(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, themed: str, width: int, theme: str) -> None:
    """The tables these two panes show beside the ones above (Replay's tokens by section and a call's
    usage; the Inspector's fragments and its usage) at both widths: every column shown, none past the
    table's edge, a cut cell whole on hover. (They fitted before this pass too; kept so.)"""
    window = _window(demo_dir, tmp_path, make_window, qtbot, width)
    window.resources.set_selection(Selection("ada", "ada-weekend"))
    window.show_tab("prompt")
    prompt = window.panes["prompt"]
    qtbot.waitUntil(lambda: prompt.preview is not None and not prompt.busy
                    and prompt.preview.request.thread_id == "ada-weekend", timeout=30_000)
    qtbot.wait(50)
    for table in (prompt.fragment_table, prompt.request_view.usage_table):
        assert table.isVisibleTo(window) and table.model().rowCount() > 0
        _fits(table)
        assert not any(table.isColumnHidden(c) for c in range(table.model().columnCount()))
    _whole(prompt.fragment_table, "Tokens")
    _whole(prompt.fragment_table, "Share")
    pane = _replay_at(window, qtbot, "ada", "ada-weekend", 0)
    pane.tabs.setCurrentIndex(0)
    view = pane.view
    tokens = view.tabs.widget(view.tabs.count() - 1)
    for page, table in ((tokens, tokens), (view.request_page, view.request_view.usage_table)):
        view.tabs.setCurrentWidget(page)
        qtbot.waitUntil(lambda t=table: t.isVisible() and t.model().rowCount() > 0, timeout=10_000)
        qtbot.wait(50)
        _fits(table)
        assert not any(table.isColumnHidden(c) for c in range(table.model().columnCount()))
    for title in _titles(tokens)[1:]:
        _whole(tokens, title)
    window.session.pool.wait(20_000)
