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
from collections.abc import Callable, Iterator, Sequence
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
from core.storage.memory_store import MessageQuery

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


class DuringModelCall:
    """The model's reply: every text it was sent; ``then`` (when set) runs first, during the model call, as
    another program writing while the model thinks."""

    def __init__(self) -> None:
        self.then: Callable[[], None] | None = None

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> str:
        if self.then is not None:
            then, self.then = self.then, None
            then()
        return everything_sent(messages, tools)


@pytest.fixture
def during_model_call() -> DuringModelCall:
    return DuringModelCall()


@pytest.fixture
def memory(store, embedder) -> Memory:
    return Memory(store, MemoryOptions(
        last_messages=10, semantic_recall={"enabled": True, "scope": "thread", "top_k": 3},
        working_memory={"enabled": True, "scope": "thread", "use_state_signals": True}), embedder=embedder)


@pytest.fixture
def server(memory, tokens, during_model_call) -> Iterator[GatewayServer]:
    agent = Agent("chat", instructions="Chat.", model=ScriptedModel(during_model_call), memory=memory, tracer=False)
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
    bob = _bobs_held_turn(server, tokens, got, f"hello ({HOLD})")
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
    error = _refused_without_a_word_of_it(got)
    assert "alice" not in error.message.lower()  # (the owner is not named to another user)


def _bobs_streamed_turn(server: GatewayServer, tokens: dict[str, str], got: dict[str, Any], content: str) -> None:
    """Bob's streamed turn in ``THREAD``: its text in ``got["text"]``, its error (if any) in ``got["error"]``."""
    text: list[str] = []
    try:
        stream = _client(server, tokens["bob"]).chat.completions.create(
            model="chat", stream=True, messages=[{"role": "user", "content": content}], metadata={"thread_id": THREAD})
        for chunk in stream:
            text += [c.delta.content or "" for c in chunk.choices]
    except openai.APIError as exc:
        got["error"] = exc
    got["text"] = "".join(text)


def _bobs_first_turn(server: GatewayServer, tokens: dict[str, str]) -> None:
    """Bob's first turn in ``THREAD``: the thread is his."""
    done = _client(server, tokens["bob"]).chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "hi, I am Bob"}], metadata={"thread_id": THREAD})
    assert done.memory["thread_id"] == THREAD  # type: ignore[attr-defined]


def _bobs_held_turn(server: GatewayServer, tokens: dict[str, str], got: dict[str, Any],
                    content: str = f"and now ({HOLD})") -> threading.Thread:
    """``_bobs_streamed_turn``, started; it waits on its recall query until the embedder is released."""
    bob = threading.Thread(target=_bobs_streamed_turn, args=(server, tokens, got, content))
    bob.start()
    return bob


def _refused_without_a_word_of_it(got: dict[str, Any]) -> openai.PermissionDeniedError:
    assert ALICE_SECRET not in got["text"], got["text"]
    error = got.get("error")
    assert isinstance(error, openai.PermissionDeniedError), got
    assert ALICE_SECRET not in str(error.body)
    assert error.code == "thread_ownership"
    return error


def test_a_thread_deleted_and_created_again_by_another_user_while_a_turn_reads_is_not_read_into_it(
        server, memory, embedder, tokens):
    # Bob's thread, then his next turn, which passes its owner check on it and waits on its recall query.
    _bobs_first_turn(server, tokens)
    got: dict[str, Any] = {}
    bob = _bobs_held_turn(server, tokens, got)
    try:
        assert embedder.reached.wait(60), "Bob's turn never reached its recall query"
        # Meanwhile Bob's thread is deleted (the Studio, `memory-studio forget`, the app), and Alice takes its id.
        memory.delete_thread(THREAD)
        _client(server, tokens["alice"]).chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi, I am Alice"}], metadata={"thread_id": THREAD})
        assert _put_working_memory(server, tokens["alice"], THREAD, f"# Alice\n{ALICE_SECRET}\n") == 200
    finally:
        embedder.release.set()
        bob.join(60)
    assert not bob.is_alive()
    _refused_without_a_word_of_it(got)
    # Alice's thread holds only her turn: nothing of Bob's was written into it.
    stored = list(memory.store.memory.list_messages(MessageQuery(thread_id=THREAD)))
    assert {m.resource_id for m in stored} == {"alice"}
    assert not any("I am Bob" in m.text or HOLD in m.text for m in stored)


