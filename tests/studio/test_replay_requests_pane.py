"""The whole request in the Studio (issue 16): Replay and the prompt inspector show each model call's
model, endpoint, settings, tool definitions (with their token counts) and the usage the server reported
beside our o200k estimate; Replay steps through a turn's model calls; a re-run sends the recorded
request unless the user changes it and says what differs; what-if compares like with like; and the
defects a user hit stay fixed (a re-run summary that outlived its turn, "identical" on reconstructed
turns, the fork dialog's overlapping radios).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QLabel

from core import Agent, Memory, MemoryOptions, Tool, open_store
from core.llm import LoopbackServer, ScriptedModel, ScriptedReply, tool_call
from core.llm.wire import without_transport
from studio.panes.prompt_inspector import PromptInspectorPane
from studio.panes.replay import ReplayPane
from studio.preferences import Endpoint, Preferences
from studio.selection import Selection
from studio.session import StudioSession
from studio.widgets.fork_dialog import ForkDialog

from .replay_panes import pane_preferences, shown_pane, studio_session

RESOURCE, THREAD = "mo", "t-tools"
SETTINGS = {"temperature": 0.25, "max_tokens": 120, "top_p": 0.8, "seed": 3}
TURNS = ["Hello there.", "Look up the weather in Oslo.", "Convert 10 NOK to EUR and check Bergen.", "Thanks!"]
WEATHER = Tool("get_weather", "Weather in a city.", lambda a, _c: {"city": a.get("city"), "sky": "grey"},
               {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
CONVERT = Tool("convert", "Convert currency.", lambda a, _c: {"eur": 0.87},
               {"type": "object", "properties": {"amount": {"type": "number"}, "to": {"type": "string"}}})


def reply(messages: list[dict[str, Any]], tools: Any) -> Any:
    user = next(m for m in reversed(messages) if m["role"] == "user")
    done = len([m for m in messages[messages.index(user):] if m["role"] == "tool"])
    text = str(user["content"])
    if "Convert" in text and done < 2:
        return ScriptedReply(tool_calls=(tool_call("convert" if done == 0 else "get_weather",
                                                   {"amount": 10, "to": "EUR"} if done == 0 else {"city": "Bergen"}),))
    if "weather" in text and not done:
        return ScriptedReply(tool_calls=(tool_call("get_weather", {"city": "Oslo"}),))
    return f"Reply {len(messages)}."


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("replay-requests")
    store = open_store(folder / "tools.db")
    memory = Memory(store, MemoryOptions(last_messages=6, working_memory={"enabled": True}), name="tooly")
    agent = Agent("tooly", instructions="Use tools when useful.", model=ScriptedModel(reply, name="tooly"),
                  memory=memory, tools=[WEATHER, CONVERT], model_settings=SETTINGS)
    for text in TURNS:
        agent.generate(text, memory={"resource": RESOURCE, "thread": THREAD})
    store.close()
    return folder


@pytest.fixture
def session(template: Path, tmp_path: Path, qapp: Any) -> Iterator[StudioSession]:
    shutil.copytree(template, tmp_path / "data")
    yield from studio_session(tmp_path / "data" / "tools.db")


@pytest.fixture
def prefs(tmp_path: Path, qapp: Any) -> Preferences:
    return pane_preferences(tmp_path)


@pytest.fixture
def pane(no_leaked_widgets: None, qtbot: Any, session: StudioSession, prefs: Preferences) -> ReplayPane:
    return shown_pane(qtbot, session, prefs, Selection(RESOURCE, THREAD))


def go(qtbot: Any, pane: ReplayPane, index: int) -> None:
    pane.go_to(index)
    qtbot.waitUntil(lambda: pane.step is not None and pane.step.index == index and not pane.busy, timeout=30_000)


def test_each_model_call_shows_its_whole_request(qtbot: Any, pane: ReplayPane) -> None:
    go(qtbot, pane, 2)  # convert, then get_weather, then the answer: three model calls
    step = pane.step
    assert step is not None and len(step.calls) == 3 and pane.call_combo.count() == 3
    assert "exact" in pane.facts.text() and "o200k estimate" in pane.facts.text()
    assert "server-reported" in pane.facts.text()
    request = pane.view.request_view
    view = request.view
    assert view is not None and view.title == "Model call 1 of 3" and "exact" in view.status
    assert dict(view.settings)["temperature"] == "0.25" and dict(view.settings)["seed"] == "3"
    assert dict(view.settings)["tool_choice"].startswith("not sent")
    assert [t.name for t in view.tools] == ["updateWorkingMemory", "get_weather", "convert"]
    assert all(t.tokens > 0 for t in view.tools) and view.tools_tokens >= max(t.tokens for t in view.tools)
    assert [r.what for r in view.usage][:2] == ["Prompt tokens", "Reply tokens"]
    assert view.usage[0].server != "not reported" and view.usage[0].estimate == f"{step.calls[0].total_tokens:,}"
    assert json.loads(view.body)["tools"][1]["function"]["name"] == "get_weather"
    # The tool list is collapsible: the definitions are children, each with its description and schema.
    top = request.tools.topLevelItem(0)
    assert top.childCount() == 3 and top.child(1).text(0) == "get_weather" and top.child(1).childCount() == 2
    assert request.usage_model.headerData(1, Qt.Orientation.Horizontal) == "Server-reported"
    assert "o200k" in str(request.usage_model.headerData(2, Qt.Orientation.Horizontal))

    # Step to the next model call: its context grew by the reply's tool call and the result.
    pane.commands.run("replay.next_call")
    assert pane.call == 1 and pane.call_combo.currentIndex() == 1
    assert "after convert" in pane.call_combo.currentText()
    assert pane.view.request_view.view.title == "Model call 2 of 3"  # type: ignore[union-attr]
    assert pane.view.change_label.text().startswith("Since model call 1:")
    assert any(r.change == "entered" and r.source == "response" for r in pane.view.step_model.rows())
    pane.commands.run("replay.next_call")
    assert pane.call == 2 and "after get_weather" in pane.call_combo.currentText()
    pane.commands.run("replay.previous_call")
    assert pane.call == 1
    go(qtbot, pane, 0)  # another turn starts at its first call
    assert pane.call == 0 and pane.call_combo.count() == 1 and not pane.call_combo.isEnabled()


def test_a_rerun_sends_the_recorded_request_unless_changed(qtbot: Any, pane: ReplayPane, prefs: Preferences) -> None:
    with LoopbackServer(ScriptedModel(reply, name="again")) as server:
        prefs.save([Endpoint("Loop", server.base_url, "loop-chat", "none", "")], default="Loop")
        go(qtbot, pane, 1)
        pane.commands.run("replay.next_call")
        panel = pane.rerun
        assert panel.call == 1 and panel.setting_edits["temperature"].text() == "0.25"
        assert panel.setting_edits["stop"].text() == "" and panel.tool_choice_combo.currentText().startswith("as sent")
        with qtbot.waitSignal(panel.finished, timeout=30_000) as blocker:
            panel.run()
        sent = without_transport(server.chat_requests()[0])
        recorded = pane.step.received.replay.calls[1].request  # type: ignore[union-attr]
        assert sent["messages"] == json.loads(json.dumps(recorded["messages"]))
        assert {k: sent[k] for k in SETTINGS} == SETTINGS and sent["tools"] == json.loads(json.dumps(recorded["tools"]))
        result = blocker.args[0]
        assert [d[0] for d in result.differences] == ["model", "endpoint"]
        assert [r[0] for r in panel.difference_model.rows()] == ["model", "endpoint"]
        figures = {r[0]: r for r in panel.figure_model.rows()}
        assert figures["Prompt tokens, server-reported"][1] != "not reported"
        # Change a setting and the tool choice: both go out, both are listed.
        panel.setting_edits["temperature"].setText("1.2")
        panel.setting_edits["seed"].setText("")
        assert "bold" in panel.setting_edits["temperature"].styleSheet()
        panel.tool_choice_combo.setCurrentIndex(panel.tool_choice_combo.findText("none"))
        with qtbot.waitSignal(panel.finished, timeout=30_000) as blocker:
            panel.run()
        body = without_transport(server.chat_requests()[1])
        assert body["temperature"] == 1.2 and "seed" not in body and body["tool_choice"] == "none"
        assert {"temperature", "seed", "tool choice"} <= {d[0] for d in blocker.args[0].differences}
        panel.reset_settings()
        assert panel.setting_edits["temperature"].text() == "0.25"
        panel.setting_edits["max_tokens"].setText("lots")
        panel.run()
        assert panel.status.text().startswith("Not sent: max tokens")
        # Stepping to another turn clears the summary of this one.
        pane.commands.run("replay.next")
        qtbot.waitUntil(lambda: pane.step is not None and pane.step.index == 2 and not pane.busy, timeout=30_000)
        assert panel.result is None and not panel.figure_model.rows() and "Re-run with" not in panel.status.text()


def test_a_tool_the_studio_lacks_is_offered_and_its_call_shown_not_run(qtbot: Any, pane: ReplayPane,
                                                                       prefs: Preferences) -> None:
    with LoopbackServer([ScriptedReply(tool_calls=(tool_call("convert", {"amount": 1, "to": "EUR"}),))]) as server:
        prefs.save([Endpoint("Loop", server.base_url, "loop-chat", "none", "")], default="Loop")
        go(qtbot, pane, 2)
        with qtbot.waitSignal(pane.rerun.finished, timeout=30_000) as blocker:
            pane.rerun.run()
        names = [t["function"]["name"] for t in server.chat_requests()[0]["tools"]]
        assert names == ["updateWorkingMemory", "get_weather", "convert"]
        assert blocker.args[0].tool_calls == [{"name": "convert", "arguments": '{"amount": 1, "to": "EUR"}'}]
        assert "[tool call convert" in pane.rerun.new_view.toPlainText() and "not run" in pane.rerun.new_view.toPlainText()


def test_what_if_compares_like_with_like(qtbot: Any, pane: ReplayPane) -> None:
    panel = pane.what_if
    with qtbot.waitSignal(panel.finished, timeout=60_000):
        panel.run()  # every option "as recorded": nothing may differ, tools and all
    rows = panel.model.rows()
    assert len(rows) == len(TURNS) and all(r.delta == 0 and not (r.entered or r.left or r.changed) for r in rows)
    assert "0 prompt(s) would differ" in panel.summary.text()
    panel.wm_combo.setCurrentIndex(panel.wm_combo.findData("off"))
    with qtbot.waitSignal(panel.finished, timeout=60_000):
        panel.run()
    rows = panel.model.rows()
    assert all(r.delta < 0 for r in rows)  # no working memory and no working-memory tool
    assert f"{len(rows)} prompt(s) would differ" in panel.summary.text()


def test_a_reconstructed_turn_never_says_identical_to_what_the_model_received(qtbot: Any, pane: ReplayPane,
                                                                             session: StudioSession) -> None:
    with session.store.db.write() as conn:
        conn.exec_driver_sql("DELETE FROM memory_studio_turns")
    with qtbot.waitSignal(pane.step_shown, timeout=30_000):
        pane.replay_from_thread(THREAD)
    assert "reconstructed" in pane.facts.text()
    assert pane.banner.text().startswith("Reconstructed — no record of this turn; unknown:")
    assert "identical to what the model received" not in pane.status.text()
    assert pane.view.now_diff.toPlainText() == ("(rebuilt now: identical to this rebuild; what the model received "
                                                "is not known exactly)")
    assert pane.view.received_caption.text() == "Received (reconstructed: no record)"
    view = pane.view.request_view.view
    assert view is not None and view.model == "not recorded" and dict(view.settings) == {"settings": "not recorded"}
    assert any("no usable record" in n for n in view.notes)


def test_an_exact_record_whose_messages_were_edited_since_says_so(qtbot: Any, pane: ReplayPane,
                                                                  session: StudioSession) -> None:
    """An edit after a turn (issue 21) leaves its record exact: Replay shows what the model received,
    and says which stored messages changed since."""
    first = pane.source.turns[0]  # type: ignore[union-attr]
    Memory(session.store).edit_message(first.input_message_id, resource_id=RESOURCE, text="Goodbye instead.")
    with qtbot.waitSignal(pane.step_shown, timeout=30_000):
        pane.replay_from_thread(THREAD)
    go(qtbot, pane, 1)
    assert pane.view.received_caption.text() == "Received (the record, exact; 1 edited since, shown as sent)"
    assert "Hello there." in pane.view.received_view.toPlainText()
    assert "Goodbye instead." not in pane.view.received_view.toPlainText()
    assert "exact" in pane.view.request_view.view.status  # type: ignore[union-attr]


def _inspector(qtbot: Any, session: StudioSession) -> PromptInspectorPane:
    """A prompt inspector over the test's session, shown at the size the Studio gives it."""
    inspector = PromptInspectorPane(session)
    qtbot.addWidget(inspector)
    inspector.resize(1300, 860)
    inspector.show()
    return inspector


