"""The agent runtime: processors → model → tool loop → output processors, traced."""

from __future__ import annotations

import json
import threading

import pytest

from core import Memory, MemoryOptions, Message, ThreadOwnershipError, open_store
from core.agent import Agent, Tool
from core.llm import (
    ChatResult,
    LoopbackServer,
    ModelError,
    OpenAICompatibleModel,
    ScriptedModel,
    ScriptedReply,
    tool_call,
)
from core.scopes import delegation_resource
from core.traces.tracer import InMemorySpanExporter, Tracer

# Engine behaviour: every test here runs on libSQL and on Postgres.
pytestmark = pytest.mark.backends

TEMPLATE = "# User\n- Name:\n- Allergies:\n"


@pytest.fixture
def tracer():
    return Tracer(InMemorySpanExporter())


@pytest.fixture
def memory(store, tracer):
    return Memory(store, MemoryOptions(last_messages=10, working_memory={"enabled": True, "template": TEMPLATE}),
                  tracer=tracer)


def test_turn_with_working_memory_tool(memory, tracer):
    model = ScriptedModel([
        ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": "# User\n- Name: Ada\n- Allergies: peanuts\n"}),)),
        "Got it, Ada.",
    ])
    agent = Agent("chat", instructions="You are helpful.", model=model, memory=memory)
    result = agent.generate("I'm Ada and allergic to peanuts", memory={"resource": "u1", "thread": "t1"})
    assert result.text == "Got it, Ada." and result.finish_reason == "stop"
    assert len(result.prompts) == 2 and len(model.requests) == 2
    # The model received exactly the assembled prompt.
    assert model.requests[0].messages == result.prompts[0].messages
    assert model.requests[0].tools[0]["function"]["name"] == "updateWorkingMemory"
    # Second call carries the tool call and its result.
    roles = [m["role"] for m in model.requests[1].messages]
    assert roles[-2:] == ["assistant", "tool"]
    assert memory.get_working_memory(resource_id="u1") == "# User\n- Name: Ada\n- Allergies: peanuts\n"
    stored = memory.recall(thread_id="t1").messages
    assert [m.role for m in stored] == ["user", "assistant"]
    assert "updateWorkingMemory" not in json.dumps(stored[1].content)
    assert result.usage.total_tokens > 0 and result.trace_id


def test_next_turn_sees_history_and_memory(memory):
    model = ScriptedModel(["Hello!", "You told me: peanuts."])
    agent = Agent("chat", instructions="I", model=model, memory=memory)
    agent.generate("I'm allergic to peanuts", memory={"resource": "u1", "thread": "t1"})
    agent.generate("What am I allergic to?", memory={"resource": "u1", "thread": "t1"})
    sent = model.requests[1].messages
    assert [m["content"] for m in sent if m["role"] != "system"] == [
        "I'm allergic to peanuts", "Hello!", "What am I allergic to?"]


def test_context_messages_sent_once_never_saved(memory):
    model = ScriptedModel(["ok"])
    agent = Agent("chat", instructions="I", model=model, memory=memory)
    agent.generate("question", memory={"resource": "u", "thread": "t"},
                   context=[Message.user("Your RAG result: the shop closes at 6pm")])
    sent = [m["content"] for m in model.requests[0].messages if m["role"] == "user"]
    assert sent == ["Your RAG result: the shop closes at 6pm", "question"]
    assert [m.text for m in memory.recall(thread_id="t").messages] == ["question", "ok"]


def test_read_only_per_call(memory):
    model = ScriptedModel(["ok"])
    agent = Agent("chat", instructions="I", model=model, memory=memory)
    agent.generate("hi", memory={"resource": "u", "thread": "t", "options": {"read_only": True}})
    assert model.requests[0].tools is None
    wm = next(m["content"] for m in model.requests[0].messages if "WORKING MEMORY" in (m["content"] or ""))
    assert "READ-ONLY" in wm
    assert memory.get_thread("t") is None or memory.store.memory.count_messages("t") == 0


