"""Prompt inspector pane: renders the engine's assembly record, re-assembles on option changes,
copies JSON / OpenAI messages, and never writes (pytest-qt, offscreen, real libSQL file)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from PySide6.QtGui import QGuiApplication

from core import Memory, MemoryOptions, Message, open_store
from studio.panes.prompt_inspector import PromptInspectorPane
from studio.selection import Selection
from studio.session import StudioSession

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)
TURNS = [
    ("user", "Hi! I'm Alice, I live in Berlin and I work as a data engineer."),
    ("assistant", "Nice to meet you, Alice! How can I help?"),
    ("user", "Plan a 3-day trip to Lisbon in May, I love food markets."),
    ("assistant", "Day 1: Alfama and Time Out Market. Day 2: Belém. Day 3: LX Factory."),
    ("user", "Add a day trip to Sintra."),
    ("assistant", "Day 4: Sintra — Pena Palace in the morning, Quinta da Regaleira after lunch."),
]


def build_db(path):
    store = open_store(path)
    mem = Memory(store, MemoryOptions(last_messages=4, working_memory={"enabled": True}), name="assistant")
    mem.create_thread(resource_id="alice", thread_id="t-lisbon", title="Trip to Lisbon")
    mem.save_messages([
        (Message.user if role == "user" else Message.assistant)(
            text, thread_id="t-lisbon", resource_id="alice", created_at=T0 + timedelta(minutes=i), id=f"m{i}")
        for i, (role, text) in enumerate(TURNS)
    ])
    mem.update_working_memory(
        thread_id="t-lisbon", resource_id="alice",
        working_memory="# User Information\n- **First Name**: Alice\n- **Location**: Berlin\n- **Occupation**: data engineer",
    )
    mem.register("travel-agent")
    return store


def checksum(store) -> str:
    """Every row of every table, hashed: "looking never writes" means this does not change."""
    h = hashlib.sha256()
    with store.db.read() as conn:
        tables = [r[0] for r in conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name").all()]
        for name in tables:
            h.update(name.encode())
            for row in conn.execute(sa.text(f'SELECT * FROM "{name}" ORDER BY 1')).all():
                h.update(repr(tuple(row)).encode())
    return h.hexdigest()


@pytest.fixture()
def session(qtbot, tmp_path):
    store = build_db(tmp_path / "memory.db")
    s = StudioSession(store)
    yield s
    s.close()


@pytest.fixture()
def pane(no_leaked_widgets, qtbot, session):
    p = PromptInspectorPane(session)
    qtbot.addWidget(p)
    p.resize(1200, 800)
    return p


def select(qtbot, pane, selection):
    with qtbot.waitSignal(pane.assembled, timeout=15_000) as blocker:
        pane.set_selection(selection)
    return blocker.args[0]


def test_renders_fragments_sources_skips_and_tokens(qtbot, pane):
    preview = select(qtbot, pane, Selection("alice", "t-lisbon"))
    prompt = preview.prompt
    model = pane.fragment_model
    assert model.rowCount() == len(prompt.fragments)
    sources = [model.index(r, 2).data() for r in range(model.rowCount())]
    assert sources == [f.source for f in prompt.fragments]
    assert "working-memory" in sources and sources.count("message-history") == 4  # agent config: last 4
    history_ids = [model.index(r, 3).data() for r in range(model.rowCount()) if sources[r] == "message-history"]
    assert history_ids == ["m2", "m3", "m4", "m5"]
    assert [model.index(r, 5).data() for r in range(model.rowCount())] == [f"{f.tokens:,}" for f in prompt.fragments]
    assert pane.skip_model.rowCount() == len(prompt.skipped) >= 1
    assert pane.skip_model.index(0, 1).data() == prompt.skipped[pane.skip_model.index(0, 0).data()]
    usage = pane.bar.usage
    assert usage is not None and usage.total == prompt.total_tokens
    assert {s.source: s.tokens for s in usage.segments} == {**prompt.tokens_by_source(), "reply primer": 3}
    assert "travel-agent" in pane.origin_label.text()
    assert pane.last_spin.value() == 4


def test_typed_message_and_option_change_reassemble(qtbot, pane):
    select(qtbot, pane, Selection("alice", "t-lisbon"))
    with qtbot.waitSignal(pane.assembled, timeout=15_000) as blocker:
        pane.message_edit.setText("What should I eat in Lisbon?")
    assert blocker.args[0].prompt.messages[-1] == {"role": "user", "content": "What should I eat in Lisbon?"}
    with qtbot.waitSignal(pane.assembled, timeout=15_000) as blocker:
        pane.last_spin.setValue(2)
    prompt = blocker.args[0].prompt
    assert len(prompt.fragments_from("message-history")) == 2
    assert "modified" in pane.origin_label.text()
    with qtbot.waitSignal(pane.assembled, timeout=15_000) as blocker:
        pane.readonly_check.setChecked(True)
    prompt = blocker.args[0].prompt
    assert prompt.tools == [] and "READ-ONLY" in prompt.fragments_from("working-memory")[0].text
    with qtbot.waitSignal(pane.assembled, timeout=15_000) as blocker:
        pane.last_spin.setValue(0)
    assert blocker.args[0].prompt.fragments_from("message-history") == []
    assert any(pane.skip_model.index(r, 0).data() == "message-history" for r in range(pane.skip_model.rowCount())) \
        or "message-history" not in blocker.args[0].prompt.processors


def test_rapid_changes_are_debounced_and_only_the_last_is_shown(qtbot, pane):
    select(qtbot, pane, Selection("alice", "t-lisbon"))
    seen = []
    pane.assembled.connect(seen.append)
    for n in (3, 2, 1):
        pane.last_spin.setValue(n)
    qtbot.waitUntil(lambda: not pane.busy and bool(seen), timeout=15_000)
    # Not busy: the debounce timer is idle and no job is outstanding, so nothing else can arrive.
    assert len(seen) == 1
    assert len(pane.preview.prompt.fragments_from("message-history")) == 1


def test_copy_json_and_openai_put_the_engine_serialisation_on_the_clipboard(qtbot, pane):
    preview = select(qtbot, pane, Selection("alice", "t-lisbon"))
    pane.commands.run("prompt.copy_json")
    copied = QGuiApplication.clipboard().text()
    assert copied == preview.prompt.to_json()
    assert json.loads(copied)["fragments"][0]["source"] == "working-memory"
    pane.commands.run("prompt.copy_openai")
    assert json.loads(QGuiApplication.clipboard().text()) == preview.prompt.messages


def test_stored_turn_is_reassembled_as_of_that_turn(qtbot, pane):
    preview = select(qtbot, pane, Selection("alice", "t-lisbon", "m3"))
    assert pane.turn_radio.isChecked()
    assert preview.turn is not None and preview.turn.input.id == "m2"
    history = [f.stored_ids[0] for f in preview.prompt.fragments_from("message-history")]
    assert history == ["m0", "m1"]
    assert preview.prompt.messages[-1]["content"] == TURNS[2][1]
    assert pane.message_edit.text() == TURNS[2][1] and not pane.message_edit.isEnabled()


def test_a_stored_turns_message_is_shown_from_its_start_and_whole_in_its_tooltip(qtbot, pane):
    """The stored turn's message filled the (disabled) message field scrolled to its end, so a message
    longer than the field showed its tail only, cut mid-letter at the left, and nothing showed the rest
    (found 2026-12-06 walking the Studio under Xvfb at 1,440 px)."""
    select(qtbot, pane, Selection("alice", "t-lisbon", "m3"))
    edit = pane.message_edit
    assert edit.text() == TURNS[2][1] and edit.cursorPosition() == 0
    assert TURNS[2][1] in edit.toolTip()
    pane.use_new_message()
    assert edit.isEnabled() and edit.toolTip() == ""



def test_a_stored_turns_message_never_becomes_the_next_message_and_what_was_typed_comes_back(qtbot, pane, session):
    """Found by the session-31 walk: after a stored turn of one thread was shown, picking another thread put that
    turn's message ("what's the weather in Köln?") in the New message field as if typed, and into the other
    thread's prompt as its input; a message typed before the stored turn was shown was gone."""
    Memory(session.store).save_messages([Message.user("Any tips for Porto?", thread_id="t-porto", resource_id="alice",
                                                      created_at=T0 + timedelta(hours=1), id="p0")])
    preview = select(qtbot, pane, Selection("alice", "t-lisbon", "m3"))
    assert pane.message_edit.text() == TURNS[2][1]
    preview = select(qtbot, pane, Selection("alice", "t-porto"))
    assert pane.message_edit.text() == "" and pane.message_edit.isEnabled()
    assert preview.prompt.messages[-1]["content"] == "Any tips for Porto?"  # its own last message, nothing added
    assert TURNS[2][1] not in json.dumps(preview.prompt.messages)

    with qtbot.waitSignal(pane.assembled, timeout=15_000):
        pane.message_edit.setText("What wine goes with bacalhau?")
    select(qtbot, pane, Selection("alice", "t-lisbon", "m3"))
    assert pane.message_edit.text() == TURNS[2][1]
    preview = select(qtbot, pane, Selection("alice", "t-lisbon"))
    assert pane.message_edit.text() == "What wine goes with bacalhau?"
    assert preview.prompt.messages[-1] == {"role": "user", "content": "What wine goes with bacalhau?"}

