"""Working-memory pane: staged edits with Save / Revert / undo, conflicts shown (never overwritten),
versions with diff and restore, schema validation as you type, merge preview, template overrides that a
fresh Memory uses on its next turn, read-only sessions, and looking never writes."""

from __future__ import annotations

import hashlib
import json

import pytest
import sqlalchemy as sa

from core import Memory, MemoryOptions, Message, open_store
from studio.panes.working_memory import WorkingMemoryPane
from studio.selection import Selection
from studio.session import StudioSession

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "city": {"type": "string"},
        "prefs": {"type": "object", "properties": {"food": {"type": "string"}, "color": {"type": "string"}}},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
}


def build_db(path):
    store = open_store(path)
    md = Memory(store, MemoryOptions(working_memory={"enabled": True}), name="assistant")
    md.create_thread(resource_id="alice", thread_id="t1", title="Lisbon", metadata={"agent": "travel-agent"})
    md.update_working_memory(thread_id="t1", resource_id="alice", working_memory="# User\n- Name: Alice")
    md.register("travel-agent")
    js = Memory(store, MemoryOptions(working_memory={"enabled": True, "schema": SCHEMA, "scope": "thread"}),
                name="profiler")
    js.create_thread(resource_id="bob", thread_id="t2", title="Profile", metadata={"agent": "profile-agent"})
    js.merge_working_memory(thread_id="t2", resource_id="bob",
                            patch={"name": "Bob", "prefs": {"food": "ramen", "color": "blue"}, "tags": ["a"]})
    js.register("profile-agent")
    return store


def checksum(store) -> str:
    h = hashlib.sha256()
    with store.db.read() as conn:
        for (name,) in conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name").all():
            for row in conn.execute(sa.text(f'SELECT * FROM "{name}" ORDER BY 1')).all():
                h.update(repr((name, tuple(row))).encode())
    return h.hexdigest()


@pytest.fixture()
def session(qtbot, tmp_path):
    s = StudioSession(build_db(tmp_path / "memory.db"))
    yield s
    s.close()


@pytest.fixture()
def pane(no_leaked_widgets, qtbot, session):
    p = WorkingMemoryPane(session)
    qtbot.addWidget(p)
    p.resize(1200, 760)
    p.show()
    return p


def load(qtbot, pane, selection):
    with qtbot.waitSignal(pane.loaded, timeout=10_000) as blocker:
        pane.set_selection(selection)
    return blocker.args[0]


def save_and_wait(qtbot, pane, signal):
    with qtbot.waitSignal(signal, timeout=10_000) as blocker:
        pane.commands.run("wm.save")
    return blocker.args[0]


def stored(session, thread_id, resource_id, name="assistant"):
    opts = (MemoryOptions(working_memory={"enabled": True}) if name == "assistant"
            else MemoryOptions(working_memory={"enabled": True, "schema": SCHEMA, "scope": "thread"}))
    return Memory(session.store, opts, name=name).get_working_memory(thread_id=thread_id, resource_id=resource_id)


def test_markdown_edit_save_revert_and_undo(qtbot, pane, session):
    snap = load(qtbot, pane, Selection("alice", "t1"))
    assert snap.fmt == "markdown" and pane.editor.toPlainText() == "# User\n- Name: Alice"
    assert "Location" in pane.template_view.toPlainText()  # the default template beside the editor
    assert not pane.commands.action("wm.save").isEnabled()
    pane.editor.replace_all("# User\n- Name: Alice\n- City: Berlin")
    assert "Berlin" in pane.preview.toPlainText()  # rendered preview follows the editor
    assert pane.commands.action("wm.save").isEnabled()
    pane.commands.run("wm.revert")
    assert pane.editor.toPlainText() == "# User\n- Name: Alice"
    pane.commands.run("wm.undo")  # revert is undoable
    assert pane.editor.toPlainText().endswith("City: Berlin")
    save_and_wait(qtbot, pane, pane.saved)
    qtbot.waitUntil(lambda: pane.version_model.rowCount() == 2, timeout=10_000)
    assert stored(session, "t1", "alice").endswith("City: Berlin")
    assert pane.version_model.rows()[0].author == "studio"
    assert not pane.commands.action("wm.save").isEnabled()


