"""Every model call of every turn rebuilds to exactly the request body the server received (issue 16).

An agent with two tools of its own, the working-memory tool, semantic recall and model settings talks
to a small OpenAI-compatible server on loopback (``LoopbackServer``, which keeps every request body)
through the official ``openai`` client: plain turns, a working-memory update (whose tool call the
stored reply hides), a turn that calls both tools one after the other (three model calls), a streamed
turn, a forced tool choice, a JSON response format and per-call settings. Then, from a fresh
``Memory`` on the same database (no agent, no tool functions, no settings in memory), every call of
every turn is rebuilt and compared with the bodies the server kept, leaving out only ``stream`` and
``stream_options``. The same holds in a forked thread and after export → import into a fresh
database, on libSQL and on Postgres. The record never holds the key or the URL's password.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest

from core import Agent, Memory, MemoryOptions, Tool, open_store
from core.embedding import HashingEmbedder
from core.llm import LoopbackServer, OpenAICompatibleModel, ScriptedModel, ScriptedReply, tool_call
from core.llm.wire import without_transport
from core.replay import rerun
from core.replay.wire import call_bytes
from core.transfer import ExportOptions, dumps, export_thread, import_data, loads

pytestmark = pytest.mark.backends

RESOURCE, THREAD = "ada", "t-trip"
KEY = "sk-test-0123456789abcdefSECRET"
PASSWORD = "pw-hunter2-secret"
TEMPLATE = "# Traveller\n- Home:\n- Currency:\n"
SETTINGS = {"temperature": 0.3, "max_tokens": 96, "top_p": 0.9, "top_k": 40, "seed": 7, "stop": ["###"],
            "presence_penalty": 0.1}
WEATHER = Tool("get_weather", "The weather today in a city.", lambda args, _ctx: {"city": args.get("city"), "sky": "sunny",
                                                                                  "celsius": 21},
               {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                "required": ["city"]})
CURRENCY = Tool("convert_currency", "Convert an amount between currencies.",
                lambda args, _ctx: {"amount": round(float(args.get("amount", 0)) * 1.08, 2), "to": args.get("to")},
                {"type": "object", "properties": {"amount": {"type": "number"}, "from": {"type": "string"},
                                                  "to": {"type": "string"}}, "required": ["amount", "from", "to"]})
TURNS: list[tuple[str, dict[str, Any]]] = [
    ("Hello, I am Ada and I plan a trip.", {}),
    ("Please remember that I live in Lisbon and pay in euros.", {}),
    ("What is the weather in Lisbon today?", {}),
    ("Convert 100 EUR to USD and check the weather in Porto.", {}),
    ("Tell me one thing to pack.", {"stream": True}),
    ("Use any tool you like for Madrid.", {"tool_choice": "required"}),
    ("Answer as a JSON object: the best month for Porto.", {"model_settings": {"response_format": {"type": "json_object"}}}),
    ("Be more creative now: a name for the trip.", {"model_settings": {"temperature": 1.1, "maxTokens": 40}}),
    ("Thanks, that is all for the trip.", {}),
]


def responder(messages: list[dict[str, Any]], tools: Any) -> Any:
    """The server's side: calls tools when asked, one step at a time."""
    last = messages[-1]
    user = next(m for m in reversed(messages) if m["role"] == "user")
    text = str(user.get("content"))
    done = [m for m in messages[messages.index(user):] if m["role"] == "tool"]
    if "remember" in text and not done:
        return ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {
            "memory": "# Traveller\n- Home: Lisbon\n- Currency: EUR\n"}),), text="Saving that. <working_memory>x</working_memory>")
    if "Convert" in text and len(done) == 0:
        return ScriptedReply(tool_calls=(tool_call("get_weather", {"city": "Porto"}),))
    if "Convert" in text and len(done) == 1:
        return ScriptedReply(text="Porto is sunny.", tool_calls=(tool_call("convert_currency", {
            "amount": 100, "from": "EUR", "to": "USD"}),))
    if ("weather in Lisbon" in text or "Madrid" in text) and not done:
        return ScriptedReply(tool_calls=(tool_call("get_weather", {"city": "Madrid" if "Madrid" in text else "Lisbon"}),))
    if last["role"] == "tool":
        return f"Done, with {len(done)} tool result(s)."
    return f"Noted: {text[:24]}"


