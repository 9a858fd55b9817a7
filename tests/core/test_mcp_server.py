"""`memory-studio mcp`, driven by the official MCP SDK's own clients (stdio and streamable HTTP).

The server runs as a real subprocess of the real entry point, on a libSQL file holding two users'
memory; the one bound to ``ada`` must never hand out ``bob``'s threads, messages, search hits,
working memory or transcripts. Every call is then found in the trace file as a run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import anyio
import pytest

pytest.importorskip("mcp")
from mcp import Client, StdioServerParameters  # noqa: E402

from core import Memory, MemoryOptions, open_store  # noqa: E402
from core.embedding import EmbedderError, shared_default_embedder  # noqa: E402
from core.messages import Message  # noqa: E402
from core.traces.reader import TraceFilters  # noqa: E402
from core.traces.store import DuckDBObservabilityStore  # noqa: E402

TEMPLATE = "# User\n- Name:\n- Allergies:\n"
TOOLS = {"search_memory", "list_threads", "read_thread", "get_working_memory", "update_working_memory", "remember"}


@pytest.fixture(scope="module")
def embedder() -> Any:
    try:
        return shared_default_embedder()
    except EmbedderError as exc:  # pragma: no cover - `make install` provisions it
        pytest.skip(f"the local embedding model is not installed: {exc}")


@pytest.fixture()
def db(tmp_path: Path, embedder: Any) -> Path:
    path = tmp_path / "memory.db"
    with open_store(path) as store:
        options = MemoryOptions(working_memory={"enabled": True, "scope": "resource", "template": TEMPLATE},
                                semantic_recall=True)
        memory = Memory(store, options, embedder=embedder, name="assistant")
        memory.register("assistant", instructions="You help.")  # the server takes its template from here
        memory.save_messages([
            Message.user("My bank PIN is zebra-4321-quartz and I am allergic to peanuts", thread_id="bob-secret",
                         resource_id="bob"),
            Message.assistant("I will keep your peanut allergy in mind, Bob.", thread_id="bob-secret",
                              resource_id="bob"),
        ])
        memory.update_working_memory(resource_id="bob", working_memory="# User\n- Name: Bob\n- Allergies: peanuts\n")
        store.tracer().flush(30)
    return path


def _params(db: Path, *args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "studio.cli", "mcp", "--db", str(db), *args],
                                 env=dict(os.environ), cwd=str(Path(__file__).resolve().parents[2]))


def _data(result: Any) -> Any:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


def _error(result: Any) -> str:
    assert result.is_error, result
    return " ".join(getattr(c, "text", "") for c in result.content)


async def _session(client: Client) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    tools = await client.list_tools()
    seen["tools"] = {t.name for t in tools.tools}
    seen["remember"] = [_data(await client.call_tool("remember", {"text": text, "thread": "ada-food",
                                                                  "title": "Food"}))
                        for text in ("I am allergic to peanuts and I love Thai food",
                                     "Please remind me to buy oat milk")]
    seen["search"] = _data(await client.call_tool("search_memory", {"query": "peanut allergy", "top_k": 5}))
    seen["threads"] = _data(await client.call_tool("list_threads", {}))
    seen["read"] = _data(await client.call_tool("read_thread", {"thread": "ada-food"}))
    seen["read_bob"] = _error(await client.call_tool("read_thread", {"thread": "bob-secret"}))
    seen["search_bob"] = _error(await client.call_tool("search_memory", {"query": "PIN", "resource": "bob"}))
    seen["remember_bob"] = _error(await client.call_tool("remember", {"text": "hi", "thread": "bob-secret"}))
    seen["wm_before"] = _data(await client.call_tool("get_working_memory", {}))
    seen["wm_update"] = _data(await client.call_tool(
        "update_working_memory", {"working_memory": "# User\n- Name: Ada\n- Allergies: peanuts\n"}))
    seen["wm_after"] = _data(await client.call_tool("get_working_memory", {}))
    seen["wm_bad"] = _error(await client.call_tool("update_working_memory", {"working_memory": {"name": "Ada"}}))
    resources = await client.list_resources()
    seen["resources"] = [str(r.uri) for r in resources.resources]
    transcript = await client.read_resource("memory://threads/ada-food")
    seen["transcript"] = transcript.contents[0].text
    try:
        bob = await client.read_resource("memory://threads/bob-secret")
        seen["transcript_bob"] = " ".join(getattr(c, "text", "") for c in bob.contents)
    except Exception as exc:  # the SDK raises the server's error
        seen["transcript_bob_error"] = str(exc)
    return seen


def test_stdio_server_bound_to_one_resource(db: Path) -> None:
    async def main() -> dict[str, Any]:
        async with Client(_params(db, "--resource", "ada")) as client:
            return await _session(client)

    seen = anyio.run(main)
    assert seen["tools"] == TOOLS
    assert all(r["thread"] == "ada-food" and r["resource"] == "ada" for r in seen["remember"])

    hits = seen["search"]["results"]
    assert hits and hits[0]["text"] == "I am allergic to peanuts and I love Thai food"
    assert all(h["threadId"] == "ada-food" for h in hits)  # bob's peanut messages match too, but are his
    assert all(isinstance(h["score"], float) for h in hits)
    assert [t["id"] for t in seen["threads"]["threads"]] == ["ada-food"]
    assert [m["text"] for m in seen["read"]["messages"]] == [
        "I am allergic to peanuts and I love Thai food", "Please remind me to buy oat milk"]

    for refusal in ("read_bob", "remember_bob"):
        assert "bob" in seen[refusal] and "zebra-4321-quartz" not in seen[refusal]
        assert 'resource "bob"' not in seen[refusal] and "resource 'bob'" not in seen[refusal]
    # The thread's id is named (the client gave it), its owner is not: another user's identifier. Reading it
    # answers as for a thread that does not exist; taking its id for a new thread is refused.
    assert "No thread 'bob-secret' for resource 'ada'" in seen["read_bob"], seen["read_bob"]
    assert 'belongs to another resource, not "ada"' in seen["remember_bob"], seen["remember_bob"]
    assert "bound to resource 'ada'" in seen["search_bob"]

    assert seen["wm_before"]["workingMemory"] is None and seen["wm_before"]["template"] == TEMPLATE
    assert seen["wm_after"]["workingMemory"] == "# User\n- Name: Ada\n- Allergies: peanuts\n"
    assert "Markdown" in seen["wm_bad"]

    assert seen["resources"] == ["memory://threads/ada-food"]
    assert "I am allergic to peanuts and I love Thai food" in seen["transcript"]
    assert "zebra-4321-quartz" not in json.dumps(seen, default=sorted)
    assert "transcript_bob_error" in seen

    with open_store(db, read_only=True) as store:
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "template": TEMPLATE}))
        assert memory.get_working_memory(resource_id="bob") == "# User\n- Name: Bob\n- Allergies: peanuts\n"
        assert [m.text for m in memory.recall(thread_id="ada-food", resource_id="ada", per_page=False)] == [
            "I am allergic to peanuts and I love Thai food", "Please remind me to buy oat milk"]
        traces = DuckDBObservabilityStore(store.location.observability_path, read_only=True)
        runs = traces.list_traces(limit=100, filters=TraceFilters(resource_id="ada"))
    names = sorted(r.name for r in runs)
    assert sorted(r.status for r in runs if r.name == "mcp: 'remember'") == ["error", "ok", "ok"]
    assert {"mcp: 'search_memory'", "mcp: 'read_thread'", "mcp: 'update_working_memory'",
            "mcp: 'get_working_memory'", "mcp: 'list_threads'", "mcp: 'read_resource'"} <= set(names)
    assert any(r.name == "mcp: 'read_thread'" and r.status == "error" for r in runs)  # the refused read of bob's
    # A call refused for naming another resource is a run too, an error on the bound resource.
    assert sorted(r.status for r in runs if r.name == "mcp: 'search_memory'") == ["error", "ok"]


def test_any_resource_needs_a_token(db: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_STUDIO_MCP_TOKEN"}
    done = subprocess.run([sys.executable, "-m", "studio.cli", "mcp", "--db", str(db), "--any-resource"],
                          capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=120)
    assert done.returncode != 0 and "needs a token" in done.stderr and done.stdout == ""
    done = subprocess.run([sys.executable, "-m", "studio.cli", "mcp", "--db", str(db)],
                          capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=120)
    assert done.returncode != 0 and "--resource" in done.stderr


def test_any_resource_with_a_token_takes_the_resource_per_call(db: Path) -> None:
    env = {**os.environ, "MEMORY_STUDIO_MCP_TOKEN": "s3cret-token-value"}

    async def main() -> tuple[Any, str, Any]:
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "studio.cli", "mcp", "--db", str(db), "--any-resource"], env=env)
        async with Client(params) as client:
            bob = _data(await client.call_tool("list_threads", {"resource": "bob"}))
            missing = _error(await client.call_tool("list_threads", {}))
            cross = await client.call_tool("read_thread", {"thread": "bob-secret", "resource": "ada"})
            return bob, missing, cross

    bob, missing, cross = anyio.run(main)
    assert [t["id"] for t in bob["threads"]] == ["bob-secret"]
    assert "name one" in missing
    assert cross.is_error and "zebra-4321-quartz" not in json.dumps([c.model_dump() for c in cross.content])


class HttpServer:
    """`memory-studio mcp --http --port 0` as a subprocess; the URL read from its ready line."""

    def __init__(self, db: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "studio.cli", "mcp", "--db", str(db), "--http", "--port", "0", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env or dict(os.environ))
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if " on http://" in line:
                self.url = line.split(" on ", 1)[1].split()[0]
                break
        else:  # pragma: no cover - the server died; show why
            raise AssertionError(f"the server did not start: {self.proc.wait(30)}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def test_http_server_keeps_the_gateways_rules(db: Path) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    server = HttpServer(db, "--resource", "ada", env={**os.environ, "MEMORY_STUDIO_MCP_TOKEN": "s3cret-token-value"})
    try:
        assert server.url.endswith("/mcp")

        async def main() -> tuple[Any, ...]:
            headers = {"Authorization": "Bearer s3cret-token-value"}
            async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
                async with Client(streamable_http_client(server.url, http_client=http)) as client:
                    tools = await client.list_tools()
                    threads = _data(await client.call_tool("list_threads", {}))
                    refused = _error(await client.call_tool("read_thread", {"thread": "bob-secret"}))
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            json_type = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
            async with httpx2.AsyncClient(timeout=60) as raw:
                no_token = await raw.post(server.url, content=body, headers=json_type)
                bad_host = await raw.post(server.url, content=body, headers={
                    **json_type, **headers, "Host": "evil.example"})
                bad_origin = await raw.post(server.url, content=body, headers={
                    **json_type, **headers, "Origin": "https://evil.example"})
                not_json = await raw.post(server.url, content=body, headers={
                    **headers, "Content-Type": "text/plain", "Accept": json_type["Accept"]})
            return tools, threads, refused, no_token, bad_host, bad_origin, not_json

        tools, threads, refused, no_token, bad_host, bad_origin, not_json = anyio.run(main)
    finally:
        server.stop()
    assert {t.name for t in tools.tools} == TOOLS
    assert [t["id"] for t in threads["threads"]] == []  # ada has no threads yet; bob's are never listed
    assert "bob" in refused and "zebra-4321-quartz" not in refused
    assert (no_token.status_code, no_token.json()["error"]["code"]) == (401, "invalid_api_key")
    assert (bad_host.status_code, bad_host.json()["error"]["code"]) == (421, "host_not_allowed")
    assert (bad_origin.status_code, bad_origin.json()["error"]["code"]) == (403, "origin_not_allowed")
    assert (not_json.status_code, not_json.json()["error"]["code"]) == (415, "unsupported_media_type")


def test_http_bodies_are_limited_by_max_body_mb_alone(tmp_path: Path) -> None:
    """The SDK refused any body over its own 4 MB, in plain text ("Request body too large"), under the
    guard's 16 MB default and whatever --max-body-mb said, so a client's tool call failed with "Server
    returned an error response" and raising the flag changed nothing. The flag's limit is the only one."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    server = HttpServer(tmp_path / "memory.db", "--resource", "ada", "--max-body-mb", "8")
    try:
        async def main() -> tuple[str, Any]:
            async with httpx2.AsyncClient(timeout=120) as http:
                async with Client(streamable_http_client(server.url, http_client=http)) as client:
                    # 5 MB of arguments: the tool runs, and refuses the message with the memory's own reason.
                    refused = _error(await client.call_tool("remember", {"text": "x" * 5_000_000, "thread": "t"}))
                over = await http.post(server.url, content=b'{"jsonrpc": "2.0", "x": "' + b"y" * (9 * 1024 * 1024)
                                       + b'"}', headers={"Content-Type": "application/json",
                                                         "Accept": "application/json, text/event-stream"})
            return refused, over

        refused, over = anyio.run(main)
    finally:
        server.stop()
    assert "over this server's limit of 1,000,000 bytes per message" in refused and "MemoryOptions" not in refused
    assert over.status_code == 413 and "--max-body-mb" in over.json()["error"]["message"]


def test_a_stdio_request_with_a_lone_surrogate_is_answered(tmp_path: Path) -> None:
    """JSON allows "\\ud800" (JavaScript's JSON.stringify writes it for a broken string); the SDK's parser
    refuses it. Over stdio the refusal went to the server's log only: the client's request was never
    answered and it waited for good. It is now answered with an error naming the character, and the
    session goes on."""
    with _raw_stdio(tmp_path / "memory.db") as (ask, _proc):
        remembered = ask('{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "remember", '
                         '"arguments": {"text": "caf\\udc00", "thread": "t"}}}')
        listed = ask('{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "list_threads", '
                     '"arguments": {}}}')
    assert remembered["id"] == 2 and "a lone surrogate (U+DC00)" in remembered["error"]["message"]
    assert "Nothing was run or saved" in remembered["error"]["message"]
    assert listed["id"] == 3 and json.loads(listed["result"]["content"][0]["text"])["threads"] == []


def test_transcript_uris_take_any_thread_id(tmp_path: Path) -> None:
    from core.embedding.hashing import HashingEmbedder
    from core.mcp_server.server import build_server
    from core.mcp_server.tools import Binding, MemoryTools

    with open_store(tmp_path / "memory.db") as store:
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True}), embedder=HashingEmbedder())
        tools = MemoryTools(memory, Binding("ada"))
        ids = ["a/b", "50% off", "100%25", "日本", "../etc", "/abs"]
        for thread in ids:
            tools.remember(f"hello {thread}", thread)

        async def main() -> dict[str, str]:
            async with Client(build_server(tools)) as client:  # in process, the SDK's own client
                listed = (await client.list_resources()).resources
                return {str(r.uri): (await client.read_resource(str(r.uri))).contents[0].text for r in listed}

        texts = anyio.run(main)
    assert len(texts) == len(ids)
    for thread in ids:
        assert any(f"hello {thread}" in text for text in texts.values()), thread


