"""A turn record names the embedding model that scored its recall hits (``TurnRecord.recall_model``, key ``rm``).

After ``memory-studio reindex --model X`` the recorded scores are still the old model's; Replay shows them as the
turn used them and must say whose they are, and that today's index is another model's. A record written before
records kept the model reads as before, its model "not recorded".
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa

from core import Agent, Memory, MemoryOptions
from core.embedding.hashing import HashingEmbedder
from core.llm import ScriptedModel
from core.replay import store as records

pytestmark = pytest.mark.backends

OPTIONS = MemoryOptions(last_messages=2, semantic_recall={"enabled": True, "top_k": 2, "scope": "resource"})


def memory_with(store: Any, dim: int) -> Memory:
    return Memory(store, OPTIONS, embedder=HashingEmbedder(dim), name="planner")


def run_turns(store: Any) -> Memory:
    memory = memory_with(store, 64)
    agent = Agent("planner", instructions="Plan.", model=ScriptedModel(lambda m, t: "Noted."), memory=memory,
                  tracer=False)
    where = {"thread": "t1", "resource": "ada"}
    for text in ("The tomatoes need watering every morning.", "Book the train to Lisbon on Friday.",
                 "Buy bread and cheese.", "When do the tomatoes need watering?"):
        agent.generate(text, memory=where)
    return memory


def test_a_turns_record_names_the_model_that_scored_its_recall_and_an_old_record_reads_as_not_recorded(store):
    memory = run_turns(store)
    turns = memory.turns("t1")
    last = turns[-1].record
    assert last is not None and last.recall, "the last turn recalled the earlier tomato message"
    assert last.recall_model == HashingEmbedder(64).model_id
    assert all(t.record is not None and (t.record.recall_model is None) == (not t.record.recall) for t in turns)
    # What an older Memory Studio wrote: the same record without "rm". It reads, hits and scores kept.
    raw = _stored_record(store, last.input_message_id)
    assert raw["rm"] == HashingEmbedder(64).model_id
    del raw["rm"]
    _store_record(store, last.input_message_id, raw)
    old = memory.turns("t1")[-1].record
    assert old is not None and old.recall_model is None and old.recall == last.recall


def _stored_record(store: Any, input_id: str) -> dict[str, Any]:
    with store.db.read() as conn:
        text = conn.execute(sa.text(f"SELECT record FROM {records.TABLE} WHERE input_message_id = :i"),
                            {"i": input_id}).scalar()
    return json.loads(text)


def _store_record(store: Any, input_id: str, data: dict[str, Any]) -> None:
    with store.db.write() as conn:
        conn.execute(sa.text(f"UPDATE {records.TABLE} SET record = :r WHERE input_message_id = :i"),
                     {"r": json.dumps(data), "i": input_id})
