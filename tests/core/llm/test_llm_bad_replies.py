"""Replies that are not chat completions become a ModelError naming the endpoint, and a turn that
gets one saves nothing (issue 9, item 9). The server is a few lines of ``http.server`` on 127.0.0.1
that answers every POST with whatever the test put in ``replies``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from core import Memory, MemoryOptions
from core.agent import Agent
from core.llm import ModelError, OpenAICompatibleModel, RetryPolicy

USER = [{"role": "user", "content": "hi"}]
HTML = b"<!doctype html><html><body><h1>Welcome to nginx!</h1></body></html>"


def sse(*events: dict | str) -> bytes:
    return b"".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events)


def chunk(content: str | None = None, finish: str | None = None) -> dict:
    delta = {"content": content} if content is not None else {}
    return {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


class BadServer:
    """Answers each POST with the next (content type, body) in ``replies``; the last one repeats."""

    def __init__(self) -> None:
        self.replies: list[tuple[str, bytes]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the connection closes

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                ctype, body = owner.replies.pop(0) if len(owner.replies) > 1 else owner.replies[0]
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def server() -> Iterator[BadServer]:
    running = BadServer()
    yield running
    running.close()


@pytest.fixture
def model(server: BadServer) -> Iterator[OpenAICompatibleModel]:
    with OpenAICompatibleModel("m", base_url=server.base_url, environ={}, keyring_service=None,
                               retry=RetryPolicy(max_retries=0)) as made:
        yield made


def _assert_names_endpoint(error: ModelError, server: BadServer) -> None:
    assert error.endpoint == f"{server.base_url}/chat/completions"
    assert f"{server.base_url}/chat/completions" in str(error)


@pytest.mark.parametrize("ctype, body, words", [
    ("text/html", HTML, "not a JSON chat completion"),
    ("application/json", HTML, "not valid JSON"),
    ("application/json", b'{"id": "x", "choices": [{"index": 0, "message": {"content": "hel', "not valid JSON"),
    ("application/json", b"[1, 2]", "not a JSON chat completion"),
    ("application/json", b'{"id": "x", "object": "chat.completion"}', "no choices"),
])
def test_a_reply_that_is_not_a_completion_is_a_model_error(server, model, ctype, body, words):
    server.replies = [(ctype, body)]
    with pytest.raises(ModelError) as caught:
        model.generate(USER)
    _assert_names_endpoint(caught.value, server)
    assert words in str(caught.value)
    assert "base URL" in caught.value.hint


@pytest.mark.parametrize("body", [
    sse(chunk("Hello wor")),  # the connection closed mid-reply: no finish_reason, no [DONE]
    sse(chunk("Hello"), chunk(" world")),
    b"",  # 200 and nothing at all
])
def test_a_stream_that_stops_before_the_end_is_a_model_error(server, model, body):
    server.replies = [("text/event-stream", body)]
    pieces: list[str] = []
    with pytest.raises(ModelError) as caught:
        for part in model.stream(USER):
            pieces.append(part.text_delta)
            assert part.result is None  # no "complete" result is ever handed out
    _assert_names_endpoint(caught.value, server)
    assert "ended before" in str(caught.value)


def test_a_stream_of_html_is_a_model_error(server, model):
    server.replies = [("text/html", HTML)]
    with pytest.raises(ModelError) as caught:
        list(model.stream(USER))
    _assert_names_endpoint(caught.value, server)


def test_a_complete_stream_still_passes(server, model):
    server.replies = [("text/event-stream", sse(chunk("Hello"), chunk(" world"), chunk(finish="stop"), "[DONE]"))]
    last = list(model.stream(USER))[-1]
    assert last.result is not None and last.result.text == "Hello world" and last.result.finish_reason == "stop"


def test_a_turn_that_gets_an_html_page_saves_nothing(store, server, model):
    server.replies = [("text/html", HTML)]
    mem = Memory(store, MemoryOptions(last_messages=10))
    agent = Agent("chat", instructions="Be brief.", model=model, memory=mem, tracer=False)
    with pytest.raises(ModelError) as caught:
        agent.generate("hello?", memory={"resource": "u", "thread": "t"})
    _assert_names_endpoint(caught.value, server)
    assert mem.get_thread("t") is None or store.memory.count_messages("t") == 0