def test_remember_makes_no_thread_the_gateway_could_not_name(tmp_path: Path) -> None:
    """remember created threads named by any text (an ANSI escape, 100,000 characters); the gateway's chat
    route refuses such ids, so nobody could continue those threads there. A new thread's id (and, with
    --any-resource, its resource's) now follows the gateway's rule; existing threads are reached as before."""
    from core.embedding.hashing import HashingEmbedder
    from core.mcp_server.server import build_server
    from core.mcp_server.tools import Binding, MemoryTools

    with open_store(tmp_path / "memory.db") as store:
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True}), embedder=HashingEmbedder())
        memory.save_messages([Message.user("old", thread_id="legacy\x1b[31m", resource_id="ada")])  # another tool's
        bound = MemoryTools(memory, Binding("ada"))
        anyone = MemoryTools(memory, Binding(None, any_resource=True))

        async def main() -> list[Any]:
            async with Client(build_server(bound)) as client:
                out = [await client.call_tool("remember", {"text": "hi", "thread": thread})
                       for thread in ("evil\x1b[31m", "t" * 100_000, "legacy\x1b[31m", "fine")]
            async with Client(build_server(anyone)) as client:
                out.append(await client.call_tool("remember", {"text": "hi", "thread": "x", "resource": "ev\x1bil"}))
            return out

        results = anyio.run(main)
        threads = {t.id for t in memory.list_threads(resource_id="ada").threads}
    assert [r.is_error for r in results] == [True, True, False, False, True]
    assert "printable string of at most 256 characters" in _error(results[0])
    assert threads == {"legacy\x1b[31m", "fine"}


def test_text_with_a_lone_surrogate_is_refused_with_a_clear_tool_error(tmp_path: Path) -> None:
    """JSON allows "\\ud800"; an in-process client passes it on. search_memory failed in the answer's
    serialization ("Error executing tool"), update_working_memory named the server's database file, and the
    spans of such calls could never be written to the trace file (set aside as poison)."""
    from core.embedding.hashing import HashingEmbedder
    from core.mcp_server.server import build_server
    from core.mcp_server.tools import Binding, MemoryTools

    with open_store(tmp_path / "memory.db") as store:
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True}, semantic_recall=True),
                        embedder=HashingEmbedder())
        tools = MemoryTools(memory, Binding("ada"))
        tools.remember("hello world", "t1")

        async def main() -> list[Any]:
            async with Client(build_server(tools)) as client:
                return [await client.call_tool("search_memory", {"query": "hello \ud800"}),
                        await client.call_tool("search_memory", {"query": "hello", "thread": "t\udc00"}),
                        await client.call_tool("update_working_memory", {"working_memory": "# Notes \ud800"}),
                        await client.call_tool("search_memory", {"query": "hello"})]

        results = anyio.run(main)
        assert store.tracer().flush(30)
        assert memory.get_working_memory(resource_id="ada") is None
    assert [r.is_error for r in results] == [True, True, True, False]
    assert "The query contains a lone surrogate (U+D800 at character 6)" in _error(results[0])
    assert "lone surrogate (U+DC00)" in _error(results[1])
    assert "The working memory contains a lone surrogate" in _error(results[2])
    assert str(tmp_path) not in _error(results[2])
    assert not list(tmp_path.rglob("*poison*"))


def test_a_search_that_finds_nothing_says_when_messages_are_not_indexed(tmp_path: Path) -> None:
    """Messages saved by a memory with semantic recall off (the README's engine sample, a Mastra agent
    without it) have no vector and no keyword doc: search_memory answered an empty list, which a client
    reads as "nothing was said about it". The answer now says how many are not indexed and what to run."""
    from core.embedding.hashing import HashingEmbedder
    from core.mcp_server.server import build_server
    from core.mcp_server.tools import Binding, MemoryTools
    from core.recall import reindex

    embedder = HashingEmbedder()
    with open_store(tmp_path / "memory.db") as store:
        Memory(store, MemoryOptions(), embedder=embedder).save_messages([  # recall off: keyword docs, no vectors
            Message.user("I'm allergic to peanuts", thread_id="groceries", resource_id="ada"),
            Message.assistant("Noted: no peanuts.", thread_id="groceries", resource_id="ada"),
            Message.user("Bob's own note about peanuts", thread_id="bob-t", resource_id="bob"),
        ])
        tools = MemoryTools(Memory(store, MemoryOptions(), embedder=embedder), Binding("ada"))

        async def search() -> list[Any]:
            async with Client(build_server(tools)) as client:
                # (words the messages do not hold: their keyword docs, written by the save, do not match)
                return [await client.call_tool("search_memory", {"query": "nutty allergen"}),
                        await client.call_tool("search_memory", {"query": "nutty allergen", "thread": "groceries"})]

        before = [_data(r) for r in anyio.run(search)]
        reindex(store, embedder, resource_id="ada")
        after = [_data(r) for r in anyio.run(search)]
    assert [b["results"] for b in before] == [[], []]
    assert before[0]["note"].startswith("2 of the 2 messages in this user's threads have no vector in the recall index")
    assert "memory-studio reindex --resource ada" in before[0]["note"]
    assert before[1]["note"].startswith("2 of the 2 messages in thread 'groceries' have no vector in the recall index")
    assert [r["text"] for r in after[0]["results"]][0] == "I'm allergic to peanuts"
    assert "note" not in after[0] and "note" not in after[1]


def test_a_search_that_finds_nothing_reads_only_the_newest_messages_for_its_note(tmp_path: Path,
                                                                                 monkeypatch: Any) -> None:
    """That note read every message of the user on each search that found nothing (a common answer), so a
    client's searches cost a read of the whole memory each. It checks the newest ``UNINDEXED_CHECKED`` now
    and says so."""
    from core.embedding.hashing import HashingEmbedder
    from core.mcp_server import tools as mcp_tools
    from core.mcp_server.tools import Binding, MemoryTools

    monkeypatch.setattr(mcp_tools, "UNINDEXED_CHECKED", 3)
    read: list[int] = []
    with open_store(tmp_path / "memory.db") as store:
        Memory(store, MemoryOptions()).save_messages(  # recall off: nothing indexed
            [Message.user(f"note {i}", thread_id=f"t{i % 2}", resource_id="ada") for i in range(8)])
        real = store.memory.list_messages

        def counted(query: Any) -> Any:
            rows = real(query)
            read.append(len(rows))
            return rows

        monkeypatch.setattr(store.memory, "list_messages", counted)
        tools = MemoryTools(Memory(store, MemoryOptions(), embedder=HashingEmbedder()), Binding("ada"))
        answer = tools.search_memory("peanuts")
    assert answer["results"] == [] and answer["note"].startswith(
        "3 of the newest 3 messages checked in this user's threads have no vector in the recall index")
    assert sum(read) <= 3 + 2  # (one row more per thread read, to know whether more are left)


def test_a_database_path_with_a_typo_is_refused_or_said_to_be_new(tmp_path: Path) -> None:
    """An MCP client's configuration holds the database's absolute path. A typo in it served a new, empty
    memory without a word (folders included): the client saw no threads and no error. A folder that does
    not exist is now refused; a new file in an existing folder is served, saying it is new."""
    def start(db: Path, **env: str) -> subprocess.CompletedProcess[str]:
        args = ["mcp", "--resource", "ada"] + ([] if env else ["--db", str(db)])
        return subprocess.run([sys.executable, "-m", "studio.cli", *args], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=120, env={**os.environ, **env},
                              cwd=str(Path(__file__).resolve().parents[2]))

    typo = tmp_path / "memroy-studio" / "memory.db"
    for refused in (start(typo), start(typo, MEMORY_STUDIO_DB=str(typo))):
        assert refused.returncode == 1
        assert f"The folder {typo.parent} does not exist" in refused.stderr
        assert "`memory-studio where` prints the database the Studio opens" in refused.stderr
    assert not typo.parent.exists()
    new = tmp_path / "new.db"
    first, second = start(new), start(new)
    assert first.returncode == 0 and second.returncode == 0
    assert f"{new} did not exist: this is a new, empty database" in first.stderr
    assert "did not exist" not in second.stderr and f"{new}, resource 'ada', on stdio" in second.stderr


def test_working_memory_of_a_new_resource_follows_the_id_rule_over_stdio(db: Path) -> None:
    """update_working_memory with --any-resource made the resource row of any id it was given (an escape
    sequence, 5,000 characters), which remember and the gateway refuse to create; a resource another tool
    wrote with such an id is still written as before."""
    with open_store(db) as store:
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "template": TEMPLATE}))
        memory.update_working_memory(resource_id="legacy\x1b[31m", working_memory="# User\n- Name: Old\n")
    env = {**os.environ, "MEMORY_STUDIO_MCP_TOKEN": "s3cret-token-value"}

    async def main() -> list[Any]:
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "studio.cli", "mcp", "--db", str(db), "--any-resource"], env=env)
        async with Client(params) as client:
            return [await client.call_tool("update_working_memory", {"working_memory": "# User\n- Name: X\n",
                                                                     "resource": resource})
                    for resource in ("ev\x1b]0;owned\x07il", "r" * 5000, "legacy\x1b[31m", "carol")]

    results = anyio.run(main)
    assert [r.is_error for r in results] == [True, True, False, False]
    assert "control character (U+001B)" in _error(results[0])
    assert "5,000 characters long" in _error(results[1])
    with open_store(db, read_only=True) as store:
        ids = {r.id for r in store.memory.list_resources()}
    assert "legacy\x1b[31m" in ids and "carol" in ids
    assert not any("\x1b]" in i or len(i) > 256 for i in ids)


def test_a_thread_without_an_owner_is_nobodys_over_stdio(db: Path) -> None:
    """A thread another program stored without a resource passed the ownership check: a server bound to ada
    read it, searched it, listed it as a transcript and remembered into it. Every tool refuses it now."""
    with open_store(db) as store:
        Memory(store).save_messages([Message.user("orphaned secret kiwi-777", thread_id="orphan", resource_id="x")])
        with store.db.write() as conn:
            conn.exec_driver_sql('UPDATE mastra_threads SET "resourceId" = ? WHERE id = ?', ("", "orphan"))

    async def main() -> tuple[list[Any], str]:
        async with Client(_params(db, "--resource", "ada")) as client:
            results = [await client.call_tool(tool, args) for tool, args in (
                ("read_thread", {"thread": "orphan"}), ("search_memory", {"query": "kiwi", "thread": "orphan"}),
                ("remember", {"text": "mine now", "thread": "orphan"}))]
            try:
                read = await client.read_resource("memory://threads/orphan")
                transcript = " ".join(getattr(c, "text", "") for c in read.contents)
            except Exception as exc:  # the SDK raises the server's error
                transcript = f"refused: {exc}"
            return results, transcript

    results, transcript = anyio.run(main)
    # Read and searched: as a thread that does not exist; remember (a new message into it): refused, saying why.
    assert ["No thread 'orphan' for resource 'ada'" in _error(r) for r in results] == [True, True, False], results
    assert "has no owner" in _error(results[2])
    assert all("kiwi" not in _error(r) for r in results)
    assert transcript.startswith("refused") and "kiwi" not in transcript
    with open_store(db, read_only=True) as store:
        assert [m.text for m in Memory(store).recall(thread_id="orphan", per_page=False)] == ["orphaned secret kiwi-777"]


def test_a_stdio_request_the_sdk_cannot_read_is_answered_and_the_server_goes_on(tmp_path: Path) -> None:
    """Over stdio, a request line the SDK's JSON reader refused (arguments nested 200 deep, a number of 5,000
    digits, a line cut short) went to the log only and the client waited for good; one nested 100,000 deep
    also made Python's reader (used to find the request's id) raise RecursionError, which ended the server.
    Each is now answered with a parse error for its id, and the session goes on."""

    def call(request_id: int, name: str, arguments: str) -> str:
        return (f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", "params": {{"name": "{name}", '
                f'"arguments": {arguments}}}}}')

    with _raw_stdio(tmp_path / "memory.db") as (ask, proc):
        answers = [ask(call(2, "update_working_memory", '{"working_memory": ' + "[" * 200 + "]" * 200 + "}")),
                   ask(call(3, "update_working_memory", '{"working_memory": ' + "[" * 100_000 + "]" * 100_000 + "}")),
                   ask(call(4, "read_thread", '{"thread": "t", "last": ' + "9" * 5000 + "}")),
                   ask('{"jsonrpc": "2.0", "id": "five", "method": "tools/call", "params": {"name": ')]
        listed = ask(call(6, "list_threads", "{}"))
    assert [a["id"] for a in answers] == [2, 3, 4, "five"]
    for answer in answers:
        assert answer["error"]["code"] == -32700 and "Nothing was run or saved" in answer["error"]["message"]
    assert "recursion limit" in answers[1]["error"]["message"] and "number out of range" in answers[2]["error"]["message"]
    assert listed["id"] == 6 and json.loads(listed["result"]["content"][0]["text"])["threads"] == []
    assert proc.returncode == 0


def test_remember_refuses_a_title_no_thread_list_should_carry(db: Path) -> None:
    """remember stored any title a client gave (10 MB took a quarter of a second), and every later list_threads
    answer, which a client puts in its model's context, carried it whole. A title over 1,000 characters is
    refused, saying the limit, and no thread is made."""
    async def main() -> list[Any]:
        async with Client(_params(db, "--resource", "ada")) as client:
            return [await client.call_tool("remember", {"text": "hi", "thread": thread, "title": title})
                    for thread, title in (("t-long", "T" * 100_000), ("t-fine", "T" * 1000))]

    long, fine = anyio.run(main)
    assert "100,000 characters long" in _error(long) and "at most 1,000" in _error(long)
    assert "no flag or setting of the server raises it" in _error(long)
    assert not fine.is_error
    with open_store(db, read_only=True) as store:
        assert store.memory.get_thread("t-long") is None
        assert store.memory.get_thread("t-fine").title == "T" * 1000


def test_http_bodies_in_utf_16_are_refused_by_the_guard(db: Path) -> None:
    """The guard counts a body's nesting on its bytes as UTF-8 reads them, and the SDK's HTTP handler reads a body
    with `json.loads`, which takes UTF-16 too: a UTF-16 body with a character whose bytes hold a quote hid its
    brackets from the count. A JSON body holding NUL bytes (UTF-16 and UTF-32 always do) is refused first."""
    import httpx2

    server = HttpServer(db, "--resource", "ada", env={**os.environ, "MEMORY_STUDIO_MCP_TOKEN": "s3cret-token-value"})
    try:
        body = ('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "update_working_memory", '
                '"arguments": {"working_memory": "\u2262", "x": ' + "[" * 900 + "]" * 900 + "}}}")
        headers = {"Authorization": "Bearer s3cret-token-value", "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}

        async def main() -> Any:
            async with httpx2.AsyncClient(timeout=60) as raw:
                return await raw.post(server.url, content=body.encode("utf-16-le"), headers=headers)

        reply = anyio.run(main)
    finally:
        server.stop()
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "json_not_utf8", reply.text
    assert "UTF-8" in reply.json()["error"]["message"]


def test_an_imported_agent_registration_is_served_only_when_named(tmp_path: Path) -> None:
    """An import file's agent registration does not become the memory configuration ``mcp`` serves unnamed:
    its template would be what every client model is asked to fill ("- Email password:")."""
    import io

    from core import Memory, MemoryOptions, open_store
    from core.agent import Agent
    from core.agent_configs import list_agents
    from core.llm import ScriptedModel
    from core.mcp_server.cli import _memory
    from core.transfer import ExportOptions, export_resource, import_data

    hostile = "# User\n- Email password:\n- Bank PIN:\n"
    with open_store(tmp_path / "src.db") as store:
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "template": hostile}))
        Agent("helper", instructions="x", model=ScriptedModel(["ok"]), memory=memory, tracer=False).generate(
            "hi", memory={"thread": "t1", "resource": "eve"})
        data = export_resource(store, "eve", ExportOptions())
    assert [a["name"] for a in data["agents"]] == ["helper"]

    (tmp_path / "dst").mkdir()
    with open_store(tmp_path / "dst" / "m.db") as store:
        default = _memory(store, None, io.StringIO()).effective_options().working_memory.template
        assert import_data(store, data).changed
        assert [(a.name, a.imported) for a in list_agents(store)] == [("helper", True)]
        err = io.StringIO()
        served = _memory(store, None, err).effective_options().working_memory.template
        assert served == default and "Email password" not in (served or "")
        assert "'helper'" in err.getvalue() and "--agent" in err.getvalue()
        # Named, it is served (the operator chose it); a replay of the imported turns still reads it.
        assert _memory(store, "helper", io.StringIO()).effective_options().working_memory.template == hostile

    # Beside an agent of the database's own, the own one is still the default (it was not with two rows).
    (tmp_path / "own").mkdir()
    with open_store(tmp_path / "own" / "m.db") as store:
        mine = "# User\n- Name:\n- Favourite tea:\n"
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "template": mine}))
        Agent("mine", instructions="x", model=ScriptedModel(["ok"]), memory=memory, tracer=False).generate(
            "hi", memory={"thread": "t0", "resource": "ada"})
        import_data(store, data)
        assert _memory(store, None, io.StringIO()).effective_options().working_memory.template == mine


