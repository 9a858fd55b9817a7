"""A database shared with Mastra (``@mastra/memory`` 1.31 on ``@mastra/libsql`` 1.23): the rows here are
the shapes a real Mastra wrote in such a file (its DDL, JSONB thread metadata, vector rows with a random
``vector_id`` and the embedded text in their metadata, libSQL's DiskANN index with its shadow table,
messages whose tool calls live only in the legacy ``toolInvocations`` field, a file part repeated in
``experimental_attachments``), written with SQL so the suite runs without node."""

from __future__ import annotations

import json
from pathlib import Path

import libsql_experimental as libsql
import pytest

from core import Memory, MemoryOptions, open_store
from core.embedding import HashingEmbedder

# Mastra's own DDL, as its LibSQLStore / LibSQLVector created it.
MASTRA_DDL = [
    'CREATE TABLE mastra_threads (\n  "id" TEXT NOT NULL PRIMARY KEY,\n  "resourceId" TEXT NOT NULL,\n  "title" TEXT NOT NULL,\n'
    '  "metadata" TEXT,\n  "createdAt" TEXT NOT NULL,\n  "updatedAt" TEXT NOT NULL\n)',
    'CREATE TABLE mastra_messages (\n  "id" TEXT NOT NULL PRIMARY KEY,\n  "thread_id" TEXT NOT NULL,\n  "content" TEXT NOT NULL,\n'
    '  "role" TEXT NOT NULL,\n  "type" TEXT NOT NULL,\n  "createdAt" TEXT NOT NULL,\n  "resourceId" TEXT\n)',
    'CREATE TABLE mastra_resources (\n  "id" TEXT NOT NULL PRIMARY KEY,\n  "workingMemory" TEXT,\n  "metadata" TEXT,\n'
    '  "createdAt" TEXT NOT NULL,\n  "updatedAt" TEXT NOT NULL\n)',
    'CREATE INDEX idx_messages_thread_created_at ON mastra_messages (thread_id, "createdAt")',
]
VECTOR_DDL = [
    "CREATE TABLE memory_messages_384 (\n            id SERIAL PRIMARY KEY,\n            vector_id TEXT UNIQUE NOT NULL,\n"
    "            embedding F32_BLOB(384),\n            metadata TEXT DEFAULT '{}'\n          )",
    "CREATE INDEX memory_messages_384_vector_idx\n          ON memory_messages_384 (libsql_vector_idx(embedding))\n        ",
]
STAMP = "2026-12-03T17:56:29.183Z"
# (id, thread, resource, role, text) of the messages Mastra saved with semantic recall on.
MESSAGES = [
    ("s-1", "sec", "dee", "user", "my bank password is hunter2 zebra"),
    ("s-2", "sec", "dee", "assistant", "Please do not share passwords."),
    ("s-3", "sec", "dee", "user", "ok, lunch tomorrow at noon"),
    ("k-1", "keep", "dee", "user", "my cat is called Tofu"),
    ("e-1", "eve-t", "eve", "user", "eve's own note about hunter2"),
]


def _mastra_file(path: Path) -> None:
    emb = HashingEmbedder(384)  # the vectors' values do not matter here, only where they are
    conn = libsql.connect(str(path))
    for ddl in [*MASTRA_DDL, *VECTOR_DDL]:
        conn.execute(ddl)
    threads = {(t, r) for _, t, r, _, _ in MESSAGES}
    for tid, rid in sorted(threads):
        conn.execute('INSERT INTO mastra_threads (id, "resourceId", title, metadata, "createdAt", "updatedAt") '
                     "VALUES (?, ?, ?, jsonb(?), ?, ?)", (tid, rid, tid.title(), '{"channel":"web"}', STAMP, STAMP))
    for i, (mid, tid, rid, role, text) in enumerate(MESSAGES):
        created = f"2026-11-05T08:00:0{i}.000Z"
        content = json.dumps({"format": 2, "parts": [{"type": "text", "text": text}]}, separators=(",", ":"))
        conn.execute('INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
                     "VALUES (?, ?, ?, ?, 'v2', ?, ?)", (mid, tid, content, role, created, rid))
        meta = {"channel": "web", "message_id": mid, "thread_id": tid, "resource_id": rid, "role": role,
                "content": text, "created_at": created}
        conn.execute("INSERT INTO memory_messages_384 (vector_id, embedding, metadata) VALUES (?, vector32(?), ?)",
                     (f"964c3d93-c8df-4e8c-a7b0-d0b2142d14{i:02d}", json.dumps([float(x) for x in emb.embed([text])[0]]),
                      json.dumps(meta, separators=(",", ":"))))
    conn.commit()
    conn.close()