def _show_turn(qtbot: Any, inspector: PromptInspectorPane, message_id: str) -> None:
    """Select the stored turn whose input is ``message_id`` and wait until its rebuild is shown."""
    inspector.set_selection(Selection(RESOURCE, THREAD, message_id))
    qtbot.waitUntil(lambda: inspector.preview is not None and inspector.preview.request.message_id == message_id
                    and not inspector.busy, timeout=30_000)


def test_the_inspector_says_a_stored_turns_messages_were_edited_since(no_leaked_widgets: None, qtbot: Any,
                                                                     session: StudioSession) -> None:
    # The inspector showed the old text (rightly: what the model received) under "Stored turn: recorded
    # (exact)." with nothing saying the message reads differently now, unless one row was clicked.
    memory = Memory(session.store)
    first, second = memory.turns(THREAD)[:2]
    memory.edit_message(first.input_message_id, resource_id=RESOURCE, text="Goodbye instead.")
    inspector = _inspector(qtbot, session)
    _show_turn(qtbot, inspector, second.input_message_id)
    text = inspector.banner.text()
    assert text.startswith("Stored turn: recorded (exact)")
    assert "Stored messages it used: 1 edited since, shown as sent." in text
    assert any(r.text == "Hello there." for r in inspector.fragment_model.rows())