def _piped_mcp(db: Path) -> tuple["subprocess.Popen[str]", Any, Any, Any]:
    """``memory-studio mcp --resource ada`` with its standard input and output piped: (the process, its standard
    input, a queue of the lines it writes, the thread reading them into it until its output ends)."""
    import queue
    import threading

    proc = subprocess.Popen([sys.executable, "-m", "studio.cli", "mcp", "--db", str(db), "--resource", "ada"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            encoding="utf-8", env=dict(os.environ))
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None and stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True)
    reader.start()
    return proc, stdin, lines, reader


@contextmanager
def _raw_stdio(db: Path) -> Iterator[tuple[Callable[[str], Any], "subprocess.Popen[str]"]]:
    """``memory-studio mcp --resource ada`` over stdio, initialized, driven by raw JSON-RPC lines (what the
    SDK's client would refuse to send): ``ask(line)`` writes one and returns the next line the server
    writes, parsed. Its standard input is closed, and the server waited for, at the end."""
    import queue

    proc, stdin, lines, _reader = _piped_mcp(db)

    def ask(line: str) -> Any:
        stdin.write(line + "\n")
        stdin.flush()
        try:  # a bound for a reply that never comes (the defect), not a timing assumption
            return json.loads(lines.get(timeout=120))
        except queue.Empty:
            raise AssertionError(f"no answer to {line[:80]}") from None

    try:
        ask(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}))
        stdin.write('{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        yield ask, proc
    finally:
        stdin.close()
        proc.wait(60)


def test_http_tokens_of_a_tokens_file_reach_only_their_own_resources(db: Path, tmp_path: Path) -> None:
    """`mcp --http --any-resource --tokens-file`: Ada's token reads and writes Ada's memory only, by every tool,
    the transcript list and the transcripts; Bob's data never reaches her; the admin's "*" token reaches both;
    a wrong token gets 401; each call's trace names the token's entry as who called."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from core.gateway.tokens import add_entry, entry_for, new_token

    ada, admin = new_token(), new_token()
    tokens_file = tmp_path / "tokens.json"
    add_entry(tokens_file, entry_for("ada-app", ["ada"], ada))
    add_entry(tokens_file, entry_for("admin", ["*"], admin))
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_STUDIO_MCP_TOKEN"}
    server = HttpServer(db, "--any-resource", "--tokens-file", str(tokens_file), env=env)

    async def as_ada(http: Any) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with Client(streamable_http_client(server.url, http_client=http)) as client:
            seen["remember"] = _data(await client.call_tool("remember", {"text": "I like tea", "thread": "ada-t"}))
            seen["threads"] = _data(await client.call_tool("list_threads", {}))
            seen["wm"] = _data(await client.call_tool("update_working_memory",
                                                      {"working_memory": "# User\n- Name: Ada\n- Allergies:\n"}))
            for tool, args in (("search_memory", {"query": "PIN", "resource": "bob"}),
                               ("list_threads", {"resource": "bob"}),
                               ("read_thread", {"thread": "bob-secret", "resource": "bob"}),
                               ("get_working_memory", {"resource": "bob"}),
                               ("update_working_memory", {"working_memory": "# User\n- Name: Mallory\n",
                                                          "resource": "bob"}),
                               ("remember", {"text": "hi", "thread": "bob-secret", "resource": "bob"})):
                seen[f"{tool}_bob"] = _error(await client.call_tool(tool, args))
            seen["read_thread_own"] = _error(await client.call_tool("read_thread", {"thread": "bob-secret"}))
            seen["search_own"] = _data(await client.call_tool("search_memory", {"query": "PIN peanuts"}))
            seen["resources"] = [str(r.uri) for r in (await client.list_resources()).resources]
            try:
                bob = await client.read_resource("memory://threads/bob-secret")
                seen["transcript_bob"] = " ".join(getattr(c, "text", "") for c in bob.contents)
            except Exception as exc:  # the SDK raises the server's error
                seen["transcript_bob_error"] = str(exc)
        return seen

    async def main() -> tuple[Any, ...]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {ada}"}, timeout=60) as http:
            seen = await as_ada(http)
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {admin}"}, timeout=60) as http:
            async with Client(streamable_http_client(server.url, http_client=http)) as client:
                admin_read = _data(await client.call_tool("read_thread", {"thread": "bob-secret", "resource": "bob"}))
                admin_resources = [str(r.uri) for r in (await client.list_resources()).resources]
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        async with httpx2.AsyncClient(timeout=60) as raw:
            wrong = await raw.post(server.url, content=body, headers={
                "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                "Authorization": "Bearer mst_wrong"})
        return seen, admin_read, admin_resources, wrong

    try:
        seen, admin_read, admin_resources, wrong = anyio.run(main)
    finally:
        server.stop()
    assert seen["remember"]["resource"] == "ada"  # named no resource: the token's only one
    assert [t["id"] for t in seen["threads"]["threads"]] == ["ada-t"] and seen["wm"]["resource"] == "ada"
    for tool in ("search_memory", "list_threads", "read_thread", "get_working_memory", "update_working_memory",
                 "remember"):
        assert "may not use resource 'bob'" in seen[f"{tool}_bob"], (tool, seen[f"{tool}_bob"])
    assert "No thread 'bob-secret' for resource 'ada'" in seen["read_thread_own"]
    assert seen["resources"] == ["memory://threads/ada-t"] and "transcript_bob_error" in seen
    assert "zebra-4321-quartz" not in json.dumps(seen)
    assert {r["threadId"] for r in seen["search_own"]["results"]} == {"ada-t"}  # none of Bob's, though they match
    assert "zebra-4321-quartz" in json.dumps(admin_read)
    assert set(admin_resources) == {"memory://threads/ada-t", "memory://threads/bob-secret"}
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (401, "invalid_api_key")
    with open_store(db, read_only=True) as store:
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "template": TEMPLATE}))
        assert memory.get_working_memory(resource_id="bob") == "# User\n- Name: Bob\n- Allergies: peanuts\n"
        assert [m.text for m in memory.recall(thread_id="bob-secret", resource_id="bob", per_page=False)][-1] == \
            "I will keep your peanut allergy in mind, Bob."
        # Ada's version of her working memory names her token (its name, never the token).
        assert [v.author for v in memory.working_memory_service.versions("resource", "ada")][-1] == "mcp: ada-app"
        traces = DuckDBObservabilityStore(store.location.observability_path, read_only=True)
        runs = traces.list_traces(limit=100, filters=TraceFilters(resource_id="ada"))
        callers = {span.attributes.get("caller") for run in runs for span in traces.get_trace(run.trace_id)
                   if span.parent_span_id is None}
    assert callers == {"ada-app"}


def test_error_messages_repeat_at_most_80_characters_of_a_client_value(db: Path) -> None:
    """A thread id (or role) as long as the request body came back whole in the tool error (and the log)."""
    from core.mcp_server.tools import Binding, MemoryTools

    with open_store(db) as store:
        tools = MemoryTools(Memory(store, MemoryOptions(working_memory={"enabled": True})), Binding("ada"),
                            tracer=None)
        huge = "t" * 100_000
        for call in (lambda: tools.read_thread(huge), lambda: tools.remember("hi", "t1", role=huge),
                     lambda: tools.search_memory("x", thread=huge)):
            with pytest.raises(Exception) as refused:
                call()
            assert len(str(refused.value)) < 500 and "t" * 80 + "'… (100,000 characters)" in str(refused.value)


def test_http_a_call_refused_by_its_token_is_never_traced_under_the_resource_it_named(db: Path, tmp_path: Path) -> None:
    """A tokens file's token naming a resource it may not use (`resource` of any tool, or a server bound to another
    user) was refused, but its run was traced under that resource, with the caller's arguments: Ada's text landed
    in Bob's traces (the Traces pane, `export --resource bob --with-traces`). It is traced as the caller's own."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from core.gateway.tokens import add_entry, entry_for, new_token

    ada, bob = new_token(), new_token()
    tokens_file = tmp_path / "tokens.json"
    add_entry(tokens_file, entry_for("ada-app", ["ada"], ada))
    add_entry(tokens_file, entry_for("bob-app", ["bob"], bob))
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_STUDIO_MCP_TOKEN"}
    planted = "# User\n- Name: Mallory was here\n"

    async def refused(url: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                return [_error(await client.call_tool(tool, args)) for tool, args in calls]

    any_resource = HttpServer(db, "--any-resource", "--tokens-file", str(tokens_file), env=env)
    try:
        errors = anyio.run(refused, any_resource.url, ada, [
            ("update_working_memory", {"working_memory": planted, "resource": "bob"}),
            ("remember", {"text": planted, "thread": "ada-note", "resource": "bob"})])
    finally:
        any_resource.stop()
    bound_to_bob = HttpServer(db, "--resource", "bob", "--tokens-file", str(tokens_file), env=env)
    try:  # Ada's token on a server bound to Bob: refused, and not traced as Bob's either
        errors += anyio.run(refused, bound_to_bob.url, ada, [("update_working_memory", {"working_memory": planted})])
    finally:
        bound_to_bob.stop()
    assert all("may not use resource 'bob'" in e for e in errors), errors
    with open_store(db, read_only=True) as store:
        traces = DuckDBObservabilityStore(store.location.observability_path, read_only=True)

        bob_runs = traces.list_traces(limit=100, filters=TraceFilters(resource_id="bob"))
        bobs = [span for run in bob_runs for span in traces.get_trace(run.trace_id)]
        ada_runs = traces.list_traces(limit=100, filters=TraceFilters(resource_id="ada"))
        adas = [span for run in ada_runs for span in traces.get_trace(run.trace_id) if span.parent_span_id is None]
        assert memory_of_bob_unchanged(store)
    assert "Mallory" not in repr(bobs) and not any(s.attributes.get("caller") == "ada-app" for s in bobs)
    # The attempts are still runs, errors, as the caller's own, naming the resource they asked for.
    assert sorted((r.name, r.status) for r in ada_runs) == [
        ("mcp: 'remember'", "error"), ("mcp: 'update_working_memory'", "error"),
        ("mcp: 'update_working_memory'", "error")]
    assert all(s.attributes.get("caller") == "ada-app" and "Mallory" in repr(s.input) for s in adas)


def memory_of_bob_unchanged(store: Any) -> bool:
    memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "template": TEMPLATE}))
    return memory.get_working_memory(resource_id="bob") == "# User\n- Name: Bob\n- Allergies: peanuts\n" and \
        memory.get_thread("ada-note") is None


def test_a_server_served_over_http_refuses_a_request_that_comes_without_its_http_request(tmp_path: Path) -> None:
    """Over HTTP, a tool learns who called from the HTTP request the MCP SDK hands it; one without (as
    every in-process request is, and as an SDK that stopped handing it over would make every HTTP request)
    was treated as stdio's, which may use the whole binding. A server served over HTTP now refuses it
    (fails closed); the same server over stdio or in process answers."""
    from core.embedding.hashing import HashingEmbedder
    from core.gateway.guard import GuardPolicy
    from core.mcp_server.server import build_server, http_app
    from core.mcp_server.tools import Binding, MemoryTools

    with open_store(tmp_path / "memory.db") as store:
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True}), embedder=HashingEmbedder())
        tools = MemoryTools(memory, Binding(None, any_resource=True))
        tools.remember("Bob's PIN is zebra", "bob-thread", resource="bob")

        async def call(server: Any) -> tuple[bool, str]:
            async with Client(server) as client:  # in process: no HTTP request reaches the tools
                result = await client.call_tool("read_thread", {"thread": "bob-thread", "resource": "bob"})
                return result.is_error, json.dumps(result.model_dump(mode="json"))

        async def listed(server: Any) -> str:
            async with Client(server) as client:
                return repr(await client.list_resources())

        error, text = anyio.run(call, build_server(tools))  # in process, as over stdio: the binding's
        assert not error and "zebra" in text and "bob-thread" in anyio.run(listed, build_server(tools))
        served = build_server(tools)
        http_app(served, GuardPolicy(host="127.0.0.1", port=0, token="t"))
        with pytest.raises(Exception) as refused:
            anyio.run(listed, served)
        assert "bob-thread" not in str(refused.value)
        error, text = anyio.run(call, served)
        assert error and "without its HTTP request" in text and "zebra" not in text


def _delegated(db: Path, embedder: Any, secrets: dict[str, str]) -> dict[str, str]:
    """Each resource's turn delegates ``note <its secret>`` to the sub-agent ``helper``: the id of the thread the
    delegation wrote, per resource."""
    from core.agent import Agent
    from core.llm import ScriptedModel, ScriptedReply, tool_call
    from core.scopes import delegation_resource

    def delegate(messages: Any, tools: Any) -> Any:
        last = messages[-1]
        if last.get("role") == "user":
            return ScriptedReply(tool_calls=(tool_call("agent-helper", {"prompt": str(last["content"])}),))
        return "Handed over."

    children: dict[str, str] = {}
    with open_store(db) as store:
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "resource",
                                                             "template": TEMPLATE}), embedder=embedder)
        for resource, secret in secrets.items():
            helper = Agent("helper", instructions="Help.", model=ScriptedModel([f"Noted: {secret}."]), tracer=False,
                           register=False)
            boss = Agent("boss", instructions="Delegate.", model=ScriptedModel(delegate), memory=memory,
                         agents=[helper], tracer=False, register=False)
            boss.generate(f"note {secret}", memory={"resource": resource, "thread": f"{resource}-main"})
            (child,) = memory.list_threads(resource_id=delegation_resource(resource, "helper")).threads
            children[resource] = child.id
    return children


def _ada_and_ad_tokens(tmp_path: Path) -> tuple[str, str, Path]:
    """A tokens file with one token for ``ada`` and one for ``ad`` (whose id begins Ada's)."""
    from core.gateway.tokens import add_entry, entry_for, new_token

    ada, ad = new_token(), new_token()
    tokens_file = tmp_path / "tokens.json"
    add_entry(tokens_file, entry_for("ada-app", ["ada"], ada))
    add_entry(tokens_file, entry_for("ad-app", ["ad"], ad))
    return ada, ad, tokens_file


