"""Hostile clients against the gateway, the MCP server and import: holes found by an adversarial pass,
each reproduced against a running server or a real file."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from core.gateway.guard import GuardPolicy, RequestGuard


def _request(url: str, method: str, path: str, body: str | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=60)
    try:
        conn.request(method, path, body, headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


# -- the request guard --------------------------------------------------------------------------------


def test_an_options_request_without_origin_needs_the_token():
    """Only a CORS preflight (which browsers always send with Origin) goes without the token; an OPTIONS
    that merely carries Access-Control-Request-Method is an ordinary request and must not reach the app
    unauthenticated (the MCP transport, for one, opens a session for it)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from core.gateway.server import GatewayServer

    reached: list[str] = []

    async def rpc(request: Request) -> JSONResponse:
        reached.append(request.method)
        return JSONResponse({"secret": "only for token holders"})

    app = RequestGuard(Starlette(routes=[Route("/rpc", rpc, methods=["OPTIONS", "POST"])]),
                       GuardPolicy(token="t", allowed_origins=frozenset({"https://app.test"})))
    with GatewayServer(app) as server:
        status, _, body = _request(server.url, "OPTIONS", "/rpc", headers={"Access-Control-Request-Method": "POST"})
        assert status == 401 and b"secret" not in body
        assert json.loads(body)["error"]["code"] == "invalid_api_key"
        # A real preflight from a listed origin is still answered by the guard, without the token.
        status, headers, _ = _request(server.url, "OPTIONS", "/rpc", headers={
            "Origin": "https://app.test", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        assert status == 204 and headers["access-control-allow-origin"] == "https://app.test"
        # With the token, an OPTIONS reaches the app as any request does.
        status, _, _ = _request(server.url, "OPTIONS", "/rpc", headers={"Authorization": "Bearer t"})
        assert status == 200
    assert reached == ["OPTIONS"]


def test_a_listed_origin_can_read_why_its_request_was_refused():
    """A browser app on a listed origin that sent a wrong or no token got a 401 without CORS headers, so
    the browser showed a bare network error instead of the message saying to send the token."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from core.gateway.server import GatewayServer

    async def rpc(request: Any) -> JSONResponse:
        return JSONResponse({"ok": True})

    app = RequestGuard(Starlette(routes=[Route("/rpc", rpc, methods=["POST"])]),
                       GuardPolicy(token="t", max_body_bytes=100, allowed_origins=frozenset({"https://app.test"})))
    listed = {"Origin": "https://app.test", "Content-Type": "application/json"}
    with GatewayServer(app) as server:
        for headers, body, status in (
            (listed, "{}", 401),
            ({**listed, "Authorization": "Bearer wrong"}, "{}", 401),
            ({**listed, "Authorization": "Bearer t", "Content-Type": "text/plain"}, "{}", 415),
            ({**listed, "Authorization": "Bearer t"}, json.dumps({"a": "x" * 200}), 413),
        ):
            got, answer, text = _request(server.url, "POST", "/rpc", body, headers)
            assert got == status and answer.get("access-control-allow-origin") == "https://app.test", (status, answer)
            assert json.loads(text)["error"]["message"]
        # An origin that is not listed still learns nothing it could read.
        got, answer, _ = _request(server.url, "POST", "/rpc", "{}", {**listed, "Origin": "https://evil.test"})
        assert got == 403 and "access-control-allow-origin" not in answer


# -- the gateway -------------------------------------------------------------------------------------


@pytest.fixture
def gateway(store) -> Any:
    from core import Memory, MemoryOptions
    from core.agent import Agent
    from core.gateway import GatewayServer, create_app
    from core.llm import ScriptedModel

    memory = Memory(store, MemoryOptions(last_messages=10))
    agent = Agent("echo", instructions="Echo.", model=ScriptedModel(lambda m, t: "ok"), memory=memory, tracer=False)
    with GatewayServer(create_app({"echo": agent}, token="")) as server:
        yield server, memory


@pytest.mark.parametrize("stream", [False, True])
def test_an_id_with_surrounding_spaces_gets_its_reply(gateway, stream):
    """A printable resource or thread id with a leading or trailing space is accepted (it is its own id),
    but it cannot go into a response header as it is: the reply used to be dropped after the turn was
    saved, and the openai client's retries then stored the message again."""
    import openai

    server, memory = gateway
    client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=2, timeout=60)
    metadata = {"resource_id": "ada ", "thread_id": " t-space"}
    if stream:
        chunks = list(client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "hello"}],
                                                     metadata=metadata, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        remembered = next(c for c in chunks if c.choices and c.choices[0].finish_reason).model_extra["memory"]
    else:
        raw = client.chat.completions.with_raw_response.create(
            model="echo", messages=[{"role": "user", "content": "hello"}], metadata=metadata)
        assert "x-resource-id" not in raw.headers and "x-thread-id" not in raw.headers
        completion = raw.parse()
        text, remembered = completion.choices[0].message.content, completion.model_extra["memory"]
    assert text == "ok"
    assert (remembered["resource_id"], remembered["thread_id"]) == ("ada ", " t-space")
    stored = memory.recall(thread_id=" t-space", resource_id="ada ", per_page=False).messages
    assert [m.text for m in stored] == ["hello", "ok"]  # once: no retry stored it twice


