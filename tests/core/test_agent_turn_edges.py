"""What the chat playground relies on from the engine: a failed turn leaves nothing behind (history and
recall index alike), and an agent's registration records its instructions."""

from __future__ import annotations

import pytest

from core import Agent, Memory, MemoryOptions, open_store
from core.agent_configs import list_agents, named_agent
from core.embedding import HashingEmbedder
from core.llm import ModelError, ScriptedModel


def counts(store) -> dict[str, int]:
    """Rows per table; a table that does not exist (the vector table before the first write) counts 0."""
    from core.storage.catalog import has_table

    with store.db.read() as conn:
        return {t: int(conn.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar() or 0) if has_table(conn, t) else 0
                for t in ("mastra_messages", "mastra_threads", "memory_messages_64", "memory_studio_fts_docs")}


def test_a_failed_model_call_indexes_nothing_either(tmp_path):
    # Regression: recall's output step indexed the input of a turn whose model call failed, although
    # history did not save it: a vector and a keyword entry for a message that does not exist.
    store = open_store(tmp_path / "m.db")
    mem = Memory(store, MemoryOptions(semantic_recall={"enabled": True}), embedder=HashingEmbedder(64))
    agent = Agent("a", instructions="be brief", model=ScriptedModel([ModelError("boom", model_id="x")]), memory=mem,
                  tracer=False)
    with pytest.raises(ModelError):
        agent.generate("remember: peanuts", memory={"resource": "r", "thread": "t"})
    assert counts(store) == {"mastra_messages": 0, "mastra_threads": 0, "memory_messages_64": 0,
                             "memory_studio_fts_docs": 0}
    ok = Agent("a", instructions="be brief", model=ScriptedModel(["noted"]), memory=mem, tracer=False)
    ok.generate("remember: peanuts", memory={"resource": "r", "thread": "t"})
    assert counts(store) == {"mastra_messages": 2, "mastra_threads": 1, "memory_messages_64": 2,
                             "memory_studio_fts_docs": 2}
    store.close()


def test_an_agent_records_its_instructions_when_it_registers(tmp_path):
    store = open_store(tmp_path / "m.db")
    Agent("chef", instructions="You plan meals. Never suggest peanuts.", model=ScriptedModel([]),
          memory=Memory(store, name="chef-memory"))
    chef = named_agent(store, "chef")
    assert chef.instructions == "You plan meals. Never suggest peanuts."
    assert chef.memory_name == "chef-memory"
    Memory(store, name="bare").register("bare")  # registered without an agent: nothing to record
    assert [a.instructions for a in list_agents(store) if a.name == "bare"] == [None]
    store.close()


@pytest.mark.parametrize("when", ["9999-12-31T12:00:00.000Z", "0001-01-01T00:00:00.000Z"])
def test_a_message_dated_at_the_ends_of_time_is_refused_with_a_reason(tmp_path, when):
    """A message dated on the last (or first) day Python holds was stored, and then every turn of its
    thread failed with Python's OverflowError: the next input is stamped a millisecond after the newest
    message (import refused such times already). It is refused when saved, saying why; nothing is saved."""
    from core import Message
    from core.messages import MessageFormatError

    store = open_store(tmp_path / "m.db")
    mem = Memory(store, MemoryOptions(last_messages=5))
    mem.create_thread(resource_id="u", thread_id="t")
    with pytest.raises(MessageFormatError) as caught:
        mem.save_messages([Message.user("hello", thread_id="t", resource_id="u", created_at="2026-01-01T00:00:00.000Z"),
                           Message.user("from the end of time", thread_id="t", resource_id="u", created_at=when)])
    assert "outside the times the engine can work with" in str(caught.value) and "Nothing was saved" in str(caught.value)
    assert store.memory.count_messages("t") == 0
    agent = Agent("a", instructions="be brief", model=ScriptedModel(["ok"]), memory=mem, tracer=False)
    assert agent.generate("still works", memory={"resource": "u", "thread": "t"}).text == "ok"
    store.close()