def test_a_damaged_record_says_so_on_screen(qtbot: Any, pane: ReplayPane, session: StudioSession) -> None:
    turn = pane.source.turns[1]  # type: ignore[union-attr]
    with session.store.db.write() as conn:
        conn.exec_driver_sql("UPDATE memory_studio_turns SET record = '{\"v\": 7}' WHERE input_message_id = ?",
                             (turn.input_message_id,))
    with qtbot.waitSignal(pane.step_shown, timeout=30_000):
        pane.replay_from_thread(THREAD)
    go(qtbot, pane, 1)
    assert pane.banner.text().startswith("Reconstructed — the record of this turn is damaged (unknown record version 7")
    assert "reconstructed (damaged record)" in pane.facts.text()
    assert pane.view.received_caption.text() == "Received (reconstructed: the record is damaged)"


def test_the_inspector_shows_a_stored_turns_calls(no_leaked_widgets: None, qtbot: Any, session: StudioSession) -> None:
    inspector = PromptInspectorPane(session)
    qtbot.addWidget(inspector)
    inspector.resize(1300, 860)
    inspector.show()
    turn = Memory(session.store).turns(THREAD)[2]
    with qtbot.waitSignal(inspector.assembled, timeout=30_000) as blocker:
        inspector.set_selection(Selection(RESOURCE, THREAD, turn.input_message_id))
    qtbot.waitUntil(lambda: inspector.preview is not None and inspector.preview.request.message_id is not None,
                    timeout=30_000)
    preview = inspector.preview
    assert preview is not None and preview.request.as_recorded
    assert preview.prompt.replay is not None and preview.prompt.replay.exact
    assert inspector.banner.text().startswith("Stored turn: recorded (exact) — 3 model calls")
    assert inspector.call_combo.count() == 3 and len(preview.requests) == 3
    view = inspector.request_view.view
    assert view is not None and [t.name for t in view.tools] == ["updateWorkingMemory", "get_weather", "convert"]
    assert dict(view.settings)["max_tokens"] == "120"
    inspector.call_combo.setCurrentIndex(2)
    assert inspector.request_view.view.title == "Model call 3 of 3"  # type: ignore[union-attr]
    assert len(inspector.fragment_model.rows()) > len(preview.prompt.fragments)
    del blocker