# -- the MCP server ----------------------------------------------------------------------------------


def test_a_refused_remember_leaves_no_thread_behind(tmp_path):
    """``remember`` into a new thread used to create the thread first and save the message after: a
    message refused by the save (too large), or an empty thread id, left an empty thread behind although
    the error said nothing was written."""
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client

    from core import Memory, MemoryOptions, open_store
    from core.embedding.hashing import HashingEmbedder
    from core.mcp_server.server import build_server
    from core.mcp_server.tools import Binding, MemoryTools

    with open_store(tmp_path / "memory.db") as store:
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True}, max_message_bytes=10_000),
                        embedder=HashingEmbedder())
        tools = MemoryTools(memory, Binding("ada"))

        async def main() -> list[Any]:
            async with Client(build_server(tools)) as client:
                return [await client.call_tool("remember", args) for args in (
                    {"text": "y" * 20_000, "thread": "too-big", "title": "Big"},
                    {"text": "hello", "thread": ""},
                    {"text": "hello", "thread": "kept", "title": "Kept"},
                )]

        too_big, no_thread, kept = anyio.run(main)
        assert too_big.is_error and "Nothing was written" in too_big.content[0].text
        assert no_thread.is_error and "id of the thread" in no_thread.content[0].text
        assert not kept.is_error
        threads = memory.list_threads(resource_id="ada").threads
        assert [(t.id, t.title, t.metadata) for t in threads] == [("kept", "Kept", {"createdBy": "mcp"})]
        assert [m.text for m in memory.recall(thread_id="kept", resource_id="ada", per_page=False).messages] == [
            "hello"]


# -- import ------------------------------------------------------------------------------------------


@pytest.fixture
def export_of_ada(tmp_path) -> dict[str, Any]:
    from core import Memory, Message, open_store
    from core.transfer import ExportOptions, export_resource

    with open_store(tmp_path / "source.db") as store:
        memory = Memory(store, {"working_memory": {"enabled": True, "scope": "resource"}})
        memory.save_messages([Message.user("I like tea", thread_id="t-ada", resource_id="ada"),
                              Message.assistant("Noted.", thread_id="t-ada", resource_id="ada")])
        memory.update_working_memory(resource_id="ada", working_memory="# Ada\n- likes tea\n")
        return export_resource(store, "ada", ExportOptions())


