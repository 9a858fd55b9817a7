"""Replay gives the exact bytes the server received for each model call, when they are knowable.

An agent on our own ``OpenAICompatibleModel`` talks to the loopback server, which keeps the raw bytes
of every request: non-ASCII text, emoji, characters JSON may escape, tool definitions with non-ASCII
descriptions, settings sent through ``extra_body`` (``top_k``) and a streamed turn. From a fresh
``Memory`` on the same database each call's bytes (``core.replay.wire.call_bytes``) equal the bytes
the server received, byte for byte. Where they are not knowable (a custom ``ChatModel``, whose
serialisation we do not know; a record written before records named the wire form; a call whose
rebuilt body no longer matches its record) there are none, and the reason says so.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from core import Agent, Memory, MemoryOptions, Tool, open_store
from core.embedding import HashingEmbedder
from core.llm import LoopbackServer, OpenAICompatibleModel, ScriptedModel, ScriptedReply, tool_call
from core.replay.record import bytes_hash
from core.replay.wire import (NOT_BYTES_CLIENT, NOT_BYTES_CUSTOM, NOT_BYTES_OLD, NOT_BYTES_PREVIEW,
                              NOT_BYTES_RECONSTRUCTED, call_bytes, not_bytes_reason)

SETTINGS = {"temperature": 0.3, "max_tokens": 96, "top_p": 0.9, "top_k": 40, "seed": 7, "stop": ["###"]}
WETTER = Tool("wetter", "Das Wetter heute in einer Stadt — „Köln“, 東京 ☀️.",
              lambda args, _ctx: {"stadt": args.get("stadt"), "himmel": "sonnig ☀️", "grad": 21},
              {"type": "object", "properties": {"stadt": {"type": "string", "description": "Name der Stadt (z. B. Zürich)"}},
               "required": ["stadt"]})
TURNS: list[tuple[str, bool]] = [
    ("Grüß Gott! Ich heiße Zoë 👋🏽 und plane eine Reise nach 東京.", False),
    ("Wie ist das Wetter in Köln? \"Quoted\", a\\b, tab\there, </script> \u2028 end", False),
    ("Erzähl mir etwas Kurzes 😀 über Zürich.", True),
]


def responder(messages: list[dict[str, Any]], tools: Any) -> Any:
    last = messages[-1]
    if last["role"] == "user" and "Wetter" in str(last.get("content")):
        return ScriptedReply(tool_calls=(tool_call("wetter", {"stadt": "Köln"}),))
    if last["role"] == "tool":
        return "In Köln ist es sonnig ☀️, 21 °C."
    return "Gern 😊 — „so“ geht’s."


def spaced_dumps(obj: Any) -> bytes:
    """JSON as a client with other dump settings would write it (spaces after separators)."""
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "), allow_nan=False).encode("utf-8")


def _memory(store: Any) -> Memory:
    return Memory(store, MemoryOptions(last_messages=6), embedder=HashingEmbedder(), name="reise")


def _run(store: Any, model: Any) -> Memory:
    memory = _memory(store)
    agent = Agent("reise", instructions="Du hilfst bei Reisen. Kurz – bitte “höflich”.", model=model,
                  memory=memory, tools=[WETTER], model_settings=SETTINGS)
    where = {"resource": "zoë", "thread": "t-reise"}
    for text, streamed in TURNS:
        if streamed:
            assert list(agent.stream(text, memory=where))[-1].kind == "finish"
        else:
            agent.generate(text, memory=where)
    return memory


def _run_served(path: Path) -> list[bytes]:
    """``TURNS`` on our own provider against the loopback server, into the database at ``path``; the bytes
    of every request the server received."""
    with LoopbackServer(ScriptedModel(responder, name="server")) as server:
        store = open_store(path)
        model = OpenAICompatibleModel("loopback-chat", base_url=server.base_url, api_key="k", api_key_env=None,
                                      keyring_service=None)
        try:
            _run(store, model)
        finally:
            model.close()
            store.close()
        return server.chat_request_bytes()


def _calls(memory: Memory) -> list[tuple[Any, Any]]:
    out = []
    for turn in memory.turns("t-reise"):
        info = memory.assemble(as_of=turn.input_message_id).replay
        assert info is not None
        out.extend((info, call) for call in info.calls)
    return out


def test_each_call_gives_the_exact_bytes_the_server_received(tmp_path: Path) -> None:
    received = _run_served(tmp_path / "m.db")
    assert len(received) == 4  # the weather turn calls the tool, then answers
    assert any(b'"stream":true' in b for b in received) and any(b'"tools":[' in b for b in received)
    assert "Köln".encode() in received[1] and "👋🏽".encode() in received[0]  # sent as UTF-8, not \u escapes

    store = open_store(tmp_path / "m.db")  # a fresh Memory: the database alone
    try:
        calls = _calls(_memory(store))
        assert len(calls) == len(received)
        for (info, call), sent in zip(calls, received):
            assert not_bytes_reason(info, call) is None
            assert call_bytes(info, call) == sent
            assert call.record.wire_hash == bytes_hash(sent)  # the hash of the bytes the server received
    finally:
        store.close()


def test_bytes_the_client_serialised_otherwise_are_not_claimed_exact(tmp_path: Path, monkeypatch: Any) -> None:
    """An ``openai`` client whose JSON dump settings differ from our reproduction (as an upgrade might
    make them): every call's bytes as sent differ, so the record keeps no bytes hash and Replay gives the
    body as JSON, saying the client serialised it otherwise, never bytes the server did not receive."""
    import openai._base_client

    monkeypatch.setattr(openai._base_client, "openapi_dumps", spaced_dumps)
    received = _run_served(tmp_path / "m.db")
    assert len(received) == 4 and all(b'", "' in sent for sent in received)

    store = open_store(tmp_path / "m.db")
    try:
        calls = _calls(_memory(store))
        assert len(calls) == len(received)
        for (info, call), sent in zip(calls, received):
            assert info.exact and json.loads(sent) == {**call.request, **info.record.transport}
            assert call.record.wire_hash is None and call_bytes(info, call) is None
            assert not_bytes_reason(info, call) == NOT_BYTES_CLIENT
            assert NOT_BYTES_CLIENT.startswith("the body as JSON, not the bytes sent")
    finally:
        store.close()


def test_a_custom_chat_model_gives_no_bytes_and_says_the_copy_is_json(tmp_path: Path) -> None:
    store = open_store(tmp_path / "m.db")
    try:
        memory = _run(store, ScriptedModel(responder, name="custom"))
        for info, call in _calls(memory):
            assert info.exact and call_bytes(info, call) is None
            assert not_bytes_reason(info, call) == NOT_BYTES_CUSTOM
    finally:
        store.close()


def test_a_record_from_before_wire_forms_gives_no_bytes(tmp_path: Path) -> None:
    _run_served(tmp_path / "m.db")
    store = open_store(tmp_path / "m.db")
    try:
        memory = _memory(store)
        # What an older version wrote: the record without the wire form and the bytes' hashes.
        info, call = _calls(memory)[0]
        assert info.record is not None
        old = replace(info.record, wire=None, calls=tuple(replace(c, wire_hash=None) for c in info.record.calls))
        old_info = replace(info, record=old)
        old_call = replace(call, record=old.calls[0])
        assert call_bytes(old_info, old_call) is None
        assert not_bytes_reason(old_info, old_call) == NOT_BYTES_OLD
    finally:
        store.close()


def test_a_call_whose_rebuilt_body_differs_from_its_bytes_gives_none(tmp_path: Path) -> None:
    _run_served(tmp_path / "m.db")
    store = open_store(tmp_path / "m.db")
    try:
        memory = _memory(store)
        info, call = _calls(memory)[0]
        changed = dict(call.request, messages=[*call.request["messages"], {"role": "user", "content": "x"}])
        other = replace(call, request=changed)
        assert call_bytes(info, other) is None
        reason = not_bytes_reason(info, other)
        assert reason is not None and "JSON" in reason
        assert json.loads(json.dumps(call.request))  # the readable JSON is still there
    finally:
        store.close()


def test_each_call_gets_its_own_bytes_when_calls_run_at_once(tmp_path: Path) -> None:
    """One model, many calls from several threads and from asyncio tasks at once: each result's bytes as
    sent (``ChatResult.sent``, read by the request hook) are its own request's, one of those the server
    received, and our reproduction of them."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from core.llm.wire import wire_bytes

    with LoopbackServer(ScriptedModel(lambda messages, tools: "ok", name="server")) as server:
        model = OpenAICompatibleModel("loopback-chat", base_url=server.base_url, api_key="k", api_key_env=None,
                                      keyring_service=None)
        asks = [[{"role": "user", "content": f"Frage {i} — „{'ü' * i}“"}] for i in range(12)]

        def ask(messages: list[dict[str, Any]]) -> Any:
            return model.generate(messages)  # type: ignore[arg-type]

        with ThreadPoolExecutor(max_workers=4) as pool:
            threaded = list(pool.map(ask, asks[:6]))

        async def tasks() -> list[Any]:
            return list(await asyncio.gather(*(asyncio.to_thread(ask, m) for m in asks[6:])))

        awaited = asyncio.run(tasks())
        model.close()
        received = server.chat_request_bytes()
    assert len(received) == 12
    for messages, result in zip(asks, threaded + awaited):
        assert result.sent is not None and result.sent in received
        assert result.sent == wire_bytes(model.request_body(messages))  # type: ignore[arg-type]


def test_a_turn_without_a_record_says_its_body_is_a_reconstruction_not_a_preview(tmp_path: Path) -> None:
    """A stored turn whose record is gone (or was never written: Mastra's, an older engine's) was sent: its
    copy is the rebuilt body as JSON, said to be a reconstruction, never "a preview was never sent"."""
    _run_served(tmp_path / "m.db")
    store = open_store(tmp_path / "m.db")
    try:
        with store.db.write() as conn:
            conn.exec_driver_sql("DELETE FROM memory_studio_turns")
        memory = _memory(store)
        for turn in memory.turns("t-reise"):
            info = memory.assemble(as_of=turn.input_message_id).replay
            assert info is not None and info.kind == "reconstructed" and info.record is None
            for call in info.calls:
                assert call_bytes(info, call) is None
                assert not_bytes_reason(info, call) == NOT_BYTES_RECONSTRUCTED
        assert not_bytes_reason(None, None) == NOT_BYTES_PREVIEW
    finally:
        store.close()
