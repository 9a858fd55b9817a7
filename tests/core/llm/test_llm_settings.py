"""Model settings, tool choice and context-overflow errors at the chat-model layer (real client, loopback server)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from core.llm import LoopbackServer, ModelError, OpenAICompatibleModel, RetryPolicy, ScriptedModel
from core.llm.settings import ModelSettings, ModelSettingsError, parse_tool_choice

USER = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look up",
                                          "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer(ScriptedModel(["a", "b", "c"], name="loopback")) as running:
        yield running


def model(server: LoopbackServer, **kw) -> OpenAICompatibleModel:
    return OpenAICompatibleModel("loopback-chat", base_url=server.base_url, environ={}, keyring_service=None,
                                 retry=RetryPolicy(max_retries=0), **kw)


def test_settings_take_our_names_and_mastras():
    ours = ModelSettings.parse({"max_tokens": 64, "temperature": 0.2, "top_p": 0.9, "stop": "END", "seed": 7})
    camel = ModelSettings.parse({"maxTokens": 64, "temperature": 0.2, "topP": 0.9, "stopSequences": ["END"],
                                 "seed": 7})
    assert ours == camel and ours.stop == ("END",)
    assert ModelSettings.parse({"maxOutputTokens": 5}).max_tokens == 5  # AI SDK v5's name
    assert ours.to_dict() == {"max_tokens": 64, "temperature": 0.2, "top_p": 0.9, "stop": ["END"], "seed": 7}
    per_call = ours.merged(ModelSettings.parse({"temperature": 0.9}))
    assert per_call.temperature == 0.9 and per_call.max_tokens == 64
    assert not ModelSettings() and ModelSettings(seed=1)


@pytest.mark.parametrize("bad, words", [
    ({"max_token": 5}, "Unknown model setting 'max_token'. Known settings: max_tokens"),
    ({"maxRetries": 2}, "Unknown model setting 'maxRetries'"),
    ({"max_tokens": 0}, "max_tokens must be an integer ≥ 1"),
    ({"temperature": 3}, "temperature must be a number from 0 to 2"),
    ({"top_p": "high"}, "top_p"),
    ({"stop": [1]}, "stop must be a string or a list of strings"),
    ({"maxTokens": 5, "max_tokens": 6}, "gives max_tokens twice"),
])
def test_bad_settings_are_refused_clearly(bad, words):
    with pytest.raises(ModelSettingsError, match=words.replace("(", r"\(")):
        ModelSettings.parse(bad)


def test_tool_choice_forms():
    names = ["lookup", "updateWorkingMemory"]
    assert parse_tool_choice("required", names) == "required"
    named = {"type": "function", "function": {"name": "lookup"}}
    assert parse_tool_choice({"name": "lookup"}, names) == named
    assert parse_tool_choice({"type": "tool", "toolName": "lookup"}, names) == named  # Mastra / AI SDK
    assert parse_tool_choice(named, names) == named  # OpenAI's own
    with pytest.raises(ModelSettingsError, match="does not offer. Tools: lookup, updateWorkingMemory"):
        parse_tool_choice({"name": "search"}, names)
    with pytest.raises(ModelSettingsError, match="'auto', 'none', 'required'"):
        parse_tool_choice("always", names)


def test_settings_and_tool_choice_reach_the_request_body(server):
    settings = ModelSettings.parse({"max_tokens": 32, "temperature": 0.1, "top_p": 0.5, "top_k": 40,
                                    "stop": ["\n\n"], "seed": 3, "frequency_penalty": 0.5,
                                    "presence_penalty": -0.5})
    choice = parse_tool_choice({"name": "lookup"}, ["lookup"])
    m = model(server)
    m.generate(USER, tools=TOOLS, settings=settings, tool_choice=choice)
    list(m.stream(USER, settings=settings, tool_choice="required"))  # no tools: no tool_choice sent
    first, second = server.chat_requests()
    for body in (first, second):
        assert {k: body[k] for k in ("max_tokens", "temperature", "top_p", "top_k", "stop", "seed",
                                     "frequency_penalty", "presence_penalty")} == {
            "max_tokens": 32, "temperature": 0.1, "top_p": 0.5, "top_k": 40, "stop": ["\n\n"], "seed": 3,
            "frequency_penalty": 0.5, "presence_penalty": -0.5}
    assert first["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert "tool_choice" not in second and second["stream"] is True
    # Explicit arguments win over the settings object.
    m.generate(USER, settings=settings, temperature=0.7)
    assert server.chat_requests()[-1]["temperature"] == 0.7
    # The scripted model (behind the server) was handed the effective values.
    assert server.model.requests[0].max_tokens == 32  # type: ignore[attr-defined]


def test_scripted_model_records_settings_and_its_window():
    scripted = ScriptedModel(["ok"], context_window=2048)
    scripted.generate(USER, tools=TOOLS, settings=ModelSettings(top_p=0.3, max_tokens=9), tool_choice="required")
    (request,) = scripted.requests
    assert request.settings == {"top_p": 0.3, "max_tokens": 9} and request.max_tokens == 9
    assert request.tool_choice == "required"
    assert scripted.describe()["context_window"] == 2048


@pytest.mark.parametrize("message, size", [
    ("the request exceeds the available context size, try increasing it", None),  # llama.cpp, older
    ("request (5000 tokens) exceeds the available context size (4096 tokens), try increasing it", 4096),
    ("This model's maximum context length is 2048 tokens. However, you requested 3000 tokens.", 2048),  # vLLM
])
def test_a_context_overflow_400_names_the_context_size(server, message, size):
    server.fail_next(1, 400, message=message)
    with pytest.raises(ModelError) as caught:
        model(server).generate(USER)
    text = str(caught.value)
    assert "check the model supports" not in text and "HTTP 400" in text
    if size:
        assert f"the server's context is {size:,} tokens" in text and f"context_window={size}" in text
    else:
        assert "context size is not known here" in text and "llama.cpp --ctx-size" in text


def test_the_hint_uses_the_configured_window_when_the_server_does_not_say(server):
    server.fail_next(1, 400, message="This request exceeds the available context size, try increasing it")
    with pytest.raises(ModelError, match="the context window given here is 1,024 tokens"):
        model(server, context_window=1024).generate(USER)


def test_other_400s_keep_the_parameters_hint(server):
    server.fail_next(1, 400, message="unsupported parameter: logit_bias")
    with pytest.raises(ModelError, match="check the model supports these parameters"):
        model(server).generate(USER)


def test_a_bad_context_window_is_refused():
    with pytest.raises(ModelSettingsError, match="context_window must be a positive number"):
        OpenAICompatibleModel("m", base_url="http://127.0.0.1:9/v1", environ={}, keyring_service=None,
                              context_window=0)


def test_an_overflow_despite_a_matching_window_asks_for_more_room(server):
    """Seen with llama.cpp: we fitted 2,024 o200k tokens, the server counted 2,049 in its 2,048."""
    server.fail_next(1, 400, message="request (2049 tokens) exceeds the available context size (2048 tokens), "
                                     "try increasing it")
    with pytest.raises(ModelError, match=r"give a smaller context_window \(now 2,048, e.g. 1,740\)") as caught:
        model(server, context_window=2048).generate(USER)
    # Where a gateway user sets it: the 502 names the flag, as the advice for a model without a window does.
    assert "(memory-studio serve --model: --context-window 1740)" in str(caught.value)


def test_a_model_given_by_name_takes_the_servers_context_size_from_the_providers_variable(monkeypatch, store):
    """An agent built with ``model="llamacpp/…"`` had no way to its ``context_window`` but ``resolve_model``, which
    the overflow advice ("give the model context_window=4096") did not name: ``LLAMACPP_CONTEXT_WINDOW`` is it."""
    from core import Memory
    from core.agent import Agent
    from core.llm.providers import resolve_model

    runaway = "The dragon flew on and on. " * 700  # ~4,200 tokens: over a 4,096-token server context
    with LoopbackServer(ScriptedModel([runaway, "It had no name.", "It was green."])) as upstream:
        monkeypatch.setenv("LLAMACPP_BASE_URL", upstream.base_url)
        monkeypatch.delenv("LLAMACPP_CONTEXT_WINDOW", raising=False)
        plain = Agent("teller", instructions="Be brief.", model="llamacpp/smollm2", memory=Memory(store), tracer=False)
        plain.generate("Tell me a long story.", memory={"thread": "story", "resource": "ada"})
        upstream.fail_next(1, 400, message="request (5019 tokens) exceeds the available context size (4096 tokens), "
                                           "try increasing it")
        with pytest.raises(ModelError) as caught:
            plain.generate("What was the dragon called?", memory={"thread": "story", "resource": "ada"})
        # The advice names the variable for the model's own name, beside the serve flag.
        assert "set LLAMACPP_CONTEXT_WINDOW=4096 where the model is given by its name 'llamacpp/smollm2'" \
            in str(caught.value)
        assert "(memory-studio serve --model: --context-window 4096)" in str(caught.value)
        monkeypatch.setenv("LLAMACPP_CONTEXT_WINDOW", "4096")
        fitted = Agent("teller", instructions="Be brief.", model="llamacpp/smollm2", memory=Memory(store), tracer=False)
        assert fitted.model.context_window == 4096
        assert fitted.generate("What was the dragon called?",
                               memory={"thread": "story", "resource": "ada"}).text == "It had no name."
        sent = upstream.chat_requests()[-1]["messages"]
        assert runaway not in str(sent) and sent[-1] == {"role": "user", "content": "What was the dragon called?"}
        # A window given in code (serve --context-window) wins over the variable.
        assert resolve_model("llamacpp/smollm2", context_window=1024).context_window == 1024
        assert resolve_model("ollama/llama3.1").context_window is None  # (another provider's variable)
        for model in (plain.model, fitted.model):
            model.close()


def test_a_model_built_with_its_base_url_is_not_told_a_providers_variable(server):
    server.fail_next(1, 400, message="request (5019 tokens) exceeds the available context size (4096 tokens), "
                                     "try increasing it")
    with pytest.raises(ModelError) as caught:
        model(server).generate(USER)  # OpenAICompatibleModel at a base URL of its own: no name to give it by
    assert "context_window=4096" in str(caught.value) and "_CONTEXT_WINDOW" not in str(caught.value)


@pytest.mark.parametrize("value", ["4k", "0", "-4096", "4096.0", "4,096", "٤٠٩٦", "1e4"])
def test_a_bad_context_window_variable_is_refused_naming_it(value):
    from core.errors import ConfigurationError
    from core.llm.providers import resolve_model

    environ = {"LLAMACPP_CONTEXT_WINDOW": value}
    with pytest.raises(ConfigurationError, match=r"LLAMACPP_CONTEXT_WINDOW must be the model server's context size "
                                                 r"as a positive whole number of tokens .*e\.g\. 4096\), got") as caught:
        resolve_model("llamacpp/smollm2", environ=environ, keyring_service=None)
    assert repr(value) in str(caught.value)
    # Unset, or blank, is no window.
    assert resolve_model("llamacpp/smollm2", environ={"LLAMACPP_CONTEXT_WINDOW": " "},
                         keyring_service=None).context_window is None
