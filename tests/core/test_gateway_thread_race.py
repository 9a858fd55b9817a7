"""Two users' first turns in one thread id at once: neither reads what the other stored.

Thread ids are global: the first resource to store a thread owns it, and another resource naming that id is
refused (403 ``thread_ownership``). A turn checks the owner when it starts (``request_context``), then its
processors read the thread's memory by id. A thread another resource created between the two was read as the
turn's own: its working memory went into the turn's prompt, and a streamed reply relayed it to the wrong user
before the save refused the turn.

A real gateway (uvicorn, tokens file with one token per user), the official ``openai`` client, libSQL and
Postgres. The race is made deterministic with an embedder that holds Bob's query (recall embeds it after the
turn's owner check and before the working-memory snapshot is read) until Alice's first turn and working-memory
write are stored.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import quote

import openai
import pytest

from core import Memory, MemoryOptions
from core.agent import Agent
from core.embedding.hashing import HashingEmbedder
from core.gateway import GatewayServer, create_app
from core.gateway.guard import GuardPolicy
from core.gateway.tokens import TokensFile, entry_for, new_token
from core.llm import ScriptedModel

pytestmark = pytest.mark.backends

ALICE_SECRET = "alice's locker code is 7741-heron"
HOLD = "hold-this-query"
THREAD = "onboarding"  # a thread id two apps' users may both pick


class HeldEmbedder(HashingEmbedder):
    """Embeds as ``HashingEmbedder`` does, but holds a text holding ``HOLD`` until ``release`` is set (a slow
    embedding service, for one query): ``reached`` says a turn is waiting there."""

    def __init__(self) -> None:
        super().__init__(64)
        self.reached, self.release = threading.Event(), threading.Event()

    def embed(self, texts: Sequence[str], kind: Any = "passage") -> Any:
        if any(HOLD in t for t in texts) and not self.release.is_set():
            self.reached.set()
            if not self.release.wait(60):
                raise RuntimeError("the test never released the held query")
        return super().embed(texts, kind)


def everything_sent(messages: list[dict[str, Any]], tools: Any) -> str:
    """Replies with every text the model was sent, so anything of another user's would show."""
    return " | ".join(str(m.get("content") or "") for m in messages)


@pytest.fixture
def embedder() -> HeldEmbedder:
    return HeldEmbedder()


@pytest.fixture
def tokens() -> dict[str, str]:
    return {"alice": new_token(), "bob": new_token()}


@pytest.fixture
def server(store, embedder, tokens) -> Iterator[GatewayServer]:
    memory = Memory(store, MemoryOptions(
        last_messages=10, semantic_recall={"enabled": True, "scope": "thread", "top_k": 3},
        working_memory={"enabled": True, "scope": "thread", "use_state_signals": True}), embedder=embedder)
    agent = Agent("chat", instructions="Chat.", model=ScriptedModel(everything_sent), memory=memory, tracer=False)
    file = TokensFile(None, tuple(entry_for(f"{name}-app", [name], token) for name, token in tokens.items()))
    app = create_app([agent], policy=GuardPolicy(tokens=file))
    with GatewayServer(app) as served:
        yield served


def _client(server: GatewayServer, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=token, max_retries=0, timeout=60)


def _put_working_memory(server: GatewayServer, token: str, thread: str, text: str) -> int:
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    conn.request("PUT", f"/api/memory/threads/{quote(thread, safe='')}/working-memory",
                 json.dumps({"workingMemory": text}),
                 {"content-type": "application/json", "authorization": f"Bearer {token}"})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response.status


def test_a_thread_another_user_created_while_a_turn_started_is_not_read_into_it(server, embedder, tokens):
    got: dict[str, Any] = {}

    def bobs_streamed_turn() -> None:
        text: list[str] = []
        try:
            stream = _client(server, tokens["bob"]).chat.completions.create(
                model="chat", stream=True, messages=[{"role": "user", "content": f"hello ({HOLD})"}],
                metadata={"thread_id": THREAD})
            for chunk in stream:
                text += [c.delta.content or "" for c in chunk.choices]
        except openai.APIError as exc:
            got["error"] = exc
        got["text"] = "".join(text)

    bob = threading.Thread(target=bobs_streamed_turn)
    bob.start()
    try:
        # Bob's turn has passed its owner check (no such thread yet) and waits on its recall query.
        assert embedder.reached.wait(60), "Bob's turn never reached its recall query"
        alice = _client(server, tokens["alice"]).chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi, I am Alice"}], metadata={"thread_id": THREAD})
        assert alice.memory["thread_id"] == THREAD  # type: ignore[attr-defined]
        assert _put_working_memory(server, tokens["alice"], THREAD, f"# Alice\n{ALICE_SECRET}\n") == 200
    finally:
        embedder.release.set()
        bob.join(60)
    assert not bob.is_alive()

    # Nothing of Alice's reached Bob: refused as a thread of another resource, as his turn would be a moment later.
    assert ALICE_SECRET not in got["text"]
    error = got.get("error")
    assert isinstance(error, openai.PermissionDeniedError), got
    assert ALICE_SECRET not in str(error.body)
    assert error.code == "thread_ownership"
    assert "alice" not in error.message.lower()  # (the owner is not named to another user)
