"""The request view of a turn whose record lost its later model calls (a hand-edited export file,
imported) says so beside each call it shows: "Model call 2 of 2" alone would hide the third call the
model answered (issue 20, the review of replay's exactness; the engine's side is
``tests/core/test_replay_adversarial.py``)."""

from __future__ import annotations

import json
from typing import Any

from core import Agent, Memory, MemoryOptions, open_store
from core.llm import ScriptedModel
from core.transfer import export_thread, import_data
from studio.logic.request_layout import call_view
from tests.core.test_replay_adversarial import NOOP, responder  # (two tool steps, then the answer: three calls)


def test_each_call_view_says_the_record_lost_calls(tmp_path: Any) -> None:
    with open_store(tmp_path / "source.db") as store:
        memory = Memory(store, MemoryOptions(last_messages=4))
        agent = Agent("a", instructions="Be brief.", model=ScriptedModel(responder), memory=memory, tracer=False,
                      tools=[NOOP])
        agent.generate("use the tools twice", memory={"resource": "ada", "thread": "t"})
        (turn,) = memory.turns("t")
        for k, view in enumerate(call_view(memory.assemble(as_of=turn.input_message_id), memory.tokenizer, k)
                                 for k in range(3)):
            assert view.title == f"Model call {k + 1} of 3" and not any("record keeps" in n for n in view.notes)
        data = json.loads(json.dumps(export_thread(store, "t")))
    record = json.loads(data["turns"][0]["record"])
    record["k"] = record["k"][:2]
    data["turns"][0]["record"] = json.dumps(record)
    with open_store(tmp_path / "copy.db") as target:
        import_data(target, data)
        copy = Memory(target)
        prompt = copy.assemble(as_of=copy.turns("t")[0].input_message_id)
        for k in range(2):
            view = call_view(prompt, copy.tokenizer, k)
            assert view.status == "the whole request matches the record (exact)"  # this call is as sent
            assert any("reply shows 3 model calls, but its record keeps 2" in n for n in view.notes), view.notes
