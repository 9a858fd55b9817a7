"""Chat playground pane: streamed replies (scripted model and a real OpenAI-compatible HTTP server on
loopback), registered agents, new threads, prompt links, model errors that save nothing, read-only
databases, and the window following a turn (pytest-qt, offscreen, real libSQL files)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest
from PySide6.QtCore import Qt, QUrl

from core import Agent, Memory, MemoryOptions, Message, open_store
from core.agent_configs import named_agent
from core.llm import LoopbackServer, OpenAICompatibleModel, ScriptedModel
from core.observational import store as om_store
from core.observational.buffer_store import current_backoff
from core.observational.observer import OBSERVER_SYSTEM_PROMPT
from core.observational.records import lookup_key
from studio.preferences import SCRIPTED_NAME, ModelChoice
from studio.panes.chat import ChatPane
from studio.selection import Selection
from studio.session import StudioSession, open_for_studio

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
CHEF = "You plan meals for Ada. Never suggest peanuts."


def build(path):
    store = open_store(path)
    mem = Memory(store, MemoryOptions(last_messages=6, working_memory={"enabled": True}), name="chef-memory")
    Agent("chef", instructions=CHEF, model=ScriptedModel([]), memory=mem)  # registers, with its instructions
    mem.create_thread(thread_id="t-food", resource_id="ada", title="Dinner plans")
    mem.save_messages([
        Message.user("I am allergic to peanuts.", id="m0", thread_id="t-food", resource_id="ada", created_at=T0),
        Message.assistant("Noted: no peanuts.", id="m1", thread_id="t-food", resource_id="ada",
                          created_at=T0 + timedelta(minutes=1)),
    ])
    return store


def counts(store) -> tuple[int, int]:
    with store.db.read() as conn:
        return (int(conn.exec_driver_sql("SELECT count(*) FROM mastra_messages").scalar()),
                int(conn.exec_driver_sql("SELECT count(*) FROM mastra_threads").scalar()))


@dataclass(frozen=True)
class Endpoint:
    """A model picker entry for an OpenAI-compatible server (the shape Preferences' choices have)."""

    name: str
    base_url: str
    timeout: float = 10
    self_hosted: bool | None = None  # None: decided from the base URL (loopback: self-hosted)

    @property
    def label(self) -> str:
        return f"{self.name} — loopback-chat @ {self.base_url}"

    def build(self):
        return OpenAICompatibleModel("loopback-chat", base_url=self.base_url, api_key="test-key", timeout=self.timeout,
                                     self_hosted=self.self_hosted)


@pytest.fixture()
def session(qtbot, tmp_path):
    s = StudioSession(build(tmp_path / "memory.db"))
    yield s
    s.close()


@pytest.fixture()
def pane(no_leaked_widgets, qtbot, session):
    p = ChatPane(session)
    qtbot.addWidget(p)
    p.resize(1100, 760)
    p.show()
    qtbot.waitSignal(p.context_loaded, timeout=10_000)
    return p


def use_models(pane, *choices, pick: int = 0):
    pane.models_provider = lambda: list(choices)
    pane.refresh_models()
    pane.model_combo.setCurrentIndex(pick)


def select(qtbot, pane, selection):
    with qtbot.waitSignal(pane.context_loaded, timeout=10_000):
        pane.set_selection(selection)


def fail_a_turn(qtbot, pane, server, text):
    """Send ``text`` in Ada's "t-food" thread to ``server``, which refuses it (401, a wrong key): a failed turn
    as a user meets it. Returns when the pane says the turn failed."""
    server.fail_next(1, status=401, message="invalid api key")
    use_models(pane, Endpoint("Loopback", server.base_url))
    select(qtbot, pane, Selection("ada", "t-food"))
    with qtbot.waitSignal(pane.turn_failed, timeout=20_000):
        pane.input.setPlainText(text)
        pane.send_btn.click()


def send(qtbot, pane, text, timeout=20_000):
    pieces: list[tuple[str, str]] = []
    pane.delta_shown.connect(lambda piece: pieces.append((piece, pane.entries[-1].text)))
    with qtbot.waitSignal(pane.turn_finished, timeout=timeout) as blocker:
        pane.input.setPlainText(text)
        pane.send_btn.click()
    return blocker.args[0], pieces


def test_a_new_thread_with_the_offline_model_streams_and_saves(qtbot, pane, session):
    use_models(pane, ModelChoice(SCRIPTED_NAME))
    assert pane.new_radio.isChecked()
    pane.resource_edit.setText("zoe")
    changed: list[int] = []
    session.changed.connect(lambda: changed.append(1))
    started: list[Selection] = []
    pane.thread_started.connect(started.append)
    outcome, pieces = send(qtbot, pane, "Plan a picnic for Saturday")
    # Streaming: the reply arrived in several pieces, each shown as it came, growing the reply.
    assert len(pieces) >= 2 and outcome.deltas == len(pieces)
    assert "".join(p for p, _ in pieces) == outcome.text
    assert [shown for _, shown in pieces] == ["".join(p for p, _ in pieces[: i + 1]) for i in range(len(pieces))]
    assert "Offline scripted reply" in outcome.text and "Plan a picnic" in outcome.text
    # The size the reply names is the prompt's tokens the footer shows (the model's usage), tools included.
    assert f"about {outcome.prompt_tokens:,} tokens" in outcome.text
    # Saved in a new thread of resource zoe, named after the message; the session heard of the write.
    req = outcome.request
    assert req.new_thread and started == [Selection("zoe", req.thread_id)]
    thread = session.store.memory.get_thread(req.thread_id)
    assert thread.resource_id == "zoe" and thread.title == "Plan a picnic for Saturday"
    stored = session.store.memory.get_messages(outcome.saved_ids)
    assert [m.role for m in stored] == ["user", "assistant"] and stored[0].id == req.input_id
    assert stored[1].content["metadata"]["modelId"] == "scripted/offline"
    assert changed
    qtbot.waitUntil(lambda: "Plan a picnic" in pane.transcript_text() and "prompt" in pane.transcript_text())
    assert "Saved 2 messages" in pane.status.text()


def test_a_registered_agent_over_http_streams_on_the_selected_thread(qtbot, pane, session):
    with LoopbackServer(["Try a Thai green curry with tofu, ", "no peanuts."]) as server:
        use_models(pane, ModelChoice(SCRIPTED_NAME), Endpoint("Loopback", server.base_url), pick=1)
        select(qtbot, pane, Selection("ada", "t-food"))
        assert pane.thread_radio.isChecked()
        assert pane.agent_combo.currentData() == "chef"  # the agent that owns the thread
        assert pane.instructions_edit.toPlainText() == CHEF  # recorded at registration
        assert "last 6 messages" in pane.memory_label.text() and "working memory" in pane.memory_label.text()
        before = named_agent(session.store, "chef")
        outcome, pieces = send(qtbot, pane, "What should I cook tonight?")
        body = server.chat_requests()[-1]
    assert body["stream"] is True and len(pieces) >= 2
    assert outcome.text == "Try a Thai green curry with tofu, "
    sent = body["messages"]
    assert sent[0]["role"] == "system" and CHEF in sent[0]["content"]
    assert [m["content"] for m in sent if m["role"] in ("user", "assistant")][-3:] == [
        "I am allergic to peanuts.", "Noted: no peanuts.", "What should I cook tonight?"]
    stored = session.store.memory.get_messages(outcome.saved_ids)
    assert {m.thread_id for m in stored} == {"t-food"}
    assert stored[1].content["metadata"]["agent"] == "chef"
    assert stored[1].content["metadata"]["modelId"] == "openai-compatible/loopback-chat"
    # Borrowing the agent did not re-register it (its record is the agent process's, not the Studio's).
    assert named_agent(session.store, "chef") == before


def test_tab_in_the_instructions_and_the_message_moves_on_and_types_nothing(qtbot, pane):
    """Tab in the Instructions box or the message box typed a tab character into the text the model gets
    and kept the focus there (found 2026-12-06 walking the Tab order): it moves to the next control."""
    pane.activateWindow()
    qtbot.waitUntil(pane.isActiveWindow, timeout=5_000)
    for edit, text in ((pane.instructions_edit, "Be brief."), (pane.input, "hello")):
        edit.setPlainText(text)
        edit.setFocus()
        qtbot.waitUntil(edit.hasFocus, timeout=5_000)
        qtbot.keyClick(edit, Qt.Key.Key_Tab)
        assert edit.toPlainText() == text and not edit.hasFocus()


def test_each_turn_links_to_its_prompt(qtbot, pane):
    use_models(pane, ModelChoice(SCRIPTED_NAME))
    select(qtbot, pane, Selection("ada", "t-food"))
    assert "prompt:m0" in pane.transcript.toHtml()  # stored turns link too
    outcome, _ = send(qtbot, pane, "And for dessert?")
    with qtbot.waitSignal(pane.open_prompt, timeout=5_000) as blocker:
        pane._link(QUrl(f"prompt:{outcome.request.input_id}"))
    assert blocker.args[0] == Selection("ada", "t-food", outcome.request.input_id)


def test_a_model_error_names_the_endpoint_says_what_to_do_and_saves_nothing(qtbot, pane, session):
    with LoopbackServer(["never sent"]) as server:
        server.fail_next(1, status=401, message="invalid api key")
        url = server.base_url
        use_models(pane, Endpoint("Loopback", url))
        select(qtbot, pane, Selection("ada", "t-food"))
        before = counts(session.store)
        with qtbot.waitSignal(pane.turn_failed, timeout=20_000) as blocker:
            pane.input.setPlainText("Hello?")
            pane.send_btn.click()
    text = blocker.args[0]
    assert url in text and "401" in text
    assert "API key" in text and "Nothing of this turn was saved" in text
    assert not pane.banner.isHidden() and url in pane.banner.text()
    assert counts(session.store) == before
    assert pane.input.toPlainText() == "Hello?"  # kept for another try
    assert "not saved" in pane.transcript_text()
    assert pane.send_btn.isEnabled() and not pane.busy


def test_an_unreachable_server_in_a_new_thread_leaves_no_thread(qtbot, pane, session):
    with LoopbackServer() as server:
        dead = server.base_url
    use_models(pane, Endpoint("Gone", dead))
    before = counts(session.store)
    with qtbot.waitSignal(pane.turn_failed, timeout=60_000) as blocker:
        pane.input.setPlainText("Anyone there?")
        pane.send_btn.click()
    assert dead in blocker.args[0] and "running" in blocker.args[0]
    assert counts(session.store) == before


def send_held(qtbot, pane, server, endpoint):
    """Send "Tell me everything" in Ada's "t-food" thread to ``endpoint``, whose ``server`` holds the call (the model
    has written nothing yet); returns the message and thread counts from before, once the call reached the server."""
    use_models(pane, endpoint)
    select(qtbot, pane, Selection("ada", "t-food"))
    before = counts(pane.session.store)
    server.stall_next()
    pane.input.setPlainText("Tell me everything")
    pane.send_btn.click()
    qtbot.waitUntil(lambda: len(server.chat_requests()) == 1, timeout=10_000)
    return before


def test_stop_drops_the_turn(qtbot, pane, session):
    with LoopbackServer(["a long answer that is stopped"]) as server:
        before = send_held(qtbot, pane, server, Endpoint("Loopback", server.base_url))
        assert pane.stop_btn.isEnabled() and not pane.send_btn.isEnabled()
        with qtbot.waitSignal(pane.turn_failed, timeout=20_000) as blocker:
            pane.stop()
            server.release()
    assert "stopped" in blocker.args[0]
    assert counts(session.store) == before


@pytest.mark.parametrize("self_hosted", [None, False], ids=["self-hosted", "hosted"])
def test_stop_while_the_model_thinks_cuts_its_call_at_once_and_frees_the_one_slot_server(qtbot, pane, session,
                                                                                         self_hosted):
    """The model has sent nothing yet (held by the one-slot server: still reading the prompt, or thinking). Stop
    closes the call's connection at once, for a hosted API too (``self_hosted=False``), so the server stops: the
    turn ends without the server being released, nothing is stored, the pane says it was stopped, and the next
    turn gets the server's slot. (The model's timeout is 10 minutes: a Stop that waited for the model's first
    words, or for the timeout, would not end the turn within the minute waited here.)"""
    with LoopbackServer(["the next answer"], slots=1) as server:
        before = send_held(qtbot, pane, server,
                           Endpoint("Loopback", server.base_url, timeout=600, self_hosted=self_hosted))
        with qtbot.waitSignal(pane.turn_failed, timeout=60_000) as blocker:
            pane.stop()
            assert "Stopping" in pane.status.text() and not pane.stop_btn.isEnabled()
        qtbot.waitUntil(lambda: len(server.abandoned) == 1, timeout=60_000)  # the server saw the call hang up
        said = blocker.args[0]
        assert said.startswith("You stopped the reply.") and "Nothing of this turn was saved" in said
        assert counts(session.store) == before
        assert "stopped: you pressed Stop" in pane.transcript_text()
        assert pane.status.text() == "Stopped; nothing of this turn was saved."
        assert pane.banner.level == "info" and not pane.banner.isHidden()  # a stop is not shown as a failure
        assert pane.input.toPlainText() == "Tell me everything"  # kept to send again
        assert pane.send_btn.isEnabled() and not pane.stop_btn.isEnabled() and not pane.busy
        outcome, _ = send(qtbot, pane, "Just the gist", timeout=60_000)  # the held call never got its answer
    assert outcome.text == "the next answer" and pane.banner.isHidden()
    assert counts(session.store)[0] == before[0] + 2
    assert [r.body["messages"][-1]["content"] for r in server.abandoned] == ["Tell me everything"]


def om_thread(store):
    """Agent "scribe" with observational memory observing in the turn (no buffering, a low threshold), and Ada's
    thread "t-notes" holding more unobserved tokens than that: its next turn calls the observer first."""
    mem = Memory(store, MemoryOptions(last_messages=6, observational_memory={
        "enabled": True, "message_tokens": 30, "buffer_tokens": False}), name="scribe-memory")
    Agent("scribe", instructions="You keep Ada's notes.", model=ScriptedModel([]), memory=mem)
    mem.create_thread(thread_id="t-notes", resource_id="ada", title="Notes")
    mem.save_messages([
        Message.user(f"Note {i}: the garden needs watering on day {i} of the trip, twice.", id=f"n{i}",
                     thread_id="t-notes", resource_id="ada", created_at=T0 + timedelta(minutes=i))
        for i in range(4)])
    return lookup_key("thread", thread_id="t-notes", resource_id="ada")


def test_stop_while_the_observer_runs_in_the_turn_cuts_it_and_writes_nothing(qtbot, pane, session):
    """Observational memory observes in the turn (synchronously) before the model is asked. Stop pressed while
    the observer's call is held by a one-slot server cuts that call at once (the server sees it hang up), and
    the turn ends: no message, no observation, no back-off of the observer written (a Stop is not the model's
    failure), and the pane says it was stopped while the observer ran."""
    key = om_thread(session.store)
    with LoopbackServer(["the next answer"], slots=1) as server:
        use_models(pane, Endpoint("Loopback", server.base_url, timeout=600))
        select(qtbot, pane, Selection("ada", "t-notes"))
        pane.agent_combo.setCurrentIndex(pane.agent_combo.findData("scribe"))
        before = counts(session.store)
        server.stall_next()
        pane.input.setPlainText("What is left to do?")
        pane.send_btn.click()
        qtbot.waitUntil(lambda: len(server.chat_requests()) == 1, timeout=10_000)
        held = server.chat_requests()[0]
        assert held["messages"][0]["content"] == OBSERVER_SYSTEM_PROMPT  # the observer's call, not the turn's
        with qtbot.waitSignal(pane.turn_failed, timeout=60_000) as blocker:
            pane.stop()
        qtbot.waitUntil(lambda: len(server.abandoned) == 1, timeout=60_000)
        said = blocker.args[0]
        assert said.startswith("You stopped the turn while observational memory's observer was running.")
        assert "Nothing of this turn was saved" in said and "no observation" in said
        assert counts(session.store) == before
        record = om_store.current_record(session.store, key)
        assert record is None or (not record.active_observations and current_backoff(record, "observer") is None)
        assert "stopped: you pressed Stop" in pane.transcript_text()
        assert pane.banner.level == "info" and pane.send_btn.isEnabled() and not pane.busy
        assert len(server.chat_requests()) == 1  # the turn's own model was never asked


def test_while_the_observer_runs_before_the_reply_the_pane_says_so_not_that_it_waits_for_the_model(
        qtbot, pane, session):
    """Observational memory observes 4 unobserved messages and the message sent (synchronous observation takes the
    input of the turn that crosses the threshold, as Mastra does) in the turn before the model is asked: while the
    observer's call is held, the transcript and the status line say that (before: "waiting for the model…",
    as if the model were slow); once the model is asked they say so, and the turn ends as any other."""
    def answer(messages, _tools):
        if messages[0]["content"] == OBSERVER_SYSTEM_PROMPT:
            return "<observations>\nDate: Mar 1, 2026\n* 🔴 (09:00) Ada's garden needs watering.\n</observations>"
        return "Water it twice a day."

    om_thread(session.store)
    with LoopbackServer(ScriptedModel(answer, name="server"), slots=1) as server:
        use_models(pane, Endpoint("Loopback", server.base_url, timeout=600))
        select(qtbot, pane, Selection("ada", "t-notes"))
        pane.agent_combo.setCurrentIndex(pane.agent_combo.findData("scribe"))
        try:
            server.stall_next()
            pane.input.setPlainText("What is left to do?")
            pane.send_btn.click()
            qtbot.waitUntil(lambda: len(server.chat_requests()) == 1, timeout=10_000)
            assert server.chat_requests()[0]["messages"][0]["content"] == OBSERVER_SYSTEM_PROMPT
            qtbot.waitUntil(lambda: "observing" in pane.transcript_text(), timeout=10_000)
            shown = pane.transcript_text()
            assert "observational memory is observing 5 unobserved messages" in shown, shown
            assert "waiting for the model" not in shown
            assert pane.status.text().startswith("Observational memory is observing 5 unobserved messages")
            with qtbot.waitSignal(pane.turn_finished, timeout=60_000) as blocker:
                server.release()
        finally:
            server.release()
    assert blocker.args[0].text == "Water it twice a day."
    assert "observing" not in pane.transcript_text() and "Water it twice a day." in pane.transcript_text()


def test_while_the_turn_waits_for_the_background_observer_the_pane_says_so_and_stop_ends_the_wait_at_once(qtbot, pane, session):
    """Past ``block_after`` a turn waits (up to 120 s) for observational memory's background observer, held here by
    the one-slot server. The transcript and status line say the turn waits for that observer (it said "waiting for
    the model"). Stop ends that wait at once (before: the turn ended only when the wait did): nothing of the
    turn is saved, the pane says the turn waited for the background observer and that it goes on, and the
    observer's call is not cut; once the server answers, the next turn takes its observation."""
    from types import SimpleNamespace

    from core.llm.yielding import TRAFFIC
    from core.tokens import EstimatingTokenizer

    def answer(messages, _tools):
        if messages[0]["content"] == OBSERVER_SYSTEM_PROMPT:
            return "<observations>\nDate: Mar 3, 2025\n* 🔴 (09:00) Ada plans the garden.\n</observations>"
        return "Noted."

    def is_observer(body):
        return isinstance(body, dict) and body["messages"][0]["content"] == OBSERVER_SYSTEM_PROMPT

    mem = Memory(session.store, MemoryOptions(observational_memory={
        "message_tokens": 200, "block_after": 1.0, "observation_tokens": 5000, "timeout": 120}),
        tokenizer=EstimatingTokenizer(), name="planner-memory")
    Agent("planner", instructions="You plan Ada's garden.", model=ScriptedModel([]), memory=mem)
    mem.create_thread(thread_id="t-garden", resource_id="ada", title="Garden")
    long = "word " * 120  # about 120 tokens: two turns pass block_after (200 tokens)
    with LoopbackServer(ScriptedModel(answer, name="server"), slots=1) as server:
        use_models(pane, Endpoint("Loopback", server.base_url, timeout=600))
        select(qtbot, pane, Selection("ada", "t-garden"))
        pane.agent_combo.setCurrentIndex(pane.agent_combo.findData("planner"))
        try:
            server.stall_next(100, matching=is_observer)
            send(qtbot, pane, f"First: {long}", timeout=60_000)  # the observer starts in the background
            qtbot.waitUntil(lambda: any(is_observer(b) for b in server.chat_requests()), timeout=30_000)
            before = counts(session.store)
            pane.input.setPlainText(f"Second: {long}")
            pane.send_btn.click()
            qtbot.waitUntil(lambda: TRAFFIC.awaited(SimpleNamespace(base_url=server.base_url)), timeout=30_000)
            # While it waits, the pane says for what (before: "waiting for the model", as if the model were slow).
            qtbot.waitUntil(lambda: "background observer" in pane.transcript_text(), timeout=10_000)
            shown = pane.transcript_text()
            assert ("waiting for observational memory's background observer to finish (past its block_after the "
                    "reply waits for it, at most 180 s)") in shown, shown
            assert "waiting for the model" not in shown
            assert pane.status.text().startswith("Waiting for observational memory's background observer")
            with qtbot.waitSignal(pane.turn_failed, timeout=60_000) as blocker:
                pane.stop()
            said = blocker.args[0]
            assert said.startswith("You stopped the turn while it waited for observational memory's background "
                                   "observer."), said
            assert "Nothing of this turn was saved" in said and "goes on" in said and "next turn" in said
            assert counts(session.store) == before
            assert "stopped: you pressed Stop" in pane.transcript_text()
            assert pane.banner.level == "info" and pane.send_btn.isEnabled() and not pane.busy
            assert not server.abandoned  # the background observer's call is not the turn's: not cut
            assert len([b for b in server.chat_requests() if not is_observer(b)]) == 1  # the turn's model not asked
            server.release()
            assert mem.wait_idle(60)
            outcome, _ = send(qtbot, pane, f"Third: {long}", timeout=60_000)
            assert outcome.text == "Noted."
            record = om_store.current_record(session.store, lookup_key("thread", thread_id="t-garden",
                                                                        resource_id="ada"))
            assert record is not None and "Ada plans the garden." in record.active_observations
        finally:
            server.release()


def test_a_read_only_database_says_so_and_offers_allow_writes(qtbot, no_leaked_widgets, tmp_path):
    from tests.studio.conftest import make_mastra_db

    path = tmp_path / "mastra.db"
    make_mastra_db(path)
    s = StudioSession(open_for_studio(path))
    try:
        assert s.read_only
        p = ChatPane(s)
        qtbot.addWidget(p)
        p.set_selection(Selection("user-42", "mastra-thread"))
        assert not p.banner.isHidden()
        assert "read-only" in p.banner.text() and "File > Allow Writes" in p.banner.text()
        assert not p.send_btn.isEnabled()
        assert "Allow Writes" in p.request("hello")
    finally:
        s.close()


def test_the_window_follows_a_turn_and_opens_its_prompt(qtbot, make_window, tmp_path):
    build(tmp_path / "memory.db").close()
    window = make_window()
    window.open_database(str(tmp_path / "memory.db"))
    qtbot.waitUntil(lambda: window.resources is not None and len(window.resources.thread_rows()) == 1,
                    timeout=15_000)
    window.resources.set_selection(Selection("ada", "t-food"))
    qtbot.waitUntil(lambda: window.messages_pane.model.rowCount() == 2, timeout=15_000)
    window.show_tab("chat")
    chat = window.panes["chat"]
    qtbot.waitUntil(lambda: chat.context is not None and chat.thread_radio.isChecked(), timeout=10_000)
    use_models(chat, ModelChoice(SCRIPTED_NAME))
    with qtbot.waitSignal(window.panes["working_memory"].loaded, timeout=20_000):  # it re-reads after the turn
        outcome, _ = send(qtbot, chat, "Something quick for lunch?")
    qtbot.waitUntil(lambda: window.messages_pane.model.rowCount() == 4, timeout=15_000)
    chat._link(QUrl(f"prompt:{outcome.request.input_id}"))
    prompt = window.panes["prompt"]
    assert window.current_pane() is prompt
    assert prompt.selection == Selection("ada", "t-food", outcome.request.input_id)
    assert prompt.turn_radio.isChecked()
    # a new thread started from the chat is selected in the tree
    window.show_tab("chat")
    chat.new_radio.setChecked(True)
    chat.resource_edit.setText("ada")
    outcome, _ = send(qtbot, chat, "A new topic: my garden")
    qtbot.waitUntil(lambda: window.selection.thread_id == outcome.request.thread_id, timeout=15_000)
    qtbot.waitUntil(lambda: window.resources.current_selection().thread_id == outcome.request.thread_id,
                    timeout=15_000)
    assert json.dumps(window.selection.resource_id) == '"ada"'


def test_a_thread_that_cannot_be_read_is_not_shown_as_empty(qtbot, no_leaked_widgets, tmp_path):
    """On a damaged file, the playground says the thread could not be read (with the engine's advice),
    not "No messages yet" over a thread that holds messages."""
    import sqlite3

    path = tmp_path / "memory.db"
    build(path).close()
    con = sqlite3.connect(path)
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'idx_messages_thread_created_at'").fetchone()[0]
    con.close()
    with open(path, "r+b") as fh:  # the index a thread's messages are read through; the file still opens
        fh.seek((root - 1) * page_size)
        fh.write(b"\xff" * page_size)
    s = StudioSession(open_for_studio(path))
    try:
        p = ChatPane(s)
        qtbot.addWidget(p)
        p.show()
        p.set_selection(Selection("ada", "t-food"))
        qtbot.waitUntil(lambda: p.banner.isVisible() and p.banner.level == "error", timeout=10_000)
        assert p.banner.text().startswith("This thread's messages could not be read: ")
        assert "is damaged" in p.banner.text()
        assert "No messages yet" not in p.transcript_text()
        assert "could not be read" in p.transcript_text()
    finally:
        s.close()


def test_opening_another_database_closes_the_first_off_the_ui_thread_and_keeps_its_traces(qtbot, make_window, tmp_path):
    """Closing a session waits for its jobs and writes the traces its turns queued (a trace file another
    process may hold locked, a buffered observation in a model call): the window does that on its pool,
    so opening the next database never freezes it (the suite's UI-thread watch fails the test
    otherwise), and nothing queued is lost."""
    first, second = tmp_path / "first" / "memory.db", tmp_path / "second" / "memory.db"
    first.parent.mkdir()
    second.parent.mkdir()
    build(first).close()
    build(second).close()
    window = make_window()
    window.open_database(str(first))
    qtbot.waitUntil(lambda: window.resources is not None and len(window.resources.thread_rows()) == 1,
                    timeout=15_000)
    window.resources.set_selection(Selection("ada", "t-food"))
    window.show_tab("chat")
    chat = window.panes["chat"]
    qtbot.waitUntil(lambda: chat.context is not None and chat.thread_radio.isChecked(), timeout=10_000)
    use_models(chat, ModelChoice(SCRIPTED_NAME))
    outcome, _ = send(qtbot, chat, "Something quick for lunch?")
    old = window.session
    closed_on: list[threading.Thread] = []
    plain_close = old.store.close

    def close() -> None:
        closed_on.append(threading.current_thread())
        plain_close()

    old.store.close = close
    window.open_database(str(second))
    qtbot.waitUntil(lambda: window.session is not None and window.session is not old
                    and window.session.display_path == str(second), timeout=15_000)
    qtbot.waitUntil(lambda: bool(closed_on) and window.pool.running == 0, timeout=15_000)
    assert closed_on[0] is not threading.main_thread()
    store = open_store(first)
    try:
        traces = list(store.observability.list_traces(limit=50))
    finally:
        store.close()
    assert any(t.thread_id == "t-food" for t in traces), "the turn's trace was lost when its database closed"
    assert outcome.request.thread_id == "t-food"


# -- the agent's model settings, its tools, and the reply cap ---------------------------------------------

def _chef_ran_a_turn(store) -> None:
    """Agent 'chef' (from its own process) answers on t-food with its sampling settings and a tool of its own."""
    from core.agent import Tool

    weather = Tool("getWeather", "Current weather for a city.", lambda city: {"city": city, "sky": "rain"},
                   {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    mem = Memory(store, MemoryOptions(last_messages=6, working_memory={"enabled": True}), name="chef-memory")
    chef = Agent("chef", instructions=CHEF, model=ScriptedModel(["Soup, then."]), memory=mem, tools=[weather],
                 model_settings={"temperature": 0.3, "top_p": 0.8, "max_tokens": 300})
    chef.generate("Something warm tonight?", memory={"resource": "ada", "thread": "t-food"})


def test_the_borrowed_agent_runs_with_its_recorded_model_settings_and_says_its_tools_are_not_offered(
        qtbot, pane, session, tmp_path):
    """The playground borrowed a registered agent's memory options and instructions only: its turns went out
    with the server's default sampling, no reply cap, and nothing said that the agent's tools were missing."""
    _chef_ran_a_turn(session.store)
    with LoopbackServer(["Lentil soup."]) as server:
        use_models(pane, Endpoint("Loopback", server.base_url))
        select(qtbot, pane, Selection("ada", "t-food"))
        assert pane.agent_combo.currentData() == "chef"
        pane.grab().save(str(tmp_path / "chat-agent-settings.png"))
        assert pane.cap_spin.value() == 300  # the agent's own cap
        assert "temperature 0.3" in pane.settings_label.text() and "top_p 0.8" in pane.settings_label.text()
        tools = pane.tools_label.text()
        assert "getWeather" in tools and "not offered" in tools and "cannot run" in tools
        pane.cap_spin.setValue(120)
        with qtbot.waitSignal(pane.context_loaded, timeout=10_000):  # read again after the turn
            send(qtbot, pane, "And tomorrow?")
        body = server.chat_requests()[-1]
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.3, 0.8, 120)
    offered = [t["function"]["name"] for t in body.get("tools", [])]
    assert "getWeather" not in offered and "updateWorkingMemory" in offered  # memory's own tool is offered
    # The playground's own turn (sent as chef, with the user's cap) never stands for chef's settings or tools.
    assert pane.run() is not None and pane.run().max_tokens == 300 and pane.run().tools == ("getWeather",)
    assert "getWeather" in pane.tools_label.text()


def test_an_agent_with_no_recorded_turn_here_runs_with_the_settings_and_names_the_tools_it_registered(
        qtbot, pane, session, tmp_path):
    """A registration held no model settings and no tools: on a thread the agent had not answered (or a new
    one) the playground sent the model's defaults and could not name the agent's tools. The agent records both
    when it registers now, and the playground uses them when no recorded turn of it is on the thread."""
    from core.agent import Tool

    weather = Tool("getWeather", "Current weather for a city.", lambda city: {"city": city, "sky": "rain"},
                   {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    mem = Memory(session.store, MemoryOptions(last_messages=6, working_memory={"enabled": True}), name="chef-memory")
    Agent("chef", instructions=CHEF, model=ScriptedModel([]), memory=mem, tools=[weather],
          model_settings={"temperature": 0.3, "top_p": 0.8, "max_tokens": 300})  # registers; answers nothing
    with LoopbackServer(["Lentil soup."]) as server:
        use_models(pane, Endpoint("Loopback", server.base_url))
        select(qtbot, pane, Selection("ada", "t-food"))  # chef never answered here
        assert pane.agent_combo.currentData() == "chef"
        pane.grab().save(str(tmp_path / "chat-registered-settings.png"))
        assert pane.cap_spin.value() == 300  # the agent's own cap, as registered
        settings = pane.settings_label.text()
        assert "temperature 0.3" in settings and "top_p 0.8" in settings and "registered" in settings
        tools = pane.tools_label.text()
        assert "getWeather" in tools and "as it registered them" in tools and "not offered" in tools
        send(qtbot, pane, "Something warm?")
        body = server.chat_requests()[-1]
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.3, 0.8, 300)
    assert "getWeather" not in [t["function"]["name"] for t in body.get("tools", [])]


def test_an_agent_registered_without_settings_or_by_an_older_engine_gets_the_models_defaults(qtbot, pane, session):
    """The build's chef registered with no settings of its own: the model's defaults, said as before; a row of
    an older engine (no settings, no tools recorded) reads the same way."""
    from core.agent_configs import register_agent

    select(qtbot, pane, Selection("ada", "t-food"))
    assert pane.agent_combo.currentData() == "chef" and pane._settings()["model_settings"] == {}
    assert "model's defaults" in pane.settings_label.text() and pane.cap_spin.value() == 1024
    older = {k: v for k, v in named_agent(session.store, "chef").config.items() if k not in ("modelSettings", "tools")}
    register_agent(session.store, "chef", older)
    with qtbot.waitSignal(pane.context_loaded, timeout=10_000):
        pane._on_db_changed()  # the database changed: read again
    assert pane.run() is None and "did not register its settings" in pane.settings_label.text()


def test_every_reply_is_capped_and_the_user_sets_the_cap(qtbot, pane, session, tmp_path):
    """No recorded settings (a new thread, the default agent): the reply is still capped, at a visible
    default the user may change; a reply cut at the cap says so."""
    from core.llm.scripted import ScriptedReply

    with LoopbackServer(["Short answer.", ScriptedReply("Cut off here", finish_reason="length")]) as server:
        use_models(pane, Endpoint("Loopback", server.base_url))
        qtbot.waitUntil(lambda: pane.context is not None, timeout=10_000)
        pane.agent_combo.setCurrentIndex(pane.agent_combo.count() - 1)  # the default agent
        assert pane.agent() is None
        assert pane.cap_spin.isVisible() and pane.cap_spin.value() == 1024
        assert "model's defaults" in pane.settings_label.text()
        send(qtbot, pane, "Hello")
        assert server.chat_requests()[-1]["max_tokens"] == 1024
        pane.cap_spin.setValue(64)
        outcome, _ = send(qtbot, pane, "Tell me a long story")
        assert server.chat_requests()[-1]["max_tokens"] == 64
    assert outcome.finish_reason == "length"
    assert "stopped at the cap of 64 tokens" in pane.status.text() and "Reply cap" in pane.status.text()
    assert "stopped at the cap of 64 tokens" in pane.transcript_text()  # beside the reply it cut
    pane.grab().save(str(tmp_path / "chat-capped.png"))


def test_another_threads_recorded_settings_never_apply_here(qtbot, pane, session):
    """The model settings come from the agent's recorded turn on the selected thread only: picking a thread
    whose read fails (or before its read arrives) must not keep the previous thread's."""
    from tests.studio.conftest import another_program

    _chef_ran_a_turn(session.store)
    select(qtbot, pane, Selection("ada", "t-food"))
    assert pane.run() is not None
    another_program(session.store.location.path, "ALTER TABLE mastra_messages RENAME TO mastra_messages_old")
    pane.set_selection(Selection("ada", "t-other"))
    qtbot.waitUntil(lambda: pane.banner.isVisible() and pane.banner.level == "error", timeout=10_000)
    # What chef registered may apply (it holds on every thread); the previous thread's recorded turn never does.
    run = pane.run()
    assert (run is None or (run.registered and run.input_id == "")) and "on this thread" not in pane.settings_label.text()
    assert pane._settings()["model_settings"] == (run.sampling() if run is not None else {})


def test_a_delegations_thread_says_why_chat_runs_no_turn_there(qtbot, pane, session):
    # The thread tree shows "ada → helper (delegation)": a sub-agent's memory of Ada's turns, where the engine
    # runs no turn an application starts. The pane says so, in the Studio's words, before anything is sent.
    from core.scopes import delegation_resource

    helper = delegation_resource("ada", "helper")
    Memory(session.store).create_thread(thread_id="helper-1", resource_id=helper, title="")
    select(qtbot, pane, Selection(helper, "helper-1"))
    pane.thread_radio.setChecked(True)
    said = pane.request("hello")
    assert isinstance(said, str) and "ada" in said and "helper" in said and "delegation" in said
    assert "Agent.generate" not in said and "ada's own threads" in said
    pane.new_radio.setChecked(True)
    pane.resource_edit.setText(helper)
    said = pane.request("hello")
    assert isinstance(said, str) and "ada's own threads" in said


@pytest.mark.parametrize("first", ["light", "dark"])
def test_the_transcripts_colours_read_on_either_theme_and_follow_a_switch(qtbot, pane, session, qapp, first):
    """The transcript's HTML carries one red for both themes: "· not saved" under a turn that failed read
    3.4:1 on the light theme's white (found by a Studio walk). It is shaded for the theme shown, at 4.5:1,
    and follows a switch of theme. The turn fails as a user's does (the endpoint refuses the key), and the
    pane's reads are over before the colours are read: nothing of the pane's own replaces the transcript."""
    import re

    from PySide6.QtGui import QColor, QPalette

    from studio.theme import AA_BODY_TEXT, apply_theme, contrast

    from .conftest import theme_restored

    def not_saved_colour() -> QColor:
        found = re.search(r"color:(#[0-9a-fA-F]{6});?[^>]*>· not saved", pane.transcript.toHtml())
        assert found is not None, pane.transcript.toHtml()
        return QColor(found.group(1))

    def base() -> QColor:
        return pane.transcript.palette().color(QPalette.ColorRole.Base)

    with theme_restored(qapp):
        apply_theme(qapp, first)
        with LoopbackServer(["never sent"]) as server:
            fail_a_turn(qtbot, pane, server, "Hello?")
        assert session.pool.wait(20_000)  # (the pane's reads, if any, are over)
        qtbot.waitUntil(lambda: not pane.busy and "not saved" in pane.transcript_text(), timeout=10_000)
        assert contrast(not_saved_colour(), base()) >= AA_BODY_TEXT, first
        shown = not_saved_colour()
        other = "dark" if first == "light" else "light"
        apply_theme(qapp, other)
        qapp.processEvents()
        assert not_saved_colour() != shown  # re-shaded for the theme switched to, without a render asked
        assert contrast(not_saved_colour(), base()) >= AA_BODY_TEXT, other
        apply_theme(qapp, first)
        qapp.processEvents()
        assert not_saved_colour() == shown and "Hello?" in pane.transcript_text()


def test_a_failed_turn_stays_in_the_transcript_when_the_thread_is_read_again(qtbot, pane, session):
    """A failed turn's entries were the pane's own, never stored: the thread's next read (another pane's
    write, a reload) replaced the transcript with the stored messages and the "· not saved" turn vanished,
    while the banner still spoke of it. It stays after the stored messages until the next turn is sent."""
    with LoopbackServer(["Rice and fish."]) as server:
        fail_a_turn(qtbot, pane, server, "Hello?")
        assert session.pool.wait(20_000)
        with qtbot.waitSignal(pane.context_loaded, timeout=20_000):
            pane._on_db_changed()  # what another pane's write or File > Reload does
        text = pane.transcript_text()
        assert "not saved" in text and text.index("Noted: no peanuts.") < text.index("Hello?"), text
        assert pane.input.toPlainText() == "Hello?"
        send(qtbot, pane, "And now?")  # the next turn: the failed one is not shown again after it
        with qtbot.waitSignal(pane.context_loaded, timeout=20_000):
            pane._on_db_changed()
        text = pane.transcript_text()
        assert "not saved" not in text and "Hello?" not in text and "Rice and fish." in text, text


def test_an_observer_failure_is_said_under_the_memory_line_until_an_observation_succeeds(qtbot, pane, session):
    """A turn succeeds while observational memory's observer fails (the messages stay raw): the reply alone said
    nothing of it. The pane says it under the memory line, in plain words, with what it means and what to do, on
    every turn until an observation succeeds (each turn notes the failure until then), and only on its thread."""
    from core.observational.buffer_store import current_backoff
    from core.timeutil import FixedClock

    unusable = "I would rather not take notes today."

    def answer(messages, _tools):
        return unusable if messages[0]["content"] == OBSERVER_SYSTEM_PROMPT else "Water it twice a day."

    key = om_thread(session.store)
    with LoopbackServer(ScriptedModel(answer, name="server")) as server:
        use_models(pane, Endpoint("Loopback", server.base_url))
        select(qtbot, pane, Selection("ada", "t-notes"))
        pane.agent_combo.setCurrentIndex(pane.agent_combo.findData("scribe"))
        assert pane.memory_problem_label.isHidden()
        outcome, _ = send(qtbot, pane, "What is left to do?")
        assert outcome.text == "Water it twice a day."
        said = pane.memory_problem_label.text()
        assert pane.memory_problem_label.isVisible() and said == outcome.memory_problem
        assert said.startswith("Observational memory could not observe this conversation: observer reply unusable")
        assert "Nothing is lost: the messages not observed are still sent to the model as they are" in said
        assert "In the chat the chosen model observes too: if this keeps happening, check that it is running" in said
        assert "T" not in said.split("tried again after ")[1][:12]  # the retry's time in the Studio's format, not ISO
        record = om_store.current_record(session.store, key)
        backoff = current_backoff(record, "observer")
        assert backoff is not None  # what the line says is what is stored
        # The next turn, inside the back-off, observes nothing and says so again.
        outcome, _ = send(qtbot, pane, "And tomorrow?")
        said = pane.memory_problem_label.text()
        assert pane.memory_problem_label.isVisible() and "backing off until" in said and "observer reply unusable" in said
        # Another thread: not its problem.
        select(qtbot, pane, Selection("ada", "t-food"))
        assert pane.memory_problem_label.isHidden()
        select(qtbot, pane, Selection("ada", "t-notes"))
        assert pane.memory_problem_label.isVisible()
        # Once an observation succeeds (here another process's, an hour later), the next turn notes nothing.
        later = FixedClock(datetime.now(timezone.utc) + timedelta(hours=1))
        good = ScriptedModel(["<observations>\nDate: Mar 1, 2026\n* 🔴 (09:00) Ada's garden needs watering.\n"
                              "</observations>"], name="observer")
        other = Memory(session.store, MemoryOptions(last_messages=6, observational_memory={
            "enabled": True, "message_tokens": 30, "buffer_tokens": False}), observer_model=good, clock=later)
        ctx = other.new_context(other.request_context(thread_id="t-notes", resource_id="ada"))
        ctx.live = True
        other.prepare_input(ctx, input="(observing)", instructions="")
        other.run_input(ctx)
        assert current_backoff(om_store.current_record(session.store, key), "observer") is None
        outcome, _ = send(qtbot, pane, "Anything else?")
        assert outcome.memory_problem == "" and pane.memory_problem_label.isHidden()


def test_a_turn_stopped_after_observational_memory_stored_its_message_says_so_and_a_resend_stores_it_once(
        qtbot, pane, session):
    """Synchronous observational memory stores the message it observes before the model is asked (as Mastra does).
    Stop pressed while the model's call is held then ends a turn whose message is stored, with its observation:
    the pane said "Stopped; nothing of this turn was saved.", marked the message "not saved" and did not read the
    thread again (found by s37-trust8). It says the message was kept, shows it stored, and the message sent again
    (kept in the input box) is stored once, observed once, and answered."""
    def answer(messages, _tools):
        if messages[0]["content"] == OBSERVER_SYSTEM_PROMPT:
            return "<observations>\nDate: Mar 1, 2026\n* 🔴 (09:00) Ada's garden needs watering.\n</observations>"
        return "Water it twice a day."

    key = om_thread(session.store)
    with LoopbackServer(ScriptedModel(answer, name="server"), slots=1) as server:
        use_models(pane, Endpoint("Loopback", server.base_url, timeout=600))
        select(qtbot, pane, Selection("ada", "t-notes"))
        pane.agent_combo.setCurrentIndex(pane.agent_combo.findData("scribe"))
        before = counts(session.store)
        server.stall_next(matching=lambda body: body["messages"][0]["content"] != OBSERVER_SYSTEM_PROMPT)
        pane.input.setPlainText("What is left to do?")
        pane.send_btn.click()
        qtbot.waitUntil(lambda: len(server.chat_requests()) == 2, timeout=20_000)  # the observer's, the model's
        with qtbot.waitSignal(pane.turn_failed, timeout=60_000) as blocker:
            pane.stop()
            stopping = pane.status.text()
        # (The message was stored before Stop was pressed: the transient no longer says "nothing of it".)
        assert stopping == "Stopping the turn: nothing of its reply will be saved…"
        said = blocker.args[0]
        assert said.startswith("You stopped the reply.") and "Nothing of this turn was saved" not in said
        assert "Your message was stored" in said and "not stored or observed twice" in said
        assert counts(session.store) == (before[0] + 1, before[1])
        assert pane.status.text() == "Stopped; your message was stored, with its observation (no reply)."
        qtbot.waitUntil(lambda: "What is left to do?" in pane.transcript_text()
                        and "not saved" not in pane.transcript_text().split("What is left to do?")[0][-40:],
                        timeout=10_000)
        assert "stopped: you pressed Stop" in pane.transcript_text()
        assert pane.input.toPlainText() == "What is left to do?"
        record = om_store.current_record(session.store, key)
        assert record is not None and "garden" in record.active_observations
        observed = list(record.observed_message_ids)
        outcome, _ = send(qtbot, pane, "What is left to do?", timeout=60_000)
    assert outcome.text == "Water it twice a day."
    assert counts(session.store) == (before[0] + 2, before[1])  # the message once, the reply
    observers = [r for r in server.chat_requests() if r["messages"][0]["content"] == OBSERVER_SYSTEM_PROMPT]
    assert len(observers) == 1
    assert om_store.current_record(session.store, key).observed_message_ids == observed