def test_per_call_options_are_deep_merged(memory):
    model = ScriptedModel(["a", "b", "c"])
    agent = Agent("chat", instructions="I", model=model, memory=memory)
    agent.generate("one", memory={"resource": "u", "thread": "t"})
    agent.generate("two", memory={"resource": "u", "thread": "t"})
    agent.generate("three", memory={"resource": "u", "thread": "t"}, options={"last_messages": 1})
    users = [m["content"] for m in model.requests[2].messages if m["role"] != "system"]
    assert users == ["b", "three"]
    assert any("WORKING MEMORY" in (m["content"] or "") for m in model.requests[2].messages)


def test_foreign_thread_refused_before_model_call(memory):
    memory.create_thread(resource_id="owner", thread_id="t")
    model = ScriptedModel(["never"])
    agent = Agent("chat", instructions="I", model=model, memory=memory)
    with pytest.raises(ThreadOwnershipError):
        agent.generate("hi", memory={"resource": "intruder", "thread": "t"})
    assert model.requests == []


def test_provider_error_without_output_saves_nothing(memory):
    model = ScriptedModel([ModelError("provider down", model_id="scripted/x")])
    agent = Agent("chat", instructions="I", model=model, memory=memory)
    with pytest.raises(ModelError):
        agent.generate("hi", memory={"resource": "u", "thread": "t"})
    assert memory.store.memory.count_messages("t") == 0


def test_user_tools_run_in_the_loop(memory, tracer):
    calls = []

    def weather(args, ctx):
        calls.append((args, ctx.resource_id, ctx.scopes))
        return {"temp": 4}

    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("getWeather", {"city": "Oslo"}),)), "4 degrees."])
    agent = Agent("chat", instructions="I", model=model, memory=memory,
                  tools=[Tool("getWeather", "weather", weather, {"type": "object", "properties": {"city": {"type": "string"}}})])
    result = agent.generate("Weather?", memory={"resource": "u", "thread": "t"}, scopes=["org:acme"])
    assert calls == [({"city": "Oslo"}, "u", ("org:acme",))]
    stored = memory.recall(thread_id="t").messages[-1]
    inv = stored.tool_invocations()[0]
    assert inv["toolName"] == "getWeather" and inv["result"] == {"temp": 4} and inv["state"] == "result"
    assert result.text == "4 degrees."


def test_a_tool_that_returns_nothing_still_answers_its_call(memory):
    """A tool returning None has a result (sent as ``null``): the next model call must carry the tool message,
    or OpenAI refuses an assistant ``tool_calls`` message nothing answered (400), and the stored call is complete."""
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("logVisit", {"page": "home"}),)), "Logged."])
    agent = Agent("chat", instructions="I", model=model, memory=memory,
                  tools=[Tool("logVisit", "log a visit", lambda args, ctx: None,
                              {"type": "object", "properties": {"page": {"type": "string"}}})])
    agent.generate("Log it", memory={"resource": "u", "thread": "t"})
    second = model.requests[1].messages
    call_id = next(m for m in second if m.get("tool_calls"))["tool_calls"][0]["id"]
    answers = [m for m in second if m["role"] == "tool" and m["tool_call_id"] == call_id]
    assert [a["content"] for a in answers] == ["null"]
    inv = memory.recall(thread_id="t").messages[-1].tool_invocations()[0]
    assert inv["state"] == "result" and inv["toolName"] == "logVisit"


def test_malformed_tool_arguments_are_reported_back(memory):
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("getWeather", "{not json"),)), "sorry"])
    agent = Agent("chat", instructions="I", model=model, memory=memory,
                  tools=[Tool("getWeather", "w", lambda a, c: {"ok": True})])
    result = agent.generate("x", memory={"resource": "u", "thread": "t"})
    assert "not valid JSON" in json.dumps(result.tool_results[0]["result"])


