"""The real client, end to end over HTTP against the loopback OpenAI server."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from core.llm import (
    LoopbackServer,
    ModelError,
    OpenAICompatibleModel,
    RetryPolicy,
    ScriptedModel,
    ScriptedReply,
    Usage,
    tool_call,
)

USER = [{"role": "user", "content": "What's the weather in Paris?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                          "parameters": {"type": "object",
                                                         "properties": {"city": {"type": "string"}}}}}]
WEATHER_CALL = ScriptedReply(text="", tool_calls=(tool_call("get_weather", {"city": "Paris"}, id="call_1"),),
                             usage=Usage(42, 7, 49))


MakeModel = Callable[..., OpenAICompatibleModel]


@pytest.fixture
def script() -> ScriptedModel:
    return ScriptedModel([], name="loopback")


@pytest.fixture
def server(script: ScriptedModel) -> Iterator[LoopbackServer]:
    with LoopbackServer(script) as running:
        yield running


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def make_model(sleeps: list[float]) -> Iterator[MakeModel]:
    made: list[OpenAICompatibleModel] = []

    def make(server: LoopbackServer, **options: Any) -> OpenAICompatibleModel:
        # No environment, no keyring: each test states exactly where its key comes from.
        settings: dict[str, Any] = {"environ": {}, "keyring_service": None,
                                    "retry": RetryPolicy(max_retries=2, initial_delay=0.001),
                                    "sleep": sleeps.append}
        settings.update(options)
        made.append(OpenAICompatibleModel("loopback-chat", base_url=server.base_url, **settings))
        return made[-1]

    yield make
    for model in made:
        model.close()


def script_with(script: ScriptedModel, *steps: object) -> None:
    script.script = list(steps)  # type: ignore[arg-type]


def test_plain_reply(server: LoopbackServer, script: ScriptedModel, make_model: MakeModel) -> None:
    script_with(script, ScriptedReply(text="Sunny, 21°C.", usage=Usage(12, 4, 16)))
    result = make_model(server).generate(USER, temperature=0.3, max_tokens=50)

    assert result.text == "Sunny, 21°C."
    assert result.finish_reason == "stop"
    assert result.usage == Usage(12, 4, 16)
    assert result.model_id == "openai-compatible/loopback-chat"
    assert result.raw is not None and result.raw["object"] == "chat.completion"
    sent = server.chat_requests()[0]
    assert sent["model"] == "loopback-chat"
    assert sent["messages"] == USER
    assert sent["temperature"] == 0.3 and sent["max_tokens"] == 50
    assert "tools" not in sent


def test_tool_calls_round_trip(server: LoopbackServer, script: ScriptedModel, make_model: MakeModel) -> None:
    script_with(script, WEATHER_CALL, "It is sunny in Paris.")
    model = make_model(server)

    first = model.generate(USER, tools=TOOLS)
    assert first.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [("call_1", "get_weather", {"city": "Paris"})]

    conversation = USER + [first.to_assistant_message(),
                           {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'}]
    second = model.generate(conversation, tools=TOOLS)
    assert second.text == "It is sunny in Paris."

    bodies = server.chat_requests()
    assert bodies[0]["tools"] == TOOLS
    assert bodies[1]["messages"][1]["tool_calls"][0]["function"] == {
        "name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert bodies[1]["messages"][2]["tool_call_id"] == "call_1"
    # The scripted source behind the server saw exactly what the client sent.
    assert script.requests[1].messages == conversation


def test_malformed_tool_arguments_survive_the_wire(server: LoopbackServer, script: ScriptedModel,
                                                   make_model: MakeModel) -> None:
    script_with(script, ScriptedReply(tool_calls=(tool_call("get_weather", '{"city": Paris}'),)))
    call = make_model(server).generate(USER, tools=TOOLS).tool_calls[0]
    assert call.name == "get_weather"
    assert call.raw_arguments == '{"city": Paris}'
    assert not call.arguments_valid


def test_streaming_assembles_the_same_result(server: LoopbackServer, script: ScriptedModel,
                                             make_model: MakeModel) -> None:
    reply = ScriptedReply(text="Checking the forecast now.", tool_calls=WEATHER_CALL.tool_calls,
                          usage=Usage(42, 9, 51))
    script_with(script, reply, reply)
    model = make_model(server)

    whole = model.generate(USER, tools=TOOLS)
    chunks = list(model.stream(USER, tools=TOOLS))

    final = chunks[-1].result
    assert final is not None
    assert [c.result for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert len([c for c in chunks if c.text_delta]) > 1
    assert "".join(c.text_delta for c in chunks) == whole.text
    assert (final.text, final.tool_calls, final.usage, final.finish_reason, final.model_id) == \
           (whole.text, whole.tool_calls, whole.usage, whole.finish_reason, whole.model_id)
    sent = server.chat_requests()[1]
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}


def test_429_then_success_is_retried(server: LoopbackServer, script: ScriptedModel, sleeps: list[float],
                                     make_model: MakeModel) -> None:
    script_with(script, "finally")
    server.fail_next(1, 429, retry_after=0.01)
    result = make_model(server).generate(USER)

    assert result.text == "finally"
    assert len(server.chat_requests()) == 2
    assert sleeps == [0.01]  # the server's Retry-After was obeyed


def test_stream_open_is_retried_too(server: LoopbackServer, script: ScriptedModel, sleeps: list[float],
                                    make_model: MakeModel) -> None:
    script_with(script, "streamed after a hiccup")
    server.fail_next(1, 503)
    chunks = list(make_model(server).stream(USER))
    assert chunks[-1].result is not None and chunks[-1].result.text == "streamed after a hiccup"
    assert len(sleeps) == 1


def test_500_exhausted_names_endpoint_status_and_advice(server: LoopbackServer, sleeps: list[float],
                                                        make_model: MakeModel) -> None:
    server.fail_next(3, 500)
    with pytest.raises(ModelError) as caught:
        make_model(server).generate(USER)

    error = caught.value
    assert error.status == 500 and error.attempts == 3
    assert error.endpoint == f"{server.base_url}/chat/completions"
    message = str(error)
    assert f"POST {server.base_url}/chat/completions" in message
    assert "HTTP 500" in message and "after 3 attempts" in message
    assert "check its logs" in message
    assert len(server.chat_requests()) == 3
    assert len(sleeps) == 2


def test_client_errors_are_not_retried(server: LoopbackServer, sleeps: list[float],
                                       make_model: MakeModel) -> None:
    server.fail_next(1, 404, message="model 'nope' not found")
    with pytest.raises(ModelError) as caught:
        make_model(server).generate(USER)
    assert caught.value.status == 404 and caught.value.attempts == 1
    assert "model 'nope' not found" in str(caught.value)
    assert "/models lists what this server offers" in str(caught.value)
    assert sleeps == []


def test_timeout_gives_a_clear_error(server: LoopbackServer, sleeps: list[float],
                                     make_model: MakeModel) -> None:
    server.stall_next()  # the server holds the request until released: the timeout must fire
    try:
        with pytest.raises(ModelError) as caught:
            make_model(server).generate(USER, timeout=0.2)
    finally:
        server.release()
    message = str(caught.value)
    assert "no response within 0.2s" in message
    assert server.base_url in message
    assert "raise the timeout" in message
    assert caught.value.attempts == 1 and sleeps == []  # timeouts are not retried by default
    # No reply length was set: the timeout may be a reply that never ends, so the hint says to cap it.
    assert "set no max_tokens" in message and "model_settings={'max_tokens'" in message


def test_a_timeout_with_a_capped_reply_does_not_blame_the_length(server: LoopbackServer, sleeps: list[float],
                                                                 make_model: MakeModel) -> None:
    server.stall_next()
    try:
        with pytest.raises(ModelError) as caught:
            make_model(server).generate(USER, timeout=0.2, max_tokens=64)
    finally:
        server.release()
    message = str(caught.value)
    assert "no response within 0.2s" in message and "raise the timeout" in message
    assert "max_tokens" not in message


def test_unreachable_server_says_so(sleeps: list[float]) -> None:
    with LoopbackServer() as gone:
        url = gone.base_url
    with OpenAICompatibleModel("m", base_url=url, environ={}, keyring_service=None,
                               retry=RetryPolicy(max_retries=1, initial_delay=0.0),
                               sleep=sleeps.append) as model:
        with pytest.raises(ModelError, match="could not connect") as caught:
            model.generate(USER)
    assert "is running" in str(caught.value) and caught.value.attempts == 2


_FIRST_EVENT = (b'data: {"id":"x","object":"chat.completion.chunk","created":0,"model":"m",'
                b'"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}\n\n')
#: The start of a streamed reply: its headers and one event (one chunk), written before the connection is closed.
HALF_STREAM = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"%x\r\n%s\r\n" % (len(_FIRST_EVENT), _FIRST_EVENT))


@pytest.mark.parametrize("written", [b"", HALF_STREAM], ids=["no reply", "half a streamed reply"])
def test_a_server_that_drops_the_request_is_not_called_unreachable(sleeps: list[float], written: bytes) -> None:
    # Seen through the gateway (bench/llm_requests.py, the proxy cutting llama.cpp's connection, and a server
    # closing in the middle of a stream): a server that took the request and closed the connection before its
    # reply ended was reported as "could not connect ... check that the server is running and the base URL is
    # right", both of which were fine.
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    taken: list[bytes] = []

    def drop_each() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                taken.append(conn.recv(65536))  # the request arrives; the reply is cut (or never written)
                conn.sendall(written)

    threading.Thread(target=drop_each, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    try:
        with OpenAICompatibleModel("m", base_url=url, environ={}, keyring_service=None,
                                   retry=RetryPolicy(max_retries=1, initial_delay=0.0),
                                   sleep=sleeps.append) as model:
            with pytest.raises(ModelError) as caught:
                if written:
                    list(model.stream(USER))
                else:
                    model.generate(USER)
    finally:
        listener.close()
    message = str(caught.value)
    assert taken and b"POST /v1/chat/completions" in taken[0]
    assert "could not connect" not in message and "base URL is right" not in message
    assert "closed the connection before its reply was complete" in message and "check its logs" in message
    if not written:
        assert caught.value.attempts == 2  # retried, as a failure that may be passing


def test_api_key_from_env_is_the_bearer_token_and_never_shown(script: ScriptedModel, make_model: MakeModel,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk-test-0123456789abcdef"
    script_with(script, "authorised")
    caplog.set_level(logging.DEBUG)  # the SDK and HTTP library log requests at DEBUG
    with LoopbackServer(script, require_api_key=secret) as server:
        model = make_model(server, environ={"LOOPBACK_KEY": secret}, api_key_env="LOOPBACK_KEY")
        assert model.generate(USER).text == "authorised"

        assert server.requests[0].headers["authorization"] == f"Bearer {secret}"
        assert model.describe()["api_key_source"] == "env:LOOPBACK_KEY"
        assert secret not in repr(model)
        assert secret not in str(model.describe())
    assert "chat/completions" in caplog.text  # debug logging really happened...
    assert secret not in caplog.text  # ...and did not include the key


def test_rejected_key_error_names_where_keys_come_from(script: ScriptedModel, make_model: MakeModel) -> None:
    with LoopbackServer(script, require_api_key="right") as server:
        model = make_model(server, environ={"LOOPBACK_KEY": "sk-wrong-key-xyz"}, api_key_env="LOOPBACK_KEY")
        with pytest.raises(ModelError) as caught:
            model.generate(USER)
    message = str(caught.value)
    assert caught.value.status == 401
    assert "env:LOOPBACK_KEY" in message and "set the environment variable LOOPBACK_KEY" in message
    assert "sk-wrong-key-xyz" not in message


def test_key_echoed_by_server_is_scrubbed_from_errors(script: ScriptedModel, make_model: MakeModel) -> None:
    secret = "sk-echo-me-please"
    with LoopbackServer(script) as server:
        server.fail_next(1, 401, message=f"Incorrect API key provided: {secret}")
        model = make_model(server, api_key=secret)
        with pytest.raises(ModelError) as caught:
            model.generate(USER)
    assert secret not in str(caught.value)
    assert "Incorrect API key provided: ***" in str(caught.value)


def test_describe_is_safe_identity() -> None:
    with OpenAICompatibleModel("llama3", base_url="http://user:pw@localhost:11434/v1/?key=abc",
                               provider="ollama", environ={}, keyring_service=None) as model:
        info = model.describe()
    assert info["provider"] == "ollama" and info["model"] == "llama3" and info["model_id"] == "ollama/llama3"
    assert info["base_url"] == "http://localhost:11434/v1"  # credentials and query stripped
    assert info["api_key_source"] == "none" and info["scripted"] is False


def test_list_models(server: LoopbackServer, make_model: MakeModel) -> None:
    assert make_model(server).list_models() == ["loopback-chat", "loopback-embed"]


@pytest.mark.parametrize("key", ["x", "1234", "ollama"])
def test_a_short_or_placeholder_key_does_not_garble_the_servers_message(
        script: ScriptedModel, make_model: MakeModel, key: str) -> None:
    # Local servers take any key; users give "x" or the documented "ollama". Hiding every "x" turned
    # llama.cpp's "exceeds the available context size" into "e***ceeds the available conte***t size".
    detail = "request (5019 tokens) exceeds the available context size (4096 tokens); see ollama logs, 1234 B"
    with LoopbackServer(script) as server:
        server.fail_next(1, 400, message=detail)
        model = make_model(server, api_key=key)
        with pytest.raises(ModelError) as caught:
            model.generate(USER)
    assert detail in str(caught.value)
    assert "the server's context is 4,096 tokens" in str(caught.value)  # the context hint still reads it
