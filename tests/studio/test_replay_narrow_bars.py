"""Replay's bars in a 720 px window: Re-Run's model, prompt, Re-Run button and settings, What-If's buttons and
progress, and the pane's own thread, trace and fork controls are each whole (their text and their width), none
over another, all in sight without scrolling sideways, whether the pane was built in a wide window and made
narrow or built narrow; from 900 px up the same. In the app as launched (themed) and unthemed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QAbstractButton, QComboBox, QLineEdit, QProgressBar, QWidget

from studio.selection import Selection

from .conftest import seeded_demo_folder
from .test_replay_inspector_columns import _window


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seeded_demo_folder(tmp_path_factory, "demo-narrow-bars")


def _controls(panel: QWidget) -> list[QWidget]:
    kinds = (QAbstractButton, QComboBox, QLineEdit, QProgressBar)
    return [w for w in panel.findChildren(QWidget) if isinstance(w, kinds) and w.isVisible()
            and w.objectName() != "qt_spinbox_lineedit" and not isinstance(w.parentWidget(), QComboBox)]


def _problems(name: str, controls: list[QWidget], page: Any) -> list[str]:
    """Each control as wide as it asks (its text whole), in sight in the page's view, over no other."""
    view = page.area.viewport()
    found: list[str] = []
    rects: list[tuple[QWidget, QRect]] = []
    for w in controls:
        label = w.objectName() or getattr(w, "text", lambda: "")() or type(w).__name__
        if isinstance(w, QLineEdit):  # (a field's hint is 17 characters; a setting's is capped at its value's)
            shown = w.text() or w.placeholderText()
            if w.fontMetrics().horizontalAdvance(shown) + 12 > w.width():
                found.append(f"{name}: {label}'s “{shown}” cut at {w.width()} px")
        elif w.width() < min(w.sizeHint().width(), w.maximumWidth()):
            found.append(f"{name}: {label} {w.width()} px of the {w.sizeHint().width()} it asks")
        if isinstance(w, QAbstractButton) and w.text() and \
                w.fontMetrics().horizontalAdvance(w.text().replace("&", "")) > w.width():
            found.append(f"{name}: {label}'s text cut at {w.width()} px")
        left = w.mapTo(view, QPoint(0, 0)).x()
        if left < 0 or left + w.width() > view.width():
            found.append(f"{name}: {label} out of sight sideways ({left}..{left + w.width()} of {view.width()})")
        rects.append((w, QRect(w.mapTo(view, QPoint(0, 0)), w.size())))
    for i, (a, ra) in enumerate(rects):
        for b, rb in rects[i + 1:]:
            if ra.intersects(rb) and not (a.isAncestorOf(b) or b.isAncestorOf(a)):
                found.append(f"{name}: {a.objectName() or type(a).__name__} over {b.objectName() or type(b).__name__}")
    return found


@pytest.mark.parametrize("theme", [None, "dark", "light"])
@pytest.mark.parametrize("built", [1440, 720])
def test_replays_bars_are_whole_and_in_sight_from_720_px(demo_dir: Path, tmp_path: Path, make_window: Any,
                                                          qtbot: Any, themed: str | None, theme: str | None,
                                                          built: int) -> None:
    """At 720 px Re-Run's row (model, prompt, call, Re-Run) asked 568 px side by side: built in a wide window
    the pane was read sideways, built narrow its combos were cut to 111 px over their text (found 2026-12-06 by
    a user). What-If's buttons asked 496 px and the pane's header 468-523: the pane was read sideways whichever
    tab it showed. Each bar now wraps where it runs out of room."""
    window = _window(demo_dir, tmp_path, make_window, qtbot, built)
    window.resize(built, 800)
    window.resources.set_selection(Selection("ada", "ada-groceries"))
    window.show_tab("replay")
    pane = window.panes["replay"]
    qtbot.waitUntil(lambda: pane.source is not None and pane.step is not None and not pane.busy, timeout=30_000)
    page = window.pages[[p.spec.name for p in window.pages].index("replay")]
    problems: list[str] = []
    for width in (720, 900, 720):
        window.resize(width, 800)
        for panel in (pane.rerun, pane.what_if):
            pane.tabs.setCurrentWidget(panel)
            qtbot.wait(100)
            qtbot.waitUntil(lambda: page.area.widget().height() >= page.area.widget().minimumSizeHint().height(),
                            timeout=5_000)
            if page.area.horizontalScrollBar().maximum() > 0:
                problems.append(f"{width}: read sideways ({page.area.horizontalScrollBar().maximum()} px)")
            head = [pane.thread_combo, pane.trace_btn, pane.fork_btn]
            problems += _problems(f"{width} {type(panel).__name__}", _controls(panel) + head, page)
    assert problems == [], "\n".join(problems)
    window.session.pool.wait(20_000)