def test_http_a_token_reads_its_own_resources_delegations_and_no_one_elses(db: Path, tmp_path: Path,
                                                                          embedder: Any) -> None:
    """`mcp --http --any-resource --tokens-file`: a delegation's memory (``delegation:ada:helper``, what Ada's
    sub-agent keeps of her turns) is Ada's: her token reads its thread, transcript and working memory with the
    SDK's client; the token of ``ad`` (whose id begins Ada's delegation's ``delegation:ad``) gets none of it,
    nor Ada's token ``ad``'s."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from core.scopes import delegation_resource

    secrets = {"ada": "falcon-0427", "ad": "osprey-8810"}
    children = _delegated(db, embedder, secrets)
    ada, ad, tokens_file = _ada_and_ad_tokens(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_STUDIO_MCP_TOKEN"}
    server = HttpServer(db, "--any-resource", "--tokens-file", str(tokens_file), env=env)
    adas = delegation_resource("ada", "helper")

    async def seen_by(token: str, own: str, other: str) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            async with Client(streamable_http_client(server.url, http_client=http)) as client:
                mine, theirs = delegation_resource(own, "helper"), delegation_resource(other, "helper")
                seen["read"] = _data(await client.call_tool("read_thread", {"thread": children[own],
                                                                            "resource": mine}))
                seen["threads"] = _data(await client.call_tool("list_threads", {"resource": mine}))
                transcript = await client.read_resource(f"memory://threads/{children[own]}")
                seen["transcript"] = " ".join(getattr(c, "text", "") for c in transcript.contents)
                seen["refused"] = [_error(await client.call_tool(tool, args)) for tool, args in (
                    ("read_thread", {"thread": children[other], "resource": theirs}),
                    ("list_threads", {"resource": theirs}),
                    ("get_working_memory", {"resource": theirs}),
                    ("update_working_memory", {"working_memory": "# taken\n", "resource": theirs}),
                    ("read_thread", {"thread": children[other], "resource": mine}),
                    ("read_thread", {"thread": children[own], "resource": "delegation:ad%61:helper"}))]
                try:
                    await client.read_resource(f"memory://threads/{children[other]}")
                    seen["transcript_other"] = "read"
                except Exception as exc:  # the SDK raises the server's error
                    seen["transcript_other"] = str(exc)
        return seen

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        return await seen_by(ada, "ada", "ad"), await seen_by(ad, "ad", "ada")

    try:
        as_ada, as_ad = anyio.run(main)
    finally:
        server.stop()
    for seen, own, other in ((as_ada, "ada", "ad"), (as_ad, "ad", "ada")):
        assert seen["read"]["resource"] == delegation_resource(own, "helper")
        assert secrets[own] in json.dumps(seen["read"]) and secrets[own] in seen["transcript"]
        assert [t["id"] for t in seen["threads"]["threads"]] == [children[own]]
        assert secrets[other] not in json.dumps(seen) and seen["transcript_other"] != "read"
        assert all("may not use resource" in r for r in seen["refused"][:4]), seen["refused"]
        expected = f"No thread {children[other]!r} for resource {delegation_resource(own, 'helper')!r}"
        assert expected in seen["refused"][4], seen["refused"][4]
        assert "not a delegation resource as the engine names them" in seen["refused"][5]
    with open_store(db, read_only=True) as store:  # nothing written by the refused update
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "template": TEMPLATE}))
        assert memory.get_working_memory(resource_id=adas) is None


def test_http_a_client_finds_its_own_resources_delegations_and_no_one_elses(db: Path, tmp_path: Path,
                                                                           embedder: Any) -> None:
    """The transcripts a client is offered (``resources/list``) and the ``list_threads`` tool name Ada's
    delegations' threads, as delegations of hers, to Ada's token, so a client finds them without knowing their
    ids; the token of ``ad`` (whose delegation's id begins like Ada's) is offered only its own, and neither is
    offered a thread stored under an id that only reads like a delegation of Ada's. A server bound to Ada offers
    hers too."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from core.scopes import delegation_resource

    secrets = {"ada": "falcon-0427", "ad": "osprey-8810"}
    children = _delegated(db, embedder, secrets)
    nested = delegation_resource(delegation_resource("ada", "helper"), "checker")
    lookalikes = {"delegation:ad%61:helper": "lookalike-1", "delegation:ada:helper:x": "lookalike-2",
                  "Delegation:ada:helper": "lookalike-3", "delegation:ada2:helper": "lookalike-4",
                  "delegation::helper": "lookalike-5"}
    with open_store(db) as store:
        memory = Memory(store, MemoryOptions())
        memory.save_messages([Message.user("checked twice", thread_id="ada-nested", resource_id=nested)] + [
            Message.user("not Ada's", thread_id=thread, resource_id=resource) for resource, thread in lookalikes.items()])
    ada, ad, tokens_file = _ada_and_ad_tokens(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_STUDIO_MCP_TOKEN"}

    async def offered(url: str, token: str) -> dict[str, Any]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                listed = (await client.list_resources()).resources
                threads = _data(await client.call_tool("list_threads", {}))
        return {"resources": {str(r.uri).rsplit("/", 1)[1]: (r.name, r.description or "") for r in listed},
                "threads": threads}

    any_resource = HttpServer(db, "--any-resource", "--tokens-file", str(tokens_file), env=env)
    try:
        as_ada, as_ad = anyio.run(offered, any_resource.url, ada), anyio.run(offered, any_resource.url, ad)
    finally:
        any_resource.stop()
    bound = HttpServer(db, "--resource", "ada", env={**env, "MEMORY_STUDIO_MCP_TOKEN": "s3cret-token-value"})
    try:
        as_bound = anyio.run(offered, bound.url, "s3cret-token-value")
    finally:
        bound.stop()

    for seen in (as_ada, as_bound):
        assert set(seen["resources"]) == {"ada-main", children["ada"], "ada-nested"}, seen["resources"]
        name, description = seen["resources"][children["ada"]]
        assert name.endswith("(delegation of ada to helper)") and delegation_resource("ada", "helper") in description
        assert seen["resources"]["ada-nested"][0].endswith("(delegation of ada to helper, then to checker)")
        assert "delegation" not in seen["resources"]["ada-main"][0]
        assert [t["id"] for t in seen["threads"]["threads"]] == ["ada-main"]
        delegations = {d["resource"]: (d["label"], [t["id"] for t in d["threads"]])
                       for d in seen["threads"]["delegations"]}
        assert delegations == {delegation_resource("ada", "helper"): ("delegation of ada to helper",
                                                                      [children["ada"]]),
                               nested: ("delegation of ada to helper, then to checker", ["ada-nested"])}
    assert set(as_ad["resources"]) == {"ad-main", children["ad"]}
    assert [(d["resource"], [t["id"] for t in d["threads"]]) for d in as_ad["threads"]["delegations"]] == [
        (delegation_resource("ad", "helper"), [children["ad"]])]
    for seen, other in ((as_ada, "ad"), (as_ad, "ada"), (as_bound, "ad")):
        shown_ = json.dumps(seen)
        assert children[other] not in shown_ and f"{other}-main" not in shown_
        assert not any(thread in shown_ for thread in lookalikes.values())


def test_the_server_says_at_start_which_memory_configuration_it_serves(tmp_path: Path) -> None:
    """Unnamed (no --agent), the server serves the one agent's configuration a database registered, or the
    engine's defaults: a client's model is asked to fill that template, so the start says which (on the demo
    database, with several agents, it served the defaults without a word)."""
    import io

    from core import Memory, MemoryOptions, open_store
    from core.agent import Agent
    from core.llm import ScriptedModel
    from core.mcp_server.cli import _memory

    with open_store(tmp_path / "m.db") as store:
        err = io.StringIO()
        _memory(store, None, err)
        assert "no agent registered its memory configuration here: serving the engine's defaults" in err.getvalue()
        for name, tea in (("tea", "- Favourite tea:\n"), ("coffee", "- Favourite coffee:\n")):
            memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "template": "# User\n" + tea}),
                            name=name)
            Agent(name, instructions="x", model=ScriptedModel(["ok"]), memory=memory, tracer=False).generate(
                "hi", memory={"thread": f"t-{name}", "resource": "ada"})
            err = io.StringIO()
            served = _memory(store, None, err).effective_options().working_memory.template
            if name == "tea":
                assert served == "# User\n" + tea
                assert "serving the memory configuration agent 'tea' registered" in err.getvalue()
        assert "2 agents registered their memory configuration here ('tea', 'coffee')" in err.getvalue() \
            or "2 agents registered their memory configuration here ('coffee', 'tea')" in err.getvalue()
        assert "serving the engine's defaults" in err.getvalue() and "--agent NAME" in err.getvalue()


# -- the transcript list in pages (resources/list's cursor) -------------------------------------------------------

def _many_threads(db: Path, resource: str, count: int, prefix: str) -> list[str]:
    """``count`` threads of ``resource``, one message each, saved at once through the storage API: their ids."""
    ids = [f"{prefix}-{i:04d}" for i in range(count)]
    with open_store(db) as store:
        Memory(store, MemoryOptions()).save_messages([Message.user(f"note {t}", thread_id=t, resource_id=resource)
                                                      for t in ids])
    return ids


def _writing_between_pages(db: Path, resource: str, initial: list[str]) -> Callable[[int], None]:
    """What runs after each page of a listing: new threads of ``resource`` (a listing by OFFSET would repeat
    threads), and a message added to an already listed thread and to the oldest threads, still to be listed (a
    listing by latest activity would repeat the first and skip the others)."""
    def write(pages_done: int) -> None:
        with open_store(db) as store:
            Memory(store, MemoryOptions()).save_messages(
                [Message.user("arrived meanwhile", thread_id=f"new-{pages_done}-{i}", resource_id=resource)
                 for i in range(40)]
                + [Message.user(f"later word {pages_done}", thread_id=t, resource_id=resource)
                   for t in (*initial[:5 * pages_done], initial[-1 - pages_done])])
    return write


async def _every_page(client: Client, between: Callable[[int], None] | None = None) -> list[list[str]]:
    """The transcript list, page by page (each page's thread ids), following ``nextCursor`` to the end;
    ``between(pages so far)`` runs before each next page is asked for."""
    pages: list[list[str]] = []
    cursor = None
    while True:
        listed = await client.list_resources(cursor=cursor)
        pages.append([str(r.uri).removeprefix("memory://threads/") for r in listed.resources])
        cursor = listed.next_cursor
        if cursor is None:
            return pages
        if between is not None:
            between(len(pages))


def _listed_once(pages: list[list[str]], expected: set[str]) -> None:
    listed = [thread for page in pages for thread in page]
    assert len(listed) == len(set(listed)), sorted(t for t in set(listed) if listed.count(t) > 1)[:10]
    assert expected <= set(listed), sorted(expected - set(listed))[:10]
    assert all(len(page) <= 500 for page in pages)


def test_stdio_resource_list_pages_through_every_thread_once_while_threads_are_written(db: Path) -> None:
    """The transcript list held the 500 threads of latest activity, and nothing reached the rest: a user with
    1,203 threads could list 500. It now answers 500 a page with the spec's ``nextCursor``; the pages list every
    thread exactly once though threads are created and written to between them (threads are ordered by creation,
    which never changes), and bob's never."""
    adas = _many_threads(db, "ada", 1203, "ada")

    async def main() -> list[list[str]]:
        async with Client(_params(db, "--resource", "ada")) as client:
            return await _every_page(client, _writing_between_pages(db, "ada", adas))

    pages = anyio.run(main)
    assert len(pages) == 3 and [len(p) for p in pages[:2]] == [500, 500]
    _listed_once(pages, set(adas))
    assert not any(t.startswith("bob") for page in pages for t in page)