@pytest.mark.parametrize("where, field, value", [
    ("threads", "createdAt", "yesterday-ish"),
    ("threads", "updatedAt", "soon"),
    ("resources", "createdAt", "2026-13-45T99:00:00Z"),
    ("messages", "createdAt", "not a date"),
    ("threads", "updatedAt", 1767225600000),
])
def test_a_timestamp_the_readers_cannot_parse_refuses_the_file(tmp_path, export_of_ada, where, field, value):
    """One thread or message whose time does not parse made every later listing of that resource's threads
    (or of the thread's messages) fail: the gateway answered 500 to the memory API and to every turn."""
    import copy

    from core import Memory, open_store
    from core.transfer import ExportFormatError, import_data

    data = copy.deepcopy(export_of_ada)
    data[where][0][field] = value
    with open_store(tmp_path / "target.db") as store:
        with pytest.raises(ExportFormatError, match=rf"{where}\[0\].*is refused: its {field} .*ISO-8601 time"):
            import_data(store, data)
        memory = Memory(store)
        assert memory.list_threads(resource_id="ada").threads == []  # nothing was written
        report = import_data(store, export_of_ada)  # the file as exported imports, and reads back
        assert report.written["messages"] == 2
        assert [t.id for t in memory.list_threads(resource_id="ada").threads] == ["t-ada"]
        assert [m.text for m in memory.recall(thread_id="t-ada", resource_id="ada", per_page=False).messages] == [
            "I like tea", "Noted."]


def test_a_file_nested_too_deeply_is_refused_with_a_reason(tmp_path):
    """A JSON bomb of nested brackets stopped import with Python's 'maximum recursion depth exceeded while
    decoding a JSON array', which says nothing about the file or what to do."""
    import io

    from core.cli import main

    bomb = tmp_path / "bomb.json"
    bomb.write_text('{"format": "memory-studio-export", "version": 1, "resources": ' + "[" * 100_000 + "]" * 100_000
                    + "}", encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert main(["import", str(bomb), "--db", str(tmp_path / "target.db")], out=out, err=err) == 1
    assert "nests lists or objects too deeply" in err.getvalue() and "recursion" not in err.getvalue()
    assert not (tmp_path / "target.db").exists()  # refused before any database was opened


def test_an_mcp_client_cannot_take_another_users_conversation_thread_first(store, gateway):
    """The gateway refuses client thread ids in its conversation namespace so nobody can create
    ``conversation:ada:trip`` before ada does; an MCP server bound to mallory could, with ``remember``,
    and ada's conversation 'trip' was then 403 for good."""
    import openai

    from core import Memory, MemoryOptions
    from core.embedding.hashing import HashingEmbedder
    from core.gateway.turns import conversation_thread_id
    from core.mcp_server.tools import Binding, MemoryTools, ResourceNotAllowed

    server, memory = gateway
    mallory = MemoryTools(Memory(store, MemoryOptions(working_memory={"enabled": True}), embedder=HashingEmbedder()),
                          Binding("mallory"))
    with pytest.raises(ResourceNotAllowed, match="conversation threads"):
        mallory.remember("squatting", conversation_thread_id("ada", "trip"))
    with pytest.raises(ResourceNotAllowed):  # the raw prefix, spelled any way, is refused as well
        mallory.remember("squatting", "conversation:ada")
    assert memory.get_thread(conversation_thread_id("ada", "trip")) is None
    # Her own conversations stay hers to write into.
    own = conversation_thread_id("mallory", "notes")
    assert mallory.remember("my own", own)["thread"] == own

    client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=60)
    reply = client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "plan the trip"}],
                                           metadata={"resource_id": "ada", "conversation_id": "trip"})
    assert reply.model_extra["memory"]["thread_id"] == conversation_thread_id("ada", "trip")
    assert memory.get_thread(conversation_thread_id("ada", "trip")).resource_id == "ada"


def test_a_client_leaving_mid_body_is_not_logged_as_a_gateway_failure(gateway, caplog):
    """A client that closes the connection halfway through its request body was logged at ERROR with a
    traceback ('unexpected error while serving a request'), so any client could fill the operator's log
    with alarms that are not failures of the gateway."""
    import logging
    import socket
    import time

    server, memory = gateway
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    caplog.set_level(logging.INFO)
    for path in ("/v1/chat/completions", "/api/memory/threads/t/working-memory?resourceId=ada"):
        method = "POST" if path.startswith("/v1") else "PUT"
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                         "Content-Length: 1000\r\n\r\n{\"model\":".encode())
    # The server notices a closed connection at once, on its own thread; the error, when it came, was
    # logged within milliseconds, so two seconds without one is a pass.
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and not any(r.levelno >= logging.ERROR for r in caplog.records):
        time.sleep(0.05)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    status, _, _ = _request(server.url, "GET", "/health")
    assert status == 200