def test_the_inspectors_copies_and_totals_follow_the_model_call_shown(no_leaked_widgets: None, qtbot: Any,
                                                                     session: StudioSession) -> None:
    # Picking model call 3 showed its messages in the table, but the status line and the context bar
    # kept call 1's totals, and Copy OpenAI Messages / Copy JSON copied call 1's messages.
    inspector = _inspector(qtbot, session)
    _show_turn(qtbot, inspector, Memory(session.store).turns(THREAD)[2].input_message_id)
    preview = inspector.preview
    assert preview is not None and preview.prompt.replay is not None
    third = preview.prompt.replay.calls[2].prompt
    assert len(third.messages) > len(preview.prompt.messages)
    inspector.call_combo.setCurrentIndex(2)
    assert f"· {len(third.messages)} messages ·" in inspector.status.text()
    assert f"{third.total_tokens:,} tokens" in inspector.status.text()
    inspector.copy_openai()
    assert json.loads(QGuiApplication.clipboard().text()) == json.loads(third.openai_messages_json())
    assert inspector.status.text().startswith(f"Copied {len(third.messages)} OpenAI messages")
    inspector.copy_json()
    assert json.loads(QGuiApplication.clipboard().text()) == json.loads(third.to_json())
    assert inspector.shown_prompt is third
    inspector.call_combo.setCurrentIndex(0)
    inspector.copy_openai()
    assert json.loads(QGuiApplication.clipboard().text()) == json.loads(preview.prompt.openai_messages_json())


