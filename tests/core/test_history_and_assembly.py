"""Message history, MessageList and the assembled prompt (spec §4 items 1–12, §2.2, §2.7)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from core import (
    Memory,
    MemoryOptions,
    Message,
    MessageList,
    OptionsError,
    Provenance,
    ScopeConflictError,
    ThreadOwnershipError,
)
from core.messages import tool_invocation_part, text_part
from core.processors.base import BaseProcessor

# Engine behaviour: every test here runs on libSQL and on Postgres.
pytestmark = pytest.mark.backends

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def seed(memory: Memory, thread: str = "thread-1", resource: str = "resource-1", n: int = 3) -> list[Message]:
    memory.create_thread(resource_id=resource, thread_id=thread)
    msgs = [
        Message.create("user" if i % 2 == 0 else "assistant", [text_part(f"Message {i + 1}")], id=f"msg-{i + 1}",
                       thread_id=thread, resource_id=resource, created_at=at(i))
        for i in range(n)
    ]
    memory.save_messages(msgs)
    return msgs


def conv_ids(prompt) -> list[str]:
    return [f.detail.get("messageId") for f in prompt.fragments if f.kind in ("memory", "input", "context")]


def test_fetches_last_n_messages(store):
    mem = Memory(store, MemoryOptions(last_messages=2))
    seed(mem)
    prompt = mem.assemble(thread_id="thread-1", resource_id="resource-1",
                          input=[Message.user("Message 4", id="msg-4", created_at=at(10))])
    assert conv_ids(prompt) == ["msg-2", "msg-3", "msg-4"]


def test_history_merges_before_new_input(store):
    mem = Memory(store)
    mem.create_thread(resource_id="r", thread_id="t")
    mem.save_messages([Message.user("Historical", thread_id="t", resource_id="r",
                                    created_at=datetime.now(timezone.utc) - timedelta(seconds=10))])
    prompt = mem.assemble(thread_id="t", resource_id="r", input="New")
    assert [m["content"] for m in prompt.messages] == ["Historical", "New"]


def test_same_id_in_input_replaces_stored_copy(store):
    mem = Memory(store)
    seed(mem)
    prompt = mem.assemble(thread_id="thread-1", resource_id="resource-1",
                          input=[Message.user("Message 2 (new)", id="msg-2")])
    texts = [m["content"] for m in prompt.messages]
    assert texts == ["Message 1", "Message 2 (new)", "Message 3"]


def test_no_thread_leaves_list_unchanged(store):
    prompt = Memory(store).assemble(input="hi")
    assert [m["content"] for m in prompt.messages] == ["hi"]
    assert "message-history" in prompt.skipped


def test_storage_errors_propagate(store):
    mem = Memory(store)
    seed(mem)

    def boom(*_a, **_k):
        raise RuntimeError("disk on fire")

    store.memory.list_messages = boom  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="disk on fire"):
        mem.assemble(thread_id="thread-1", resource_id="resource-1", input="x")


def test_tool_invocation_history_is_loaded_intact(store):
    mem = Memory(store)
    mem.create_thread(resource_id="r", thread_id="t")
    assistant = Message.assistant(
        "It is sunny.", parts=[tool_invocation_part("c1", "getWeather", {"city": "Oslo"}, {"temp": 4})],
        thread_id="t", resource_id="r",
    )
    mem.save_messages([Message.user("Weather?", thread_id="t", resource_id="r"), assistant])
    loaded = mem.recall(thread_id="t").messages[-1]
    assert [p["type"] for p in loaded.parts] == ["tool-invocation", "text"]
    prompt = mem.assemble(thread_id="t", resource_id="r", input="thanks")
    roles = [m["role"] for m in prompt.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]
    assert prompt.messages[1]["tool_calls"][0]["function"]["name"] == "getWeather"
    assert prompt.messages[2]["tool_call_id"] == "c1"


def test_history_leaves_out_tool_calls_that_never_got_a_result(store):
    """A stored call without its result (a client-side tool never answered; Mastra stores those) would go
    out as an assistant tool_calls message no tool message answers, which OpenAI refuses (400) on every
    later turn of the thread. History sends completed calls only, as Mastra's prompts do."""
    from core import Agent
    from core.llm import ScriptedModel

    mem = Memory(store)
    mem.create_thread(resource_id="r", thread_id="t")
    pending = Message.assistant("Let me check the browser.", parts=[
        tool_invocation_part("c1", "readClipboard", {}),  # state "call": no result ever came
        tool_invocation_part("c2", "getWeather", {"city": "Oslo"}, {"temp": 4})], thread_id="t", resource_id="r")
    only_call = Message.assistant("", parts=[tool_invocation_part("c3", "askUser", {"q": "ok?"})],
                                  thread_id="t", resource_id="r")
    mem.save_messages([Message.user("Weather?", thread_id="t", resource_id="r"), pending, only_call])
    prompt = mem.assemble(thread_id="t", resource_id="r", input="thanks")
    calls = [c["id"] for m in prompt.messages for c in m.get("tool_calls") or ()]
    answered = [m["tool_call_id"] for m in prompt.messages if m["role"] == "tool"]
    assert calls == answered == ["c2"]
    assert [m["role"] for m in prompt.messages] == ["user", "assistant", "tool", "assistant", "user"]
    model = ScriptedModel(["ok"])
    agent = Agent(name="a", instructions="Hi.", model=model, memory=mem)
    agent.generate("thanks", memory={"thread": "t", "resource": "r"})
    sent = model.requests[0].messages
    assert [c["id"] for m in sent for c in m.get("tool_calls") or ()] == ["c2"]


