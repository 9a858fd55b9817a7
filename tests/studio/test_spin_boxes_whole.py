"""Every spin box of every pane shows its whole value: as wide as its size hint asks (Qt's hint is the width of
its widest value, its special text and its suffix, and the arrows), at 720 and at 1,440 px, in the light and the
dark theme, whichever width the pane was built at. The Prompt Inspector's were capped 1-24 px below their hint
(Token budget 78 of 102 px, Top-K 60 of 69); the PNGs of each pane were looked at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QAbstractSpinBox

from studio.selection import Selection

from .conftest import seeded_demo_folder
from .test_replay_inspector_columns import _window

HEIGHT = 800


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seeded_demo_folder(tmp_path_factory, "demo-spin-boxes")


def _cut_spin_boxes(label: str, pane: Any) -> list[str]:
    cut = []
    for spin in pane.findChildren(QAbstractSpinBox):
        if not spin.isVisible():
            continue
        hint = spin.sizeHint().width()
        shown = spin.lineEdit()  # the value's own room, inside the frame and the arrows
        text = spin.text()
        if spin.width() < hint or shown.fontMetrics().horizontalAdvance(text) > shown.width():
            cut.append(f"{label}: {spin.accessibleName() or spin.objectName() or spin.toolTip()[:30]!r} "
                       f"{spin.width()} px of the {hint} it asks (its {text!r} in {shown.width()} px)")
    return cut


def _panes_with_spin_boxes(window: Any, qtbot: Any) -> list[tuple[str, Any]]:
    from studio.main_window import PANES

    shown = []
    for spec in PANES:
        window.resources.set_selection(Selection("li-wei", "liwei-shanghai"))
        window.show_tab(spec.name)
        pane = window.panes[spec.name]
        qtbot.waitUntil(lambda p=pane: not getattr(p, "busy", False), timeout=30_000)
        window.session.pool.wait(20_000)
        if spec.name == "replay":
            pane.tabs.setCurrentWidget(pane.what_if)
        qtbot.wait(150)
        if any(s.isVisible() for s in pane.findChildren(QAbstractSpinBox)):
            shown.append((spec.name, pane))
    return shown


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize(("built", "widths"), [(1440, (1440, 720)), (720, (720, 1440))])
def test_every_spin_box_shows_its_whole_value_at_720_and_1440_px(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, themed: str | None, theme: str,
        built: int, widths: tuple[int, ...]) -> None:
    window = _window(demo_dir, tmp_path, make_window, qtbot, built)
    window.resize(built, HEIGHT)
    panes = _panes_with_spin_boxes(window, qtbot)
    assert {"prompt", "chat", "recall", "replay"} <= {name for name, _ in panes}  # (each one looked at)
    problems: list[str] = []
    for width in widths:
        window.resize(width, HEIGHT)
        for name, pane in panes:
            window.show_tab(name)
            qtbot.wait(200)
            problems += _cut_spin_boxes(f"{width} {theme} {name}", pane)
    assert problems == [], "\n".join(problems)
    window.session.pool.wait(20_000)