def _token_client(url: str, token: str) -> tuple[Any, Any]:
    """An HTTP client sending ``token`` and the SDK's MCP client over it, for ``async with http, mcp``."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return http, Client(streamable_http_client(url, http_client=http))


def _on_a_new_server(db: Path, tokens_file: Path, env: dict[str, str], fn: Any, *args: Any) -> Any:
    """``fn(url, *args)`` against an `mcp --http --any-resource --tokens-file` server started for it (its own
    cursor key: a cursor another run issued is not its own), stopped after."""
    server = HttpServer(db, "--any-resource", "--tokens-file", str(tokens_file), env=env)
    try:
        return anyio.run(fn, server.url, *args)
    finally:
        server.stop()


def test_http_resource_list_pages_keep_each_token_to_its_own_listing(db: Path, tmp_path: Path, embedder: Any) -> None:
    """`mcp --http --any-resource --tokens-file`: Ada's token pages through her 1,203 threads and her delegations'
    (named as delegations), each once while threads arrive; a cursor is refused with the spec's invalid-params
    error when another token replays it (it continues Ada's listing only), when it was changed or made up, and
    when another server issued it; the token of ``ad`` lists none of Ada's."""
    from mcp.shared.exceptions import MCPError

    secrets = {"ada": "falcon-0427", "ad": "osprey-8810"}
    children = _delegated(db, embedder, secrets)
    adas = _many_threads(db, "ada", 1203, "ada")
    ada, ad, tokens_file = _ada_and_ad_tokens(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_STUDIO_MCP_TOKEN"}

    async def refusal(url: str, token: str, cursor: str) -> tuple[int, str]:
        http, mcp = _token_client(url, token)
        async with http, mcp:
            try:
                await mcp.list_resources(cursor=cursor)
            except MCPError as exc:
                return exc.code, exc.message
        return 0, "listed"

    async def main(url: str) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        http, mcp = _token_client(url, ada)
        async with http, mcp:
            seen["ada"] = await _every_page(mcp, _writing_between_pages(db, "ada", adas))
            seen["cursor"] = (await mcp.list_resources()).next_cursor
        http, mcp = _token_client(url, ad)
        async with http, mcp:
            seen["ad"] = await _every_page(mcp)
        cursor = seen["cursor"]
        body, tag = cursor.split(".")
        seen["replayed"] = await refusal(url, ad, cursor)
        seen["changed"] = await refusal(url, ada, body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1] + "." + tag)
        seen["made up"] = await refusal(url, ada, "eyJwYWdlIjogM30=")
        seen["own"] = await refusal(url, ada, cursor)  # still good for the listing it came with
        return seen

    seen = _on_a_new_server(db, tokens_file, env, main)
    from_elsewhere = _on_a_new_server(db, tokens_file, env, refusal, ada, seen["cursor"])

    assert len(seen["ada"]) == 3
    _listed_once(seen["ada"], {*adas, "ada-main", children["ada"]})
    assert not {"ad-main", children["ad"]} & {t for page in seen["ada"] for t in page}
    assert [sorted(page) for page in seen["ad"]] == [sorted(["ad-main", children["ad"]])]
    assert seen["replayed"][0] == -32602 and "continues the resource list of another token" in seen["replayed"][1]
    for refused in (seen["changed"], seen["made up"], from_elsewhere):
        assert refused[0] == -32602 and "was not issued by this server" in refused[1], refused
        assert "list the resources again from the start, without a cursor" in refused[1]
    assert seen["own"] == (0, "listed")
    assert secrets["ada"] not in json.dumps(seen["replayed"])


@pytest.mark.backends
def test_transcript_pages_follow_creation_order_with_ties_on_both_backends(store: Any) -> None:
    """``MemoryTools.transcripts`` in process, on libSQL and Postgres: threads created in the same millisecond
    (ties of the creation time, ordered by id) split across pages, a bound server's delegations, threads written
    between pages; every thread listed once, newest created first; another caller's cursor refused."""
    from datetime import datetime, timezone

    from core.gateway.access import Caller
    from core.mcp_server.tools import CursorError, MemoryTools, Binding, PAGE_SIZE
    from core.scopes import delegation_resource

    same = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    ids = [f"tie-{i:04d}" for i in range(PAGE_SIZE + 30)]  # one creation time: the page's cut falls in the tie
    for thread in ids:
        store.memory.create_thread(thread_id=thread, resource_id="ada", created_at=same)
    older = [f"old-{i}" for i in range(3)]
    for i, thread in enumerate(older):
        store.memory.create_thread(thread_id=thread, resource_id=delegation_resource("ada", "helper"),
                                   created_at=datetime(2025, 1, 1 + i, tzinfo=timezone.utc))
    store.memory.create_thread(thread_id="bob-1", resource_id="bob", created_at=same)
    memory = Memory(store, MemoryOptions())
    tools = MemoryTools(memory, Binding("ada"))

    first = tools.transcripts()
    assert [r["threadId"] for r in first.rows] == ids[:PAGE_SIZE] and first.next_cursor is not None
    memory.save_messages([Message.user("new", thread_id="newest", resource_id="ada")]
                         + [Message.user("touched", thread_id=t, resource_id="ada") for t in (ids[0], ids[-1])])
    second = tools.transcripts(cursor=first.next_cursor)
    assert [r["threadId"] for r in second.rows] == ids[PAGE_SIZE:] + older[::-1] and second.next_cursor is None
    assert all(r["delegation"] == "delegation of ada to helper" for r in second.rows[-3:])
    assert second.rows[-(len(older) + 1)]["messageCount"] == 1  # ids[-1], written to between the pages

    anyone = MemoryTools(memory, Binding(None, any_resource=True))
    page = anyone.transcripts(Caller("ada-app", frozenset({"ada"})))
    assert page.next_cursor is not None
    with pytest.raises(CursorError, match="another token"):
        anyone.transcripts(Caller("bob-app", frozenset({"bob"})), page.next_cursor)
    with pytest.raises(CursorError, match="not issued by this server"):
        tools.transcripts(cursor=page.next_cursor)  # another server (binding) issued it
    assert [r["threadId"] for r in page.rows] == ["newest", *ids[:PAGE_SIZE - 1]]
    rest = anyone.transcripts(Caller("ada-app", frozenset({"ada"})), page.next_cursor)
    assert [r["threadId"] for r in rest.rows] == ids[PAGE_SIZE - 1:] + older[::-1] and rest.next_cursor is None


# -- the list_threads tool in pages (its cursor argument) ----------------------------------------------------------

async def _every_threads_page(client: Client, between: Callable[[int], None] | None = None,
                              **arguments: Any) -> list[dict[str, Any]]:
    """``list_threads``' answers, page by page, following ``nextCursor`` to the end; ``between(pages so far)``
    runs before each next page is asked for."""
    pages: list[dict[str, Any]] = []
    while True:
        answer = _data(await client.call_tool("list_threads", arguments))
        pages.append(answer)
        if answer["nextCursor"] is None:
            return pages
        arguments = {**arguments, "cursor": answer["nextCursor"]}
        if between is not None:
            between(len(pages))


def _thread_ids(answer: dict[str, Any]) -> list[str]:
    return [t["id"] for t in answer["threads"]] + [t["id"] for d in answer["delegations"] for t in d["threads"]]


def test_stdio_list_threads_pages_through_every_thread_once_while_threads_are_written(db: Path, embedder: Any) -> None:
    """``list_threads`` answered every thread of the user in one answer (10,000 threads: one answer of
    megabytes, into the client model's context). It now answers ``THREADS_PAGE`` threads with a signed
    ``nextCursor``: a client following it gets each of Ada's 522 threads and her delegation's exactly once
    (the delegation's named as one, under ``delegations``), though threads are created and written to between
    pages, and never Bob's; a changed, made-up or resources/list cursor is a tool error saying to list again
    from the start."""
    from core.mcp_server.tools import PAGE_SIZE, THREADS_PAGE
    from core.scopes import delegation_resource

    children = _delegated(db, embedder, {"ada": "falcon-0427"})
    adas = _many_threads(db, "ada", PAGE_SIZE + 20, "ada")  # more than a transcript page: resources/list's cursor
    helper = delegation_resource("ada", "helper")
    helpers = _many_threads(db, helper, 5, "helper")

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with Client(_params(db, "--resource", "ada")) as client:
            seen["pages"] = await _every_threads_page(client, _writing_between_pages(db, "ada", adas))
            first = _data(await client.call_tool("list_threads", {}))
            body, tag = first["nextCursor"].split(".")
            changed = body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1] + "." + tag
            transcripts = (await client.list_resources()).next_cursor
            assert transcripts is not None
            seen["refused"] = [_error(await client.call_tool("list_threads", {"cursor": cursor}))
                               for cursor in (changed, "eyJwYWdlIjogM30=", transcripts)]
            seen["other resource"] = _error(await client.call_tool(
                "list_threads", {"cursor": first["nextCursor"], "resource": helper}))
            seen["own"] = _data(await client.call_tool("list_threads", {"cursor": first["nextCursor"]}))
        return seen

    seen = anyio.run(main)
    pages = seen["pages"]
    assert len(pages) >= 3 and all(len(_thread_ids(p)) == THREADS_PAGE for p in pages[:-1])
    _listed_once([_thread_ids(p) for p in pages], {*adas, "ada-main", children["ada"], *helpers})
    assert all(p["resource"] == "ada" for p in pages)
    delegated = [t["id"] for p in pages for d in p["delegations"] for t in d["threads"]]
    assert sorted(delegated) == sorted([children["ada"], *helpers])
    assert all(d["resource"] == helper and d["label"] == "delegation of ada to helper"
               for p in pages for d in p["delegations"])
    assert not any(t.startswith("bob") for p in pages for t in _thread_ids(p))
    assert all(isinstance(t["messageCount"], int) for p in pages for t in p["threads"])
    for refused in seen["refused"]:
        assert "was not issued by this server for the list_threads listing" in refused, refused
        assert "call list_threads again without a cursor" in refused
    assert "continues the list_threads listing of another token (other resources) or of another resource" in \
        seen["other resource"]
    assert _thread_ids(seen["own"])  # the cursor still continues the listing it came with


