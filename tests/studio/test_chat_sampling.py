"""The Chat pane's Temperature and Top-p (Mastra Studio's chat lets one tweak both): "default" sends the
agent's own setting (its recorded turn's, else none: the model's default); a value set here is sent instead
and the settings line says so."""

from __future__ import annotations

import pytest

from core.llm import LoopbackServer

from .test_chat_pane import Endpoint, pane, send, session, use_models  # noqa: F401 - fixtures

pytest.importorskip("PySide6")


def test_temperature_and_top_p_start_at_default_and_a_value_set_here_is_sent(qtbot, pane):  # noqa: F811
    with LoopbackServer(["One.", "Two."]) as server:
        use_models(pane, Endpoint("Loopback", server.base_url))
        qtbot.waitUntil(lambda: pane.context is not None, timeout=10_000)
        pane.agent_combo.setCurrentIndex(pane.agent_combo.count() - 1)  # the default agent
        assert pane.temperature_spin.isVisible() and pane.top_p_spin.isVisible()
        assert pane.temperature_spin.text() == "default" and pane.top_p_spin.text() == "default"
        send(qtbot, pane, "Hello")
        first = server.chat_requests()[-1]
        assert "temperature" not in first and "top_p" not in first
        pane.temperature_spin.setValue(0.3)
        pane.top_p_spin.setValue(0.9)
        assert "temperature 0.3" in pane.settings_label.text() and "top_p 0.9" in pane.settings_label.text()
        assert "set here" in pane.settings_label.text()
        send(qtbot, pane, "Again")
        second = server.chat_requests()[-1]
    assert second["temperature"] == pytest.approx(0.3) and second["top_p"] == pytest.approx(0.9)
    assert second["max_tokens"] == pane.cap_spin.value()  # the cap still applies
