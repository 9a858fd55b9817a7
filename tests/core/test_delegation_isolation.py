"""A delegation's memory is never a user's: user ``alice-helper`` and Alice's sub-agent ``helper``.

Mastra runs a delegated call on resource ``<resource>-<agent>``, which a real user's id can equal: a
user called ``alice-helper`` then shared the working memory, the recall and the threads list of Alice's
delegations to a sub-agent named ``helper``, and a token for ``alice`` alone reached ``alice-helper``'s
memory through them. A delegation now runs on ``delegation:<resource>:<agent>``, a namespace every
client is refused. A real gateway (``GatewayServer``) with per-user tokens serves an agent with a
sub-agent (the scripted model calls the ``agent-helper`` tool); the two users are asked by every route
(chat, the memory API, the MCP tools, a tokens file) and neither's memory reaches the other.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import openai
import pytest

from core import Memory
from core.agent import Agent
from core.cli import main
from core.gateway import GatewayServer, create_app
from core.gateway.access import ANYONE, Caller
from core.gateway.guard import GuardPolicy
from core.gateway.tokens import TokensFile, TokensFileError, entry_for, new_token, parse_entries
from core.llm import ScriptedModel, ScriptedReply, tool_call
from core.mcp_server.tools import Binding, MemoryTools
from core.messages import Message, text_part, tool_invocation_part
from core.scopes import ReservedResourceError, delegation_resource
# The gateway tokens test's pieces: its HTTP call, client, echoing model and resource-scoped memory fixture.
from tests.core.test_gateway_tokens import call, client, everything_sent, memory  # noqa: F401 (memory: a fixture)

SHARED = "shared-secret-token"
HELPER_SECRET = "my locker code is heron-5512"
HELPER_WM = "# alice-helper\n- Locker: heron-5512\n"
ALICE_SECRET = "falcon-0427"


def supervisor(messages: list[Message], tools: Any) -> Any:
    """``delegate: <task>`` hands the task to the sub-agent, then repeats everything it was sent (the
    sub-agent's reply with it); anything else is answered with everything it was sent."""
    last = messages[-1]
    if last.get("role") == "user" and str(last.get("content")).startswith("delegate: "):
        return ScriptedReply(tool_calls=(tool_call("agent-helper", {"prompt": str(last["content"])[10:]}),))
    return everything_sent(messages, tools)


def sub_agent(messages: list[Message], tools: Any) -> Any:
    """``note <text>`` saves the text in the sub-agent's working memory; every reply repeats everything the
    sub-agent was sent (its working memory and what recall found included)."""
    last = messages[-1]
    if last.get("role") == "user" and str(last.get("content")).startswith("note "):
        return ScriptedReply(tool_calls=(tool_call("updateWorkingMemory",
                                                   {"memory": f"# Notes\n- {str(last['content'])[5:]}\n"}),))
    return everything_sent(messages, tools)


class Users:
    def __init__(self) -> None:
        self.alice, self.helper = new_token(), new_token()
        self.file = TokensFile(None, (entry_for("alice-app", ["alice"], self.alice),
                                      entry_for("helper-app", ["alice-helper"], self.helper)))


@pytest.fixture
def users() -> Users:
    return Users()


@pytest.fixture
def server(memory, users) -> Iterator[GatewayServer]:
    helper = Agent("helper", instructions="Help.", model=ScriptedModel(sub_agent), tracer=False)  # uses boss's memory
    boss = Agent("boss", instructions="Delegate.", model=ScriptedModel(supervisor), memory=memory, agents=[helper],
                 tracer=False)
    app = create_app([boss], policy=GuardPolicy(token=SHARED, tokens=users.file), default_resource="default")
    with GatewayServer(app) as served:
        yield served


def chat(server: GatewayServer, token: str, text: str, **kwargs: Any) -> str:
    reply = client(server, token).chat.completions.create(model="boss", messages=[{"role": "user", "content": text}],
                                                          **kwargs)
    return reply.choices[0].message.content or ""


def test_a_user_named_like_a_delegation_and_the_delegation_never_share_memory(server, users, memory):
    # The real user alice-helper: a secret in a thread and in her (resource-scoped) working memory.
    chat(server, users.helper, HELPER_SECRET, metadata={"thread_id": "helper-own"})
    status, _ = call(server, users.helper, "PUT", "/api/memory/threads/helper-own/working-memory",
                     {"workingMemory": HELPER_WM})
    assert status == 200
    # Alice delegates twice: the sub-agent notes her secret, then is asked about its notes.
    first = chat(server, users.alice, f"delegate: note {ALICE_SECRET}", metadata={"thread_id": "alice-main"})
    second = chat(server, users.alice, "delegate: what is in your notes about my locker?",
                  metadata={"thread_id": "alice-main"})
    for reply in (first, second):  # the sub-agent saw nothing of alice-helper's: no working memory, no recall
        assert "heron" not in reply, reply
    # The delegation still has a memory of its own: the second delegation saw the first one's note.
    assert ALICE_SECRET in second
    delegated = delegation_resource("alice", "helper")
    assert memory.get_working_memory(resource_id=delegated) == f"# Notes\n- {ALICE_SECRET}\n"
    assert len(memory.list_threads(resource_id=delegated).threads) == 2

    # alice-helper's memory is as she left it, and holds nothing of Alice's, by every route she has.
    assert memory.get_working_memory(resource_id="alice-helper") == HELPER_WM
    status, data = call(server, users.helper, "GET", "/api/memory/threads")
    assert status == 200 and [t["id"] for t in data["threads"]] == ["helper-own"]
    status, data = call(server, users.helper, "GET", "/api/memory/threads/helper-own/working-memory")
    assert status == 200 and data["workingMemory"] == HELPER_WM
    asked = chat(server, users.helper, "what was the falcon number in the notes?", metadata={"thread_id": "helper-2"})
    assert ALICE_SECRET not in asked and "heron-5512" in asked  # her own recall and working memory, not Alice's
    tools = MemoryTools(memory, Binding(None, any_resource=True))
    helper_caller = Caller("helper-app", frozenset({"alice-helper"}))
    found = tools.search_memory(ALICE_SECRET, top_k=10, caller=helper_caller)
    assert found["results"] and ALICE_SECRET not in json.dumps(found["results"])  # (her own threads are found)
    assert sorted(t["id"] for t in tools.list_threads(caller=helper_caller)["threads"]) == ["helper-2", "helper-own"]
    # Alice's threads are hers; her delegations' threads are not listed as hers nor as alice-helper's.
    status, data = call(server, users.alice, "GET", "/api/memory/threads")
    assert [t["id"] for t in data["threads"]] == ["alice-main"]


def test_no_client_may_name_a_delegations_resource(server, users, memory, tmp_path):
    chat(server, users.alice, f"delegate: note {ALICE_SECRET}", metadata={"thread_id": "alice-main"})
    delegated = delegation_resource("alice", "helper")
    (child,) = memory.list_threads(resource_id=delegated).threads
    for token in (SHARED, users.alice, users.helper):  # the shared token too: nobody's id is a delegation's
        sender = client(server, token)
        for how in ({"metadata": {"resource_id": delegated}}, {"extra_headers": {"x-resource-id": delegated}},
                    {"user": delegated}, {"metadata": {"resource_id": delegated, "thread_id": child.id}}):
            with pytest.raises(openai.BadRequestError) as refused:
                sender.chat.completions.create(model="boss", messages=[{"role": "user", "content": "notes?"}], **how)
            assert refused.value.code == "reserved_resource" and ALICE_SECRET not in str(refused.value.body), how
            assert "delegation:" in refused.value.message and "nothing was read or written" in refused.value.message
        for method, path, body in (("GET", "/api/memory/threads", None),
                                   ("GET", f"/api/memory/threads/{quote(child.id)}/messages", None),
                                   ("GET", f"/api/memory/threads/{quote(child.id)}/working-memory", None),
                                   ("PUT", f"/api/memory/threads/{quote(child.id)}/working-memory",
                                    {"workingMemory": "# taken\n"})):
            status, data = call(server, token, method, f"{path}?resourceId={quote(delegated)}", body)
            assert (status, data["error"]["code"]) == (400, "reserved_resource"), (method, path)
            assert ALICE_SECRET not in json.dumps(data)
    # The delegation's thread under a client's own resource: another resource's thread.
    status, data = call(server, users.alice, "GET", f"/api/memory/threads/{quote(child.id)}/messages")
    assert (status, data["error"]["code"]) == (403, "thread_ownership")
    assert memory.get_working_memory(resource_id=delegated) == f"# Notes\n- {ALICE_SECRET}\n"  # nothing written

    # The MCP tools: a call naming it is refused, whoever calls; a server cannot be bound to it; a listing of
    # every resource's transcripts leaves the delegations out.
    tools = MemoryTools(memory, Binding(None, any_resource=True))
    for caller in (ANYONE, Caller("alice-app", frozenset({"alice"}))):
        with pytest.raises(ReservedResourceError):
            tools.read_thread(child.id, resource=delegated, caller=caller)
        with pytest.raises(ReservedResourceError):
            tools.get_working_memory(resource=delegated, caller=caller)
        with pytest.raises(PermissionError):  # (a scoped token: another resource's thread, unnamed)
            tools.transcript(child.id, caller=caller)
    assert child.id not in {t["threadId"] for t in tools.transcripts(ANYONE)}
    assert "alice-main" in {t["threadId"] for t in tools.transcripts(ANYONE)}
    with pytest.raises(ReservedResourceError):
        Binding(delegated)
    # A tokens file cannot give a token a delegation's resource.
    with pytest.raises(TokensFileError, match="agents' delegations"):
        parse_entries({"tokens": [entry_for("x", ["alice"], new_token()).to_json()
                                  | {"resources": [delegated]}]})
    # Nor can the command line: an MCP server bound to it, a gateway defaulting to it.
    err = io.StringIO()
    assert main(["mcp", "--resource", delegated, "--db", str(tmp_path / "m.db")], out=io.StringIO(), err=err) == 1
    assert "agents' delegations" in err.getvalue() and not (tmp_path / "m.db").exists()
    with pytest.raises(ValueError, match="agents' delegations"):
        create_app([Agent("boss", instructions="I", model=ScriptedModel(["ok"]))], token=SHARED,
                   default_resource=delegated)


def test_delegation_resources_are_one_per_resource_and_agent():
    # Percent-encoded parts: no two (resource, agent) pairs share a resource, nested delegations included.
    pairs = [("alice", "helper"), ("alice-helper", ""), ("alice:x", "helper"), ("alice", "x:helper"),
             ("alice%3Ax", "helper"), (None, "helper"), ("", "helper")]
    made = {delegation_resource(r, a) for r, a in pairs[:-1]}
    assert len(made) == len(pairs) - 1
    assert delegation_resource(None, "helper") == delegation_resource("", "helper") == "delegation::helper"
    assert delegation_resource("alice", "helper") == "delegation:alice:helper"
    nested = delegation_resource(delegation_resource("alice", "helper"), "checker")
    assert nested == "delegation:delegation%3Aalice%3Ahelper:checker"


def _legacy_delegation(memory: Memory, parent: str, thread: str, child_thread: str, text: str, *,
                       mastra: bool = False) -> None:
    """A delegation stored as before the ``delegation:`` namespace (and as Mastra names it): the sub-agent ran on
    ``<parent>-helper``, and the supervisor's tool result names that resource and the sub-agent's thread (in
    Mastra's keys when ``mastra``)."""
    result = ({"text": text, "subAgentThreadId": child_thread, "subAgentResourceId": f"{parent}-helper"} if mastra
              else {"agent": "helper", "thread": child_thread, "resource": f"{parent}-helper", "text": text})
    memory.save_messages([
        Message.create("user", [text_part(f"delegate: {text}")], thread_id=thread, resource_id=parent),
        Message.create("assistant", [tool_invocation_part("c1", "agent-helper", {"prompt": text}, result)],
                       thread_id=thread, resource_id=parent)])
    memory.save_messages([
        Message.create("user", [text_part(text)], thread_id=child_thread, resource_id=f"{parent}-helper"),
        Message.create("assistant", [text_part(f"noted {text}")], thread_id=child_thread,
                       resource_id=f"{parent}-helper")])


@pytest.mark.backends
def test_forgetting_a_resource_never_takes_a_user_whose_id_reads_like_its_old_delegations(memory):
    # Alice delegated before the namespace: her sub-agent's rows are under alice-helper, where a real user
    # alice-helper also has her own thread and working memory.
    _legacy_delegation(memory, "alice", "alice-main", "helper-old1", ALICE_SECRET)
    memory.save_messages([Message.create("user", [text_part(HELPER_SECRET)], thread_id="helper-own",
                                         resource_id="alice-helper")])
    memory.update_working_memory(resource_id="alice-helper", working_memory=HELPER_WM)
    # Bob's agent ran in Mastra, and nobody's id reads like bob-helper: his delegation resource is his.
    _legacy_delegation(memory, "bob", "bob-main", "helper-old2", "bob's errand", mastra=True)
    memory.update_working_memory(resource_id="bob-helper", working_memory="# Notes\n- bob's errand\n")

    report = memory.forget_resource("alice")
    assert report.resources == ["alice"] and sorted(report.threads) == ["alice-main", "helper-old1"]
    assert any("alice-helper" in note and "kept" in note for note in report.notes)
    assert memory.get_thread("helper-old1") is None and memory.get_thread("alice-main") is None
    # alice-helper keeps her own thread and working memory.
    assert [t.id for t in memory.list_threads(resource_id="alice-helper").threads] == ["helper-own"]
    assert memory.get_working_memory(resource_id="alice-helper") == HELPER_WM

    report = memory.forget_resource("bob")
    assert report.resources == ["bob", "bob-helper"] and sorted(report.threads) == ["bob-main", "helper-old2"]
    assert memory.get_working_memory(resource_id="bob-helper") is None
    assert memory.list_threads(resource_id="bob-helper").total == 0