def _vector_rows(path: Path) -> list[tuple[str, str, str]]:
    """(table, message id, text) of every vector row of every vector table."""
    conn = libsql.connect(str(path))
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'memory_messages%' "
        "AND name NOT LIKE '%shadow'").fetchall()]
    rows = [(t, r[0], r[1]) for t in tables for r in conn.execute(
        f"SELECT json_extract(metadata, '$.message_id'), json_extract(metadata, '$.content') FROM \"{t}\" NOT INDEXED").fetchall()]
    conn.close()
    return sorted(rows)


@pytest.fixture
def mastra_db(tmp_path: Path) -> Path:
    path = tmp_path / "mastra.db"
    _mastra_file(path)
    assert (path.parent / "mastra.db").exists()
    return path


def _migrated(path: Path) -> None:
    with open_store(path) as store:
        store.migrate()


def test_forgetting_a_resource_of_a_mastra_database_with_semantic_recall(mastra_db: Path):
    """libSQL keeps a DiskANN index's data in ``memory_messages_384_vector_idx_shadow``, a table that shares
    the vector tables' prefix: forget read it as one and stopped with "no such column: metadata", having
    deleted nothing (``memory-studio forget`` printed only that error)."""
    for migrate in (False, True):
        path = mastra_db.with_name(f"forget-{migrate}.db")
        path.write_bytes(mastra_db.read_bytes())
        if migrate:
            _migrated(path)
        with open_store(path) as store:
            report = Memory(store).forget_resource("dee")
            assert report.removed["vectors (memory_messages_384)"] == 4
            assert not any("shadow" in name for name in report.removed)
        assert [(m, t) for _, m, t in _vector_rows(path)] == [("e-1", "eve's own note about hunter2")]


@pytest.mark.parametrize("recall", [False, True])
def test_deleting_a_thread_removes_mastras_vectors_of_it(mastra_db: Path, recall: bool):
    """Mastra's deleteThread removes the thread's vectors from every message index. Ours removed them only
    from the table of its own embedder (here 64 dimensions; Mastra's are 384) and, with recall off, only
    from tables it had indexed itself: the thread's text stayed in Mastra's rows, and Mastra's semantic
    recall kept finding it."""
    _migrated(mastra_db)
    with open_store(mastra_db) as store:
        options = MemoryOptions(semantic_recall={"top_k": 2, "message_range": 0} if recall else False)
        memory = Memory(store, options, embedder=HashingEmbedder(64) if recall else None)
        memory.delete_thread("sec")
        memory.wait_idle(10)
    assert [m for _, m, _ in _vector_rows(mastra_db)] == ["e-1", "k-1"]


def test_deleting_a_thread_of_an_unmigrated_mastra_database_removes_its_vectors(mastra_db: Path):
    with open_store(mastra_db) as store:
        Memory(store).delete_thread("sec")
    assert [m for _, m, _ in _vector_rows(mastra_db)] == ["e-1", "k-1"]