def test_a_stored_turns_input_names_its_stored_message(qtbot, pane, session):
    """A stored turn's input fragment said "Not from a stored message: the new input (not stored yet)", with
    Edit Stored Message… off, and so no "edited since" for an input edited after its turn (found by the
    Studio QA pass)."""
    Memory(session.store, name="assistant").edit_message("m2", resource_id="alice", text="EDITED later")
    select(qtbot, pane, Selection("alice", "t-lisbon", "m3"))
    rows = pane.fragment_model.rows()
    row = next(i for i, r in enumerate(rows) if r.source == "input")
    assert rows[row].stored_ids == ("m2",)
    pane.fragment_table.selectRow(row)
    assert "From stored messages" in pane.detail_sources.text() and "m2" in pane.detail_sources.text()
    assert pane.edit_btn.isEnabled()
    new = select(qtbot, pane, Selection("alice", "t-lisbon"))  # a new input is not stored: no id
    assert all(not r.stored_ids for r in pane.fragment_model.rows() if r.source == "input")
    assert new.turn is None


def test_the_fragment_header_writes_tokens_as_the_table_does_and_wraps(qtbot, pane, session):
    """A long message's detail header said "20005 tokens" beside the table's "20,005" and was cut at the
    Request side ("… 20005 toke"), losing its time (found by the Studio QA pass)."""
    Memory(session.store, name="assistant").save_messages([Message.user(
        "word " * 6000, thread_id="t-lisbon", resource_id="alice", created_at=T0 + timedelta(minutes=30))])
    select(qtbot, pane, Selection("alice", "t-lisbon"))
    pane.resize(700, 700)
    pane.show()
    rows = pane.fragment_model.rows()
    row = next(i for i, r in enumerate(rows) if r.tokens > 1000)
    pane.fragment_table.selectRow(row)
    header = pane.detail_header
    assert f"{rows[row].tokens:,} tokens" in header.text() and "," in f"{rows[row].tokens:,}"
    from PySide6.QtCore import QRect, Qt

    metrics = header.fontMetrics()
    assert metrics.horizontalAdvance(header.text()) > header.width()  # one line cannot hold it here

    def whole_text_shown() -> bool:
        needed = metrics.boundingRect(QRect(0, 0, header.width(), 10_000), Qt.TextFlag.TextWordWrap, header.text())
        return header.height() >= needed.height()

    qtbot.waitUntil(whole_text_shown, timeout=5_000)

