"""The request guard: raw HTTP requests against a running `memory-studio serve` (Host, Origin,
Content-Type, token, oversized and nested bodies), and the same guard around another ASGI app."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.gateway.guard import GuardPolicy, JsonDepth, RequestGuard, json_depth_exceeds, normalize_origin

AGENTS = textwrap.dedent('''
    import os

    from core import Memory, MemoryOptions, open_store
    from core.agent import Agent
    from core.llm import ScriptedModel


    def agents():
        memory = Memory(open_store(os.environ["GW_GUARD_DB"]), MemoryOptions(last_messages=5))
        return [Agent("echo", instructions="Echo.", model=ScriptedModel(lambda m, t: "ok"), memory=memory,
                      tracer=False)]
''')

CHAT = json.dumps({"model": "echo", "messages": [{"role": "user", "content": "remember me"}],
                   "metadata": {"thread_id": "t-guard", "resource_id": "ada"}})
JSON = {"content-type": "application/json"}


class Served:
    def __init__(self, url: str, db: Path) -> None:
        self.url = url
        self.netloc = url.removeprefix("http://")
        self.host, port = self.netloc.rsplit(":", 1)
        self.port = int(port)
        self.db = db

    def request(self, method: str, path: str, body: bytes | str | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], dict | None]:
        conn = http.client.HTTPConnection(self.netloc, timeout=60)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            sent = {"host": self.netloc, **(headers or {})}
            if body is not None:
                sent.setdefault("content-length", str(len(body)))
            for name, value in sent.items():
                if value is not None:
                    conn.putheader(name, value)
            conn.endheaders(body.encode() if isinstance(body, str) else body)
            response = conn.getresponse()
            raw = response.read()
            is_json = (response.getheader("content-type") or "").startswith("application/json")
            return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(raw) if is_json else None
        finally:
            conn.close()

    def turns(self) -> int:
        from core import Memory, open_store

        store = open_store(self.db)
        try:
            memory = Memory(store)
            if memory.get_thread("t-guard") is None:
                return 0
            return len(memory.recall(thread_id="t-guard", per_page=False).messages)
        finally:
            store.close()


def start_serve(tmp_path: Path, *flags: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], Served]:
    (tmp_path / "gw_guard_agents.py").write_text(AGENTS)
    db = tmp_path / "guard.db"
    environment = {**os.environ, "GW_GUARD_DB": str(db), **(env or {})}
    if "MEMORY_STUDIO_GATEWAY_TOKEN" not in (env or {}):
        environment.pop("MEMORY_STUDIO_GATEWAY_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "studio.cli", "serve", "--agents", "gw_guard_agents:agents", "--port", "0",
         "--log-level", "warning", *flags],
        cwd=tmp_path, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if " on http://" not in line:
        proc.kill()
        raise AssertionError(f"the gateway did not start: {line}{proc.communicate()[1]}")
    return proc, Served(line.split(" on ", 1)[1].split(" ", 1)[0], db)


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    proc.communicate(timeout=60)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    proc, server = start_serve(tmp_path, "--allowed-host", "studio.lan", "--allow-origin", "http://localhost:5173",
                               "--max-body-mb", "1", env={"MEMORY_STUDIO_GATEWAY_TOKEN": "s3cret"})
    try:
        yield server
    finally:
        stop(proc)


AUTH = {"authorization": "Bearer s3cret"}


def test_a_cross_site_text_plain_post_stores_nothing(served):
    # What an HTML form or fetch(..., {mode: "no-cors"}) can send without a CORS preflight.
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        status, _, body = served.request("POST", "/v1/chat/completions", CHAT, {**AUTH, "content-type": content_type})
        assert status == 415 and "application/json" in body["error"]["message"]
    assert served.turns() == 0
    status, _, _ = served.request("POST", "/v1/chat/completions", CHAT, {**AUTH, **JSON})
    assert status == 200 and served.turns() == 2


def test_only_the_names_it_is_served_as_are_accepted(served):
    # A DNS-rebinding page sends its own name as Host: refused, whatever the path.
    for host in ("evil.example", f"evil.example:{served.port}", "127.0.0.1.evil.example", "studio.lan.evil"):
        for path in ("/api/memory/threads?resourceId=ada", "/v1/models"):
            status, _, body = served.request("GET", path, headers={**AUTH, "host": host})
            assert status == 421 and "--allowed-host" in body["error"]["message"], host
    for host in (served.netloc, f"localhost:{served.port}", "LOCALHOST", "studio.lan", f"studio.lan:{served.port}"):
        assert served.request("GET", "/v1/models", headers={**AUTH, "host": host})[0] == 200, host
    assert served.request("GET", "/v1/models", headers={**AUTH, "host": None})[0] in (400, 421)  # h11 or the guard


def test_web_pages_need_a_listed_origin(served):
    status, _, body = served.request("POST", "/v1/chat/completions", CHAT,
                                     {**AUTH, **JSON, "origin": "https://evil.example"})
    assert status == 403 and "--allow-origin https://evil.example" in body["error"]["message"]
    assert served.request("GET", "/api/memory/threads?resourceId=ada",
                          headers={**AUTH, "origin": "null"})[0] == 403
    assert served.turns() == 0
    # The listed origin: a preflight (without the token, as browsers send it), then the real request.
    status, headers, _ = served.request("OPTIONS", "/v1/chat/completions", headers={
        "origin": "http://localhost:5173", "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type"})
    assert status == 204 and headers["access-control-allow-origin"] == "http://localhost:5173"
    assert "authorization" in headers["access-control-allow-headers"]
    status, headers, body = served.request("POST", "/v1/chat/completions", CHAT,
                                           {**AUTH, **JSON, "origin": "http://localhost:5173"})
    assert status == 200 and headers["access-control-allow-origin"] == "http://localhost:5173"
    assert "x-thread-id" in headers["access-control-expose-headers"]
    assert served.turns() == 2


def test_the_token_scheme_is_case_insensitive(served):
    for scheme in ("Bearer", "bearer", "BEARER"):
        assert served.request("GET", "/v1/models", headers={"authorization": f"{scheme} s3cret"})[0] == 200
    status, headers, body = served.request("GET", "/v1/models", headers={"authorization": "Basic s3cret"})
    assert status == 401 and headers["www-authenticate"] == "Bearer"
    assert served.request("GET", "/v1/models")[0] == 401
    assert served.request("GET", "/health")[0] == 200  # load balancers probe without it


def _refused_at_start(command: list[str], tmp_path: Path, env: dict[str, str]) -> str:
    """Runs a server command that must refuse to start; its stderr. A server that starts instead is stopped
    (that is the defect: it would have served, refusing every request with 401)."""
    proc = subprocess.Popen([sys.executable, "-m", "studio.cli", *command, "--port", "0", "--log-level", "warning"],
                            cwd=tmp_path, env={**os.environ, "GW_GUARD_DB": str(tmp_path / "guard.db"), **env},
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"{command[0]} started with a token no client can send") from None
    assert proc.returncode == 1, err
    return err


def test_a_token_no_client_can_send_is_refused_at_start(tmp_path):
    """A token ending in a carriage return (a .env file saved on Windows) or a newline, or holding text
    outside ASCII, was taken: HTTP strips the blanks a client sends and clients refuse control characters
    in a header, so every request got 401 "The API token is not valid" and nothing said why."""
    (tmp_path / "gw_guard_agents.py").write_text(AGENTS)
    serve = ["serve", "--agents", "gw_guard_agents:agents"]
    err = _refused_at_start(serve, tmp_path, {"MEMORY_STUDIO_GATEWAY_TOKEN": "s3cret\r"})
    assert "The token in $MEMORY_STUDIO_GATEWAY_TOKEN starts or ends with whitespace" in err
    assert "refused with 401" in err and "s3cret" not in err  # the secret itself is never printed
    err = _refused_at_start([*serve, "--token", "s3cret "], tmp_path, {})
    assert "The token in --token starts or ends with whitespace" in err
    err = _refused_at_start([*serve, "--token", "s3crét"], tmp_path, {})
    assert "The token in --token contains a character outside ASCII (character 5)" in err
    err = _refused_at_start(["mcp", "--db", str(tmp_path / "mcp.db"), "--http", "--any-resource"], tmp_path,
                            {"MEMORY_STUDIO_MCP_TOKEN": "s3cret\n"})
    assert "The token in $MEMORY_STUDIO_MCP_TOKEN starts or ends with whitespace" in err
    with pytest.raises(ValueError, match="The API token contains a control character"):
        GuardPolicy(token="s3\x00cret")
    # A blank inside is sent and compared as it is.
    assert GuardPolicy(token="two words").accepts_token("Bearer two words")


def test_bodies_are_capped(served):
    big = json.dumps({"model": "echo", "messages": [{"role": "user", "content": "x" * (2 * 1024 * 1024)}]})
    status, headers, body = served.request("POST", "/v1/chat/completions", big, {**AUTH, **JSON})
    assert status == 413 and "--max-body-mb" in body["error"]["message"]
    assert served.turns() == 0


def test_a_body_without_a_length_is_cut_off_at_the_limit(served):
    """Chunked: the guard answers 413 once 1 MB has been read, while the client is still sending."""
    sock = socket.create_connection((served.host, served.port), timeout=60)
    try:
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {served.netloc}\r\nAuthorization: Bearer s3cret"
                     "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        chunk = b'"' + b"x" * 65534 + b'"'
        sent = 0
        try:
            while sent < 100 * 1024 * 1024:  # the server stops reading long before this
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except OSError:
            pass  # the server closed the connection after answering
        reply = b""
        try:
            while part := sock.recv(65536):
                reply += part
        except OSError:
            pass
    finally:
        sock.close()
    assert reply.startswith(b"HTTP/1.1 413 ") and b"body_too_large" in reply
    assert sent < 100 * 1024 * 1024


def test_deeply_nested_json_is_400(served):
    bomb = '{"model": "echo", "messages": ' + "[" * 100_000 + "]" * 100_000 + "}"
    status, _, body = served.request("POST", "/v1/chat/completions", bomb, {**AUTH, **JSON})
    assert status == 400 and body["error"]["code"] == "json_too_deep"
    status, _, body = served.request("PUT", "/api/memory/threads/t/working-memory?resourceId=ada",
                                     '{"workingMemory": ' + "[" * 70 + "]" * 70 + "}", {**AUTH, **JSON})
    assert status == 400 and "nested more than 64 levels" in body["error"]["message"]


def test_bad_guard_flags_are_explained(tmp_path):
    from tests.core.test_gateway_errors import serve_cli

    (tmp_path / "gw_guard_agents.py").write_text(AGENTS)
    for flags, fragment in ((["--allow-origin", "*"], "every web page"),
                            (["--allow-origin", "app.example.com"], "an origin like"),
                            (["--allowed-host", "http://x/y"], "--allowed-host takes a host name"),
                            (["--max-body-mb", "0"], "--max-body-mb must be a positive")):
        code, err = serve_cli("--agents", "gw_guard_agents:agents", *flags)
        assert code == 1 and fragment in err, (flags, err)


# -- the guard as a reusable middleware ---------------------------------------------------------------


def test_the_guard_wraps_any_asgi_app():
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from core.gateway.server import GatewayServer

    seen: list[object] = []

    async def echo(request: Request) -> JSONResponse:
        seen.append(await request.json())
        return JSONResponse({"ok": True})

    app = RequestGuard(Starlette(routes=[Route("/rpc", echo, methods=["POST"])]),
                       GuardPolicy(token="t", max_body_bytes=1000, allowed_origins=frozenset({"https://app.test"})))
    with GatewayServer(app) as server:
        served = Served(server.url, Path("unused"))
        auth = {"authorization": "bearer t", **JSON}
        assert served.request("POST", "/rpc", '{"a": 1}', auth)[:1] == (200,)
        assert served.request("POST", "/rpc", '{"a": 1}', {**auth, "host": "rebound.example"})[0] == 421
        assert served.request("POST", "/rpc", '{"a": 1}', {**auth, "origin": "https://other.test"})[0] == 403
        assert served.request("POST", "/rpc", '{"a": 1}', {**auth, "content-type": "text/plain"})[0] == 415
        assert served.request("POST", "/rpc", '{"a": 1}', JSON)[0] == 401
        assert served.request("POST", "/rpc", json.dumps({"a": "x" * 2000}), auth)[0] == 413
        assert served.request("POST", "/rpc", "[" * 80 + "]" * 80, auth)[0] == 400
    assert seen == [{"a": 1}]


def test_policy_values():
    policy = GuardPolicy(host="0.0.0.0", allowed_hosts=frozenset({"Studio.LAN", "proxy.example:8443"}))
    assert policy.accepts_host("192.168.1.20:8787")  # a wildcard bind: an IP cannot be rebound
    assert policy.accepts_host("studio.lan.") and policy.accepts_host("proxy.example:8443")
    assert not policy.accepts_host("proxy.example:9999") and not policy.accepts_host("evil.example")
    loopback = GuardPolicy(host="127.0.0.1")
    assert not loopback.accepts_host("192.168.1.20") and loopback.accepts_host("[::1]:80", "::1")
    assert not loopback.accepts_host("127.0.0.1@evil.example") and not loopback.accepts_host("")
    assert normalize_origin("HTTPS://App.Example:443/") == "https://app.example"
    assert GuardPolicy(allowed_origins=frozenset({"http://localhost:5173"})).accepts_origin("http://LOCALHOST:5173")
    assert GuardPolicy(token="t").accepts_token("BeArEr t") and not GuardPolicy(token="t").accepts_token("Bearer u")
    assert GuardPolicy().accepts_token(None)  # no token set: no check
    with pytest.raises(ValueError, match="every web page"):
        GuardPolicy(allowed_origins=frozenset({"*"}))


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


_json_values = st.recursive(
    st.none() | st.integers() | st.text(alphabet='ab"\\[]{}', max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='k"\\[{', max_size=4), inner,
                                                                   max_size=3),
    max_leaves=25)


@given(_json_values, st.lists(st.integers(1, 9), min_size=1, max_size=40))
def test_nesting_is_counted_exactly_across_any_chunking(value, cuts):
    data = json.dumps(value).encode()
    depth = _depth(value)
    for limit in {max(depth - 1, 1), depth}:
        checker, position, within = JsonDepth(limit), 0, True
        for cut in cuts * (len(data) // sum(cuts) + 1):
            if position >= len(data):
                break
            within = checker.feed(data[position:position + cut]) and within
            position += cut
        assert within == (depth <= limit)
    assert json_depth_exceeds(json.dumps(value), max(depth, 1)) is False
