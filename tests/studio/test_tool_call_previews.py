"""A message that called tools, in the Prompt Inspector's and Replay's fragment tables (no Qt): its Text cell reads as
the message list reads it, each call with its arguments and what it returned, then the reply. It showed the wire form
the model reads, which begins with the calls' JSON: '[{"id": "call_36_0", "type": "function", "function": {"name"…',
the tool's name cut off in a cell (found 2026-12-07 by s37-walk14 on an agent with two tools). The detail keeps the
exact text."""

from __future__ import annotations

from typing import Any

from core import Agent, Memory, MemoryOptions, open_store
from core.agent import Tool
from core.llm.scripted import ScriptedModel, ScriptedReply, tool_call
from core.replay import prompt_diff
from studio.logic.prompt_layout import fragment_rows, text_preview, tool_calls_text
from studio.logic.replay_layout import step_rows

ORDER = Tool("lookupOrder", "Look up an order.", lambda args, ctx: {"order": args["order_id"], "status": "shipped"},
             {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]})
STOCK = Tool("checkStock", "Stock for a SKU.", lambda args, ctx: {"sku": args["sku"], "in_stock": 12},
             {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]})


def model(messages: list[dict[str, Any]], tools: Any) -> Any:
    user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    results = sum(m["role"] == "tool" for m in messages[user:])
    if "order" not in str(messages[user].get("content")):
        return "Hello."
    if results == 0:
        return ScriptedReply(tool_calls=(tool_call("lookupOrder", {"order_id": "CD-213"}),))
    if results == 1:
        return ScriptedReply(tool_calls=(tool_call("checkStock", {"sku": "SKU-13"}),))
    return "Order CD-213 has shipped; 12 more are in stock."


WANT = ('lookupOrder({"order_id": "CD-213"}) → {"order": "CD-213", "status": "shipped"} · '
        'checkStock({"sku": "SKU-13"}) → {"sku": "SKU-13", "in_stock": 12} · '
        'Order CD-213 has shipped; 12 more are in stock.')
SHOWN = text_preview(WANT)  # one line, cut as every cell's text is (the calls first, as the message list puts them)


def test_a_message_that_called_tools_reads_as_its_calls_results_and_reply(tmp_path: Any) -> None:
    with open_store(tmp_path / "m.db") as store:
        memory = Memory(store, MemoryOptions(last_messages=10), name="ops")
        agent = Agent("ops", instructions="Help.", model=ScriptedModel(model), tools=[ORDER, STOCK], memory=memory,
                      tracer=False)
        where = {"resource": "rita", "thread": "t"}
        agent.generate("Where is order CD-213 and what stock is left?", memory=where)
        agent.generate("Thanks", memory=where)

        preview = memory.assemble(thread_id="t", resource_id="rita", input="And now?")
        called = [r for r in fragment_rows(preview) if r.role == "assistant" and "CD-213" in r.text]
        assert [r.preview for r in called] == [SHOWN], [r.preview for r in called]
        assert called[0].text.startswith('[{"id": '), called[0].text  # the detail still shows the exact wire text
        fragment = preview.fragments[called[0].index]
        assert tool_calls_text([preview.messages[i] for i in fragment.message_indexes]) == WANT  # the reply too
        assert [r.preview for r in fragment_rows(preview) if r.text == "Hello."] == ["Hello."]

        # Replay: the turn's second model call holds the first call and its result, the next turn the whole message.
        turns = memory.turns("t")
        second = memory.assemble(as_of=turns[1].input_message_id)
        first = memory.assemble(as_of=turns[0].input_message_id)
        shown = [r.preview for r in step_rows(second, prompt_diff(first, second)) if "CD-213" in r.text
                 and r.role == "assistant"]
        assert shown == [SHOWN], shown
