"""Mastra parity (issue 19): default observer, resource-scoped observations, generated titles, re-sent
conversations stored once, ``Memory.recall`` with a search string, porting options, models by name,
memory factories visible to the Studio. Through the public API, on real databases."""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Any

import pytest

from core import Agent, ConfigurationError, Memory, MemoryOptions, Message, OptionsError
from core.agent_configs import list_agents, named_agent
from core.embedding import HashingEmbedder
from core.llm import OpenAICompatibleModel, ScriptedModel
from core.llm.providers import PROVIDERS, resolve_model
from core.observational import load_current
from core.observational.context import TAG as OM_TAG
from core.timeutil import FixedClock
from core.tokens import EstimatingTokenizer

pytestmark = pytest.mark.backends

T0 = datetime(2025, 5, 1, 10, 0, tzinfo=timezone.utc)
OBSERVED = ("<observations>\nDate: May 1, 2025\n* 🔴 (10:00) User {what}.\n</observations>\n"
            "<current-task>\nPrimary: {what}\n</current-task>")


# -- 3. a default observer ------------------------------------------------------------------------------
def test_observational_memory_true_uses_the_agents_own_model(store: Any) -> None:
    def actor(messages: list[dict[str, Any]], tools: Any) -> str:
        if "## New Message History to Observe" in str(messages[-1]["content"]):
            return OBSERVED.format(what="asked about tomatoes")
        return "Water them in the morning. " + "more " * 30

    model = ScriptedModel(actor, name="actor")
    memory = Memory(store, MemoryOptions(observational_memory={"message_tokens": 150, "buffer_tokens": False}),
                    tokenizer=EstimatingTokenizer())
    agent = Agent("gardener", instructions="Help.", model=model, memory=memory, tracer=False)  # no refusal
    for i in range(4):
        agent.generate(f"How do I grow tomatoes, part {i}? " + "words " * 20, memory={"resource": "u", "thread": "t"})
    observer_calls = [r for r in model.requests if "## New Message History to Observe" in str(r.messages[-1]["content"])]
    assert observer_calls, "the agent's own model observed the thread"
    record = load_current(store, thread_id="t")
    assert record is not None and "asked about tomatoes" in record.active_observations
    assert record.config["observation"]["model"] == "scripted/actor"


# -- 2. resource scope ------------------------------------------------------------------------------------
def test_resource_scope_observations_reach_other_threads_attributed_to_their_thread(store: Any) -> None:
    def observer(messages: list[dict[str, Any]], tools: Any) -> str:
        history = str(messages[-1]["content"])
        return OBSERVED.format(what="plans a trip to Oslo" if "Oslo" in history else "likes green tea")

    memory = Memory(store, MemoryOptions(observational_memory={"scope": "resource", "message_tokens": 150}),
                    observer_model=ScriptedModel(observer, name="observer"), tokenizer=EstimatingTokenizer(),
                    clock=FixedClock(T0))
    agent = Agent("travel", instructions="Help.", model=ScriptedModel(lambda m, t: "Noted. " + "x " * 25),
                  memory=memory, tracer=False)
    for i in range(3):
        agent.generate(f"I am planning a trip to Oslo, detail {i}. " + "plan " * 15,
                       memory={"resource": "ada", "thread": "trip"})
    agent.generate("Another topic: I like green tea. " + "tea " * 15, memory={"resource": "ada", "thread": "tea"})
    result = agent.generate("What do you remember? " + "q " * 15, memory={"resource": "ada", "thread": "tea"})
    prompt = result.prompts[0]
    chunks = [f for f in prompt.fragments if f.tag == OM_TAG and f.detail.get("part") == "chunk"]
    assert any("Oslo" in f.text and f.detail.get("thread") == "trip" for f in chunks)
    record = load_current(store, resource_id="ada", scope="resource")
    assert record is not None and '<thread id="trip">' in record.active_observations


