"""A database shared with Mastra (``@mastra/memory`` 1.31 on ``@mastra/libsql`` 1.23), cloning and what Mastra's
observational memory and schema-mode working memory leave in it. The rows are what a real Mastra wrote (an
Agent with observational memory on, its model a local OpenAI-protocol server; ``Memory.cloneThread``), copied
here and written with SQL so the suite runs without node; message contents are cut to their text."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import libsql_experimental as libsql
import pytest

from core import Memory, MemoryOptions, Message, open_store
from core.embedding import HashingEmbedder
from core.observational.store import thread_hints
from core.storage import schema

STAMP = "2026-12-07T16:05:50.138Z"
# The thread's hints as Mastra 1.71 keeps them: a cursor, no ``lastObservedAt``.
HINTS = {"mastra": {"om": {"suggestedResponse": "Ask about dates.", "currentTask": "Primary: plan the Oslo trip (4)",
                           "extracted": {}, "lastObservedMessageCursor": {
                               "createdAt": "2026-12-07T16:05:50.946Z", "id": "1516e61f-0ef6-40a6-a41e-6ea40833027e"}}},
         "workingMemory": "# Notes\n- skis: yes\n"}
# (id, role, createdAt) of the thread's messages, oldest first.
MESSAGES = [
    ("cb768b64-6ceb-4858-bd04-a247702c31bf", "user", "2026-12-07T16:05:50.041Z"),
    ("074949f6-c4b7-4f2c-94d1-1ca00b671a2b", "assistant", "2026-12-07T16:05:50.161Z"),
    ("d9500426-b8f8-4ab2-9b16-1e399a7f2d0d", "user", "2026-12-07T16:05:50.573Z"),
    ("cb0d8896-ec2f-40be-95cc-631b1446d61a", "assistant", "2026-12-07T16:05:50.608Z"),
    ("e9c82e4c-b9cd-4d59-bd1d-3b4409d1d27f", "user", "2026-12-07T16:05:50.780Z"),
    ("f5b5fb92-3253-41a4-b3c4-10d9cd726f0a", "assistant", "2026-12-07T16:05:50.804Z"),
    ("1516e61f-0ef6-40a6-a41e-6ea40833027e", "user", "2026-12-07T16:05:50.946Z"),
    ("bd773554-f96d-4766-ad87-1e810e61bf6d", "assistant", "2026-12-07T16:05:50.962Z"),
]
OBSERVED = [m[0] for m in MESSAGES[:7]]
ACTIVE = ("Date: Nov 20, 2026\n* 🔴 (09:01) User said fact number 1 about Oslo trip.\n\n"
          "--- message boundary (2026-12-07T16:05:50.573Z) ---\n\n"
          "Date: Nov 20, 2026\n* 🔴 (09:02) User said fact number 2 about Oslo trip.")
CONFIG = ('{"observation":{"messageTokens":60,"maxTokensPerBatch":10000,"bufferTokens":false},'
          '"reflection":{"observationTokens":100000},"scope":"thread"}')


def _text(i: int) -> str:
    return f"Turn {i // 2}: I am going to Oslo and I want to ski" if i % 2 == 0 else "Noted, thanks."


def _mastra_file(path: Path) -> None:
    con = sqlite3.connect(path)
    for ddl in [*schema.MASTRA_MEMORY_DDL, *schema.OBSERVATIONAL_MEMORY_DDL]:
        con.execute(ddl)
    con.execute("INSERT INTO mastra_threads VALUES ('om-thread', 'cleo', '', ?, ?, ?)",
                (json.dumps(HINTS, separators=(",", ":")), STAMP, "2026-12-07T16:05:51.026Z"))
    for i, (mid, role, created) in enumerate(MESSAGES):
        content = {"format": 2, "parts": [{"type": "text", "text": _text(i)}], "content": _text(i)}
        con.execute('INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
                    "VALUES (?, 'om-thread', ?, ?, 'v2', ?, 'cleo')",
                    (mid, json.dumps(content, separators=(",", ":")), role, created))
    con.execute(
        'INSERT INTO mastra_observational_memory (id, "lookupKey", scope, "resourceId", "threadId", '
        '"activeObservations", "originType", config, "generationCount", "lastObservedAt", "pendingMessageTokens", '
        '"totalTokensObserved", "observationTokenCount", "isObserving", "isReflecting", "observedMessageIds", '
        '"observedTimezone", "isBufferingObservation", "isBufferingReflection", "lastBufferedAtTokens", '
        '"createdAt", "updatedAt") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
        ("547af420-63b7-4569-bef0-27c1108ab29c", "thread:om-thread", "thread", "cleo", "om-thread", ACTIVE,
         "initial", CONFIG, 0, "2026-12-07T16:05:50.946Z", 0, 454, 193, 0, 0, json.dumps(OBSERVED), "UTC", 0, 0, 0,
         STAMP, "2026-12-07T16:05:51.026Z"))
    con.commit()
    con.close()


@pytest.fixture
def mastra_db(tmp_path: Path) -> Path:
    path = tmp_path / "mastra.db"
    _mastra_file(path)
    with open_store(path) as store:
        store.migrate()
    return path


def _om_rows(path: Path) -> dict[str, dict[str, Any]]:
    con = sqlite3.connect(path)
    con.row_factory = sqlite3.Row
    rows = {r["threadId"] or r["lookupKey"]: dict(r) for r in con.execute("SELECT * FROM mastra_observational_memory")}
    con.close()
    return rows


def test_a_clone_has_mastras_metadata_working_memory_and_observations(mastra_db: Path) -> None:
    """What Mastra 1.71's cloneThread made of this thread (its last four messages): metadata ``{clone:
    {sourceThreadId, clonedAt, lastMessageId}, workingMemory}`` (the source's hints, which name the source's
    messages, not carried), an untitled source's clone untitled, and a copy of the observations whose
    ``observedMessageIds`` are the copies' (of the three observed messages copied). Ours carried every key of
    the source's metadata (its observation cursor among them), titled it "Clone of ", and left the clone without
    observations: a turn there sent the four copied messages and nothing the observer had noted."""
    with open_store(mastra_db) as store:
        memory = Memory(store, MemoryOptions(observational_memory={"message_tokens": 60, "buffer_tokens": False},
                                             working_memory={"enabled": True, "scope": "thread"}))
        thread, copies = memory.clone_thread("om-thread", new_thread_id="om-clone", message_limit=4)
        assert thread.title == ""
        assert thread.metadata == {
            "clone": {"sourceThreadId": "om-thread", "clonedAt": thread.metadata["clone"]["clonedAt"],
                      "lastMessageId": "bd773554-f96d-4766-ad87-1e810e61bf6d"},
            "workingMemory": "# Notes\n- skis: yes\n"}
        assert memory.get_working_memory(thread_id="om-clone", resource_id="cleo") == "# Notes\n- skis: yes\n"
        sent = memory.assemble(thread_id="om-clone", resource_id="cleo", input="next").messages
    assert [c.created_at.strftime("%S.%f") for c in copies] == ["50.780000", "50.804000", "50.946000", "50.962000"]
    rows = _om_rows(mastra_db)
    clone, source = rows["om-clone"], rows["om-thread"]
    assert json.loads(clone["observedMessageIds"]) == [c.id for c in copies[:3]]
    assert clone["lookupKey"] == "thread:om-clone" and clone["resourceId"] == "cleo" and clone["id"] != source["id"]
    same = {k for k in source if k not in ("id", "lookupKey", "threadId", "observedMessageIds", "createdAt",
                                           "updatedAt", "metadata")}
    assert {k: clone[k] for k in same} == {k: source[k] for k in same}
    # The turn reads the clone's observations and only the message after them (Mastra's getContext: the reply).
    assert any("fact number 2" in str(m["content"]) for m in sent if m["role"] == "system")
    assert [m["content"] for m in sent if m["role"] == "assistant"] == ["Noted, thanks."]


def test_a_clone_to_another_resource_never_takes_the_source_resources_memory(tmp_path: Path) -> None:
    """Resource scope: a clone in the same resource shares its working memory and observations (nothing is
    copied). A clone given to another resource gets its messages, and neither of the source resource's: Mastra
    copies both (its observations hold the source user's other threads, here a diagnosis, and the copy replaced
    the destination's working memory and outranked its own observations), we differ on purpose (found by
    s36-trust7)."""
    path = tmp_path / "res.db"
    with open_store(path) as store:
        store.migrate()
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "resource"}))
        memory.create_thread(resource_id="ada", thread_id="src", title="Trip")
        memory.update_working_memory(thread_id="src", resource_id="ada", working_memory="# User\n- Name: Ada\n")
        memory.update_working_memory(thread_id=None, resource_id="eve", working_memory="# User\n- Name: Eve\n")
        memory.save_messages([Message.user("I fly to Oslo", id="m1", thread_id="src", resource_id="ada")])
    con = sqlite3.connect(path)
    con.execute(  # a resource's observations as Mastra keeps them: each thread's lines in its own tag
        'INSERT INTO mastra_observational_memory (id, "lookupKey", scope, "resourceId", "threadId", '
        '"activeObservations", "originType", config, "generationCount", "pendingMessageTokens", '
        '"totalTokensObserved", "observationTokenCount", "isObserving", "isReflecting", "observedMessageIds", '
        '"isBufferingObservation", "isBufferingReflection", "lastBufferedAtTokens", "createdAt", "updatedAt") '
        "VALUES ('r-1', 'resource:ada', 'resource', 'ada', NULL, ?, 'initial', ?, 0, 0, 10, 5, 1, 0, '[\"m1\"]', "
        "0, 0, 0, ?, ?)", ('<thread id="src">\n* 🔴 (09:00) User flies to Oslo.\n</thread>\n'
                           '<thread id="other">\n* 🔴 (10:00) User has lupus.\n</thread>', CONFIG, STAMP, STAMP))
    con.execute(
        'INSERT INTO mastra_observational_memory (id, "lookupKey", scope, "resourceId", "threadId", '
        '"activeObservations", "originType", config, "generationCount", "pendingMessageTokens", '
        '"totalTokensObserved", "observationTokenCount", "isObserving", "isReflecting", "observedMessageIds", '
        '"isBufferingObservation", "isBufferingReflection", "lastBufferedAtTokens", "createdAt", "updatedAt") '
        "VALUES ('r-2', 'resource:eve', 'resource', 'eve', NULL, ?, 'initial', ?, 0, 0, 10, 5, 0, 0, '[]', "
        "0, 0, 0, ?, ?)", ('<thread id="eves">\n* 🔴 (08:00) Eve likes tea.\n</thread>', CONFIG, STAMP, STAMP))
    con.commit()
    con.close()
    with open_store(path) as store:
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "resource"}))
        memory.clone_thread("src", new_thread_id="same")
        _, moved = memory.clone_thread("src", new_thread_id="moved", resource_id="eve")
        assert memory.get_working_memory(resource_id="ada") == "# User\n- Name: Ada\n"
        assert memory.get_working_memory(resource_id="eve") == "# User\n- Name: Eve\n"
        assert [m.text for m in moved] == ["I fly to Oslo"] and moved[0].resource_id == "eve"
        sent = memory.assemble(thread_id="moved", resource_id="eve", input="next").messages
        assert not any("lupus" in str(m["content"]) or "Ada" in str(m["content"]) for m in sent)
        assert memory.get_thread("same").metadata == {  # type: ignore[union-attr]
            "clone": {"sourceThreadId": "src", "clonedAt": memory.get_thread("same").metadata["clone"]["clonedAt"],  # type: ignore[union-attr]
                      "lastMessageId": "m1"}}
    rows = _om_rows(path)
    assert sorted(rows) == ["resource:ada", "resource:eve"]
    assert rows["resource:eve"]["id"] == "r-2" and "lupus" not in rows["resource:eve"]["activeObservations"]


def test_a_clone_with_recall_on_is_found_by_search(mastra_db: Path) -> None:
    """Mastra embeds a clone's messages when semantic recall is on, so its resource-scoped recall finds them;
    ours copied them unindexed (a search of the resource never found the clone's messages)."""
    with open_store(mastra_db) as store:
        memory = Memory(store, MemoryOptions(semantic_recall={"top_k": 3, "message_range": 0, "scope": "resource"}),
                        embedder=HashingEmbedder(384))
        _, copies = memory.clone_thread("om-thread", new_thread_id="om-clone", message_limit=2)
        memory.wait_idle(10)
        hits = memory.search("Turn 3 Oslo ski", resource_id="cleo", thread_id="om-clone", mode="vector", top_k=3)
    assert copies[0].id in {h.message_id for h in hits}
    con = libsql.connect(str(mastra_db))
    ids = {r[0] for r in con.execute("SELECT json_extract(metadata, '$.message_id') FROM memory_messages_384 "
                                     "NOT INDEXED").fetchall()}
    con.close()
    assert {c.id for c in copies} <= ids


def test_mastras_hints_date_the_last_observation() -> None:
    """Mastra 1.71 keeps no ``lastObservedAt`` among a thread's hints, only the cursor: the Observations pane
    said "Last observed: —" on every thread Mastra observed. The cursor's time is that time."""
    hints = thread_hints(HINTS)
    assert hints.last_observed_at == "2026-12-07T16:05:50.946Z"
    assert hints.current_task == "Primary: plan the Oslo trip (4)"
    # A thread we observed, then Mastra: Mastra moved the cursor and left our ``lastObservedAt`` as it was.
    both = {"mastra": {"om": {"lastObservedAt": "2026-12-07T16:29:23.889Z", "lastObservedMessageCursor": {
        "createdAt": "2026-12-07T16:30:12.100Z", "id": "f221ad8a-27ff-429b-8d21-9e9612cde98a"},
        "currentTask": "Primary: plan the Oslo trip (4)", "suggestedResponse": "Ask about dates.", "extracted": {}}}}
    assert thread_hints(both).last_observed_at == "2026-12-07T16:30:12.100Z"


def test_schema_working_memory_is_stored_as_mastra_stores_it(tmp_path: Path) -> None:
    """Mastra stores schema-mode working memory with ``JSON.stringify`` (no spaces); ours was stored with
    Python's ``", "`` and ``": "``, so the same object was another text (and more tokens in every prompt)
    depending on who wrote it. The expected text is the one Mastra wrote for this object."""
    path = tmp_path / "wm.db"
    schema_ = {"type": "object", "properties": {
        "name": {"type": "string"}, "prefs": {"type": "object", "properties": {
            "food": {"type": "string"}, "color": {"type": "string"}}},
        "tags": {"type": "array", "items": {"type": "string"}}}}
    with open_store(path) as store:
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "thread", "schema": schema_}))
        memory.create_thread(resource_id="bob", thread_id="bob-food", title="Food prefs")
        memory.update_working_memory(thread_id="bob-food", resource_id="bob",
                                     working_memory={"name": "Bob", "prefs": {"food": "ramen"}})
        memory.merge_working_memory(thread_id="bob-food", resource_id="bob",
                                    patch={"prefs": {"color": "green"}, "tags": ["vip"]})
        stored = memory.get_thread("bob-food").metadata["workingMemory"]  # type: ignore[union-attr]
    assert stored == '{"name":"Bob","prefs":{"food":"ramen","color":"green"},"tags":["vip"]}'


