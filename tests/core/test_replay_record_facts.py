"""A turn record's facts outside its request bodies (endpoint, model label, usage, finish reason) are
covered by hashes of their own (``fh``): a hand-edited or damaged record file that changes one is no
longer "recorded (exact)", and Replay names what changed. A record written before keeps its label and
says those facts are shown unchecked.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Callable

import pytest

from core import Agent, Memory, MemoryOptions
from core.embedding import HashingEmbedder
from core.llm import ScriptedModel
from core.replay import store as records
from core.replay.record import FACTS, request_hash

pytestmark = pytest.mark.backends


@pytest.fixture
def chat(store: Any) -> Any:
    memory = Memory(store, MemoryOptions(last_messages=4), embedder=HashingEmbedder())
    agent = Agent("a", instructions="Be brief.", model=ScriptedModel(lambda m, t: "Noted."), memory=memory,
                  tracer=False)
    for text in ("lemons are yellow", "what colour are lemons?"):
        agent.generate(text, memory={"resource": "ada", "thread": "t"})
    return memory


def edit_record(store: Any, input_id: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Change a stored record's JSON as a hand edit of the database file would."""
    with store.db.write() as conn:
        (text,) = conn.exec_driver_sql("SELECT record FROM memory_studio_turns WHERE input_message_id = ?",
                                       (input_id,)).one()
        data = json.loads(text)
        change(data)
        conn.exec_driver_sql("UPDATE memory_studio_turns SET record = ? WHERE input_message_id = ?",
                             (json.dumps(data), input_id))


def _model_label(data: dict[str, Any]) -> None:
    data["w"] = data.get("w") or str(data["m"]).split("/", 1)[-1]  # the body's model kept: its hash still holds
    data["m"] = "elsewhere/" + data["w"]


def _finish(data: dict[str, Any]) -> None:
    entry = data["k"][0]
    if len(entry) > 2:
        entry[2] = "length"
    else:
        entry.append("length")


EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "endpoint": lambda d: d.__setitem__("e", "http://elsewhere.example/v1"),
    "model label": _model_label,
    "usage": lambda d: d["k"][0].__setitem__(1, [999, 1]),
    "finish reason": _finish,
}


@pytest.mark.parametrize("fact", FACTS)
def test_an_edited_fact_of_a_new_record_is_no_longer_exact_and_is_named(chat: Any, store: Any, fact: str) -> None:
    memory = chat
    target = memory.turns("t")[1].input_message_id
    before = memory.assemble(as_of=target).replay
    assert before is not None and before.status == "recorded (exact)" and before.unchecked == ()
    edit_record(store, target, EDITS[fact])
    info = memory.assemble(as_of=target).replay
    assert info is not None and info.kind == "recorded" and info.record is not None
    assert info.status == "recorded, differs" and not info.exact and info.matches is False
    said = [d for d in info.differences if "no longer matches what it was written with" in d]
    assert said and f"record's {fact} " in said[0] and all(f not in said[0] for f in FACTS if f != fact)
    assert all(c.matches for c in info.calls)  # the request bodies still hash as sent: only the fact changed
    # The other turn's record is untouched and stays exact.
    assert memory.assemble(as_of=memory.turns("t")[0].input_message_id).replay.exact  # type: ignore[union-attr]


def test_a_facts_hash_cut_short_counts_the_facts_it_lost_as_changed(chat: Any, store: Any) -> None:
    memory = chat
    target = memory.turns("t")[1].input_message_id
    edit_record(store, target, lambda d: d.__setitem__("fh", d["fh"][:2]))
    info = memory.assemble(as_of=target).replay
    assert info is not None and info.status == "recorded, differs"
    assert any("record's usage and finish reason no longer match" in d for d in info.differences)


def test_an_older_record_is_labelled_as_before_and_says_its_facts_are_unchecked(chat: Any, store: Any) -> None:
    memory = chat
    target = memory.turns("t")[1].input_message_id
    edit_record(store, target, lambda d: d.pop("fh"))  # as every record written before facts were covered
    info = memory.assemble(as_of=target).replay
    assert info is not None and info.status == "recorded (exact)" and info.exact and info.differences == ()
    assert len(info.unchecked) == 1
    assert "endpoint, model label, usage and finish reason are not covered" in info.unchecked[0]
    # What such a record claims is what it claimed before: an edit of an unchecked fact changes no label.
    edit_record(store, target, EDITS["endpoint"])
    again = memory.assemble(as_of=target).replay
    assert again is not None and again.status == "recorded (exact)" and again.unchecked == info.unchecked
    assert again.record is not None and again.record.endpoint == "http://elsewhere.example/v1"


def test_a_frameworks_record_shown_as_sent_names_an_edited_fact_too(chat: Any, store: Any) -> None:
    memory = chat
    target = memory.turns("t")[1].input_message_id
    record = records.read(store, target)
    assert record is not None and record.calls
    sent = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "what colour?"}]}
    calls = []
    for call in record.calls:
        kept = replace(call, sent=sent, settings={}, tools=(), tools_key=None, tool_choice=None)
        calls.append(replace(kept, body_hash=request_hash(kept.sent_body())))
    with store.db.write() as conn:
        records.write(conn, store, replace(record, framework="openai-agents", calls=tuple(calls)))
    assert memory.assemble(as_of=target).replay.status == "recorded (exact)"  # type: ignore[union-attr]
    edit_record(store, target, EDITS["usage"])
    info = memory.assemble(as_of=target).replay
    assert info is not None and info.record is not None and info.record.framework == "openai-agents"
    assert info.status == "recorded, differs"
    assert any("record's usage no longer matches" in d for d in info.differences)


def test_a_fork_keeps_what_the_records_facts_hashes_say(chat: Any, store: Any) -> None:
    # A fork copies the thread's records (written again for the copies' ids): an edited fact must stay an edited
    # fact in the copy, not come back "recorded (exact)" under hashes made from the edited values, and a record
    # written before facts were covered must not come back claiming its facts are.
    memory = chat
    Agent("a", instructions="Be brief.", model=ScriptedModel(lambda m, t: "Noted."), memory=memory,
          tracer=False).generate("and limes?", memory={"resource": "ada", "thread": "t"})
    older, edited, last = (t.input_message_id for t in memory.turns("t"))
    edit_record(store, older, lambda d: d.pop("fh"))
    edit_record(store, edited, EDITS["endpoint"])
    memory.fork_thread("t", at=last, new_thread_id="f", resource_id="ada")
    copied_older, copied_edited = (memory.assemble(as_of=t.input_message_id).replay for t in memory.turns("f"))
    assert copied_edited is not None and copied_edited.record is not None
    assert copied_edited.record.endpoint == "http://elsewhere.example/v1"
    assert copied_edited.status == "recorded, differs"
    assert any("record's endpoint no longer matches" in d for d in copied_edited.differences)
    assert copied_older is not None and copied_older.status == "recorded (exact)"
    assert len(copied_older.unchecked) == 1 and "not covered" in copied_older.unchecked[0]
