"""The request view's "Copy Request Body" copies the exact bytes the server received, and says so;
where those are not knowable (a custom model's turn, a record from before), its button and the view
say the copy is the body as JSON, not the bytes sent. The indented JSON stays, labelled for reading."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from PySide6.QtGui import QGuiApplication

from core import Agent, Memory, MemoryOptions, Tool, open_store
from core.embedding import HashingEmbedder
from core.llm import LoopbackServer, OpenAICompatibleModel, ScriptedModel, ScriptedReply, tool_call
from core.replay.wire import NOT_BYTES_CLIENT, NOT_BYTES_CUSTOM, NOT_BYTES_OLD
from studio.logic.request_layout import COPY_BYTES, COPY_JSON, call_view
from studio.widgets.request_view import RequestPanel
from tests.core.test_replay_bytes import spaced_dumps  # (a client with other JSON dump settings)

TOOL = Tool("wetter", "Das Wetter — „Köln“ ☀️.", lambda args, _ctx: {"himmel": "sonnig ☀️"},
            {"type": "object", "properties": {"stadt": {"type": "string"}}, "required": ["stadt"]})


def responder(messages: list[dict[str, Any]], tools: Any) -> Any:
    if messages[-1]["role"] == "user":
        return ScriptedReply(tool_calls=(tool_call("wetter", {"stadt": "Köln"}),))
    return "Sonnig ☀️ — „gern“."


def _turn(tmp_path: Path, model: Any, *, stream: bool) -> tuple[Any, Memory]:
    store = open_store(tmp_path / "m.db")
    memory = Memory(store, MemoryOptions(last_messages=4), embedder=HashingEmbedder(), name="reise")
    agent = Agent("reise", instructions="Kurz – “höflich”.", model=model, memory=memory, tools=[TOOL],
                  model_settings={"temperature": 0.2, "top_k": 5})
    where = {"resource": "zoë", "thread": "t"}
    if stream:
        list(agent.stream("Wetter in Köln? 👋🏽 \"bitte\"", memory=where))
    else:
        agent.generate("Wetter in Köln? 👋🏽 \"bitte\"", memory=where)
    return store, memory


def _served_turn(tmp_path: Path) -> tuple[Any, Memory, list[bytes]]:
    """A streamed turn on our own provider against the loopback server: the store, the memory and the bytes
    of every request the server received."""
    with LoopbackServer(ScriptedModel(responder, name="server")) as server:
        model = OpenAICompatibleModel("loopback-chat", base_url=server.base_url, api_key="k", api_key_env=None,
                                      keyring_service=None)
        try:
            store, memory = _turn(tmp_path, model, stream=True)
        finally:
            model.close()
        return store, memory, server.chat_request_bytes()


def test_copy_request_body_copies_the_bytes_the_server_received(qtbot: Any, tmp_path: Path) -> None:
    store, memory, received = _served_turn(tmp_path)
    try:
        (turn,) = memory.turns("t")
        prompt = memory.assemble(as_of=turn.input_message_id)
        panel = RequestPanel()
        qtbot.addWidget(panel)
        assert len(received) == 2
        for k, sent in enumerate(received):
            view = call_view(prompt, memory.tokenizer, k)
            panel.show_request(view)
            assert panel.copy_btn.text() == COPY_BYTES and "exact bytes" in panel.copy_btn.toolTip()
            assert "the exact bytes sent" in panel.header.text()
            assert ("stream", "true (how the reply travels; in the bytes copied, not in the JSON)") in view.settings
            panel.copy_btn.click()
            assert QGuiApplication.clipboard().text().encode("utf-8") == sent
            # The readable copy is the indented JSON, and says it is for reading.
            assert panel.copy_readable_action.isEnabled()
            panel.copy_readable_action.trigger()
            readable = QGuiApplication.clipboard().text()
            assert "\n  " in readable and json.loads(readable) == {
                k2: v for k2, v in json.loads(sent).items() if k2 not in ("stream", "stream_options")}
    finally:
        store.close()


def test_a_custom_models_turn_says_its_copy_is_json_not_bytes(qtbot: Any, tmp_path: Path) -> None:
    store, memory = _turn(tmp_path, ScriptedModel(responder, name="custom"), stream=False)
    try:
        (turn,) = memory.turns("t")
        prompt = memory.assemble(as_of=turn.input_message_id)
        view = call_view(prompt, memory.tokenizer, 0)
        assert not view.exact_bytes and view.bytes_note == NOT_BYTES_CUSTOM
        panel = RequestPanel()
        qtbot.addWidget(panel)
        panel.show_request(view)
        assert panel.copy_btn.text() == COPY_JSON and "not the bytes sent" in panel.copy_btn.toolTip()
        assert "not the bytes sent" in panel.header.text() and not panel.copy_readable_action.isEnabled()
        panel.copy_btn.click()
        assert json.loads(QGuiApplication.clipboard().text()) == view.request

        # A record written before records kept the wire form says so too.
        info = prompt.replay
        assert info is not None and info.record is not None
        old = replace(info.record, wire=None)
        prompt.replay = replace(info, record=old)
        view = call_view(prompt, memory.tokenizer, 0)
        assert view.copy_label == COPY_JSON and view.bytes_note == NOT_BYTES_OLD
    finally:
        store.close()


def test_a_client_that_serialises_otherwise_gives_json_not_a_wrong_exact_copy(qtbot: Any, tmp_path: Path,
                                                                               monkeypatch: Any) -> None:
    """The openai client's JSON dump settings changed (as an upgrade might): the record keeps no bytes
    hash for calls whose bytes as sent differ from our reproduction, and the view says JSON, not bytes."""
    import openai._base_client

    monkeypatch.setattr(openai._base_client, "openapi_dumps", spaced_dumps)
    store, memory, received = _served_turn(tmp_path)
    try:
        assert len(received) == 2 and all(b'"model": "loopback-chat"' in sent for sent in received)
        (turn,) = memory.turns("t")
        prompt = memory.assemble(as_of=turn.input_message_id)
        panel = RequestPanel()
        qtbot.addWidget(panel)
        for k, sent in enumerate(received):
            view = call_view(prompt, memory.tokenizer, k)
            assert not view.exact_bytes and view.bytes_note == NOT_BYTES_CLIENT
            panel.show_request(view)
            assert panel.copy_btn.text() == COPY_JSON and "not the bytes sent" in panel.copy_btn.toolTip()
            assert "not the bytes sent" in panel.header.text()
            panel.copy_btn.click()
            copied = QGuiApplication.clipboard().text()
            assert copied.encode("utf-8") != sent and json.loads(copied) == view.request
    finally:
        store.close()


def test_a_turn_without_a_record_is_labelled_a_reconstruction_not_a_preview_nor_as_sent(tmp_path: Path) -> None:
    """A stored turn rebuilt without its record was sent: its copy says the body is rebuilt, never "a preview was
    never sent", and its tool list is not headed "as sent" (the agent's tools it was offered are not known)."""
    from core.replay.wire import NOT_BYTES_RECONSTRUCTED
    from core.tokens import default_tokenizer
    from studio.logic.request_layout import TOOLS_AS_SENT, TOOLS_NOT_RECORDED

    store, memory, _received = _served_turn(tmp_path)
    try:
        turn = memory.turns("t")[0]
        recorded = call_view(memory.assemble(as_of=turn.input_message_id), default_tokenizer())
        assert recorded.tools_label == TOOLS_AS_SENT and recorded.bytes_note is None
        with store.db.write() as conn:
            conn.exec_driver_sql("DELETE FROM memory_studio_turns")
        view = call_view(memory.assemble(as_of=turn.input_message_id), default_tokenizer())
        assert view.copy_label == COPY_JSON and view.bytes_note == NOT_BYTES_RECONSTRUCTED
        assert view.tools_label == TOOLS_NOT_RECORDED
    finally:
        store.close()