def test_http_list_threads_cursor_continues_only_its_own_tokens_listing(db: Path, tmp_path: Path) -> None:
    """`mcp --http --any-resource --tokens-file`: Ada's token pages through her threads with ``list_threads``;
    the token of ``ad`` replaying Ada's cursor (on its own resource) gets a tool error, not a page, and no
    thread of Ada's; a cursor from another server run is refused as not issued by this server."""
    from core.mcp_server.tools import THREADS_PAGE

    adas = _many_threads(db, "ada", THREADS_PAGE + 20, "ada")
    _many_threads(db, "ad", 3, "ad")
    ada, ad, tokens_file = _ada_and_ad_tokens(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_STUDIO_MCP_TOKEN"}

    async def call(url: str, token: str, arguments: dict[str, Any]) -> Any:
        http, mcp = _token_client(url, token)
        async with http, mcp:
            return await mcp.call_tool("list_threads", arguments)

    async def main(url: str) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        http, mcp = _token_client(url, ada)
        async with http, mcp:
            seen["ada"] = await _every_threads_page(mcp)
        cursor = seen["ada"][0]["nextCursor"]
        seen["cursor"] = cursor
        seen["replayed"] = _error(await call(url, ad, {"cursor": cursor}))
        seen["replayed, naming ad"] = _error(await call(url, ad, {"cursor": cursor, "resource": "ad"}))
        seen["ad"] = _data(await call(url, ad, {}))
        return seen

    seen = _on_a_new_server(db, tokens_file, env, main)
    elsewhere = _error(_on_a_new_server(db, tokens_file, env, call, ada, {"cursor": seen["cursor"]}))

    assert len(seen["ada"]) == 2
    _listed_once([_thread_ids(p) for p in seen["ada"]], set(adas))
    for refused in (seen["replayed"], seen["replayed, naming ad"]):
        assert "continues the list_threads listing of another token" in refused, refused
        assert "call list_threads again without a cursor" in refused
        assert "ada-0" not in refused
    assert sorted(_thread_ids(seen["ad"])) == ["ad-0000", "ad-0001", "ad-0002"]
    assert "was not issued by this server" in elsewhere


def test_read_thread_pages_reach_a_long_threads_first_message(db: Path) -> None:
    """read_thread answered the newest ``last`` messages (at most 1,000) and nothing older: the start of a thread
    of 2,500 messages was out of any client's reach. ``page`` now reads the ``last`` before those, and so on,
    ``hasMore`` saying whether older ones remain; a page out of range is a tool error."""
    texts = [f"message {i:04d}" for i in range(2500)]
    with open_store(db) as store:
        Memory(store, MemoryOptions()).save_messages(
            [Message.user(text, thread_id="ada-long", resource_id="ada") for text in texts])

    async def main() -> tuple[list[dict[str, Any]], str]:
        answers = []
        async with Client(_params(db, "--resource", "ada")) as client:
            page = 0
            while True:
                answer = _data(await client.call_tool("read_thread", {"thread": "ada-long", "last": 1000,
                                                                      "page": page}))
                answers.append(answer)
                if not answer["hasMore"]:
                    break
                page += 1
            bad = _error(await client.call_tool("read_thread", {"thread": "ada-long", "page": -1}))
        return answers, bad

    answers, bad = anyio.run(main)
    assert [len(a["messages"]) for a in answers] == [1000, 1000, 500]
    read = [m["text"] for a in reversed(answers) for m in a["messages"]]
    assert read == texts
    assert all(a["total"] == 2500 for a in answers)
    assert "page must be between 0" in bad


def test_a_long_threads_transcript_holds_its_newest_messages_and_says_where_the_rest_are(db: Path) -> None:
    """A transcript resource held every message of the thread (resources/read has no pages: a thread of 100,000
    messages was one answer of all of them). It now holds the newest ``TRANSCRIPT_MESSAGES``, and says how many
    there are and that read_thread's pages read the older ones; a shorter thread's transcript is whole."""
    from core.mcp_server.tools import TRANSCRIPT_MESSAGES

    texts = [f"line {i:04d}" for i in range(TRANSCRIPT_MESSAGES + 200)]
    with open_store(db) as store:
        Memory(store, MemoryOptions()).save_messages(
            [Message.user(text, thread_id="ada-long", resource_id="ada") for text in texts]
            + [Message.user("short and whole", thread_id="ada-short", resource_id="ada")])

    async def main() -> tuple[str, str]:
        async with Client(_params(db, "--resource", "ada")) as client:
            long = (await client.read_resource("memory://threads/ada-long")).contents[0].text
            short = (await client.read_resource("memory://threads/ada-short")).contents[0].text
        return long, short

    long, short = anyio.run(main)
    assert f"line {len(texts) - 1:04d}" in long and f"line {len(texts) - TRANSCRIPT_MESSAGES:04d}" in long
    assert f"line {len(texts) - TRANSCRIPT_MESSAGES - 1:04d}" not in long and "line 0000" not in long
    assert f"newest {TRANSCRIPT_MESSAGES:,} of the thread's {len(texts):,} messages" in long
    assert "read_thread" in long and long.startswith("# ")
    assert "short and whole" in short and "newest" not in short
    # The client reads the thread, not where the server keeps its database.
    assert str(db) not in long and str(db) not in short and db.name not in short


@pytest.mark.backends
def test_remember_with_an_idempotency_key_stores_a_retried_call_once(store: Any) -> None:
    """An MCP client that sends a tools/call again (its answer lost) stored the message twice: MCP has no header for a
    key. remember's idempotency_key argument makes the repeat answer the first call's result (replayed) and store
    nothing; the key belongs to the caller, the resource and the tool; another message under the same key is refused;
    without a key each call stores (as before). Through the SDK's own client, on libSQL and on Postgres."""
    from core.embedding.hashing import HashingEmbedder
    from core.gateway.access import Caller
    from core.mcp_server.server import build_server
    from core.mcp_server.tools import Binding, MemoryTools
    from core.storage.schema import IDEMPOTENCY_TABLE

    memory = Memory(store, MemoryOptions(), embedder=HashingEmbedder())
    tools = MemoryTools(memory, Binding("ada"))
    call = {"text": "Please remind me to buy oat milk", "thread": "ada-idem", "idempotency_key": "k-oat"}

    async def main() -> list[Any]:
        async with Client(build_server(tools)) as client:
            tool = next(t for t in (await client.list_tools()).tools if t.name == "remember")
            assert "idempotency_key" in tool.description and "idempotency_key" in tool.input_schema["properties"]
            return [await client.call_tool("remember", call),
                    await client.call_tool("remember", call),  # the retry of a call whose answer was lost
                    await client.call_tool("remember", {**call, "text": "Another message"}),
                    await client.call_tool("remember", {**call, "idempotency_key": "has a space"}),
                    await client.call_tool("remember", {**call, "idempotency_key": "k-new"}),
                    await client.call_tool("remember", {"text": "no key", "thread": "ada-idem"}),
                    await client.call_tool("remember", {"text": "no key", "thread": "ada-idem"})]

    first, again, other, malformed, new_key, *unkeyed = anyio.run(main)
    assert "replayed" not in _data(first)
    assert _data(again) == {**_data(first), "replayed": True}
    assert "already used for a different request" in _error(other) and "idempotency_key" in _error(other)
    assert "must be 1 to 255 visible ASCII characters" in _error(malformed)
    assert _data(new_key)["messageId"] != _data(first)["messageId"]
    assert len({_data(r)["messageId"] for r in unkeyed}) == 2
    # Another caller's equal key is another key (its own call), as over the gateway.
    ops = tools.remember(call["text"], "ada-idem", idempotency_key="k-oat", caller=Caller("ops", None))
    assert "replayed" not in ops and ops["messageId"] != _data(first)["messageId"]
    texts = [m.text for m in memory.recall(thread_id="ada-idem", resource_id="ada", per_page=50).messages]
    assert texts.count(call["text"]) == 3 and texts.count("Another message") == 0 and texts.count("no key") == 2
    with store.db.read() as conn:
        states = [tuple(r) for r in conn.exec_driver_sql(f"SELECT idem_key, state FROM {IDEMPOTENCY_TABLE} "
                                                         "ORDER BY idem_key, scope")]
    assert states == [("k-new", "done"), ("k-oat", "done"), ("k-oat", "done")]


def _titles_fail(store: Any, backend: str) -> None:
    """From now on, giving a thread a title fails in the database (a trigger): where a server that stopped between
    two writes would have stopped."""
    with store.db.write() as conn:
        if backend == "postgres":
            conn.exec_driver_sql("CREATE FUNCTION no_titles() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                                 "RAISE EXCEPTION 'the disk is full'; END $$")
            conn.exec_driver_sql("CREATE TRIGGER no_titles BEFORE UPDATE ON mastra_threads FOR EACH ROW "
                                 "WHEN (NEW.title <> '') EXECUTE FUNCTION no_titles()")
        else:
            conn.exec_driver_sql("CREATE TRIGGER no_titles BEFORE UPDATE ON mastra_threads WHEN NEW.title <> '' "
                                 "BEGIN SELECT RAISE(ABORT, 'the disk is full'); END")


@pytest.mark.backends
def test_remember_titles_a_new_thread_in_the_transaction_that_saves_its_message(store: Any, backend: str) -> None:
    """remember saved the message (creating the thread), then titled the thread in a transaction of its own: a server
    stopped between the two left the message in an untitled thread, and with an idempotency_key its kept answer
    too, so the retry replayed and the title never came. The title is now written in the save's transaction: when
    that write fails, nothing of the call is stored and the key is free for the retry, which then stores it all."""
    from core.embedding.hashing import HashingEmbedder
    from core.mcp_server.server import build_server
    from core.mcp_server.tools import Binding, MemoryTools
    from core.storage.schema import IDEMPOTENCY_TABLE

    memory = Memory(store, MemoryOptions(), embedder=HashingEmbedder())
    tools = MemoryTools(memory, Binding("ada"))
    call = {"text": "Please remind me to buy oat milk", "thread": "ada-shopping", "title": "Shopping",
            "idempotency_key": "k-oat"}

    def stored() -> tuple[Any, list[str], list[Any]]:
        thread = memory.get_thread("ada-shopping")
        with store.db.read() as conn:
            texts = [r[0] for r in conn.exec_driver_sql(
                "SELECT content FROM mastra_messages WHERE thread_id = ?", ("ada-shopping",))]
            keys = [tuple(r) for r in conn.exec_driver_sql(f"SELECT idem_key, state FROM {IDEMPOTENCY_TABLE}")]
        return thread, texts, keys

    async def remember() -> Any:
        async with Client(build_server(tools)) as client:
            return await client.call_tool("remember", call)

    _titles_fail(store, backend)
    failed = anyio.run(remember)
    thread, texts, keys = stored()
    assert failed.is_error
    assert (thread, texts, keys) == (None, [], [])  # nothing of the call: no untitled thread, no kept answer
    with store.db.write() as conn:
        conn.exec_driver_sql("DROP TRIGGER no_titles" + (" ON mastra_threads" if backend == "postgres" else ""))
    retried = _data(anyio.run(remember))
    assert "replayed" not in retried
    thread, texts, keys = stored()
    assert (thread.title, thread.metadata) == ("Shopping", {"createdBy": "mcp"})
    assert len(texts) == 1 and keys == [("k-oat", "done")]


def test_remember_keeps_its_key_while_its_save_waits_longer_than_the_lease(pg_url: str) -> None:
    """remember claimed its idempotency_key under a lease it never renewed: a save that waited longer than the lease
    (here behind another writer's lock on the thread; an embedding model slow to answer does the same) lost the key
    to the client's retry, which ran the call again, and the first call, though its save was the one the client
    waited for, failed as taken over. The lease is now renewed while the save runs: the retry is told the call
    is still running, the first call stores the message and answers, and the retry then replays that answer.
    On Postgres, whose writers run side by side (a libSQL writer holds the one write lock a renewal needs)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from core.embedding.hashing import HashingEmbedder
    from core.gateway.idempotency import IdempotencySettings
    from core.mcp_server.tools import Binding, MemoryTools
    from core.storage import locks

    lease = 1.0
    with open_store(pg_url) as store:
        memory = Memory(store, MemoryOptions(), embedder=HashingEmbedder())
        tools = MemoryTools(memory, Binding("ada"), idempotency=IdempotencySettings(lease=lease))
        call = {"text": "Please remind me to buy oat milk", "thread": "ada-slow", "idempotency_key": "k-slow"}

        def waiting_for_the_thread() -> int:
            with store.db.read() as conn:
                return int(conn.exec_driver_sql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                                "AND NOT granted").scalar() or 0)

        def remember() -> Any:
            try:
                return tools.remember(**call)
            except Exception as exc:  # noqa: BLE001 - the answer a client would get
                return exc

        with ThreadPoolExecutor(2) as pool:
            with store.db.write() as holder:  # another writer holds the thread while the first call saves
                store.db.lock(holder, locks.thread_key("ada-slow"))
                first = pool.submit(remember)
                while waiting_for_the_thread() < 1 and not first.done():  # it has its key and waits in its save
                    time.sleep(0.05)
                time.sleep(4 * lease)  # longer than the lease the key was claimed with
                retry = pool.submit(remember)  # the client's retry, its answer lost meanwhile
                while not retry.done() and waiting_for_the_thread() < 2:  # answered, or waiting in a save too
                    time.sleep(0.05)
                repeats = waiting_for_the_thread()
            first_answer, retry_answer = first.result(60), retry.result(60)
        again = tools.remember(**call)

        texts = [m.text for m in memory.recall(thread_id="ada-slow", resource_id="ada").messages]
    assert repeats == 1  # the retry never reached the save
    assert isinstance(retry_answer, Exception) and "still running" in str(retry_answer), retry_answer
    # It names the key as the tool's argument, and not the HTTP client's Retry-After, which MCP has none of.
    assert "idempotency_key" in str(retry_answer) and "Retry-After" not in str(retry_answer), retry_answer
    assert isinstance(first_answer, dict) and "replayed" not in first_answer, first_answer
    assert again == {**first_answer, "replayed": True}
    assert texts == [call["text"]]


def _opened(http: Any, url: str, headers: dict[str, str]) -> Any:
    """A GET's answer, read whole unless it is the session's stream of server messages (which stays open)."""
    with http.stream("GET", url, headers=headers) as answer:
        if answer.status_code != 200:
            answer.read()
        return answer


def test_http_a_session_is_used_only_by_the_token_that_opened_it(db: Path, tmp_path: Path) -> None:
    """`mcp --http --any-resource --tokens-file`: the SDK served an MCP session to whoever named its Mcp-Session-Id, so
    Ada's token, given the id of a session Bob's token opened, could end it (DELETE: Bob's next call failed "Session
    not found"), open its stream of server messages (GET) and post requests into it. A session is now its opener's:
    another token naming it is answered as if it did not exist (404, the spec's cue to start a new session), and the
    session goes on for Bob."""
    import httpx2

    from core.gateway.tokens import add_entry, entry_for, new_token

    ada, bob = new_token(), new_token()
    tokens_file = tmp_path / "tokens.json"
    add_entry(tokens_file, entry_for("ada-app", ["ada"], ada))
    add_entry(tokens_file, entry_for("bob-app", ["bob"], bob))
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_STUDIO_MCP_TOKEN"}
    server = HttpServer(db, "--any-resource", "--tokens-file", str(tokens_file), env=env)
    version = "2025-06-18"

    def headers(token: str, session: str | None = None) -> dict[str, str]:
        sent = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": version}
        return {**sent, "Mcp-Session-Id": session} if session else sent

    def call(request_id: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                "params": {"name": tool, "arguments": arguments}}

    url = server.url
    try:
        with httpx2.Client(timeout=60) as http:
            opened = http.post(url, headers=headers(bob), json={
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "bob", "version": "1"}}})
            session = opened.headers["mcp-session-id"]
            http.post(url, headers=headers(bob, session), json={"jsonrpc": "2.0", "method": "notifications/initialized"})
            by_ada = {
                "POST": http.post(url, headers=headers(ada, session), json=call(2, "list_threads", {})),
                "GET": _opened(http, url, {**headers(ada, session), "Accept": "text/event-stream"}),
                "DELETE": http.delete(url, headers=headers(ada, session)),
            }
            bobs = http.post(url, headers=headers(bob, session), json=call(3, "read_thread", {"thread": "bob-secret"}))
            ended = http.delete(url, headers=headers(bob, session))
            gone = http.post(url, headers=headers(bob, session), json=call(4, "list_threads", {}))
    finally:
        server.stop()
    for method, answer in by_ada.items():
        assert answer.status_code == 404, (method, answer.text)
        assert "used only by the token that opened it" in answer.json()["error"]["message"]
        assert "zebra" not in answer.text
    assert bobs.status_code == 200 and "zebra-4321-quartz" in bobs.text  # Bob's session goes on
    assert ended.status_code == 200 and gone.status_code == 404


def test_a_client_cannot_tell_another_users_thread_from_one_that_does_not_exist(db: Path, embedder: Any) -> None:
    """Through the MCP server bound to ada, Bob's thread answered "belongs to another resource" where a missing
    thread answered "No thread", by read_thread, search_memory and the transcript; remember into Bob's
    ``conversation:bob:<id>`` said which of those ids exist. Now every tool answers both alike (but for the id),
    and remember refuses a thread id of another's conversation before looking it up."""
    with open_store(db) as store:
        Memory(store, MemoryOptions(), embedder=embedder).save_messages(
            [Message.user("Bob's conversation: zebra-4321-quartz", thread_id="conversation:bob:c1", resource_id="bob")])

    async def ask(client: Client, tool: str, args: dict[str, Any]) -> str:
        if tool == "transcript":
            try:
                read = await client.read_resource(f"memory://threads/{args['thread']}")
                return "read: " + " ".join(getattr(c, "text", "") for c in read.contents)
            except Exception as exc:  # the SDK raises the server's error
                return str(exc)
        result = await client.call_tool(tool, args)
        return ("error: " if result.is_error else "ok: ") + " ".join(getattr(c, "text", "") for c in result.content)

    calls = [("read_thread", {}), ("search_memory", {"query": "PIN"}), ("get_working_memory", {}),
             ("update_working_memory", {"working_memory": "# User\n- Name: Ada\n- Allergies:\n"}), ("transcript", {}),
             ("remember", {"text": "hello"})]

    async def main() -> list[tuple[str, str, str, str]]:
        seen = []
        async with Client(_params(db, "--resource", "ada")) as client:
            for taken, missing in (("bob-secret", "nope-thread"), ("conversation:bob:c1", "conversation:bob:c2")):
                for tool, args in calls:
                    if tool == "remember" and taken == "bob-secret":
                        continue  # taking another's id for a new thread is refused (it says the id is in use)
                    seen.append((tool, taken, await ask(client, tool, {**args, "thread": taken}),
                                 (await ask(client, tool, {**args, "thread": missing})).replace(missing, taken)))
        return seen

    for tool, taken, got, expected in anyio.run(main):
        assert got == expected, (tool, taken, got, expected)
        assert "zebra" not in got and "resource 'bob'" not in got and "Bob" not in got, (tool, got)
    with open_store(db, read_only=True) as store:
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "template": TEMPLATE}))
        assert memory.get_working_memory(resource_id="bob") == "# User\n- Name: Bob\n- Allergies: peanuts\n"
        assert memory.get_thread("nope-thread") is None and memory.get_thread("conversation:bob:c2") is None
        assert len(memory.recall(thread_id="conversation:bob:c1", per_page=False).messages) == 1


def test_search_memory_refuses_a_query_longer_than_recall_embeds(db: Path) -> None:
    """search_memory took any query up to the body limit (a 2 MB one was searched, its terms cut, and repeated
    whole in the answer and the trace). A query past ``MAX_QUERY_CHARS`` (what recall embeds of a query: one
    number) is now a tool error naming the limit; one of exactly that length is searched."""
    from core.recall.text import MAX_EMBED_CHARS, MAX_QUERY_CHARS

    assert MAX_QUERY_CHARS == MAX_EMBED_CHARS

    async def main() -> tuple[str, str, Any]:
        async with Client(_params(db, "--resource", "ada")) as client:
            long = _error(await client.call_tool("search_memory", {"query": "peanut " * 300}))
            huge = _error(await client.call_tool("search_memory", {"query": "x" * 2_000_000}))
            fits = _data(await client.call_tool("search_memory", {"query": ("peanut " * 300)[:MAX_QUERY_CHARS]}))
            return long, huge, fits

    long, huge, fits = anyio.run(main)
    assert f"The query is 2,100 characters long; search_memory takes at most {MAX_QUERY_CHARS:,}" in long, long
    assert "The query is 2,000,000 characters long" in huge and len(huge) < 500
    assert "no flag or setting of the server changes it" in long
    assert fits["resource"] == "ada" and len(fits["query"]) == MAX_QUERY_CHARS


def test_http_a_sessions_owner_is_forgotten_when_the_session_ends_or_expires(tmp_path: Path) -> None:
    """`SessionOwners` kept a string per session for the server's life unless its client ended it (DELETE): a client
    that just went away left one behind each time. Now an owner goes when the session does (DELETE, the SDK's idle
    timeout, noticed as the next session opens or as the SDK answers 404), and at most ``limit`` are kept: past it
    the oldest is forgotten, which ends that session (refused, 404), never opens it to another token."""
    import time

    import httpx2

    from core.embedding.hashing import HashingEmbedder
    from core.gateway import GatewayServer
    from core.gateway.guard import GuardPolicy
    from core.gateway.tokens import TokensFile, entry_for, new_token
    from core.mcp_server.server import SessionOwners, build_server, http_app
    from core.mcp_server.tools import Binding, MemoryTools

    ada, bob = new_token(), new_token()
    policy = GuardPolicy(tokens=TokensFile(None, (entry_for("ada-app", ["ada"], ada), entry_for("bob-app", ["bob"], bob))))
    version = "2025-06-18"

    def headers(token: str, session: str | None = None) -> dict[str, str]:
        sent = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": version}
        return {**sent, "Mcp-Session-Id": session} if session else sent

    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    with open_store(tmp_path / "memory.db") as store:
        tools = MemoryTools(Memory(store, MemoryOptions(), embedder=HashingEmbedder()), Binding(None, any_resource=True))
        app = http_app(build_server(tools), policy, session_idle_timeout=1.0)
        owners: SessionOwners = app.app
        with GatewayServer(app, lifespan="on") as server, httpx2.Client(timeout=60) as http:
            url = server.url + "/mcp"

            def open_session(token: str) -> str:
                opened = http.post(url, headers=headers(token), json={
                    "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
                session = opened.headers["mcp-session-id"]
                http.post(url, headers=headers(token, session), json={"jsonrpc": "2.0",
                                                                      "method": "notifications/initialized"})
                return session

            first = open_session(ada)
            assert owners.owners == {first: "ada-app"}
            assert http.delete(url, headers=headers(ada, first)).status_code == 200
            assert owners.owners == {}
            # Bob's client goes away without ending its session; the SDK ends it after its idle timeout.
            idle = open_session(bob)
            deadline = time.monotonic() + 120  # (a bounded wait for the SDK's reaper, not a timing assumption)
            while idle in owners.live() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert idle not in owners.live() and idle in owners.owners
            kept = open_session(ada)  # noting a session forgets those the SDK no longer has
            assert owners.owners == {kept: "ada-app"}
            refused = http.post(url, headers=headers(bob, idle), json=listing)
            assert refused.status_code == 404 and owners.owners == {kept: "ada-app"}
            # The bound: past it the oldest owner goes, and its session with it (never to another token).
            owners.limit = 1
            newest = open_session(bob)
            assert owners.owners == {newest: "bob-app"}
            for token in (ada, bob):
                answer = http.post(url, headers=headers(token, kept), json=listing)
                assert answer.status_code == 404 and "Session not found for this token" in answer.text
            assert http.post(url, headers=headers(bob, newest), json=listing).status_code == 200


#: What every tool error about arguments that do not fit the tool's input schema ends with.
NOT_RUN = "Nothing was run or saved: call {tool} again with each argument as its input schema (tools/list) describes it."


def test_arguments_of_the_wrong_kind_are_named_with_what_came_and_what_each_takes(db: Path) -> None:
    """A call whose arguments did not fit the tool (a number for a string, an array for an object, a required one
    missing) got the SDK's pydantic report ("1 validation error for search_memoryArguments … errors.pydantic.dev"),
    which repeats the value. Every tool now names each argument at fault, the kind of value it got (its size, never
    the value: a 3 MB string with terminal escapes is not echoed) and what it takes; nothing runs."""
    calls = {
        "query_number": ("search_memory", {"query": 5}),
        "top_k_huge_string": ("search_memory", {"query": "peanut", "top_k": "\x1b[2J" + "9" * 3_000_000}),
        "read_missing": ("read_thread", {}),
        "wm_array": ("update_working_memory", {"working_memory": [1, 2]}),
        "remember_two": ("remember", {"text": None, "thread": {"id": "ada-new"}}),
        "cursor_number": ("list_threads", {"cursor": 5}),
        "wm_thread_float": ("get_working_memory", {"thread": 2.5}),
    }

    async def main() -> tuple[dict[str, str], dict[str, Any]]:
        async with Client(_params(db, "--resource", "ada")) as client:
            refused = {key: _error(await client.call_tool(tool, args)) for key, (tool, args) in calls.items()}
            threads = _data(await client.call_tool("list_threads", {}))
        return refused, threads

    refused, threads = anyio.run(main)
    assert refused["query_number"] == ("Error executing tool search_memory: 'query' must be a string, not the number 5. "
                                       + NOT_RUN.format(tool="search_memory"))
    assert refused["top_k_huge_string"] == (
        "Error executing tool search_memory: 'top_k' must be an integer (or be left out), not a string (3,000,004 "
        "characters). " + NOT_RUN.format(tool="search_memory"))
    assert refused["read_missing"].startswith(
        "Error executing tool read_thread: 'thread' (a string) is required and was not given. ")
    assert "'working_memory' must be a string or an object, not an array (2 items)." in refused["wm_array"]
    assert ("'text' must be a string, not null; 'thread' must be a string, not an object (1 key). "
            + NOT_RUN.format(tool="remember")) in refused["remember_two"]
    assert "'cursor' must be a string (or be left out), not the number 5." in refused["cursor_number"]
    assert "'thread' must be a string (or be left out), not the number 2.5." in refused["wm_thread_float"]
    for key, (tool, _args) in calls.items():
        message = refused[key]
        assert message.endswith(NOT_RUN.format(tool=tool)), message
        assert "validation error" not in message and "pydantic" not in message and "input_value" not in message
        assert message.isprintable() and len(message) < 400, message
    assert threads["threads"] == []  # remember did not run



def test_unknown_argument_names_and_booleans_for_numbers_are_refused_and_real_clients_calls_still_run(db: Path) -> None:
    """The SDK dropped an argument the tool does not have (`topk`, `titel`), so the default applied and the client never
    learnt its argument was ignored, and took true or false for an integer as 1 or 0 (and "5_0" as 50). Every tool now
    refuses them, naming the argument, what it takes and, for an unknown name, the tool's argument names; tools/list
    says so (additionalProperties: false). What real clients send still runs: optional arguments left out or null, an
    integer written 5.0 (JSON Schema's integer) or "5" (clients that send every argument as a string)."""
    refused_calls = {
        "topk": ("search_memory", {"query": "tea", "topk": 1}),
        "top_k_true": ("search_memory", {"query": "tea", "top_k": True}),
        "top_k_underscore": ("search_memory", {"query": "tea", "top_k": "5_0"}),
        "last_false": ("read_thread", {"thread": "ada-tea", "last": False}),
        "page_true_and_typo": ("read_thread", {"thred": "ada-tea", "page": True}),
        "cursr": ("list_threads", {"cursr": "abc"}),
        "resourse": ("get_working_memory", {"resourse": "bob"}),
        "wm_thread_id": ("update_working_memory", {"working_memory": "# User\n- Name: Eve\n", "thread_id": "x"}),
        "titel": ("remember", {"text": "I like coffee", "thread": "ada-coffee", "titel": "Coffee"}),
        "many": ("remember", {"text": "I like cocoa", "thread": "ada-cocoa", "\x1b[2J" + "n" * 5_000: 1,
                              "b": 2, "c": 3, "d": 4}),
    }

    async def main() -> tuple[Any, dict[str, str], dict[str, Any]]:
        async with Client(_params(db, "--resource", "ada")) as client:
            listed = (await client.list_tools()).tools
            ran = {"remember": _data(await client.call_tool("remember", {
                "text": "I like green tea", "thread": "ada-tea", "title": "Tea", "role": "user", "resource": None,
                "idempotency_key": None}))}
            refused = {key: _error(await client.call_tool(tool, args)) for key, (tool, args) in refused_calls.items()}
            ran["search_float"] = _data(await client.call_tool("search_memory", {"query": "green tea", "top_k": 1.0}))
            ran["search_string"] = _data(await client.call_tool("search_memory", {"query": "green tea", "top_k": "1",
                                                                                 "thread": None}))
            ran["read"] = _data(await client.call_tool("read_thread", {"thread": "ada-tea", "last": "2", "page": 0.0}))
            ran["threads"] = _data(await client.call_tool("list_threads", {"cursor": None}))
            ran["wm"] = _data(await client.call_tool("get_working_memory", {}))
        return listed, refused, ran

    listed, refused, ran = anyio.run(main)
    assert {t.name: t.input_schema.get("additionalProperties") for t in listed} == dict.fromkeys(TOOLS, False)
    assert refused["topk"] == (
        "Error executing tool search_memory: 'topk' is not an argument of search_memory (did you mean 'top_k'?), which "
        "takes query (required), top_k, thread, resource. " + NOT_RUN.format(tool="search_memory"))
    assert refused["top_k_true"] == ("Error executing tool search_memory: 'top_k' must be an integer (or be left out), "
                                     "not true. " + NOT_RUN.format(tool="search_memory"))
    assert "'top_k' must be an integer (or be left out), not a string (3 characters). " in refused["top_k_underscore"]
    assert "'last' must be an integer (or be left out), not false. " in refused["last_false"]
    assert refused["page_true_and_typo"] == (
        "Error executing tool read_thread: 'thred' is not an argument of read_thread (did you mean 'thread'?), which "
        "takes thread (required), last, resource, page; 'thread' (a string) is required and was not given; 'page' must "
        "be an integer (or be left out), not true. " + NOT_RUN.format(tool="read_thread"))
    assert "'cursr' is not an argument of list_threads (did you mean 'cursor'?), which takes cursor, resource. " in (
        refused["cursr"])
    assert ("'resourse' is not an argument of get_working_memory (did you mean 'resource'?), which takes thread, "
            "resource. ") in refused["resourse"]
    assert ("'thread_id' is not an argument of update_working_memory (did you mean 'thread'?), which takes "
            "working_memory (required), thread, resource. ") in refused["wm_thread_id"]
    assert ("'titel' is not an argument of remember (did you mean 'title'?), which takes text (required), thread "
            "(required), role, title, resource, idempotency_key. ") in refused["titel"]
    assert refused["many"].startswith("Error executing tool remember: '\\x1b[2Jnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn'… "
                                      "(5,004 characters), 'b', 'c' and 1 more are not arguments of remember, which "
                                      "takes text (required)"), refused["many"]
    for key, (tool, _args) in refused_calls.items():
        message = refused[key]
        assert message.endswith(NOT_RUN.format(tool=tool)), message
        assert message.isprintable() and len(message) < 500 and "pydantic" not in message, message
    assert [h["text"] for h in ran["search_float"]["results"]] == ["I like green tea"]
    assert [h["text"] for h in ran["search_string"]["results"]] == ["I like green tea"]
    assert [m["text"] for m in ran["read"]["messages"]] == ["I like green tea"]
    assert [t["id"] for t in ran["threads"]["threads"]] == ["ada-tea"]  # remember's refused calls stored nothing
    assert ran["wm"]["resource"] == "ada" and ran["wm"]["workingMemory"] is None  # nor did update_working_memory

def test_a_string_argument_is_taken_as_the_text_sent_even_when_it_reads_as_json(db: Path) -> None:
    """The SDK read a string argument that is whole JSON as that JSON value for any argument not typed exactly str: a
    thread titled "null" got no title, search_memory in thread "null" searched every thread, the cursor "null" gave
    the first page, resource "null" was the bound resource, a title '["a", "b"]' was refused as an array and the
    working memory '{"a": 1}' as an object. The text sent is now the text used."""
    titles = {"null": "null", "ada-list": '["a", "b"]', "ada-object": '{"drink": "mate"}', "ada-number": "123",
              "ada-true": "true"}

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with Client(_params(db, "--resource", "ada")) as client:
            for thread, title in titles.items():
                _data(await client.call_tool("remember", {"text": f"I drink mate ({thread})", "thread": thread,
                                                          "title": title}))
            seen["threads"] = _data(await client.call_tool("list_threads", {}))
            seen["search"] = _data(await client.call_tool("search_memory", {"query": "mate", "thread": "null",
                                                                            "top_k": 10}))
            seen["cursor"] = _error(await client.call_tool("list_threads", {"cursor": "null"}))
            seen["resource"] = _error(await client.call_tool("get_working_memory", {"resource": "null"}))
            seen["wm_update"] = _data(await client.call_tool("update_working_memory", {"working_memory": '{"a": 1}'}))
            seen["wm"] = _data(await client.call_tool("get_working_memory", {"thread": "null"}))
        return seen

    seen = anyio.run(main)
    assert {t["id"]: t["title"] for t in seen["threads"]["threads"]} == titles
    hits = seen["search"]["results"]
    assert hits and {h["threadId"] for h in hits} == {"null"}, hits  # the other four threads hold "mate" too
    assert "list_threads" in seen["cursor"] and "without" in seen["cursor"], seen["cursor"]
    assert "bound to resource 'ada'" in seen["resource"], seen["resource"]
    assert seen["wm_update"]["workingMemory"] == '{"a": 1}'  # Markdown memory: the text, as sent
    assert seen["wm"]["resource"] == "ada" and seen["wm"]["workingMemory"] == '{"a": 1}'


WM_NOT_AN_OBJECT = ("The JSON working-memory update must be an object of the fields to change, such as "
                    '{{"name": "Ada"}} (a field set to null is deleted), not {came}. Nothing changed.')


def test_a_json_working_memory_update_that_is_not_an_object_says_what_came_in_json_words(tmp_path: Path) -> None:
    """update_working_memory with JSON text that is no object (null, an array, a number, a string) was refused "A
    working-memory patch must be a JSON object, got NoneType": Python's type name, which an MCP client never sent.
    The refusal now says what the text reads as in JSON's words and what to send, and the memory is unchanged."""
    path = _schema_db(tmp_path / "memory.db")
    sent = {"null": "JSON text that reads as null", "[1, 2]": "JSON text that reads as an array (2 items)",
            "5": "JSON text that reads as the number 5", '"Ada"': "JSON text that reads as a string (3 characters)",
            "true": "JSON text that reads as true"}

    async def main() -> tuple[dict[str, str], str, Any]:
        async with Client(_params(path, "--resource", "ada")) as client:
            _data(await client.call_tool("update_working_memory", {"working_memory": {"name": "Ada"}}))
            said = {text: _error(await client.call_tool("update_working_memory", {"working_memory": text}))
                    for text in sent}
            not_json = _error(await client.call_tool("update_working_memory", {"working_memory": "name: Ada"}))
            return said, not_json, _data(await client.call_tool("get_working_memory", {}))

    said, not_json, kept = anyio.run(main)
    assert said == {text: "Error executing tool update_working_memory: " + WM_NOT_AN_OBJECT.format(came=came)
                    for text, came in sent.items()}
    assert not_json == ("Error executing tool update_working_memory: The JSON working-memory update is text that is "
                        "not valid JSON (Expecting value at position 0): send an object of the fields to change, such "
                        'as {"name": "Ada"} (a field set to null is deleted). Nothing changed.')
    assert "NoneType" not in str(said) and kept["workingMemory"] == {"name": "Ada"}


def _schema_db(path: Path) -> Path:
    """A database whose registered agent keeps JSON working memory (a schema), which the server then serves."""
    with open_store(path) as store:
        schema = {"type": "object", "properties": {"name": {"type": "string"}, "drink": {"type": "string"}}}
        Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "resource", "schema": schema}),
               name="assistant").register("assistant", instructions="You help.")
    return path


