"""Replay "with the memory as it is now" (pytest-qt, offscreen, a real libSQL file written by the engine,
the loopback server): the working memory of a thread was fixed by hand after five turns; Re-Run sends a
turn rebuilt with today's memory (the fix in it, said to be a reconstruction, with what differs and why),
and the What-If against today's memory lists exactly the five turns the fix touches."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Iterator

from PySide6.QtCore import Qt

import pytest

from core.llm import LoopbackServer
from studio.panes.replay import ReplayPane
from studio.preferences import Endpoint, Preferences
from studio.selection import Selection
from studio.session import StudioSession

from .replay_data import RESOURCE, THREAD, TURNS, build_replay_db
from .replay_panes import pane_preferences, shown_pane, studio_session
from .test_replay_pane import checksum

FIXED_AFTER = 5  # turns 1-5 ran before the fix (1-3 with no value, 4-5 with "vegetarian"); 6-8 after it


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("replay-today")
    build_replay_db(folder / "replay.db", wm_fix_after=FIXED_AFTER)
    return folder


@pytest.fixture
def session(template: Path, tmp_path: Path, qapp: Any) -> Iterator[StudioSession]:
    shutil.copytree(template, tmp_path / "data")
    yield from studio_session(tmp_path / "data" / "replay.db")


@pytest.fixture
def prefs(tmp_path: Path, qapp: Any) -> Preferences:
    return pane_preferences(tmp_path)


@pytest.fixture
def pane(no_leaked_widgets: None, qtbot: Any, session: StudioSession, prefs: Preferences) -> ReplayPane:
    return shown_pane(qtbot, session, prefs, Selection(RESOURCE, THREAD))


def _go_to(qtbot: Any, pane: ReplayPane, index: int) -> None:
    pane.go_to(index)
    qtbot.waitUntil(lambda: pane.step is not None and pane.step.index == index and not pane.busy, timeout=20_000)


def _text(messages: Any) -> str:
    return str(messages)


def test_rerun_with_the_memory_as_it_is_now_sends_the_fix_and_says_it_is_a_reconstruction(
        qtbot: Any, pane: ReplayPane, session: StudioSession, prefs: Preferences) -> None:
    with LoopbackServer(["A tofu stew, no eggs.", "An omelette."]) as server:
        prefs.save([Endpoint("Loopback", server.base_url, "loopback-chat", "none", "")], default="Loopback")
        _go_to(qtbot, pane, 4)  # turn 5: its model got "diet: vegetarian"
        before = checksum(session.store)
        rerun = pane.rerun
        pane.tabs.setCurrentWidget(rerun)
        assert "diet: vegetarian" in _text(pane.step.received.messages)
        rerun.prompt_combo.setCurrentIndex(rerun.prompt_combo.findData("today"))
        qtbot.waitUntil(lambda: rerun.today is not None and rerun.today.index == 4, timeout=20_000)
        note = rerun.today_label.text()
        assert rerun.today_label.isVisible()
        assert "A reconstruction from today's data" in note and "not the request the model received" in note
        assert "~ changed working-memory: working memory edited by hand since" in note
        assert len(rerun.today.changes) == 1  # only the working memory differs
        with qtbot.waitSignal(rerun.finished, timeout=30_000) as blocker:
            rerun.run_btn.click()
        fixed = server.chat_requests()[-1]
        raw = server.chat_request_bytes()[-1].decode()
        assert "vegan (no eggs, no dairy)" in raw and "diet: vegetarian" not in raw
        assert fixed["messages"] == blocker.args[0].request["messages"] == rerun.today.what_if.messages
        assert rerun.new_view.toPlainText() == "A tofu stew, no eggs."
        assert rerun.stored_view.toPlainText().startswith("About 'And a good place for din")
        assert "memory as it is now" in rerun.status.text() and "Nothing was saved" in rerun.status.text()
        # The same turn as its model received it: the wrong value, not the fix.
        rerun.prompt_combo.setCurrentIndex(rerun.prompt_combo.findData("received"))
        assert not rerun.today_label.isVisible()
        with qtbot.waitSignal(rerun.finished, timeout=30_000):
            rerun.run_btn.click()
        original = server.chat_requests()[-1]
        assert "diet: vegetarian" in _text(original["messages"]) and "vegan" not in _text(original["messages"])
        assert {k: v for k, v in fixed.items() if k != "messages"} == \
            {k: v for k, v in original.items() if k != "messages"}  # outside its messages, the recorded request
    assert checksum(session.store) == before  # nothing written


def test_a_turn_that_ran_after_the_fix_is_the_same_with_the_memory_as_it_is_now(qtbot: Any, pane: ReplayPane) -> None:
    _go_to(qtbot, pane, len(TURNS) - 1)
    rerun = pane.rerun
    rerun.prompt_combo.setCurrentIndex(rerun.prompt_combo.findData("today"))
    qtbot.waitUntil(lambda: rerun.today is not None, timeout=20_000)
    assert rerun.today.changes == []
    assert "nothing since changes this turn" in rerun.today_label.text()


def test_the_what_if_against_todays_memory_lists_the_turns_the_fix_touches(qtbot: Any, pane: ReplayPane,
                                                                           prefs: Preferences) -> None:
    panel = pane.what_if
    pane.tabs.setCurrentWidget(panel)
    panel.against_combo.setCurrentIndex(panel.against_combo.findData("today"))
    assert not any(cell.isEnabled() for cell in panel.option_cells)  # today's memory is compared as configured
    with qtbot.waitSignal(panel.finished, timeout=60_000):
        panel.run_btn.click()
    rows = panel.model.rows()
    assert [r.number for r in rows] == [1, 2, 3, 4, 5]  # only the turns whose prompt differs now
    assert all(r.reasons == "working memory edited by hand since" for r in rows)
    assert "5 of 8 turns' prompts differ" in panel.summary.text() and "turns 1, 2, 3, 4, 5" in panel.summary.text()
    with LoopbackServer(["Vegan it is."]) as server:
        prefs.save([Endpoint("Loopback", server.base_url, "loopback-chat", "none", "")], default="Loopback")
        with qtbot.waitSignal(panel.opened, timeout=20_000) as opened:
            panel.open_row(3)  # turn 4
        assert opened.args[0].against == "today" and opened.args[0].index == 3
        assert panel.rerun_btn.text() == "Re-Run With the Memory as It Is Now…"
        panel.rerun_btn.click()
        rerun = pane.rerun
        qtbot.waitUntil(lambda: pane.index == 3 and not pane.busy and pane.tabs.currentWidget() is rerun,
                        timeout=20_000)
        assert rerun.prompt_combo.currentData() == "today"
        with qtbot.waitSignal(rerun.finished, timeout=30_000):
            rerun.run_btn.click()
        assert "vegan (no eggs, no dairy)" in _text(server.chat_requests()[-1]["messages"])


def test_a_setting_changed_before_the_rebuild_arrives_is_sent(qtbot: Any, pane: ReplayPane, prefs: Preferences) -> None:
    with LoopbackServer(["Cooler."]) as server:
        prefs.save([Endpoint("Loopback", server.base_url, "loopback-chat", "none", "")], default="Loopback")
        _go_to(qtbot, pane, 4)
        rerun = pane.rerun
        pane.tabs.setCurrentWidget(rerun)
        rerun.prompt_combo.setCurrentIndex(rerun.prompt_combo.findData("today"))
        rerun.setting_edits["temperature"].setText("0.2")  # typed while (or after) the turn is rebuilt
        with qtbot.waitSignal(rerun.finished, timeout=30_000):
            rerun.run_btn.click()  # sent once the rebuild with today's memory is there
        sent = server.chat_requests()[-1]
    assert sent["temperature"] == 0.2 and "vegan (no eggs, no dairy)" in _text(sent["messages"])
    assert rerun.setting_edits["temperature"].text() == "0.2"


AGENT_WM = "# Ana\n- diet: vegan (no eggs, no dairy)\n- trip: Porto, May 3-6\n- day trip: Braga"


@pytest.fixture(scope="module")
def mixed_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Fixed by hand after turn 5, then the agent itself updates its working memory at turn 7: turns 1-5 differ
    from today's memory by the hand edit (among other things), turns 6-7 only by the agent's own update."""
    folder = tmp_path_factory.mktemp("replay-today-mixed")
    build_replay_db(folder / "replay.db", wm_fix_after=FIXED_AFTER, agent_wm_at={TURNS[6]: AGENT_WM})
    return folder