def test_a_previews_tool_list_says_it_holds_memorys_tools_only(no_leaked_widgets: None, qtbot: Any,
                                                               session: StudioSession) -> None:
    # The agent offers get_weather and convert on every turn, but its registration does not record its
    # tools: a preview listed updateWorkingMemory alone under "Tool definitions (as sent)".
    inspector = _inspector(qtbot, session)
    inspector.set_selection(Selection(RESOURCE, THREAD))
    qtbot.waitUntil(lambda: inspector.preview is not None and not inspector.busy, timeout=30_000)
    request = inspector.request_view
    assert request.view is not None and [t.name for t in request.view.tools] == ["updateWorkingMemory"]
    heading = request.tools.headerItem().text(0)
    assert heading != "Tool definitions (as sent)" and "memory's own" in heading
    assert "an agent sends its own tools too" in request.header.text()
    # A stored turn's request is what was sent, every tool included.
    _show_turn(qtbot, inspector, Memory(session.store).turns(THREAD)[1].input_message_id)
    assert request.tools.headerItem().text(0) == "Tool definitions (as sent)"
    assert [t.name for t in request.view.tools] == ["updateWorkingMemory", "get_weather", "convert"]
    assert "an agent sends its own tools too" not in request.header.text()


def test_the_request_says_whether_the_reply_was_streamed(qtbot: Any, pane: ReplayPane) -> None:
    go(qtbot, pane, 1)
    view = pane.view.request_view.view
    assert view is not None and dict(view.settings)["stream"] == "not sent: the reply came whole"
    assert "stream" not in view.request  # the body shown and copied stays the hashed one