def test_supervisor_delegation(memory, store):
    sub_model = ScriptedModel(["Paris is the capital of France."])
    researcher = Agent("researcher", instructions="Research.", model=sub_model)  # no memory: inherits
    sup_model = ScriptedModel([
        ScriptedReply(tool_calls=(tool_call("agent-researcher", {"prompt": "What is the capital of France?"}),)),
        "It's Paris.",
    ])
    supervisor = Agent("boss", instructions="Delegate.", model=sup_model, memory=memory, agents=[researcher])
    supervisor.generate("Capital of France?", memory={"resource": "u1", "thread": "main"})
    child_threads = [t for t in memory.list_threads(resource_id=delegation_resource("u1", "researcher"))]
    assert len(child_threads) == 1
    child = memory.recall(thread_id=child_threads[0].id).messages
    assert [m.text for m in child] == ["What is the capital of France?", "Paris is the capital of France."]
    # The sub-agent got the parent's conversation as context but did not store it.
    assert any(m["content"] == "Capital of France?" for m in sub_model.requests[0].messages)
    assert researcher.memory is None


def test_spans_cover_every_operation(memory, tracer):
    model = ScriptedModel([
        ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": "# User\n- Name: Ada\n"}),)), "ok"])
    agent = Agent("chat", instructions="I", model=model, memory=memory)
    result = agent.generate("hi", memory={"resource": "u", "thread": "t"})
    spans = tracer.exporter.spans
    kinds = {s.span_type for s in spans}
    assert {"agent_run", "model_generation", "processor_run", "memory_operation"} <= kinds
    assert {s.trace_id for s in spans} == {result.trace_id}
    root = next(s for s in spans if s.span_type == "agent_run")
    assert all(s.parent_span_id for s in spans if s is not root)
    gen = next(s for s in spans if s.span_type == "model_generation")
    assert gen.input["messages"] == result.prompts[0].messages
    names = {s.name for s in spans if s.span_type == "memory_operation"}
    assert {"memory: recall", "memory: save", "memory: working-memory update"} <= names
    assert all(s.thread_id == "t" and s.resource_id == "u" for s in spans)


def test_real_openai_client_end_to_end_via_loopback(memory, monkeypatch):
    monkeypatch.setenv("LOOPBACK_KEY", "sk-secret-value")
    with LoopbackServer(["Hello from the loopback server."]) as server:
        model = OpenAICompatibleModel("loopback-chat", base_url=server.base_url, api_key_env="LOOPBACK_KEY")
        agent = Agent("chat", instructions="Be nice.", model=model, memory=memory)
        result = agent.generate("Hi", memory={"resource": "u", "thread": "t"})
        body = server.chat_requests()[0]
    assert result.text == "Hello from the loopback server."
    assert body["messages"] == result.prompts[0].messages
    assert "sk-secret-value" not in json.dumps(model.describe())
    assert [m.text for m in memory.recall(thread_id="t").messages] == ["Hi", "Hello from the loopback server."]


def test_plain_functions_are_tools(memory):
    from core import Agent as ExportedAgent

    def get_weather(city: str, days: int = 1) -> dict:
        """Weather for a city."""
        return {"city": city, "days": days}

    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("get_weather", {"city": "Oslo"}),)), "done"])
    agent = ExportedAgent(name="chat", instructions="I", model=model, memory=memory, tools=[get_weather])
    result = agent.generate("weather?", memory={"resource": "u", "thread": "t"})
    spec = next(t["function"] for t in model.requests[0].tools if t["function"]["name"] == "get_weather")
    assert spec["name"] == "get_weather" and spec["parameters"]["required"] == ["city"]
    assert spec["parameters"]["properties"]["days"] == {"type": "integer"}
    assert result.tool_results[0]["result"] == {"city": "Oslo", "days": 1}


@pytest.mark.libsql_only  # Postgres: tests/core/test_postgres_traces.py
def test_runs_are_traced_into_duckdb_by_default(db_path):
    from core import open_store
    from core.traces.store import DuckDBObservabilityStore

    with open_store(db_path) as s:
        agent = Agent("chat", instructions="I", model=ScriptedModel(["hello"]), memory=Memory(s))
        result = agent.generate("hi", memory={"resource": "u", "thread": "t"})
        assert s.tracer().flush(10.0)
    traces = DuckDBObservabilityStore(db_path.with_name("observability.duckdb"), read_only=True)
    spans = traces.get_trace(result.trace_id)
    assert {sp.span_type for sp in spans} >= {"agent_run", "model_generation", "memory_operation", "processor_run"}


