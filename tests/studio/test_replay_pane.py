"""Replay pane (pytest-qt, offscreen, a real libSQL file written by the engine): stepping with buttons, the
slider and the keyboard, the diff against the previous turn, received vs rebuilt now, the what-if table
and Cancel, fork (and its refusal on a read-only database), and re-run against the loopback server."""

from __future__ import annotations

import hashlib
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest
import sqlalchemy as sa
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from core import Memory, MemoryOptions, open_store
from core.llm import LoopbackServer
from studio.panes.replay import ReplayPane
from studio.preferences import Endpoint, Preferences
from studio.selection import Selection
from studio.session import StudioSession, open_for_studio
from studio.widgets.fork_dialog import ForkDialog

from .replay_data import OTHER, RESOURCE, THREAD, TURNS, build_replay_db
from .replay_panes import pane_preferences, shown_pane, studio_session


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("replay-template")
    info = build_replay_db(folder / "replay.db")
    return folder, info


@pytest.fixture
def db(template: tuple[Path, dict[str, Any]], tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    shutil.copytree(template[0], folder)
    return folder / "replay.db"


@pytest.fixture
def prefs(tmp_path: Path, qapp: Any) -> Preferences:
    return pane_preferences(tmp_path)


@pytest.fixture
def session(db: Path, qapp: Any) -> Iterator[StudioSession]:
    yield from studio_session(db)


@pytest.fixture
def pane(no_leaked_widgets: None, qtbot: Any, session: StudioSession, prefs: Preferences) -> ReplayPane:
    return shown_pane(qtbot, session, prefs)


def checksum(store: Any) -> str:
    """Every row of every table: "looking never writes" means this does not change."""
    h = hashlib.sha256()
    with store.db.read() as conn:
        names = [r[0] for r in conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name").all()]
        for name in names:
            h.update(name.encode())
            for row in conn.execute(sa.text(f'SELECT * FROM "{name}" ORDER BY 1')).all():
                h.update(repr(tuple(row)).encode())
    return h.hexdigest()


def open_thread(qtbot: Any, pane: ReplayPane, thread: str = THREAD) -> None:
    with qtbot.waitSignal(pane.step_shown, timeout=30_000):
        pane.set_selection(Selection(RESOURCE, thread))


@contextmanager
def replay_on(qtbot: Any, db: Path, prefs: Preferences,
              selection: Selection = Selection(RESOURCE, THREAD)) -> Iterator[ReplayPane]:
    """A Replay pane on ``db`` as the test left it, ``selection``'s thread open; its session closed after."""
    session = StudioSession(open_for_studio(db))
    pane = ReplayPane(session, preferences=prefs)
    qtbot.addWidget(pane)
    pane.show()
    try:
        with qtbot.waitSignal(pane.step_shown, timeout=30_000):
            pane.set_selection(selection)
        yield pane
    finally:
        session.pool.wait(20_000)
        session.close()


def wait_step(qtbot: Any, pane: ReplayPane, index: int) -> None:
    qtbot.waitUntil(lambda: pane.step is not None and pane.step.index == index and not pane.busy, timeout=20_000)


# -- stepping -------------------------------------------------------------------------------------
def test_opens_at_the_last_turn_and_steps_with_buttons_slider_and_keys(qtbot: Any, pane: ReplayPane) -> None:
    open_thread(qtbot, pane)
    n = len(TURNS)
    assert pane.step.index == n - 1 and pane.slider.maximum() == n - 1
    assert pane.step_label.text().startswith(f"Turn {n} of {n}")
    assert TURNS[-1] in pane.input_label.text()

    pane.prev_btn.click()
    wait_step(qtbot, pane, n - 2)
    assert pane.step.turn.input_text == TURNS[n - 2]
    pane.first_btn.click()
    wait_step(qtbot, pane, 0)
    assert not pane.prev_btn.isEnabled() or pane.index == 0
    pane.slider.setValue(3)
    wait_step(qtbot, pane, 3)
    assert pane.step.turn.input_text == TURNS[3]

    pane.view.step_table.setFocus()
    qtbot.keyClick(pane.view.step_table, Qt.Key.Key_Right, Qt.KeyboardModifier.AltModifier)
    wait_step(qtbot, pane, 4)
    qtbot.keyClick(pane.view.step_table, Qt.Key.Key_J)
    wait_step(qtbot, pane, 5)
    qtbot.keyClick(pane.view.step_table, Qt.Key.Key_K)
    wait_step(qtbot, pane, 4)
    qtbot.keyClick(pane.view.step_table, Qt.Key.Key_Left, Qt.KeyboardModifier.AltModifier)
    wait_step(qtbot, pane, 3)
    assert pane.slider.value() == 3
    pane.last_btn.click()
    wait_step(qtbot, pane, n - 1)
    pane.next_btn.click()  # past the end stays on the last turn
    wait_step(qtbot, pane, n - 1)


def test_rapid_steps_show_only_the_last_one(qtbot: Any, pane: ReplayPane) -> None:
    open_thread(qtbot, pane)
    seen: list[int] = []
    pane.step_shown.connect(lambda step: seen.append(step.index))
    for i in (0, 1, 2, 3, 2, 1):
        pane.go_to(i)
    wait_step(qtbot, pane, 1)
    assert seen and seen[-1] == 1
    assert all(i == 1 for i in seen)  # stale rebuilds were dropped, never painted


def test_each_turn_shows_what_the_model_received(qtbot: Any, pane: ReplayPane, session: StudioSession) -> None:
    before = checksum(session.store)
    open_thread(qtbot, pane)
    pane.go_to(4)
    wait_step(qtbot, pane, 4)
    step = pane.step
    assert step.received.replay.kind == "recorded" and step.received.replay.matches is True
    assert "recorded (exact)" in pane.facts.text()
    assert "version 1 of 1" in step.wm_label and "thread scope" in step.wm_label
    assert TURNS[4] in pane.view.received_view.toPlainText()
    assert pane.view.reply_view.toPlainText().startswith("About 'And a good place for din")
    assert not pane.banner.isVisible()  # nothing changed since: rebuilt now is identical
    tokens = {r.section: r for r in pane.view.token_model.rows()}
    assert tokens["total"].at_turn == step.received.total_tokens == tokens["total"].now
    assert tokens["history"].at_turn > 0 and tokens["working_memory"].at_turn > 0
    assert checksum(session.store) == before  # looking never writes


def test_diff_against_the_previous_turn_is_highlighted_with_reasons(qtbot: Any, pane: ReplayPane) -> None:
    open_thread(qtbot, pane)
    pane.go_to(5)  # the window of 4 messages slides: two leave, two enter
    wait_step(qtbot, pane, 5)
    rows = pane.view.step_model.rows()
    entered = [r for r in rows if r.change == "entered"]
    left = [r for r in rows if r.change == "left"]
    assert {r.reason for r in left} == {"outside-history-window"}
    assert len(left) == 2 and all(r.index is None and r.mark == "− left" for r in left)
    assert {r.reason for r in entered} == {"new-message"}
    assert all(r.mark == "+ entered" for r in entered)
    assert "outside the history window" in pane.view.change_label.text()
    # Colour and a text marker: the row is tinted, and the Change column says it in words.
    i = rows.index(left[0])
    tint = pane.view.step_model.index(i, 0).data(Qt.ItemDataRole.BackgroundRole)
    assert isinstance(tint, QColor) and tint.alpha() < 255
    assert pane.view.step_model.index(i, 1).data() == "− left"
    unchanged = next(j for j, r in enumerate(rows) if r.change is None)
    assert pane.view.step_model.index(unchanged, 0).data(Qt.ItemDataRole.BackgroundRole) is None
    pane.view.step_table.selectRow(i)
    assert "why: outside the history window" in pane.view.fragment_header.text()


def test_the_first_turns_fragments_are_not_called_unchanged(qtbot: Any, pane: ReplayPane) -> None:
    """Turn 1 says "First turn: nothing to compare with.", yet its selected fragment's header began "unchanged · …"
    (a comparison that was never made); from turn 2 on, a fragment that did not change is called unchanged."""
    open_thread(qtbot, pane)
    pane.go_to(0)
    wait_step(qtbot, pane, 0)
    assert pane.view.change_label.text() == "First turn: nothing to compare with."
    for row in range(pane.view.step_model.rowCount()):
        pane.view.step_table.selectRow(row)
        assert not pane.view.fragment_header.text().startswith("unchanged"), pane.view.fragment_header.text()
    pane.go_to(1)
    wait_step(qtbot, pane, 1)
    rows = pane.view.step_model.rows()
    pane.view.step_table.selectRow(next(j for j, r in enumerate(rows) if r.change is None))
    assert pane.view.fragment_header.text().startswith("unchanged · ")


def test_working_memory_change_is_a_reason(qtbot: Any, pane: ReplayPane) -> None:
    open_thread(qtbot, pane)
    pane.go_to(3)  # the turn after the tool call: working memory holds the diet now
    wait_step(qtbot, pane, 3)
    changed = [r for r in pane.view.step_model.rows() if r.source == "working-memory"]
    assert changed and changed[0].change == "changed" and changed[0].reason == "working-memory-changed"
    assert "vegetarian" in changed[0].text and "vegetarian" not in (changed[0].text_before or "")


def test_banner_when_the_engine_rebuilds_differently_now(qtbot: Any, db: Path, prefs: Preferences,
                                                         no_leaked_widgets: None) -> None:
    store = open_store(db)  # the agent now runs with a shorter window: today's rebuild differs
    Memory(store, MemoryOptions(last_messages=2, working_memory={"enabled": True, "scope": "thread"}),
           name="travel").register("travel-agent")
    store.close()
    with replay_on(qtbot, db, prefs) as pane:
        assert pane.banner.isVisible() and pane.banner.level == "warning"
        assert "rebuilds this turn differently now" in pane.banner.text()
        assert "outside the history window" in pane.banner.text()
        assert pane.view.received_view.toPlainText() != pane.view.now_view.toPlainText()
        assert pane.view.now_diff.lines and "−" in pane.view.now_diff.summary()
        assert pane.step.received.replay.kind == "recorded"  # what was sent is still exact


def test_a_turn_without_a_record_is_labelled_reconstructed(qtbot: Any, db: Path, prefs: Preferences,
                                                           template: Any, no_leaked_widgets: None) -> None:
    store = open_store(db)
    with store.db.write() as conn:
        conn.exec_driver_sql("DELETE FROM memory_studio_turns WHERE input_message_id = ?",
                             (template[1]["turns"][2],))
    store.close()
    with replay_on(qtbot, db, prefs) as pane:
        pane.go_to(2)
        wait_step(qtbot, pane, 2)
        assert pane.step.received.replay.kind == "reconstructed"
        assert pane.banner.isVisible()
        assert pane.banner.text().startswith("Reconstructed — no record of this turn; unknown:")
        assert "instructions" in pane.banner.text()



def test_an_input_edited_since_shows_what_the_model_received(qtbot: Any, db: Path, prefs: Preferences,
                                                             template: Any, no_leaked_widgets: None) -> None:
    """The turn's caption showed the input as stored now (the edited text, unmarked), and its input fragment
    said "Not from a stored message", so nothing said the model had received other words (found by the
    Studio QA pass)."""
    store = open_store(db)
    Memory(store).edit_message(template[1]["turns"][1], resource_id=RESOURCE, text="EDITED AFTER THE TURN")
    store.close()
    with replay_on(qtbot, db, prefs) as pane:
        with qtbot.waitSignal(pane.step_shown, timeout=30_000):
            pane.go_to(1)
        assert pane.step.received.replay.exact
        caption = pane.input_label.text()
        assert TURNS[1] in caption and "EDITED" not in caption and caption.startswith("edited since")
        assert "a stored message was edited since" in pane.banner.text() and "(other)" not in pane.banner.text()
        row = next(i for i, r in enumerate(pane.view.step_model.rows()) if r.source == "input")
        assert pane.view.step_model.rows()[row].stored_ids == (template[1]["turns"][1],)
        pane.view.step_table.selectRow(row)
        assert "edited since" in pane.view.fragment_header.text()
        assert "From stored messages" in pane.view.fragment_sources.text()
        assert pane.view.fragment_text.toPlainText() == TURNS[1]


def test_without_the_embedding_model_turns_still_replay_exactly(qtbot: Any, tmp_path: Path, prefs: Preferences,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 no_leaked_widgets: None) -> None:
    """A thread whose agent recalls could not be replayed at all without the embedding model ("No turns",
    "could not be read"), though a recorded turn rebuilds from its record alone (found by the Studio QA pass,
    a user data folder without the model)."""
    import core.embedding as embedding
    from core.agent import Agent
    from core.llm import ScriptedModel

    store = open_store(tmp_path / "recall.db")
    memory = Memory(store, MemoryOptions(last_messages=2, semantic_recall={"top_k": 2, "scope": "resource"}),
                    name="rec")
    Agent("rec", instructions="Be brief.", model=ScriptedModel(["Noted.", "Peanuts.", "Sure."]),
          memory=memory).generate("I am allergic to peanuts", memory={"resource": "u", "thread": "t"})
    for text in ("What am I allergic to?", "Thanks"):
        Agent("rec", instructions="Be brief.", model=ScriptedModel(["ok"]), memory=memory).generate(
            text, memory={"resource": "u", "thread": "t"})
    store.close()
    monkeypatch.setenv("MEMORY_STUDIO_MODELS", str(tmp_path / "no-models-here"))
    monkeypatch.setattr(embedding, "_shared", None)
    with replay_on(qtbot, tmp_path / "recall.db", prefs, Selection("u", "t")) as pane:
        assert len(pane.state.source.turns) == 3
        assert pane.step.received.replay.exact
        assert any(f.source == "semantic-recall" for f in pane.step.received.fragments)  # as recorded
        assert "models install" in pane.banner.text() and "replays as its record holds it" in pane.banner.text()

# -- what-if ---------------------------------------------------------------------------------------
def test_what_if_table_for_the_whole_thread(qtbot: Any, pane: ReplayPane, session: StudioSession) -> None:
    before = checksum(session.store)
    open_thread(qtbot, pane)
    panel = pane.what_if
    panel.last_spin.setValue(1)
    with qtbot.waitSignal(panel.finished, timeout=60_000) as blocker:
        pane.commands.run("replay.what_if")
    assert not blocker.args[0].cancelled
    rows = panel.model.rows()
    assert [r.number for r in rows] == list(range(1, len(TURNS) + 1))
    assert panel.progress.value() == len(TURNS) == panel.progress.maximum()
    later = rows[4]
    assert later.tokens_what_if < later.tokens_real and later.left == 3 and later.entered == 0
    assert "outside the history window" in later.reasons
    assert rows[0].left == 0  # the first turn had no history to lose
    assert "prompt(s) would differ" in panel.summary.text()

    with qtbot.waitSignal(panel.opened, timeout=20_000) as opened:
        panel.open_row(4)
    detail = opened.args[0]
    assert detail.index == 4 and len(detail.changes) == 3
    assert panel.change_model.rowCount() == 3
    assert panel.diff.summary().startswith("+0 −") or "−" in panel.diff.summary()
    assert panel.rerun_btn.isEnabled()
    assert checksum(session.store) == before


def test_what_if_cancel(qtbot: Any, pane: ReplayPane, session: StudioSession) -> None:
    open_thread(qtbot, pane)
    panel = pane.what_if
    # Hold every worker so the what-if job waits in the queue until Cancel was pressed: deterministic.
    gate = threading.Event()
    started = threading.Semaphore(0)

    def hold() -> None:
        started.release()
        gate.wait(30)

    for _ in range(session.pool._pool.maxThreadCount()):
        session.pool.submit(hold)
    for _ in range(session.pool._pool.maxThreadCount()):
        assert started.acquire(timeout=10)
    panel.run()
    assert panel.cancel_btn.isEnabled() and not panel.run_btn.isEnabled()
    panel.cancel_btn.click()
    gate.set()
    with qtbot.waitSignal(panel.finished, timeout=30_000) as blocker:
        pass
    assert blocker.args[0].cancelled and blocker.args[0].rows == []
    assert panel.summary.text() == "Cancelled before the first turn."
    assert panel.run_btn.isEnabled() and not panel.cancel_btn.isEnabled()


def test_what_if_stops_between_turns_when_cancelled(session: StudioSession) -> None:
    from studio.replay_jobs import ReplayThread

    source = ReplayThread.open(session.store, lambda o, n: Memory(session.store, o, name=n), THREAD)
    asked = []
    outcome = source.what_if({"last_messages": 1}, cancel=lambda: len(asked.append(1) or asked) > 3)
    assert outcome.cancelled and len(outcome.rows) == 3 and outcome.total == len(TURNS)


# -- fork ------------------------------------------------------------------------------------------
def test_fork_from_a_turn(qtbot: Any, pane: ReplayPane, session: StudioSession) -> None:
    open_thread(qtbot, pane)
    pane.go_to(3)
    wait_step(qtbot, pane, 3)
    original = [m.id for m in session.store.memory.browse_messages(THREAD, 0, 100)]
    pane.commands.run("replay.fork")
    dialog = pane.fork_dialog
    assert isinstance(dialog, ForkDialog) and dialog.isVisible()
    assert dialog.as_of_radio.isEnabled() and dialog.as_of_radio.isChecked()  # thread-scoped working memory
    dialog.name_edit.setText("Porto, without the markets")
    with qtbot.waitSignal(pane.forked, timeout=20_000) as blocker:
        dialog.buttons.button(dialog.buttons.StandardButton.Ok).click()
    thread = blocker.args[0]
    assert thread.title == "Porto, without the markets" and thread.resource_id == RESOURCE
    assert thread.metadata["fork"]["sourceThreadId"] == THREAD
    copies = session.store.memory.browse_messages(thread.id, 0, 100)
    assert [m.text for m in copies] == [m.text for m in session.store.memory.browse_messages(THREAD, 0, 100)][:6]
    assert [m.id for m in session.store.memory.browse_messages(THREAD, 0, 100)] == original
    assert "Forked into" in pane.status.text()
    from studio.logic.replay_layout import fork_source

    assert fork_source(thread.metadata).startswith(f"Forked from thread {THREAD} at message")


def test_the_fork_dialog_suggests_a_stored_titles_controls_as_escapes(qtbot: Any, db: Path, prefs: Preferences,
                                                                     no_leaked_widgets: None) -> None:
    """A title any program stored with a right-to-left override and a line break is suggested as every other
    label shows it (``shown_title``): the field draws what it holds, in order, on one line, and what it holds
    is what the fork is named; a control typed or pasted into the name is named under the field."""
    from studio.logic.thread_labels import shown_title

    stored = "Porto\u202e stekram\nsecond line"
    with open_store(str(db)) as store:
        store.memory.update_thread(THREAD, title=stored)
    with replay_on(qtbot, db, prefs) as pane:
        pane.go_to(2)
        wait_step(qtbot, pane, 2)
        pane.commands.run("replay.fork")
        dialog = pane.fork_dialog
        suggested = dialog.name_edit.text()
        assert suggested == f"{shown_title(stored)} — fork at turn 3"
        assert "\u202e" not in suggested and "\n" not in suggested and "\\u202e" in suggested
        assert dialog.stored_note.isHidden()
        dialog.name_edit.setText("pasted\u202egnorw")
        assert not dialog.stored_note.isHidden()
        assert "pasted\\u202egnorw" in dialog.stored_note.text()
        note, radio = dialog.stored_note, dialog.as_of_radio

        def bottom_of_note_above_radio() -> bool:
            return (note.mapTo(dialog, note.rect().bottomLeft()).y()
                    < radio.mapTo(dialog, radio.rect().topLeft()).y() and note.height() >= note.heightForWidth(
                        note.width()))

        qtbot.waitUntil(bottom_of_note_above_radio, timeout=5_000)  # the dialog grows; nothing is squeezed
        dialog.name_edit.setText(suggested)
        assert dialog.stored_note.isHidden()
        with qtbot.waitSignal(pane.forked, timeout=20_000) as blocker:
            dialog.buttons.button(dialog.buttons.StandardButton.Ok).click()
        assert blocker.args[0].title == suggested


def test_fork_on_a_read_only_database_says_allow_writes_first(qtbot: Any, db: Path, prefs: Preferences,
                                                              no_leaked_widgets: None) -> None:
    session = StudioSession(open_for_studio(db, allow_writes=False))
    pane = ReplayPane(session, preferences=prefs)
    qtbot.addWidget(pane)
    pane.show()
    try:
        open_thread(qtbot, pane)
        before = checksum(session.store)
        with qtbot.waitSignal(pane.failed) as blocker:
            pane.commands.run("replay.fork")
        assert "Allow Writes first" in blocker.args[0]
        assert getattr(pane, "fork_dialog", None) is None
        assert "Allow Writes first" in pane.banner.text()
        assert checksum(session.store) == before
    finally:
        session.pool.wait(20_000)
        session.close()


# -- re-run ----------------------------------------------------------------------------------------
def test_rerun_against_the_loopback_server(qtbot: Any, pane: ReplayPane, session: StudioSession,
                                           prefs: Preferences) -> None:
    with LoopbackServer(["A brand new answer.\nWith two lines."]) as server:
        prefs.save([Endpoint("Loopback", server.base_url, "loopback-chat", "none", "")], default="Loopback")
        open_thread(qtbot, pane)
        pane.go_to(4)
        wait_step(qtbot, pane, 4)
        before = checksum(session.store)
        rerun = pane.rerun
        assert rerun.model_combo.currentData() == "Loopback"  # the default from Preferences
        with qtbot.waitSignal(rerun.finished, timeout=30_000) as blocker:
            pane.commands.run("replay.rerun")
        result = blocker.args[0]
        assert result.text == "A brand new answer.\nWith two lines."
        sent = server.requests[-1].body
        assert sent["messages"] == pane.step.received.messages and sent["model"] == "loopback-chat"
        assert rerun.new_view.toPlainText() == result.text
        assert rerun.stored_view.toPlainText().startswith("About 'And a good place for din")
        kinds = {line.kind for line in rerun.diff.lines}
        assert {"insert", "delete"} <= kinds
        figures = {row[0]: row for row in rerun.figure_model.rows()}
        assert figures["Latency"][2].endswith(" ms") and figures["Reply tokens, server-reported"][2]
        assert figures["Prompt tokens, our o200k estimate"][1] == f"{pane.step.received.replay.record.tokens['total']:,}"
        assert "Nothing was saved" in rerun.status.text()
        assert checksum(session.store) == before  # a re-run never writes into the original thread


def test_rerun_a_what_if_prompt(qtbot: Any, pane: ReplayPane, prefs: Preferences) -> None:
    with LoopbackServer(["Shorter context, same question."]) as server:
        prefs.save([Endpoint("Loopback", server.base_url, "loopback-chat", "none", "")], default="Loopback")
        open_thread(qtbot, pane)
        panel = pane.what_if
        panel.last_spin.setValue(0)  # history off
        with qtbot.waitSignal(panel.finished, timeout=60_000):
            panel.run()
        with qtbot.waitSignal(panel.opened, timeout=20_000):
            panel.open_row(5)
        panel.rerun_btn.click()
        qtbot.waitUntil(lambda: pane.index == 5 and pane.rerun.what_if is not None and not pane.busy, timeout=20_000)
        assert pane.tabs.currentWidget() is pane.rerun and pane.rerun.prompt_combo.currentData() == "what-if"
        with qtbot.waitSignal(pane.rerun.finished, timeout=30_000):
            pane.rerun.run_btn.click()
        sent = server.requests[-1].body["messages"]
        assert sent == panel.detail.what_if.messages
        assert len(sent) < len(pane.step.received.messages)


def test_rerun_error_says_what_to_do(qtbot: Any, pane: ReplayPane, prefs: Preferences) -> None:
    with LoopbackServer(["unused"], require_api_key="sk-right") as server:
        prefs.save([Endpoint("Locked", server.base_url, "loopback-chat", "env", "REPLAY_TEST_ABSENT_KEY")],
                   default="Locked")
        open_thread(qtbot, pane)
        with qtbot.waitSignal(pane.rerun.failed, timeout=30_000) as blocker:
            pane.rerun.run()
        assert "401" in blocker.args[0] and "REPLAY_TEST_ABSENT_KEY" in blocker.args[0]
        assert "File > Preferences" in pane.rerun.status.text()


def test_offline_model_is_always_there(qtbot: Any, pane: ReplayPane) -> None:
    open_thread(qtbot, pane)
    assert pane.rerun.model_combo.currentData() == "Scripted (offline)"
    with qtbot.waitSignal(pane.rerun.finished, timeout=30_000) as blocker:
        pane.rerun.run()
    assert "Offline scripted reply" in blocker.args[0].text and TURNS[-1] in blocker.args[0].text


def test_other_threads_are_in_the_thread_list(qtbot: Any, pane: ReplayPane) -> None:
    open_thread(qtbot, pane)
    qtbot.waitUntil(lambda: pane.thread_combo.count() == 2, timeout=10_000)
    threads = [pane.thread_combo.itemData(i)[1] for i in range(pane.thread_combo.count())]
    assert set(threads) == {THREAD, OTHER}
    with qtbot.waitSignal(pane.open_thread) as picked:
        pane.thread_combo.activated.emit(threads.index(OTHER))
    assert picked.args[0] == Selection(RESOURCE, OTHER)
    qtbot.waitUntil(lambda: pane.source is not None and pane.source.thread_id == OTHER and pane.step is not None
                    and pane.step.turn.thread_id == OTHER, timeout=20_000)


def test_new_turns_written_by_an_agent_appear_and_the_view_stays(qtbot: Any, pane: ReplayPane, db: Path,
                                                                 session: StudioSession) -> None:
    open_thread(qtbot, pane)
    pane.go_to(5)
    wait_step(qtbot, pane, 5)
    another_agent_turn(db)
    session.notify_local_write()
    qtbot.waitUntil(lambda: pane.source is not None and len(pane.source.turns) == len(TURNS) + 1, timeout=20_000)
    wait_step(qtbot, pane, 5)
    assert pane.slider.maximum() == len(TURNS)
    assert pane.step.turn.input_text == TURNS[5]


def test_the_fragment_being_read_stays_selected_when_new_turns_arrive(qtbot: Any, pane: ReplayPane, db: Path,
                                                                     session: StudioSession) -> None:
    """The turn shown stayed when another program wrote turns, but it was shown again with the first changed
    fragment selected, so the fragment the user was reading in its context table was swapped under them
    (found 2026-12-06 browsing Replay while an agent loop wrote turns)."""
    open_thread(qtbot, pane)
    pane.go_to(5)
    wait_step(qtbot, pane, 5)
    table, model = pane.view.step_table, pane.view.step_model
    first = table.currentIndex().row()
    reading = next(i for i, r in enumerate(model.rows()) if i != first and r.index is not None)
    table.selectRow(reading)
    kept = model.row_at(reading)
    another_agent_turn(db)
    session.notify_local_write()
    qtbot.waitUntil(lambda: reread_landed(pane, len(TURNS) + 1), timeout=20_000)
    wait_step(qtbot, pane, 5)
    assert model.row_at(table.currentIndex().row()) == kept


def another_agent_turn(db: Path) -> None:
    """One more turn of the open thread, written through another connection, as an agent process would."""
    from core import Agent
    from core.llm.scripted import ScriptedModel

    from .replay_data import reply

    store = open_store(db)
    memory = Memory(store, MemoryOptions(last_messages=4, working_memory={"enabled": True, "scope": "thread"}),
                    name="travel")
    Agent("travel-agent", instructions="You plan trips. Be brief.", model=ScriptedModel(reply), memory=memory,
          tracer=False).generate(
        "One more question about trams.", memory={"resource": RESOURCE, "thread": THREAD})
    store.close()


def reread_landed(pane: ReplayPane, turns: int) -> bool:
    return (pane.source is not None and len(pane.source.turns) == turns and pane.session.pool.running == 0
            and not pane.busy and pane.step is not None)


def test_a_step_taken_while_the_changed_thread_is_read_again_wins(qtbot: Any, pane: ReplayPane, db: Path,
                                                                   session: StudioSession) -> None:
    """Another writer adds a turn while turn 6 is shown; the pane reads the thread again, and the user steps
    to turn 3 before that read lands. The pane stays on turn 3: the re-read put it back on turn 6, the turn
    shown when the re-read was asked for."""
    open_thread(qtbot, pane)
    pane.go_to(5)
    wait_step(qtbot, pane, 5)
    another_agent_turn(db)
    session.notify_local_write()  # the re-read starts on a worker ...
    pane.go_to(2)  # ... and its answer can only land through this thread's event loop, after this step
    qtbot.waitUntil(lambda: reread_landed(pane, len(TURNS) + 1), timeout=30_000)
    assert pane.index == 2 and pane.step.index == 2 and pane.slider.value() == 2
    assert pane.step.turn.input_text == TURNS[2] and TURNS[2] in pane.step_label.text() + pane.input_label.text()
    assert pane.slider.maximum() == len(TURNS)
    assert "not in this thread" not in pane.status.text()


def test_a_turn_deleted_elsewhere_while_shown_says_so_and_shows_the_nearest(
        qtbot: Any, pane: ReplayPane, session: StudioSession, template: tuple[Path, dict[str, Any]]) -> None:
    """Another program deletes the user message of the turn shown: the re-read failed on it (the pane kept
    the old turns, stepping onto a turn that is gone). Now it shows the turn before, and says why."""
    from .conftest import another_program

    open_thread(qtbot, pane)
    pane.go_to(5)
    wait_step(qtbot, pane, 5)
    gone = template[1]["turns"][5]
    another_program(session.store.location.path, f"DELETE FROM mastra_messages WHERE id = '{gone}'")
    session.notify_local_write()
    qtbot.waitUntil(lambda: reread_landed(pane, len(TURNS) - 1), timeout=30_000)
    assert gone not in [t.input_message_id for t in pane.source.turns]
    assert pane.index == 4 and pane.step.index == 4 and pane.step.turn.input_text == TURNS[4]
    assert "Turn 6 is not in this thread any more" in pane.status.text()
    assert "showing turn 5, the nearest one" in pane.status.text()
    pane.go_to(3)  # the next step is the user's own: the notice goes
    wait_step(qtbot, pane, 3)
    assert "not in this thread" not in pane.status.text()


def test_a_mastra_database_replays_reconstructed_and_read_only(qtbot: Any, tmp_path: Path, prefs: Preferences,
                                                               no_leaked_widgets: None) -> None:
    from .conftest import file_state, make_mastra_db

    path = tmp_path / "mastra.db"
    make_mastra_db(path)
    before = file_state(path)
    with replay_on(qtbot, path, prefs, Selection("user-42", "mastra-thread")) as pane:
        assert pane.session.read_only
        assert len(pane.source.turns) == 1 and pane.step.received.replay.kind == "reconstructed"
        assert pane.banner.text().startswith("Reconstructed — no record of this turn")
        assert pane.view.reply_view.toPlainText() == "hi, I remember you"
        with qtbot.waitSignal(pane.failed):
            pane.commands.run("replay.fork")
    assert file_state(path) == before  # looking never writes, not even a migration


def test_a_thread_that_cannot_be_read_does_not_leave_the_previous_one_to_step_or_fork(
        qtbot: Any, pane: ReplayPane, session: StudioSession) -> None:
    """Picking another thread whose read fails: the thread open before stayed on screen under the new
    selection (its turn, its title), with Fork…, Re-Run and stepping enabled on it."""
    from .conftest import another_program

    open_thread(qtbot, pane)
    another_program(session.store.location.path, "ALTER TABLE mastra_messages RENAME TO mastra_messages_old")
    with qtbot.waitSignal(pane.failed, timeout=30_000):
        pane.set_selection(Selection(RESOURCE, OTHER))
    assert pane.source is None and pane.step is None
    assert THREAD not in pane.title.text() and OTHER in pane.subtitle.text()
    assert pane.banner.isVisible() and pane.banner.level == "error"
    assert "could not be read" in pane.status.text() and "File > Reload" in pane.status.text()
    assert [c.id for c in pane.palette_commands() if c.is_enabled] == []  # no stepping, Fork…, Re-Run
