"""Memory checks in the Studio (issue 21 item 3): Pin… from the inspector and from Replay writes a check
to the user's checks file; the Checks tab lists checks with their state; a what-if (typed, or the
Replay What-If tab's options) shows which checks would break. Running never writes the database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt

from core import Agent, Memory, MemoryOptions, open_store
from core.checks import Check, load_checks, save_checks
from core.embedding import HashingEmbedder
from core.llm import ScriptedModel
from studio.logic.checks_layout import PinTarget, check_rows, default_pin, pin_check, pin_text
from studio.selection import Selection
from studio.widgets.pin_dialog import PinDialog

DESSERT = "Any dessert ideas?"


def seed(path: Path) -> None:
    """Ada's allergy in one thread, dessert asked in another: only recall brings it (as in the CLI test)."""
    with open_store(path) as store:
        memory = Memory(store, MemoryOptions(last_messages=4, semantic_recall={"top_k": 2, "scope": "resource"}),
                        embedder=HashingEmbedder(), name="chef")
        agent = Agent("chef", instructions="You cook.", model=ScriptedModel(
            ["Hi Ada.", "Noted, no peanuts.", "Try a mango sorbet."]), memory=memory, tracer=False)
        agent.generate("Hi, I'm Ada.", memory={"resource": "ada", "thread": "intro"})
        agent.generate("I am allergic to peanuts, remember the peanut allergy.", memory={"resource": "ada", "thread": "intro"})
        agent.generate(DESSERT, memory={"resource": "ada", "thread": "food"})


def _open(qtbot: Any, make_window: Any, path: Path) -> Any:
    window = make_window()
    window.open_database(str(path))
    qtbot.waitUntil(lambda: window.session is not None and window.resources is not None
                    and len(window.resources.thread_rows()) >= 2, timeout=15_000)
    return window


def _ran(qtbot: Any, pane: Any, what_if: bool = False) -> Any:
    qtbot.waitUntil(lambda: pane.run_data is not None and pane.run_data.results is not None
                    and (pane.run_data.what_if is not None) == what_if and not pane.busy, timeout=60_000)
    return pane.run_data


def _run_checks(qtbot: Any, make_window: Any, tmp_path: Path, checks: list[Check], width: int | None = None
                ) -> tuple[Any, Any]:
    """A window on the seeded database (``width`` px wide, if given) whose Checks tab ran ``checks`` from a
    checks file: (the window, the pane)."""
    db = tmp_path / "memory.db"
    seed(db)
    checks_file = tmp_path / "repo" / "checks.json"
    save_checks(checks_file, checks)
    window = _open(qtbot, make_window, db)
    if width is not None:
        window.resize(width, 800)
    pane = window.panes["checks"]
    window.show_tab("checks")
    pane.set_path(checks_file, run=True)
    _ran(qtbot, pane)
    return window, pane