def test_fragment_detail_links_to_stored_messages(qtbot, pane):
    select(qtbot, pane, Selection("alice", "t-lisbon"))
    rows = pane.fragment_model.rows()
    hist = next(i for i, r in enumerate(rows) if r.source == "message-history")
    pane.fragment_table.selectRow(hist)
    assert rows[hist].stored_ids[0] in pane.detail_sources.text()
    assert pane.detail_text.toPlainText() == rows[hist].text
    with qtbot.waitSignal(pane.open_message) as blocker:
        pane.detail_sources.linkActivated.emit(rows[hist].stored_ids[0])
    assert blocker.args == [rows[hist].stored_ids[0]]


def test_defaults_when_no_agent_is_registered(qtbot, tmp_path):
    store = open_store(tmp_path / "bare.db")
    Memory(store).save_messages([Message.user("hello", thread_id="t", resource_id="r")])
    session = StudioSession(store)
    pane = PromptInspectorPane(session)
    qtbot.addWidget(pane)
    select(qtbot, pane, Selection("r", "t"))
    assert pane.origin_label.text().startswith("Defaults")
    assert pane.last_spin.value() == 10
    assert "working-memory" not in [f.source for f in pane.preview.prompt.fragments]
    session.close()


def test_recall_without_the_model_shows_the_install_hint(qtbot, pane, monkeypatch):
    from studio.panes import prompt_inspector

    def missing():
        raise RuntimeError("The embedding model is not installed. Run: memory-studio models install")

    monkeypatch.setattr(prompt_inspector, "EMBEDDERS", prompt_inspector.EmbedderHolder(missing))
    select(qtbot, pane, Selection("alice", "t-lisbon"))
    with qtbot.waitSignal(pane.failed, timeout=15_000) as blocker:
        pane.recall_check.setChecked(True)
    assert "models install" in blocker.args[0]
    assert pane.banner.isVisible() or "models install" in pane.banner.text()


