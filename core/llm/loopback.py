"""An OpenAI-protocol server on 127.0.0.1, for end-to-end tests and the offline demo.

It lets the real HTTP clients (``OpenAICompatibleModel``, an OpenAI embeddings client) run
unchanged with no network: chat replies come from a ``ScriptedModel`` (or any ``ChatModel``),
embeddings from a deterministic word-hashing function. It records every request and can be
told to fail or stall upcoming requests, which is how retries and timeouts are tested
without sleeping. With ``slots=1`` it answers one chat completion at a time, as llama.cpp with
``n_parallel=1`` does: the others queue, and a held request whose client hangs up frees its slot (as a
real server stops generating). With ``context_size`` it refuses a chat request whose messages count more tokens
than that (HTTP 400, in llama.cpp's words), as a server started with a small ``--ctx-size`` does. It binds
127.0.0.1 only; there is deliberately no host parameter.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import select
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from core.llm.base import ChatModel, ModelError
from core.llm.scripted import Responder, ScriptedModel, ScriptStep
from core.llm.wire import completion_from_result, stream_chunks_from_result
from core.tokens import MESSAGE_OVERHEAD, EstimatingTokenizer

LOOPBACK_HOST = "127.0.0.1"
_POLL = 0.02  # how often a held request looks for a slot, a release or its client's hang-up
_WORD = re.compile(r"\w+")


def hash_embedding(text: str, dimensions: int = 64) -> list[float]:
    """A deterministic, L2-normalised bag-of-words vector.

    Each word is hashed to a signed slot, so texts sharing words get a higher cosine
    similarity: crude, but enough for semantic-recall demos to rank sensibly offline.
    """
    vector = [0.0] * dimensions
    for word in _WORD.findall(text.lower()):
        digest = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
        vector[digest % dimensions] += 1.0 if (digest >> 32) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        # Empty or all-cancelling text still needs a unit vector for cosine maths.
        vector[0], norm = 1.0, 1.0
    return [v / norm for v in vector]


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any  # parsed JSON, or None
    raw: bytes = b""  # the body's bytes exactly as received


@dataclass(frozen=True)
class _Failure:
    status: int
    message: str
    retry_after: float | None


class LoopbackServer:
    """A background-thread HTTP server speaking enough of the OpenAI API for our clients.

    Routes: ``POST /v1/chat/completions`` (JSON or SSE with ``stream: true``),
    ``GET /v1/models`` and ``POST /v1/embeddings``. Use as a context manager::

        with LoopbackServer(["Hello!"]) as server:
            model = OpenAICompatibleModel("loopback", base_url=server.base_url, api_key="x")
    """

    def __init__(
        self,
        model: ChatModel | Sequence[ScriptStep] | Responder | None = None,
        *,
        embedding_dimensions: int = 64,
        model_names: Sequence[str] = ("loopback-chat", "loopback-embed"),
        require_api_key: str | None = None,
        slots: int | None = None,
        context_size: int | None = None,
    ) -> None:
        """``slots``: how many chat completions are answered at once (None: no limit); the others wait
        for a slot in the order they came. ``context_size``: the tokens a chat request's messages may count
        (``core.tokens.EstimatingTokenizer``, each message's text and framing, as the engine's
        ``request_tokens`` counts them), None: no limit."""
        self.model: ChatModel
        if model is None:
            self.model = ScriptedModel([], name="loopback")
        elif isinstance(model, ChatModel):
            self.model = model
        else:
            self.model = ScriptedModel(model, name="loopback")
        self.embedding_dimensions = embedding_dimensions
        self.model_names = tuple(model_names)
        self.requests: list[RecordedRequest] = []
        self._require_api_key = require_api_key
        self._failures: deque[_Failure] = deque()
        self._stalls = 0
        self._stall_matching: Callable[[Any], bool] | None = None
        self._released = threading.Event()
        self._released.set()
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(slots) if slots is not None else None
        self.context_size = context_size
        #: Chat requests held (stalled or queued for a slot) whose client hung up before they were answered.
        self.abandoned: list[RecordedRequest] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> LoopbackServer:
        if self._httpd is not None:
            return self
        httpd = ThreadingHTTPServer((LOOPBACK_HOST, 0), _Handler)
        httpd.daemon_threads = True
        httpd.loopback = self  # type: ignore[attr-defined]
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"loopback-openai:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._released.set()  # let stalled handlers finish so shutdown doesn't hang
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()
        self._httpd = None
        self._thread = None

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the loopback server is not running; call start() first")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The URL to give an OpenAI client, ending in ``/v1``."""
        return f"http://{LOOPBACK_HOST}:{self.port}/v1"

    # -- behaviour switches -----------------------------------------------------------------

    def fail_next(self, count: int = 1, status: int = 500, *, message: str | None = None,
                  retry_after: float | None = None) -> None:
        """Answer the next ``count`` requests with ``status`` (e.g. 429, 500, 503)."""
        text = message or f"loopback: injected failure {status}"
        with self._lock:
            self._failures.extend(_Failure(status, text, retry_after) for _ in range(count))

    def stall_next(self, count: int = 1, *, matching: Callable[[Any], bool] | None = None) -> None:
        """Hold the next ``count`` requests unanswered until ``release()`` (or ``stop()``), or until
        their client hangs up; ``matching``: only requests whose parsed body it accepts (a test that
        holds the reflector's call, not the turns' before it).

        A client with a short timeout then times out for certain, with no race against a
        sleep of guessed length.
        """
        with self._lock:
            self._stalls += count
            self._stall_matching = matching
            self._released.clear()

    def release(self) -> None:
        self._released.set()

    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of the chat-completion requests received, oldest first."""
        return [r.body for r in self.requests if r.path.endswith("/chat/completions")]

    def chat_request_bytes(self) -> list[bytes]:
        """The chat-completion request bodies exactly as received (bytes), oldest first."""
        return [r.raw for r in self.requests if r.path.endswith("/chat/completions")]

    # -- request handling (called from server threads) --------------------------------------

    def _admit(self, request: RecordedRequest) -> tuple[_Failure | None, bool]:
        with self._lock:
            self.requests.append(request)
            failure = self._failures.popleft() if self._failures else None
            matching = self._stall_matching
            stall = self._stalls > 0 and (matching is None or bool(matching(request.body)))
            if stall:
                self._stalls -= 1
        return failure, stall

    def _authorised(self, headers: dict[str, str]) -> bool:
        if self._require_api_key is None:
            return True
        return headers.get("authorization") == f"Bearer {self._require_api_key}"

    def _embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        raw = body.get("input", "")
        items = [raw] if isinstance(raw, str) or (raw and isinstance(raw[0], int)) else list(raw)
        texts = [item if isinstance(item, str) else " ".join(map(str, item)) for item in items]
        dims = int(body.get("dimensions") or self.embedding_dimensions)
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(texts):
            vector: Any = hash_embedding(text, dims)
            if as_base64:
                vector = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode("ascii")
            data.append({"object": "embedding", "index": index, "embedding": vector})
        tokens = sum(len(_WORD.findall(t)) for t in texts)
        return {"object": "list", "data": data, "model": body.get("model", "loopback-embed"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    def _models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0,
                                            "owned_by": "loopback"} for name in self.model_names]}


def _prompt_tokens(messages: Sequence[Any]) -> int:
    """A chat request's tokens as the engine counts a prompt (``EstimatingTokenizer``: its text and framing)."""
    tokenizer = EstimatingTokenizer()
    return sum(tokenizer.count(str(m.get("content") or "")) + MESSAGE_OVERHEAD for m in messages
               if isinstance(m, dict))