def test_other_threads_unobserved_messages_are_shown_in_their_own_block(store: Any) -> None:
    memory = Memory(store, MemoryOptions(observational_memory={"scope": "resource", "message_tokens": 10_000}),
                    observer_model=ScriptedModel(lambda m, t: "unused", name="observer"),
                    tokenizer=EstimatingTokenizer())
    agent = Agent("travel", instructions="Help.", model=ScriptedModel(lambda m, t: "Noted."), memory=memory,
                  tracer=False)
    agent.generate("My passport expires in June.", memory={"resource": "ada", "thread": "docs"})
    result = agent.generate("Which trains go to Bergen?", memory={"resource": "ada", "thread": "trains"})
    blocks = [f for f in result.prompts[0].fragments if f.detail.get("part") == "other-conversations"]
    assert len(blocks) == 1 and "passport expires in June" in blocks[0].text
    assert blocks[0].detail["threads"] == ["docs"]
    # The thread's own messages are raw history, not in the block.
    assert "Bergen" not in blocks[0].text


# -- 6. generated titles ------------------------------------------------------------------------------------
def test_a_title_is_generated_in_the_background_once_and_only_for_untitled_threads(store: Any) -> None:
    events: list[str] = []
    gate = threading.Event()

    def titler(messages: list[dict[str, Any]], tools: Any) -> str:
        events.append("title-start")
        gate.wait(30)
        events.append("title-end")
        return '"Tomato Growing Tips"'

    title_model = ScriptedModel(titler, name="titler")
    memory = Memory(store, MemoryOptions(generate_title={"model": title_model, "instructions": "Name it."}))
    agent = Agent("gardener", instructions="Help.", model=ScriptedModel(lambda m, t: "Sure."), memory=memory,
                  tracer=False)
    agent.generate("How do I grow tomatoes?", memory={"resource": "u", "thread": "t"})
    events.append("turn-1")
    assert memory.get_thread("t").title == ""  # the turn did not wait for its title
    gate.set()
    assert memory.wait_idle(30)
    assert events.index("turn-1") < events.index("title-end")
    assert memory.get_thread("t").title == "Tomato Growing Tips"
    assert title_model.requests[0].messages[0] == {"role": "system", "content": "Name it."}
    agent.generate("And peppers?", memory={"resource": "u", "thread": "t"})
    assert memory.wait_idle(30) and len(title_model.requests) == 1  # generated once
    memory.create_thread(resource_id="u", thread_id="named", title="My own title")
    agent.generate("Hello", memory={"resource": "u", "thread": "named"})
    assert memory.wait_idle(30) and memory.get_thread("named").title == "My own title"
    assert len(title_model.requests) == 1


def test_without_a_title_model_the_agents_model_names_the_thread(store: Any) -> None:
    def actor(messages: list[dict[str, Any]], tools: Any) -> str:
        return "Bread Baking" if "Write a title" in str(messages[0]["content"]) else "Knead it well."

    memory = Memory(store, MemoryOptions(generate_title=True))
    agent = Agent("baker", instructions="Help.", model=ScriptedModel(actor), memory=memory, tracer=False)
    agent.generate("How long do I knead dough?", memory={"resource": "u", "thread": "bread"})
    assert memory.wait_idle(30)
    assert memory.get_thread("bread").title == "Bread Baking"


# -- 7. re-sent conversations ------------------------------------------------------------------------------
def test_a_re_sent_conversation_is_stored_once(store: Any) -> None:
    memory = Memory(store)
    agent = Agent("echo", instructions="Help.", model=ScriptedModel(lambda m, t: "Reply."), memory=memory,
                  tracer=False)
    where = {"resource": "u", "thread": "t"}
    agent.generate("first question", memory=where)
    # An OpenAI-style client sends the whole conversation again, with new ids.
    result = agent.generate([Message.user("first question"), Message.assistant("Reply."),
                             Message.user("second question")], memory=where)
    stored = memory.recall(thread_id="t", per_page=False).messages
    assert [m.text for m in stored] == ["first question", "Reply.", "second question", "Reply."]
    sent = [m["content"] for m in result.prompts[0].messages if m["role"] == "user"]
    assert sent == ["first question", "second question"]  # the model saw each once


