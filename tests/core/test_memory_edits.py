"""Editing and deleting stored messages and observations (issue 21 item 1), on both backends.

Recall follows an edit (a new vector and keyword doc) and a delete (no vector, doc or passage left;
the next message's passage rebuilt); turns that ran before a change rebuild exactly as the model saw
them, marked "edited since" / "deleted since", while a prompt rebuilt now shows the new text; one
resource can never touch another's messages; every change is a version, and an undo reverts it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from core import Agent, InvalidArgumentError, Memory, MemoryOptions, Message, NotFoundError, ThreadOwnershipError
from core.embedding import HashingEmbedder
from core.llm import ScriptedModel
from core.timeutil import FixedClock

pytestmark = pytest.mark.backends

RECALL = {"top_k": 3, "message_range": 0, "scope": "resource", "mode": "hybrid"}


@pytest.fixture
def chat(store: Any) -> Any:
    """Three turns of resource ada in thread t1 (history 10, recall on), with what each call was sent."""
    clock = FixedClock(datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc), step_ms=1000)
    memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=RECALL), embedder=HashingEmbedder(),
                    clock=clock, name="main")
    model = ScriptedModel(["Noted.", "Lisbon is lovely.", "The market by the river."])
    agent = Agent("main", instructions="Be brief.", model=model, memory=memory, tracer=False)
    for text in ("I love grilled sardines with lemon.", "We fly to Lisbon in May.", "Where is the fish market?"):
        agent.generate(text, memory={"resource": "ada", "thread": "t1"})
    Memory(store, name="other").create_thread(resource_id="bob", thread_id="tb")
    return memory, model


def _stored(memory: Memory, thread: str = "t1", resource: str = "ada") -> list[Any]:
    return memory.recall(thread_id=thread, resource_id=resource, per_page=False).messages


def _rows(store: Any, sql: str, *params: Any) -> list[Any]:
    with store.db.read() as conn:
        return list(conn.exec_driver_sql(sql, params).all())


def _doc_count(store: Any, message_id: str) -> int:
    return len(_rows(store, "SELECT 1 FROM memory_studio_fts_docs WHERE message_id = ?", message_id))


def _vector_count(store: Any, message_id: str) -> int:
    from core.storage import catalog

    with store.db.read() as conn:
        tables = catalog.table_names(conn, "memory_messages")
        return sum(int(conn.exec_driver_sql(f'SELECT count(*) FROM "{t}" WHERE vector_id = ?', (message_id,)).scalar() or 0)
                   for t in tables)


def test_an_edit_changes_the_message_keeps_a_version_and_recall_follows(chat: Any, store: Any) -> None:
    memory, _model = chat
    sardines = _stored(memory)[0]
    assert memory.search("sardines", resource_id="ada", mode="keyword")[0].message_id == sardines.id

    edited = memory.edit_message(sardines.id, resource_id="ada", text="I love grilled octopus with garlic.",
                                 author="studio")
    assert edited.text == "I love grilled octopus with garlic." and _stored(memory)[0].text == edited.text
    # Recall follows: the keyword doc and the vector are the new text's.
    assert memory.search("sardines", resource_id="ada", mode="keyword") == []
    assert memory.search("octopus garlic", resource_id="ada", mode="keyword")[0].message_id == sardines.id
    vector_hits = memory.search("I love grilled octopus with garlic.", resource_id="ada", mode="vector", top_k=1)
    assert vector_hits[0].message_id == sardines.id
    assert _doc_count(store, sardines.id) == 1 and _vector_count(store, sardines.id) == 1

    versions = memory.message_versions(sardines.id, resource_id="ada")
    assert [(v.op, v.author, v.text_before, v.text_after) for v in versions] == [
        ("edit", "studio", "I love grilled sardines with lemon.", "I love grilled octopus with garlic.")]
    assert versions[0].created_at is not None

    # Undo restores the text, and recall follows again; undoing the undo redoes the edit.
    assert memory.undo_message_edit(sardines.id, resource_id="ada").text == "I love grilled sardines with lemon."
    assert memory.search("sardines", resource_id="ada", mode="keyword")[0].message_id == sardines.id
    assert memory.undo_message_edit(sardines.id, resource_id="ada").text == "I love grilled octopus with garlic."
    assert [v.op for v in memory.message_versions(sardines.id, resource_id="ada")] == ["edit", "undo", "undo"]


def test_content_edits_keep_other_parts_and_an_unchanged_edit_writes_nothing(chat: Any, store: Any) -> None:
    memory, _model = chat
    reply = _stored(memory)[1]
    content = {**reply.content, "parts": [*reply.content["parts"], {"type": "reasoning", "reasoning": "why"}]}
    changed = memory.edit_message(reply.id, resource_id="ada", content=content)
    assert any(p["type"] == "reasoning" for p in changed.parts) and changed.text == reply.text
    before = len(memory.message_versions(reply.id, resource_id="ada"))
    memory.edit_message(reply.id, resource_id="ada", text=changed.text)
    assert len(memory.message_versions(reply.id, resource_id="ada")) == before
    with pytest.raises(InvalidArgumentError, match="either text"):
        memory.edit_message(reply.id, resource_id="ada", text="a", content=content)
    with pytest.raises(InvalidArgumentError, match="format-2"):
        memory.edit_message(reply.id, resource_id="ada", content="plain text")
    with pytest.raises(NotFoundError):
        memory.edit_message("no-such-message", resource_id="ada", text="x")


def test_one_resource_cannot_touch_another_resources_messages(chat: Any, store: Any) -> None:
    memory, _model = chat
    first, second = _stored(memory)[:2]
    with pytest.raises(ThreadOwnershipError):
        memory.edit_message(first.id, resource_id="bob", text="hacked")
    with pytest.raises(ThreadOwnershipError):
        memory.delete_messages([second.id, first.id], resource_id="bob")
    with pytest.raises(ThreadOwnershipError):
        memory.message_versions(first.id, resource_id="bob")
    memory.edit_message(first.id, resource_id="ada", text="mine")
    with pytest.raises(ThreadOwnershipError):
        memory.undo_message_edit(first.id, resource_id="bob")
    with pytest.raises(InvalidArgumentError, match="resource"):
        memory.edit_message(first.id, resource_id="", text="x")
    # Nothing of the refused calls was written.
    assert [m.text for m in _stored(memory)[:2]] == ["mine", second.text]
    assert len(memory.message_versions(first.id, resource_id="ada")) == 1
    assert memory.message_versions(second.id, resource_id="ada") == []


def test_a_delete_removes_every_recall_row_and_rebuilds_the_next_passage(chat: Any, store: Any) -> None:
    memory, _model = chat
    messages = _stored(memory)
    gone, after = messages[2], messages[3]  # "We fly to Lisbon in May." and the reply that follows it
    context_before = _rows(store, "SELECT content_hash FROM memory_studio_fts_docs WHERE message_id = ?", after.id) \
        if store.capabilities.full_text == "fts5" else None
    assert memory.delete_messages([gone.id], resource_id="ada") == 1
    assert gone.id not in [m.id for m in _stored(memory)]
    assert _doc_count(store, gone.id) == 0 and _vector_count(store, gone.id) == 0
    assert [h for h in memory.search("Lisbon May fly", resource_id="ada", mode="keyword") if h.message_id == gone.id] == []
    # The next message was embedded with the deleted one as its context: its passage is rebuilt.
    if context_before is not None:
        assert _rows(store, "SELECT content_hash FROM memory_studio_fts_docs WHERE message_id = ?", after.id) \
            != context_before
    assert [v.op for v in memory.message_versions(gone.id, resource_id="ada")] == ["delete"]
    # Undo brings it back, with its recall rows.
    restored = memory.undo_message_edit(gone.id, resource_id="ada")
    assert restored is not None and restored.text == gone.text and restored.created_at == gone.created_at
    assert [m.id for m in _stored(memory)] == [m.id for m in messages]
    assert _doc_count(store, gone.id) == 1 and _vector_count(store, gone.id) == 1


def test_a_delete_is_all_or_nothing(chat: Any, store: Any) -> None:
    memory, _model = chat
    first = _stored(memory)[0]
    with pytest.raises(NotFoundError, match="no-such"):
        memory.delete_messages([first.id, "no-such"], resource_id="ada")
    assert _stored(memory)[0].id == first.id and memory.message_versions(first.id, resource_id="ada") == []


def test_an_edit_or_delete_of_what_was_read_is_refused_when_another_program_changed_it_since(chat: Any,
                                                                                             store: Any) -> None:
    """``expected``: the content a caller read (the Studio's dialog). Another writer's change since is never saved
    over or deleted unseen: refused in the edit's own transaction, nothing written, no version added."""
    from core.edits.messages import EditConflictError

    memory, _ = chat
    first = _stored(memory)[0]
    read = first.content  # what the dialog showed
    memory.edit_message(first.id, resource_id="ada", text="I love grilled sardines.", author="other")
    versions = len(memory.message_versions(first.id, resource_id="ada"))
    with pytest.raises(EditConflictError, match="changed since it was read"):
        memory.edit_message(first.id, resource_id="ada", text="Mine.", expected=read)
    with pytest.raises(EditConflictError, match="Nothing was deleted"):
        memory.delete_messages([first.id, _stored(memory)[1].id], resource_id="ada", expected={first.id: read})
    now = _stored(memory)
    assert now[0].id == first.id and "grilled sardines." in str(now[0].content) and len(now) == 6
    assert len(memory.message_versions(first.id, resource_id="ada")) == versions
    # What it holds now is what the caller read: both go through.
    memory.edit_message(first.id, resource_id="ada", text="Sardines, always.", expected=now[0].content)
    assert memory.delete_messages([first.id], resource_id="ada", expected={first.id: _stored(memory)[0].content}) == 1


def test_earlier_turns_rebuild_as_they_were_and_a_prompt_rebuilt_now_has_the_new_text(chat: Any, store: Any) -> None:
    memory, model = chat
    messages = _stored(memory)
    turns = memory.turns("t1")
    memory.edit_message(messages[0].id, resource_id="ada", text="I love grilled octopus with garlic.")
    memory.delete_messages([messages[3].id], resource_id="ada")  # the reply "Lisbon is lovely."
    for turn, request in zip(turns, model.requests):
        prompt = memory.assemble(thread_id="t1", resource_id="ada", as_of=turn.input_message_id)
        assert prompt.replay is not None and prompt.replay.matches is True
        assert prompt.messages == request.messages
    last = memory.assemble(thread_id="t1", resource_id="ada", as_of=turns[2].input_message_id)
    assert last.replay is not None
    assert dict(last.replay.changed_since) == {messages[0].id: "edited since", messages[3].id: "deleted since"}
    now = memory.assemble(thread_id="t1", resource_id="ada", as_of=turns[2].input_message_id, rebuild="now")
    text = "\n".join(str(m["content"]) for m in now.messages)
    assert "octopus" in text and "sardines" not in text and "Lisbon is lovely." not in text
    # The next live turn sees the new text.
    fresh = memory.assemble(thread_id="t1", resource_id="ada", input="And dessert?")
    assert "octopus" in "\n".join(str(m["content"]) for m in fresh.messages)


def test_an_edited_input_keeps_its_turn_exact(chat: Any, store: Any) -> None:
    memory, model = chat
    turn = memory.turns("t1")[1]
    memory.edit_message(turn.input_message_id, resource_id="ada", text="We fly to Porto in June.")
    prompt = memory.assemble(thread_id="t1", resource_id="ada", as_of=turn.input_message_id)
    assert prompt.replay is not None and prompt.replay.matches is True and prompt.messages == model.requests[1].messages
    assert prompt.replay.changed_since == {turn.input_message_id: "edited since"}
    assert memory.turns("t1")[1].input_text == "We fly to Porto in June."


def test_a_database_without_the_versions_table_refuses_edits(tmp_path: Any, backend: str) -> None:
    if backend != "libsql":
        pytest.skip("a Mastra file is a libSQL file")
    import sqlite3

    from core import open_store
    from core.edits.messages import NoVersionHistoryError

    path = tmp_path / "mastra.db"
    with open_store(path) as store:
        Memory(store).save_messages([_user("m1", "hello")])
        with store.db.write() as conn:
            conn.exec_driver_sql("DROP TABLE memory_studio_message_versions")
            conn.exec_driver_sql("DELETE FROM memory_studio_migrations WHERE name = '0019_message_versions'")
    with open_store(path, read_only=True) as ro:
        assert "0019_message_versions" in ro.pending_migrations()
    # A file we own migrates at open; one that is not ours (no bookkeeping table) is refused.
    with sqlite3.connect(path) as con:
        con.execute("DROP TABLE memory_studio_migrations")
    with open_store(path) as store:
        memory = Memory(store)
        with pytest.raises(NoVersionHistoryError, match="memory-studio migrate"):
            memory.edit_message("m1", resource_id="u", text="changed")
        assert memory.recall(thread_id="t", resource_id="u").messages[0].text == "hello"


def _user(mid: str, text: str) -> Any:
    from core import Message

    return Message.user(text, id=mid, thread_id="t", resource_id="u")


# -- observations -------------------------------------------------------------------------------------------
class _Observer:
    def __init__(self) -> None:
        self.lines = iter([["* 🔴 (09:10) The user is allergic to peanuts.", "* 🟡 (09:11) The user plans a trip to Lisbon."],
                           ["* 🟢 (09:20) The user is packing."], ["* 🟢 (09:30) The user asked about themselves."]])

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> str:
        return "<observations>\nDate: Mar 2, 2026\n" + "\n".join(next(self.lines)) + "\n</observations>"


@pytest.fixture
def observed(store: Any) -> Any:
    clock = FixedClock(datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc), step_ms=1000)
    memory = Memory(store, MemoryOptions(observational_memory={"enabled": True, "message_tokens": 20}), clock=clock,
                    name="om", observer_model=ScriptedModel(_Observer(), name="observer"))
    model = ScriptedModel(["Noted.", "Sure.", "Yes."])
    agent = Agent("om", instructions="Keep notes.", model=model, memory=memory, tracer=False)
    for text in ("A long note: I am allergic to peanuts and we plan a trip to Lisbon in May.",
                 "Another note about packing.", "What do you know about me?"):
        agent.generate(text, memory={"resource": "ada", "thread": "om"})
    return memory, model