def test_an_input_message_of_another_resource_is_refused_before_the_model_is_called(store):
    """A message naming resource u2 given to a turn of u1 went to the model, then the save failed with
    "Thread t belongs to resource u2" (it did not): the reply was lost. Refused up front now, as an
    input naming another thread is."""
    from core import Agent, InvalidArgumentError
    from core.llm import ScriptedModel

    mem = Memory(store)
    model = ScriptedModel(["ok"])
    agent = Agent(name="a", instructions="Hi.", model=model, memory=mem)
    with pytest.raises(InvalidArgumentError, match="names resource u2, but this turn is for resource u1"):
        agent.generate(Message.user("hello", resource_id="u2"), memory={"thread": "t", "resource": "u1"})
    assert model.requests == [] and mem.get_thread("t") is None
    with pytest.raises(InvalidArgumentError, match="names resource u2"):
        mem.assemble(thread_id="t", resource_id="u1", input=Message.user("hello", resource_id="u2"))
    agent.generate(Message.user("hello", resource_id="u1"), memory={"thread": "t", "resource": "u1"})
    assert mem.get_thread("t").resource_id == "u1"


def test_a_users_attachments_and_image_parts_reach_the_model(store):
    """Images a message carries go to the model as ``image_url``, wherever the message keeps them: "file"
    parts, AI SDK "image" parts, and ``experimental_attachments`` (where Mastra keeps an AI SDK v4 client's
    attachments). Before, the last two were dropped from the request without a word."""
    m = Memory(store, MemoryOptions(last_messages=10))
    m.create_thread(thread_id="t", resource_id="u")
    stored = Message.create("user", [text_part("What is in these?"),
                                     {"type": "image", "image": "iVBORw0KGgo=", "mimeType": "image/png"}],
                            thread_id="t", resource_id="u", created_at=at(0))
    stored = stored.copy(content={**stored.content, "experimental_attachments": [
        {"url": "https://example.com/cat.jpg", "contentType": "image/jpeg", "name": "cat.jpg"},
        {"url": "data:application/pdf;base64,JVBERi0=", "contentType": "application/pdf", "name": "menu.pdf"}]})
    m.save_messages([stored, Message.assistant("A cat and a menu.", thread_id="t", resource_id="u",
                                               created_at=at(1))])
    sent = m.assemble(thread_id="t", resource_id="u", input="And now?").messages
    first = next(msg for msg in sent if msg["role"] == "user")
    assert first["content"] == [
        {"type": "text", "text": "What is in these?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "text", "text": "[file menu.pdf (application/pdf)]"},
    ]


def test_system_messages_are_never_saved_or_loaded(store):
    mem = Memory(store)
    mem.create_thread(resource_id="r", thread_id="t")
    saved = mem.save_messages([Message.system("secret system", thread_id="t"), Message.user("hi", thread_id="t")])
    assert [m.role for m in saved] == ["user"]
    # An old database that stored a system row: memory never loads it.
    with store.db.write() as conn:
        conn.exec_driver_sql(
            'INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
            "VALUES ('sys1','t','\"old system\"','system','v2','2020-01-01T00:00:00.000Z','r')"
        )
    prompt = mem.assemble(thread_id="t", resource_id="r", input="next")
    assert all("old system" not in str(m["content"]) for m in prompt.messages)


def test_last_messages_two_after_two_turns(store):
    mem = Memory(store, MemoryOptions(last_messages=2))
    mem.create_thread(resource_id="r", thread_id="t")
    for i, (u, a) in enumerate([("one", "ok"), ("two", "ok")]):
        mem.save_messages([Message.user(u, thread_id="t", resource_id="r", created_at=at(2 * i)),
                           Message.assistant(a, thread_id="t", resource_id="r", created_at=at(2 * i + 1))])
    prompt = mem.assemble(thread_id="t", resource_id="r", input="three", instructions="I")
    assert [(m["role"], m["content"]) for m in prompt.messages] == [
        ("system", "I"), ("user", "two"), ("assistant", "ok"), ("user", "three")]
    assert [m.text for m in mem.recall(thread_id="t", resource_id="r").messages] == ["two", "ok"]


def test_history_disabled_per_call(store):
    mem = Memory(store)
    seed(mem)
    prompt = mem.assemble(thread_id="thread-1", resource_id="resource-1", input="x", instructions="S",
                          options={"last_messages": False})
    assert [m["role"] for m in prompt.messages] == ["system", "user"]
    assert "message-history" not in prompt.processors


@pytest.mark.parametrize("bad", [-1, 1.5, "10", True])
def test_invalid_last_messages_rejected(bad):
    with pytest.raises(OptionsError, match="last_messages"):
        MemoryOptions(last_messages=bad)


def test_zero_disables_history(store):
    mem = Memory(store, MemoryOptions(last_messages=0))
    seed(mem)
    prompt = mem.assemble(thread_id="thread-1", resource_id="resource-1", input="x")
    assert [m["content"] for m in prompt.messages] == ["x"]


def test_recall_all_messages(store):
    mem = Memory(store, MemoryOptions(last_messages=2))
    seed(mem, n=5)
    assert len(mem.recall(thread_id="thread-1", per_page=False).messages) == 5
    result = mem.recall(thread_id="thread-1")
    assert [m.id for m in result] == ["msg-4", "msg-5"] and result.total == 5 and result.has_more


def test_recall_ownership_errors(store):
    mem = Memory(store)
    seed(mem)
    with pytest.raises(ThreadOwnershipError):
        mem.recall(thread_id="thread-1", resource_id="someone-else")
    with pytest.raises(LookupError, match="No thread found with id nope"):
        mem.recall(thread_id="nope")


def test_prompt_order_instructions_wm_conversation(store):
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True}))
    seed(mem)
    prompt = mem.assemble(thread_id="thread-1", resource_id="resource-1", input="hi", instructions="You are helpful.")
    kinds = [(f.role, f.source) for f in prompt.fragments]
    assert kinds[0] == ("system", "instructions")
    assert kinds[1] == ("system", "working-memory")
    assert [k for k in kinds[2:] if k[0] != "tools"] == [
        ("user", "message-history"), ("assistant", "message-history"), ("user", "message-history"), ("user", "input")]
    assert prompt.fragments[1].tag == "memory"