def run_conversation(store: Any, server: LoopbackServer, *, stream_turn: bool = True) -> Memory:
    memory = Memory(store, MemoryOptions(last_messages=6, semantic_recall={"top_k": 2, "message_range": 1},
                                         working_memory={"enabled": True, "scope": "resource", "template": TEMPLATE}),
                    embedder=HashingEmbedder(), name="travel")
    base = server.base_url.replace("http://", f"http://traveller:{PASSWORD}@")
    model = OpenAICompatibleModel("loopback-chat", base_url=base, api_key=KEY, api_key_env=None,
                                  keyring_service=None)
    agent = Agent("travel", instructions="You help plan trips. Be brief.", model=model, memory=memory,
                  tools=[WEATHER, CURRENCY], model_settings=SETTINGS)
    for text, how in TURNS:
        kwargs = {k: v for k, v in how.items() if k != "stream"}
        where = {"resource": RESOURCE, "thread": THREAD}
        if how.get("stream") and stream_turn:
            events = list(agent.stream(text, memory=where, **kwargs))
            assert events[-1].kind == "finish"
        else:
            agent.generate(text, memory=where, **kwargs)
    model.close()
    return memory


def bodies_by_turn(server: LoopbackServer, memory: Memory, thread: str) -> list[list[dict[str, Any]]]:
    """The bodies the server kept, grouped by turn (each turn's record says how many calls it made)."""
    sent = [without_transport(b) for b in server.chat_requests()]
    out, at = [], 0
    for turn in memory.turns(thread):
        assert turn.record is not None
        n = len(turn.record.calls)
        out.append(sent[at:at + n])
        at += n
    assert at == len(sent), "every request the server received belongs to a turn"
    return out


def check_every_call(memory: Memory, thread: str, expected: list[list[dict[str, Any]]]) -> None:
    turns = memory.turns(thread)
    assert len(turns) == len(expected)
    for turn, bodies in zip(turns, expected):
        rebuilt = memory.turn_requests(turn.input_message_id)
        assert json.loads(json.dumps(rebuilt)) == bodies, turn.input_text
        prompt = memory.assemble(as_of=turn.input_message_id)
        assert prompt.replay is not None and prompt.replay.exact, (turn.input_text, prompt.replay.differences)
        assert prompt.replay.status == "recorded (exact)" and not prompt.replay.unknowns
        assert json.loads(json.dumps(prompt.request)) == bodies[0]
        assert [c.usage is not None and c.usage["prompt_tokens"] > 0 for c in prompt.replay.calls] == [True] * len(bodies)


@pytest.fixture
def conversation(db_path: Any) -> Any:
    server = LoopbackServer(ScriptedModel(responder, name="server")).start()
    store = open_store(db_path)
    memory = run_conversation(store, server)
    yield store, server, memory
    store.close()
    server.stop()


def test_every_call_of_every_turn_rebuilds_to_the_body_the_server_received(conversation: Any, db_path: Any) -> None:
    store, server, memory = conversation
    expected = bodies_by_turn(server, memory, THREAD)
    # The conversation exercises what a request carries.
    calls = [len(b) for b in expected]
    assert calls == [1, 2, 2, 3, 1, 2, 1, 1, 1]
    flat = [b for bs in expected for b in bs]
    assert all(b["top_k"] == 40 and b["seed"] == 7 and b["stop"] == ["###"] for b in flat)
    assert {t["function"]["name"] for t in flat[0]["tools"]} == {"updateWorkingMemory", "get_weather", "convert_currency"}
    assert expected[5][0]["tool_choice"] == "required" and expected[5][1]["tool_choice"] == "auto"
    assert expected[6][0]["response_format"] == {"type": "json_object"}
    assert expected[7][0]["temperature"] == 1.1 and expected[7][0]["max_tokens"] == 40
    assert "stream" in server.chat_requests()[sum(calls[:4])], "the streamed turn really streamed"
    # Rebuilt from a fresh Memory on the same database: no agent, tools or settings in memory.
    with open_store(db_path) as fresh_store:
        check_every_call(Memory(fresh_store), THREAD, expected)