@pytest.mark.parametrize("began_with_its_thread", [False, True], ids=["new thread", "stored thread"])
def test_a_thread_stored_without_an_owner_while_a_turn_reads_is_not_read_into_it(
        server, memory, embedder, tokens, began_with_its_thread):
    if began_with_its_thread:
        _bobs_first_turn(server, tokens)
    got: dict[str, Any] = {}
    bob = _bobs_held_turn(server, tokens, got)
    try:
        assert embedder.reached.wait(60), "Bob's turn never reached its recall query"
        # Another program stores the thread id without an owner (a thread nobody may read from the gateway).
        if began_with_its_thread:
            memory.delete_thread(THREAD)
        memory.store.memory.create_thread(thread_id=THREAD, resource_id="",
                                          metadata={"workingMemory": f"# Notes\n{ALICE_SECRET}\n"})
    finally:
        embedder.release.set()
        bob.join(60)
    assert not bob.is_alive()
    error = _refused_without_a_word_of_it(got)
    assert "has no owner" in error.message
    assert memory.store.memory.count_messages(THREAD) == 0  # nothing of Bob's went into the other program's thread


@pytest.mark.parametrize("began_with_its_thread", [False, True], ids=["new thread", "stored thread"])
def test_a_thread_stored_without_an_owner_while_the_model_answers_gets_nothing_of_the_turn(
        server, memory, tokens, during_model_call, began_with_its_thread):
    if began_with_its_thread:
        _bobs_first_turn(server, tokens)

    def another_program_takes_the_id() -> None:
        if began_with_its_thread:
            memory.delete_thread(THREAD)
        memory.store.memory.create_thread(thread_id=THREAD, resource_id="", metadata={"note": "theirs"})

    during_model_call.then = another_program_takes_the_id
    with pytest.raises(openai.PermissionDeniedError) as refused:
        _client(server, tokens["bob"]).chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "my card ends 0420"}], metadata={"thread_id": THREAD})
    assert refused.value.code == "thread_ownership"
    assert memory.store.memory.count_messages(THREAD) == 0
    thread = memory.get_thread(THREAD)
    assert thread is not None and thread.resource_id == "" and "workingMemory" not in (thread.metadata or {})


def test_a_thread_taken_by_another_user_while_the_model_answers_gets_nothing_of_the_turn(
        server, memory, tokens, during_model_call):
    """(Held before: the save's owner check refuses it. Kept beside the ownerless cases.)"""
    _bobs_first_turn(server, tokens)
    during_model_call.then = lambda: _alice_takes_the_thread(memory)
    with pytest.raises(openai.PermissionDeniedError) as refused:
        _client(server, tokens["bob"]).chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "my card ends 0420"}], metadata={"thread_id": THREAD})
    assert refused.value.code == "thread_ownership"
    assert "alice" not in refused.value.message.lower()
    stored = list(memory.store.memory.list_messages(MessageQuery(thread_id=THREAD)))
    assert [m.resource_id for m in stored] == ["alice"]


def _get(server: GatewayServer, token: str, path: str) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    conn.request("GET", path, headers={"authorization": f"Bearer {token}"})
    response = conn.getresponse()
    status, body = response.status, json.loads(response.read())
    conn.close()
    return status, body


def _alice_takes_the_thread(memory: Memory) -> None:
    """Bob's thread deleted (the Studio, `memory-studio forget`), and its id stored again by Alice, with her
    message and working memory (what her first turn and working-memory PUT store)."""
    from core.messages import Message

    memory.delete_thread(THREAD)
    memory.save_messages([Message.user(f"note to self: {ALICE_SECRET}", thread_id=THREAD, resource_id="alice")])
    memory.update_working_memory(thread_id=THREAD, resource_id="alice", working_memory=f"# Alice\n{ALICE_SECRET}\n")


