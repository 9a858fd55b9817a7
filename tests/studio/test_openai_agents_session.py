"""The real OpenAI Agents SDK keeps its conversation in our memory (core.integrations.openai_agents).

An SDK agent with a ``MemorySession`` runs three turns against an OpenAI-compatible server on
loopback; the thread is then read back through ``Memory`` and through the Studio's read layer, and
the trace store holds each run with the exact messages the SDK sent.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Iterator

import pytest

agents = pytest.importorskip("agents")
from agents import Agent, OpenAIChatCompletionsModel, Runner, set_trace_processors  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from core import Memory, MemoryOptions, open_store  # noqa: E402
from core.embedding.hashing import HashingEmbedder  # noqa: E402
from core.integrations.openai_agents import MemorySession, trace_processor  # noqa: E402
from core.llm.loopback import LoopbackServer  # noqa: E402
from core.scopes import ThreadOwnershipError  # noqa: E402
from core.traces.reader import TraceFilters  # noqa: E402
from studio import reads  # noqa: E402

TEMPLATE = "# Cook\n- Name:\n- Allergies:\n"


@pytest.fixture()
def only_our_traces() -> Iterator[None]:
    # The SDK's default processor would try to export to OpenAI's backend; tests are offline.
    set_trace_processors([trace_processor()])
    yield
    set_trace_processors([trace_processor()])


@pytest.fixture()
def memory(tmp_path: Path) -> Iterator[Memory]:
    store = open_store(tmp_path / "memory.db")
    options = MemoryOptions(last_messages=10, working_memory={"enabled": True, "scope": "resource",
                                                              "template": TEMPLATE},
                            semantic_recall={"top_k": 3, "message_range": 0, "scope": "resource"})
    yield Memory(store, options, embedder=HashingEmbedder(), name="chef")
    store.close()


SCRIPT: list[Any] = [
    {"tool_calls": [{"name": "updateWorkingMemory", "id": "call_wm",
                     "arguments": {"memory": "# Cook\n- Name: Ada\n- Allergies: peanuts\n"}}]},
    {"text": "Noted: no peanuts for you, Ada."},
    {"text": "Try a chickpea curry."},
    {"text": "You told me you are allergic to peanuts."},
]


def _run(agent: Agent[Any], text: str, session: MemorySession) -> Any:
    return asyncio.run(Runner.run(agent, text, session=session, run_config=session.run_config()))


def test_three_turns_are_our_messages_with_memory_as_instructions_and_traces(
        memory: Memory, only_our_traces: None) -> None:
    # Another thread of the same resource, for recall across threads.
    memory.save_messages([_user(memory, "old-thread", "Peanut butter cookies were my favourite as a child")])
    with LoopbackServer(SCRIPT) as server:
        session = MemorySession("dinner", memory=memory, resource_id="ada", title="Dinner")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        agent = Agent(name="chef", instructions="You are a helpful cook.",
                      model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client),
                      tools=session.tools())
        first = _run(agent, "Hi, I'm Ada and I'm allergic to peanuts.", session)
        second = _run(agent, "What should I cook tonight?", session)
        third = _run(agent, "Which cookies were my favourite as a child?", session)
        sent = server.chat_requests()
    assert (first.final_output, second.final_output, third.final_output) == (
        "Noted: no peanuts for you, Ada.", "Try a chickpea curry.", "You told me you are allergic to peanuts.")

    # What the model got: the agent's instructions plus working memory (the empty template first,
    # then what the tool stored), recall from the other thread, and the conversation from the session.
    first_system = sent[0]["messages"][0]
    assert first_system["role"] == "system"
    assert first_system["content"].startswith("You are a helpful cook.")
    assert "- Name:\n" in first_system["content"]
    last = sent[-1]["messages"]
    assert "- Name: Ada" in last[0]["content"] and "- Allergies: peanuts" in last[0]["content"]
    assert "Peanut butter cookies" in last[0]["content"]  # recalled from the other thread
    users = [m["content"] for m in last if m["role"] == "user"]
    assert users == ["Hi, I'm Ada and I'm allergic to peanuts.", "What should I cook tonight?",
                     "Which cookies were my favourite as a child?"]
    assert memory.get_working_memory(thread_id="dinner", resource_id="ada") == \
        "# Cook\n- Name: Ada\n- Allergies: peanuts\n"

    # Read back through Memory: our messages, in order, the working-memory tool traffic hidden.
    stored = memory.recall(thread_id="dinner", resource_id="ada", per_page=False).messages
    assert [(m.role, m.text) for m in stored] == [
        ("user", "Hi, I'm Ada and I'm allergic to peanuts."),
        ("assistant", "Noted: no peanuts for you, Ada."),
        ("user", "What should I cook tonight?"),
        ("assistant", "Try a chickpea curry."),
        ("user", "Which cookies were my favourite as a child?"),
        ("assistant", "You told me you are allergic to peanuts."),
    ]
    assert memory.get_thread("dinner").resource_id == "ada"

    # ...and through the Studio's read layer.
    store = memory.store
    tree = reads.load_tree(store)
    dinner = next(s for s in tree.threads["ada"] if s.thread.id == "dinner")
    assert (dinner.thread.title, dinner.message_count) == ("Dinner", 6)
    rows = reads.load_page(store, "dinner", 0, 50)
    assert [(r.role, r.preview) for r in rows] == [(m.role, m.text) for m in stored]
    assert reads.count_messages(store, "dinner") == 6

    # Traces: three runs on the thread, each model call with the exact messages the SDK sent.
    store.tracer().flush(30)
    resolver = reads.SourceResolver(store)
    page = reads.load_traces_page(resolver, TraceFilters(thread_id="dinner"), 0, 20)
    runs = list(page.rows)
    assert len(runs) == 3
    generations = []
    for run in runs:
        spans = resolver.resolve().reader.get_trace(run.trace_id)
        assert {s.span_type for s in spans} >= {"agent_run", "model_generation", "memory_operation"}
        run_generations = [s for s in spans if s.span_type == "model_generation"]
        agent_spans = {s.span_id for s in spans if s.span_type == "agent_run" and s.parent_span_id is not None}
        assert agent_spans and all(g.parent_span_id in agent_spans for g in run_generations)  # under 'chef'
        generations += run_generations
    assert len(generations) == len(sent) == 4
    sent_messages = sorted(json.dumps(r["messages"], sort_keys=True) for r in sent)
    traced_messages = sorted(json.dumps(g.input["messages"], sort_keys=True) for g in generations)
    assert traced_messages == sent_messages
    tools = [s for run in runs for s in resolver.resolve().reader.get_trace(run.trace_id)
             if s.span_type == "tool_call"]
    assert [t.name for t in tools] == ["tool: 'updateWorkingMemory'"]


def test_items_round_trip_and_pop_and_clear(memory: Memory) -> None:
    session = MemorySession("s1", memory=memory, resource_id="ada")
    items = [
        {"role": "user", "content": "hello"},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{\"city\": \"Oslo\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "It is sunny.", "annotations": []}]},
    ]
    asyncio.run(session.add_items(items))
    assert asyncio.run(session.get_items()) == items
    assert asyncio.run(session.get_items(limit=2)) == items[2:]
    stored = memory.recall(thread_id="s1", resource_id="ada", per_page=False).messages
    call = stored[1].parts[0]["toolInvocation"]
    assert (call["toolName"], call["args"], call["state"]) == ("weather", {"city": "Oslo"}, "call")
    result = stored[2].parts[0]["toolInvocation"]
    assert (result["toolName"], result["result"], result["state"]) == ("weather", "sunny", "result")
    assert result["args"] == {"city": "Oslo"}  # the call it answers, with its arguments, not {}
    assert asyncio.run(session.pop_item()) == items[-1]
    assert asyncio.run(session.get_items()) == items[:-1]
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []
    assert asyncio.run(session.pop_item()) is None
    assert memory.get_thread("s1") is not None  # the thread (and its working memory) stays


def test_the_newest_items_are_the_newest_readable_ones_whatever_is_read(memory: Memory) -> None:
    """``get_items(limit)`` and ``pop_item`` read only a session's newest messages, and give what the whole
    thread's readable messages give: a stored row that does not parse among the newest takes no place."""
    session = MemorySession("s2", memory=memory, resource_id="ada")
    items = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(8)]
    asyncio.run(session.add_items(items))
    assert asyncio.run(session.get_items(limit=3)) == items[-3:]
    assert asyncio.run(session.get_items(limit=50)) == items
    stored = memory.recall(thread_id="s2", resource_id="ada", per_page=False).messages
    with memory.store.db.write() as conn:  # the newest but one no longer parses
        conn.exec_driver_sql("UPDATE mastra_messages SET content = '{broken' WHERE id = ?", (stored[-2].id,))
    readable = items[:6] + items[7:]
    assert asyncio.run(session.get_items(limit=3)) == readable[-3:]
    assert asyncio.run(session.get_items()) == readable
    assert asyncio.run(session.pop_item()) == items[7]
    assert asyncio.run(session.pop_item()) == items[5]  # (the unparsable one is skipped, as a listing skips it)


