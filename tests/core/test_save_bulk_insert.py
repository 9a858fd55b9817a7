"""The save path's multi-row inserts (``core.storage.bulk.insert_rows``) store what the per-row
``executemany`` stored: every row, in order, conflicts resolved row by row, on both backends; and the
vector rows' metadata is the JSON text ``json.dumps`` writes (Mastra reads it)."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone

import pytest

from core import Memory, MemoryOptions, Message
from core.recall.vector_table import _metadata_json, _metadata_texts
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


def _encoder_param(rows: list) -> str | None:
    """What ``bulk.json_rows_param`` returned before rows were written by hand: the encoder's text, or
    None for a NUL or a lone surrogate."""
    doc = json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
    return None if "\\u0000" in doc or any(0xD800 <= ord(c) <= 0xDFFF for c in doc) else doc


@pytest.mark.libsql_only
def test_rows_written_by_hand_are_the_encoders_text() -> None:
    # Plain ASCII is written by one ``%`` per row; anything JSON escapes (quote, backslash,
    # control characters), non-ASCII, None, bools, floats: the encoder (DEL is plain: JSON keeps it).
    rnd = random.Random(21)
    plain = ["a", "Z", "0", " ", "%", "%s", "%d", "/", "~", "{", "]", ","]
    odd = ['"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "我", "\u2028", "\ud800"]
    ints = [0, 1, -1, 2**62, -(2**62), 10**30]
    hand = 0
    for _ in range(4000):
        width, n = rnd.randrange(1, 6), rnd.randrange(1, 8)
        kinds = [rnd.choice("is") for _ in range(width)]
        chars = plain if rnd.random() < 0.6 else plain + odd
        rows = [tuple(rnd.choice(ints) if k == "i" else "".join(rnd.choice(chars) for _ in range(rnd.randrange(0, 9)))
                      for k in kinds) for _ in range(n)]
        if rnd.random() < 0.1:  # a None, a bool or a float among them
            r = rnd.randrange(n)
            rows[r] = (rnd.choice([None, True, 1.5]),) + rows[r][1:]
        hand += bulk._plain_rows(rows) is not None
        assert bulk.json_rows_param(rows) == _encoder_param(rows), rows
    assert hand > 1500  # (the hand-written path was taken)
    assert bulk.json_rows_param(["a", "b"]) == '["a","b"]'  # single values: the encoder
    assert bulk._plain_rows([(1, "a"), (2,)]) is None  # rows of different widths: the encoder says so
    assert bulk._plain_rows([(1, "a"), ("b", 2)]) is None


@pytest.mark.libsql_only
def test_vector_metadata_of_plain_and_escaped_values_is_the_json_text_json_dumps_writes() -> None:
    # One at a time, and a batch at once (``_metadata_texts``: a batch of plain values by one template).
    rnd = random.Random(22)
    chars = ["a", "Z", "0", " ", "%", "%s", "/", "~", "\x7f"]
    odd = ['"', "\\", "\n", "é", "\u2028"]
    batched = 0
    for _ in range(1500):
        batch = []
        for _ in range(rnd.randrange(1, 6)):
            text = "".join(rnd.choice(chars if rnd.random() < 0.9 else chars + odd) for _ in range(rnd.randrange(0, 10)))
            meta = {"message_id": "m" + text[:2], "thread_id": "t", "resource_id": "", "role": "user", "content": text,
                    "created_at": "2026-01-01T00:00:00.000Z", "content_hash": "0" * 24}
            if rnd.random() < 0.05:  # another key order, a value that is not a string
                meta = rnd.choice([{"role": "user", "message_id": text}, {**meta, "thread_id": None}])
            assert _metadata_json(meta) == json.dumps(meta, ensure_ascii=False)
            batch.append(meta)
        batched += all(bulk.plain_text(v) if type(v) is str else False for m in batch for v in m.values())
        assert _metadata_texts(batch) == [json.dumps(m, ensure_ascii=False) for m in batch]
    assert batched > 300  # (the template was taken)
    keyed = {'a"%s': "x", "%d": "%s", "\n": "y"}  # keys with a quote, a percent sign, a newline
    assert _metadata_json(keyed) == json.dumps(keyed, ensure_ascii=False)

    class Shown(str):
        def __str__(self) -> str:
            return "shown"

    subclass = {"content": Shown("kept"), "role": "user"}  # json writes the text itself, not str()
    assert _metadata_json(subclass) == json.dumps(subclass, ensure_ascii=False)
    assert _metadata_texts([subclass, subclass]) == [json.dumps(subclass, ensure_ascii=False)] * 2
    assert _metadata_texts([keyed]) == [json.dumps(keyed, ensure_ascii=False)]
    assert _metadata_texts([]) == []
    assert _metadata_json({1: "a"}) == json.dumps({1: "a"}, ensure_ascii=False)  # a key that is not a string
