"""A float that is not finite (NaN, Infinity) never reaches JSON the engine sends or prints.

Python's ``json`` writes such a float as the bare word ``NaN``, which no JSON parser but Python's reads.
A tool's result holding one was sent to the model as tool-message text with ``NaN`` in it, while its
stored row holds ``null`` (``core.stored_text.json_text``), so the turn's rebuild differed from what was
sent; a tool schema holding one stopped the turn (the ``openai`` client refuses the body), and
``memory-studio prompt --json`` printed it. The rule everywhere is ``JSON.stringify``'s: ``null``.
"""

from __future__ import annotations

import io
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

from core import Agent, Memory, MemoryOptions, Tool, open_store
from core.cli import main as cli_main
from core.embedding import HashingEmbedder
from core.llm import LoopbackServer, OpenAICompatibleModel, ScriptedModel, ScriptedReply, tool_call
from core.llm.wire import request_body, wire_bytes
from core.replay.wire import call_bytes, not_bytes_reason
from core.stored_text import finite_json, json_text


def strict(text: str | bytes) -> Any:
    """``json.loads`` as ``JSON.parse`` reads: ``NaN`` / ``Infinity`` are not JSON."""
    def refuse(word: str) -> Any:
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


MEASURE = Tool("measure", "Measure the signal.",
               lambda args, _ctx: {"value": float("nan"), "peak": float("inf"), "ok": 1.5, "low": [float("-inf")]},
               {"type": "object", "properties": {"n": {"type": "number"}}})


def responder(messages: list[dict[str, Any]], tools: Any) -> Any:
    if messages[-1]["role"] == "user":  # a local model may write NaN in its arguments too
        return ScriptedReply(tool_calls=(tool_call("measure", '{"n": NaN}'),))
    return "measured"


def run_served(path: Path, tools: list[Tool], *, streamed: bool = False) -> tuple[Memory, list[bytes]]:
    with LoopbackServer(ScriptedModel(responder, name="server")) as server:
        store = open_store(path)
        model = OpenAICompatibleModel("loopback-chat", base_url=server.base_url, api_key="k", api_key_env=None,
                                      keyring_service=None)
        memory = Memory(store, MemoryOptions(last_messages=6), embedder=HashingEmbedder(), name="lab")
        agent = Agent("lab", instructions="Measure.", model=model, memory=memory, tools=tools)
        where = {"resource": "ada", "thread": "t-lab"}
        try:
            if streamed:
                assert list(agent.stream("measure it", memory=where))[-1].kind == "finish"
            else:
                assert agent.generate("measure it", memory=where).text == "measured"
        finally:
            model.close()
        return memory, server.chat_request_bytes()


def check_sent_and_recorded(memory: Memory, received: list[bytes]) -> None:
    assert len(received) == 2  # the tool call, then the answer
    for sent in received:
        body = strict(sent)  # the whole body, as the server's JSON parser reads it
        for message in body["messages"]:
            if message["role"] == "tool":
                assert strict(message["content"]) == {"value": None, "peak": None, "ok": 1.5, "low": [None]}
            for call in message.get("tool_calls") or []:
                assert strict(call["function"]["arguments"]) == {"n": None}
    # What the Prompt Inspector shows of each call is what the server received, byte for byte.
    calls = []
    for turn in memory.turns("t-lab"):
        info = memory.assemble(as_of=turn.input_message_id).replay
        assert info is not None and info.status == "recorded (exact)", info and info.differences
        calls.extend((info, call) for call in info.calls)
    assert len(calls) == len(received)
    for (info, call), sent in zip(calls, received):
        assert not_bytes_reason(info, call) is None
        assert call_bytes(info, call) == sent


def test_a_tool_result_with_nan_is_sent_as_json_and_rebuilt_exactly(tmp_path: Path) -> None:
    memory, received = run_served(tmp_path / "m.db", [MEASURE])
    try:
        check_sent_and_recorded(memory, received)
    finally:
        memory.store.close()


def test_a_streamed_turn_sends_the_same_strict_json(tmp_path: Path) -> None:
    memory, received = run_served(tmp_path / "m.db", [MEASURE], streamed=True)
    try:
        check_sent_and_recorded(memory, received)
        assert all(b'"stream":true' in sent for sent in received)
    finally:
        memory.store.close()


def test_a_tool_schema_with_infinity_is_sent_with_null(tmp_path: Path) -> None:
    # The client refused the body ("Out of range float values are not JSON compliant") and the turn failed.
    bounded = Tool("measure", MEASURE.description, MEASURE.fn,
                   {"type": "object", "properties": {"n": {"type": "number", "maximum": float("inf")}}})
    memory, received = run_served(tmp_path / "m.db", [bounded])
    try:
        for sent in received:
            assert strict(sent)["tools"][0]["function"]["parameters"]["properties"]["n"] == {
                "type": "number", "maximum": None}
        check_sent_and_recorded(memory, received)
    finally:
        memory.store.close()


def test_request_body_is_json_text_of_the_same_value() -> None:
    # One rule: the body the client serialises is the value json_text writes, and a finite body is
    # the very object given (no copy, bytes unchanged).
    messages = [{"role": "user", "content": "hi"}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"minimum": -math.inf, "x": 0.1}}}]
    body = request_body("m", messages, tools=tools)
    assert wire_bytes(body) == json_text(body, ensure_ascii=False, separators=(",", ":")).encode()
    assert body["tools"][0]["function"]["parameters"] == {"minimum": None, "x": 0.1}
    assert tools[0]["function"]["parameters"]["minimum"] == -math.inf  # the caller's value is not changed
    finite = {"model": "m", "messages": messages}
    assert finite_json(finite) is finite
    assert finite_json({math.nan: [math.inf]}) == {"NaN": [None]}


def test_prompt_json_is_strict_when_a_stored_row_holds_nan(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    memory, _ = run_served(db, [MEASURE])
    memory.store.close()
    # A row another program (or a version before stored_json) wrote: a bare NaN in the JSON text.
    with sqlite3.connect(db) as conn:
        changed = conn.execute("UPDATE mastra_messages SET content = replace(content, '\"value\":null', "
                               "'\"value\":NaN') WHERE role = 'assistant'").rowcount
    assert changed == 1
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["prompt", "--db", str(db), "--resource", "ada", "--thread", "t-lab", "again", "--no-recall",
                     "--json"], out=out, err=err) == 0, err.getvalue()
    printed = strict(out.getvalue())
    tool_texts = [m["content"] for m in printed["messages"] if m["role"] == "tool"]
    assert [strict(t)["value"] for t in tool_texts] == [None]
    assert "NaN" not in out.getvalue()


def test_prompt_to_json_writes_null_for_a_non_finite_float(tmp_path: Path) -> None:
    store = open_store(tmp_path / "m.db")
    try:
        memory = Memory(store, MemoryOptions(last_messages=2), name="lab")
        memory.create_thread(resource_id="ada", thread_id="t")
        prompt = memory.assemble(thread_id="t", resource_id="ada", input=[])
        prompt.notes["probe"] = {"score": math.nan, "best": math.inf}
        assert strict(prompt.to_json())["notes"]["probe"] == {"score": None, "best": None}
    finally:
        store.close()