def test_popped_and_cleared_items_leave_recall_and_keep_a_version(memory: Memory) -> None:
    # pop_item and clear_session delete as the Studio does: the recall index follows (no keyword doc
    # or vector left, so the text is not recalled later) and each deletion is a version (undoable).
    session = MemorySession("s2", memory=memory, resource_id="ada")
    asyncio.run(session.add_items([{"role": "user", "content": "My locker code is zebra-4471"},
                                   {"role": "user", "content": "The spare key hides under the walrus pot"}]))
    memory.wait_idle(30)
    stored = memory.recall(thread_id="s2", resource_id="ada", per_page=False).messages
    assert [h.message_id for h in memory.search("walrus", resource_id="ada", mode="keyword")] == [stored[1].id]

    asyncio.run(session.pop_item())
    memory.wait_idle(30)
    assert _recall_rows(memory, stored[1].id) == 0
    assert memory.search("walrus", resource_id="ada", mode="keyword") == []
    assert [v.op for v in memory.message_versions(stored[1].id, resource_id="ada")] == ["delete"]

    asyncio.run(session.clear_session())
    memory.wait_idle(30)
    assert _recall_rows(memory, stored[0].id) == 0
    assert memory.search("zebra locker", resource_id="ada", mode="keyword") == []
    assert [v.op for v in memory.message_versions(stored[0].id, resource_id="ada")] == ["delete"]


