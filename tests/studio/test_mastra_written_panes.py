"""Panes over a database Mastra wrote (no agent registered): the Working Memory pane shows a thread's own
working memory where Mastra keeps it (thread scope, ``metadata.workingMemory``) and says so; the message
list shows the tool calls Mastra kept only in a message's legacy ``content.toolInvocations`` field (the
prompt sends them, ``core/prompt.py``). The rows are written in the shapes a real Mastra (1.71, LibSQLStore)
wrote them. Looking writes nothing (the watches of ``conftest.py``; the file's bytes are compared too)."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from core.storage import schema
from studio.models.messages_model import MessageRoles
from studio.panes.messages import MessagesPane
from studio.panes.working_memory import WorkingMemoryPane
from studio.selection import Selection

pytestmark = pytest.mark.usefixtures("no_leaked_widgets")

SHOTS = os.environ.get("STUDIO_TEST_SHOTS")  # a folder: save each pane's picture there to look at it


def _shot(widget: Any, name: str) -> None:
    if SHOTS:
        widget.grab().save(str(Path(SHOTS) / f"{name}.png"))


def _mastra_db(path: Path) -> None:
    """Three threads of two resources, as Mastra writes them: ``bob-plan`` keeps its working memory itself
    (scope "thread"), resource ``ada`` keeps one and so does its thread ``ada-groceries`` (two agents with
    different scopes), ``ada-trip`` keeps none; an assistant message whose calls are only in
    ``toolInvocations`` (a result and a call still waiting for its result) beside a plain text part; a user
    message whose files are only in ``experimental_attachments``."""
    con = sqlite3.connect(path)
    for ddl in schema.MASTRA_MEMORY_DDL:
        con.execute(ddl)
    threads = [
        ("bob-plan", "bob", "Plan", {"workingMemory": "# Trip\n- Destination: Bergen\n"}),
        ("ada-groceries", "ada", "Groceries", {"channel": "web", "workingMemory": "# Trip\n- Destination: Faro\n"}),
        ("ada-trip", "ada", "Trip", {"channel": "slack"}),
    ]
    for tid, rid, title, meta in threads:
        con.execute("INSERT INTO mastra_threads VALUES (?,?,?,?,?,?)",
                    (tid, rid, title, json.dumps(meta), "2026-01-01T10:00:00.000Z", "2026-01-01T10:05:00.000Z"))
    con.execute('INSERT INTO mastra_resources (id, "workingMemory", metadata, "createdAt", "updatedAt") '
                "VALUES (?,?,?,?,?)", ("ada", "# User\n- Name: Ada\n- City: Lisbon\n", "{}",
                                       "2026-01-01T10:00:00.000Z", "2026-01-01T10:05:00.000Z"))
    legacy = [
        {"state": "result", "toolCallId": "call-w1", "toolName": "getWeather", "args": {"city": "Bergen"},
         "result": {"forecast": "rain, 9°C"}},
        {"state": "call", "toolCallId": "call-b2", "toolName": "bookFerry", "args": {"to": "Stavanger"}},
    ]
    rows = [
        ("m0", "user", {"format": 2, "parts": [{"type": "text", "text": "weather in Bergen?"}],
                        "content": "weather in Bergen?"}),
        ("m1", "assistant", {"format": 2, "parts": [{"type": "text", "text": "Rainy; I asked for a ferry."}],
                             "content": "Rainy; I asked for a ferry.", "toolInvocations": legacy}),
        ("m2", "user", {"format": 2, "parts": [{"type": "text", "text": "Look at the ferry map"}],
                        "experimental_attachments": [
                            {"name": "map.png", "contentType": "image/png", "url": "data:image/png;base64,iVBORw0K"},
                            {"name": "times.pdf", "contentType": "application/pdf", "url": "data:application/pdf;base64,JVBE"}]}),
    ]
    for i, (mid, role, content) in enumerate(rows):
        con.execute('INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
                    "VALUES (?,?,?,?,?,?,?)",
                    (mid, "bob-plan", json.dumps(content), role, "v2", f"2026-01-01T10:0{i}:00.000Z", "bob"))
    con.commit()
    con.close()


@pytest.fixture
def mastra_db(tmp_path: Path) -> Path:
    path = tmp_path / "mastra.db"
    _mastra_db(path)
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _wm_pane(qtbot: Any, session: Any) -> WorkingMemoryPane:
    pane = WorkingMemoryPane(session)
    qtbot.addWidget(pane)
    pane.resize(1100, 700)
    pane.show()
    return pane


def _load(qtbot: Any, pane: WorkingMemoryPane, selection: Selection) -> Any:
    with qtbot.waitSignal(pane.loaded, timeout=10_000) as blocker:
        pane.set_selection(selection)
    return blocker.args[0]


def test_a_thread_that_keeps_its_own_working_memory_shows_it_and_says_which_scope(
        qtbot: Any, make_session: Any, mastra_db: Path) -> None:
    before = _digest(mastra_db)
    pane = _wm_pane(qtbot, make_session(mastra_db))

    snap = _load(qtbot, pane, Selection(None, "bob-plan"))
    assert snap.agent is None and snap.target is not None
    assert (snap.target.scope, snap.target.owner_id) == ("thread", "bob-plan")
    assert snap.text == "# Trip\n- Destination: Bergen\n"
    assert "Destination: Bergen" in pane.editor.toPlainText()
    assert pane.title.text() == "Thread bob-plan" and "thread scope" in pane.badges.text()
    assert pane.info_banner.isVisible() and "thread scope" in pane.info_banner.text()
    assert "nothing stored yet" not in pane.status.text()
    _shot(pane, "wm-mastra-thread-scope")

    # The resource keeps one too: the thread's own is shown, and the note says where the other one is.
    snap = _load(qtbot, pane, Selection("ada", "ada-groceries"))
    assert (snap.target.scope, snap.text) == ("thread", "# Trip\n- Destination: Faro\n")
    assert "Resource 'ada' keeps one too" in pane.info_banner.text()
    _shot(pane, "wm-mastra-thread-and-resource")

    # A thread without one of its own shows its resource's, as before, with no note.
    snap = _load(qtbot, pane, Selection("ada", "ada-trip"))
    assert (snap.target.scope, snap.target.owner_id) == ("resource", "ada") and "Name: Ada" in snap.text
    assert snap.scope_note == "" and not pane.info_banner.isVisible()
    # The resource itself (no thread picked) shows the resource's.
    snap = _load(qtbot, pane, Selection("ada", None))
    assert (snap.target.scope, snap.target.owner_id) == ("resource", "ada")
    assert _digest(mastra_db) == before  # looking wrote nothing


def test_a_registered_agents_scope_still_decides(qtbot: Any, make_session: Any, tmp_path: Path) -> None:
    """An agent registered for the thread says its scope: the thread's metadata does not override it."""
    from core import Memory, MemoryOptions, open_store

    path = tmp_path / "ours.db"
    store = open_store(path)
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True}), name="assistant")
    mem.create_thread(thread_id="t1", resource_id="ann", metadata={"workingMemory": "# Old thread note"})
    mem.update_working_memory(thread_id="t1", resource_id="ann", working_memory="# User\n- Name: Ann")
    mem.register("assistant")
    store.close()
    pane = _wm_pane(qtbot, make_session(path))
    snap = _load(qtbot, pane, Selection("ann", "t1"))
    assert snap.agent is not None and snap.target.scope == "resource" and snap.text == "# User\n- Name: Ann"
    assert snap.scope_note == "" and not pane.info_banner.isVisible()


