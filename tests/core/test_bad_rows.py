"""A stored value that is not valid UTF-8 never makes a thread unreadable (issue 9, item 14).

libSQL panics (``PanicException``, not an ``Exception``) when it fetches such a text value. The
bad rows here are written the way a crashed or foreign writer leaves them: raw bytes cast to TEXT.
"""

from __future__ import annotations

import io
import json

import pytest

from core import Memory, MemoryOptions, Message
from core.cli import main as cli_main

BAD = "CAST(X'{}' AS TEXT)"


def _hex(text: str) -> str:
    return text.encode("utf-8").hex()


def _bad_content(text: str) -> str:
    """Format-2 JSON whose text part holds one invalid byte (0xC3 followed by '(')."""
    good = json.dumps({"format": 2, "parts": [{"type": "text", "text": text + "@"}]})
    return good.encode("utf-8").hex().replace("40", "c328", 1)  # '@' -> 0xC3 '('


@pytest.fixture
def spoiled(store):
    memory = Memory(store, MemoryOptions(last_messages=10))
    memory.create_thread(resource_id="u1", thread_id="t1", title="Trip")
    memory.save_messages([
        Message.user("first", thread_id="t1", resource_id="u1"),
        Message.assistant("second", thread_id="t1", resource_id="u1"),
    ])
    with store.db.write() as conn:
        conn.exec_driver_sql(
            "INSERT INTO mastra_messages (id, thread_id, content, role, type, \"createdAt\", \"resourceId\") "
            f"VALUES ('bad', 't1', {BAD.format(_bad_content('caf'))}, 'user', 'v2', '2099-01-01T00:00:00.000Z', 'u1')"
        )
        conn.exec_driver_sql(
            f"UPDATE mastra_threads SET title = {BAD.format(_hex('Trip') + 'ff')} WHERE id = 't1'"
        )
    return memory


def test_a_bad_byte_in_a_message_leaves_the_thread_readable(spoiled):
    messages = spoiled.recall(thread_id="t1", resource_id="u1").messages
    assert [m.text for m in messages[:2]] == ["first", "second"]
    bad = messages[-1]
    assert bad.id == "bad" and bad.invalid_utf8 and bad.text == "caf\ufffd("
    assert not messages[0].invalid_utf8
    assert bad.to_dict()["invalidUtf8"] is True
    # Every other read path of the store survives it too.
    store = spoiled.store
    assert [m.id for m in store.memory.get_messages(["bad"])] == ["bad"]
    assert store.memory.list_messages_page("t1", 0, 10)[-1].invalid_utf8
    assert [m.id for m in store.memory.search_text("caf")] == ["bad"]


def test_a_bad_byte_in_a_title_leaves_listing_and_the_cli_working(spoiled, db_path):
    store = spoiled.store
    assert store.memory.get_thread("t1").title == "Trip\ufffd"
    assert [t.title for t in spoiled.list_threads(resource_id="u1")] == ["Trip\ufffd"]
    assert store.memory.thread_summaries("u1")[0].message_count == 3
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["threads", "--db", str(db_path)], out=out, err=err) == 0, err.getvalue()
    assert "Trip\ufffd" in out.getvalue()


def test_bad_bytes_in_working_memory_are_replaced(store):
    memory = Memory(store, MemoryOptions(working_memory={"enabled": True}))
    memory.update_working_memory(resource_id="u1", working_memory="# Notes")
    with store.db.write() as conn:
        conn.exec_driver_sql(f"UPDATE mastra_resources SET \"workingMemory\" = {BAD.format(_hex('# Notes') + 'fe')}")
    assert memory.get_working_memory(resource_id="u1") == "# Notes\ufffd"
    assert store.memory.get_resource("u1").working_memory == "# Notes\ufffd"


def test_an_unrepairable_bad_value_is_a_storage_error_naming_the_file(spoiled, db_path):
    from core.storage import StorageError

    with spoiled.store.db.write() as conn:  # a bad byte in a column read as plain text (the role)
        conn.exec_driver_sql(f"UPDATE mastra_messages SET role = {BAD.format('75ff')} WHERE id = 'bad'")
    with pytest.raises(StorageError, match="not valid UTF-8") as info:
        with spoiled.store.db.read() as conn:
            conn.exec_driver_sql("SELECT role FROM mastra_messages").all()
    assert str(db_path) in str(info.value)