def test_concurrent_change_shows_both_and_overwrites_nothing(qtbot, pane, session):
    load(qtbot, pane, Selection("alice", "t1"))
    pane.editor.replace_all("# User\n- Name: Alice (studio)")
    agent = Memory(session.store, MemoryOptions(working_memory={"enabled": True}), name="assistant")
    agent.apply_working_memory_tool(thread_id="t1", resource_id="alice", args={"memory": "# User\n- Name: Alice\n- Pet: cat"})
    theirs = save_and_wait(qtbot, pane, pane.conflict)
    assert theirs == "# User\n- Name: Alice\n- Pet: cat"
    assert stored(session, "t1", "alice") == theirs  # nothing overwritten
    assert pane.conflict_view.isVisible()
    assert pane.conflict_view.mine.toPlainText() == "# User\n- Name: Alice (studio)"
    assert pane.conflict_view.theirs_text == theirs
    assert any(ln.kind == "insert" for ln in pane.conflict_view.diff.lines)
    # Only an explicit choice writes.
    with qtbot.waitSignal(pane.saved, timeout=10_000):
        pane.commands.run("wm.overwrite_mine")
    assert stored(session, "t1", "alice") == "# User\n- Name: Alice (studio)"


def test_take_theirs_is_undoable(qtbot, pane, session):
    load(qtbot, pane, Selection("alice", "t1"))
    pane.editor.replace_all("mine")
    Memory(session.store, MemoryOptions(working_memory={"enabled": True}), name="assistant").update_working_memory(
        thread_id="t1", resource_id="alice", working_memory="theirs")
    save_and_wait(qtbot, pane, pane.conflict)
    pane.commands.run("wm.take_theirs")
    assert pane.editor.toPlainText() == "theirs" and not pane.conflict_view.isVisible()
    assert not pane.commands.action("wm.save").isEnabled()
    pane.commands.run("wm.undo")
    assert pane.editor.toPlainText() == "mine"


def test_versions_diff_and_restore(qtbot, pane, session):
    agent = Memory(session.store, MemoryOptions(working_memory={"enabled": True}), name="assistant")
    agent.update_working_memory(thread_id="t1", resource_id="alice", working_memory="# User\n- Name: Alice\n- Job: chef")
    load(qtbot, pane, Selection("alice", "t1"))
    assert pane.version_model.rowCount() == 2
    pane.tabs.setCurrentIndex(1)
    pane.version_table.selectRow(0)
    assert [(ln.kind, ln.text) for ln in pane.version_diff.lines if ln.kind != "equal"] == [("insert", "- Job: chef")]
    pane.version_table.selectRow(1)
    pane.commands.run("wm.restore_version")
    assert pane.tabs.currentIndex() == 0 and pane.editor.toPlainText() == "# User\n- Name: Alice"
    save_and_wait(qtbot, pane, pane.saved)
    qtbot.waitUntil(lambda: pane.version_model.rowCount() == 3, timeout=10_000)
    newest = pane.version_model.rows()[0]
    assert newest.text == "# User\n- Name: Alice" and newest.note and "restored" in newest.note