def test_calls_kept_only_in_tool_invocations_show_in_the_message_list(
        qtbot: Any, make_session: Any, mastra_db: Path) -> None:
    before = _digest(mastra_db)
    pane = MessagesPane(make_session(mastra_db))
    qtbot.addWidget(pane)
    pane.resize(900, 600)
    pane.show()
    with qtbot.waitSignal(pane.model.loaded, timeout=10_000):
        pane.set_selection(Selection("bob", "bob-plan"))
    model = pane.model
    qtbot.waitUntil(lambda: model.index(1).data(MessageRoles.LOADED), timeout=10_000)
    preview = model.index(1).data(MessageRoles.PREVIEW)
    # The calls first, then the text: the order the prompt sends them in.
    assert preview.startswith('getWeather({"city": "Bergen"}) → {"forecast": "rain, 9°C"} · bookFerry(')
    assert preview.endswith("Rainy; I asked for a ferry.")
    pane._select_row(1)
    html = pane.detail.toHtml()
    for needle in ("TOOL getWeather", "call-w1", "rain, 9°C", "TOOL bookFerry", "Stavanger",
                   "Rainy; I asked for a ferry."):
        assert needle in html, needle
    _shot(pane, "messages-mastra-legacy-tool-invocations")
    assert _digest(mastra_db) == before


