"""API keys never reach the trace file or the log (issue 9, item 5).

A tiny server on 127.0.0.1 echoes the bearer token it receives into its 401 body, as some providers
do; the key then travels through the SDK's exception, our ModelError's cause chain and the span's
error stack. Another run has the model put the key into tool-call arguments.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import duckdb
import pytest

from core import Memory, MemoryOptions
from core.agent import Agent, Tool
from core.llm import LoopbackServer, ModelError, OpenAICompatibleModel, RetryPolicy, ScriptedModel, ScriptedReply
from core.llm import tool_call
from core.redaction import redact_text, register_secret
from core.traces.tracer import REDACTED, redact_secrets

# Short, and shaped like nothing in particular: only the literal value can catch it.
KEY = "k3y-Zq81x"


class EchoingServer:
    """Answers every POST with 401 and the caller's Authorization header in the error message."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                token = (self.headers.get("authorization") or "").removeprefix("Bearer ")
                body = json.dumps({"error": {"message": f"Incorrect API key provided: {token}. "
                                                        f"You sent Authorization: Bearer {token}",
                                             "type": "invalid_request_error"}}).encode()
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
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
def echoing() -> Iterator[EchoingServer]:
    server = EchoingServer()
    yield server
    server.close()


def _trace_rows(store) -> str:
    """Every row of the DuckDB trace file, as text."""
    store.tracer().shutdown(30)  # everything written, and no background writer left holding the file
    path = store.location.observability_path
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute("SELECT * FROM mastra_ai_spans").fetchall()
    finally:
        con.close()
    assert rows, "the run was traced"
    return "\n".join(repr(r) for r in rows)


def test_a_key_echoed_in_a_401_never_reaches_the_trace_file_or_the_log(store, echoing, caplog):
    caplog.set_level(logging.DEBUG)
    model = OpenAICompatibleModel("m", base_url=echoing.base_url, api_key=KEY, environ={}, keyring_service=None,
                                  retry=RetryPolicy(max_retries=0))
    mem = Memory(store, MemoryOptions(last_messages=5))
    agent = Agent("chat", instructions="I", model=model, memory=mem)
    try:
        with pytest.raises(ModelError) as caught:
            agent.generate("hello", memory={"resource": "u", "thread": "t"})
        # The SDK's own exception, chained as the cause, does carry the key: that is what used to
        # reach the span's error stack.
        assert KEY in str(caught.value.__cause__)
        assert KEY not in str(caught.value)
        try:  # a core module logging the failure with its traceback (the cause chain holds the key)
            raise caught.value
        except ModelError as exc:
            logging.getLogger("core.agent").exception("turn failed: %s", exc.__cause__)
        rows = _trace_rows(store)
    finally:
        model.close()
    assert "Incorrect API key provided" in rows  # the error itself was recorded...
    assert KEY not in rows  # ...without the key
    assert "turn failed" in caplog.text and "Incorrect API key provided" in caplog.text
    assert "AuthenticationError" in caplog.text  # the chained traceback was logged too
    assert KEY not in caplog.text


def test_a_key_inside_tool_arguments_is_redacted_in_spans(store):
    script = ScriptedModel([
        ScriptedReply(tool_calls=(tool_call("shell", {"command": f"curl -H 'X-Key: {KEY}' https://x"}),)),
        f"Done; I used {KEY}.",
    ])
    with LoopbackServer(script, require_api_key=KEY) as server:
        model = OpenAICompatibleModel("m", base_url=server.base_url, api_key=KEY, environ={}, keyring_service=None)
        mem = Memory(store, MemoryOptions(last_messages=5))
        shell = Tool("shell", "run", lambda args, ctx: {"ran": args["command"]})
        agent = Agent("chat", instructions="I", model=model, memory=mem, tools=[shell])
        try:
            result = agent.generate("fetch it", memory={"resource": "u", "thread": "t"})
            rows = _trace_rows(store)
        finally:
            model.close()
    assert result.tool_results[0]["result"]["ran"].endswith("https://x")
    assert "curl -H" in rows and REDACTED in rows
    assert KEY not in rows


@pytest.mark.parametrize("text", [
    "sk-abc123",  # short OpenAI-style keys
    "sk-proj-AbC123",
    "Authorization: Bearer abc12",
    "api_key=zz9",
    '{"x-api-key": "q1"}',
    "token: hf_abcdefghijklmnopqrstuvwxyz",
    "ghp_abcdefghijklmnopqrstuvwxyz0123",
])
def test_usual_key_shapes_are_redacted_even_when_short(text):
    out = redact_secrets({"message": f"failed with {text} here"})["message"]
    assert out.startswith("failed with ") and out.endswith(" here")
    secret = text.split()[-1].strip('"{}').split("=")[-1].removeprefix("hf_")
    assert secret not in out and REDACTED in out


def test_ordinary_text_is_left_alone():
    for text in ["max_tokens=256", "the task-based plan", "sk-learn", "Bearer of bad news",
                 "prompt_tokens: 12", "a key question"]:
        assert redact_text(text) == text


def test_registered_literal_secrets_are_redacted_anywhere():
    register_secret("Zz-literal-77")
    assert redact_text("x Zz-literal-77 y") == f"x {REDACTED} y"
    assert redact_secrets([{"nested": ("Zz-literal-77",)}]) == [{"nested": [REDACTED]}]
    register_secret("right")  # too short to redact without mangling ordinary text
    register_secret("lm-studio")  # a documented "any key will do" value, and a provider's name
    assert redact_text("the right lm-studio model") == "the right lm-studio model"