def test_looking_never_writes(qtbot, pane, session):
    before = checksum(session.store)
    select(qtbot, pane, Selection("alice", "t-lisbon"))
    for value in (1, 3):
        with qtbot.waitSignal(pane.assembled, timeout=15_000):
            pane.last_spin.setValue(value)
    with qtbot.waitSignal(pane.assembled, timeout=15_000):
        pane.set_selection(Selection("alice", "t-lisbon", "m5"))
    pane.commands.run("prompt.copy_json")
    session.pool.wait()
    assert checksum(session.store) == before


def test_new_turns_written_by_the_agent_are_picked_up(qtbot, pane, session):
    select(qtbot, pane, Selection("alice", "t-lisbon"))
    agent = Memory(session.store, MemoryOptions(last_messages=4, working_memory={"enabled": True}), name="assistant")
    agent.save_messages([Message.user("Also book a fado show.", thread_id="t-lisbon", resource_id="alice",
                                      created_at=T0 + timedelta(minutes=10), id="m-new")])
    with qtbot.waitSignal(pane.assembled, timeout=15_000) as blocker:
        session.changed.emit()  # what the session's file poll emits when another process wrote
    history = [f.stored_ids[0] for f in blocker.args[0].prompt.fragments_from("message-history")]
    assert history[-1] == "m-new" and pane.last_spin.value() == 4


def test_the_fragment_being_read_stays_selected_when_the_prompt_is_assembled_again(qtbot, pane, session):
    """Each assembly selected the first memory fragment, so when another program wrote to the thread (or an
    option changed) the fragment the user was reading was swapped for working memory under them (found
    2026-12-06 browsing the Prompt Inspector while an agent loop wrote turns). The same fragment stays
    selected when the new prompt still has it; a fragment gone from it gives way to the first memory one."""
    select(qtbot, pane, Selection("alice", "t-lisbon"))
    rows = pane.fragment_model.rows()
    pane.fragment_table.selectRow(next(i for i, r in enumerate(rows) if r.stored_ids == ("m4",)))
    agent = Memory(session.store, MemoryOptions(last_messages=4, working_memory={"enabled": True}), name="assistant")
    agent.save_messages([Message.user("Also book a fado show.", thread_id="t-lisbon", resource_id="alice",
                                      created_at=T0 + timedelta(minutes=10), id="m-new")])
    with qtbot.waitSignal(pane.assembled, timeout=15_000):
        session.changed.emit()  # what the session's file poll emits when another process wrote
    assert pane.selected_fragment().stored_ids == ("m4",)
    assert [r.stored_ids for r in pane.fragment_model.rows()].index(("m4",)) != rows.index(  # (it moved up)
        next(r for r in rows if r.stored_ids == ("m4",)))
    wm = next(i for i, r in enumerate(pane.fragment_model.rows()) if r.source == "working-memory")
    pane.fragment_table.selectRow(wm)
    agent.update_working_memory(thread_id="t-lisbon", resource_id="alice",
                                working_memory="# User Information\n- **First Name**: Alice\n- **Location**: Porto")
    with qtbot.waitSignal(pane.assembled, timeout=15_000):
        session.changed.emit()
    assert pane.selected_fragment().source == "working-memory" and "Porto" in pane.selected_fragment().text
    history = [i for i, r in enumerate(pane.fragment_model.rows()) if r.source == "message-history"]
    pane.fragment_table.selectRow(history[0])  # the oldest message shown: the window leaves it behind
    with qtbot.waitSignal(pane.assembled, timeout=15_000):
        pane.last_spin.setValue(1)
    assert pane.selected_fragment() == pane.fragment_model.rows()[pane._first_interesting_row()]


