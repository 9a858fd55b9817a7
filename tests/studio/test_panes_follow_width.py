"""Every pane follows the window's width: at 720 px (a 1,440 x 900 screen at a scale of 2, its pane ~450 px
wide) no page scrolls sideways, no pane is wider than its page, no button or list box is cut below its
least width, no table scrolls sideways (the Prompt Inspector's fragments did, Tokens and Text out of sight), and
Replay's title keeps the thread's name. Both build orders: a pane built in a 1,440 px
window and the window narrowed (its least width was fixed at the build: the Chat, Recall and Working Memory
panes were read sideways, 65 to 208 px), and a pane built at 720 px (it was squeezed instead: combos and
spin boxes cut). Unthemed and in the dark theme. Observations' tables are not cut at 900 px (their
side stacks first). Geometry is checked; the PNGs of each pane were looked at."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from PySide6.QtWidgets import (QAbstractButton, QAbstractItemView, QComboBox, QHeaderView, QLabel, QTableView,
                               QTreeView, QWidget)

from studio.selection import Selection
from studio.widgets.scroll_fit import least_size

from .conftest import seeded_demo_folder
from .test_replay_inspector_columns import _window

NARROW, WIDE, HEIGHT = 720, 1440, 800
CUT_CONTROLS = (QAbstractButton, QComboBox)  # (a label may end in "…" by design; these must be whole)


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seeded_demo_folder(tmp_path_factory, "demo-follow-width")


def _selection(name: str) -> Selection:
    """A thread with something to show in pane ``name`` (the demo's observational memory is Sam's)."""
    return Selection("sam", "sam-standup") if name == "observations" else Selection("li-wei", "liwei-shanghai")


def _views(window: Any, qtbot: Any) -> Iterator[tuple[str, Any, Any]]:
    """(label, page, pane) for each pane, its reads over, and each tab of Replay."""
    from studio.main_window import PANES

    for spec in PANES:
        window.resources.set_selection(_selection(spec.name))
        window.show_tab(spec.name)
        pane = window.panes[spec.name]
        qtbot.waitUntil(lambda p=pane: not getattr(p, "busy", False), timeout=30_000)
        window.session.pool.wait(20_000)
        qtbot.wait(150)
        page = window.pages[PANES.index(spec)]
        if spec.name != "replay":
            yield spec.name, page, pane
            continue
        for index in range(pane.tabs.count()):
            pane.tabs.setCurrentIndex(index)
            qtbot.wait(100)
            yield f"replay ({pane.tabs.tabText(index)})", page, pane
        pane.tabs.setCurrentIndex(0)


def _sideways(label: str, page: Any, pane: QWidget) -> list[str]:
    problems = []
    bar, view = page.area.horizontalScrollBar(), page.area.viewport().width()
    if bar.maximum() > 0:
        problems.append(f"{label}: the page scrolls sideways {bar.maximum()} px")
    if pane.width() > view:
        problems.append(f"{label}: {pane.width()} px wide in a {view} px page")
    for control in pane.findChildren(QWidget):
        if isinstance(control, CUT_CONTROLS) and not isinstance(control, QHeaderView) and control.isVisible() \
                and control.width() < least_size(control).width():
            problems.append(f"{label}: {type(control).__name__} {control.objectName() or control.accessibleName()!r} "
                            f"cut to {control.width()} px of {least_size(control).width()}")
    for view in pane.findChildren(QAbstractItemView):  # (a text viewer of JSON may scroll sideways: it does not wrap)
        if isinstance(view, (QTableView, QTreeView)) and view.isVisible() and view.horizontalScrollBar().maximum() > 0:
            problems.append(f"{label}: the table {view.objectName() or view.accessibleName()!r} scrolls sideways "
                            f"{view.horizontalScrollBar().maximum()} px")
    return problems


def _narrowed(window: Any, qtbot: Any) -> None:
    window.resize(NARROW, HEIGHT)
    qtbot.wait(300)


@pytest.mark.parametrize(("built", "theme"), [("wide", None), ("narrow", None), ("wide", "dark"), ("narrow", "dark")])
def test_every_pane_fits_a_720_px_window_whichever_width_it_was_built_at(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, themed: str | None, built: str,
        theme: str | None) -> None:
    """The pane is built at ``built`` width (each one shown there first), then looked at 720 px wide."""
    window = _window(demo_dir, tmp_path, make_window, qtbot, WIDE if built == "wide" else NARROW)
    window.resize(WIDE if built == "wide" else NARROW, HEIGHT)
    problems: list[str] = []
    if built == "wide":
        for _label, _page, _pane in _views(window, qtbot):
            pass  # (every pane built and loaded in the wide window)
        _narrowed(window, qtbot)
    for label, page, pane in _views(window, qtbot):
        problems += _sideways(label, page, pane)
        if label.startswith("replay"):  # the thread's name whole, not "Replay ·…"
            title = pane.title
            if title.width() < title.sizeHint().width():
                problems.append(f"{label}: the title {title.text()!r} is cut to {title.width()} px "
                                f"of {title.sizeHint().width()}")
    assert window.width() == NARROW
    assert problems == [], "\n".join(problems)
    window.session.pool.wait(20_000)


@pytest.mark.parametrize("theme", [None])
def test_observations_tables_are_not_cut_sideways_at_900_px(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, themed: str | None, theme: str | None) -> None:
    """At 900 x 800 the generations table was ~220 px beside the log: its columns ran past its edge (Created
    cut, a sideways scroll bar). Its side now stacks over the log before a column is cut."""
    window = _window(demo_dir, tmp_path, make_window, qtbot, 900)
    window.resize(900, HEIGHT)
    window.resources.set_selection(_selection("observations"))
    window.show_tab("observations")
    pane = window.panes["observations"]
    qtbot.waitUntil(lambda: pane.gen_model.rowCount() > 0, timeout=30_000)
    qtbot.wait(300)
    tables = [t for t in pane.findChildren(QTableView) if t.isVisible()]
    assert pane.gen_table in tables
    cut = [f"{t.accessibleName() or t.objectName()}: {t.horizontalScrollBar().maximum()} px sideways"
           for t in tables if t.horizontalScrollBar().maximum() > 0]
    assert cut == []
    window.session.pool.wait(20_000)


WM_TITLES = {"markdown": ("Editor", "Rendered", "Template the agent fills in"),
             "json": ("Editor", "Stored now", "Result after save (merge preview)")}


def _label_cut(label: QLabel) -> str | None:
    """How ``label``'s text is cut, if it is: one line wider than the label, or (a wrapped label) a word wider
    than it or fewer lines' height than its text needs at its width."""
    width, metrics = label.contentsRect().width(), label.fontMetrics()
    if not label.wordWrap():
        needed = metrics.horizontalAdvance(label.text())
        return f"cut to {width} px of {needed}" if needed > width else None
    widest = max((metrics.horizontalAdvance(word) for word in label.text().split()), default=0)
    if widest > width:
        return f"a word cut to {width} px of {widest}"
    if label.height() < label.heightForWidth(label.width()):
        return f"{label.height()} px high of the {label.heightForWidth(label.width())} its lines need"
    return None