def test_an_edited_message_is_what_the_model_gets_next_and_an_undo_restores_the_item(memory: Memory) -> None:
    with LoopbackServer([{"text": "Noted, your PIN is 1234."}, {"text": "I do not know it."}]) as server:
        session = MemorySession("pin", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        agent = Agent(name="chef", instructions="Be brief.",
                      model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client))
        _run(agent, "My PIN is 1234", session)
        first_items = asyncio.run(session.get_items())
        said, replied = memory.recall(thread_id="pin", resource_id="ada", per_page=False).messages
        memory.edit_message(said.id, resource_id="ada", text="My PIN is [removed]")
        memory.edit_message(replied.id, resource_id="ada", text="Noted.")
        _run(agent, "What is my PIN?", session)
        sent = server.chat_requests()[-1]["messages"]
    assert [(m["role"], m["content"]) for m in sent[1:]] == [
        ("user", "My PIN is [removed]"), ("assistant", "Noted."), ("user", "What is my PIN?")]
    assert "1234" not in json.dumps(asyncio.run(session.get_items())[:2])
    # Undoing both edits gives the SDK back exactly the items it stored.
    memory.undo_message_edit(said.id, resource_id="ada")
    memory.undo_message_edit(replied.id, resource_id="ada")
    assert asyncio.run(session.get_items())[:2] == first_items


def test_the_prompt_inspector_shows_an_sdk_thread_with_its_agents_options(
        memory: Memory, tmp_path: Path, only_our_traces: None) -> None:
    import io

    from core.agent_configs import agent_for_thread
    from core.cli import main as cli_main

    Memory(memory.store, name="travel").register("travel")  # another agent: no "only agent" fallback
    with LoopbackServer([{"text": "Pasta, then."}]) as server:
        session = MemorySession("kitchen", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        agent = Agent(name="chef", instructions="You are a helpful cook.",
                      model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client))
        _run(agent, "Dinner ideas?", session)
    choice = agent_for_thread(memory.store, "kitchen")
    assert choice.agent is not None and choice.agent.name == "chef" and "answered last" in choice.reason
    assert choice.agent.instructions == "You are a helpful cook."
    # memory-studio prompt (as the Studio's inspector) now shows the thread with working memory, as
    # the SDK's model calls had it, instead of the engine's defaults.
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["prompt", "--db", str(tmp_path / "memory.db"), "--resource", "ada", "--thread", "kitchen",
                     "And dessert?", "--json"], out=out, err=err) == 0, err.getvalue()
    shown = json.loads(out.getvalue())
    assert [f["source"] for f in shown["fragments"]][:2] == ["instructions", "working-memory"]
    assert shown["fragments"][0]["text"] == "You are a helpful cook."
    # The reply the SDK stores is still given back to it unchanged.
    assert asyncio.run(session.get_items())[-1]["content"][0]["text"] == "Pasta, then."


def test_an_sdk_agent_registers_its_model_settings_and_own_tools(memory: Memory, only_our_traces: None) -> None:
    # The chat playground sends a registered agent's settings and names its tools when no recorded turn
    # says more; an SDK agent registered its instructions only.
    from agents import ModelSettings, function_tool

    from core.agent_configs import named_agent

    @function_tool
    def lookup_recipe(dish: str) -> str:
        """Find a recipe."""
        return f"A recipe for {dish}."

    with LoopbackServer([{"text": "Pasta, then."}]) as server:
        session = MemorySession("kitchen", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        agent = Agent(name="chef", instructions="You are a helpful cook.",
                      model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client),
                      model_settings=ModelSettings(temperature=0.2, max_tokens=300),
                      tools=[lookup_recipe, *session.tools()])
        _run(agent, "Dinner ideas?", session)
    chef = named_agent(memory.store, "chef")
    assert chef is not None and chef.instructions == "You are a helpful cook."
    assert chef.model_settings == {"temperature": 0.2, "max_tokens": 300}
    assert chef.tool_names == ("lookup_recipe",)  # the working-memory tool is the memory's, not the agent's


def test_a_model_call_the_sdk_did_not_record_is_not_shown_as_an_empty_prompt(
        memory: Memory, only_our_traces: None) -> None:
    with LoopbackServer([{"text": "Fine."}]) as server:
        session = MemorySession("private", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        agent = Agent(name="chef", instructions="Be brief.",
                      model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client))
        asyncio.run(Runner.run(agent, "A private question", session=session,
                               run_config=session.run_config(trace_include_sensitive_data=False)))
    store = memory.store
    store.tracer().flush(30)
    resolver = reads.SourceResolver(store)
    (run,) = reads.load_traces_page(resolver, TraceFilters(thread_id="private"), 0, 5).rows
    (generation,) = [s for s in resolver.resolve().reader.get_trace(run.trace_id)
                     if s.span_type == "model_generation"]
    # The SDK kept the messages out of its trace: the span says so, with no empty prompt or reply.
    assert generation.input is None and generation.output is None
    from core.integrations.openai_agents.tracing import NOT_RECORDED

    assert generation.attributes["notRecorded"] == NOT_RECORDED
    assert "A private question" not in json.dumps([generation.input, generation.output, generation.attributes])