def test_files_kept_only_as_attachments_show_in_the_message_list(qtbot: Any, make_session: Any, mastra_db: Path) -> None:
    """A user message whose files Mastra kept only in ``experimental_attachments`` showed as its text alone,
    while the prompt sends its files to the model."""
    before = _digest(mastra_db)
    pane = MessagesPane(make_session(mastra_db))
    qtbot.addWidget(pane)
    pane.resize(900, 600)
    pane.show()
    with qtbot.waitSignal(pane.model.loaded, timeout=10_000):
        pane.set_selection(Selection("bob", "bob-plan"))
    model = pane.model
    qtbot.waitUntil(lambda: model.index(2).data(MessageRoles.LOADED), timeout=10_000)
    assert model.index(2).data(MessageRoles.PREVIEW) == (
        "Look at the ferry map · [map.png · image/png] · [times.pdf · application/pdf]")
    pane._select_row(2)
    html = pane.detail.toHtml()
    assert "FILE map.png" in html and "FILE times.pdf" in html
    _shot(pane, "messages-mastra-attachments")
    assert _digest(mastra_db) == before


def test_a_call_in_both_places_is_shown_once() -> None:
    """A message whose parts hold the call (Mastra keeps both fields in step) shows it once, from its parts."""
    from core import Message
    from core.messages import text_part, tool_invocation_part
    from studio.logic.message_format import message_html, summarize

    msg = Message.create("assistant", [tool_invocation_part("c1", "lookup", {"q": "x"}, {"hits": 1}),
                                       text_part("done")], thread_id="t", resource_id="r")
    msg.content["toolInvocations"] = [{"state": "result", "toolCallId": "c1", "toolName": "lookup",
                                       "args": {"q": "x"}, "result": {"hits": 1}}]
    row = summarize(msg)
    assert row.kinds == ("tool-invocation", "text") and row.preview.count("lookup(") == 1
    assert message_html(row).count("TOOL lookup") == 1


# An assistant row a real Mastra 1.71 wrote with observational memory on (its observation ran in the turn):
# the markers of the cycle, then the reply.
OM_REPLY = {"format": 2, "parts": [
    {"type": "data-om-observation-start", "data": {
        "cycleId": "ac92ca79-df12-4b40-8f56-9fc2396cafdd", "operationType": "observation",
        "startedAt": "2026-12-07T16:05:50.964Z", "tokensToObserve": 93,
        "recordId": "547af420-63b7-4569-bef0-27c1108ab29c", "threadId": "om-thread", "threadIds": ["om-thread"],
        "config": {"messageTokens": 60, "observationTokens": 100000, "scope": "thread"}}},
    {"type": "data-om-observation-end", "data": {
        "cycleId": "ac92ca79-df12-4b40-8f56-9fc2396cafdd", "operationType": "observation",
        "completedAt": "2026-12-07T16:05:51.019Z", "durationMs": 55, "tokensObserved": 93, "observationTokens": 34,
        "observations": "Date: Nov 20, 2026\n* 🔴 (09:04) User said fact number 4 about Oslo trip.",
        "currentTask": "Primary: plan the Oslo trip (4)", "suggestedResponse": "Ask about dates.",
        "extractedValues": {"current-task": "Primary: plan the Oslo trip (4)", "suggested-response": "Ask about dates."},
        "recordId": "547af420-63b7-4569-bef0-27c1108ab29c", "threadId": "om-thread"}},
    {"type": "text", "text": "Noted, thanks.", "createdAt": 1796659551036}],
    "metadata": {"modelId": "loop", "provider": "openai"}, "content": "Noted, thanks."}