@pytest.mark.parametrize("dim", [384, 64])
def test_an_edited_or_deleted_mastra_message_leaves_no_vector_with_its_old_text(mastra_db: Path, dim: int):
    """Editing a message Mastra had embedded wrote our vector beside Mastra's row (its own ``vector_id``, or
    in another dimension's table) and left that row as it was: the old text ("hunter2") stayed in the file
    and a search for it still found the message, with Mastra's recall too. A deleted message's Mastra row
    stayed in the other table. Mastra removes every vector of a message when it changes or goes; so do we
    now, keeping the rows whose text is still the message's."""
    _migrated(mastra_db)
    with open_store(mastra_db) as store:
        memory = Memory(store, MemoryOptions(semantic_recall={"top_k": 2, "message_range": 0}),
                        embedder=HashingEmbedder(dim))
        memory.edit_message("s-1", resource_id="dee", text="my bank password is [removed]")
        memory.delete_messages(["s-3"], resource_id="dee")
        memory.wait_idle(10)
        hits = memory.search("hunter2 zebra", resource_id="dee", top_k=5, mode="vector")
        assert all(h.message_id != "s-1" or h.score < 0.5 for h in hits)
    rows = _vector_rows(mastra_db)
    assert not [r for r in rows if r[1] == "s-1" and "hunter2" in r[2]]
    assert not [r for r in rows if r[1] == "s-3"]
    assert ("memory_messages_384", "s-2", "Please do not share passwords.") in rows  # unchanged: kept
    assert ("memory_messages_384", "e-1", "eve's own note about hunter2") in rows  # another message: kept
    assert [r for r in rows if r[1] == "s-1"] == [(f"memory_messages_{dim}", "s-1", "my bank password is [removed]")]



def test_an_edit_made_with_recall_off_leaves_no_vector_with_the_old_text(mastra_db: Path):
    """The Studio edits with the thread's agent's options, which for a Mastra file (no agent registered)
    have recall off: the edit and the delete then left Mastra's rows as they were, the old text in them
    until some recall write, which never touches Mastra's rows. They go at once now."""
    _migrated(mastra_db)
    with open_store(mastra_db) as store:
        memory = Memory(store, MemoryOptions())
        memory.edit_message("s-1", resource_id="dee", text="my bank password is [removed]")
        memory.delete_messages(["s-3"], resource_id="dee")
    assert [m for _, m, _ in _vector_rows(mastra_db)] == ["e-1", "k-1", "s-2"]

def _legacy_thread(path: Path) -> None:
    """Rows a Mastra saved as AI SDK v4 clients shape them (format 2)."""
    conn = libsql.connect(str(path))
    png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    contents = [
        ("lg-2", "assistant", {"format": 2, "parts": [{"type": "text", "text": "A cat, and a pdf."}], "toolInvocations": [
            {"state": "result", "toolCallId": "lc-1", "toolName": "vision", "args": {"url": "cat.png"}, "result": {"label": "cat"}},
            {"state": "call", "toolCallId": "lc-2", "toolName": "pending", "args": {}}]}),
        ("lg-3", "user", {"format": 2, "parts": [{"type": "text", "text": "thanks"},
                                                 {"type": "file", "mimeType": "image/png", "data": png}],
                          "experimental_attachments": [{"name": "dog.png", "contentType": "image/png", "url": png}]}),
        ("lg-4", "assistant", {"format": 2, "parts": [
            {"type": "tool-invocation", "toolInvocation": {"state": "result", "toolCallId": "lc-3", "toolName": "a",
                                                           "args": {}, "result": 1}},
            {"type": "text", "text": "done"}],
            "toolInvocations": [{"state": "result", "toolCallId": "lc-4", "toolName": "b", "args": {}, "result": 2}]}),
    ]
    conn.execute('INSERT INTO mastra_threads (id, "resourceId", title, metadata, "createdAt", "updatedAt") '
                 "VALUES ('lg', 'eve', 'legacy', jsonb('{}'), ?, ?)", (STAMP, STAMP))
    for i, (mid, role, content) in enumerate(contents):
        conn.execute('INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
                     "VALUES (?, 'lg', ?, ?, 'v2', ?, 'eve')",
                     (mid, json.dumps(content, separators=(",", ":")), role, f"2026-11-07T08:00:0{i}.000Z"))
    conn.commit()
    conn.close()


