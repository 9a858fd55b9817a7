"""Working memory (issue 11): item 6 (token counts, comparing versions, per-owner version numbers)
and the defects a new user met (a stale "Stored now" during a conflict, the banner after Take Theirs,
Replace → Patch dropping an edit, saving into an unmigrated Mastra database). pytest-qt, real files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core import Memory, MemoryOptions
from core.tokens import default_tokenizer
from studio.panes.working_memory import WorkingMemoryPane
from studio.selection import Selection
from studio.session import StudioSession, open_for_studio
from studio.widgets.version_history import COMPARE_EDITOR

from .conftest import another_program, make_mastra_db
from .test_working_memory_pane import SCHEMA, build_db, load, save_and_wait, stored

WAIT = 10_000


@pytest.fixture()
def session(qtbot: Any, tmp_path: Path) -> Any:
    s = StudioSession(build_db(tmp_path / "memory.db"))
    yield s
    s.close()


@pytest.fixture()
def pane(no_leaked_widgets: None, qtbot: Any, session: Any) -> WorkingMemoryPane:
    p = WorkingMemoryPane(session)
    qtbot.addWidget(p)
    p.resize(1200, 760)
    p.show()
    return p


def profiler(session: Any) -> Memory:
    return Memory(session.store, MemoryOptions(working_memory={"enabled": True, "schema": SCHEMA, "scope": "thread"}),
                  name="profiler")


def assistant(session: Any) -> Memory:
    return Memory(session.store, MemoryOptions(working_memory={"enabled": True}), name="assistant")


# -- defects -------------------------------------------------------------------------------------------

def test_during_a_conflict_stored_now_and_the_merge_preview_are_current(qtbot: Any, pane: Any, session: Any) -> None:
    load(qtbot, pane, Selection("bob", "t2"))
    pane.json_mode.setCurrentIndex(pane.json_mode.findData("merge"))
    pane.editor.replace_all('{"city": "Osaka"}')
    profiler(session).merge_working_memory(thread_id="t2", resource_id="bob", patch={"name": "Robert"})
    save_and_wait(qtbot, pane, pane.conflict)
    assert json.loads(pane.current_view.toPlainText())["name"] == "Robert"  # not the stale "Bob"
    result = json.loads(pane.result_view.toPlainText())
    assert result["name"] == "Robert" and result["city"] == "Osaka"
    with qtbot.waitSignal(pane.saved, timeout=WAIT):
        pane.commands.run("wm.overwrite_mine")
    saved = stored(session, "t2", "bob", name="profiler")
    assert saved["name"] == "Robert" and saved["city"] == "Osaka"  # the agent's change survives the patch


def test_stored_now_follows_an_agent_write_under_an_edit(qtbot: Any, pane: Any, session: Any) -> None:
    load(qtbot, pane, Selection("bob", "t2"))
    pane.json_mode.setCurrentIndex(pane.json_mode.findData("merge"))
    pane.editor.replace_all('{"city": "Osaka"}')
    profiler(session).merge_working_memory(thread_id="t2", resource_id="bob", patch={"name": "Robert"})
    with qtbot.waitSignal(pane.loaded, timeout=WAIT):
        session.changed.emit()
    assert pane.editor.toPlainText() == '{"city": "Osaka"}'  # the edit is kept
    assert json.loads(pane.current_view.toPlainText())["name"] == "Robert"
    assert json.loads(pane.result_view.toPlainText())["name"] == "Robert"


def test_the_conflict_banner_goes_after_take_theirs(qtbot: Any, pane: Any, session: Any) -> None:
    load(qtbot, pane, Selection("alice", "t1"))
    pane.editor.replace_all("mine")
    assistant(session).update_working_memory(thread_id="t1", resource_id="alice", working_memory="theirs")
    with qtbot.waitSignal(pane.loaded, timeout=WAIT):
        session.changed.emit()  # the file poll saw the agent's write while the edit was open
    assert pane.info_banner.isVisible() and "changed while you were editing" in pane.info_banner.text()
    save_and_wait(qtbot, pane, pane.conflict)
    pane.conflict_view.theirs_btn.click()
    assert pane.editor.toPlainText() == "theirs"
    assert not pane.conflict_view.isVisible() and not pane.info_banner.isVisible()


def test_replace_to_patch_carries_an_unsaved_edit_over(qtbot: Any, pane: Any, session: Any) -> None:
    load(qtbot, pane, Selection("bob", "t2"))
    value = json.loads(pane.editor.toPlainText())
    value["name"] = "Robert"
    del value["tags"]
    pane.editor.replace_all(json.dumps(value, indent=2))
    pane.json_mode.setCurrentIndex(pane.json_mode.findData("merge"))
    assert json.loads(pane.editor.toPlainText()) == {"name": "Robert", "tags": None}  # the same change, as a patch
    assert pane.dirty_label.text() == "● unsaved changes"
    assert json.loads(pane.result_view.toPlainText()) == value
    pane.json_mode.setCurrentIndex(pane.json_mode.findData("replace"))
    assert json.loads(pane.editor.toPlainText()) == value
    save_and_wait(qtbot, pane, pane.saved)
    assert stored(session, "t2", "bob", name="profiler") == value


def test_saving_into_an_unmigrated_mastra_database_says_it_keeps_no_history(no_leaked_widgets: None, qtbot: Any,
                                                                            tmp_path: Path) -> None:
    path = tmp_path / "mastra.db"
    make_mastra_db(path)
    session = StudioSession(open_for_studio(path, allow_writes=True))
    pane = WorkingMemoryPane(session)
    qtbot.addWidget(pane)
    pane.show()
    try:
        snap = load(qtbot, pane, Selection("user-42", "mastra-thread"))
        assert not snap.history_available
        assert pane.history_banner.isVisible() and "no version history" in pane.history_banner.text()
        assert [b.text() for b in pane.history_banner.buttons] == ["Migrate Database…"]
        with qtbot.waitSignal(pane.request_command) as asked:
            pane.history_banner.buttons[0].click()
        assert asked.args == ["file.migrate"]
        pane.editor.replace_all("# User\n- Name: Mastra user")
        save_and_wait(qtbot, pane, pane.saved)
        qtbot.waitUntil(lambda: pane.snapshot is not None, timeout=WAIT)
        assert "No version was recorded" in pane.status.text() or "no version history" in pane.status.text()
        assert pane.version_model.rowCount() == 0
    finally:
        session.close()


# -- item 6 -------------------------------------------------------------------------------------------

def test_token_count_beside_the_character_count(qtbot: Any, pane: Any) -> None:
    snap = load(qtbot, pane, Selection("alice", "t1"))
    text = "# User\n- Name: Alice"
    tokens = default_tokenizer().count(text)
    assert snap.tokens == tokens and f"{len(text)} chars · {tokens} tokens stored" in pane.status.text()
    assert pane.size_label.text() == f"{len(text)} chars · {tokens} tokens"
    pane.editor.replace_all(text + " and more")
    assert pane.size_label.text() == f"{len(text) + 9} chars · {default_tokenizer().count(text + ' and more')} tokens"
    assert pane.version_model.index(0, 3).data() == f"{len(text)} chars · {tokens} tokens"


def test_versions_are_numbered_per_resource_or_thread(qtbot: Any, pane: Any, session: Any) -> None:
    # Interleaved writes to two owners: the database's row ids are shared, the numbers are not.
    for i in range(2):
        assistant(session).update_working_memory(thread_id="t1", resource_id="alice", working_memory=f"alice {i}")
        profiler(session).merge_working_memory(thread_id="t2", resource_id="bob", patch={"city": f"c{i}"})
    load(qtbot, pane, Selection("alice", "t1"))
    assert [pane.version_model.index(r, 0).data() for r in range(3)] == ["3", "2", "1"]
    ids = [row.version.id for row in pane.version_model.rows()]
    assert ids != [3, 2, 1]  # the global row ids would have had gaps
    load(qtbot, pane, Selection("bob", "t2"))
    assert [pane.version_model.index(r, 0).data() for r in range(3)] == ["3", "2", "1"]
    pane.select_versions(2)
    pane.commands.run("wm.restore_version")
    assert "Version 2 is staged" in pane.status.text()


def test_compare_any_two_versions_or_a_version_with_the_editor(qtbot: Any, pane: Any, session: Any) -> None:
    for text in ("one\nshared", "two\nshared", "three\nshared"):
        assistant(session).update_working_memory(thread_id="t1", resource_id="alice", working_memory=text)
    load(qtbot, pane, Selection("alice", "t1"))
    pane.tabs.setCurrentIndex(1)
    pane.select_versions(2, 4)  # "one" and "three": not neighbours
    assert pane.version_diff_label.text().startswith("Version 2 → version 4")
    changed = {(ln.kind, ln.text) for ln in pane.version_diff.lines if ln.kind != "equal"}
    assert changed == {("delete", "one"), ("insert", "three")}
    pane.editor.replace_all("three\nshared\nfrom the editor")
    pane.compare_combo.setCurrentIndex(pane.compare_combo.findData(COMPARE_EDITOR))
    pane.select_versions(4)
    assert pane.version_diff_label.text().startswith("Version 4 → the editor")
    assert [(ln.kind, ln.text) for ln in pane.version_diff.lines if ln.kind != "equal"] == [
        ("insert", "from the editor")]


def test_an_unsaved_edit_survives_looking_at_another_owner(qtbot: Any, pane: Any, session: Any) -> None:
    """Picking another resource while an edit is unsaved, then coming back, shows the edit again (it was
    silently replaced by the stored text before); Save then writes it."""
    load(qtbot, pane, Selection("alice", "t1"))
    pane.editor.replace_all("# User\n- Name: Alice\n- City: Berlin")
    load(qtbot, pane, Selection("bob", "t2"))
    assert "Bob" in pane.editor.toPlainText()
    load(qtbot, pane, Selection("alice", "t1"))
    assert pane.editor.toPlainText() == "# User\n- Name: Alice\n- City: Berlin"
    assert pane.dirty_label.text() == "● unsaved changes" and pane.commands.action("wm.save").isEnabled()
    assert "was kept" in pane.info_banner.label.text()
    save_and_wait(qtbot, pane, pane.saved)
    assert stored(session, "t1", "alice") == "# User\n- Name: Alice\n- City: Berlin"
    load(qtbot, pane, Selection("bob", "t2"))
    load(qtbot, pane, Selection("alice", "t1"))  # saved: nothing kept aside any more
    assert pane.editor.toPlainText() == "# User\n- Name: Alice\n- City: Berlin" and not pane.info_banner.isVisible()


def test_a_kept_edit_whose_owner_changed_meanwhile_goes_through_the_conflict(qtbot: Any, pane: Any,
                                                                            session: Any) -> None:
    load(qtbot, pane, Selection("alice", "t1"))
    pane.editor.replace_all("# User\n- Name: Alice\n- City: Berlin")
    load(qtbot, pane, Selection("bob", "t2"))
    assistant(session).update_working_memory(thread_id="t1", resource_id="alice",
                                             working_memory="# User\n- Name: Alice\n- Pet: cat")
    load(qtbot, pane, Selection("alice", "t1"))
    assert pane.editor.toPlainText() == "# User\n- Name: Alice\n- City: Berlin"
    assert "changed while you were editing" in pane.info_banner.label.text()
    save_and_wait(qtbot, pane, pane.conflict)  # both versions shown before anything is overwritten
    assert stored(session, "t1", "alice") == "# User\n- Name: Alice\n- Pet: cat"


def test_a_load_that_fails_does_not_leave_the_previous_owner_editable(qtbot: Any, pane: Any,
                                                                     session: Any) -> None:
    """Picking another owner whose read fails: the previous owner's text stayed in the editor with Save on,
    under the new selection; now nothing is shown (an unsaved edit is kept aside for its owner)."""
    load(qtbot, pane, Selection("alice", "t1"))
    pane.editor.replace_all("# User\n- Name: Alice\n- City: Berlin")
    # another program reshapes a table: reads fail
    another_program(session.store.location.path, "ALTER TABLE mastra_threads RENAME TO mastra_threads_old")
    with qtbot.waitSignal(pane.failed, timeout=WAIT):
        pane.set_selection(Selection("bob", "t2"))
    assert pane.title.text() == "Working memory" and pane.editor.toPlainText() == ""
    assert not pane.commands.action("wm.save").isEnabled()
    assert pane.info_banner.isVisible() and pane.info_banner.level == "error"


def _fail_next_read(qtbot: Any, pane: Any, session: Any, selection: Selection) -> None:
    another_program(session.store.location.path, "ALTER TABLE mastra_threads RENAME TO mastra_threads_old")
    with qtbot.waitSignal(pane.failed, timeout=WAIT):
        pane.set_selection(selection)


def test_a_load_that_fails_clears_the_template_tab_too(qtbot: Any, pane: Any, session: Any, tmp_path: Path) -> None:
    """After a failed read the template tab kept the previous owner's memory ('assistant'): its template,
    its versions and "In effect … memory 'assistant'", editable under the new selection. Now it shows no
    one's template and cannot be edited or saved; an unsaved template edit comes back with its memory."""
    load(qtbot, pane, Selection("alice", "t1"))
    ed = pane.template_editor
    ed.editor.replace_all("# Traveller\n- Home city:")
    _fail_next_read(qtbot, pane, session, Selection("bob", "t2"))
    assert ed.editor.toPlainText() == "" and ed.version_model.rowCount() == 0
    assert "assistant" not in ed.effect.text() and "could not be read" in ed.effect.text()
    assert ed.editor.isReadOnly() and not ed.save_btn.isEnabled() and not ed.reset_btn.isEnabled()
    assert not ed.problem.isVisible()  # no "the template is empty" over nobody's template
    assert "assistant" not in pane.agent_reason.text() and pane.tabs.tabText(1) == "History"
    pane.tabs.setCurrentWidget(ed)
    pane.grab().save(str(tmp_path / "template-after-failed-read.png"))
    another_program(session.store.location.path, "ALTER TABLE mastra_threads_old RENAME TO mastra_threads")
    load(qtbot, pane, Selection("alice", "t1"))  # a later read of the same memory brings the edit back
    assert ed.editor.toPlainText() == "# Traveller\n- Home city:" and ed.save_btn.isEnabled()