def test_retain_full_input_keeps_the_old_behaviour(store: Any) -> None:
    memory = Memory(store)
    agent = Agent("echo", instructions="Help.", model=ScriptedModel(lambda m, t: "Reply."), memory=memory,
                  tracer=False)
    where = {"resource": "u", "thread": "t"}
    agent.generate("first question", memory=where)
    agent.generate([Message.user("example question"), Message.assistant("example answer"),
                    Message.user("second question")], memory=where, options={"retain_full_input": True})
    stored = [m.text for m in memory.recall(thread_id="t", per_page=False).messages]
    assert stored == ["first question", "Reply.", "example question", "example answer", "second question", "Reply."]


def test_a_new_thread_keeps_the_whole_input_as_its_seed(store: Any) -> None:
    memory = Memory(store)
    agent = Agent("echo", instructions="Help.", model=ScriptedModel(lambda m, t: "Reply."), memory=memory,
                  tracer=False)
    agent.generate([Message.user("a"), Message.assistant("b"), Message.user("c")],
                   memory={"resource": "u", "thread": "fresh"})
    assert [m.text for m in memory.recall(thread_id="fresh", per_page=False).messages] == ["a", "b", "c", "Reply."]


# -- 8. recall with a search string --------------------------------------------------------------------------
def test_recall_with_a_search_string_returns_newest_plus_hits_with_ranges(store: Any) -> None:
    memory = Memory(store, MemoryOptions(last_messages=2, semantic_recall={"top_k": 1, "message_range": 1}),
                    embedder=HashingEmbedder())
    texts = ["I adopted a grey cat named Pixel", "What a lovely name", "Let us talk about taxes",
             "Taxes are due in April", "And the weather today", "Sunny and warm"]
    memory.save_messages([Message.create("user" if i % 2 == 0 else "assistant", [{"type": "text", "text": t}],
                                         thread_id="t", resource_id="u") for i, t in enumerate(texts)])
    plain = memory.recall(thread_id="t", resource_id="u")
    assert [m.text for m in plain.messages] == texts[-2:] and plain.hits == []
    found = memory.recall(thread_id="t", resource_id="u", vector_search_string="grey cat Pixel")
    assert [m.text for m in found.messages] == [texts[0], texts[1], texts[4], texts[5]]
    assert len(found.hits) == 1 and found.hits[0].message_id == found.messages[0].id
    assert found.hits[0].message_ids == (found.messages[0].id, found.messages[1].id)
    none = memory.recall(thread_id="t", resource_id="u", vector_search_string="grey cat Pixel", threshold=2.0)
    assert none.hits == [] and [m.text for m in none.messages] == texts[-2:]
    more = memory.recall(thread_id="t", resource_id="u", vector_search_string="taxes April cat", top_k=3)
    assert len(more.hits) == 3
    with pytest.raises(ValueError, match="vector_search_string"):
        memory.recall(thread_id="t", resource_id="u", top_k=3)


# -- 9. porting options -------------------------------------------------------------------------------------
MASTRA = {
    "lastMessages": 20,
    "semanticRecall": {"topK": 3, "messageRange": {"before": 2, "after": 1}, "scope": "resource", "threshold": 0.6},
    "workingMemory": {"enabled": True, "scope": "thread", "template": "# User\n- Name:\n", "version": "vnext"},
    "observationalMemory": {"model": "ollama/llama3.1", "scope": "thread",
                            "observation": {"messageTokens": 20_000, "bufferTokens": 0.1, "blockAfter": 1.5,
                                            "modelSettings": {"temperature": 0.2}},
                            "reflection": {"observationTokens": 30_000, "bufferActivation": 0.4}},
    "generateTitle": {"model": "openai/gpt-4o-mini", "instructions": "Three words."},
    "messageHistory": {"maxTokens": 8000, "atMaxRemoveTokens": 1000},
    "readOnly": False,
    "retainFullInput": True,
}