def test_records_hold_no_key_and_no_password(conversation: Any) -> None:
    store, _server, memory = conversation
    with store.db.read() as conn:
        rows = [" ".join(str(v) for v in r) for r in conn.exec_driver_sql("SELECT * FROM memory_studio_turns")]
        rows += [" ".join(str(v) for v in r) for r in conn.exec_driver_sql("SELECT * FROM memory_studio_tool_defs")]
    assert rows and not any(KEY in r or PASSWORD in r for r in rows)
    record = memory.turns(THREAD)[0].record
    assert record is not None and record.endpoint is not None and record.endpoint.startswith("http://127.0.0.1:")
    assert record.model == "openai-compatible/loopback-chat"


def test_a_forked_thread_replays_its_copied_turns_exactly(conversation: Any) -> None:
    store, server, memory = conversation
    expected = bodies_by_turn(server, memory, THREAD)
    turns = memory.turns(THREAD)
    fork = memory.fork_thread(THREAD, at=turns[-1].input_message_id, title="Fork", resource_id=RESOURCE)
    fresh = Memory(store)
    copied = fresh.turns(fork.id)
    assert [t.input_text for t in copied] == [t.input_text for t in turns[:-1]]
    check_every_call(fresh, fork.id, expected[:-1])
    # The copies name the fork's messages, not the source's.
    for turn in copied:
        assert turn.record is not None and turn.record.thread_id == fork.id
        ids = {turn.record.input_message_id, *turn.record.history_ids, *turn.record.response_ids}
        assert {m.thread_id for m in store.memory.get_messages(list(ids))} == {fork.id}


def test_an_exported_and_imported_copy_replays_identically(conversation: Any, new_db: Callable[[str], Any]) -> None:
    store, server, memory = conversation
    expected = bodies_by_turn(server, memory, THREAD)
    store.tracer().flush(10.0)
    data = loads(dumps(export_thread(store, THREAD, ExportOptions(traces=True))))
    assert data["counts"]["toolDefinitions"] == 3 and data["counts"]["agents"] == 1 and data["counts"]["traces"] > 0
    with open_store(new_db("copy")) as target:
        report = import_data(target, data)
        assert report.written["turns"] == len(TURNS) and report.written["toolDefinitions"] == 3
        assert report.written["agents"] == 1 and report.written["traces"] == data["counts"]["traces"]
        assert not any("traces" in x for x in report.left_out)
        check_every_call(Memory(target), THREAD, expected)
        from core.agent_configs import agent_for_thread

        assert agent_for_thread(target, THREAD).agent is not None
        assert agent_for_thread(target, THREAD).agent.name == "travel"  # type: ignore[union-attr]
        # A second import writes nothing.
        again = import_data(target, data)
        assert not again.changed


def test_the_import_summary_says_what_was_left_out(conversation: Any, new_db: Callable[[str], Any]) -> None:
    store, _server, _memory = conversation
    data = export_thread(store, THREAD)  # without --with-traces
    with open_store(new_db("copy")) as target:
        report = import_data(target, data)
    assert any("--with-traces" in x for x in report.left_out)
    assert "left out: traces" in report.summary()


def test_a_rerun_sends_the_recorded_request_and_says_what_differs(conversation: Any) -> None:
    """A re-run of a turn's second call sends what that call sent: its messages, every recorded tool
    definition (no tool function exists here), the tool choice and the settings. Only the endpoint
    differs; changed settings are listed; the usage of both is there; tool calls are shown, not run."""
    store, _server, _memory = conversation
    fresh = Memory(store)
    turn = fresh.turns(THREAD)[3]
    prompt = fresh.assemble(as_of=turn.input_message_id)
    assert prompt.replay is not None and len(prompt.replay.calls) == 3
    rows_before = len(fresh.turns(THREAD))
    second = LoopbackServer(ScriptedModel(responder, name="again")).start()
    try:
        model = OpenAICompatibleModel("loopback-chat", base_url=second.base_url, api_key="k2-not-the-same-key",
                                      api_key_env=None, keyring_service=None)
        result = rerun(prompt, model, call=1)
        sent = without_transport(second.chat_requests()[0])
        assert json.loads(json.dumps(prompt.replay.calls[1].request)) == sent == json.loads(json.dumps(result.request))
        assert {t["function"]["name"] for t in sent["tools"]} == {"updateWorkingMemory", "get_weather", "convert_currency"}
        assert [d[0] for d in result.differences] == ["endpoint"]
        assert result.original_usage == prompt.replay.calls[1].usage and result.usage is not None
        assert [c["name"] for c in result.tool_calls] == ["convert_currency"]  # asked for, shown, never run
        changed = rerun(prompt, model, model_settings={"temperature": 0.0, "topK": 5}, tool_choice="none")
        body = without_transport(second.chat_requests()[1])
        assert body["temperature"] == 0.0 and body["top_k"] == 5 and body["tool_choice"] == "none"
        assert body["max_tokens"] == SETTINGS["max_tokens"] and body["seed"] == SETTINGS["seed"]
        assert {d[0] for d in changed.differences} >= {"temperature", "top k", "tool choice", "endpoint"}
        model.close()
    finally:
        second.stop()
    assert len(fresh.turns(THREAD)) == rows_before  # nothing was written