def test_one_sessions_working_memory_tool_never_writes_in_another_users_run(
        memory: Memory, only_our_traces: None) -> None:
    script = [{"tool_calls": [{"name": "updateWorkingMemory", "id": "call_wm",
                               "arguments": {"memory": "# Cook\n- Name: Bob\n- Allergies: shellfish\n"}}]},
              {"text": "Noted."}]
    with LoopbackServer(script) as server:
        ada = MemorySession("ada-chat", memory=memory, resource_id="ada")
        bob = MemorySession("bob-chat", memory=memory, resource_id="bob")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        # A mistake a server can make: one agent built at start-up with the first session's tools.
        agent = Agent(name="chef", instructions="Be brief.", tools=ada.tools(),
                      model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client))
        with pytest.raises(agents.exceptions.UserError, match="called in a run of session 'bob-chat' "
                           r"\(resource 'bob'\); nothing was written"):
            _run(agent, "I'm Bob, allergic to shellfish.", bob)
    assert "Bob" not in (memory.get_working_memory(thread_id="ada-chat", resource_id="ada") or "")
    assert "Bob" not in (memory.get_working_memory(thread_id="bob-chat", resource_id="bob") or "")


def test_get_items_without_a_limit_uses_the_session_settings_limit(memory: Memory) -> None:
    from agents.memory import SessionSettings

    session = MemorySession("s4", memory=memory, resource_id="ada", session_settings=SessionSettings(limit=2))
    items = [{"role": "user", "content": f"note {i}"} for i in range(4)]
    asyncio.run(session.add_items(items))
    assert asyncio.run(session.get_items()) == items[2:]  # as the SDK's SQLiteSession does
    assert asyncio.run(session.get_items(limit=3)) == items[1:]  # an explicit limit wins


def test_an_output_saved_after_its_call_names_the_call_with_its_arguments(memory: Memory) -> None:
    # The SDK saves a tool call and its output in separate add_items calls when a run resumes.
    session = MemorySession("s3", memory=memory, resource_id="ada")
    asyncio.run(session.add_items([{"role": "user", "content": "Weather in Bergen?"},
                                   {"type": "function_call", "call_id": "c9", "name": "weather",
                                    "arguments": "{\"city\": \"Bergen\"}"}]))
    asyncio.run(session.add_items([{"type": "function_call_output", "call_id": "c9", "output": "rain"}]))
    result = memory.recall(thread_id="s3", resource_id="ada", per_page=False).messages[-1].parts[0]["toolInvocation"]
    assert (result["toolName"], result["args"], result["result"]) == ("weather", {"city": "Bergen"}, "rain")


def _recall_rows(memory: Memory, message_id: str) -> int:
    """The keyword docs and vectors the recall index holds for one message."""
    from core.storage import catalog

    with memory.store.db.read() as conn:
        docs = conn.exec_driver_sql("SELECT count(*) FROM memory_studio_fts_docs WHERE message_id = ?",
                                    (message_id,)).scalar()
        vectors = sum(int(conn.exec_driver_sql(f'SELECT count(*) FROM "{t}" WHERE vector_id = ?',
                                               (message_id,)).scalar() or 0)
                      for t in catalog.table_names(conn, "memory_messages"))
    return int(docs or 0) + vectors


def test_messages_written_by_others_become_items(memory: Memory) -> None:
    memory.save_messages([_user(memory, "shared", "I like soup"),
                          _assistant(memory, "shared", "Soup it is.")])
    session = MemorySession("shared", memory=memory, resource_id="ada")
    assert asyncio.run(session.get_items()) == [{"role": "user", "content": "I like soup"},
                                                {"role": "assistant", "content": "Soup it is."}]


def test_another_resources_thread_is_refused_before_anything_is_written(memory: Memory) -> None:
    memory.save_messages([_user(memory, "private", "my secret")])
    intruder = MemorySession("private", memory=memory, resource_id="mallory")
    with pytest.raises(ThreadOwnershipError):
        asyncio.run(intruder.get_items())
    with pytest.raises(ThreadOwnershipError):
        asyncio.run(intruder.add_items([{"role": "user", "content": "let me in"}]))
    assert [m.text for m in memory.recall(thread_id="private", resource_id="ada", per_page=False)] == ["my secret"]