def test_schema_validation_blocks_save_and_merge_preview(qtbot, pane, session):
    snap = load(qtbot, pane, Selection("bob", "t2"))
    assert snap.fmt == "json" and snap.target.scope == "thread" and snap.agent.name == "profile-agent"
    assert json.loads(pane.editor.toPlainText())["name"] == "Bob"
    pane.editor.replace_all('{"name": 42}')
    assert "name" in pane.problem_label.text() and "string" in pane.problem_label.text()
    assert pane.problem_label.isVisible()
    assert not pane.commands.action("wm.save").isEnabled()
    pane.editor.replace_all('{"name": ')
    assert "JSON syntax: line 1" in pane.problem_label.text()
    assert not pane.commands.action("wm.save").isEnabled()
    # An edit that does not parse has no result to compare: the caption said "No changes." beside it.
    assert "No changes" not in pane.merge_caption.text()
    assert "known once the problems above are fixed" in pane.merge_caption.text()
    # Patch mode: current + patch = result under the merge rules.
    pane.json_mode.setCurrentIndex(pane.json_mode.findData("merge"))
    pane.editor.replace_all('{"prefs": {"color": null}, "tags": ["x", "y"], "city": "Osaka"}')
    result = json.loads(pane.result_view.toPlainText())
    assert result == {"name": "Bob", "prefs": {"food": "ramen"}, "tags": ["x", "y"], "city": "Osaka"}
    assert pane.problem_label.text() == "" and not pane.problem_label.isVisible()
    assert "prefs.color (deleted)" in pane.merge_caption.text()
    save_and_wait(qtbot, pane, pane.saved)
    assert stored(session, "t2", "bob", name="profiler") == result


def test_json_that_is_not_an_object_is_named_as_json_names_it(qtbot, pane, session):
    """Typing JSON that is no object into a JSON working memory's editor (null, an array, a number, a string) said
    "Working memory must be a JSON object ({...}), not NoneType" (list, int, str): Python's type names. The editor
    now names what it holds as JSON does, Save stays off, and nothing is written."""
    before = checksum(session.store)
    load(qtbot, pane, Selection("bob", "t2"))
    for typed, came in (("null", "null"), ("[1, 2]", "an array (2 items)"), ("5", "the number 5"),
                        ('"Bob"', "a string (3 characters)"), ("true", "true")):
        for mode in ("replace", "merge"):
            pane.json_mode.setCurrentIndex(pane.json_mode.findData(mode))
            pane.editor.replace_all(typed)
            said = pane.problem_label.text()
            assert said == f"✖ Working memory must be a JSON object ({{...}}), not {came}.", typed
            assert pane.problem_label.isVisible() and not pane.commands.action("wm.save").isEnabled()
    assert checksum(session.store) == before


def test_template_override_reaches_a_fresh_memory_on_its_next_turn(qtbot, pane, session):
    load(qtbot, pane, Selection("alice", "t1"))
    ed = pane.template_editor
    ed.editor.replace_all("")
    assert not ed.save_btn.isEnabled() and "empty" in ed.problem.text()
    ed.editor.replace_all("# Traveller\n- Home city:\n- Next trip:")
    assert ed.save_btn.isEnabled()
    with qtbot.waitSignal(pane.config_saved, timeout=10_000):
        ed.save_btn.click()
    fresh = Memory(session.store, MemoryOptions(working_memory={"enabled": True}), name="assistant")
    prompt = fresh.assemble(thread_id="t1", resource_id="alice", input=[Message.user("hi")])
    assert "- Next trip:" in prompt.fragments_from("working-memory")[0].text
    qtbot.waitUntil(lambda: ed.version_model.rowCount() == 1, timeout=10_000)
    assert "Next trip" in pane.template_view.toPlainText()
    # Schema edits are validated too, and versioned.
    ed.kind_combo.setCurrentIndex(ed.kind_combo.findData("schema"))
    ed.editor.replace_all('{"type": "string"}')
    assert not ed.save_btn.isEnabled() and "object" in ed.problem.text()


def test_agents_tab_shows_resolved_configuration(qtbot, pane):
    load(qtbot, pane, Selection("alice", "t1"))
    names = [a.name for a in pane.agent_model.rows()]
    assert names == ["profile-agent", "travel-agent"]
    pane.agent_table.selectRow(names.index("profile-agent"))
    config = json.loads(pane.agent_config_view.toPlainText())
    assert config["name"] == "profiler" and config["options"]["working_memory"]["scope"] == "thread"