def test_an_agent_with_a_history_budget_shows_the_trim(qtbot, no_leaked_widgets, tmp_path):
    store = build_db(tmp_path / "memory.db")
    Memory(store, MemoryOptions(message_history={"max_tokens": 90}), name="budgeted").register("travel-agent")
    session = StudioSession(store)
    try:
        pane = PromptInspectorPane(session)
        qtbot.addWidget(pane)
        preview = select(qtbot, pane, Selection("alice", "t-lisbon"))
        skips = {pane.skip_model.index(r, 0).data(): pane.skip_model.index(r, 1).data()
                 for r in range(pane.skip_model.rowCount())}
        assert "over the 90-token history budget" in skips["memory-token-limiter"]
        assert 0 < len(preview.prompt.fragments_from("message-history")) < len(TURNS)
        # No count cap shows as the spin box's maximum, and maps back to "no cap".
        assert pane.last_spin.value() == pane.last_spin.maximum() and pane.options().last_messages is None
        pane.resize(1200, 800)
        pane.grab().save(str(tmp_path / "budget.png"))
    finally:
        session.close()


def test_instructions_longer_than_a_line_edit_keeps_are_shown_and_assembled_whole(qtbot, no_leaked_widgets,
                                                                                   tmp_path):
    """A QLineEdit keeps 32,767 characters unless told otherwise: an agent's longer instructions were
    cut there, so the prompt shown (its text and token counts) was not the one the agent sends."""
    from core import Agent
    from core.llm import ScriptedModel

    long_instructions = "You plan meals. " + " ".join(f"Rule {i}: dish {i} is never served with peanuts."
                                                       for i in range(900))
    assert len(long_instructions) > 40_000
    store = open_store(tmp_path / "memory.db")
    mem = Memory(store, MemoryOptions(last_messages=4), name="chef")
    Agent("chef", instructions=long_instructions, model=ScriptedModel([]), memory=mem)  # registers its instructions
    mem.create_thread(resource_id="ada", thread_id="t-food", title="Food")
    mem.save_messages([Message.user("Dinner ideas?", thread_id="t-food", resource_id="ada", created_at=T0)])
    s = StudioSession(store)
    try:
        pane = PromptInspectorPane(s)
        qtbot.addWidget(pane)
        preview = select(qtbot, pane, Selection("ada", "t-food"))
        assert pane.instructions_edit.text() == long_instructions
        fragment = next(f for f in preview.prompt.fragments if f.source == "instructions")
        assert fragment.text == long_instructions
        pane.message_edit.setText("x" * 40_000)  # a pasted message is not cut either
        assert len(pane.message_edit.text()) == 40_000
    finally:
        s.close()


def test_a_thread_that_cannot_be_read_does_not_keep_the_previous_threads_header_or_resource(qtbot, pane, session):
    """Picking a thread whose read failed: the header still named the thread read before ("Trip to Lisbon",
    resource alice), and Reassemble then sent alice as the new thread's resource, which the engine refused
    with a sentence about thread ownership. Now the header names the thread that could not be read, and
    Reassemble reads it again, then assembles it for its own resource."""
    from .conftest import another_program

    pane.show()
    mem = Memory(session.store, MemoryOptions(), name="assistant")
    mem.create_thread(resource_id="bob", thread_id="t-bob", title="Bob's chat")
    mem.save_messages([Message.user("Hi, it is Bob.", thread_id="t-bob", resource_id="bob", created_at=T0)])
    select(qtbot, pane, Selection("alice", "t-lisbon"))
    another_program(session.store.location.path, "ALTER TABLE mastra_threads RENAME TO mastra_threads_old")
    with qtbot.waitSignal(pane.failed, timeout=15_000):
        pane.set_selection(Selection("bob", "t-bob"))
    assert "Lisbon" not in pane.title.text() and "alice" not in pane.subtitle.text()
    assert "t-bob" in pane.subtitle.text() and "could not be read" in pane.subtitle.text()
    another_program(session.store.location.path, "ALTER TABLE mastra_threads_old RENAME TO mastra_threads")
    with qtbot.waitSignal(pane.assembled, timeout=15_000) as blocker:
        pane.commands.run("prompt.reassemble")
    assert pane.title.text() == "Bob's chat" and "resource bob" in pane.subtitle.text()
    texts = [m.get("content") for m in blocker.args[0].prompt.messages]
    assert "Hi, it is Bob." in texts and not any("Alice" in str(t) for t in texts)