def test_a_thread_another_run_makes_between_the_look_and_the_create_is_taken_not_an_error(
        memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two runs of one session side by side (``asyncio.gather``): both look for the thread, find none, and
    # make it; the second found "already exists" and its items were lost. The other run's create is made
    # here, for real, in that window.
    look = memory.get_thread
    made: list[bool] = []

    def look_then_another_run_makes_it(thread_id: str) -> Any:
        found = look(thread_id)
        if thread_id == "trip" and not made:
            made.append(True)
            memory.create_thread(resource_id="ada", thread_id="trip", metadata={"framework": "openai-agents"})
        return found

    monkeypatch.setattr(memory, "get_thread", look_then_another_run_makes_it)
    session = MemorySession("trip", memory=memory, resource_id="ada")
    asyncio.run(session.add_items([{"role": "user", "content": "Book the ferry."}]))
    assert made and [m.text for m in memory.recall(thread_id="trip", resource_id="ada", per_page=False)] == [
        "Book the ferry."]
    # Made by another resource in that window: still refused, nothing written (the save checks the owner).
    made.clear()
    monkeypatch.setattr(memory, "get_thread", lambda thread_id: None if thread_id == "taken" else look(thread_id))
    memory.create_thread(resource_id="mallory", thread_id="taken")
    with pytest.raises(ThreadOwnershipError):
        asyncio.run(MemorySession("taken", memory=memory, resource_id="ada").add_items(
            [{"role": "user", "content": "hello"}]))
    assert memory.recall(thread_id="taken", resource_id="mallory", per_page=False).messages == []


def _user(memory: Memory, thread: str, text: str) -> Any:
    from core.messages import Message

    return Message.user(text, thread_id=thread, resource_id="ada")


def _assistant(memory: Memory, thread: str, text: str) -> Any:
    from core.messages import Message

    return Message.assistant(text, thread_id=thread, resource_id="ada")



OBSERVED = """<observations>
Date: Jan 2, 2025
* 🔴 (09:00) User is planning a garden with raised cedar beds [garden].
</observations>

<current-task>
Primary: choosing materials for raised beds.
</current-task>"""


def test_observational_memory_observes_and_reaches_the_instructions(tmp_path: Path, only_our_traces: None) -> None:
    from core.llm.scripted import ScriptedModel

    store = open_store(tmp_path / "om.db")
    observer = ScriptedModel([OBSERVED], name="observer")
    memory = Memory(store, MemoryOptions(observational_memory={"enabled": True, "message_tokens": 200,
                                                               "observation_tokens": 5000}),
                    observer_model=observer, name="gardener")
    long = "I want raised beds for my garden, made of cedar, about three of them. " * 12
    try:
        with LoopbackServer([{"text": "Cedar is a fine choice."}, {"text": "Three beds of cedar, then."}]) as server:
            session = MemorySession("garden", memory=memory, resource_id="ada")
            client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
            agent = Agent(name="gardener", instructions="You are a gardening helper.",
                          model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client))
            _run(agent, long, session)
            _run(agent, "How many beds did I want?", session)
            sent = server.chat_requests()
    finally:
        store.close()
    # The session stores the long input before the model call, so the first memory step already finds
    # enough unobserved tokens: the observer runs once, and both model calls read its observations.
    assert observer.remaining == 0
    for request in sent:
        system = request["messages"][0]["content"]
        assert system.startswith("You are a gardening helper.")
        assert "User is planning a garden with raised cedar beds" in system
    assert [m["content"] for m in sent[-1]["messages"] if m["role"] == "user"][-1] == "How many beds did I want?"


def test_our_prompt_sends_an_sdk_threads_tool_call_once_with_its_reply(memory: Memory) -> None:
    """The SDK stores a call and its output as two messages; read as history by our prompt builder (our Agent
    continuing the thread, a rebuilt turn, the inspector) the call goes once, answered: OpenAI refuses a
    ``tool_calls`` message that no tool message answers, and a call sent twice."""
    session = MemorySession("s5", memory=memory, resource_id="ada")
    asyncio.run(session.add_items([
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{\"city\": \"Oslo\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "It is sunny.", "annotations": []}]},
    ]))
    sent = memory.assemble(thread_id="s5", resource_id="ada", input="And tomorrow?").messages
    calls = [c["id"] for m in sent if m.get("tool_calls") for c in m["tool_calls"]]
    replies = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert calls == ["c1"] and replies == ["c1"]
    at = next(i for i, m in enumerate(sent) if m.get("tool_calls"))
    assert sent[at + 1] == {"role": "tool", "tool_call_id": "c1", "content": "sunny"}


def test_a_rebuilt_sdk_turn_says_the_sdk_built_its_prompt(memory: Memory) -> None:
    """An SDK turn leaves no turn record of ours: its rebuild is a reconstruction, and what it cannot know
    (the instructions) is put down to the SDK having built the prompt, not to the turn being old."""
    session = MemorySession("s6", memory=memory, resource_id="ada")
    asyncio.run(session.add_items([
        {"role": "user", "content": "Hello"},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Hi.", "annotations": []}]},
    ]))
    first = memory.recall(thread_id="s6", resource_id="ada", per_page=False).messages[0]
    info = memory.assemble(thread_id="s6", resource_id="ada", as_of=first.id).replay
    assert info is not None and info.kind == "reconstructed"
    said = [u for u in info.unknowns if "instructions" in u]
    assert said and "openai-agents" in said[0] and "older turns" not in said[0]


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def test_an_image_only_message_is_shown_as_its_image_stored_once_and_sent_again(memory: Memory) -> None:
    """An image the SDK stores is one of the message's file parts (the Studio and a prompt preview see
    it, not an empty message), its data stored once, and the SDK gets the item back whole next run."""
    said = {"role": "user", "content": [{"type": "input_image", "image_url": f"data:image/png;base64,{PNG}",
                                         "detail": "auto"}]}
    with LoopbackServer([{"text": "A red dot."}, {"text": "It was a red dot."}]) as server:
        session = MemorySession("photos", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        agent = Agent(name="chef", instructions="Be brief.",
                      model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client))
        asyncio.run(Runner.run(agent, [said], session=session, run_config=session.run_config()))
        _run(agent, "What was in the picture?", session)
        sent = server.chat_requests()[-1]["messages"]
    assert sent[1] == {"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": f"data:image/png;base64,{PNG}", "detail": "auto"}}]}
    assert asyncio.run(session.get_items())[0] == said  # the SDK's own item, whole

    stored = memory.recall(thread_id="photos", resource_id="ada", per_page=False).messages[0]
    assert [(p["type"], p.get("mimeType"), p.get("data")) for p in stored.parts] == [("file", "image/png", PNG)]
    assert json.dumps(stored.content).count(PNG) == 1  # once: a large image cannot pass the size limit twice
    (row,) = reads.load_page(memory.store, "photos", 0, 1)
    assert "image/png" in row.preview  # not an empty message
    preview = memory.assemble(thread_id="photos", resource_id="ada", input="And now?").messages
    first_user = next(m for m in preview if m["role"] == "user")
    assert first_user["content"] == [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]

    # The image taken out of the message (an edit) is no longer sent; the words put in are.
    memory.edit_message(stored.id, resource_id="ada",
                        content={**stored.content, "parts": [{"type": "text", "text": "(a picture, removed)"}]})
    assert asyncio.run(session.get_items())[0] == {
        "role": "user", "content": [{"type": "input_text", "text": "(a picture, removed)"}]}