def test_fragments_carry_provenance_and_tokens(store):
    mem = Memory(store)
    seed(mem)
    prompt = mem.assemble(thread_id="thread-1", resource_id="resource-1", input="hello there")
    hist = prompt.fragments_from("message-history")
    assert [f.stored_ids for f in hist] == [("msg-1",), ("msg-2",), ("msg-3",)]
    assert all(f.tokens > 0 for f in prompt.fragments)
    assert "tiktoken" in prompt.tokenizer or "estimate" in prompt.tokenizer
    assert prompt.total_tokens >= sum(f.tokens for f in prompt.fragments)
    assert prompt.skipped.get("working-memory") is None  # not in the chain at all when disabled
    assert "working-memory" not in prompt.processors


def test_context_messages_are_sent_once_before_input_and_never_saved(store):
    mem = Memory(store)
    seed(mem)
    prompt = mem.assemble(thread_id="thread-1", resource_id="resource-1", input="question",
                          context=[Message.user("App state: cart has 3 items")])
    contents = [m["content"] for m in prompt.messages]
    assert contents[-2:] == ["App state: cart has 3 items", "question"]
    assert store.memory.count_messages("thread-1") == 3  # assembling wrote nothing


def test_context_sits_just_before_the_input_when_the_clock_reads_the_newest_messages_millisecond(store):
    # Regression: call-time context was stamped with the clock's reading, so a turn in the millisecond
    # of the thread's newest message (turns within a millisecond, a clock behind another writer's) put
    # the context before the history it should follow; the record rebuilt that order too.
    from core import Agent
    from core.llm import ScriptedModel
    from core.timeutil import FixedClock

    mem = Memory(store, MemoryOptions(last_messages=10), clock=FixedClock(T0, step_ms=0))
    model = ScriptedModel(lambda messages, tools: f"reply to {messages[-1]['content']}")
    agent = Agent("a", instructions="be brief", model=model, memory=mem, tracer=False)
    scope = {"resource": "resource-1", "thread": "thread-1"}
    agent.generate("first", memory=scope)
    result = agent.generate("second", memory=scope, context=[Message.user("App state: 1"), Message.user("App state: 2")])
    sent = [(m["role"], m["content"]) for m in model.requests[-1].messages]
    assert sent == [("system", "be brief"), ("user", "first"), ("assistant", "reply to first"),
                    ("user", "App state: 1"), ("user", "App state: 2"), ("user", "second")]
    stored = mem.recall(thread_id="thread-1", resource_id="resource-1")
    assert stored[1].text == "reply to first" and stored[1].created_at > T0  # the clock is behind it
    rebuilt = mem.assemble(as_of=result.messages[0].id, resource_id="resource-1")
    assert rebuilt.replay is not None and rebuilt.replay.matches
    assert [(m["role"], m["content"]) for m in rebuilt.messages] == sent