def _answer(response: Any) -> Any:
    """The JSON-RPC message of a streamable-HTTP answer, sent as JSON or as one server-sent event."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return json.loads(next(line[5:] for line in response.text.splitlines() if line.startswith("data:")))
    return response.json()


def test_http_json_working_memory_takes_an_object_or_its_text_and_non_object_arguments_say_what_to_send(
        tmp_path: Path) -> None:
    """Over HTTP: a client that sends a JSON working memory as text (what the SDK's pre-parsing was for) still has it
    merged as the object, beside one that sends the object; a title "null" is the title "null"; and a tools/call
    whose arguments are an array got the SDK's bare -32602 "Invalid request parameters": it now says the arguments
    must be an object and names the tool's arguments."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    server = HttpServer(_schema_db(tmp_path / "memory.db"), "--resource", "ada")
    version = "2025-06-18"
    sent = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "Mcp-Protocol-Version": version}
    try:
        async def main() -> tuple[Any, ...]:
            async with httpx2.AsyncClient(timeout=120) as http:
                async with Client(streamable_http_client(server.url, http_client=http)) as client:
                    as_text = _data(await client.call_tool("update_working_memory",
                                                           {"working_memory": '{"name": "Ada"}'}))
                    as_object = _data(await client.call_tool("update_working_memory",
                                                             {"working_memory": {"drink": "mate"}}))
                    not_an_object = _error(await client.call_tool("update_working_memory",
                                                                  {"working_memory": "null"}))
                    _data(await client.call_tool("remember", {"text": "hi", "thread": "ada-1", "title": "null"}))
                    threads = _data(await client.call_tool("list_threads", {}))
                opened = await http.post(server.url, headers=sent, json={
                    "jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw",
                                                                                              "version": "1"}}})
                session = {**sent, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
                await http.post(server.url, headers=session, json={"jsonrpc": "2.0",
                                                                   "method": "notifications/initialized"})
                listed = await http.post(server.url, headers=session, json={
                    "jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "update_working_memory", "arguments": [{"name": "Eve"}]}})
            return as_text, as_object, not_an_object, threads, listed

        as_text, as_object, not_an_object, threads, listed = anyio.run(main)
    finally:
        server.stop()
    assert as_text["workingMemory"] == {"name": "Ada"}
    assert as_object["workingMemory"] == {"name": "Ada", "drink": "mate"}
    assert not_an_object == (  # the text null is no patch: refused, not ignored, saying what came and what to send
        "Error executing tool update_working_memory: " + WM_NOT_AN_OBJECT.format(came="JSON text that reads as null"))
    assert [(t["id"], t["title"]) for t in threads["threads"]] == [("ada-1", "null")]
    assert listed.status_code == 200 and _answer(listed) == {"jsonrpc": "2.0", "id": 2, "error": {
        "code": -32602, "message": "The arguments of update_working_memory must be a JSON object of argument names and "
                                   "values, not an array (1 item): update_working_memory takes working_memory "
                                   "(required), thread, resource. " + NOT_RUN.format(tool="update_working_memory")}}
    with open_store(tmp_path / "memory.db", read_only=True) as store:
        stored = Memory(store, MemoryOptions(working_memory={"enabled": True, "schema": {"type": "object"}}))
        assert stored.get_working_memory(resource_id="ada") == {"name": "Ada", "drink": "mate"}


def test_stdio_arguments_that_are_not_an_object_are_refused_saying_what_to_send(tmp_path: Path) -> None:
    """A tools/call whose arguments were an array, a string, a number or true got the SDK's bare -32602 "Invalid
    request parameters", which did not say what was wrong. Each is now refused (-32602 still) saying the arguments
    must be a JSON object, what came (its kind and size, never its text) and the tool's argument names, or the
    server's tools for a name that is none; nothing runs, and the session goes on. Arguments left null still run."""

    def call(request_id: int, name: Any, arguments: Any) -> str:
        return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                           "params": {"name": name, "arguments": arguments}})

    with _raw_stdio(tmp_path / "memory.db") as (ask, _proc):
        answers = {
            "array": ask(call(2, "remember", ["I like tea", "ada-tea"])),
            "string": ask(call(3, "remember", '{"text": "I like tea", "thread": "ada-tea"}')),
            "number": ask(call(4, "read_thread", 5)),
            "true": ask(call(5, "list_threads", True)),
            "unknown": ask(call(6, "\x1b[2J" + "x" * 500, [1])),
            "no_name": ask(call(7, 5, "x")),
        }
        listed = ask(call(8, "list_threads", None))
    assert [a["id"] for a in answers.values()] == [2, 3, 4, 5, 6, 7]
    said = {key: answer["error"]["message"] for key, answer in answers.items()}
    assert all(answer["error"]["code"] == -32602 for answer in answers.values()), answers
    assert said["array"] == (
        "The arguments of remember must be a JSON object of argument names and values, not an array (2 items): "
        "remember takes text (required), thread (required), role, title, resource, idempotency_key. "
        + NOT_RUN.format(tool="remember"))
    assert said["string"].startswith("The arguments of remember must be a JSON object of argument names and values, "
                                     "not a string (43 characters): remember takes text (required)"), said["string"]
    assert said["number"].startswith("The arguments of read_thread must be a JSON object of argument names and "
                                     "values, not the number 5: read_thread takes thread (required), last, resource, "
                                     "page. "), said["number"]
    assert said["true"].startswith("The arguments of list_threads must be a JSON object of argument names and "
                                   "values, not true: list_threads takes cursor, resource. "), said["true"]
    assert said["unknown"].startswith("The arguments of a tools/call must be a JSON object of argument names and "
                                      "values, not an array (1 item), and '\\x1b[2Jxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'"
                                      "… (504 characters) is not a tool of this server; its tools are search_memory, "
                                      "list_threads, read_thread, get_working_memory, update_working_memory, "
                                      "remember. Nothing was run or saved"), said["unknown"]
    assert "not a string (1 character), and 'name' must be the tool's name; its tools are" in said["no_name"]
    for message in said.values():
        assert message.isprintable() and len(message) < 500 and "I like tea" not in message, message
    assert listed["id"] == 8 and json.loads(listed["result"]["content"][0]["text"])["threads"] == []  # nothing stored


def _limited_db(path: Path) -> Path:
    """A database whose registered agent set small size limits (which the server then serves)."""
    with open_store(path) as store:
        options = MemoryOptions(working_memory={"enabled": True, "scope": "resource"}, max_message_bytes=2_000,
                                max_working_memory_bytes=500)
        Memory(store, options, name="assistant").register("assistant", instructions="You help.")
    return path


def test_http_size_limits_say_what_the_client_can_send_and_what_the_operator_can_change(tmp_path: Path) -> None:
    """The size-limit refusals told an MCP client to raise MemoryOptions(max_message_bytes=...), which only the
    server's operator can, and not through any flag of `memory-studio mcp`. They now give the limit the server
    serves (the registered agent's), what the client can send instead (a message's text counts twice, so about half
    the limit fits: shown to be true), and apart from that where the operator's setting is, saying there is no flag.
    Arguments of the wrong kind get the same words over HTTP as over stdio."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    server = HttpServer(_limited_db(tmp_path / "memory.db"), "--resource", "ada")
    try:
        async def main() -> tuple[str, str, Any, str, str]:
            async with httpx2.AsyncClient(timeout=120) as http:
                async with Client(streamable_http_client(server.url, http_client=http)) as client:
                    message = _error(await client.call_tool("remember", {"text": "x" * 3_000, "thread": "ada-1"}))
                    working = _error(await client.call_tool("update_working_memory", {"working_memory": "w" * 600}))
                    fits = _data(await client.call_tool("remember", {"text": "y" * 950, "thread": "ada-2"}))
                    kind = _error(await client.call_tool("read_thread", {"thread": ["ada-2"]}))
                    last = _error(await client.call_tool("read_thread", {"thread": "ada-2", "last": 5_000}))
            return message, working, fits, kind, last

        message, working, fits, kind, last = anyio.run(main)
    finally:
        server.stop()
    assert re.match(r"Error executing tool remember: The message is 6,0\d\d bytes as stored \(UTF-8 JSON, which holds "
                    r"its text twice: as the content and as its text part\), over this server's limit of 2,000 bytes "
                    r"per message\. Nothing was written\. ", message), message
    assert "several remember calls, each under about 1,000 bytes of text." in message
    assert fits["thread"] == "ada-2"  # 950 bytes of text: under the half the message said
    assert working.startswith("Error executing tool update_working_memory: The working memory would be 600 bytes, over "
                              "this server's limit of 500 bytes. Nothing was written. Make it shorter"), working
    for refusal, setting, default in ((message, "max_message_bytes", "1,000,000"),
                                      (working, "max_working_memory_bytes", "256,000")):
        assert ("For the server's operator: `memory-studio mcp` has no flag or setting for this limit. It comes from "
                "the memory options of the agent it serves (--agent NAME, or the database's only registered agent): "
                f"{setting}, as that agent registered it, or the engine's default of {default} bytes") in refusal
        assert "MemoryOptions" not in refusal
    assert kind == ("Error executing tool read_thread: 'thread' must be a string, not an array (1 item). "
                    + NOT_RUN.format(tool="read_thread"))
    assert "last must be between 1 and 1000, got 5000. Ask for last=1000, then the older ones with page=1" in last
    with open_store(tmp_path / "memory.db", read_only=True) as store:
        assert store.memory.get_thread("ada-1") is None
        assert Memory(store, MemoryOptions(working_memory={"enabled": True})).get_working_memory(
            resource_id="ada") is None


def test_a_refusal_the_schema_kinds_do_not_cover_keeps_the_validators_words_without_the_value() -> None:
    """No tool of ours has a constraint beyond a value's kind, but an SDK or tool that adds one must not bring the
    value back: the validator's own words (one line, cut) are given, with the kind of what came."""
    from core.mcp_server.arguments import arguments_refused

    schema = {"properties": {"a": {"type": "string"}}, "required": ["a"]}
    said = arguments_refused("t", schema, {"a": "\x1b[2J" * 1_000}, [
        {"type": "string_too_long", "loc": ("a",), "msg": "String should have at most 5 characters\n"},
        {"type": "value_error", "loc": (), "msg": "Value error, " + "v" * 1_000}])
    assert said.startswith("'a' got a string (4,000 characters), which was refused: String should have at most 5 "
                           "characters; the arguments were refused (Value error, vvv"), said
    assert said.isprintable() and len(said) < 600 and "\x1b" not in said and "v" * 201 not in said


def test_a_stdio_client_that_closes_its_write_end_gets_every_reply(tmp_path: Path) -> None:
    """``printf '<requests>' | memory-studio mcp ...``: the client sends its requests and closes the server's standard
    input. The SDK ended the session at end of input and cancelled the calls still running: the ``remember`` was
    saved (its worker thread ran to the end) but the client read no result for it. Every request sent before the
    end of input is answered now, and the server then exits."""
    db = tmp_path / "memory.db"
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                 "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "printf", "version": "1"}}},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                 "name": "remember", "arguments": {"text": "oat milk on Friday", "thread": "t1"}}},
             {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                 "name": "remember", "arguments": {"text": "and bread", "thread": "t1"}}},
             {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "list_threads", "arguments": {}}}]
    done = subprocess.run([sys.executable, "-m", "studio.cli", "mcp", "--db", str(db), "--resource", "ada"],
                          input="".join(json.dumps(line) + "\n" for line in lines), capture_output=True, text=True,
                          encoding="utf-8", env=dict(os.environ), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    answers = {a["id"]: a for a in map(json.loads, done.stdout.splitlines())}
    assert sorted(answers) == [1, 2, 3, 4], done.stdout
    for request_id in (2, 3, 4):
        assert "result" in answers[request_id] and not answers[request_id]["result"].get("isError"), answers[request_id]
    assert json.loads(answers[2]["result"]["content"][0]["text"])["thread"] == "t1"
    with open_store(db, read_only=True) as store:
        assert sorted(m.text for m in Memory(store).recall(thread_id="t1", per_page=False)) == [
            "and bread", "oat milk on Friday"]


def _piped(db: Path, lines: list[Any]) -> list[Any]:
    """What ``memory-studio mcp --resource ada`` answers to ``initialize``, ``notifications/initialized`` and
    ``lines`` written to its standard input at once, which is then closed (``printf '…' | memory-studio mcp``); it
    must exit 0."""
    opening = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                   "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "piped", "version": "1"}}},
               {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    done = subprocess.run([sys.executable, "-m", "studio.cli", "mcp", "--db", str(db), "--resource", "ada"],
                          input="".join(json.dumps(line) + "\n" for line in opening + lines), capture_output=True,
                          text=True, encoding="utf-8", env=dict(os.environ), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_batch_over_stdio_gets_an_error_for_each_of_its_requests(tmp_path: Path) -> None:
    """A JSON-RPC batch (an array of requests on one line; MCP has none since 2025-06-18): the SDK dropped the line
    with a log record, so a client waited for the answers to its ids for good. Each request of it gets an error
    saying to send them one per line, nothing of it is run, a notification in it gets none, and the session goes
    on."""
    db = tmp_path / "memory.db"
    batch = [{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                 "name": "remember", "arguments": {"text": "never stored", "thread": "t1"}}},
             {"jsonrpc": "2.0", "id": "b", "method": "ping"},
             {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    answers = _piped(db, [batch, [], {"jsonrpc": "2.0", "id": 3, "method": "ping"}])
    assert [a["id"] for a in answers] == [1, 2, "b", 3], answers
    for refused in answers[1:3]:
        assert refused["error"]["code"] == -32600 and "no batches" in refused["error"]["message"]
        assert "Send each request on a line of its own. Nothing was run or saved." in refused["error"]["message"]
    assert answers[3]["result"] == {}
    with open_store(db, read_only=True) as store:
        assert Memory(store).get_thread("t1") is None  # the batch's remember never ran


def test_a_stdio_request_whose_id_is_not_a_string_or_an_integer_is_answered_with_a_null_id(tmp_path: Path) -> None:
    """A request whose id is a fraction, a boolean, an object, an array or null: the SDK read it as a notification
    without an id (a tools/call of it was dropped with a log line), so the client waited for its answer for good.
    Each is answered with -32600 and ``"id": null`` (JSON-RPC's answer to an id it cannot use), naming what came and
    what to send; nothing of it runs, and the session goes on."""
    db = tmp_path / "memory.db"
    odd_ids: list[Any] = [1.5, True, {}, [], None]
    answers = _piped(db, [*({"jsonrpc": "2.0", "id": odd, "method": "tools/call", "params": {
        "name": "remember", "arguments": {"text": "never stored", "thread": "t1"}}} for odd in odd_ids),
        {"jsonrpc": "2.0", "id": 3, "method": "ping"}])
    assert [a["id"] for a in answers] == [1, None, None, None, None, None, 3], answers
    kinds = ["the number 1.5", "true", "an object (0 keys)", "an array (0 items)", "null"]
    for refused, kind in zip(answers[1:6], kinds):
        assert refused["error"]["code"] == -32600, refused
        assert refused["error"]["message"] == (
            f"The request 'tools/call' has {kind} as its id: MCP takes a string or an integer as a request's id (and "
            "no id at all on a notification). Send the request again with such an id. Nothing was run or saved.")
    assert answers[6]["result"] == {}
    with open_store(db, read_only=True) as store:
        assert Memory(store).get_thread("t1") is None  # none of them ran


def test_a_cancelled_request_sharing_its_id_with_another_leaves_the_other_answered_at_end_of_input(
        tmp_path: Path) -> None:
    """The end-of-input wait counted a client's ``notifications/cancelled`` as the end of a request with that id.
    Request 5 (a remember, held by a lock on the database) and a ping with id 5 (answered), then a cancel of 5 the
    SDK applies to nothing (the ping was its in-flight 5): the wait ended at end of input and the session with it,
    so the remember (saved) was never answered. And a cancel naming "7" for request 7 (the SDK cancels it: one id
    to it) was counted for no request, so the server waited for good. Now the wait counts answers and the SDK's
    own word that a request settled unanswered: the remember is answered, 7 is not, and the server exits."""
    import queue
    import sqlite3

    db = tmp_path / "memory.db"
    proc, stdin, lines, reader = _piped_mcp(db)

    def send(message: dict[str, Any]) -> None:
        stdin.write(json.dumps(message) + "\n")
        stdin.flush()

    def answer() -> Any:
        try:  # a bound for a reply that never comes, not a timing assumption
            return json.loads(lines.get(timeout=120))
        except queue.Empty:
            raise AssertionError("no answer") from None

    def remember(request_id: int, text: str) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {
            "name": "remember", "arguments": {"text": text, "thread": "t1"}}}

    def cancel(request_id: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}

    lock = None
    try:
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "ids", "version": "1"}}})
        send(remember(2, "the database is made"))
        assert [answer()["id"], answer()["id"]] == [1, 2]
        lock = sqlite3.connect(db, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")  # every remember now waits for it
        send(remember(5, "oat milk on Friday"))
        send({"jsonrpc": "2.0", "id": 5, "method": "ping"})
        assert answer() == {"jsonrpc": "2.0", "id": 5, "result": {}}
        send(cancel(5))
        send(remember(7, "never answered"))
        send(cancel("7"))
        send({"jsonrpc": "2.0", "id": 8, "method": "ping"})
        assert answer()["id"] == 8  # (the cancels before it were read)
        stdin.close()
        lock.execute("ROLLBACK")
        assert proc.wait(120) == 0
    finally:
        if lock is not None:
            lock.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(120)  # (until the server's output ends)
    rest = [json.loads(lines.get()) for _ in range(lines.qsize())]
    assert [a["id"] for a in rest] == [5], rest
    assert json.loads(rest[0]["result"]["content"][0]["text"])["thread"] == "t1"
    with open_store(db, read_only=True) as store:
        assert "oat milk on Friday" in [m.text for m in Memory(store).recall(thread_id="t1", per_page=False)]