def test_an_observation_edit_is_versioned_seen_next_turn_and_replays_as_it_was(observed: Any, store: Any) -> None:
    from core.observational import load_current

    memory, model = observed
    record = load_current(store, thread_id="om")
    assert record is not None and "allergic to peanuts" in record.active_observations
    line = next(x for x in record.active_observations.splitlines() if "peanuts" in x)
    with pytest.raises(ThreadOwnershipError):
        memory.edit_observation(record.id, line, "* 🔴 (09:10) nothing", resource_id="bob")
    changed = memory.edit_observation(record.id, line, "* 🔴 (09:10) The user is allergic to sesame.",
                                      resource_id="ada", author="studio")
    assert "sesame" in changed.active_observations and "peanuts" not in changed.active_observations
    assert changed.observation_token_count > 0
    # The next turn sees the change.
    fresh = memory.assemble(thread_id="om", resource_id="ada", input="Dessert ideas?")
    text = "\n".join(str(m["content"]) for m in fresh.messages)
    assert "sesame" in text and "allergic to peanuts" not in text
    # Earlier turns rebuild with the log of their time.
    for turn, request in zip(memory.turns("om"), model.requests):
        prompt = memory.assemble(thread_id="om", resource_id="ada", as_of=turn.input_message_id)
        assert prompt.replay is not None and prompt.replay.matches is True
        assert prompt.messages == request.messages
    # Delete, then undo twice (the delete, then the edit).
    trip = next(x for x in changed.active_observations.splitlines() if "Lisbon" in x)
    without = memory.delete_observation(record.id, trip, resource_id="ada")
    assert "Lisbon" not in without.active_observations
    assert [v.op for v in memory.observation_versions(record.id, resource_id="ada")] == ["edit", "delete"]
    assert "Lisbon" in memory.undo_observation_edit(record.id, resource_id="ada").active_observations
    with pytest.raises(InvalidArgumentError, match="date, boundary or tag"):
        memory.edit_observation(record.id, "Date: Mar 2, 2026", "Date: Mar 3, 2026", resource_id="ada")
    with pytest.raises(InvalidArgumentError, match="not in the current log"):
        memory.delete_observation(record.id, "* 🔴 no such line", resource_id="ada")
    # Part of a line (the text without its "* 🟡 (09:11)" prefix) names the whole line to give instead.
    with pytest.raises(InvalidArgumentError, match=r"part of the line '\* 🟡 \(09:11\) The user plans a trip to Lisbon\.'"):
        memory.edit_observation(record.id, "The user plans a trip to Lisbon.", "x", resource_id="ada")
    with store.db.read() as conn:
        n = conn.execute(sa.text("SELECT count(*) FROM memory_studio_om_versions")).scalar()
    assert n == 3


