"""The save path's multi-row inserts (``core.storage.bulk.insert_rows``) store what the per-row
``executemany`` stored: every row, in order, conflicts resolved row by row, on both backends; and the
vector rows' metadata is the JSON text ``json.dumps`` writes (Mastra reads it)."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone

import pytest

from core import Memory, MemoryOptions, Message
from core.recall.vector_table import _metadata_json
from core.storage import bulk

pytestmark = pytest.mark.backends


def _messages(n: int, thread: str) -> list[Message]:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return [Message.create("user" if i % 2 == 0 else "assistant", [{"type": "text", "text": f"text {i} «é» 我"}],
                           thread_id=thread, resource_id="r", created_at=t0 + timedelta(milliseconds=i))
            for i in range(n)]


def test_a_batch_larger_than_one_statement_is_stored_whole_and_in_order(store) -> None:
    memory = Memory(store, MemoryOptions(last_messages=10))
    memory.create_thread(resource_id="r", thread_id="t")
    per_statement = bulk.MAX_PARAMS // 7
    msgs = _messages(per_statement * 2 + 5, "t")  # three statements, the last one short
    memory.save_messages(msgs)
    stored = store.memory.list_messages_page("t", 0, len(msgs) + 10)
    assert [m.id for m in stored] == [m.id for m in msgs]
    assert [m.content for m in stored] == [m.content for m in msgs]
    # Saving again with new content updates in place (ON CONFLICT per row), nothing duplicated.
    changed = [m.copy(content={**m.content, "content": "changed"}) for m in msgs[: per_statement + 1]]
    memory.save_messages(changed)
    again = store.memory.list_messages_page("t", 0, len(msgs) + 10)
    assert len(again) == len(msgs)
    assert [m.content.get("content") for m in again[: per_statement + 1]] == ["changed"] * (per_statement + 1)


def test_rows_apply_in_order_like_executemany(store) -> None:
    with store.db.write() as conn:
        conn.exec_driver_sql("CREATE TABLE bulk_probe (k TEXT PRIMARY KEY, v INTEGER NOT NULL)")
        bulk.insert_rows(conn, "INSERT INTO bulk_probe (k, v)", [("a", 1), ("b", 2)])
        bulk.insert_rows(conn, "INSERT INTO bulk_probe (k, v)", [("a", 3), ("c", 4)],
                         "ON CONFLICT (k) DO UPDATE SET v = excluded.v")
        bulk.insert_rows(conn, "INSERT INTO bulk_probe (k, v)", [])
        rows = conn.exec_driver_sql("SELECT k, v FROM bulk_probe ORDER BY k").all()
    assert [tuple(r) for r in rows] == [("a", 3), ("b", 2), ("c", 4)]


def test_a_failing_row_fails_the_statement_and_the_transaction_keeps_nothing(store) -> None:
    with store.db.write() as conn:
        conn.exec_driver_sql("CREATE TABLE bulk_probe2 (k TEXT PRIMARY KEY, v INTEGER NOT NULL)")
    with pytest.raises(Exception):
        with store.db.write() as conn:
            bulk.insert_rows(conn, "INSERT INTO bulk_probe2 (k, v)", [("a", 1), ("b", None)])
    with store.db.read() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM bulk_probe2").scalar() == 0


def test_rows_of_different_widths_are_refused(store) -> None:
    with store.db.write() as conn:
        conn.exec_driver_sql("CREATE TABLE bulk_probe3 (k TEXT PRIMARY KEY, v INTEGER)")
        with pytest.raises(ValueError, match="a row of 1 values among rows of 2"):
            bulk.insert_rows(conn, "INSERT INTO bulk_probe3 (k, v)", [("a", 1), ("b",)])


@pytest.mark.libsql_only
def test_vector_metadata_is_the_json_text_json_dumps_writes() -> None:
    rnd = random.Random(20)
    alphabet = ['"', "\\", "\n", "\t", "\x00", "\x1f", "\u2028", "é", "我", "\ud800", "a", " ", "/"]
    for _ in range(3000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 12)))
        meta = {"message_id": text, "thread_id": "t" + text, "resource_id": "", "role": "user", "content": text,
                "created_at": "2026-01-01T00:00:00.000Z", "content_hash": "0" * 24}
        assert _metadata_json(meta) == json.dumps(meta, ensure_ascii=False)
    odd = {"message_id": "m", "thread_id": None, "n": 1.5, "list": [1, "x"]}  # not all strings: the encoder
    assert _metadata_json(odd) == json.dumps(odd, ensure_ascii=False)
    assert _metadata_json({}) == json.dumps({}, ensure_ascii=False)