def test_turns_whose_messages_were_edited_since_still_rebuild_what_the_server_received(conversation: Any,
                                                                                       db_path: Any) -> None:
    """Edits after a turn (issue 21) do not change what its record rebuilds: the rows are read as the
    turn saw them, every call still matches the server's body exactly, and ``changed_since`` says which
    stored messages changed since."""
    store, server, memory = conversation
    expected = bodies_by_turn(server, memory, THREAD)
    turns = memory.turns(THREAD)
    first_input = turns[0].input_message_id
    multi = turns[3].record
    assert multi is not None and len(multi.calls) == 3
    reply = next(m for m in store.memory.get_messages(list(multi.response_ids)) if m.role == "assistant")
    weather = turns[2].record
    assert weather is not None
    weather_reply = next(m for m in store.memory.get_messages(list(weather.response_ids)) if m.role == "assistant")
    memory.edit_message(first_input, resource_id=RESOURCE, text="Hello, I am someone else entirely.")
    parts = [dict(p, text="(edited reply)") if p.get("type") == "text" else p for p in reply.content["parts"]]
    memory.edit_message(reply.id, resource_id=RESOURCE, content={**reply.content, "parts": parts})
    assert memory.delete_messages([weather_reply.id], resource_id=RESOURCE) == 1
    with open_store(db_path) as fresh_store:
        fresh = Memory(fresh_store)
        check_every_call(fresh, THREAD, expected)
        later = fresh.assemble(as_of=turns[1].input_message_id).replay  # turn 1's history holds turn 0's input
        assert later is not None and later.exact
        assert later.changed_since.get(first_input) == "edited since"
        assert fresh.assemble(as_of=turns[4].input_message_id).replay.changed_since.get(weather_reply.id) == \
            "deleted since"  # type: ignore[union-attr]
        assert fresh.assemble(as_of=turns[3].input_message_id).replay.changed_since.get(reply.id) == "edited since"  # type: ignore[union-attr]
        # Rebuilt now, the edits show: the first call of the later turn no longer matches what was sent.
        now = fresh.assemble(as_of=turns[1].input_message_id, rebuild="now")
        assert "someone else entirely" in json.dumps(now.request)


def _bytes_of_every_call(memory: Memory, thread: str) -> list[bytes | None]:
    out: list[bytes | None] = []
    for turn in memory.turns(thread):
        info = memory.assemble(as_of=turn.input_message_id).replay
        assert info is not None
        out.extend(call_bytes(info, call) for call in info.calls)
    return out


def test_every_call_gives_the_exact_bytes_the_server_received(conversation: Any,
                                                              new_db: Callable[[str], Any]) -> None:
    """Byte for byte (key order, separators, escaping, the ``stream`` keys where sent), every call of
    every turn (tools, a forced tool choice, a response format, ``top_k`` sent as extra body, a
    streamed turn), from the database alone and from an exported-then-imported copy."""
    store, server, memory = conversation
    received = server.chat_request_bytes()
    assert any(b'"stream":true,' in b for b in received) and any(b'"response_format"' in b for b in received)
    assert _bytes_of_every_call(Memory(store), THREAD) == received
    data = loads(dumps(export_thread(store, THREAD, ExportOptions())))
    with open_store(new_db("copy-bytes")) as target:
        import_data(target, data)
        assert _bytes_of_every_call(Memory(target), THREAD) == received