def test_deleting_a_thread_deletes_its_message_versions(chat: Any, store: Any) -> None:
    memory, _model = chat
    first = _stored(memory)[0]
    memory.edit_message(first.id, resource_id="ada", text="changed")
    assert _rows(store, "SELECT count(*) FROM memory_studio_message_versions WHERE thread_id = ?", "t1")[0][0] == 1
    memory.delete_thread("t1")
    assert _rows(store, "SELECT count(*) FROM memory_studio_message_versions WHERE thread_id = ?", "t1")[0][0] == 0


def test_deleting_a_thread_deletes_its_observations(observed: Any, store: Any) -> None:
    """A thread's own observation log holds what its messages said: it goes with the thread, or a new thread
    given the same id would start with a deleted conversation's facts in its prompt."""
    from core.observational import load_current

    memory, _model = observed
    assert load_current(store, thread_id="om") is not None
    memory.delete_thread("om")
    assert _rows(store, 'SELECT count(*) FROM mastra_observational_memory WHERE "lookupKey" = ?', "thread:om")[0][0] == 0
    memory.create_thread(thread_id="om", resource_id="ada")
    fresh = memory.assemble(thread_id="om", resource_id="ada", input="What do you know about me?")
    assert "peanuts" not in "\n".join(str(m["content"]) for m in fresh.messages)