def test_checks_tab_lists_states_and_what_if_breaks(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    window, pane = _run_checks(qtbot, make_window, tmp_path, [
        Check("allergy reaches dessert", "food", resource="ada", input=DESSERT, prompt_contains=("peanut",)),
        Check("never a pirate", "food", turn=1, prompt_excludes=("pirate",)),
        Check("no such turn", "food", turn=7, prompt_contains=("x",)),
    ])
    run = pane.run_data
    states = [r.state for r in pane.model.rows()]
    assert states == ["pass", "pass", "error"]
    assert "1 could not run" in pane.summary.text() and "2 passed" in pane.summary.text()
    pane.table.selectRow(2)
    assert "has 1 turn(s)" in pane.detail.toPlainText()
    assert run.results[0].replay == "recorded (matches its record)"

    pane.options_edit.setText('{"semantic_recall": false}')
    pane.what_if_btn.click()
    _ran(qtbot, pane, what_if=True)
    rows = pane.model.rows()
    assert rows[0].state == "pass → FAIL (would break)" and rows[0].breaks
    assert rows[1].state == "pass → pass"
    assert "1 of 3 check(s) would break" in pane.summary.text()
    pane.table.selectRow(0)
    assert "the prompt does not contain 'peanut'" in pane.detail.toPlainText()
    pane.options_edit.setText("{nope")
    pane.what_if_btn.click()
    assert "not valid JSON" in pane.status.text()


def test_running_checks_never_writes_the_database(qtbot: Any, no_leaked_widgets: None, make_session: Any,
                                                  tmp_path: Path) -> None:
    from studio.panes.checks import ChecksPane

    db = tmp_path / "memory.db"
    seed(db)
    checks_file = tmp_path / "checks.json"
    save_checks(checks_file, [Check("allergy reaches dessert", "food", input=DESSERT, prompt_contains=("peanut",))])
    session = make_session(db)
    pane = ChecksPane(session)
    qtbot.addWidget(pane)
    before = session.store.db.write_transactions
    pane.set_path(checks_file, run=True)
    _ran(qtbot, pane)
    pane.run_what_if({"semantic_recall": False})
    _ran(qtbot, pane, what_if=True)
    assert [r.state for r in pane.model.rows()] == ["pass → FAIL (would break)"]
    assert session.store.db.write_transactions == before  # checking never writes the database


def test_pin_from_the_inspector_writes_a_check_that_passes(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    seed(db)
    with open_store(db, read_only=True) as store:
        dessert = next(m.id for m in store.memory.list_messages(_query("food")) if m.role == "user")
    window = _open(qtbot, make_window, db)
    checks = window.panes["checks"]
    checks_file = tmp_path / "checks.json"
    checks.path = checks_file
    window.select_thread(Selection("ada", "food"))
    window.set_selection(Selection("ada", "food", dessert))
    window.show_tab("prompt")
    prompt = window.panes["prompt"]
    qtbot.waitUntil(lambda: prompt.preview is not None and prompt.preview.turn is not None and not prompt.busy,
                    timeout=60_000)
    rows = prompt.fragment_model.rows()
    at = next(i for i, r in enumerate(rows) if "peanut" in r.text and r.stored_ids)
    prompt.fragment_table.selectRow(at)
    assert prompt.pin_btn.isEnabled()
    prompt.pin_btn.click()
    qtbot.waitUntil(lambda: isinstance(checks.dialog, PinDialog) and checks.dialog.isVisible(), timeout=15_000)
    dialog = checks.dialog
    assert dialog.path_edit.text() == str(checks_file)
    dialog.kind_combo.setCurrentIndex(dialog.kind_combo.findData("prompt_contains"))
    dialog.value_edit.setPlainText("allergic to peanuts")
    dialog.name_edit.setText("the allergy stays")
    with qtbot.waitSignal(checks.pinned, timeout=15_000):
        dialog.pin_btn.click()
    written = load_checks(checks_file)
    assert [c.to_dict() for c in written] == [{"name": "the allergy stays", "thread": "food", "resource": "ada",
                                               "input": DESSERT, "prompt_contains": "allergic to peanuts"}]
    run = _ran(qtbot, checks)
    assert [r.status for r in run.results] == ["pass"]


def test_pin_from_replay_and_run_checks_from_the_what_if_tab(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    seed(db)
    window = _open(qtbot, make_window, db)
    checks = window.panes["checks"]
    checks.path = tmp_path / "checks.json"
    replay = window.panes["replay"]
    window.select_thread(Selection("ada", "food"))
    window.show_tab("replay")
    qtbot.waitUntil(lambda: replay.source is not None and replay.source.thread_id == "food"
                    and replay.step is not None and not replay.busy, timeout=60_000)
    rows = replay.view.step_model.rows()
    at = next(i for i, r in enumerate(rows) if r.source == "semantic-recall")
    target = replay.view.pin_target(at)
    assert target is not None and target.turn_number == 1 and target.input_text == DESSERT
    replay.view._fragment_menu(replay.view.step_table.visualRect(replay.view.step_model.index(at, 0)).center())
    menu = replay.view.fragment_menu_shown
    pin = next(a for a in menu.actions() if a.text() == "Pin…")
    pin.trigger()
    qtbot.waitUntil(lambda: isinstance(checks.dialog, PinDialog) and checks.dialog.isVisible(), timeout=15_000)
    dialog = checks.dialog
    assert dialog.kind() == "recalled"  # a recall fragment pins its first hit
    with qtbot.waitSignal(checks.pinned, timeout=15_000):
        dialog.pin_btn.click()
    _ran(qtbot, checks)
    assert [r.status for r in checks.run_data.results] == ["pass"]
    menu.close()

    # The What-If tab: recall off, then "Run Checks With These Options".
    panel = replay.what_if
    replay.tabs.setCurrentWidget(panel)
    panel.recall_combo.setCurrentIndex(panel.recall_combo.findData(False))
    panel.checks_btn.click()
    qtbot.waitUntil(lambda: window.current_pane() is checks, timeout=5_000)
    _ran(qtbot, checks, what_if=True)
    assert checks.model.rows()[0].breaks
    assert json.loads(checks.options_edit.text()) == {"semantic_recall": {"enabled": False}}


def test_pin_logic_picks_text_kinds_and_turns() -> None:
    long = "First line of the working memory block.\n" + "word " * 80
    assert pin_text(long) == "First line of the working memory block."
    assert len(pin_text("x" * 500)) == 200
    recall = PinTarget("food", "ada", DESSERT, 1, "Messages recalled…", "semantic-recall", ("m1", "m2"))
    assert default_pin(recall) == ("recalled", "m1")
    history = PinTarget("food", None, "", 3, "I am allergic to peanuts.", "message-history", ("m1",))
    kind, value = default_pin(history)
    check = pin_check(history, kind, value, "keeps it")
    assert (check.turn, check.input, check.prompt_contains) == (3, None, ("I am allergic to peanuts.",))
    rows = check_rows([check])
    assert rows[0].state == "not run"


def _query(thread_id: str) -> Any:
    from core.storage.memory_store import MessageQuery

    return MessageQuery(thread_id=thread_id)


def test_a_checks_file_that_cannot_be_read_does_not_show_the_previous_files_checks(
        qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    """The header names the file just opened: rows read from the file before must not stand under it."""
    db = tmp_path / "memory.db"
    seed(db)
    good = tmp_path / "good.json"
    save_checks(good, [Check("never a pirate", "food", turn=1, prompt_excludes=("pirate",))])
    broken = tmp_path / "broken.json"
    broken.write_text("[1,2", encoding="utf-8")
    window = _open(qtbot, make_window, db)
    pane = window.panes["checks"]
    window.show_tab("checks")
    pane.set_path(good, run=True)
    _ran(qtbot, pane)
    assert pane.model.rowCount() == 1 and "1 passed" in pane.summary.text()

    pane.set_path(broken, run=True)
    qtbot.waitUntil(lambda: not pane.busy and "not valid JSON" in pane.status.text(), timeout=30_000)
    assert pane.subtitle.text() == str(broken)
    assert pane.model.rowCount() == 0 and pane.run_data is None
    assert pane.summary.text() == ("No checks shown: this checks file cannot be used as it is; fix it (the reason "
                                   "is below), then Run Checks.")
    assert "passed" not in pane.summary.text() and pane.detail.toPlainText() == ""


def test_what_if_errors_speak_of_the_field_not_the_command_line(qtbot: Any, no_leaked_widgets: None,
                                                                 make_session: Any, tmp_path: Path) -> None:
    """The options are checked by the CLI's parser, whose messages name its ``--options`` flag; in the
    pane there is no flag, so the advice (and its example) must be about the field."""
    from studio.panes.checks import ChecksPane

    db = tmp_path / "memory.db"
    seed(db)
    pane = ChecksPane(make_session(db))
    qtbot.addWidget(pane)
    checks_file = tmp_path / "checks.json"
    save_checks(checks_file, [Check(name="any", thread="food", turn=-1, prompt_contains="dessert")])
    pane.set_path(checks_file)  # (with no checks file the run buttons are off)
    for typed, expected in (("{nope", "The what-if options are not valid JSON"),
                            ("[1]", "The what-if options must be a JSON object"),
                            ('{"no_such_option": 1}', "What-if options: ")):
        pane.options_edit.setText(typed)
        pane.what_if_btn.click()
        assert pane.status.text().startswith(expected), pane.status.text()
        assert "--options" not in pane.status.text()
    pane.options_edit.setText("{nope")
    pane.what_if_btn.click()
    assert "for example {\"semantic_recall\": false}." in pane.status.text()


def test_a_run_that_fails_does_not_leave_the_previous_runs_results(qtbot: Any, make_window: Any, tmp_path: Path,
                                                                   monkeypatch: Any) -> None:
    """A run that fails for the database's sake shows its checks as not run, not the previous run's passes
    under the new status."""
    from core.storage import StorageUnavailableError
    from studio import checks_jobs

    db = tmp_path / "memory.db"
    seed(db)
    good = tmp_path / "good.json"
    save_checks(good, [Check("never a pirate", "food", turn=1, prompt_excludes=("pirate",))])
    window = _open(qtbot, make_window, db)
    pane = window.panes["checks"]
    window.show_tab("checks")
    pane.set_path(good, run=True)
    _ran(qtbot, pane)
    assert "1 passed" in pane.summary.text()

    def locked(*_args: Any, **_kw: Any) -> Any:
        raise StorageUnavailableError(f"{db} is locked by another program: wait for it, then try again.")

    monkeypatch.setattr(checks_jobs, "run", locked)
    pane.run_checks()
    qtbot.waitUntil(lambda: not pane.busy and "locked" in pane.status.text(), timeout=30_000)
    assert "passed" not in pane.summary.text() and "not run: the last run failed" in pane.summary.text()
    assert [r.result for r in pane.model.rows()] == [None] and pane.run_data.results is None


def test_a_superseded_run_does_not_paint_its_progress_over_the_newer_runs_status(
        qtbot: Any, no_leaked_widgets: None, make_session: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """Run Checks on one file, then another file before the first run ends: the first run's result is
    dropped, but its "Checked 2 of 2…" arrived after the second run's "Ran 1 check(s)" and stayed, so
    the pane said it was still checking (and counted the other file's checks)."""
    import threading

    from studio import checks_jobs
    from studio.panes.checks import ChecksPane

    db = tmp_path / "memory.db"
    seed(db)
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    save_checks(first, [Check("one", "food", turn=1, prompt_contains=("peanut",)),
                        Check("two", "intro", turn=1, prompt_contains=("Ada",))])
    save_checks(second, [Check("allergy reaches dessert", "food", input=DESSERT, prompt_contains=("peanut",))])
    go = threading.Event()
    real_run = checks_jobs.run

    def run(store: Any, factory: Any, path: Path, options: Any = None, report: Any = None) -> Any:
        if path == first:
            assert go.wait(60)  # the first run goes on only once the second one is on screen
        return real_run(store, factory, path, options, report)

    monkeypatch.setattr(checks_jobs, "run", run)
    session = make_session(db)
    pane = ChecksPane(session)
    qtbot.addWidget(pane)
    pane.set_path(first, run=True)
    pane.set_path(second, run=True)
    run_data = _ran(qtbot, pane)
    assert run_data.path == second and pane.status.text() == "Ran 1 check(s) from second.json."
    go.set()
    qtbot.waitUntil(lambda: session.pool.running == 0, timeout=60_000)  # the first run ended; its answer dropped
    qtbot.wait(0)
    assert pane.status.text() == "Ran 1 check(s) from second.json."
    assert pane.run_data is run_data


def test_a_checks_file_that_is_not_there_is_said_not_run(qtbot: Any, no_leaked_widgets: None, make_session: Any,
                                                          tmp_path: Path) -> None:
    """A path with no file (a mistyped name, or one no check was pinned to yet) read "Ran 0 check(s) from
    x.json.", as if an empty file had passed (found 2026-12-06 walking the Studio). It says there is no file
    there and how to start one; nothing is created by looking."""
    from studio.panes.checks import ChecksPane

    db = tmp_path / "memory.db"
    seed(db)
    missing = tmp_path / "chekcs.json"
    pane = ChecksPane(make_session(db))
    qtbot.addWidget(pane)
    pane.set_path(missing, run=True)
    _ran(qtbot, pane)
    assert pane.status.text().startswith(f"No checks file at {missing}") and "Pin…" in pane.status.text()
    assert "Ran" not in pane.status.text() and not missing.exists()


def test_with_no_checks_file_the_run_buttons_are_off_and_say_how_to_get_one(qtbot: Any, no_leaked_widgets: None,
                                                                             make_session: Any, tmp_path: Path) -> None:
    """Run Checks and Run With What-If were on with no checks file, and said "Open a checks file first" only once
    clicked (found 2026-12-07 walking the Studio). They are off, and the pane and their tooltips say how a checks file
    is opened or made; once one is named (a file not made yet too: Run Checks reads it again) they are on."""
    from studio.panes.checks import ChecksPane

    db = tmp_path / "memory.db"
    seed(db)
    pane = ChecksPane(make_session(db))
    qtbot.addWidget(pane)
    for button in (pane.run_btn, pane.what_if_btn):
        assert not button.isEnabled()
        assert "Open Checks File…" in button.toolTip() and "Pin…" in button.toolTip()
    assert pane.summary.text().startswith("No checks file yet: Open Checks File… opens one")
    assert "JSON or YAML list of checks" in pane.summary.text() and "Pin…" in pane.summary.text()
    pane.run_what_if({"last_messages": 2})  # (Replay's what-if asks which checks would break)
    assert pane.status.text() == pane.summary.text() and pane.run_data is None
    missing = tmp_path / "checks.json"
    pane.set_path(missing, run=True)  # (as Open Checks File… does) a file no check was pinned to yet
    assert pane.run_btn.isEnabled() and pane.what_if_btn.isEnabled()
    assert "Open Checks File…" not in pane.run_btn.toolTip()
    _ran(qtbot, pane)
    assert pane.status.text().startswith(f"No checks file at {missing}") and not missing.exists()


def test_the_pin_dialog_shows_the_turn_input_beside_its_title_without_a_gap(qtbot: Any) -> None:
    """The turn's input sat in the middle of a tall empty field ("Turn (its input)" with a gap of some
    hundred pixels above its text): the wrapped label took the dialog's spare height and centred its text
    (found 2026-12-05 walking the Studio). Its text now starts beside the row's title; the spare height
    goes below the form."""
    target = PinTarget("food", "ada", "Any dessert ideas? I'd like something with fruit, nothing too heavy after "
                       "a long dinner.", 3, "Messages recalled…", "semantic-recall", ("m1", "m2"))
    dialog = PinDialog(target, "/tmp/checks.json")
    qtbot.addWidget(dialog)
    dialog.show()
    label = dialog.input_label
    qtbot.waitUntil(lambda: label.width() > 100)
    lines = label.heightForWidth(label.width())
    assert label.height() <= lines + 4  # no empty band around the text
    assert label.alignment() & Qt.AlignmentFlag.AlignTop


def test_at_a_1100_px_window_the_checks_table_shows_why_a_check_would_break(qtbot: Any, make_window: Any,
                                                                           tmp_path: Path) -> None:
    """The table's columns had fixed widths (200, 260, 220, 260 px and the rest): at a 1,100 px window they
    ran ~250 px past the pane, and What must hold and Why not, what a breaking check is about, were out of
    sight. They are fitted to the pane now; a cut cell ends in "…", whole on hover."""
    from PySide6.QtCore import Qt

    window, pane = _run_checks(qtbot, make_window, tmp_path, [
        Check("allergy reaches dessert", "food", resource="ada", input=DESSERT, prompt_contains=("peanut",)),
        Check("never a pirate", "food", turn=1, prompt_excludes=("pirate",)),
    ], width=1100)
    pane.options_edit.setText('{"semantic_recall": false}')
    pane.what_if_btn.click()
    _ran(qtbot, pane, what_if=True)
    qtbot.wait(50)  # (laid out)
    table = pane.table
    assert table.horizontalHeader().length() <= table.viewport().width()
    assert table.horizontalScrollBar().maximum() == 0
    last = pane.model.columnCount() - 1
    assert table.columnWidth(last) >= 80 and table.columnViewportPosition(last) + 80 <= table.viewport().width()
    why = pane.model.index(0, last)
    assert why.data() and why.data(Qt.ItemDataRole.ToolTipRole) == why.data()
    state = pane.model.index(0, 0).data()
    assert table.columnWidth(0) >= table.fontMetrics().horizontalAdvance(state)  # (the state whole)


def test_the_detail_caption_says_what_the_detail_holds_for_the_selected_checks_state(qtbot: Any, make_window: Any,
                                                                                   tmp_path: Path) -> None:
    """The caption above the detail read "The selected check: what did not hold, with the relevant part of the
    prompt" for every check, a passing one too (checks-view.png: a pass selected). It says what the detail
    holds for the selected check's state: it held, it did not, it could not run, the what-if would break it."""
    window, pane = _run_checks(qtbot, make_window, tmp_path, [
        Check("allergy reaches dessert", "food", resource="ada", input=DESSERT, prompt_contains=("peanut",)),
        Check("a pirate", "food", turn=1, prompt_contains=("pirate",)),
        Check("no such turn", "food", turn=7, prompt_contains=("x",)),
    ])
    assert [r.state for r in pane.model.rows()] == ["pass", "fail", "error"]
    captions = []
    for row in range(3):
        pane.table.selectRow(row)
        captions.append(pane.detail_caption.text())
    held, failed, error = captions
    assert "did not hold" not in held and "held" in held
    assert "what did not hold" in failed and "relevant part of the prompt" in failed
    assert "could not run" in error and "did not hold" not in error

    pane.options_edit.setText('{"semantic_recall": false}')
    pane.what_if_btn.click()
    _ran(qtbot, pane, what_if=True)
    assert pane.model.rows()[0].breaks
    pane.table.selectRow(0)
    assert "would break" in pane.detail_caption.text()
