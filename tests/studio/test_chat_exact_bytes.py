"""The Studio's Chat turn, as Replay and the prompt inspector show it, is the bytes the model server received.

The Chat pane runs a turn of the registered agent on the loopback server with the temperature and top-p
set in its spin boxes (values a spin box makes, such as 0.7, which are not short binary fractions) and
its reply cap, and a message with non-ASCII text and characters JSON escapes. From a fresh store on the
same database, each call of the stored turn is laid out as the request view shows it (``call_view``):
the bytes it copies (``wire``) are the server's, byte for byte, and its settings rows name the values
sent.
"""

from __future__ import annotations

import json

import pytest

from core import Memory, open_store
from core.llm import LoopbackServer
from core.tokens import default_tokenizer
from studio.logic.request_layout import call_view
from studio.selection import Selection

from .test_chat_pane import Endpoint, pane, select, send, session, use_models  # noqa: F401 - fixtures

pytest.importorskip("PySide6")


def test_a_chat_turn_with_settings_set_here_is_shown_as_the_bytes_the_server_received(qtbot, pane, session,  # noqa: F811
                                                                                       tmp_path):
    with LoopbackServer(["Grüße 👋 — „gern“.", "Noch einmal ✓."]) as server:
        use_models(pane, Endpoint("Loopback", server.base_url))
        select(qtbot, pane, Selection("ada", "t-food"))
        pane.temperature_spin.setValue(0.7)
        pane.top_p_spin.setValue(0.35)
        pane.cap_spin.setValue(123)
        send(qtbot, pane, "Was koche ich heute? „Käse“ 🧀 \"quoted\" \\ tab\there </script> \u2028")
        pane.temperature_spin.setValue(1.0)
        send(qtbot, pane, "Und morgen?")
        received = server.chat_request_bytes()
    assert len(received) == 2 and b'"temperature":0.7' in received[0] and b'"temperature":1.0' in received[1]
    store = open_store(tmp_path / "memory.db")
    try:
        memory = Memory(store, name="chef-memory")
        turns = memory.turns("t-food")[-2:]
        tokenizer = default_tokenizer()
        for turn, sent in zip(turns, received):
            view = call_view(memory.assemble(as_of=turn.input_message_id), tokenizer)
            assert view.bytes_note is None, view.bytes_note
            assert view.wire == sent
            body = json.loads(sent)
            rows = dict(view.settings)
            for key in ("temperature", "top_p", "max_tokens"):
                assert json.loads(rows[key]) == body[key] and rows[key] == json.dumps(body[key]), (key, rows[key])
    finally:
        store.close()