def test_read_only_session_disables_every_write_with_a_reason(qtbot, tmp_path):
    build_db(tmp_path / "m.db").close()
    store = open_store(tmp_path / "m.db", read_only=True)
    session = StudioSession(store)
    pane = WorkingMemoryPane(session)
    qtbot.addWidget(pane)
    pane.show()
    load(qtbot, pane, Selection("alice", "t1"))
    assert pane.readonly_banner.isVisible() and "read-only" in pane.readonly_banner.text()
    assert pane.editor.isReadOnly()
    for cid in ("wm.save", "wm.restore_version", "wm.overwrite_mine"):
        assert not pane.commands.action(cid).isEnabled()
    assert not pane.template_editor.save_btn.isEnabled() and not pane.template_editor.reset_btn.isEnabled()
    assert "read-only" in pane.save_btn.toolTip()
    session.close()


def test_looking_never_writes(qtbot, pane, session):
    before = checksum(session.store)
    load(qtbot, pane, Selection("alice", "t1"))
    load(qtbot, pane, Selection("bob", "t2"))
    pane.tabs.setCurrentIndex(1)
    pane.version_table.selectRow(0)
    pane.tabs.setCurrentIndex(2)
    pane.tabs.setCurrentIndex(3)
    pane.agent_table.selectRow(0)
    with qtbot.waitSignal(pane.loaded, timeout=10_000):
        pane.agent_combo.setCurrentIndex(1)
    session.pool.wait()
    assert checksum(session.store) == before


def test_agent_writes_show_up_and_never_clobber_an_edit(qtbot, pane, session):
    load(qtbot, pane, Selection("alice", "t1"))
    agent = Memory(session.store, MemoryOptions(working_memory={"enabled": True}), name="assistant")
    agent.update_working_memory(thread_id="t1", resource_id="alice", working_memory="# User\n- Name: Alice B.")
    with qtbot.waitSignal(pane.loaded, timeout=10_000):
        session.changed.emit()  # what the session's file poll emits when another process wrote
    assert pane.editor.toPlainText() == "# User\n- Name: Alice B." and pane.version_model.rowCount() == 2
    pane.editor.replace_all("my edit")
    agent.update_working_memory(thread_id="t1", resource_id="alice", working_memory="agent again")
    with qtbot.waitSignal(pane.loaded, timeout=10_000):
        session.changed.emit()
    assert pane.editor.toPlainText() == "my edit"
    assert pane.info_banner.isVisible() and "changed while you were editing" in pane.info_banner.text()


def test_history_says_how_many_versions_are_kept_and_a_too_large_save_is_refused(qtbot, tmp_path):
    # Issue 17 item 12: the agent keeps 3 versions and at most 2,000 bytes; the Studio follows both.
    store = open_store(tmp_path / "memory.db")
    memory = Memory(store, MemoryOptions(working_memory={"enabled": True}, max_working_memory_versions=3,
                                         max_working_memory_bytes=2000), name="assistant")
    memory.create_thread(resource_id="alice", thread_id="t1", title="Lisbon", metadata={"agent": "small-agent"})
    for i in range(5):
        memory.update_working_memory(thread_id="t1", resource_id="alice", working_memory=f"# User\n- v{i}")
    memory.register("small-agent")
    session = StudioSession(store)
    pane = WorkingMemoryPane(session)
    qtbot.addWidget(pane)
    try:
        snap = load(qtbot, pane, Selection("alice", "t1"))
        assert len(snap.versions) == 3 and snap.versions_kept == 3
        assert "Only the newest 3 versions are kept" in pane.history.kept_label.text()
        pane.editor.replace_all("# User\n" + "x" * 3000)
        with qtbot.waitSignal(pane.failed, timeout=10_000) as blocker:
            pane.commands.run("wm.save")
        assert "over the limit of 2,000 bytes" in blocker.args[0]
        assert stored(session, "t1", "alice") == "# User\n- v4"
        pane.editor.replace_all("# User\n- v5")
        save_and_wait(qtbot, pane, pane.saved)
        qtbot.waitUntil(lambda: pane.version_model.rows()[0].version.text == "# User\n- v5", timeout=10_000)
        # v5 in, v2 pruned: still the newest 3
        assert [r.version.text for r in pane.version_model.rows()] == ["# User\n- v5", "# User\n- v4", "# User\n- v3"]
    finally:
        session.close()