def test_the_inspector_says_when_a_stored_turn_ran_with_other_options(no_leaked_widgets: None, qtbot: Any,
                                                                     session: StudioSession) -> None:
    # A turn answered with other options than the agent's registered ones (here the chat playground's
    # default agent; also any turn before the agent's configuration changed) is rebuilt from its record,
    # rightly, but the options bar and instructions showed the agent's current ones as if it ran with them.
    from studio import chat_runner

    request = chat_runner.ChatRequest(THREAD, RESOURCE, "One more thing.", None, chat_runner.DEFAULT_INSTRUCTIONS,
                                      "playground-turn")
    chat_runner.run_turn(session.store, request, ScriptedModel(["Sure."]), embedder=lambda: None,
                         on_delta=lambda _piece: None)
    inspector = _inspector(qtbot, session)
    _show_turn(qtbot, inspector, "playground-turn")
    assert inspector.agent_combo.currentText() == "Agent 'tooly'" and inspector.instructions_edit.text() != \
        chat_runner.DEFAULT_INSTRUCTIONS
    text = inspector.banner.text()
    assert text.startswith("Stored turn: recorded (exact).")
    assert "this turn ran with last messages 10, not 6; working memory off, not on; other instructions" in text
    fragments = inspector.fragment_model.rows()
    assert fragments[0].text == chat_runner.DEFAULT_INSTRUCTIONS  # the prompt is the record's
    # The agent's own turn ran with what is shown: nothing to say.
    _show_turn(qtbot, inspector, Memory(session.store).turns(THREAD)[1].input_message_id)
    assert "this turn ran with" not in inspector.banner.text()


def test_pin_is_refused_for_a_fragment_that_entered_at_a_later_model_call(no_leaked_widgets: None, qtbot: Any,
                                                                          session: StudioSession) -> None:
    # A memory check rebuilds a turn's first model call; a tool result shown under model call 3 is not in
    # it, so a check pinned from it failed at once.
    inspector = _inspector(qtbot, session)
    _show_turn(qtbot, inspector, Memory(session.store).turns(THREAD)[2].input_message_id)
    inspector.call_combo.setCurrentIndex(2)
    rows = inspector.fragment_model.rows()
    later = next(i for i, r in enumerate(rows) if r.source == "response")
    history = next(i for i, r in enumerate(rows) if r.source == "message-history")
    inspector.fragment_table.selectRow(later)
    assert inspector.pin_target() is None and not inspector.pin_btn.isEnabled()
    assert "first model call" in inspector.pin_btn.toolTip()
    inspector.fragment_table.selectRow(history)  # also in the first call: a check can hold it
    target = inspector.pin_target()
    assert target is not None and inspector.pin_btn.isEnabled() and target.text == rows[history].text


def test_replay_does_not_pin_a_fragment_of_a_later_model_call_only(qtbot: Any, pane: ReplayPane) -> None:
    go(qtbot, pane, 2)
    pane.commands.run("replay.next_call")
    pane.commands.run("replay.next_call")
    assert pane.call == 2
    view = pane.view
    rows = view.step_model.rows()
    later = next(i for i, r in enumerate(rows) if r.source == "response")
    history = next(i for i, r in enumerate(rows) if r.source == "message-history" and r.index is not None)
    assert view.pin_target(later) is None
    target = view.pin_target(history)
    assert target is not None and target.turn_number == 3


def test_fork_dialog_radios_do_not_overlap(no_leaked_widgets: None, qtbot: Any) -> None:
    for scoped in (True, False):
        dialog = ForkDialog("A fork", "turn 2", scoped)
        qtbot.addWidget(dialog)
        dialog.show()
        qtbot.waitExposed(dialog)
        a, b = dialog.as_of_radio, dialog.current_radio
        top_a = a.mapTo(dialog, a.rect().topLeft())
        top_b = b.mapTo(dialog, b.rect().topLeft())
        assert top_a.y() + a.height() <= top_b.y(), "the two radios overlap"
        if not scoped:
            note = dialog.findChild(QLabel, "forkWmNote")
            assert note is not None and top_b.y() + b.height() <= note.mapTo(dialog, note.rect().topLeft()).y()
        dialog.close()