@pytest.fixture
def mixed_session(mixed_template: Path, tmp_path: Path, qapp: Any) -> Iterator[StudioSession]:
    shutil.copytree(mixed_template, tmp_path / "data")
    yield from studio_session(tmp_path / "data" / "replay.db")


def test_the_what_if_against_todays_memory_says_which_turns_a_hand_edit_changes(
        no_leaked_widgets: None, qtbot: Any, mixed_session: StudioSession, prefs: Preferences) -> None:
    """"Compare with: the memory as it is now" listed every turn whose working memory differs from today's,
    the agent's own later updates among them, with nothing to tell them from the turns a hand fix changes, and
    its token column was headed "Tokens what-if". The Cause column says which now, "Only hand edits" (on by
    default) lists the turns a hand edit changes, the summary counts the others, and the column is "Tokens now"."""
    from studio.widgets.replay_what_if import COL_TOKENS_WHAT_IF

    pane = shown_pane(qtbot, mixed_session, prefs, Selection(RESOURCE, THREAD))
    panel = pane.what_if
    pane.tabs.setCurrentWidget(panel)
    assert not panel.hand_only_box.isVisible()  # (with the options, nothing is a hand edit)
    panel.against_combo.setCurrentIndex(panel.against_combo.findData("today"))
    assert panel.hand_only_box.isVisible() and panel.hand_only_box.isChecked()
    with qtbot.waitSignal(panel.finished, timeout=60_000):
        panel.run_btn.click()
    header = panel.model.headerData(COL_TOKENS_WHAT_IF, Qt.Orientation.Horizontal)
    assert header == "Tokens now"
    cause = _column(panel, "Cause")
    assert not panel.table.isColumnHidden(cause)
    rows = panel.model.rows()
    assert [r.number for r in rows] == [1, 2, 3, 4, 5]
    assert {panel.model.index(i, cause).data() for i in range(len(rows))} == {"hand edit"}
    summary = panel.summary.text()
    assert "7 of 8 turns' prompts differ" in summary
    assert "5 by a hand edit since (turns 1, 2, 3, 4, 5), listed; 2 only by what the thread did since" in summary

    panel.hand_only_box.setChecked(False)  # every turn that differs, each saying why
    rows = panel.model.rows()
    assert [r.number for r in rows] == [1, 2, 3, 4, 5, 6, 7]
    causes = [panel.model.index(i, cause).data() for i in range(len(rows))]
    assert causes == ["hand edit"] * 5 + ["the thread"] * 2
    assert all(r.reasons == "working memory changed" for r in rows[5:])
    assert "the Cause column says which" in panel.summary.text()

    panel.against_combo.setCurrentIndex(panel.against_combo.findData("options"))
    assert not panel.hand_only_box.isVisible()
    with qtbot.waitSignal(panel.finished, timeout=60_000):
        panel.run_btn.click()
    assert panel.model.headerData(COL_TOKENS_WHAT_IF, Qt.Orientation.Horizontal) == "Tokens what-if"
    assert panel.table.isColumnHidden(cause) and len(panel.model.rows()) == 8