def test_a_late_observer_failure_or_turn_end_writes_no_log_for_a_deleted_thread(observed: Any, store: Any) -> None:
    """The observer runs in the background after a turn; when its call failed after the thread was deleted,
    its back-off created the thread's log row again (found when the test above failed once on a loaded
    machine: the scripted observer's fourth call failed after ``delete_thread``), so a new thread given the
    same id started with an old row holding a back-off. Nor does a turn ending after the delete write one."""
    from core.observational import buffer_store, store as om_store
    from core.observational.buffer import Backoff
    from core.observational.records import lookup_key

    memory, _model = observed
    memory.wait_idle(timeout=30)  # the background observer of the last turn has ended
    memory.delete_thread("om")
    key = lookup_key("thread", thread_id="om", resource_id=None)
    buffer_store.record_failure(store, key=key, scope="thread", thread_id="om", resource_id="ada", config={},
                                which="observer", error="the model server is down", now="2026-03-02T09:40:00.000Z",
                                retry=Backoff(failures=1, retry_at="2026-03-02T09:41:00.000Z", error="down"))
    om_store.update_pending(store, record_id=None, key=key, scope="thread", thread_id="om", resource_id="ada",
                            config={}, pending=12, now="2026-03-02T09:40:00.000Z")
    assert _rows(store, 'SELECT count(*) FROM mastra_observational_memory WHERE "lookupKey" = ?', key)[0][0] == 0
    # While the thread exists, both still write (the back-off on a new row, the progress on the initial row).
    memory.create_thread(thread_id="om", resource_id="ada")
    buffer_store.record_failure(store, key=key, scope="thread", thread_id="om", resource_id="ada", config={},
                                which="observer", error="the model server is down", now="2026-03-02T09:40:00.000Z",
                                retry=Backoff(failures=1, retry_at="2026-03-02T09:41:00.000Z", error="down"))
    assert _rows(store, 'SELECT count(*) FROM mastra_observational_memory WHERE "lookupKey" = ?', key)[0][0] == 1