def test_closing_or_opening_another_database_asks_before_discarding_an_unsaved_edit(qtbot, make_window, tmp_path):
    """What the user typed and did not save is not thrown away without a word: closing the window or opening
    a database asks first; Cancel keeps the window and the edit, Discard goes on."""
    path = tmp_path / "m.db"
    build_db(path).close()
    window = make_window()
    window.open_database(str(path))
    qtbot.waitUntil(lambda: window.resources is not None and len(window.resources.thread_rows()) >= 1,
                    timeout=15_000)
    window.show_tab("working_memory")
    pane = window.panes["working_memory"]
    load(qtbot, pane, Selection("alice", "t1"))
    pane.editor.setPlainText(pane.editor.toPlainText() + "\n- Likes: tea")
    assert window.unsaved_edits() == 1
    session = window.session
    window.open_database(str(path))
    box = window.presenter.open[-1]
    assert box.windowTitle() == "Discard unsaved edits?" or "Discard unsaved edits?" in box.text()
    box.reject()  # Cancel
    assert window.session is session and "Likes: tea" in pane.editor.toPlainText()
    window.commands.run("app.quit")  # File > Quit (the title bar's close button asks the same way)
    assert window.isVisible()  # not closed: it asked
    box = window.presenter.open[-1]
    assert "not saved" in box.text() or "not saved" in box.informativeText()
    box.property("yesButton").click()  # Discard and Close
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=10_000)


def test_a_long_document_renders_its_preview_once_typing_pauses_not_on_every_key(qtbot, pane, session):
    """Found typing into a 200 KB working memory: each key re-rendered the whole preview on the UI thread
    (~80 ms of ~95 a key), so the editor lagged behind the keyboard."""
    from PySide6.QtGui import QTextCursor
    from PySide6.QtTest import QTest

    long_text = "# User\n- Name: Alice\n" + "".join(f"- Fact {i}: something the user said about item {i}\n"
                                                   for i in range(1500))
    Memory(session.store, MemoryOptions(working_memory={"enabled": True}), name="assistant").update_working_memory(
        thread_id="t1", resource_id="alice", working_memory=long_text)
    load(qtbot, pane, Selection("alice", "t1"))
    assert len(pane.editor.toPlainText()) > 20_000
    qtbot.waitUntil(lambda: "item 1499" in pane.preview.toPlainText(), timeout=10_000)
    renders: list[int] = []
    pane.preview.document().contentsChanged.connect(lambda: renders.append(1))
    cursor = pane.editor.textCursor()
    cursor.movePosition(QTextCursor.MoveOperation.End)
    pane.editor.setTextCursor(cursor)
    QTest.keyClicks(pane.editor, "Berlin")
    assert pane.editor.toPlainText().endswith("Berlin")
    assert renders == [], "no key rendered the preview by itself"
    qtbot.waitUntil(lambda: "Berlin" in pane.preview.toPlainText(), timeout=10_000)
    assert 0 < len(renders) <= 3, "rendered once when typing paused"