def test_a_span_that_cannot_be_read_refuses_the_file_before_anything_is_written(tmp_path, export_of_ada):
    """Spans are written after the database's transaction; a span whose startedAt did not parse used to
    fail the import there, with the threads and messages already written and only Python's 'Invalid
    isoformat string' to show for it."""
    import copy

    from core import Memory, open_store
    from core.traces.spans import COLUMNS
    from core.transfer import ExportFormatError, import_data

    span = {column: None for column, _, _ in COLUMNS}
    span.update(traceId="tr-1", spanId="sp-1", name="agent run", spanType="agent_run", isEvent=False,
                startedAt="garbage", threadId="t-ada", resourceId="ada")
    data = copy.deepcopy(export_of_ada)
    data["traces"] = [span]
    with open_store(tmp_path / "target.db") as store:
        with pytest.raises(ExportFormatError, match=r"traces\[0\] \(traceId 'tr-1'\) is refused: it cannot be read "
                                                    r"as a span .*garbage"):
            import_data(store, data)
        assert Memory(store).list_threads(resource_id="ada").threads == []
        span["startedAt"] = "2026-01-01T00:00:00.000Z"
        report = import_data(store, data)
        assert (report.written["messages"], report.written["traces"]) == (2, 1)


@pytest.mark.parametrize("where", ["resources", "threads"])
def test_a_working_memory_over_the_size_limit_refuses_the_file(tmp_path, export_of_ada, where):
    """Every API write of working memory is held to its size limit (256 kB by default), but import wrote a
    file's 3 MB working memory as it was, and every later prompt of that user carried it."""
    import copy

    from core import Memory, open_store
    from core.transfer import ExportFormatError, import_data

    huge = "# Ada\n" + "- likes tea\n" * 300_000
    data = copy.deepcopy(export_of_ada)
    if where == "resources":
        data["resources"][0]["workingMemory"] = huge
    else:
        data["threads"][0]["metadata"] = {**(data["threads"][0]["metadata"] or {}), "workingMemory": huge}
    with open_store(tmp_path / "target.db") as store:
        with pytest.raises(ExportFormatError, match=rf"{where}\[0\].*is refused: its working memory is 3,600,006 "
                                                    r"bytes, over the working-memory size limit of 256,000 bytes"):
            import_data(store, data)
        memory = Memory(store, {"working_memory": {"enabled": True, "scope": "resource"}})
        assert memory.list_threads(resource_id="ada").threads == [] and memory.get_working_memory(resource_id="ada") is None
        # Whoever raised the limit for their memories can say so.
        report = import_data(store, data, max_working_memory_bytes=4_000_000)
        assert report.written["messages"] == 2


def test_an_export_saved_with_a_byte_order_mark_imports(tmp_path, export_of_ada):
    """A file edited and saved by a Windows editor starts with a UTF-8 byte-order mark; import called it
    'not JSON' and said a Markdown transcript cannot be imported."""
    import io

    from core import Memory, open_store
    from core.cli import main
    from core.transfer import dumps

    path = tmp_path / "ada.json"
    path.write_bytes(b"\xef\xbb\xbf" + dumps(export_of_ada).encode("utf-8"))
    out, err = io.StringIO(), io.StringIO()
    assert main(["import", str(path), "--db", str(tmp_path / "target.db"), "--no-index"], out=out, err=err) == 0, \
        err.getvalue()
    with open_store(tmp_path / "target.db") as store:
        assert [t.id for t in Memory(store).list_threads(resource_id="ada").threads] == ["t-ada"]


def test_a_thread_title_that_is_not_text_is_named(tmp_path, export_of_ada):
    """A title given as an object failed deep in the driver with a message about lone surrogates."""
    import copy

    from core import open_store
    from core.transfer import ExportFormatError, import_data

    data = copy.deepcopy(export_of_ada)
    data["threads"][0]["title"] = {"text": "Tea"}
    with open_store(tmp_path / "target.db") as store:
        with pytest.raises(ExportFormatError, match=r"threads\[0\] \(id 't-ada'\) is refused: its title must be "
                                                    r"text, not an object \(1 key\)"):
            import_data(store, data)