def test_an_image_another_writer_stored_reaches_the_sdk(memory: Memory) -> None:
    from core.messages import Message, file_part, text_part

    memory.save_messages([Message.create("user", [text_part("Look"), file_part(PNG, "image/png", "dot.png")],
                                         thread_id="shared-img", resource_id="ada")])
    session = MemorySession("shared-img", memory=memory, resource_id="ada")
    assert asyncio.run(session.get_items()) == [{"role": "user", "content": [
        {"type": "input_text", "text": "Look"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"}]}]


def test_read_only_memory_reads_and_saves_nothing(tmp_path: Path, only_our_traces: None) -> None:
    """MemoryOptions(read_only=True), Mastra's readOnly: the session reads the thread and memory but
    saves no item, and deletes none; working memory is shown read-only and no tool is offered."""
    store = open_store(tmp_path / "ro.db")
    wm = {"enabled": True, "scope": "resource", "template": TEMPLATE}
    writer = Memory(store, MemoryOptions(working_memory=wm), name="chef")
    asyncio.run(MemorySession("kept", memory=writer, resource_id="ada").add_items(
        [{"role": "user", "content": "I am Ada."}, {"role": "assistant", "content": "Hello Ada."}]))
    writer.update_working_memory(thread_id="kept", resource_id="ada", working_memory="# Cook\n- Name: Ada\n")
    reader = Memory(store, MemoryOptions(working_memory=wm, read_only=True), name="chef")
    try:
        with LoopbackServer([{"text": "Hi Ada."}, {"text": "You are Ada."}]) as server:
            session = MemorySession("kept", memory=reader, resource_id="ada")
            assert session.tools() == []
            client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
            agent = Agent(name="chef", instructions="Be brief.", tools=session.tools(),
                          model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client))
            _run(agent, "Hello again", session)
            _run(agent, "Who am I?", session)
            sent = server.chat_requests()
        # Memory was read: the stored turns and working memory (read-only) reached the model...
        assert "- Name: Ada" in sent[-1]["messages"][0]["content"]
        assert "READ-ONLY" in sent[-1]["messages"][0]["content"]
        assert [m["content"] for m in sent[-1]["messages"][1:]] == ["I am Ada.", "Hello Ada.", "Who am I?"]
        # ...and nothing was saved: the first run's turn is not in the thread, nor in the second call.
        assert [m.text for m in reader.recall(thread_id="kept", resource_id="ada", per_page=False).messages] == [
            "I am Ada.", "Hello Ada."]
        with pytest.raises(Exception, match="read-only"):
            asyncio.run(session.pop_item())
        with pytest.raises(Exception, match="read-only"):
            asyncio.run(session.clear_session())
        assert len(reader.recall(thread_id="kept", resource_id="ada", per_page=False).messages) == 2
    finally:
        store.close()


@pytest.mark.parametrize("tracing_disabled", [False, True])
def test_another_sessions_run_config_is_refused_before_the_model_is_called(
        memory: Memory, only_our_traces: None, tracing_disabled: bool) -> None:
    from agents import SQLiteSession

    from core.storage import InvalidArgumentError

    memory.update_working_memory(thread_id="ada-chat", resource_id="ada", working_memory="# Cook\n- Name: Ada\n")
    with LoopbackServer([{"text": "Hello Bob."}, {"text": "Fine."}]) as server:
        ada = MemorySession("ada-chat", memory=memory, resource_id="ada")
        bob = MemorySession("bob-chat", memory=memory, resource_id="bob")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        agent = Agent(name="chef", instructions="Be brief.",
                      model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client))
        with pytest.raises(InvalidArgumentError, match="run config of session 'ada-chat' \\(resource 'ada'\\) was "
                           "used in a run of session 'bob-chat' \\(resource 'bob'\\); its memory was not added"):
            asyncio.run(Runner.run(agent, "Hi, I'm Bob.", session=bob,
                                   run_config=ada.run_config(tracing_disabled=tracing_disabled)))
        assert server.chat_requests() == []  # Ada's memory reached no model call
        # Each session with its own run config works, and an earlier run leaves nothing behind.
        async def both() -> None:
            await Runner.run(agent, "Hi, I'm Bob.", session=bob, run_config=bob.run_config(
                tracing_disabled=tracing_disabled))
            await Runner.run(agent, "Hi", session=SQLiteSession("elsewhere"), run_config=ada.run_config(
                tracing_disabled=tracing_disabled))
        asyncio.run(both())
        sent = server.chat_requests()
    assert "Name: Ada" not in json.dumps(sent[0]) and "Name: Ada" in json.dumps(sent[1])


def test_one_sessions_working_memory_tool_is_refused_in_another_users_run_without_tracing(
        memory: Memory, only_our_traces: None) -> None:
    script = [{"tool_calls": [{"name": "updateWorkingMemory", "id": "call_wm",
                               "arguments": {"memory": "# Cook\n- Name: Bob\n- Allergies: shellfish\n"}}]},
              {"text": "Noted."}]
    with LoopbackServer(script) as server:
        ada = MemorySession("ada-chat", memory=memory, resource_id="ada")
        bob = MemorySession("bob-chat", memory=memory, resource_id="bob")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        agent = Agent(name="chef", instructions="Be brief.", tools=ada.tools(),
                      model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client))
        with pytest.raises(agents.exceptions.UserError, match="called in a run of session 'bob-chat'"):
            asyncio.run(Runner.run(agent, "I'm Bob, allergic to shellfish.", session=bob,
                                   run_config=bob.run_config(tracing_disabled=True)))
    assert "Bob" not in (memory.get_working_memory(thread_id="ada-chat", resource_id="ada") or "")


def test_a_nested_run_of_another_session_keeps_its_own_memory_and_tools(memory: Memory, only_our_traces: None) -> None:
    """An agent used as a tool runs its own Runner.run with its own session (another user's notes
    service, a sub-agent per thread): that inner run shares the outer run's trace. Its working-memory
    tool and its memory belong to the inner session and work there; the outer run keeps its own."""
    from agents import function_tool

    script = [{"tool_calls": [{"name": "ask_notes", "id": "c1", "arguments": {}}]},
              {"tool_calls": [{"name": "updateWorkingMemory", "id": "c2",
                               "arguments": {"memory": "# Cook\n- Name: Carol\n- Allergies: none\n"}}]},
              {"text": "Noted for Carol."}, {"text": "Done."}]
    with LoopbackServer(script) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        model = OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client)
        ada = MemorySession("ada-chat", memory=memory, resource_id="ada")
        carol = MemorySession("carol-notes", memory=memory, resource_id="carol")
        inner = Agent(name="notes", instructions="Keep notes.", tools=carol.tools(), model=model)

        @function_tool
        async def ask_notes() -> str:
            """Ask the notes agent."""
            result = await Runner.run(inner, "Note: Carol has no allergies.", session=carol,
                                      run_config=carol.run_config())
            return str(result.final_output)

        outer = Agent(name="chef", instructions="Be brief.", tools=[ask_notes, *ada.tools()], model=model)
        result = _run(outer, "Ask the notes agent.", ada)
    assert result.final_output == "Done."
    assert memory.get_working_memory(thread_id="carol-notes", resource_id="carol") == \
        "# Cook\n- Name: Carol\n- Allergies: none\n"
    assert "Carol" not in (memory.get_working_memory(thread_id="ada-chat", resource_id="ada") or "")