def test_in_a_narrow_pane_the_instructions_show_their_start_and_a_change_says_modified(qtbot, no_leaked_widgets,
                                                                                      tmp_path):
    """At a 1,100 px window (a ~700 px pane) the agent's instructions showed their tail ("a travel
    assistant. Answer …": the cursor left at their end), and "· modified" at the end of a long "Options
    from" line was cut off with no mark, so options changed here read as the agent's own."""
    from core import Agent
    from core.llm import ScriptedModel

    store = open_store(tmp_path / "memory.db")
    mem = Memory(store, MemoryOptions(last_messages=4), name="a-travel-agent-with-a-long-name")
    Agent("a-travel-agent-with-a-long-name", instructions="You are a travel assistant. " + "Answer kindly. " * 20,
          model=ScriptedModel([]), memory=mem)
    mem.create_thread(resource_id="ada", thread_id="t-trip", title="Trip")
    mem.save_messages([Message.user("Where to?", thread_id="t-trip", resource_id="ada", created_at=T0)])
    s = StudioSession(store)
    try:
        pane = PromptInspectorPane(s)
        qtbot.addWidget(pane)
        pane.resize(700, 800)
        pane.show()
        qtbot.waitExposed(pane)
        select(qtbot, pane, Selection("ada", "t-trip"))
        assert pane.instructions_edit.text().startswith("You are")
        assert pane.instructions_edit.cursorPosition() == 0  # shown from the start
        with qtbot.waitSignal(pane.assembled, timeout=15_000):
            pane.last_spin.setValue(2)
        label = pane.origin_label
        assert label.text().startswith("modified")  # drawn first, whatever is cut
        assert label.fontMetrics().horizontalAdvance(label.text()) > label.width()  # (too long for its place)
        assert label.toolTip() == label.text() and getattr(label, "elided", lambda: False)()  # cut with "…"
    finally:
        s.close()


def test_the_recalled_messages_table_fits_beside_the_request_panel(qtbot, no_leaked_widgets, tmp_path):
    """Under a semantic-recall fragment the table of its recalled messages (Message, Found as, Score, Vector,
    Keyword, Thread, Role) ran past its edge at a 1,440 px window (~530 px): Thread and Role were behind a
    sideways scroll bar (docs/screenshots/prompt-inspector-recall.png). It is fitted now; "Found as" gives
    way first, ending in "…", whole on hover."""
    from PySide6.QtWidgets import QApplication

    from studio.logic.recall_detail import RecalledRow

    store = open_store(tmp_path / "memory.db")
    s = StudioSession(store)
    try:
        pane = PromptInspectorPane(s)
        qtbot.addWidget(pane)
        pane.resize(1040, 800)  # (the pane in a 1,440 px window)
        pane.show()
        qtbot.waitExposed(pane)
        hit = "01a24540-1850-7b5e-a4e9-4a082d46ecda"
        rows = [RecalledRow(hit, "liwei-lisbon", "user", True, hit, 0.621, 0.842, 8.607, None, "hybrid"),
                RecalledRow("01a24540-1882-789f-b6f3-f52f1a2229b1", "liwei-lisbon", "assistant", False, hit, None,
                            None, None, 0.621, "hybrid")]
        pane.recalled_model.set_rows(rows)
        pane.recalled_table.show()
        QApplication.processEvents()
        table = pane.recalled_table
        assert table.isVisible() and table.viewport().width() < 600
        assert table.horizontalHeader().length() <= table.viewport().width()
        assert table.horizontalScrollBar().maximum() == 0
        model, metrics = table.model(), table.fontMetrics()
        for column in range(model.columnCount()):
            assert not table.isColumnHidden(column)
            text = model.index(1, column).data() or ""
            if metrics.horizontalAdvance(text) > table.columnWidth(column) - 8:  # cut: said on hover
                assert model.index(1, column).data(3), (text, column)
    finally:
        s.close()


