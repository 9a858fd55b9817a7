"""Credentials in a model's ``base_url`` (issue 17, item 14): ``user:password@`` goes to the server as
HTTP Basic and nowhere else: not into a 502 body, a trace, a log line or an error message, even when
the upstream echoes the Authorization header back."""

from __future__ import annotations

import base64
import http.client
import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import duckdb
import pytest

from core import Memory, MemoryOptions
from core.agent import Agent
from core.embedding.base import EmbeddingServiceError
from core.embedding.openai_embedder import OpenAIEmbedder
from core.gateway import GatewayServer, create_app
from core.llm import ModelError, OpenAICompatibleModel, RetryPolicy

USER, PASSWORD = "proxyuser", "pa55:w%rd-Tq9"  # a colon and a percent sign, percent-encoded in the URL
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


class EchoingProxy:
    """A server behind Basic auth that answers 500 with the Authorization header it was sent."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = self.headers.get_all("authorization") or []
                seen.extend(headers)
                body = json.dumps({"error": {"message": f"upstream refused; you sent {headers} "
                                                        f"(password {PASSWORD})", "type": "server_error"}}).encode()
                self.send_response(500)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        quoted = PASSWORD.replace("%", "%25").replace(":", "%3A")
        self.base_url = f"http://{USER}:{quoted}@127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def proxy() -> Iterator[EchoingProxy]:
    server = EchoingProxy()
    yield server
    server.close()


def leaks(text: str) -> list[str]:
    return [s for s in (BASIC, PASSWORD, f"{USER}:{PASSWORD}", "pa55%3Aw%25rd-Tq9") if s in text]


def test_the_credentials_reach_the_server_and_nothing_else(store, proxy, caplog):
    caplog.set_level(logging.DEBUG)
    model = OpenAICompatibleModel("m", base_url=proxy.base_url, api_key="sk-not-the-point-123", environ={},
                                  keyring_service=None, retry=RetryPolicy(max_retries=0))
    memory = Memory(store, MemoryOptions(last_messages=5))
    agent = Agent("proxied", instructions="I", model=model, memory=memory)
    try:
        assert leaks(repr(model)) == [] and leaks(json.dumps(model.describe())) == []
        with GatewayServer(create_app([agent], token="")) as server:
            conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
            conn.request("POST", "/v1/chat/completions", json.dumps({
                "model": "proxied", "messages": [{"role": "user", "content": "hi"}]}),
                {"content-type": "application/json"})
            response = conn.getresponse()
            body = response.read().decode()
            conn.close()
        assert response.status == 502 and "upstream refused" in body
        assert leaks(body) == [], body
        with pytest.raises(ModelError) as caught:
            agent.generate("again", memory={"resource": "u", "thread": "t"})
        assert leaks(str(caught.value)) == []
        store.tracer().shutdown(30)
        con = duckdb.connect(str(store.location.observability_path), read_only=True)
        try:
            rows = "\n".join(repr(r) for r in con.execute("SELECT * FROM mastra_ai_spans").fetchall())
        finally:
            con.close()
    finally:
        model.close()
    assert any(h == f"Basic {BASIC}" for h in proxy.seen)  # the server did get them, as HTTP Basic
    assert "upstream refused" in rows and leaks(rows) == []
    assert leaks(caplog.text) == []


def test_an_embedder_url_with_credentials_shows_none(proxy):
    embedder = OpenAIEmbedder(proxy.base_url, "e", api_key="sk-not-the-point-123", max_retries=0)
    assert leaks(repr(embedder)) == [] and embedder.base_url.startswith("http://127.0.0.1:")
    with pytest.raises(EmbeddingServiceError) as caught:
        embedder.embed(["x"])
    assert "upstream refused" in str(caught.value) and leaks(str(caught.value)) == []
    assert any(h == f"Basic {BASIC}" for h in proxy.seen)