@pytest.mark.parametrize(("built", "theme"), [("wide", None), ("narrow", None), ("wide", "dark"), ("narrow", "dark")])
def test_working_memorys_section_titles_and_the_editors_size_stay_whole_at_720_px(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, themed: str | None, built: str,
        theme: str | None) -> None:
    """At a 720 px window the editor's title line read "Editoı 188 chars · 72 tokens a" (the title and the size
    beside it were elastic, cut with no mark) and, in Markdown mode, the template's title read "Template the
    age". The titles wrap where they must (never narrower than a word) and the size goes under the title."""
    window = _window(demo_dir, tmp_path, make_window, qtbot, WIDE if built == "wide" else NARROW)
    window.resize(WIDE if built == "wide" else NARROW, HEIGHT)
    pane = window.panes["working_memory"]
    problems: list[str] = []
    for resource, thread, fmt in (("sam", "sam-standup", "markdown"), ("li-wei", "liwei-shanghai", "json")):
        window.resources.set_selection(Selection(resource, thread))
        window.show_tab("working_memory")
        qtbot.waitUntil(lambda f=fmt, r=resource: pane.title.text() == f"Resource {r}" and pane.draft is not None
                        and pane.draft.fmt == f, timeout=30_000)
        window.session.pool.wait(20_000)
        if built == "wide":
            qtbot.wait(150)
            _narrowed(window, qtbot)
        qtbot.wait(300)
        assert window.width() == NARROW
        titles = {label.text(): label for label in pane.findChildren(QLabel)
                  if label.isVisible() and label.text() in WM_TITLES[fmt]}
        assert sorted(titles) == sorted(WM_TITLES[fmt])
        assert pane.size_label.isVisible() and "chars" in pane.size_label.text()
        for label in (*titles.values(), pane.size_label):
            cut = _label_cut(label)
            if cut is not None:
                problems.append(f"{fmt}: {label.text()!r} {cut}")
        if built == "wide":
            window.resize(WIDE, HEIGHT)
    assert problems == [], "\n".join(problems)
    window.session.pool.wait(20_000)
