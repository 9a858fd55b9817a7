"""The Studio's Replay pane on a thread an OpenAI Agents SDK agent ran (pytest-qt, offscreen): the turn
shows what the SDK sent, recorded and exact, with nothing written by looking."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Iterator

import pytest

agents = pytest.importorskip("agents")
from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool  # noqa: E402
from agents import set_trace_processors  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402
from PySide6.QtCore import QSettings  # noqa: E402

from core import Memory, MemoryOptions, open_store  # noqa: E402
from core.embedding.hashing import HashingEmbedder  # noqa: E402
from core.integrations.openai_agents import MemorySession, trace_processor  # noqa: E402
from core.llm.loopback import LoopbackServer  # noqa: E402
from studio.panes.replay import ReplayPane  # noqa: E402
from studio.preferences import Preferences  # noqa: E402
from studio.selection import Selection  # noqa: E402
from studio.session import StudioSession, open_for_studio  # noqa: E402

from .test_replay_pane import checksum  # noqa: E402


@function_tool
def opening_hours(place: str) -> str:
    """When a place is open."""
    return f"{place}: 9 to 17"


@pytest.fixture()
def sdk_db(tmp_path: Path) -> Iterator[tuple[Path, list[dict[str, Any]]]]:
    set_trace_processors([trace_processor()])
    path = tmp_path / "sdk.db"
    store = open_store(path)
    memory = Memory(store, MemoryOptions(last_messages=10), embedder=HashingEmbedder(), name="guide")
    script: list[Any] = [{"tool_calls": [{"name": "opening_hours", "id": "c1", "arguments": {"place": "museum"}}]},
                         {"text": "Open 9 to 17."}]
    with LoopbackServer(script) as server:
        session = MemorySession("visit", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        agent = Agent(name="guide", instructions="You are a terse guide.", tools=[opening_hours],
                      model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client),
                      model_settings=ModelSettings(temperature=0.3))
        asyncio.run(Runner.run(agent, "When is the museum open?", session=session, run_config=session.run_config()))
        sent = server.chat_requests()
    store.close()
    yield path, sent
    set_trace_processors([trace_processor()])


def test_the_replay_pane_shows_an_sdk_turn_as_sent(qtbot: Any, qapp: Any, tmp_path: Path, no_leaked_widgets: None,
                                                   sdk_db: tuple[Path, list[dict[str, Any]]]) -> None:
    path, sent = sdk_db
    prefs = Preferences(QSettings(str(tmp_path / "prefs.ini"), QSettings.Format.IniFormat))
    session = StudioSession(open_for_studio(path))
    pane = ReplayPane(session, preferences=prefs)
    qtbot.addWidget(pane)
    pane.resize(1400, 860)
    pane.show()
    try:
        before = checksum(session.store)
        with qtbot.waitSignal(pane.step_shown, timeout=30_000):
            pane.set_selection(Selection("ada", "visit"))
        qtbot.waitUntil(lambda: pane.step is not None and not pane.busy, timeout=20_000)
        step = pane.step
        assert step.received.replay is not None and step.received.replay.status == "recorded (exact)"
        assert "recorded (exact)" in pane.facts.text()
        assert [r.request for r in step.requests] == sent
        assert "When is the museum open?" in pane.view.received_view.toPlainText()
        assert "You are a terse guide." in pane.view.received_view.toPlainText()
        # "Rebuilt now" is our processors' view of a turn the SDK built: said so, not called a change.
        assert "openai-agents built this turn's prompts" in pane.banner.text()
        assert "differently now" not in pane.banner.text()
        assert checksum(session.store) == before  # looking never writes
    finally:
        session.pool.wait(20_000)
        session.close()
