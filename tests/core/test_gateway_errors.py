"""Gateway errors: OpenAI-style JSON with the right status, token auth, and the `serve` command's messages."""

from __future__ import annotations

import http.client
import io
import json
import logging
from collections.abc import Iterator

import openai
import pytest

from core import Memory, MemoryOptions
from core.agent import Agent
from core.cli import main as cli_main
from core.gateway import GatewayServer, create_app, require_serve_extra
from core.llm import ModelError, ScriptedModel


@pytest.fixture
def memory(store) -> Memory:
    return Memory(store, MemoryOptions(last_messages=20))


@pytest.fixture
def agents(memory) -> dict[str, Agent]:
    failure = ModelError("upstream said no", model_id="scripted/broken", endpoint="http://model.test", status=500)
    return {
        "echo": Agent("echo", instructions="Echo.", model=ScriptedModel(lambda m, t: "ok"), memory=memory, tracer=False),
        "broken": Agent("broken", instructions="Fails.", model=ScriptedModel([failure] * 4), memory=memory, tracer=False),
    }


@pytest.fixture
def server(agents) -> Iterator[GatewayServer]:
    with GatewayServer(create_app(agents, token="")) as server:
        yield server


@pytest.fixture
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=60)


def raw(server: GatewayServer, method: str, path: str, body: bytes | str | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    conn.request(method, path, body, {"content-type": "application/json", **(headers or {})})
    response = conn.getresponse()
    status, data = response.status, json.loads(response.read() or b"null")
    conn.close()
    return status, data


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_unknown_agent_is_404(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="nobody", messages=[user("hi")])
    assert caught.value.status_code == 404 and caught.value.code == "model_not_found"
    assert "'echo'" in caught.value.message  # says which agents there are


@pytest.mark.parametrize("messages, fragment", [
    ([], "non-empty list"),
    ([user("a"), {"role": "assistant", "content": "b"}], "last message must be the user's"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}], "the gateway takes text only"),
    ([user("   ")], "has no text"),
])
def test_bad_requests_are_400(client, messages, fragment):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="echo", messages=messages)
    assert fragment in caught.value.message and caught.value.body["type"] == "invalid_request_error"


def test_disagreeing_ids_and_malformed_bodies_are_400(client, server):
    with pytest.raises(openai.BadRequestError, match="disagree"):
        client.chat.completions.create(model="echo", messages=[user("x")], metadata={"thread_id": "a"},
                                       extra_headers={"x-thread-id": "b"})
    with pytest.raises(openai.BadRequestError, match="either a thread id or a conversation id"):
        client.chat.completions.create(model="echo", messages=[user("x")],
                                       metadata={"thread_id": "a", "conversation_id": "c"})
    status, body = raw(server, "POST", "/v1/chat/completions", "{not json")
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    status, body = raw(server, "POST", "/v1/chat/completions", "[1, 2]")
    assert status == 400 and "JSON object" in body["error"]["message"]
    status, body = raw(server, "POST", "/v1/chat/completions", json.dumps({"messages": [user("x")]}))
    assert status == 400 and body["error"]["param"] == "model"


def test_someone_elses_thread_is_403_before_any_model_call(client, agents, memory):
    client.chat.completions.create(model="echo", messages=[user("mine")], metadata={"thread_id": "t", "resource_id": "ada"})
    calls = len(agents["echo"].model.requests)
    for stream in (False, True):
        with pytest.raises(openai.PermissionDeniedError) as caught:
            client.chat.completions.create(model="echo", messages=[user("let me in")], stream=stream,
                                           metadata={"thread_id": "t", "resource_id": "mallory"})
        assert caught.value.status_code == 403 and caught.value.code == "thread_ownership"
        # The refusal says why without naming the owner: the caller may be another user, and a resource id
        # (an email, a user name) is that user's.
        assert 'Thread "t" belongs to another resource, not "mallory"' in caught.value.message
        assert "ada" not in caught.value.message
    assert len(agents["echo"].model.requests) == calls
    assert [m.text for m in memory.recall(thread_id="t").messages] == ["mine", "ok"]


def test_a_failing_model_is_502_plain_and_streamed(client):
    for stream in (False, True):
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="broken", messages=[user("hi")], stream=stream)
        assert caught.value.status_code == 502 and caught.value.code == "model_error"
        assert "http://model.test" in caught.value.message and "HTTP 500" in caught.value.message