def test_recall_indexes_and_recalls_around_a_bad_row(spoiled):
    from core.embedding import HashingEmbedder

    memory = Memory(spoiled.store, MemoryOptions(semantic_recall={"top_k": 3, "message_range": 1}),
                    embedder=HashingEmbedder(64))
    memory.save_messages([Message.user("caf is where we met", thread_id="t1", resource_id="u1")])
    hits = memory.search("caf", resource_id="u1", mode="keyword")
    assert "bad" in {h.message_id for h in hits}
    prompt = memory.assemble(thread_id="t1", resource_id="u1", input=[Message.user("caf again?")])
    assert any("caf\ufffd(" in m.get("content", "") for m in prompt.messages if isinstance(m.get("content"), str))


def _spoil_metadata(store) -> None:
    bad = BAD.format(_hex('{"a":"A') + "ff" + _hex('B"}'))  # {"a":"A<0xff>B"}
    with store.db.write() as conn:
        conn.exec_driver_sql(f"UPDATE mastra_threads SET metadata = {bad} WHERE id = 't1'")


def test_a_bad_byte_in_thread_metadata_leaves_listing_and_the_cli_working(spoiled, db_path):
    store = spoiled.store
    _spoil_metadata(store)
    assert store.memory.thread_summaries("u1")[0].thread.metadata == {"a": "A\ufffdB"}
    assert store.memory.get_thread("t1").metadata == {"a": "A\ufffdB"}
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["threads", "--db", str(db_path)], out=out, err=err) == 0, err.getvalue()
    assert "Trip\ufffd" in out.getvalue()


def test_working_memory_of_a_thread_with_bad_metadata_is_read(spoiled):
    _spoil_metadata(spoiled.store)
    memory = Memory(spoiled.store, MemoryOptions(working_memory={"enabled": True, "scope": "thread"}))
    assert memory.get_working_memory(thread_id="t1", resource_id="u1") is None
    memory.update_working_memory(thread_id="t1", resource_id="u1", working_memory="# Notes")
    assert memory.get_working_memory(thread_id="t1", resource_id="u1") == "# Notes"


@pytest.mark.parametrize("column", ["title", "metadata"])
def test_export_of_a_thread_with_a_bad_byte_says_which_row_and_column(spoiled, db_path, tmp_path, column):
    if column == "metadata":
        _spoil_metadata(spoiled.store)
        with spoiled.store.db.write() as conn:
            conn.exec_driver_sql("UPDATE mastra_threads SET title = 'Trip' WHERE id = 't1'")
    with spoiled.store.db.write() as conn:  # the message's bad byte is not what this test is about
        conn.exec_driver_sql("DELETE FROM mastra_messages WHERE id = 'bad'")
    target = tmp_path / "t1.json"
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["export", "--db", str(db_path), "--thread", "t1", "-o", str(target)], out=out, err=err)
    text = err.getvalue()
    assert code != 0 and not target.exists()
    assert "Traceback" not in text and "PendingRollbackError" not in text
    assert "mastra_threads row with id = 't1'" in text and f"in its {column} column" in text
    assert "not valid UTF-8" in text and "sqlite3 shell" in text


def test_a_failed_read_in_a_snapshot_is_reported_as_itself(spoiled, db_path):
    from core.storage import UnreadableValueError

    with spoiled.store.db.write() as conn:
        conn.exec_driver_sql(f"UPDATE mastra_messages SET role = {BAD.format('75ff')} WHERE id = 'bad'")
    with pytest.raises(UnreadableValueError, match="not valid UTF-8") as info:
        with spoiled.store.db.snapshot() as conn:
            conn.exec_driver_sql("SELECT role FROM mastra_messages").all()
    assert str(db_path) in str(info.value)
    with spoiled.store.db.snapshot() as conn:  # the database is still usable afterwards
        assert conn.exec_driver_sql("SELECT count(*) FROM mastra_threads").scalar() == 1