def test_stored_turn_and_pin_say_why_they_are_off_and_what_to_do(qtbot, pane):
    """In a preview of the next turn, "Stored turn" and "Pin…" were disabled with no visible reason (found by
    s33-walk5): the label beside the radio says to pick a message, and the two tooltips say why and what to do."""
    select(qtbot, pane, Selection("alice", "t-lisbon"))
    assert not pane.turn_radio.isEnabled() and not pane.pin_btn.isEnabled()
    assert pane.turn_label.text() == "(pick a message in Messages)"
    assert "pick one of the thread's messages in the Messages pane" in pane.turn_radio.toolTip()
    assert pane.pin_btn.toolTip().startswith("Pin… needs a stored turn")
    pane.fragment_table.selectRow(1)
    assert not pane.pin_btn.isEnabled() and "pick a message in the Messages pane" in pane.pin_btn.toolTip()
    select(qtbot, pane, Selection("alice", "t-lisbon", "m3"))  # a stored turn: both on, the tips say what they do
    assert pane.turn_radio.isEnabled() and "(pick" not in pane.turn_label.text()
    pane.fragment_table.selectRow(0)
    assert pane.pin_btn.isEnabled() and pane.pin_btn.toolTip() == "Pin this fragment as a memory check"


def test_the_context_line_puts_whose_window_it_is_under_the_totals_rather_than_cut_it(qtbot, pane):
    """At the pane's width in a 1,440 px window the context line read "… · window of scripted/chef-demo (the model
    of this thread's last…", cut (found by s33-walk5): whose window it is goes on a line of its own, whole."""
    pane.resize(1010, 860)
    pane.show()
    preview = select(qtbot, pane, Selection("alice", "t-lisbon"))
    bar, usage = pane.bar, pane.bar.usage
    assert usage is not None and preview is not None
    qtbot.waitUntil(lambda: bar.width() > 900, timeout=5_000)
    lines = bar.head_lines(bar.width())
    assert lines == [f"Context window  {usage.summary}", usage.window_owner], lines
    metrics = bar.fontMetrics()
    assert all(metrics.horizontalAdvance(line) <= bar.width() for line in lines)
    assert bar.height() >= 2 * 18 + 2 * 10  # both header lines and the two strips
    pane.resize(2400, 860)  # where the whole fits: one line, as before
    qtbot.waitUntil(lambda: bar.width() > 2000, timeout=5_000)
    assert bar.head_lines(bar.width()) == [f"Context window  {usage.summary}  · {usage.window_owner}"]


def test_another_threads_prompt_is_shown_from_its_first_fragment(qtbot, no_leaked_widgets, tmp_path):
    """The fragment table kept where the previous thread's prompt was scrolled: having read the last fragment of one
    long prompt, picking another thread showed its table from fragment #1, the instructions above the view's top edge
    with nothing to say they were there (found 2026-12-07 by s37-walk14 at 1,440 x 900). Another thread's prompt now
    starts at its top, the first memory fragment selected as before."""
    store = open_store(tmp_path / "memory.db")
    mem = Memory(store, MemoryOptions(last_messages=20, working_memory={"enabled": True}), name="assistant")
    for thread in ("t-one", "t-two"):
        mem.create_thread(resource_id="alice", thread_id=thread, title=thread)
        mem.save_messages([(Message.user if i % 2 == 0 else Message.assistant)(
            f"{thread} message {i}", thread_id=thread, resource_id="alice", created_at=T0 + timedelta(minutes=i),
            id=f"{thread}-{i}") for i in range(20)])
    mem.register("helper", instructions="You help Alice.")  # fragment #0, above the first memory fragment
    session = StudioSession(store)
    try:
        pane = PromptInspectorPane(session)
        qtbot.addWidget(pane)
        pane.resize(1200, 800)
        pane.show()
        select(qtbot, pane, Selection("alice", "t-one"))
        table = pane.fragment_table
        last = pane.fragment_model.rowCount() - 1
        table.selectRow(last)  # reading the prompt's end: the view scrolls down to it
        qtbot.waitUntil(lambda: table.rowAt(0) > 0)
        select(qtbot, pane, Selection("alice", "t-two"))
        assert pane.fragment_model.rows()[0].source == "instructions"
        assert table.rowAt(0) == 0, table.rowAt(0)  # the first fragment is the first row in sight
        assert pane.selected_fragment() == pane.fragment_model.rows()[pane._first_interesting_row()]
    finally:
        session.close()