def test_working_memory_tags_an_item_holds_are_not_kept_in_its_stored_item(memory: Memory) -> None:
    # The message's text was stored without the <working_memory> block (the hide rule), but the SDK's
    # item kept in the message's metadata still held it, word for word, in the database.
    session = MemorySession("tags", memory=memory, resource_id="ada")
    reply = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "annotations": [],
                          "text": "Noted.<working_memory># Cook\n- Name: Ada\n- PIN: 4471</working_memory>"}]}
    asyncio.run(session.add_items([{"role": "user", "content": "My PIN is secret"}, reply]))
    stored = memory.recall(thread_id="tags", resource_id="ada", per_page=False).messages[-1]
    assert stored.text == "Noted." and "4471" not in json.dumps(stored.content)
    assert asyncio.run(session.get_items())[-1] == {**reply, "content": [
        {"type": "output_text", "annotations": [], "text": "Noted."}]}


def test_recall_fills_its_top_k_with_messages_the_session_does_not_send(tmp_path: Path, only_our_traces: None) -> None:
    # The SDK saves the run's input before the model call, and the session sends the whole thread:
    # recall's places went to that input (the best hit of its own query) and to the thread's own
    # messages, and the only block the adapter passes on (other threads) lost what it was for.
    store = open_store(tmp_path / "recall.db")
    options = MemoryOptions(semantic_recall={"top_k": 2, "message_range": 0, "scope": "resource"})
    memory = Memory(store, options, embedder=HashingEmbedder(), name="chef")
    try:
        memory.save_messages([_user(memory, "fruit", "My favourite fruit is mango."),
                              _assistant(memory, "fruit", "Mango it is.")])
        with LoopbackServer([{"text": "Hello Ada."}, {"text": "Noted."}, {"text": "Mango, Ada."}]) as server:
            session = MemorySession("chat", memory=memory, resource_id="ada")
            client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
            agent = Agent(name="chef", instructions="You are a helpful cook.",
                          model=OpenAIChatCompletionsModel(model="loopback-chat", openai_client=client))
            _run(agent, "My name is Ada, what is my name?", session)
            _run(agent, "Do I like fruit? What fruit do I like?", session)
            _run(agent, "What fruit do I like, and what is my name?", session)
            sent = server.chat_requests()
        thread = memory.recall(thread_id="chat", resource_id="ada", per_page=False).messages
        assert [m.text for m in thread if m.role == "user"] == [
            "My name is Ada, what is my name?", "Do I like fruit? What fruit do I like?",
            "What fruit do I like, and what is my name?"]
        last = sent[-1]["messages"]
        assert last[0]["role"] == "system" and "My favourite fruit is mango." in last[0]["content"]
        # The thread reached the model once, as the conversation: never again as recalled memory.
        assert [m["content"] for m in last[1:] if m["role"] == "user"] == [m.text for m in thread if m.role == "user"]
        assert "What fruit do I like, and what is my name?" not in last[0]["content"]

        # The trace holds what was sent, and the recall span says which thread recall left out and found.
        store.tracer().flush(30)
        resolver = reads.SourceResolver(store)
        runs = list(reads.load_traces_page(resolver, TraceFilters(thread_id="chat"), 0, 20).rows)
        spans = [s for run in runs for s in resolver.resolve().reader.get_trace(run.trace_id)]
        generations = [s for s in spans if s.span_type == "model_generation"]
        assert sorted(json.dumps(g.input["messages"], sort_keys=True) for g in generations) == sorted(
            json.dumps(r["messages"], sort_keys=True) for r in sent)
        recalls = [s for s in spans if s.name == "memory: recall"
                   and s.output["recall"]["query"] == "What fruit do I like, and what is my name?"]
        assert len(recalls) == 1
        found = recalls[0].output["recall"]
        own = {m.id for m in thread[:-1]}  # the thread at that call: its reply was saved after it
        # The search leaves the session's thread out by a filter: none of its messages is ranked, so
        # none is passed over after the search, and the hits are other threads' only.
        assert found["excluded_thread"] == "chat" and found["passed_over"] == [] and "excluded" not in found
        assert not {h["message_id"] for h in found["hits"]} & own
        assert {h["thread_id"] for h in found["hits"]} == {"fruit"}
        mango = next(m.id for m in memory.recall(thread_id="fruit", resource_id="ada", per_page=False).messages
                     if m.text == "My favourite fruit is mango.")
        assert mango in {h["message_id"] for h in found["hits"]}
    finally:
        store.close()