def _error_body(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.0 closes after each reply, so SSE needs no chunked encoding.
    protocol_version = "HTTP/1.0"
    server_version = "MemoryStudioLoopback/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are recorded on the server object; stderr noise helps nobody

    @property
    def owner(self) -> LoopbackServer:
        return self.server.loopback  # type: ignore[attr-defined,no-any-return]

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        length = int(headers.get("content-length") or 0)
        payload = self.rfile.read(length) if length else b""
        try:
            body = json.loads(payload) if payload else None
        except json.JSONDecodeError:
            self._json(400, _error_body("request body is not valid JSON", "invalid_request_error"))
            return
        owner = self.owner
        request = RecordedRequest(method, self.path, headers, body, payload)
        failure, stall = owner._admit(request)
        slot = owner._slots if self.path.split("?", 1)[0].endswith("/chat/completions") else None
        if slot is not None and not self._hold(lambda: slot.acquire(timeout=_POLL), request):
            return
        try:
            if stall and not self._hold(lambda: owner._released.wait(_POLL), request):
                return
            self._route(method, body, headers, failure)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (e.g. it timed out while we were stalled)
        finally:
            if slot is not None:
                slot.release()

    def _hold(self, ready: Any, request: RecordedRequest) -> bool:
        """Wait until ``ready()`` (tried every ``_POLL`` s) is True; False when the client hung up first
        (the request is then noted as abandoned, and not answered)."""
        while not ready():
            if self._client_gone():
                with self.owner._lock:
                    self.owner.abandoned.append(request)
                return False
        return True

    def _client_gone(self) -> bool:
        # The request was read whole; a client that sends nothing more and becomes readable has closed.
        conn = self.connection
        try:
            readable, _, _ = select.select([conn], [], [], 0)
            return bool(readable) and conn.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _route(self, method: str, body: Any, headers: dict[str, str], failure: _Failure | None) -> None:
        owner = self.owner
        if failure is not None:
            extra = {"retry-after": f"{failure.retry_after:g}"} if failure.retry_after is not None else {}
            self._json(failure.status, _error_body(failure.message, "server_error"), extra)
            return
        if not owner._authorised(headers):
            self._json(401, _error_body("Incorrect API key provided", "invalid_request_error"))
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        if method == "GET" and path == "/v1/models":
            self._json(200, owner._models())
        elif method == "POST" and path == "/v1/embeddings" and isinstance(body, dict):
            self._json(200, owner._embeddings(body))
        elif method == "POST" and path == "/v1/chat/completions" and isinstance(body, dict):
            self._chat(body)
        else:
            self._json(404, _error_body(f"no route for {method} {path}", "invalid_request_error"))

    def _chat(self, body: dict[str, Any]) -> None:
        owner = self.owner
        if owner.context_size is not None:
            counted = _prompt_tokens(body.get("messages") or [])
            if counted > owner.context_size:
                self._json(400, {"error": {
                    "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": counted,
                    "n_ctx": owner.context_size,
                    "message": f"request ({counted} tokens) exceeds the available context size "
                               f"({owner.context_size} tokens), try increasing it"}})
                return
        try:
            result = owner.model.generate(list(body.get("messages") or []), tools=body.get("tools"),
                                          temperature=body.get("temperature"),
                                          max_tokens=body.get("max_tokens"))
        except ModelError as exc:
            # Retrying cannot refill a script, so tell clients not to.
            self._json(500, _error_body(str(exc), "server_error"), {"x-should-retry": "false"})
            return
        with owner._lock:
            completion_id = f"chatcmpl-loopback-{len(owner.requests)}"
        model = str(body.get("model") or owner.model.model_id)
        if not body.get("stream"):
            self._json(200, completion_from_result(result, model=model, completion_id=completion_id))
            return
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = stream_chunks_from_result(result, model=model, completion_id=completion_id,
                                           include_usage=include_usage)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