def test_mcp_over_http_on_a_network_address_without_a_token_warns(tmp_path):
    """``memory-studio serve`` warns when it listens beyond loopback without a token; ``memory-studio mcp
    --http --host 0.0.0.0`` served the user's memory to the whole network without a word."""
    pytest.importorskip("mcp")
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "MEMORY_STUDIO_MCP_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "core.cli", "mcp", "--db", str(tmp_path / "memory.db"), "--http",
                             "--host", "0.0.0.0", "--port", "0", "--resource", "ada"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=str(Path(__file__).resolve().parents[2]))
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if " on http://" in line:
                break
        text = "".join(lines)
    finally:
        proc.terminate()
        proc.wait(60)
    assert "warning: serving on 0.0.0.0 without a token" in text and "MEMORY_STUDIO_MCP_TOKEN" in text, text


@pytest.mark.parametrize("section, row, problem", [
    ("configs", {"id": 1, "name": "default", "template": "# Notes\n- x:\n", "schema": None, "author": "mallory",
                 "createdAt": "garbage"}, "its createdAt 'garbage' is not an ISO-8601 time"),
    ("configs", {"id": 1, "name": "default", "template": None, "schema": '{"type": 5}', "author": "mallory",
                 "createdAt": "2026-01-01T00:00:00.000Z"}, "its working-memory schema cannot be used"),
    ("agents", {"name": "helper", "config": "{}", "process": None, "updatedAt": "garbage"},
     "its updatedAt 'garbage' is not an ISO-8601 time"),
    ("agents", {"name": "helper", "config": json.dumps({"options": {"last_messages": "lots"}}), "process": None,
                "updatedAt": "2026-01-01T00:00:00.000Z"}, "its memory options cannot be used"),
])
def test_an_override_or_agent_row_the_engine_cannot_use_refuses_the_file(tmp_path, export_of_ada, section, row,
                                                                           problem):
    """The newest override of a memory is read and applied on every turn of every agent using it (and when
    an agent is made), and the registered agents are listed by the Studio and read by `memory-studio mcp`
    at start: one imported row with a time or a schema the engine refuses stopped every user's turns on
    that memory, or every start of `memory-studio mcp`."""
    import copy

    from core import Memory, MemoryOptions, open_store
    from core.agent import Agent
    from core.llm import ScriptedModel
    from core.transfer import ExportFormatError, import_data

    data = copy.deepcopy(export_of_ada)
    data[section] = [row]
    with open_store(tmp_path / "target.db") as store:
        with pytest.raises(ExportFormatError, match=rf"{section}\[0\].*is refused: {problem}"):
            import_data(store, data)
        memory = Memory(store, MemoryOptions(working_memory={"enabled": True}))  # the memory named "default"
        agent = Agent("helper", instructions="Help.", model=ScriptedModel(lambda m, t: "ok"), memory=memory,
                      tracer=False)
        assert agent.generate("hello", memory={"thread": "t-bob", "resource": "bob"}).text == "ok"
        from core.agent_configs import list_agents
        assert [a.name for a in list_agents(store)] == ["helper"]  # registered by the agent itself, readable


def _observation_row(**changes: Any) -> dict[str, Any]:
    row = {"id": "om-1", "lookupKey": "resource:ada", "scope": "resource", "resourceId": "ada", "threadId": None,
           "activeObservations": "- likes tea", "originType": "initial", "config": "{}", "generationCount": 0,
           "lastObservedAt": None, "lastReflectionAt": None, "pendingMessageTokens": 0, "totalTokensObserved": 0,
           "observationTokenCount": 0, "isObserving": False, "isReflecting": False, "observedMessageIds": "[]",
           "isBufferingObservation": False, "isBufferingReflection": False, "lastBufferedAtTokens": 0,
           "createdAt": "2026-01-01T00:00:00.000Z", "updatedAt": "2026-01-01T00:00:00.000Z"}
    row.update(changes)
    return row