@pytest.mark.libsql_only  # compares the file's bytes; test_postgres_backend covers Postgres
def test_assemble_writes_nothing(store, db_path):
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True}))
    before = db_path.read_bytes()
    mem.assemble(thread_id="new-thread", resource_id="u", input="hi")
    assert mem.get_thread("new-thread") is None
    assert store.memory.list_resources() == []
    del before


def test_messagelist_system_grouping_and_dedupe():
    ml = MessageList()
    ml.add_system("A", "memory", Provenance("working-memory"))
    ml.add_system("untagged", None, Provenance("instructions"))
    ml.add_system("A", "memory", Provenance("semantic-recall"))
    ml.add_system("B", "other", Provenance("x"))
    ml.add_system("C", "memory", Provenance("semantic-recall"))
    assert [e.text for e in ml.system_entries()] == ["untagged", "A", "C", "B"]


def test_messagelist_orders_by_time_and_dedupes_equal_content():
    ml = MessageList()
    late = Message.user("late", id="b", created_at=at(5))
    early = Message.user("early", id="a", created_at=at(1))
    ml.add([late], "memory")
    ml.add([early], "input")
    ml.add([Message.user("late", id="b", created_at=at(5))], "memory")
    assert [m.id for m in ml.messages()] == ["a", "b"]
    assert {e.source for e in ml.conversation()} == {"input", "memory"}


