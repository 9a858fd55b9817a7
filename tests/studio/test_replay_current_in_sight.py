"""Replay opens a thread at its last turn and picks the first fragment that changed since the turn before,
whose text, sources and why it shows under the table. At 720 x 800 (and 1,100 x 700) the row was picked
while the table was taller than the layout then left it (66 px, three rows), so the table stayed at its
top with the picked row below them: the detail described a row the user could not see. The table keeps
its current row in sight when its height changes; turn by turn it always had."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from studio.selection import Selection

from .conftest import seeded_demo_folder
from .test_replay_inspector_columns import _window


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seeded_demo_folder(tmp_path_factory, "demo-replay-current")


def _current_in_sight(table: Any) -> bool:
    rect = table.visualRect(table.currentIndex())
    return table.currentIndex().isValid() and rect.top() >= 0 and rect.bottom() <= table.viewport().height()


@pytest.mark.parametrize("size", [(720, 800), (1100, 700), (1440, 900)])
def test_the_fragment_replay_picks_on_opening_a_thread_is_in_sight(
        demo_dir: Path, tmp_path: Path, make_window: Any, qtbot: Any, size: tuple[int, int]) -> None:
    window = _window(demo_dir, tmp_path, make_window, qtbot, size[0])
    window.resize(*size)
    window.resources.set_selection(Selection("sam", "sam-standup"))
    window.show_tab("replay")
    pane = window.panes["replay"]
    qtbot.waitUntil(lambda: pane.step is not None and not pane.busy, timeout=30_000)
    window.session.pool.wait(20_000)
    qtbot.wait(300)
    table = pane.view.step_table
    rows = pane.view.step_model.rows()
    assert pane.step.index > 0 and pane.slider.value() == pane.slider.maximum()  # (the last turn)
    current = table.currentIndex().row()
    assert rows[current].change, "the first changed fragment is picked"
    assert current >= 3, "the demo's last turn changes a fragment below the first three rows"
    assert _current_in_sight(table), (current, table.visualRect(table.currentIndex()), table.viewport().height())

    pane.go_to(0)  # (turn by turn, as before)
    qtbot.waitUntil(lambda: pane.step is not None and pane.step.index == 0 and not pane.busy, timeout=30_000)
    qtbot.wait(100)
    assert _current_in_sight(table)
    window.session.pool.wait(20_000)