def test_tracing_can_be_turned_off(store):
    agent = Agent("chat", instructions="I", model=ScriptedModel(["hello"]), memory=Memory(store), tracer=False)
    assert agent.generate("hi", memory={"resource": "u", "thread": "t"}).trace_id is None


def test_script_entries_as_plain_data(memory):
    model = ScriptedModel([
        {"tool_calls": [{"name": "updateWorkingMemory", "arguments": {"memory": "# User\n- Name: Kim\n"}}]},
        {"text": "Hi Kim."},
    ])
    agent = Agent("chat", instructions="I", model=model, memory=memory)
    assert agent.generate("I'm Kim", memory={"resource": "u", "thread": "t"}).text == "Hi Kim."
    assert memory.get_working_memory(resource_id="u") == "# User\n- Name: Kim\n"


def test_sub_agents_may_be_given_as_a_mapping(memory):
    helper = Agent("helper", instructions="Help.", model=ScriptedModel(["done"]))
    boss = Agent("boss", instructions="Delegate.", memory=memory, agents={"helper": helper}, model=ScriptedModel([
        ScriptedReply(tool_calls=(tool_call("agent-helper", {"prompt": "do it"}),)), "ok"]))
    boss.generate("go", memory={"resource": "u", "thread": "t"})
    assert [t.id for t in memory.list_threads(resource_id=delegation_resource("u", "helper"))]


class HeldModel:
    """A sub-agent's model that keeps the first delegation ("alpha") waiting inside the model call
    until the test lets it go, so a second delegation runs while the first is still in flight."""

    model_id = "scripted/held"
    provider = "scripted"

    def __init__(self) -> None:
        self.first_inside = threading.Event()
        self.release_first = threading.Event()

    def describe(self) -> dict:
        return {"model_id": self.model_id}

    def generate(self, messages, **_kwargs) -> ChatResult:
        prompt = messages[-1]["content"]
        if "alpha" in prompt:
            self.first_inside.set()
            assert self.release_first.wait(60), "the test never released the first delegation"
        return ChatResult(text=f"done: {prompt}", model_id=self.model_id)


def test_one_sub_agent_serves_two_supervisors_at_once(tmp_path):
    held = HeldModel()
    helper = Agent("helper", instructions="Help.", model=held)  # no memory of its own: uses the caller's
    stores = [open_store(tmp_path / "a" / "memory.db"), open_store(tmp_path / "b" / "memory.db")]
    mem_a, mem_b = Memory(stores[0]), Memory(stores[1])

    def boss(name: str, mem: Memory, task: str) -> Agent:
        script = [ScriptedReply(tool_calls=(tool_call("agent-helper", {"prompt": task}),)), "ok"]
        return Agent(name, instructions="Delegate.", model=ScriptedModel(script), memory=mem, agents=[helper])

    boss_a, boss_b = boss("boss-a", mem_a, "alpha task"), boss("boss-b", mem_b, "beta task")
    errors: list[BaseException] = []

    def run_a() -> None:
        try:
            boss_a.generate("go", memory={"resource": "ua", "thread": "ta"})
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread below
            errors.append(exc)

    first = threading.Thread(target=run_a)
    first.start()
    try:
        assert held.first_inside.wait(60), errors
        boss_b.generate("go", memory={"resource": "ub", "thread": "tb"})  # while boss-a's delegation is open
    finally:
        held.release_first.set()
        first.join(60)
    assert not errors and not first.is_alive()

    def child_texts(mem: Memory, resource: str) -> list[list[str]]:
        return [[m.text for m in mem.recall(thread_id=t.id).messages] for t in mem.list_threads(resource_id=resource)]

    assert child_texts(mem_a, delegation_resource("ua", "helper")) == [["alpha task", "done: alpha task"]]
    assert child_texts(mem_b, delegation_resource("ub", "helper")) == [["beta task", "done: beta task"]]
    assert child_texts(mem_a, delegation_resource("ub", "helper")) == []
    assert child_texts(mem_b, delegation_resource("ua", "helper")) == []
    assert helper.memory is None
    for s in stores:
        s.close()