@pytest.mark.backends
def test_a_clone_copies_the_thread_observations_on_every_backend(store: Any) -> None:
    """The copied generation is written through the store (Postgres's typed columns included)."""
    from core.observational.store import OM, _new_row
    from core.timeutil import iso_now

    memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "thread"}))
    memory.create_thread(resource_id="cleo", thread_id="t", title="Trip")
    memory.save_messages([Message.user(f"m{i}", id=f"m{i}", thread_id="t", resource_id="cleo") for i in range(3)])
    row = {**_new_row("thread:t", "thread", "t", "cleo", {"scope": "thread"}, iso_now()),
           "activeObservations": "* 🔴 (09:00) User said m0.", "observedMessageIds": '["m0", "m1"]',
           "isObserving": 1}
    with store.db.write() as conn:
        conn.execute(OM.insert().values(**row))
    _, copies = memory.clone_thread("t", new_thread_id="c", message_limit=2)
    with store.db.read() as conn:
        copy = conn.execute(OM.select().where(OM.c.lookupKey == "thread:c")).mappings().one()
    assert copy["activeObservations"] == "* 🔴 (09:00) User said m0." and not copy["isObserving"]
    assert json.loads(copy["observedMessageIds"]) == [copies[0].id]  # m1's copy; m0 was not copied
    assert copy["threadId"] == "c" and copy["resourceId"] == "cleo"