def test_from_mastra_reads_mastras_options_and_to_mastra_gives_them_back() -> None:
    options = MemoryOptions.from_mastra(MASTRA)
    assert options.last_messages == 20 and options.retain_full_input
    sr = options.semantic_recall
    assert (sr.top_k, sr.message_range.before, sr.message_range.after, sr.threshold) == (3, 2, 1, 0.6)
    assert options.working_memory.version == "vnext" and options.working_memory.scope == "thread"
    om = options.observational_memory
    assert (om.message_tokens, om.buffer_tokens, om.block_after, om.observer_temperature) == (20_000, 0.1, 1.5, 0.2)
    assert (om.observer_model, om.reflector_model, om.reflection_buffer_activation) == (
        "ollama/llama3.1", "ollama/llama3.1", 0.4)
    assert options.generate_title.model == "openai/gpt-4o-mini"
    assert options.message_history.max_tokens == 8000
    assert MemoryOptions.from_mastra(options.to_mastra()) == options
    assert MemoryOptions.from_mastra(MemoryOptions().to_mastra()) == MemoryOptions()
    assert MemoryOptions.from_mastra({"semanticRecall": True, "observationalMemory": True}).semantic_recall.enabled


@pytest.mark.parametrize("bad, nearest", [
    ({"lastMessage": 5}, "'lastMessages'"),
    ({"semanticRecall": {"topk": 3}}, "'semanticRecall.topK'"),
    ({"workingMemory": {"enabeld": True}}, "'workingMemory.enabled'"),
    ({"observationalMemory": {"observation": {"messageToken": 10}}}, "'observationalMemory.observation.messageTokens'"),
    # a nested key written at the top level names its section (it was "'maxMessageBytes'" or no hint)
    ({"topk": 3}, "'semanticRecall.topK'"),
    ({"messageRange": 2}, "'semanticRecall.messageRange'"),
    ({"template": "# User"}, "'workingMemory.template'"),
    ({"messageTokens": 10}, "'observationalMemory.observation.messageTokens'"),
])
def test_unknown_keys_are_refused_with_the_nearest_known_name(bad: dict[str, Any], nearest: str) -> None:
    with pytest.raises(OptionsError, match=f"Did you mean {nearest}"):
        MemoryOptions.from_mastra(bad)


def test_mastra_options_without_an_equivalent_say_what_to_do() -> None:
    with pytest.raises(OptionsError, match="no equivalent in Memory Studio"):
        MemoryOptions.from_mastra({"observationalMemory": {"shareTokenBudget": True}})


# -- 10. models by name -------------------------------------------------------------------------------------
def test_models_by_name_resolve_through_the_provider_table() -> None:
    env = {"OPENAI_API_KEY": "sk-test-000000000000", "GROQ_API_KEY": "gsk-test-0000000000",
           "OLLAMA_BASE_URL": "http://gpu-box:11434/v1"}
    openai = resolve_model("openai/gpt-4o-mini", environ=env)
    assert isinstance(openai, OpenAICompatibleModel)
    assert (openai.model, openai.base_url, openai.model_id) == ("gpt-4o-mini", "https://api.openai.com/v1",
                                                               "openai/gpt-4o-mini")
    assert resolve_model("ollama/llama3.1", environ=env).base_url == "http://gpu-box:11434/v1"
    assert resolve_model("lmstudio/qwen2.5-7b", environ={}).base_url == "http://localhost:1234/v1"
    assert resolve_model("groq/llama-3.1-8b-instant", environ=env).base_url == "https://api.groq.com/openai/v1"
    routed = resolve_model("openrouter/anthropic/claude-3.5-sonnet", environ={"OPENROUTER_API_KEY": "sk-or-000000000"})
    assert routed.model == "anthropic/claude-3.5-sonnet"
    for name in ("openai", "ollama", "lmstudio", "vllm", "openrouter", "groq", "deepseek", "mistral"):
        assert name in PROVIDERS


