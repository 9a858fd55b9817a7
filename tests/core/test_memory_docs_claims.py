"""Claims of the memory documents that held without a test of their own (the session-memory write-up: one
conversation file the next process continues, a gateway restarted on it continues a client's conversation by
its id, and a trace file beside it can be deleted to start the traces over without touching a conversation;
Mastra's persistence filter: a tool call still streaming in is never stored)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import pytest

import openai

from core import Memory, MemoryOptions, Message, open_store
from core.agent import Agent
from core.gateway import GatewayServer, create_app
from core.llm import ScriptedModel
from core.traces.store import DuckDBObservabilityStore

RUN = textwrap.dedent("""
    import json, sys
    from core import Memory, ScriptedModel, open_store
    from core.agent import Agent

    store = open_store(sys.argv[1])
    memory = Memory(store)
    agent = Agent("chat", instructions="I", model=ScriptedModel(["noted: " + sys.argv[2]]), memory=memory)
    result = agent.generate(sys.argv[2], memory={"resource": "ada", "thread": "conversation-1"})
    sent = [m.get("content") for m in result.prompts[0].messages]
    memory.wait_idle(30)
    store.close()
    print(json.dumps(sent))
""")


def _turn(script: Path, db: Path, text: str) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    done = subprocess.run([sys.executable, str(script), str(db), text], env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.libsql_only
def test_a_new_process_continues_the_conversation_and_deleting_the_trace_file_loses_none_of_it(tmp_path):
    script = tmp_path / "turn.py"
    script.write_text(RUN)
    db = tmp_path / ".temp" / "memory.db"  # a folder that does not exist yet is made
    _turn(script, db, "my favourite colour is blue")
    sent = _turn(script, db, "what is my favourite colour?")  # another process: history from the file
    assert sent[1:] == ["my favourite colour is blue", "noted: my favourite colour is blue",
                        "what is my favourite colour?"]
    traces = db.with_name("observability.duckdb")
    assert len(list(DuckDBObservabilityStore(traces, read_only=True).list_traces())) == 2
    for leftover in db.parent.glob("observability.duckdb*"):
        leftover.unlink()
    sent = _turn(script, db, "and my name?")
    assert sent[1:] == ["my favourite colour is blue", "noted: my favourite colour is blue",
                        "what is my favourite colour?", "noted: what is my favourite colour?", "and my name?"]
    assert len(list(DuckDBObservabilityStore(traces, read_only=True).list_traces())) == 1  # traces start over


def test_a_tool_call_still_streaming_in_is_never_stored(store):
    memory = Memory(store)
    now = datetime.now(timezone.utc)

    def streaming_call(call_id: str) -> dict:
        return {"type": "tool-invocation", "toolInvocation": {"state": "partial-call", "toolCallId": call_id,
                                                              "toolName": "search", "args": {}}}

    memory.save_messages([
        Message(id="a1", role="assistant", created_at=now, thread_id="t", resource_id="u",
                content={"format": 2, "parts": [{"type": "text", "text": "Looking."}, streaming_call("c1")]}),
        Message(id="a2", role="assistant", created_at=now, thread_id="t", resource_id="u",
                content={"format": 2, "parts": [streaming_call("c2")]}),
    ])
    stored = memory.recall(thread_id="t", resource_id="u", per_page=False).messages
    assert [(m.id, m.content["parts"]) for m in stored] == [("a1", [{"type": "text", "text": "Looking."}])]


@pytest.mark.libsql_only
def test_a_restarted_gateway_continues_a_conversation_by_its_id(tmp_path):
    def echo(messages, tools):
        users = [m["content"] for m in messages if m["role"] == "user"]
        return f"{len(users)} user message(s): {' | '.join(users)}"

    def chat(text: str) -> str:
        store = open_store(tmp_path / "memory.db")
        agent = Agent("chat", instructions="I", model=ScriptedModel(echo), tracer=False,
                      memory=Memory(store, MemoryOptions(last_messages=10)))
        try:
            with GatewayServer(create_app({"chat": agent})) as server:
                client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=60)
                reply = client.chat.completions.create(model="chat", messages=[{"role": "user", "content": text}],
                                                       user="ada", metadata={"conversation_id": "c-1"})
                return str(reply.choices[0].message.content)
        finally:
            store.close()

    assert chat("my favourite colour is blue") == "1 user message(s): my favourite colour is blue"
    # A new server on the same file (a restart): the client sends only its new message, memory adds the rest.
    assert chat("what is it?") == "2 user message(s): my favourite colour is blue | what is it?"
