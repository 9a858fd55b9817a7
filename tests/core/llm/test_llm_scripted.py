from __future__ import annotations

from typing import Any

import pytest

from core.llm import (
    ChatModel,
    ChatResult,
    ModelError,
    ScriptedModel,
    ScriptedReply,
    ScriptExhaustedError,
    ToolCallAssembler,
    Usage,
    parse_tool_arguments,
    tool_call,
)

USER = [{"role": "user", "content": "What's the weather in Paris?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                          "parameters": {"type": "object"}}}]


def test_replays_script_in_order_and_records_exact_requests() -> None:
    model = ScriptedModel([
        ScriptedReply(tool_calls=(tool_call("get_weather", {"city": "Paris"}),)),
        "It is sunny in Paris.",
    ], name="weather")

    first = model.generate(USER, tools=TOOLS, temperature=0.2)
    assert first.finish_reason == "tool_calls"
    assert first.tool_calls[0].name == "get_weather"
    assert first.tool_calls[0].arguments == {"city": "Paris"}
    assert first.tool_calls[0].id  # filled in, so tool results can refer to it

    follow_up = USER + [first.to_assistant_message(),
                        {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "sunny"}]
    second = model.generate(follow_up)
    assert second.text == "It is sunny in Paris."
    assert second.finish_reason == "stop"

    assert [r.messages for r in model.requests] == [USER, follow_up]
    assert model.requests[0].tools == TOOLS
    assert model.requests[0].temperature == 0.2
    assert model.requests[1].messages[1]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_recorded_request_is_a_snapshot_not_a_live_reference() -> None:
    model = ScriptedModel(["ok"])
    messages = [{"role": "user", "content": "first"}]
    model.generate(messages)
    messages[0]["content"] = "changed later"
    assert model.requests[0].messages[0]["content"] == "first"


def test_exhausted_script_raises_a_clear_model_error() -> None:
    model = ScriptedModel(["only reply"], name="short")
    model.generate(USER)
    with pytest.raises(ScriptExhaustedError) as caught:
        model.generate(USER)
    assert isinstance(caught.value, ModelError)
    message = str(caught.value)
    assert "scripted/short" in message
    assert "1 replies" in message and "request #2" in message
    assert model.remaining == 0


def test_responder_callable_reacts_to_the_prompt() -> None:
    def responder(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        return f"you said {messages[-1]['content']!r} with {len(tools or [])} tools"

    model = ScriptedModel(responder, name="echo")
    assert model.generate(USER, tools=TOOLS).text == "you said \"What's the weather in Paris?\" with 1 tools"
    assert model.remaining is None


def test_scripted_exception_is_raised_to_simulate_a_provider_failure() -> None:
    model = ScriptedModel([ModelError("boom", model_id="x", status=503)])
    with pytest.raises(ModelError, match="boom"):
        model.generate(USER)


def test_a_model_error_says_its_message_without_its_hint_and_copies_itself_with_another() -> None:
    # The Studio's chat cut " — hint" off str(error) by text, and observational memory rebuilt the error field by
    # field (a subclass became a plain ModelError, a field added later would have been dropped).
    from core.llm.yielding import CallYielded

    error = ModelError("no response within 60s", model_id="llamacpp/smollm2", endpoint="http://127.0.0.1:8080/v1",
                       status=None, hint="raise the timeout", attempts=3, retryable=True, method="POST")
    assert str(error) == ("llamacpp/smollm2: POST http://127.0.0.1:8080/v1 failed after 3 attempts: "
                          "no response within 60s — raise the timeout")
    assert error.without_hint == "llamacpp/smollm2: POST http://127.0.0.1:8080/v1 failed after 3 attempts: " \
                                 "no response within 60s"
    other = error.with_hint("cap the reply — with max_output_tokens")
    assert str(other) == error.without_hint + " — cap the reply — with max_output_tokens"
    assert other.without_hint == error.without_hint  # a dash inside the hint is not where the message ends
    assert (other.detail, other.model_id, other.endpoint, other.status, other.attempts, other.retryable,
            other.method) == ("no response within 60s", "llamacpp/smollm2", "http://127.0.0.1:8080/v1", None, 3, True,
                              "POST")
    assert str(error).endswith("— raise the timeout") and error.hint == "raise the timeout"  # the original unchanged
    assert ModelError("boom", model_id="x").without_hint == str(ModelError("boom", model_id="x")) == "x: boom"
    yielded = CallYielded("gave way", to="llamacpp/big", model_id="llamacpp/small", endpoint="http://h/v1")
    copied = yielded.with_hint("said otherwise")
    assert type(copied) is CallYielded and copied.to == "llamacpp/big" and copied.hint == "said otherwise"
    assert str(copied) == "llamacpp/small: POST http://h/v1 failed: gave way — said otherwise"
    with pytest.raises(CallYielded, match="said otherwise"):
        raise copied
    # An error whose message goes on after the hint (tools that had run) keeps that part, hint or not.
    from core.agent import TurnFailedError

    failed = TurnFailedError(error, ["lookup"])
    assert failed.without_hint.startswith(error.without_hint + ". Nothing of this turn was saved")
    assert " — " not in failed.without_hint and failed.without_hint.endswith("undone: lookup.")
    advised = failed.with_hint("another hint")
    assert type(advised) is TurnFailedError and advised.tools_run == ["lookup"]
    assert str(advised) == failed.without_hint.replace("no response within 60s.", "no response within 60s — another hint.")


def test_is_labelled_as_a_scripted_stand_in_everywhere() -> None:
    model = ScriptedModel(["hi"], name="demo")
    assert isinstance(model, ChatModel)
    assert model.model_id == "scripted/demo"
    assert model.provider == "scripted"
    info = model.describe()
    assert info["scripted"] is True and "Scripted stand-in" in info["note"]
    assert "scripted/demo" in repr(model)
    assert model.generate(USER).model_id == "scripted/demo"


def test_stream_fragments_and_final_result_match_generate() -> None:
    reply = ScriptedReply(text="Let me check the weather.",
                          tool_calls=(tool_call("get_weather", {"city": "Paris"}, id="call_a"),),
                          usage=Usage(10, 5, 15))
    expected = ScriptedModel([reply]).generate(USER)
    chunks = list(ScriptedModel([reply]).stream(USER))

    assert len([c for c in chunks if c.text_delta]) > 1  # really fragmented
    assert "".join(c.text_delta for c in chunks) == expected.text
    assembler = ToolCallAssembler()
    for chunk in chunks:
        for delta in chunk.tool_call_deltas:
            assembler.add(delta)
    assert assembler.tool_calls() == expected.tool_calls
    assert [c.result for c in chunks if c.result is not None] == [expected]
    assert chunks[-1].result is not None and chunks[-1].result.usage == Usage(10, 5, 15)


def test_malformed_tool_arguments_are_kept_and_flagged_not_raised() -> None:
    result = ScriptedModel([ScriptedReply(tool_calls=(tool_call("save", '{"note": "unterminated'),))]) \
        .generate(USER)
    call = result.tool_calls[0]
    assert not call.arguments_valid
    assert call.arguments == {}
    assert call.raw_arguments == '{"note": "unterminated'
    assert "not valid JSON" in (call.arguments_error or "")
    # The raw text goes back to the model unchanged in the assistant message.
    assert result.to_assistant_message()["tool_calls"][0]["function"]["arguments"] == '{"note": "unterminated'


@pytest.mark.parametrize(("raw", "parsed", "ok"), [
    ('{"a": 1}', {"a": 1}, True),
    ("", {}, True),
    ("[1, 2]", {}, False),
    ("{nope", {}, False),
])
def test_parse_tool_arguments(raw: str, parsed: dict[str, Any], ok: bool) -> None:
    value, error = parse_tool_arguments(raw)
    assert value == parsed
    assert (error is None) is ok


def test_default_usage_is_a_deterministic_estimate() -> None:
    first = ScriptedModel(["four score"]).generate(USER)
    second = ScriptedModel(["four score"]).generate(USER)
    assert isinstance(first, ChatResult) and first.usage == second.usage
    assert first.usage is not None and first.usage.completion_tokens > 0
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens
