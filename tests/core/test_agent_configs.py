"""Which configuration an agent runs with (core/agent_configs.py): registry, overrides, the thread rule."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa

from core import Memory, MemoryOptions, Message, open_store
from core.agent_configs import (
    AgentConfig,
    agent_for_thread,
    choose_agent,
    config_versions,
    effective_options,
    effective_options_for,
    latest_override,
    list_agents,
    named_agent,
    register_agent,
    save_override,
)
from core.cli import main as cli_main
from core.storage.memory_store import Thread

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}


def cli_prompt(db_path, *args: str) -> dict:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["prompt", "--db", str(db_path), *args, "--json"], out=out, err=err)
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue())


def test_choose_agent_prefers_metadata_then_resource_name():
    a = AgentConfig("a", {}, None, None)
    b = AgentConfig("alice", {}, None, None)

    th = Thread("t", "alice", "", {"agent": "a"}, T0, T0)
    assert choose_agent([a, b], th)[0] is a
    th2 = Thread("t", "alice", "", {}, T0, T0)
    assert choose_agent([a, b], th2)[0] is b
    assert choose_agent([a], None)[0] is a
    chosen, why = choose_agent([a, AgentConfig("c", {}, None, None)], th2)
    assert chosen is None and "none is linked" in why


def test_the_agent_that_answered_last_wins(store):
    for name in ("chef", "travel"):
        Memory(store, name=name).register(name)
    Memory(store).create_thread(resource_id="u", thread_id="t", metadata={"agent": "travel"})
    store.memory.save_messages([Message.assistant("hi", thread_id="t", resource_id="u", metadata={"agent": "chef"})])
    choice = agent_for_thread(store, "t")
    assert choice.agent is not None and choice.agent.name == "chef" and "answered last" in choice.reason
    assert [a.name for a in choice.agents] == ["chef", "travel"] and choice.thread is not None


def test_effective_options_without_a_memory_match_what_the_agent_runs_with(store):
    registered = MemoryOptions(last_messages=5, working_memory={"enabled": True, "template": "# Old"})
    agent = Memory(store, registered, name="assistant")
    assert effective_options_for(store, "assistant", registered) == agent.effective_options()
    save_override(store, "assistant", template="# New\n- City:")
    per_call = {"last_messages": 2}
    assert effective_options_for(store, "assistant", registered, per_call) == agent.effective_options(per_call)
    assert effective_options_for(store, "assistant", registered).working_memory.template == "# New\n- City:"
    save_override(store, "assistant", schema=SCHEMA)
    opts = effective_options(registered, latest_override(store, "assistant"))
    assert opts.working_memory.schema == SCHEMA and opts.working_memory.template is None
    assert opts == agent.effective_options()
    # Working memory off: an override changes nothing.
    off = MemoryOptions(working_memory={"enabled": False})
    assert effective_options_for(store, "assistant", off) == off
    assert [v.kind for v in config_versions(store, "assistant") or []] == ["schema", "template"]


def test_a_database_without_the_studio_tables_has_no_agents_and_no_overrides(tmp_path):
    import sqlite3

    path = tmp_path / "mastra.db"
    con = sqlite3.connect(path)
    con.execute('CREATE TABLE mastra_threads ("id" TEXT PRIMARY KEY, "resourceId" TEXT NOT NULL, '
                '"title" TEXT NOT NULL, "metadata" TEXT, "createdAt" TEXT NOT NULL, "updatedAt" TEXT NOT NULL)')
    con.commit()
    con.close()
    with open_store(path, read_only=True, create=False) as store:
        assert list_agents(store) == [] and latest_override(store, "x") is None
        assert config_versions(store, "x") is None
        assert register_agent(store, "a", {"name": "a"}) is False


def test_an_unregistered_agent_by_name_lists_the_registered_ones(store):
    Memory(store, name="chef").register("chef")
    with pytest.raises(LookupError, match="No agent named 'cook'.*'chef'"):
        named_agent(store, "cook")


# -- the CLI uses the same rule as the Studio (these failed while the CLI had its own) -------------------

def test_cli_uses_the_only_registered_agent_for_a_thread_without_agent_metadata(db_path):
    with open_store(db_path) as s:
        m = Memory(s, MemoryOptions(last_messages=1, working_memory={"enabled": True}), name="notes")
        m.register("notes")
        m.create_thread(resource_id="u1", thread_id="t1")
        m.save_messages([Message.user("one", thread_id="t1", resource_id="u1"),
                         Message.assistant("two", thread_id="t1", resource_id="u1")])  # no metadata.agent
    data = cli_prompt(db_path, "--resource", "u1", "--thread", "t1", "three")
    assert "working-memory" in data["processors"]
    assert [m["content"] for m in data["messages"] if m["role"] != "system"] == ["two", "three"]


def test_cli_picks_the_agent_the_thread_metadata_names(db_path):
    with open_store(db_path) as s:
        Memory(s, MemoryOptions(last_messages=0), name="quiet").register("quiet")
        Memory(s, MemoryOptions(last_messages=3), name="chatty").register("chatty")
        Memory(s).create_thread(resource_id="u1", thread_id="t1", metadata={"agentId": "quiet"})
        Memory(s).save_messages([Message.user("earlier", thread_id="t1", resource_id="u1")])
    data = cli_prompt(db_path, "--resource", "u1", "--thread", "t1", "now")
    assert [m["content"] for m in data["messages"]] == ["now"]  # quiet: no history


def test_cli_applies_the_override_kept_under_the_memory_name_not_the_agent_name(db_path):
    with open_store(db_path) as s:
        m = Memory(s, MemoryOptions(working_memory={"enabled": True}), name="assistant")
        m.register("travel-agent")
        m.create_thread(resource_id="u1", thread_id="t1")
        save_override(s, "assistant", template="# Trip\n- Destination:")
    data = cli_prompt(db_path, "--resource", "u1", "--thread", "t1", "hi")
    system = "\n".join(m["content"] for m in data["messages"] if m["role"] == "system")
    assert "- Destination:" in system


def test_an_agent_registers_its_model_settings_and_tool_names_and_older_rows_still_read(store):
    """An agent's registration held its memory configuration only: a Studio chatting as it on a thread it had
    not answered knew neither its sampling settings nor its tools. They are recorded beside it now; a row an
    older engine wrote (without them) reads as "not known", not as "none"."""
    from core import Agent
    from core.agent import Tool
    from core.llm import ScriptedModel

    weather = Tool("getWeather", "Weather for a city.", lambda city: {"sky": "rain"},
                   {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    helper = Agent("sous-chef", instructions="Chop.", model=ScriptedModel([]), register=False)
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True}), name="chef-memory")
    Agent("chef", instructions="Plan meals.", model=ScriptedModel([]), memory=mem, tools=[weather], agents=[helper],
          temperature=0.4, model_settings={"maxTokens": 256, "stopSequences": ["END"]})
    chef = named_agent(store, "chef")
    assert chef.model_settings == {"temperature": 0.4, "max_tokens": 256, "stop": ["END"]}
    assert chef.tool_names == ("getWeather", "agent-sous-chef")
    assert chef.memory_name == "chef-memory" and chef.instructions == "Plan meals."  # the rest as before
    assert chef.memory_options().working_memory.enabled

    # An agent with no settings of its own registers that it has none (known: the model's defaults).
    Agent("plain", instructions="Hi.", model=ScriptedModel([]), memory=Memory(store, name="plain-memory"))
    plain = named_agent(store, "plain")
    assert (plain.model_settings, plain.tool_names) == ({}, ())

    # A row without the keys (an older engine; Memory.register on its own): not known.
    Memory(store, name="bare").register("bare-agent")
    bare = named_agent(store, "bare-agent")
    assert (bare.model_settings, bare.tool_names) == (None, None)
    register_agent(store, "odd", {"name": "odd", "options": {}, "modelSettings": "hot", "tools": "x"})
    odd = named_agent(store, "odd")
    assert (odd.model_settings, odd.tool_names) == (None, None)


def test_options_a_newer_engine_registered_are_read_without_the_names_this_one_does_not_know(store):
    """A fleet on one database is upgraded one host at a time: an agent of the newer version registered
    `observational_memory.max_tokens_per_batch`, and the older Studio's Replay and Prompt refused the agent's
    options ("Unknown observational_memory option(s): max_tokens_per_batch. Run the agent again…"), which
    running it again could not cure. Unknown top-level names were already dropped; a section's are too now."""
    mem = Memory(store, MemoryOptions(last_messages=7, observational_memory={"enabled": True, "message_tokens": 900},
                                      semantic_recall={"enabled": True, "top_k": 3}), name="om-memory")
    from core import Agent
    from core.llm import ScriptedModel

    Agent("scribe", instructions="Note.", model=ScriptedModel([]), memory=mem)  # registers itself
    with store.db.write() as conn:  # as a newer engine would have written it
        raw = conn.execute(sa.text("SELECT config FROM memory_studio_agents WHERE name = 'scribe'")).scalar()
        config = json.loads(raw)
        config["options"]["observational_memory"]["a_future_knob"] = 5
        config["options"]["semantic_recall"]["another_one"] = True
        config["options"]["a_future_section"] = {"x": 1}
        conn.execute(sa.text("UPDATE memory_studio_agents SET config = :c WHERE name = 'scribe'"),
                     {"c": json.dumps(config)})
    scribe = named_agent(store, "scribe")
    options = scribe.memory_options()
    assert options.last_messages == 7 and options.observational_memory.message_tokens == 900
    assert options.semantic_recall.top_k == 3
    # A value this engine knows and finds wrong is still refused, naming the row to correct.
    with store.db.write() as conn:
        config["options"]["observational_memory"]["message_tokens"] = -1
        conn.execute(sa.text("UPDATE memory_studio_agents SET config = :c WHERE name = 'scribe'"),
                     {"c": json.dumps(config)})
    with pytest.raises(Exception, match="registered memory options that cannot be used"):
        named_agent(store, "scribe").memory_options()