def _column(panel: Any, title: str) -> int:
    model = panel.model
    return next(c for c in range(model.columnCount()) if model.headerData(c, Qt.Orientation.Horizontal) == title)


def test_rerun_says_what_the_chosen_prompt_sends_before_anything_runs(qtbot: Any, pane: ReplayPane) -> None:
    """Re-Run's hint before a run was one text for its three prompts ("re-run this call with its recorded
    tools…"), silent on "with the memory as it is now" being a reconstruction: it follows the choice now."""
    from studio.widgets.replay_rerun import IDLE_HINTS, RECEIVED, TODAY

    _go_to(qtbot, pane, 4)
    rerun = pane.rerun
    pane.tabs.setCurrentWidget(rerun)
    assert rerun.status.text() == IDLE_HINTS[RECEIVED] and "as the model received it" in rerun.status.text()
    rerun.prompt_combo.setCurrentIndex(rerun.prompt_combo.findData(TODAY))
    assert rerun.status.text() == IDLE_HINTS[TODAY] and "A reconstruction" in rerun.status.text()
    rerun.prompt_combo.setCurrentIndex(rerun.prompt_combo.findData(RECEIVED))
    assert rerun.status.text() == IDLE_HINTS[RECEIVED]
    assert len(set(IDLE_HINTS.values())) == 3
