"""Where issue 19's engine features show in the Studio: the Observations pane's buffer and resource-scope
attribution, generated titles in the thread list, vNext reasons in the working-memory history, model
names in Preferences, and what background buffering did at a replayed turn."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings, Qt

from core import Agent, Memory, MemoryOptions, open_store
from core.llm import ScriptedModel
from core.observational import load_current
from core.timeutil import FixedClock
from core.tokens import EstimatingTokenizer
from studio.logic.om_buffer_layout import buffer_view, prompt_buffer_note, turn_activity
from studio.panes.observations import PAGE_CONTENT, ObservationsPane
from studio.panes.working_memory import WorkingMemoryPane
from studio.preferences import Preferences, endpoint_from_model_string
from studio.selection import Selection
from studio.widgets.preferences_dialog import PreferencesDialog

from .conftest import seeded_demo_folder

WAIT = 20_000
STANDUP = Selection("sam", "sam-standup")


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seeded_demo_folder(tmp_path_factory, "demo-parity")


@pytest.fixture
def demo_db(tmp_path: Path, demo_dir: Path) -> Path:
    shutil.copytree(demo_dir, tmp_path / "demo")
    return tmp_path / "demo" / "memory.db"


def observations(qtbot: Any, make_session: Any, db: Path, selection: Selection) -> ObservationsPane:
    pane = ObservationsPane(make_session(db))
    qtbot.addWidget(pane)
    pane.resize(1200, 760)
    pane.show()
    with qtbot.waitSignal(pane.loaded, timeout=WAIT):
        pane.set_selection(selection)
    return pane


def test_the_observations_pane_shows_the_buffer_and_its_activity(no_leaked_widgets, qtbot, make_session, demo_db):
    pane = observations(qtbot, make_session, demo_db, STANDUP)
    record = pane.view.history[0]
    assert record.buffered, "the demo leaves one chunk buffered"
    panel = pane.buffer_panel
    assert "Observes in the background every 36 tokens" in panel.settings_label.text()
    assert "activates at 120" in panel.settings_label.text() and "past 240 tokens" in panel.settings_label.text()
    assert "1 chunk(s) buffered" in panel.status_label.text()
    chunk = panel.chunk_model.row_at(0)
    assert chunk is not None and "closed the stand-up" in chunk.preview and "[low]" in chunk.preview
    kinds = [row.what for row in panel.event_model.rows()]
    assert any(w.startswith("activated") for w in kinds) and any(w.startswith("buffered") for w in kinds)
    assert panel.tabs.tabText(0) == "Buffered (1)"
    # The buffered chunk is not in the log the model sees.
    assert "closed the stand-up" not in pane.log_view.toPlainText()


def test_a_turn_that_waited_is_marked(no_leaked_widgets, qtbot, make_session, tmp_path):
    db = tmp_path / "blocked.db"
    store = open_store(db)
    memory = Memory(store, MemoryOptions(observational_memory={"message_tokens": 100, "buffer_tokens": 0.9,
                                                               "block_after": 1.05}),
                    observer_model=ScriptedModel(lambda m, t: "<observations>\nDate: Jan 1, 2026\n* 🔴 (10:00) "
                                                              "Noted.\n</observations>", name="observer"),
                    tokenizer=EstimatingTokenizer(), clock=FixedClock(datetime(2026, 1, 1, 10, tzinfo=timezone.utc)))
    agent = Agent("a", instructions="x", model=ScriptedModel(lambda m, t: "ok " * 20), memory=memory, tracer=False)
    for i in range(4):
        agent.generate(f"question {i} " + "w " * 40, memory={"resource": "u", "thread": "t"})
    assert memory.wait_idle(30)
    record = load_current(store, thread_id="t")
    store.close()
    view = buffer_view(record)
    assert view.blocked_turns >= 1 and any(row.blocked and "the turn waited" in row.what for row in view.events)
    pane = observations(qtbot, make_session, db, Selection("u", "t"))
    assert "waited for the observer" in pane.buffer_panel.status_label.text()


def resource_scoped_log(db: Path, title: str) -> None:
    """A resource-scoped observation log at ``db``: resource ada, one chunk from thread "trip" titled ``title``."""
    store = open_store(db)
    memory = Memory(store, MemoryOptions(observational_memory={"scope": "resource", "message_tokens": 60}),
                    observer_model=ScriptedModel(lambda m, t: "<observations>\nDate: Jan 1, 2026\n* 🔴 (10:00) User "
                                                              "plans a trip to Oslo.\n</observations>", name="observer"),
                    tokenizer=EstimatingTokenizer())
    memory.create_thread(resource_id="ada", thread_id="trip", title=title)
    agent = Agent("a", instructions="x", model=ScriptedModel(lambda m, t: "Noted " * 10), memory=memory, tracer=False)
    for i in range(3):
        agent.generate(f"Oslo plans {i} " + "w " * 20, memory={"resource": "ada", "thread": "trip"})
    store.close()


def test_resource_scoped_chunks_name_the_thread_they_came_from(no_leaked_widgets, qtbot, make_session, tmp_path):
    db = tmp_path / "resource.db"
    resource_scoped_log(db, "Oslo trip")
    pane = observations(qtbot, make_session, db, Selection("ada"))
    assert pane.stack.currentIndex() == PAGE_CONTENT and "resource scope" in pane.subtitle.text()
    text = pane.log_view.toPlainText()
    assert "from thread trip (Oslo trip)" in text and "plans a trip to Oslo" in text
    assert '<thread id="trip">' not in text  # the attribution is the heading, not the raw tag


def test_a_chunks_thread_title_with_bidi_controls_or_a_line_break_is_shown_as_stored(no_leaked_widgets, qtbot,
                                                                                      make_session, tmp_path):
    # Left open by the session-31 walk: the tree and headers wrote such a title's controls as escapes, but the log's
    # "from thread … (title)" heading drew "\u202eOslo" reversed and broke the heading's line at its newline.
    db = tmp_path / "resource.db"
    resource_scoped_log(db, "\u202eOslo trip\nday 1")
    pane = observations(qtbot, make_session, db, Selection("ada"))
    assert pane.stack.currentIndex() == PAGE_CONTENT
    text = pane.log_view.toPlainText()
    assert "from thread trip (\\u202eOslo trip\\nday 1)" in text and "\u202e" not in text


def test_generated_titles_show_in_the_thread_list(no_leaked_widgets, qtbot, make_window, tmp_path):
    db = tmp_path / "titles.db"
    store = open_store(db)
    memory = Memory(store, MemoryOptions(generate_title={"model": ScriptedModel(lambda m, t: "Garden Planning",
                                                                                name="titler")}))
    agent = Agent("a", instructions="x", model=ScriptedModel(lambda m, t: "Sure."), memory=memory, tracer=False)
    agent.generate("Help me plan my garden.", memory={"resource": "u", "thread": "g"})
    assert memory.wait_idle(30)
    store.close()
    window = make_window()
    window.open_database(str(db))
    qtbot.waitUntil(lambda: window.resources is not None and bool(window.resources.thread_rows()), timeout=WAIT)
    assert ("u", "Garden Planning", 2) in window.resources.thread_rows()


def test_the_working_memory_history_shows_vnext_reasons(no_leaked_widgets, qtbot, make_session, demo_db):
    pane = WorkingMemoryPane(make_session(demo_db))
    qtbot.addWidget(pane)
    pane.set_selection(Selection("sam", "sam-retro"))
    qtbot.waitUntil(lambda: len(pane.version_model.rows()) >= 2, timeout=WAIT)
    model = pane.version_model
    titles = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(model.columnCount())]
    reason_col, note_col = titles.index("Reason"), titles.index("Note")
    newest = [model.index(0, c).data() for c in range(model.columnCount())]
    oldest = [model.index(model.rowCount() - 1, c).data() for c in range(model.columnCount())]
    assert newest[reason_col] == "clarify-existing-memory" and "replaced" in newest[note_col]
    assert oldest[reason_col] == "append-new-memory"


def test_preferences_take_a_model_name(no_leaked_widgets, qtbot, tmp_path):
    prefs = Preferences(QSettings(str(tmp_path / "p.ini"), QSettings.Format.IniFormat))
    dialog = PreferencesDialog(prefs)
    qtbot.addWidget(dialog)
    dialog.add_endpoint("OpenAI")
    dialog.model_string_edit.setText("groq/llama-3.1-8b-instant")
    assert dialog.fill_from_model_string()
    assert dialog.url_edit.text() == "https://api.groq.com/openai/v1"
    assert dialog.model_edit.text() == "llama-3.1-8b-instant" and dialog.key_name_edit.text() == "GROQ_API_KEY"
    dialog.model_string_edit.setText("ollama/llama3.1")
    assert dialog.fill_from_model_string() and dialog.source_combo.currentData() == "none"
    dialog.model_string_edit.setText("olama/llama3.1")
    assert not dialog.fill_from_model_string()
    assert "Did you mean 'ollama/llama3.1'" in dialog.problems.text()
    dialog.save()
    assert prefs.endpoints[0].base_url == "http://localhost:11434/v1"
    ep = endpoint_from_model_string("lmstudio/qwen", environ={"LMSTUDIO_BASE_URL": "http://box:1234/v1"})
    assert (ep.name, ep.base_url, ep.model) == ("lmstudio/qwen", "http://box:1234/v1", "qwen")


def test_the_inspector_note_and_the_replay_activity_line() -> None:
    notes = {"observational-memory": {"buffering": True, "buffer": {"chunks": 2, "messageTokens": 90},
                                      "activation": "1 buffered observation chunk(s) would be activated now"}}
    note = prompt_buffer_note(notes)
    assert note is not None and "2 observation chunk(s) buffered" in note and "would be activated" in note
    assert prompt_buffer_note({"observational-memory": {"buffering": False}}) is None
    # Synchronous observation, the observer backing off: the inspector says why nothing is observed.
    failing = {"observational-memory": {"buffering": False, "observationError": "the observer failed (x); backing off"}}
    assert prompt_buffer_note(failing) == "Observational memory: the observer failed (x); backing off."


def test_replay_says_what_buffering_did_at_each_turn(demo_db: Path) -> None:
    from core.observational import load_history

    store = open_store(demo_db)
    memory = Memory(store)
    turns = memory.turns("sam-standup")
    history = load_history(store, thread_id="sam-standup")
    from core.timeutil import to_iso

    lines = [turn_activity(history, to_iso(t.record.created_at)) for t in turns if t.record is not None]
    store.close()
    assert any("activated" in line and "did not wait" in line for line in lines)
    assert lines[0] == ""  # nothing was buffered yet at the first turn