def test_a_template_edit_is_never_saved_into_another_memory(qtbot: Any, pane: Any, session: Any) -> None:
    """An unsaved template edit of memory 'assistant' stayed in the tab when the user picked a thread of
    memory 'profiler', and Save wrote it as profiler's template."""
    load(qtbot, pane, Selection("alice", "t1"))
    ed = pane.template_editor
    ed.editor.replace_all("# Traveller\n- Home city:")
    load(qtbot, pane, Selection("bob", "t2"))
    assert ed.kind == "schema" and json.loads(ed.editor.toPlainText()) == SCHEMA  # profiler's own schema
    assert not ed.save_btn.isEnabled()  # nothing of profiler's was edited
    load(qtbot, pane, Selection("alice", "t1"))
    assert ed.editor.toPlainText() == "# Traveller\n- Home city:"  # kept for its memory
    with qtbot.waitSignal(pane.config_saved, timeout=WAIT) as saved:
        ed.save_btn.click()
    assert saved.args[0].name == "assistant" and saved.args[0].template == "# Traveller\n- Home city:"


def test_reads_work_again_when_another_program_renames_a_table_away_and_back(qtbot: Any, pane: Any,
                                                                            session: Any) -> None:
    """A read failed while the table was renamed away; once it is back the next read works (no kept
    connection stays on the old schema)."""
    load(qtbot, pane, Selection("alice", "t1"))
    _fail_next_read(qtbot, pane, session, Selection("bob", "t2"))
    another_program(session.store.location.path, "ALTER TABLE mastra_threads_old RENAME TO mastra_threads")
    profiler(session).merge_working_memory(thread_id="t2", resource_id="bob", patch={"city": "Kyoto"})
    with qtbot.waitSignal(pane.loaded, timeout=WAIT):
        pane.commands.run("wm.reload")
    assert pane.title.text() != "Working memory" and json.loads(pane.editor.toPlainText())["city"] == "Kyoto"


def test_an_unsaved_template_edit_counts_as_unsaved(qtbot: Any, pane: Any, session: Any) -> None:
    """The window asks before discarding unsaved working-memory edits; a template edit (in the tab, or kept
    aside for its memory) was not counted, so closing the window or opening a database lost it silently."""
    load(qtbot, pane, Selection("alice", "t1"))
    assert pane.unsaved_edits() == 0
    pane.template_editor.editor.replace_all("# Traveller\\n- Home city:")
    assert pane.unsaved_edits() == 1
    load(qtbot, pane, Selection("bob", "t2"))  # another memory: the edit is kept aside
    assert pane.unsaved_edits() == 1