@pytest.mark.parametrize("route", ["messages", "working-memory"])
def test_a_read_of_a_thread_taken_by_another_user_between_its_check_and_its_read_answers_no_such_thread(
        server, memory, tokens, monkeypatch, route):
    """The memory API checks the thread's owner, then reads its messages or working memory by id: a thread deleted
    and stored again by another resource in between was read as the asker's. The race is made repeatable by
    doing the other user's part just before the read (the first message page, the working-memory value)."""
    _bobs_first_turn(server, tokens)
    assert _put_working_memory(server, tokens["bob"], THREAD, "# Bob\n- likes tea\n") == 200
    reads = memory.store.memory if route == "messages" else memory.working_memory_service
    name = "count_messages" if route == "messages" else "get"
    real = getattr(reads, name)
    taken: list[bool] = []

    def meanwhile(*args: Any, **kwargs: Any) -> Any:
        if not taken:
            taken.append(True)
            _alice_takes_the_thread(memory)
        return real(*args, **kwargs)

    monkeypatch.setattr(reads, name, meanwhile)
    status, body = _get(server, tokens["bob"], f"/api/memory/threads/{THREAD}/{route}?resourceId=bob")
    assert taken, "the race was not run"
    assert ALICE_SECRET not in json.dumps(body)
    if route == "messages":
        assert (status, body["error"]["code"]) == (404, "not_found"), body
        assert body["error"]["message"].startswith(f"No thread '{THREAD}' for resource 'bob'.")
    else:  # (as for a thread not stored yet: another resource's thread holds its own working memory)
        assert status == 200 and body["workingMemory"] is None and body["threadExists"] is False, body
    monkeypatch.undo()
    assert _get(server, tokens["alice"], f"/api/memory/threads/{THREAD}/{route}?resourceId=alice")[0] == 200


@pytest.mark.parametrize("tool", ["read_thread", "get_working_memory"])
def test_an_mcp_read_of_a_thread_taken_by_another_user_between_its_check_and_its_read_is_no_such_thread(
        memory, monkeypatch, tool):
    """The MCP server's reads have the memory API's shape (owner checked, then read by id): the same race, with the
    SDK's client in process."""
    anyio = pytest.importorskip("anyio")
    mcp = pytest.importorskip("mcp")
    from core.mcp_server.server import build_server
    from core.mcp_server.tools import Binding, MemoryTools
    from core.messages import Message

    memory.save_messages([Message.user("hi, I am Bob", thread_id=THREAD, resource_id="bob")])
    memory.update_working_memory(thread_id=THREAD, resource_id="bob", working_memory="# Bob\n- likes tea\n")
    reads = memory.store.memory if tool == "read_thread" else memory.working_memory_service
    name = "count_messages" if tool == "read_thread" else "get"
    real = getattr(reads, name)

    def meanwhile(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(reads, name, real)
        _alice_takes_the_thread(memory)
        return real(*args, **kwargs)

    monkeypatch.setattr(reads, name, meanwhile)
    tools = MemoryTools(memory, Binding("bob"))

    async def main() -> Any:
        async with mcp.Client(build_server(tools)) as client:
            return await client.call_tool(tool, {"thread": THREAD})

    result = anyio.run(main)
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert getattr(reads, name) is real, "the race was not run"
    assert ALICE_SECRET not in text
    assert result.is_error and f"No thread '{THREAD}' for resource 'bob'." in text, text


def test_a_thread_stored_without_an_owner_after_the_gateways_own_check_is_not_read_into_a_turn(
        server, memory, tokens, monkeypatch):
    """The gateway refuses a thread without an owner (nobody's: ``resolve_thread``) before the turn starts; the
    turn's own check lets one through (the engine's rule for in-process callers). One stored by another program
    between the two was read into the turn, and its messages saved into it. Made repeatable by storing it right
    after the gateway's check."""
    from core.gateway import openai_routes

    real = openai_routes.resolve_thread

    def then_another_program_stores_it(agent: Any, turn: Any) -> Any:
        resolved = real(agent, turn)
        memory.store.memory.create_thread(thread_id=THREAD, resource_id="",
                                          metadata={"workingMemory": f"# Notes\n{ALICE_SECRET}\n"})
        return resolved

    monkeypatch.setattr(openai_routes, "resolve_thread", then_another_program_stores_it)
    got: dict[str, Any] = {}
    _bobs_streamed_turn(server, tokens, got, "hello")
    assert "has no owner" in _refused_without_a_word_of_it(got).message
    assert memory.store.memory.count_messages(THREAD) == 0