@pytest.mark.parametrize("change, problem", [
    (lambda d: d["workingMemory"][0]["versions"][0].update(createdAt="last week"),
     r"workingMemoryVersions\[0\].*its createdAt 'last week' is not an ISO-8601 time"),
    (lambda d: d.update(observations=[_observation_row(lastObservedAt="garbage")]),
     r"observations\[0\].*its lastObservedAt 'garbage' is not an ISO-8601 time"),
    (lambda d: d.update(observations=[_observation_row(generationCount="many")]),
     r"observations\[0\].*its generationCount must be a whole number, not a string"),
])
def test_history_and_observation_rows_the_engine_cannot_read_refuse_the_file(tmp_path, export_of_ada, change,
                                                                              problem):
    """An observation record is read on every turn of its owner (``OMRecord.from_row``: its counts made
    integers; a thread's lastObservedAt parsed), working-memory versions whenever the history is listed
    (createdAt parsed): such a row with a time or a count the engine cannot read imported, and every later
    read of it failed."""
    import copy

    from core import open_store
    from core.transfer import ExportFormatError, import_data

    data = copy.deepcopy(export_of_ada)
    change(data)
    with open_store(tmp_path / "target.db") as store, pytest.raises(ExportFormatError, match=problem):
        import_data(store, data)


def test_a_tool_call_part_the_prompt_cannot_read_refuses_the_file(tmp_path, export_of_ada):
    """A message whose tool-invocation part held a number instead of the call imported, and every later turn
    in its thread failed while building the prompt ('int' object has no attribute 'get')."""
    import copy

    from core import open_store
    from core.transfer import ExportFormatError, import_data

    data = copy.deepcopy(export_of_ada)
    data["messages"][1]["content"] = json.dumps(
        {"format": 2, "parts": [{"type": "tool-invocation", "toolInvocation": 5}]})
    with open_store(tmp_path / "target.db") as store, pytest.raises(
            ExportFormatError, match=r"messages\[1\].*tool-invocation part whose \"toolInvocation\" is not an object"):
        import_data(store, data)


def test_a_files_ids_cannot_drive_the_terminal_that_shows_the_report(tmp_path):
    """A file whose thread t1 (here alice's) claimed the resource '\\x1b]0;pwned\\x07\\x1b[2J…' printed that
    escape sequence raw in the conflict line: it retitled and cleared the terminal of whoever imported it."""
    import io

    from core import Memory, Message, open_store
    from core.cli import main

    with open_store(tmp_path / "target.db") as store:
        Memory(store).save_messages([Message.user("hi", thread_id="t1", resource_id="alice")])
    at = "2026-01-01T00:00:00.000Z"
    evil = "\x1b]0;pwned\x07\x1b[2J\x1b[31mEVIL\x1b[0m"
    path = tmp_path / "evil.json"
    path.write_text(json.dumps({
        "format": "memory-studio-export", "version": 1, "resources": [],
        "threads": [{"id": "t1", "resourceId": evil, "createdAt": at}],
        "messages": [{"id": "m9", "threadId": "t1", "resourceId": evil, "role": "user", "type": "v2", "createdAt": at,
                      "content": json.dumps({"format": 2, "parts": [{"type": "text", "text": "x"}]})}]}),
        encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    assert main(["import", str(path), "--db", str(tmp_path / "target.db")], out=out, err=err) == 0
    shown = out.getvalue() + err.getvalue()
    assert "\x1b" not in shown and "\x07" not in shown
    assert "thread t1: belongs to resource alice here but to \\x1b]0;pwned\\x07\\x1b[2J" in shown
    # A refused file's message is held to the same rule.
    path.write_text(json.dumps({"format": "memory-studio-export", "version": 1, "threads": [],
                                "messages": [{"id": "m\x1b[2J", "threadId": "t\x07", "role": "user", "type": "v2",
                                              "createdAt": at, "content": "{}"}]}), encoding="utf-8")
    err = io.StringIO()
    assert main(["import", str(path), "--db", str(tmp_path / "target.db")], out=io.StringIO(), err=err) == 1
    assert "\x1b" not in err.getvalue() and "message m\\x1b[2J belongs to thread t\\x07" in err.getvalue()