def test_schema_modes_two_sizes_say_which_form_each_counts(qtbot, pane):
    """Schema mode shows the value formatted while the store keeps it compact: the editor said "188 chars"
    and the status line "154 chars stored" (working-memory-schema.png), two sizes of one value that read
    as a contradiction. Each says which form it counts; Markdown, stored as written, has one size."""
    snap = load(qtbot, pane, Selection("bob", "t2"))
    editor, stored = pane.editor.toPlainText(), snap.text
    assert len(editor) != len(stored) and json.loads(editor) == json.loads(stored)
    shown, status = pane.size_label.text(), pane.status.text()
    assert shown.startswith(f"{len(editor):,} chars") and "formatted" in shown
    assert f"{len(stored):,} chars" in status and "stored (compact JSON)" in status
    assert "compact" in pane.size_label.toolTip() and "status line" in pane.size_label.toolTip()
    pane.editor.replace_all('{"name": "Bo"}')  # (live, as typed)
    assert pane.size_label.text().startswith("14 chars") and "formatted" in pane.size_label.text()
    md = load(qtbot, pane, Selection("alice", "t1"))
    assert md.fmt == "markdown"
    assert "formatted" not in pane.size_label.text() and "compact" not in pane.status.text()
    assert f"{len(md.text):,} chars" in pane.status.text() and "stored" in pane.status.text()


def test_nothing_of_the_owner_before_stays_beside_an_empty_editor(qtbot, pane, session):
    """Found by the session-31 walk (a read that failed, the server gone; the same on selecting nothing, as when the
    thread shown is deleted): the editor emptied, but the rendering, the size line, a JSON result and its
    problems still showed the previous owner's working memory."""
    load(qtbot, pane, Selection("alice", "t1"))
    assert "Alice" in pane.preview.toPlainText() and "chars" in pane.size_label.text()
    pane.set_selection(Selection())
    assert pane.editor.toPlainText() == ""
    assert pane.preview.toPlainText().strip() == "" and pane.size_label.text() == ""

    load(qtbot, pane, Selection("bob", "t2"))
    pane.json_mode.setCurrentIndex(pane.json_mode.findData("merge"))
    pane.editor.replace_all('{"name": 42}')
    assert pane.problem_label.isVisible() and pane.result_view.toPlainText()
    pane.set_selection(Selection())
    assert not pane.problem_label.isVisible() and pane.result_view.toPlainText() == ""
    assert pane.merge_caption.text() == "" and pane.size_label.text() == ""
    assert pane.unsaved_edits() == 1  # the edit typed for Bob is kept aside, not lost


def test_an_agent_turn_that_began_before_a_save_and_replaced_it_is_said(qtbot, pane, session):
    """Found by the session-31 walk (a gateway's turn and a hand edit in the Studio on the same memory): a turn
    reads the working memory, the user saves an edit, the turn's model then calls updateWorkingMemory with what it
    read, and the edit is no longer stored; the pane reloaded to the agent's value with nothing said, the saved
    edit looking as if it had never been made. Now it says so, and where the saved version is."""
    import threading

    from core import Agent, ScriptedModel
    from core.llm import ScriptedReply, tool_call

    asked, answer = threading.Event(), threading.Event()

    def responder(messages, tools):
        if messages[-1]["role"] == "tool":
            return "Noted."
        asked.set()
        assert answer.wait(30)
        return ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": "# User\n- Name: Alice\n- Likes: tea"}),))

    memory = Memory(session.store, MemoryOptions(working_memory={"enabled": True}), name="assistant")
    agent = Agent("travel-agent", instructions="Help.", model=ScriptedModel(responder), memory=memory, tracer=False)
    load(qtbot, pane, Selection("alice", "t1"))
    turn = threading.Thread(target=lambda: agent.generate("I like tea", memory={"resource": "alice", "thread": "t1"}))
    turn.start()
    try:
        assert asked.wait(30)  # the turn has read the memory and waits for its model
        pane.editor.replace_all("# User\n- Name: Alice\n- Allergy: peanuts")
        save_and_wait(qtbot, pane, pane.saved)
        qtbot.waitUntil(lambda: pane.version_model.rowCount() == 2, timeout=10_000)
        assert not pane.info_banner.isVisible()
    finally:
        answer.set()
        turn.join(30)
    with qtbot.waitSignal(pane.loaded, timeout=10_000):
        session.changed.emit()  # what the session's poll emits after the agent's write
    assert pane.editor.toPlainText().endswith("Likes: tea")  # what is stored now, shown as such
    banner = pane.info_banner.text()
    assert pane.info_banner.isVisible() and "The working memory you saved at" in banner
    assert "changed since by agent" in banner and "History" in banner
    with qtbot.waitSignal(pane.loaded, timeout=10_000):
        session.changed.emit()  # another turn anywhere: still said
    assert "The working memory you saved at" in pane.info_banner.text()
    load(qtbot, pane, Selection("bob", "t2"))  # another owner: not about it
    assert "you saved" not in pane.info_banner.text() or not pane.info_banner.isVisible()


