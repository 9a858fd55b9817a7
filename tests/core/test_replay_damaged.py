"""A record that cannot be used says why; a record is data, so what it names is checked (issue 16).

A damaged record (not JSON, an unknown version, a field of the wrong type) is told apart from a
missing one, in ``ReplayInfo`` and on the turn. A record that names messages of another thread or
resource never shows them: they are listed as unknown.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from core import Agent, Memory, MemoryOptions
from core.embedding import HashingEmbedder
from core.llm import ScriptedModel
from core.replay import store as records
from core.storage.memory_store import MessageQuery

pytestmark = pytest.mark.backends


@pytest.fixture
def chat(store: Any) -> Any:
    memory = Memory(store, MemoryOptions(last_messages=4, semantic_recall={"top_k": 2, "message_range": 0,
                                                                           "scope": "resource"}),
                    embedder=HashingEmbedder())
    agent = Agent("a", instructions="Be brief.", model=ScriptedModel(lambda m, t: "Noted."), memory=memory, tracer=False)
    for text in ("lemons are yellow", "limes are green", "what colour are lemons?"):
        agent.generate(text, memory={"resource": "ada", "thread": "t"})
    agent.generate("the secret of bob is 42", memory={"resource": "bob", "thread": "t-bob"})
    agent.generate("bob again about lemons", memory={"resource": "bob", "thread": "t-bob-2"})
    return memory


def _set_record(store: Any, input_id: str, text: str) -> None:
    with store.db.write() as conn:
        conn.exec_driver_sql("UPDATE memory_studio_turns SET record = ? WHERE input_message_id = ?", (text, input_id))


@pytest.mark.parametrize("text, why", [
    ("{not json", "not JSON"),
    ('{"v": 9, "x": "ab"}', "unknown record version 9"),
    ('{"v": 2, "x": "ab", "h": 5}', "wrong types: 'h' must be a list of strings"),
    ('{"v": 2, "k": [["ab", "lots"]]}', "wrong types: 'k' entries"),
    ('[1, 2]', "not a turn record"),
])
def test_a_damaged_record_says_why_and_is_not_called_missing(chat: Any, store: Any, text: str, why: str) -> None:
    memory = chat
    turns = memory.turns("t")
    target = turns[2].input_message_id
    _set_record(store, target, text)
    prompt = memory.assemble(as_of=target)
    info = prompt.replay
    assert info is not None and info.kind == "reconstructed" and info.record is None
    assert info.record_state == "damaged" and info.record_error is not None and why in info.record_error
    assert info.status == "reconstructed (damaged record)"
    assert any("damaged" in u and why in u for u in info.unknowns)
    again = memory.turns("t")[2]
    assert again.record is None and again.record_error is not None and why in again.record_error
    # The other turns keep their records and stay exact.
    assert memory.assemble(as_of=turns[1].input_message_id).replay.exact  # type: ignore[union-attr]


def test_a_missing_record_is_missing_not_damaged(chat: Any, store: Any) -> None:
    memory = chat
    target = memory.turns("t")[2].input_message_id
    with store.db.write() as conn:
        conn.exec_driver_sql("DELETE FROM memory_studio_turns WHERE input_message_id = ?", (target,))
    info = memory.assemble(as_of=target).replay
    assert info is not None and info.record_state == "missing" and info.record_error is None
    assert info.status == "reconstructed" and memory.turns("t")[2].record_error is None


def test_a_record_naming_another_thread_for_its_input_is_damaged(chat: Any, store: Any) -> None:
    memory = chat
    target = memory.turns("t")[2].input_message_id
    with store.db.write() as conn:
        conn.exec_driver_sql("UPDATE memory_studio_turns SET thread_id = 't-bob' WHERE input_message_id = ?", (target,))
    info = memory.assemble(as_of=target).replay
    assert info is not None and info.record_state == "damaged" and "names thread t-bob" in (info.record_error or "")


def test_messages_of_another_thread_or_resource_are_never_shown(chat: Any, store: Any) -> None:
    memory = chat
    target = memory.turns("t")[2]
    bob = memory.store.memory.list_messages(MessageQuery(thread_id="t-bob"))
    secret = next(m for m in bob if "secret" in m.text)
    other = next(m for m in memory.store.memory.list_messages(MessageQuery(thread_id="t-bob-2")) if "bob" in m.text)
    record = records.read(store, target.input_message_id)
    assert record is not None and record.recall
    hit = replace(record.recall[0], message_id=other.id, window_ids=(other.id,))
    forged = replace(record, history_ids=(secret.id, *record.history_ids), recall=(hit, *record.recall[1:]))
    with store.db.write() as conn:
        records.write(conn, store, forged)
    prompt = memory.assemble(as_of=target.input_message_id)
    assert not any("bob" in str(m.get("content")) for m in prompt.messages)
    assert prompt.replay is not None and not prompt.replay.exact
    assert prompt.replay.status == "recorded, differs"
    listed = [u for u in prompt.replay.unknowns if secret.id in u or other.id in u]
    assert len(listed) == 2 and all("not shown" in u for u in listed)
    assert any(secret.id in u and "thread t-bob" in u for u in listed)
    assert any(other.id in u and "resource bob" in u for u in listed)