def test_a_newer_engines_options_are_named_and_kept_through_a_studio_edit_and_an_export_import(tmp_path):
    """An agent of a newer version registered options this one does not know (a fleet upgraded one host at a time):
    the engine reads its options without them. Which ones it leaves out is said (``ignored_options``, shown by the
    Studio), and nothing loses them: a template saved in the Studio for its memory and the CLI's export and import
    leave the registration as the newer engine wrote it (found by s35-walk11: checked, none rewrote it)."""
    from core import Agent
    from core.llm import ScriptedModel

    source, target, dump = tmp_path / "source.db", tmp_path / "target.db", tmp_path / "ada.json"
    with open_store(source) as store:
        mem = Memory(store, MemoryOptions(working_memory={"enabled": True},
                                          observational_memory={"enabled": False}), name="scribe-memory")
        agent = Agent("scribe", instructions="Note.", model=ScriptedModel(["Noted."]), memory=mem, tracer=False)
        agent.generate("I like tea", memory={"resource": "ada", "thread": "t-tea"})
        with store.db.write() as conn:  # as the newer engine wrote it
            config = json.loads(conn.execute(sa.text(
                "SELECT config FROM memory_studio_agents WHERE name = 'scribe'")).scalar())
            config["options"]["working_memory"]["a_future_knob"] = 5
            config["options"]["a_future_section"] = {"x": 1}
            written = json.dumps(config)
            conn.execute(sa.text("UPDATE memory_studio_agents SET config = :c WHERE name = 'scribe'"), {"c": written})
        scribe = named_agent(store, "scribe")
        assert set(scribe.ignored_options()) == {"working_memory.a_future_knob", "a_future_section"}
        assert scribe.memory_options().working_memory.enabled  # (read without them)
        assert named_agent(store, "scribe").config == config
        # The Studio's edit of this agent's memory: a template override (the one configuration edit it saves).
        save_override(store, scribe.memory_name, template="# Notes\n- Drinks:")
        assert named_agent(store, "scribe").config == config
        assert effective_options_for(store, scribe.memory_name, scribe.memory_options()).working_memory.template == \
            "# Notes\n- Drinks:"
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["export", "--db", str(source), "--resource", "ada", "-o", str(dump)], out=out, err=err) == 0, \
        err.getvalue()
    assert cli_main(["import", "--db", str(target), str(dump)], out=out, err=err) == 0, err.getvalue()
    with open_store(target) as store:
        copied = named_agent(store, "scribe")
        assert copied.config == config
        assert set(copied.ignored_options()) == {"working_memory.a_future_knob", "a_future_section"}
    # A registration of this engine's own options names none.
    with open_store(tmp_path / "plain.db") as store:
        Agent("plain", instructions="Hi.", model=ScriptedModel([]), memory=Memory(store), tracer=False)
        assert named_agent(store, "plain").ignored_options() == ()