def test_an_import_never_replaces_the_targets_own_overrides(conversation: Any, new_db: Callable[[str], Any]) -> None:
    """The file's working-memory overrides come along only when asked (``with_configs``: an override sets what
    every user of that memory is asked to keep, and a file may come from anywhere); then a fresh copy takes
    them, but a target with overrides of its own for that memory keeps them: the newest override is what its
    agents run with."""
    from core.agent_configs import latest_override, save_override

    store, _server, _memory = conversation
    save_override(store, "travel", template="# Trip\n- Where:\n")
    data = loads(dumps(export_thread(store, THREAD)))
    assert data["counts"]["configs"] == 1
    with open_store(new_db("unasked")) as unasked:
        report = import_data(unasked, data)
        assert report.written.get("configs", 0) == 0 and latest_override(unasked, "travel") is None
        assert any("1 memory override ('travel') not imported" in n and "--with-configs" in n for n in report.notes)
    with open_store(new_db("fresh")) as fresh:
        assert import_data(fresh, data, with_configs=True).written["configs"] == 1
        assert latest_override(fresh, "travel").template == "# Trip\n- Where:\n"  # type: ignore[union-attr]
    with open_store(new_db("own")) as target:
        save_override(target, "travel", template="# Mine\n- Kept:\n")
        report = import_data(target, data, with_configs=True)
        assert report.written.get("configs", 0) == 0
        assert any("override of memory 'travel' not imported" in n and "--overwrite" in n for n in report.notes)
        assert latest_override(target, "travel").template == "# Mine\n- Kept:\n"  # type: ignore[union-attr]
        import_data(target, data, overwrite=True)  # (overwrite alone never takes a file's overrides)
        assert latest_override(target, "travel").template == "# Mine\n- Kept:\n"  # type: ignore[union-attr]
        import_data(target, data, overwrite=True, with_configs=True)
        assert latest_override(target, "travel").template == "# Trip\n- Where:\n"  # type: ignore[union-attr]


def test_each_record_says_how_its_replies_travelled(conversation: Any, db_path: Any) -> None:
    # The record left ``stream`` / ``stream_options`` out of the hashed body, and kept them nowhere, so
    # Replay could not tell a streamed turn from one answered whole. It keeps them beside the calls now.
    store, server, memory = conversation
    sent = server.chat_requests()
    at = 0
    with open_store(db_path) as fresh_store:
        for turn in Memory(fresh_store).turns(THREAD):
            assert turn.record is not None
            body = sent[at]
            at += len(turn.record.calls)
            assert turn.record.transport == {k: body[k] for k in ("stream", "stream_options") if k in body}
    streamed = [t.record for t in memory.turns(THREAD) if t.record is not None and t.record.transport]
    assert [r.transport for r in streamed] == [{"stream": True, "stream_options": {"include_usage": True}}]
    # A re-run asks for the whole reply: it says the recorded call streamed.
    turn = next(t for t in memory.turns(THREAD) if t.record is not None and t.record.transport)
    prompt = memory.assemble(as_of=turn.input_message_id)
    with LoopbackServer(ScriptedModel(["again"])) as again:
        model = OpenAICompatibleModel("loopback-chat", base_url=again.base_url, api_key="k", api_key_env=None,
                                      keyring_service=None)
        result = rerun(prompt, model)
        model.close()
    assert ("stream", "true", "—") in result.differences and "stream" not in again.chat_requests()[0]


def test_a_scripted_models_streamed_turn_records_stream_true(tmp_path: Any) -> None:
    store = open_store(tmp_path / "s.db")
    memory = Memory(store, MemoryOptions(last_messages=4))
    agent = Agent("s", instructions="Hi.", model=ScriptedModel(["one", "two"]), memory=memory)
    agent.generate("whole", memory={"resource": "r", "thread": "t"})
    list(agent.stream("streamed", memory={"resource": "r", "thread": "t"}))
    assert [t.record.transport for t in memory.turns("t") if t.record is not None] == [{}, {"stream": True}]
    store.close()