def test_a_failing_model_is_in_the_gateways_log_too(client, caplog):
    """The 502 reached the client only: the log of `memory-studio serve` said nothing, so whoever ran it saw no
    sign of llama.cpp being down or its context too small, while the fixes the message names (--context-window,
    --model-timeout, the server) are theirs to make, not the client's."""
    caplog.set_level(logging.WARNING, logger="core.gateway")
    for stream in (False, True):
        with pytest.raises(openai.APIStatusError):
            client.chat.completions.create(model="broken", messages=[user("hi")], stream=stream)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("core.gateway")]
    assert len(said) == 2, said
    assert all("answered 502" in s and "http://model.test" in s and "upstream said no" in s for s in said)


def test_a_model_failing_after_tools_ran_is_not_retried_by_the_sdk(memory):
    """OpenAI's SDKs retry a 5xx twice by default; a turn whose model failed after its tools had run would
    run them again, silently. The 502 says not to (``x-should-retry: false``); a plain model failure
    (nothing run) keeps the SDK's own rule."""
    from core.agent import Tool
    from core.llm import ScriptedReply, tool_call

    ran: list[str] = []
    weather = Tool("getWeather", "weather", lambda args, ctx: ran.append(args["city"]) or {"temp": 4})
    script: list[object] = []
    for _ in range(3):
        script += [ScriptedReply(tool_calls=(tool_call("getWeather", {"city": "Oslo"}),)),
                   ModelError("provider went away", model_id="scripted/x", status=503)]
    agent = Agent("tooly", instructions="I", model=ScriptedModel(script), memory=memory, tools=[weather], tracer=False)
    with GatewayServer(create_app([agent], token="")) as running:
        retrying = openai.OpenAI(base_url=running.base_url, api_key="-", max_retries=2, timeout=60)
        with pytest.raises(openai.APIStatusError) as caught:
            retrying.chat.completions.create(model="tooly", messages=[user("Weather in Oslo?")])
    assert caught.value.status_code == 502 and caught.value.response.headers.get("x-should-retry") == "false"
    assert "getWeather" in caught.value.message
    assert ran == ["Oslo"]  # the tool ran once: the SDK did not send the turn again


def test_a_plain_model_failure_keeps_the_sdks_retry_rule(server):
    status, headers, _body = _raw_with_headers(server, "POST", "/v1/chat/completions", json.dumps(
        {"model": "broken", "messages": [user("hi")]}))
    assert status == 502 and "x-should-retry" not in headers