def test_an_unknown_provider_or_a_missing_key_fails_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="Unknown model provider 'opanai'.*Did you mean 'openai/gpt-4o'"):
        Agent("a", instructions="x", model="opanai/gpt-4o")
    with pytest.raises(ConfigurationError, match="DEEPSEEK_API_KEY"):
        Agent("a", instructions="x", model="deepseek/deepseek-chat")
    with pytest.raises(ConfigurationError, match="provider/model"):
        Agent("a", instructions="x", model="gpt-4o")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-111111111111")
    agent = Agent("a", instructions="x", model="openai/gpt-4o-mini")
    assert agent.model.model_id == "openai/gpt-4o-mini"


def test_a_model_name_reaches_a_real_server(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.llm import LoopbackServer

    with LoopbackServer(ScriptedModel(lambda m, t: "Hello from the loopback.")) as server:
        monkeypatch.setenv("VLLM_BASE_URL", server.base_url)
        agent = Agent("a", instructions="x", model="vllm/served-model", memory=Memory(store), tracer=False)
        assert agent.generate("hi", memory={"resource": "u", "thread": "t"}).text == "Hello from the loopback."


# -- 11. memory factories ------------------------------------------------------------------------------------
def test_agents_built_by_a_memory_factory_are_registered(store: Any) -> None:
    free = Memory(store, MemoryOptions(last_messages=4), name="free")
    paid = Memory(store, MemoryOptions(last_messages=40, working_memory={"enabled": True}), name="paid")

    def by_tier(ctx: Any) -> Memory:
        return paid if ctx.get("tier") == "paid" else free

    agent = Agent("support", instructions="You help customers.", model=ScriptedModel(lambda m, t: "Hi."),
                  memory=by_tier, tracer=False)
    assert list_agents(store) == []  # nothing is known before a request resolves a memory
    agent.generate("hello", memory={"resource": "u1", "thread": "t1"}, request_context={"tier": "free"})
    agent.generate("hello", memory={"resource": "u2", "thread": "t2"}, request_context={"tier": "paid"})
    registered = {a.name: a for a in list_agents(store)}
    assert set(registered) == {"support", "support:paid"}
    assert registered["support"].options["last_messages"] == 4
    assert registered["support:paid"].options["working_memory"]["enabled"] is True
    assert named_agent(store, "support:paid").instructions == "You help customers."
    from core.agent_configs import agent_for_thread

    assert agent_for_thread(store, "t2").agent.name == "support:paid"  # each thread shows its own memory
    assert agent_for_thread(store, "t1").agent.name == "support"


def test_the_gateway_serves_an_agent_named_by_its_model(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``memory-studio serve --model vllm/served-model``: one agent with a default memory."""
    import openai

    from core.gateway import GatewayServer, create_app
    from core.gateway.cli import model_agent
    from core.llm import LoopbackServer

    with LoopbackServer(ScriptedModel(lambda m, t: "Hello through the gateway.")) as upstream:
        monkeypatch.setenv("VLLM_BASE_URL", upstream.base_url)
        agents = model_agent("vllm/served-model", name="helper", instructions="Be brief.",
                             db=str(tmp_path / "gateway.db"))
        assert agents["helper"].model.model_id == "vllm/served-model"
        with GatewayServer(create_app(agents)) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0)
            reply = client.chat.completions.create(model="helper", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "Hello through the gateway."
        assert upstream.model.requests[-1].max_tokens is None  # no cap unless asked (the server's own)
        # ``serve --model ... --max-tokens 64``: every reply of the agent is capped, whatever the client asks.
        capped = model_agent("vllm/served-model", name="helper", instructions="Be brief.",
                             db=str(tmp_path / "gateway.db"), max_tokens=64)
        with GatewayServer(create_app(capped)) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0)
            client.chat.completions.create(model="helper", messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=4000)
        assert upstream.model.requests[-1].max_tokens == 64
    with pytest.raises(ConfigurationError, match="Did you mean 'vllm/served-model'"):
        model_agent("vlm/served-model", name="helper", instructions="x", db=str(tmp_path / "gateway.db"))
