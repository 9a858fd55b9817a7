"""The request view says what a turn record's hashes do not cover: a record written before they covered
its endpoint, model label, usage and finish reason shows those unchecked, and says so; an edited one of
a newer record is named beside every call (the engine's side: ``tests/core/test_replay_record_facts.py``)."""

from __future__ import annotations

from typing import Any

from core import Agent, Memory, MemoryOptions, open_store
from core.llm import ScriptedModel
from studio.logic.request_layout import call_view
from tests.core.test_replay_record_facts import EDITS, edit_record


def test_the_request_view_says_which_facts_are_unchecked_or_changed(tmp_path: Any) -> None:
    with open_store(tmp_path / "m.db") as store:
        memory = Memory(store, MemoryOptions(last_messages=4))
        agent = Agent("a", instructions="Be brief.", model=ScriptedModel(lambda m, t: "Noted."), memory=memory,
                      tracer=False)
        agent.generate("lemons are yellow", memory={"resource": "ada", "thread": "t"})
        (turn,) = memory.turns("t")
        target = turn.input_message_id

        view = call_view(memory.assemble(as_of=target), memory.tokenizer)
        assert not any("unchecked" in n or "no longer match" in n for n in view.notes), view.notes

        edit_record(store, target, EDITS["usage"])
        view = call_view(memory.assemble(as_of=target), memory.tokenizer)
        assert view.status == "the whole request matches the record (exact)"  # the body is as sent
        assert any("record's usage no longer matches what it was written with" in n for n in view.notes), view.notes

        edit_record(store, target, lambda d: d.pop("fh"))  # as a record written before the facts were covered
        view = call_view(memory.assemble(as_of=target), memory.tokenizer)
        assert view.status == "the whole request matches the record (exact)"
        assert any("endpoint, model label, usage and finish reason are not covered" in n and "unchecked" in n
                   for n in view.notes), view.notes