def test_an_edit_that_would_leave_a_message_empty_is_refused_and_changes_nothing(chat: Any, store: Any) -> None:
    # Found by the Studio's QA pass: Edit Message saved a user message with empty text, which many model
    # servers refuse, so every later turn of the thread could fail. Delete is the way to remove one.
    memory, _model = chat
    first = _stored(memory)[0]
    before = len(memory.message_versions(first.id, resource_id="ada"))
    for blank in ("", "   \n"):
        with pytest.raises(InvalidArgumentError, match="delete the message instead"):
            memory.edit_message(first.id, resource_id="ada", text=blank)
    assert _stored(memory)[0].text == first.text
    assert len(memory.message_versions(first.id, resource_id="ada")) == before
    # A message that holds a tool call may lose its words: the call is still sent.
    call = Message.create("assistant", [{"type": "text", "text": "Let me check."}, {
        "type": "tool-invocation", "toolInvocation": {"state": "result", "toolCallId": "c1", "toolName": "weather",
                                                      "args": {}, "result": "sunny"}}], thread_id="t1",
        resource_id="ada")
    memory.save_messages([call])
    assert memory.edit_message(call.id, resource_id="ada", text="").text == ""


def test_a_resource_scoped_logs_thread_tags_are_structure_not_observations() -> None:
    """A resource-scoped log wraps each thread's chunk in ``<thread id="…">`` … ``</thread>``; the opening tag
    carries an attribute, and was taken for an observation the user could edit or delete (the Studio's
    Observations pane listed it among the editable lines)."""
    from core.edits.observations import is_observation_line
    from core.observational.resource_scope import attributed

    log = "Date: Mar 3, 2025\n" + attributed("trip-1", "* 🔴 (09:00) Ada booked the ferry.")
    assert [ln for ln in log.splitlines() if is_observation_line(ln)] == ["* 🔴 (09:00) Ada booked the ferry."]
    assert not is_observation_line('  <thread id="a b" >  ') and is_observation_line('<thread id="x"> said hi')