def test_mastras_observation_markers_read_as_words_and_the_reply_stays_in_sight() -> None:
    """The list showed these markers as JSON ("{data-om-observation-start} {"cycleId": …"), which filled its
    two lines: the reply ("Noted, thanks.") was out of sight on every assistant row of an observed thread. The
    cycle now reads as what it did, its start left out where its end is in the same message; the detail keeps
    the JSON under the same sentence."""
    from datetime import datetime, timezone

    from core import Message
    from studio.logic.message_format import message_html, summarize

    msg = Message(id="bd773554", role="assistant", content=json.loads(json.dumps(OM_REPLY)),
                  created_at=datetime(2026, 12, 7, 16, 5, 50, tzinfo=timezone.utc), thread_id="om-thread",
                  resource_id="cleo")
    row = summarize(msg)
    assert row.preview == "[observed 93 tokens → 34 tokens of observations] · Noted, thanks."
    assert row.kinds == ("data", "data", "text")
    html = message_html(row)
    assert "observed 93 tokens → 34 tokens of observations" in html and "observing 93 tokens" in html
    started = {**OM_REPLY, "parts": OM_REPLY["parts"][:1]}  # a cycle whose end is not stored (yet)
    assert summarize(msg.copy(content=started)).preview == "[observing 93 tokens]"


def test_a_crafted_markers_numbers_and_titles_read_safely() -> None:
    """A marker from a crafted or damaged row: a token count of 5,001 digits made a 6,000-character row label (and
    past 4,300 digits Python refuses to write an int at all), and a thread-update's titles kept their bidirectional
    overrides, which reversed the rest of the row; now the count reads as a bound and the titles as the tree
    writes them (found by s36-trust7)."""
    from studio.logic.message_format import om_marker_text

    huge = om_marker_text("data-om-observation-start", {"tokensToObserve": 10**5000})
    assert huge == "observing more than 10¹⁵ tokens"
    assert om_marker_text("data-om-buffering-start", {"tokensToBuffer": 10**15}) == (
        "buffering 1,000,000,000,000,000 tokens")
    title = om_marker_text("data-om-thread-update", {"oldTitle": "Trip\u202e to Oslo", "newTitle": "a\nb"})
    assert title == "title Trip\\u202e to Oslo → a\\nb" and "\u202e" not in title


def test_the_observations_pane_dates_mastras_last_observation() -> None:
    """Mastra 1.71's hints (copied from its thread row) have the cursor and no ``lastObservedAt``: the pane
    said "Last observed: —" on every thread Mastra observed."""
    from core.observational.store import thread_hints
    from studio.logic.observations_layout import hint_rows

    meta = {"mastra": {"om": {"suggestedResponse": "Ask about dates.", "currentTask": "Primary: plan the Oslo trip (4)",
                              "extracted": {}, "lastObservedMessageCursor": {
                                  "createdAt": "2026-12-07T16:05:50.946Z",
                                  "id": "1516e61f-0ef6-40a6-a41e-6ea40833027e"}}}}
    rows = dict(hint_rows(thread_hints(meta)))
    assert rows["Last observed"] != "—" and "2026-12-07" in rows["Last observed"]
    assert rows["Current task"] == "Primary: plan the Oslo trip (4)"