def _raw_with_headers(server: GatewayServer, method: str, path: str, body: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    conn.request(method, path, body, {"content-type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def test_unknown_paths_and_methods_answer_as_json(server):
    status, body = raw(server, "GET", "/v1/nothing-here")
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body = raw(server, "GET", "/v1/chat/completions")
    assert status == 405 and body["error"]["code"] == "method_not_allowed"


def test_a_client_without_v1_in_its_base_url_is_told_the_base_url_to_give(server):
    # OpenAI(base_url="http://127.0.0.1:8787") answered "No such endpoint: POST /chat/completions." and no more.
    bare = openai.OpenAI(base_url=server.url, api_key="-", max_retries=0, timeout=60)
    with pytest.raises(openai.NotFoundError) as caught:
        bare.chat.completions.create(model="echo", messages=[user("hi")])
    assert f'base_url="{server.url}/v1"' in str(caught.value) and "POST /v1/chat/completions" in str(caught.value)
    with pytest.raises(openai.NotFoundError) as caught:
        bare.models.list()
    assert f'base_url="{server.url}/v1"' in str(caught.value)
    status, body = raw(server, "GET", "/v1/nothing-here")  # other unknown paths keep the plain answer
    assert status == 404 and "/v1" not in body["error"]["message"].replace("/v1/nothing-here", "")


def test_token_is_required_when_set(agents, monkeypatch):
    monkeypatch.setenv("MEMORY_STUDIO_GATEWAY_TOKEN", "s3cret-token")
    with GatewayServer(create_app(agents)) as server:  # token taken from the environment
        for key in ("wrong", None):
            bad = openai.OpenAI(base_url=server.base_url, api_key=key or "-", max_retries=0, timeout=60)
            if key is None:
                bad = bad.with_options(default_headers={"Authorization": ""})
            with pytest.raises(openai.AuthenticationError) as caught:
                bad.chat.completions.create(model="echo", messages=[user("hi")])
            assert caught.value.status_code == 401
        status, body = raw(server, "GET", "/api/memory/threads?resourceId=ada")
        assert status == 401 and "Authorization: Bearer" in body["error"]["message"]
        assert raw(server, "GET", "/health") == (200, {"status": "ok"})  # load balancers probe without it
        good = openai.OpenAI(base_url=server.base_url, api_key="s3cret-token", max_retries=0, timeout=60)
        assert good.chat.completions.create(model="echo", messages=[user("hi")]).choices[0].message.content == "ok"
        assert raw(server, "GET", "/api/memory/threads?resourceId=ada",
                   headers={"authorization": "Bearer s3cret-token"})[0] == 200


def serve_cli(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["serve", *args], out=out, err=err)
    return code, err.getvalue()


def test_serve_command_explains_a_bad_agents_spec(tmp_path, monkeypatch):
    require_serve_extra()  # installed by the dev extra; the command would name the pip line otherwise
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gw_bad_agents.py").write_text("agents = {'x': 42}\nnothing = []\n")
    code, err = serve_cli("--agents", "gw_bad_agents")
    assert code == 1 and "package.module:attribute" in err
    code, err = serve_cli("--agents", "no_such_module_here:agents")
    assert code == 1 and "Cannot import 'no_such_module_here'" in err and "PYTHONPATH" in err
    code, err = serve_cli("--agents", "gw_bad_agents:missing")
    assert code == 1 and "has no attribute 'missing'" in err
    code, err = serve_cli("--agents", "gw_bad_agents:agents")
    assert code == 1 and "'x' is a int, not an Agent" in err
    code, err = serve_cli("--agents", "gw_bad_agents:nothing")
    assert code == 1 and "holds no agents" in err


def test_serve_refuses_model_flags_it_would_ignore_with_agents(tmp_path, monkeypatch):
    # --db, --name and --instructions were accepted with --agents and silently ignored: the server
    # started on the module's own database, not the one the user named.
    require_serve_extra()
    monkeypatch.chdir(tmp_path)
    code, err = serve_cli("--agents", "gw_some_agents:agents", "--db", str(tmp_path / "other.db"))
    assert code == 1 and "--db goes with --model only" in err and "gw_some_agents" in err
    assert not (tmp_path / "other.db").exists()
    code, err = serve_cli("--agents", "gw_some_agents:agents", "--name", "bot", "--instructions", "Be brief.")
    assert code == 1 and "--name, --instructions go with --model only" in err
    code, err = serve_cli("--agents", "gw_some_agents:agents", "--max-tokens", "256")
    assert code == 1 and "--max-tokens goes with --model only" in err
    code, err = serve_cli("--agents", "gw_some_agents:agents", "--context-window", "4096", "--model-timeout", "300")
    assert code == 1 and "--context-window, --model-timeout go with --model only" in err
    code, err = serve_cli("--agents", "gw_some_agents:agents", "--self-hosted", "yes")
    assert code == 1 and "--self-hosted goes with --model only" in err


def test_serve_refuses_a_reply_cap_that_is_not_a_positive_number(tmp_path, monkeypatch):
    require_serve_extra()
    monkeypatch.chdir(tmp_path)
    code, err = serve_cli("--model", "ollama/llama3.1", "--max-tokens", "0", "--db", str(tmp_path / "m.db"))
    assert code == 1 and "--max-tokens must be a positive number of tokens, got 0" in err
    assert not (tmp_path / "m.db").exists()  # refused before anything was opened
    for args, said in ((("--context-window", "0"), "--context-window must be a positive number of tokens, got 0"),
                       (("--model-timeout", "0"), "--model-timeout must be a positive number of seconds, got 0"),
                       (("--model-timeout", "inf"), "--model-timeout must be a positive number of seconds, got inf"),
                       (("--self-hosted", "maybe"), "--self-hosted must be auto (decided from the base URL), yes "
                                                    "(the model server runs on your machine or network) or no "
                                                    "(a hosted API), got 'maybe'")):
        code, err = serve_cli("--model", "ollama/llama3.1", *args, "--db", str(tmp_path / "m.db"))
        assert code == 1 and said in err, err
        assert not (tmp_path / "m.db").exists()


def test_serve_refuses_a_misspelt_model_or_setting_by_its_flag_before_making_a_database(tmp_path, monkeypatch):
    # A misspelt provider left a new database file behind, and --max-concurrency 0 was refused as
    # "max_concurrency must be at least 1" (the keyword argument, not the flag the user typed), after the file.
    require_serve_extra()
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "m.db"
    for args, said in ((("--model", "vlm/echo"), "Did you mean 'vllm/echo'?"),
                       (("--model", "echo"), "provider/model"),
                       (("--model", "ollama/llama3.1", "--max-concurrency", "0"), "--max-concurrency must be at least 1, got 0"),
                       (("--model", "ollama/llama3.1", "--stream-write-timeout", "0"),
                        "--stream-write-timeout must be a positive number of seconds"),
                       (("--model", "ollama/llama3.1", "--default-resource", "delegation:a:b"),
                        "--default-resource 'delegation:a:b'")):
        code, err = serve_cli(*args, "--db", str(db), "--port", "0")
        assert code == 1 and said in err, err
        assert not db.exists(), args


def test_serve_on_a_port_in_use_is_refused_before_making_a_database(tmp_path, monkeypatch):
    # The port was bound after the agent's database had been opened: a new file was left behind.
    import socket

    require_serve_extra()
    monkeypatch.chdir(tmp_path)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        db = tmp_path / "m.db"
        code, err = serve_cli("--model", "ollama/llama3.1", "--db", str(db), "--port", str(taken.getsockname()[1]))
        assert code == 1 and "Cannot listen on 127.0.0.1:" in err and "choose another --port" in err
        assert not db.exists()
    finally:
        taken.close()


def test_serve_without_the_extra_names_the_pip_command(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a))
    code, err = serve_cli("--agents", "whatever:agents")
    assert code == 1 and "uvicorn" in err and "pip install 'memory-studio[serve]'" in err


def test_the_listening_socket_gives_connections_tcp_nodelay():
    # Regression: a socket made without proto=IPPROTO_TCP made asyncio skip TCP_NODELAY on accepted
    # connections, and Nagle's algorithm with delayed ACKs added ~40 ms to every response.
    import asyncio
    import socket

    from core.gateway.server import bind

    async def check() -> int:
        seen: list[int] = []

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(handler, sock=bind("127.0.0.1", 0))
        host, port = server.sockets[0].getsockname()[:2]
        _, writer = await asyncio.open_connection(host, port)
        while not seen:
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        await server.wait_closed()
        return seen[0]

    assert asyncio.run(asyncio.wait_for(check(), 30)) != 0


def test_a_stream_flag_that_is_not_a_boolean_is_400(client, memory):
    """'stream': "true" was taken as false: the client got a JSON completion where it waited for events (and
    the turn was stored). OpenAI refuses a wrong type with 400, naming the parameter; so does the gateway."""
    for body in ({"stream": "true"}, {"stream": 1}, {"stream": True, "stream_options": "include_usage"}):
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="echo", messages=[user("x")], extra_body=body,
                                           metadata={"thread_id": "s", "resource_id": "ada"})
        assert caught.value.body["param"] == next(iter(reversed(body)))
    assert memory.get_thread("s") is None  # nothing was run or stored
    chunks = list(client.chat.completions.create(model="echo", messages=[user("x")], stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks and all(c.object == "chat.completion.chunk" for c in chunks)  # a real boolean still streams


def test_a_boolean_where_a_number_or_a_flag_of_another_kind_is_taken_is_400(client, memory):
    """JSON's true passed Python's integer checks (``True == 1``): ``n: true`` ran as one choice, and
    ``stream_options.include_usage`` was read by truthiness ("false" and 1 asked for usage). OpenAI refuses both,
    naming the parameter; so does the gateway, before anything is run or stored. 1 and 1.0 (an integer in JSON
    Schema's terms) are one choice."""
    for body, param in (({"n": True}, "n"), ({"n": False}, "n"), ({"n": "1"}, "n"), ({"n": 2}, "n"),
                        ({"stream": True, "stream_options": {"include_usage": "false"}}, "stream_options"),
                        ({"stream": True, "stream_options": {"include_usage": 1}}, "stream_options")):
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="echo", messages=[user("x")], extra_body=body,
                                           metadata={"thread_id": "b", "resource_id": "ada"})
        assert caught.value.body["param"] == param, (body, caught.value.body)
        assert caught.value.body["message"].startswith(f"'{param}"), caught.value.body
    assert memory.get_thread("b") is None  # nothing was run or stored
    for n in (1, 1.0):
        done = client.chat.completions.create(model="echo", messages=[user("x")], extra_body={"n": n},
                                              metadata={"thread_id": "b", "resource_id": "ada"})
        assert len(done.choices) == 1
    streamed = list(client.chat.completions.create(
        model="echo", messages=[user("x")], stream=True, stream_options={"include_usage": False},
        metadata={"thread_id": "b", "resource_id": "ada"}))
    assert all(c.usage is None for c in streamed)


def test_serve_model_fits_a_thread_that_outgrew_the_servers_context_and_waits_as_long_as_told(tmp_path, monkeypatch):
    # `serve --model llamacpp/…` against llama.cpp (4,096 tokens of context): an uncapped reply wrote until the
    # context was full and was stored; from then on every turn of that thread was 502 "exceeds the available context
    # size … give the model context_window=4096", which the command line could not do (nor raise the 60 s timeout
    # that a long reply on a CPU runs into). --context-window and --model-timeout are the model's settings.
    from core.gateway.cli import model_agent
    from core.llm import LoopbackServer

    runaway = "The dragon flew on and on. " * 700  # ~4,200 tokens: the whole context of a small local server
    calls: list[int] = []

    def reply(messages: object, tools: object) -> str:
        calls.append(1)
        return runaway if len(calls) == 1 else "It had no name."

    with LoopbackServer(ScriptedModel(reply)) as upstream:
        monkeypatch.setenv("LLAMACPP_BASE_URL", upstream.base_url)
        db = str(tmp_path / "gateway.db")
        meta = {"thread_id": "story", "resource_id": "ada"}

        def ask(agents: dict[str, Agent], text: str) -> str:
            with GatewayServer(create_app(agents)) as server:
                client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0)
                reply = client.chat.completions.create(model="assistant", metadata=meta,
                                                       messages=[{"role": "user", "content": text}])
            return reply.choices[0].message.content or ""

        plain = model_agent("llamacpp/smollm2", name="assistant", instructions="Be brief.", db=db)
        assert ask(plain, "Tell me a long story.") == runaway
        ask(plain, "What was the dragon called?")
        assert runaway in json.dumps(upstream.chat_requests()[-1]["messages"])  # all of it sent again: over the context
        # What llama.cpp answers such a request: the 502 names the flag that fixes it.
        upstream.fail_next(1, 400, message="request (5019 tokens) exceeds the available context size (4096 tokens), "
                                           "try increasing it")
        with pytest.raises(openai.InternalServerError, match="--context-window 4096"):
            ask(plain, "And its colour?")
        fitted = model_agent("llamacpp/smollm2", name="assistant", instructions="Be brief.", db=db,
                             context_window=4096, timeout=300)
        assert (fitted["assistant"].model.context_window, fitted["assistant"].model.timeout) == (4096, 300)
        assert ask(fitted, "And its colour?") == "It had no name."
        sent = upstream.chat_requests()[-1]["messages"]
        assert runaway not in json.dumps(sent)  # the oldest memory dropped to fit, the new question kept
        assert sent[-1] == {"role": "user", "content": "And its colour?"}
        # --self-hosted: the loopback server counts as self-hosted by its address unless told otherwise.
        from core.llm.yielding import self_hosted
        assert self_hosted(fitted["assistant"].model)
        told = model_agent("llamacpp/smollm2", name="assistant", instructions="Be brief.", db=db, self_hosted=False)
        assert told["assistant"].model.self_hosted is False and not self_hosted(told["assistant"].model)
        hasty = model_agent("llamacpp/smollm2", name="assistant", instructions="Be brief.", db=db, timeout=0.5)
        upstream.stall_next()  # the server holds the next request until released: past any timeout
        try:
            with pytest.raises(openai.InternalServerError, match=r"no response within 0\.5s.*--model-timeout"):
                ask(hasty, "Still there?")
        finally:
            upstream.release()