class _ResponsesServer:
    """A Responses endpoint on loopback that answers as llama.cpp's does: without echoing the
    request's ``instructions`` in the response. It keeps each request body."""

    def __init__(self, replies: list[str]) -> None:
        import http.server
        import threading

        self.replies, self.requests = list(replies), []  # type: list[str], list[dict[str, Any]]
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                owner.requests.append(body)
                n = len(owner.requests)
                payload = json.dumps({
                    "id": f"resp_{n}", "object": "response", "created_at": 0, "model": body.get("model"),
                    "status": "completed", "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7},
                    "output": [{"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                                "content": [{"type": "output_text", "text": owner.replies.pop(0),
                                             "annotations": []}]}]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "_ResponsesServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


def test_a_responses_call_is_traced_with_the_instructions_it_sent_when_the_server_does_not_echo_them(
        memory: Memory, only_our_traces: None) -> None:
    # The trace took a Responses call's instructions from the response only; llama.cpp's server does
    # not echo them, so the Studio showed the call without its system text: the agent's instructions,
    # working memory and the recalled block the model did receive.
    from agents import OpenAIResponsesModel

    memory.save_messages([_user(memory, "fruit", "My favourite fruit is mango.")])
    with _ResponsesServer(["Hello.", "Mango."]) as server:
        session = MemorySession("resp", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        agent = Agent(name="chef", instructions="You are a helpful cook.",
                      model=OpenAIResponsesModel(model="local-responses", openai_client=client))
        _run(agent, "Hi there.", session)
        _run(agent, "Which fruit do I like?", session)
        sent = server.requests
    assert len(sent) == 2 and "My favourite fruit is mango." in sent[1]["instructions"]

    memory.store.tracer().flush(30)
    resolver = reads.SourceResolver(memory.store)
    runs = list(reads.load_traces_page(resolver, TraceFilters(thread_id="resp"), 0, 20).rows)
    generations = [s for run in runs for s in resolver.resolve().reader.get_trace(run.trace_id)
                   if s.span_type == "model_generation"]
    traced = sorted(json.dumps(g.input["messages"], sort_keys=True) for g in generations)
    expected = sorted(json.dumps([{"role": "system", "content": r["instructions"]}, *r["input"]], sort_keys=True)
                      for r in sent)
    assert traced == expected


def test_a_responses_call_replays_exactly_the_body_the_server_received(memory: Memory, only_our_traces: None) -> None:
    # The Responses API sends instructions and input items, not chat messages: the turn's record keeps
    # them as sent, and Replay shows that body whole (tools and settings too).
    from agents import ModelSettings, OpenAIResponsesModel

    with _ResponsesServer(["Hello."]) as server:
        session = MemorySession("resp-replay", memory=memory, resource_id="ada")
        client = AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        agent = Agent(name="chef", instructions="You are a helpful cook.", tools=session.tools(),
                      model=OpenAIResponsesModel(model="local-responses", openai_client=client),
                      model_settings=ModelSettings(temperature=0.4))
        _run(agent, "Hi there.", session)
        (sent,) = server.requests
    assert sent["tools"] and sent["temperature"] == 0.4
    first = memory.recall(thread_id="resp-replay", resource_id="ada", per_page=False).messages[0]
    prompt = memory.assemble(thread_id="resp-replay", resource_id="ada", as_of=first.id)
    info = prompt.replay
    assert info is not None and info.status == "recorded (exact)"
    assert [c.request for c in info.calls] == [{k: v for k, v in sent.items() if k not in ("stream", "stream_options")}]
    assert prompt.messages == [{"role": "system", "content": sent["instructions"]}, *sent["input"]]
