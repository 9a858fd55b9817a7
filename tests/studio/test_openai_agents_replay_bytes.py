"""An OpenAI Agents SDK turn's request view copies the exact bytes the SDK's client sent.

A real SDK ``Runner`` (chat completions) runs against the loopback server, which keeps the raw bytes
of each request: non-ASCII text, emoji, a tool, a streamed run. Each call's bytes, made again from
the turn's record, equal those bytes; the Studio's "Copy Request Body" copies them and says so.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Iterator

import pytest

agents = pytest.importorskip("agents")
from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_trace_processors  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from core import Memory, MemoryOptions, open_store  # noqa: E402
from core.embedding.hashing import HashingEmbedder  # noqa: E402
from core.integrations.openai_agents import MemorySession, trace_processor  # noqa: E402
from core.llm.loopback import LoopbackServer  # noqa: E402
from core.replay.wire import call_bytes  # noqa: E402
from studio.logic.request_layout import COPY_BYTES, call_view  # noqa: E402


@pytest.fixture()
def only_our_traces() -> Iterator[None]:
    set_trace_processors([trace_processor()])
    yield
    set_trace_processors([trace_processor()])


@function_tool
def wetter(stadt: str) -> str:
    """Das Wetter heute in einer Stadt — „Köln“, 東京 ☀️."""
    return f"sonnig in {stadt} ☀️"


def test_each_sdk_call_copies_the_bytes_its_client_sent(tmp_path: Path, only_our_traces: None) -> None:
    store = open_store(tmp_path / "m.db")
    memory = Memory(store, MemoryOptions(last_messages=10), embedder=HashingEmbedder(), name="reise")
    script: list[Any] = [
        {"tool_calls": [{"name": "wetter", "id": "call_1", "arguments": {"stadt": "Köln"}}]},
        {"text": "Sonnig in Köln ☀️."},
        {"text": "Gern 😊 — „so“."},
    ]
    try:
        with LoopbackServer(script) as server:
            session = MemorySession("reise", memory=memory, resource_id="zoë")
            client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
            agent = Agent(name="reise", instructions="Du hilfst bei Reisen – “höflich”.",
                          model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client),
                          tools=[wetter], model_settings=ModelSettings(temperature=0.2, max_tokens=200))
            asyncio.run(Runner.run(agent, "Wie ist das Wetter in Köln? 👋🏽", session=session,
                                   run_config=session.run_config()))

            async def streamed() -> Any:
                run = Runner.run_streamed(agent, "Erzähl etwas über 東京 \"kurz\".", session=session,
                                          run_config=session.run_config())
                async for _event in run.stream_events():
                    pass
                return run.final_output

            asyncio.run(streamed())
            received = server.chat_request_bytes()
        assert len(received) == 3 and b'"stream":true' in received[2] and "Köln".encode() in received[0]

        inputs = [m for m in memory.recall(thread_id="reise", resource_id="zoë", per_page=False).messages
                  if m.role == "user"]
        views = []
        for nth in (0, 1):
            prompt = memory.assemble(thread_id="reise", resource_id="zoë", as_of=inputs[nth].id)
            info = prompt.replay
            assert info is not None and info.exact
            for k, call in enumerate(info.calls):
                assert call_bytes(info, call) is not None
                views.append(call_view(prompt, memory.tokenizer, k))
        assert [v.copy_text.encode("utf-8") for v in views] == received
        assert all(v.copy_label == COPY_BYTES and v.exact_bytes for v in views)
    finally:
        store.close()