def test_undo_after_a_save_stages_the_value_before_it_and_save_writes_it_as_a_new_version(qtbot, pane, session):
    """After Save, Undo (and Edit's Undo Working Memory Edit) was off: only History's Restore brought the previous
    value back (found 2026-12-07 by s33-walk5). Undo now stages the value stored before the save, as Restore stages
    a version, and says so; Save writes it as a new version, refused as any save when another writer came between."""
    load(qtbot, pane, Selection("alice", "t1"))
    before = pane.editor.toPlainText()
    pane.editor.replace_all(before + "\n- City: Berlin")
    save_and_wait(qtbot, pane, pane.saved)
    qtbot.waitUntil(lambda: pane.version_model.rowCount() == 2 and not pane._saving, timeout=10_000)
    assert not pane.editor.document().isUndoAvailable()  # (the reload: nothing of the editor's own to undo)
    assert pane.commands.action("wm.undo").isEnabled()
    pane.commands.run("wm.undo")
    assert pane.editor.toPlainText() == before and "staged" in pane.status.text()
    assert stored(session, "t1", "alice").endswith("City: Berlin")  # staged only: nothing written by Undo
    pane.commands.run("wm.undo")  # the editor's own Undo now: the saved value again
    assert pane.editor.toPlainText().endswith("City: Berlin")
    pane.commands.run("wm.redo")
    assert pane.editor.toPlainText() == before
    save_and_wait(qtbot, pane, pane.saved)
    qtbot.waitUntil(lambda: pane.version_model.rowCount() == 3, timeout=10_000)
    assert stored(session, "t1", "alice") == before
    newest = pane.version_model.rows()[0]
    assert newest.text == before and newest.note and "before a save" in newest.note
    # Undo again, then an agent writes before Save: the save is refused, both shown, nothing overwritten.
    pane.commands.run("wm.undo")
    assert pane.editor.toPlainText().endswith("City: Berlin")
    agent = Memory(session.store, MemoryOptions(working_memory={"enabled": True}), name="assistant")
    agent.update_working_memory(thread_id="t1", resource_id="alice", working_memory="# User\n- Name: Alice\n- Pet: cat")
    theirs = save_and_wait(qtbot, pane, pane.conflict)
    assert theirs.endswith("Pet: cat") and stored(session, "t1", "alice") == theirs


def test_undo_after_a_save_is_off_on_another_owner(qtbot, pane, session):
    load(qtbot, pane, Selection("alice", "t1"))
    pane.editor.replace_all("# User\n- Name: Alice\n- City: Berlin")
    save_and_wait(qtbot, pane, pane.saved)
    qtbot.waitUntil(lambda: pane.version_model.rowCount() == 2 and not pane._saving, timeout=10_000)
    assert pane.commands.action("wm.undo").isEnabled()
    load(qtbot, pane, Selection("bob", "t2"))
    assert not pane.commands.action("wm.undo").isEnabled()