def test_user_processor_with_same_id_replaces_builtin(store):
    class MyHistory(BaseProcessor):
        id = "message-history"

        def process_input(self, ctx):
            ctx.messages.add(Message.user("from my processor", created_at=at(0)), "memory", Provenance(self.id))

    mem = Memory(store, processors=[MyHistory()])
    seed(mem)
    prompt = mem.assemble(thread_id="thread-1", resource_id="resource-1", input="x")
    assert [m["content"] for m in prompt.messages] == ["from my processor", "x"]
    assert prompt.processors.count("message-history") == 1


def test_processor_order_matches_mastra(store):
    from core.embedding import HashingEmbedder

    mem = Memory(store, MemoryOptions(working_memory={"enabled": True}, semantic_recall=True),
                 embedder=HashingEmbedder())
    assert [p.id for p in mem.input_processors()] == [
        "memory-input-filter", "working-memory", "message-history", "semantic-recall"]
    assert [p.id for p in mem.output_processors()] == ["semantic-recall", "message-history"]


def test_memory_factory_receives_request_context(store):
    from core import resolve_memory

    premium = Memory(store, MemoryOptions(last_messages=20))
    standard = Memory(store, MemoryOptions(last_messages=5))
    factory = lambda rc: premium if rc.get("user-tier") == "enterprise" else standard  # noqa: E731
    assert resolve_memory(factory, {"user-tier": "enterprise"}) is premium
    assert resolve_memory(factory, {}) is standard


def test_scopes(store):
    mem = Memory(store)
    seed(mem)
    prompt = mem.assemble(scopes=["org:acme", "resource:resource-1", "thread:thread-1"], input="x")
    assert prompt.thread_id == "thread-1" and prompt.resource_id == "resource-1"
    req = mem.request_context(thread_id=None, resource_id=None, scopes=["org:acme", "resource:resource-1"])
    assert req.scopes == ("org:acme",)
    with pytest.raises(ScopeConflictError):
        mem.assemble(resource_id="resource-1", scopes=["resource:other"], input="x")
    with pytest.raises(ScopeConflictError):
        mem.assemble(scopes=["nonsense"], input="x")


def test_thread_of_another_resource_is_refused(store):
    mem = Memory(store)
    seed(mem)
    with pytest.raises(ThreadOwnershipError, match='belongs to resource "resource-1"'):
        mem.assemble(thread_id="thread-1", resource_id="intruder", input="x")
    with pytest.raises(ThreadOwnershipError):
        mem.save_messages([Message.user("x", thread_id="thread-1", resource_id="intruder")])
    assert store.memory.count_messages("thread-1") == 3


def test_save_auto_creates_missing_thread(store):
    mem = Memory(store)
    mem.save_messages([Message.user("hi", thread_id="fresh", resource_id="u9")])
    thread = mem.get_thread("fresh")
    assert thread is not None and thread.resource_id == "u9" and thread.title == ""


def test_batch_save_keeps_order_and_dedupes_by_id(store):
    mem = Memory(store)
    msgs = [Message.user(f"m{i}", thread_id="t", resource_id="u") for i in range(50)]
    msgs.append(Message.user("m3-updated", id=msgs[3].id, thread_id="t", resource_id="u"))
    mem.save_messages(msgs)
    texts = [m.text for m in mem.recall(thread_id="t", per_page=False)]
    assert len(texts) == 50 and texts[0] == "m0" and texts[3] == "m3-updated" and texts[-1] == "m49"


def test_as_of_rebuilds_a_stored_turn(store):
    mem = Memory(store)
    seed(mem, n=5)
    prompt = mem.assemble(thread_id="thread-1", resource_id="resource-1", as_of="msg-3")
    assert [m["content"] for m in prompt.messages] == ["Message 1", "Message 2", "Message 3"]


def test_copy_as_json_and_openai(store):
    import json

    mem = Memory(store)
    seed(mem)
    prompt = mem.assemble(thread_id="thread-1", resource_id="resource-1", input="x")
    data = json.loads(prompt.to_json())
    assert data["messages"] == prompt.messages and len(data["fragments"]) == len(prompt.fragments)
    assert json.loads(prompt.openai_messages_json()) == prompt.messages