def test_the_prompt_over_mastras_legacy_rows_is_what_mastra_sends(mastra_db: Path):
    """What Mastra 1.71's Agent sent the model over these rows (captured from a real run): the calls kept
    only in ``toolInvocations`` (its working-memory hiding leaves that field; AI SDK v4 clients write only
    there) go out before the text, the unanswered one left out; a file kept both as a part and as an
    attachment goes once; ``toolInvocations`` beside tool-invocation parts are not read. We sent the
    first message as text only and the image of the second twice."""
    _legacy_thread(mastra_db)
    with open_store(mastra_db, read_only=True) as store:
        sent = Memory(store, MemoryOptions(last_messages=10)).assemble(
            thread_id="lg", resource_id="eve", input="next").messages
    assert [(m["role"], m.get("tool_call_id") or [c["id"] for c in m.get("tool_calls") or ()]) for m in sent] == [
        ("assistant", ["lc-1"]), ("tool", "lc-1"), ("assistant", []), ("user", []),
        ("assistant", ["lc-3"]), ("tool", "lc-3"), ("assistant", []), ("user", [])]
    assert sent[0]["tool_calls"][0]["function"] == {"name": "vision", "arguments": '{"url": "cat.png"}'}
    assert sent[1]["content"] == '{"label": "cat"}' and sent[2]["content"] == "A cat, and a pdf."
    assert [p["type"] for p in sent[3]["content"]] == ["text", "image_url"]


def test_mastras_signals_go_to_the_model_in_their_tags(mastra_db: Path):
    """Signals Mastra stored (role ``signal``, ``metadata.signal``) went out as their bare text: a
    reminder read like something the user typed. Mastra 1.71 sends every signal but a plain user one as
    the user message ``<tag attributes>text</tag>`` (escaped; ``<tag />`` when empty); these rows and
    the texts expected are a real Mastra's."""
    signals = [
        ("system-reminder", [{"type": "text", "text": "Reminder: the user prefers short answers."}],
         {"type": "system-reminder", "tagName": "system-reminder"}),
        ("user", [{"type": "text", "text": "typed from the studio harness"}], {"type": "user"}),
        ("notification", [{"type": "text", "text": 'Build <done> & "green"'}],
         {"type": "notification", "tagName": "notification",
          "attributes": {"source": "ci", "count": 3, "ok": True, "gone": None, "q": 'a"b<c'}}),
        ("state", [{"type": "text", "text": ""}], {"type": "state", "tagName": "state", "attributes": {"id": "x"}}),
        ("reactive", [{"type": "text", "text": "line one"}, {"type": "text", "text": "line two"}], {"type": "reactive"}),
        ("user", [{"type": "text", "text": "from user with attrs"}], {"type": "user", "attributes": {"via": "slack"}}),
    ]
    conn = libsql.connect(str(mastra_db))
    conn.execute('INSERT INTO mastra_threads (id, "resourceId", title, metadata, "createdAt", "updatedAt") '
                 "VALUES ('sg', 'gil', 'signals', NULL, ?, ?)", (STAMP, STAMP))
    for i, (kind, parts, signal) in enumerate(signals):
        content = {"format": 2, "parts": parts, "metadata": {"signal": signal}}
        conn.execute('INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
                     "VALUES (?, 'sg', ?, 'signal', ?, ?, 'gil')",
                     (f"sg-{i}", json.dumps(content, separators=(",", ":")), kind, f"2026-11-09T08:00:0{i}.000Z"))
    conn.commit()
    conn.close()
    with open_store(mastra_db, read_only=True) as store:
        sent = Memory(store, MemoryOptions(last_messages=10)).assemble(thread_id="sg", resource_id="gil", input="next").messages
    assert [(m["role"], m["content"]) for m in sent] == [
        ("user", "<system-reminder>Reminder: the user prefers short answers.</system-reminder>"),
        ("user", "typed from the studio harness"),
        ("user", '<notification source="ci" count="3" ok="true" q="a&quot;b&lt;c">Build &lt;done&gt; &amp; "green"</notification>'),
        ("user", '<state id="x" />'),
        ("user", "<system-reminder>line one\nline two</system-reminder>"),
        ("user", '<user via="slack">from user with attrs</user>'),
        ("user", "next"),
    ]
