"""A storage failure a client meets (the database busy, read-only, full) is answered with what happened and what to
do, never with the storage error's own text, which names where the server keeps its database (the file, its
folder; a Postgres server's host, database and role): that is for the server's log. Through a running gateway
(the official ``openai`` client, with an ``Idempotency-Key``) and the MCP SDK's client, on a real libSQL file whose
trigger makes the write fail as the driver would."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import openai
import pytest

from core import Memory, MemoryOptions, open_store
from core.agent import Agent
from core.embedding.hashing import HashingEmbedder
from core.gateway import GatewayServer, create_app
from core.llm import ScriptedModel


def _fail_saves(store: Any, why: str) -> None:
    """Every message save now fails in the database with SQLite's ``why``."""
    with store.db.write() as conn:
        conn.exec_driver_sql("CREATE TRIGGER failing BEFORE INSERT ON mastra_messages "
                             f"BEGIN SELECT RAISE(ABORT, '{why}'); END")


def _heal(store: Any) -> None:
    with store.db.write() as conn:
        conn.exec_driver_sql("DROP TRIGGER failing")


def _private(store: Any) -> list[str]:
    path = store.location.path
    return [str(path), str(path.parent), path.parent.name]


def _client(server: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=60)


def test_a_busy_database_is_a_503_that_names_no_file_and_gives_the_key_back(tmp_path: Path) -> None:
    folder = tmp_path / "srv-private-folder"
    folder.mkdir()
    store = open_store(folder / "memory.db")
    try:
        memory = Memory(store, MemoryOptions(last_messages=10))
        agent = Agent("echo", instructions="Echo.", model=ScriptedModel(lambda m, t: "ok"), memory=memory,
                      tracer=False)
        _fail_saves(store, "database is locked")
        key = {"Idempotency-Key": "k-busy"}
        turn = {"model": "echo", "messages": [{"role": "user", "content": "remember the oat milk"}],
                "metadata": {"thread_id": "t-busy", "resource_id": "ada"}}
        with GatewayServer(create_app([agent], token="")) as server:
            with pytest.raises(openai.APIStatusError) as caught:
                _client(server).chat.completions.create(**turn, extra_headers=key)
            _heal(store)
            again = _client(server).chat.completions.with_raw_response.create(**turn, extra_headers=key)
        error = caught.value
        assert error.status_code == 503 and error.body["code"] == "storage_unavailable"  # type: ignore[index]
        message = error.body["message"]  # type: ignore[index]
        assert "busy" in message and "again" in message and "nothing of this request was saved" in message
        assert [p for p in _private(store) if p in message] == [], message
        # Nothing was kept for the key: the retry ran, once.
        assert again.http_response.status_code == 200 and again.headers.get("idempotent-replayed") is None
        texts = [m.text for m in memory.recall(thread_id="t-busy", resource_id="ada").messages]
        assert texts == ["remember the oat milk", "ok"]
    finally:
        store.close()


def test_a_read_only_database_is_a_403_that_names_no_file(tmp_path: Path) -> None:
    path = tmp_path / "srv-private-folder" / "memory.db"
    path.parent.mkdir()
    open_store(path).close()
    store = open_store(path, read_only=True)
    try:
        agent = Agent("echo", instructions="Echo.", model=ScriptedModel(lambda m, t: "ok"),
                      memory=Memory(store, MemoryOptions(last_messages=10)), tracer=False)
        with GatewayServer(create_app([agent], token="")) as server:
            with pytest.raises(openai.PermissionDeniedError) as caught:
                _client(server).chat.completions.create(
                    model="echo", messages=[{"role": "user", "content": "hi"}], metadata={"resource_id": "ada"})
        message = caught.value.body["message"]  # type: ignore[index]
        assert caught.value.body["code"] == "read_only"  # type: ignore[index]
        assert "takes no writes" in message and "nothing was written" in message
        assert [p for p in _private(store) if p in message] == [], message
    finally:
        store.close()


def test_mcp_a_failed_save_is_a_tool_error_that_names_no_file(tmp_path: Path) -> None:
    from mcp import Client

    from core.mcp_server.server import build_server
    from core.mcp_server.tools import Binding, MemoryTools

    folder = tmp_path / "srv-private-folder"
    folder.mkdir()
    store = open_store(folder / "memory.db")
    try:
        tools = MemoryTools(Memory(store, MemoryOptions(), embedder=HashingEmbedder()), Binding("ada"))

        async def main() -> list[Any]:
            async with Client(build_server(tools)) as client:
                answers = []
                for why in ("database or disk is full", "database is locked"):
                    _fail_saves(store, why)
                    answers.append(await client.call_tool("remember", {"text": "hi", "thread": "t1"}))
                    _heal(store)
                return answers

        full, busy = anyio.run(main)
    finally:
        store.close()
    texts = [" ".join(getattr(c, "text", "") for c in r.content) for r in (full, busy)]
    assert full.is_error and busy.is_error
    assert "nothing of it was saved" in texts[0] and "again in a moment" in texts[1]
    for text in texts:
        assert [p for p in _private(store) if p in text] == [], text


def _storage_lines(caplog: Any, store: Any) -> list[str]:
    """The log lines that carry a storage error's full text (they name the database file)."""
    return [r.getMessage() for r in caplog.records if str(store.location.path) in r.getMessage()]


@pytest.mark.parametrize("stream", [False, True])
def test_a_storage_error_is_logged_once_with_its_full_text(tmp_path: Path, caplog: Any, stream: bool) -> None:
    """One busy database answered one request, and the server's log had its text two or three times (each place
    that asked how to answer it logged it: the idempotency key's keeping, the answer). Now once, where the answer
    is made, with the full text (the file's path), through the gateway (plain and streamed, with an
    Idempotency-Key) and the MCP server."""
    from mcp import Client

    from core.mcp_server.server import build_server
    from core.mcp_server.tools import Binding, MemoryTools

    store = open_store(tmp_path / "memory.db")
    try:
        memory = Memory(store, MemoryOptions(last_messages=10))
        agent = Agent("echo", instructions="Echo.", model=ScriptedModel(lambda m, t: "ok"), memory=memory,
                      tracer=False)
        _fail_saves(store, "database is locked")
        caplog.set_level(logging.DEBUG)
        with GatewayServer(create_app([agent], token="")) as server:
            with pytest.raises(openai.APIError) as caught:  # (streamed: the error event after the text)
                reply = _client(server).chat.completions.create(
                    model="echo", messages=[{"role": "user", "content": "hi"}], stream=stream,
                    metadata={"thread_id": "t1", "resource_id": "ada"}, extra_headers={"Idempotency-Key": "k1"})
                list(reply) if stream else None  # type: ignore[call-overload]
        assert "busy" in caught.value.message
        gateway_lines = _storage_lines(caplog, store)
        caplog.clear()
        tools = MemoryTools(Memory(store, MemoryOptions(), embedder=HashingEmbedder()), Binding("ada"))

        async def main() -> Any:
            async with Client(build_server(tools)) as client:
                return await client.call_tool("remember", {"text": "hi", "thread": "t2"})

        assert anyio.run(main).is_error
        mcp_lines = _storage_lines(caplog, store)
    finally:
        store.close()
    for lines in (gateway_lines, mcp_lines):
        assert len(lines) == 1 and "is busy" in lines[0], lines
