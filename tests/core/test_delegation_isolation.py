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
from core.integrations.openai_agents import MemorySession
from core.cli import main
from core.gateway import GatewayServer, create_app
from core.gateway.access import ANYONE, Caller
from core.gateway.errors import GatewayError
from core.gateway.guard import GuardPolicy
from core.gateway.tokens import TokensFile, TokensFileError, entry_for, new_token, parse_entries
from core.llm import ScriptedModel, ScriptedReply, tool_call
from core.mcp_server.tools import Binding, MemoryTools, ResourceNotAllowed
from core.messages import Message, text_part, tool_invocation_part
from core.scopes import ReservedResourceError, delegation_resource
# The gateway tokens test's pieces: its HTTP call, client, echoing model and resource-scoped memory fixture.
from tests.core.test_gateway_tokens import call, client, everything_sent, memory  # noqa: F401 (memory: a fixture)

SHARED = "shared-secret-token"
HELPER_SECRET = "my locker code is heron-5512"
HELPER_WM = "# alice-helper\n- Locker: heron-5512\n"
ALICE_SECRET = "falcon-0427"
AL_SECRET = "osprey-8810"


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
        # ``al``: a user whose id begins alice's (``delegation:alice:helper`` begins ``delegation:al``).
        self.alice, self.helper, self.al, self.admin = new_token(), new_token(), new_token(), new_token()
        self.file = TokensFile(None, (entry_for("alice-app", ["alice"], self.alice),
                                      entry_for("helper-app", ["alice-helper"], self.helper),
                                      entry_for("al-app", ["al"], self.al), entry_for("admin", ["*"], self.admin)))


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
            # The memory API reads a delegation for its resource's tokens only (the next test), and a delegation
            # id the engine never writes (another encoding of alice, a turn without a resource) for nobody.
            for named in ((delegated,) if token == users.helper else ()) + ("delegation:ali%63e:helper",
                                                                             "delegation::helper"):
                status, data = call(server, token, method, f"{path}?resourceId={quote(named)}", body)
                expected = (403, "resource_not_allowed") if named == delegated else (400, "reserved_resource")
                assert (status, data["error"]["code"]) == expected, (method, path, named)
                assert ALICE_SECRET not in json.dumps(data)
    # The delegation's thread under a client's own resource: another resource's thread, so none of hers.
    status, data = call(server, users.alice, "GET", f"/api/memory/threads/{quote(child.id)}/messages")
    assert (status, data["error"]["code"]) == (404, "not_found")
    assert memory.get_working_memory(resource_id=delegated) == f"# Notes\n- {ALICE_SECRET}\n"  # nothing written

    # The MCP tools: a call naming it is refused to another resource's token (its own read it: the next test),
    # and one naming an id the engine never writes to everyone; a server cannot be bound to it.
    tools = MemoryTools(memory, Binding(None, any_resource=True))
    for caller in (ANYONE, Caller("alice-app", frozenset({"alice"})), Caller("helper-app", frozenset({"alice-helper"}))):
        for named in ("delegation:ali%63e:helper", "delegation::helper"):
            with pytest.raises(GatewayError, match="not a delegation resource as the engine names them") as refused:
                tools.read_thread(child.id, resource=named, caller=caller)
            assert refused.value.code == "reserved_resource"
    helper_caller = Caller("helper-app", frozenset({"alice-helper"}))
    with pytest.raises(PermissionError, match="may not use resource"):
        tools.read_thread(child.id, resource=delegated, caller=helper_caller)
    with pytest.raises(PermissionError, match="may not use resource"):
        tools.get_working_memory(resource=delegated, caller=helper_caller)
    with pytest.raises(LookupError, match="No thread"):  # (a scoped token: another resource's thread, as none)
        tools.transcript(child.id, caller=helper_caller)
    # A listing of every resource's transcripts (the shared token's, which reads every delegation) names the
    # delegation's thread as alice's delegation; a scoped token of another resource is not offered it, and a
    # thread under an id the engine never writes is offered to no one (reading it is refused).
    memory.save_messages([Message.user("not alice's", thread_id="unwritten", resource_id="delegation::helper")])
    offered = {t["threadId"]: t for t in tools.transcripts(ANYONE).rows}
    assert offered[child.id]["delegation"] == "delegation of alice to helper" and "unwritten" not in offered
    assert "alice-main" in offered and offered["alice-main"]["delegation"] is None
    assert child.id not in {t["threadId"] for t in tools.transcripts(helper_caller).rows}
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


def test_an_application_passing_its_users_ids_never_reaches_a_delegation(memory):
    helper = Agent("helper", instructions="Help.", model=ScriptedModel(sub_agent), tracer=False)
    boss = Agent("boss", instructions="Delegate.", model=ScriptedModel(supervisor), memory=memory, agents=[helper],
                 tracer=False)
    # Alice's turn delegates: the engine's own path names the delegation's resource, and keeps working.
    boss.generate(f"delegate: note {ALICE_SECRET}", memory={"resource": "alice", "thread": "alice-main"})
    delegated = delegation_resource("alice", "helper")
    (child,) = memory.list_threads(resource_id=delegated).threads
    notes = f"# Notes\n- {ALICE_SECRET}\n"
    assert memory.get_working_memory(resource_id=delegated) == notes
    calls = len(boss.model.requests) + len(helper.model.requests)
    # An application passes its end user's id straight through, and the user's id is Alice's delegation's:
    # every way of naming it is refused when the call is made (a stream before its first event), by either agent.
    for how in ({"memory": {"resource": delegated}}, {"memory": {"resource": delegated, "thread": child.id}},
                {"scopes": [f"resource:{delegated}"]}, {"scopes": [f"resource:{delegated}", "org:acme"]}):
        for agent in (boss, helper):
            with pytest.raises(ReservedResourceError, match="Agent.generate") as refused:
                agent.generate("what is in your notes?", **how)
            assert "core.check_client_resource" in str(refused.value) and ALICE_SECRET not in str(refused.value)
            with pytest.raises(ReservedResourceError, match="nothing was read or written"):
                agent.stream("what is in your notes?", **how)
    with pytest.raises(ReservedResourceError, match="MemorySession"):
        MemorySession(child.id, memory=memory, resource_id=delegated)
    # Nothing was read, written or asked of a model.
    assert len(boss.model.requests) + len(helper.model.requests) == calls
    assert [t.id for t in memory.list_threads(resource_id=delegated).threads] == [child.id]
    assert memory.get_working_memory(resource_id=delegated) == notes
    assert len(memory.recall(thread_id=child.id, resource_id=delegated).messages) == 2
    # The delegation path still runs on it: the next delegation reads the first one's note.
    again = boss.generate("delegate: what is in your notes?", memory={"resource": "alice", "thread": "alice-main"})
    assert ALICE_SECRET in again.text


def test_a_delegation_id_reached_through_the_agents_own_scopes_or_the_request_context_is_refused(memory):
    """The agent's own scopes (a function of the request context an application fills from its user) and the
    request context's scopes key are joined with the call's inside the turn: a delegation's resource named
    there is refused too, before anything is read or a model is asked."""
    from core.scopes import SCOPES_KEY

    helper = Agent("helper", instructions="Help.", model=ScriptedModel(sub_agent), tracer=False)
    boss = Agent("boss", instructions="Delegate.", model=ScriptedModel(supervisor), memory=memory, agents=[helper],
                 tracer=False)
    boss.generate(f"delegate: note {ALICE_SECRET}", memory={"resource": "alice", "thread": "alice-main"})
    delegated = delegation_resource("alice", "helper")
    per_user = Agent("per-user", instructions="Help.", model=ScriptedModel(sub_agent), memory=memory, tracer=False,
                     scopes=lambda ctx: [f"resource:{ctx['user']}"])
    calls = len(per_user.model.requests)
    with pytest.raises(ReservedResourceError, match="Agent.generate"):
        per_user.generate("what is in your notes?", request_context={"user": delegated})
    with pytest.raises(ReservedResourceError, match="Agent.generate"):
        list(per_user.stream("what is in your notes?", request_context={"user": delegated}))
    with pytest.raises(ReservedResourceError, match="Agent.generate"):
        boss.generate("what is in your notes?", request_context={SCOPES_KEY: [f"resource:{delegated}"]})
    assert len(per_user.model.requests) == calls
    assert memory.get_working_memory(resource_id=delegated) == f"# Notes\n- {ALICE_SECRET}\n"
    # The same agent on its user's own resource runs.
    per_user.generate("hello", request_context={"user": "bob"})
    assert len(per_user.model.requests) == calls + 1


def test_a_token_reads_and_writes_its_own_resources_delegations_and_no_one_elses(server, users, memory):
    chat(server, users.alice, f"delegate: note {ALICE_SECRET}", metadata={"thread_id": "alice-main"})
    chat(server, users.al, f"delegate: note {AL_SECRET}", metadata={"thread_id": "al-main"})
    alices, als = delegation_resource("alice", "helper"), delegation_resource("al", "helper")
    (child,) = memory.list_threads(resource_id=alices).threads
    (al_child,) = memory.list_threads(resource_id=als).threads

    def api(token: str, method: str, thread: str | None, named: str, body: Any = None) -> tuple[int, Any]:
        path = "/api/memory/threads" + ("" if thread is None else f"/{quote(thread, safe='')}/{method.split()[1]}")
        return call(server, token, method.split()[0], f"{path}?resourceId={quote(named, safe='')}", body)

    # Alice's token (and the "*" token, and the shared one) reads her delegation: its threads, messages, notes.
    for token in (users.alice, users.admin, SHARED):
        status, data = api(token, "GET", None, alices)
        assert status == 200 and [t["id"] for t in data["threads"]] == [child.id]
        status, data = api(token, "GET messages", child.id, alices)
        assert status == 200 and any(ALICE_SECRET in m["text"] for m in data["messages"])
        status, data = api(token, "GET working-memory", child.id, alices)
        assert (status, data["workingMemory"], data["resourceId"]) == (200, f"# Notes\n- {ALICE_SECRET}\n", alices)
    # She writes its working memory, and her sub-agent's next delegation reads what she wrote.
    moved = f"# Notes\n- {ALICE_SECRET}, moved to locker 9\n"
    status, data = api(users.alice, "PUT working-memory", child.id, alices, {"workingMemory": moved})
    assert (status, data["workingMemory"]) == (200, moved)
    assert "locker 9" in chat(server, users.alice, "delegate: what is in your notes?", metadata={"thread_id": "alice-main"})

    # Never another resource's delegation: al's token on alice's (whose id begins with "delegation:al"), alice's
    # on al's, alice-helper's on alice's; an id naming another resource that merely begins like alice's; and ids
    # no delegation is written under (another encoding of alice, a lower-case escape, a turn without a
    # resource), or an ordinary resource id that reads like one once decoded again.
    refused = [(users.al, alices, 403), (users.alice, als, 403), (users.helper, alices, 403),
               (users.alice, "delegation:alice%3Ahelper:x", 403), (users.alice, "delegation:alice2:helper", 403),
               (users.alice, "delegation:ali%63e:helper", 400), (users.alice, "delegation:alice%3ahelper:x", 400),
               (users.alice, "delegation:alice:helper:x", 400), (users.alice, "delegation::helper", 400),
               (users.admin, "delegation:ali%63e:helper", 400), (users.alice, quote(alices, safe=""), 403)]
    for token, named, status_ in refused:
        for method, thread in (("GET", None), ("GET messages", child.id), ("GET messages", al_child.id),
                               ("GET working-memory", child.id), ("PUT working-memory", child.id),
                               ("PUT working-memory", al_child.id)):
            status, data = api(token, method, thread, named, {"workingMemory": "# taken\n"})
            code = "resource_not_allowed" if status_ == 403 else "reserved_resource"
            assert (status, data["error"]["code"]) == (status_, code), (named, method, thread)
            assert ALICE_SECRET not in json.dumps(data) and AL_SECRET not in json.dumps(data)
    # Alice's delegation id with al's delegation's thread: another resource's thread.
    status, data = api(users.alice, "GET messages", al_child.id, alices)
    assert (status, data["error"]["code"]) == (404, "not_found") and AL_SECRET not in json.dumps(data)
    assert memory.get_working_memory(resource_id=alices) == moved
    assert memory.get_working_memory(resource_id=als) == f"# Notes\n- {AL_SECRET}\n"
    # The chat route still runs no turn on a delegation's resource, its own resource's token's either.
    with pytest.raises(openai.BadRequestError) as chat_refused:
        chat(server, users.alice, "notes?", metadata={"resource_id": alices})
    assert chat_refused.value.code == "reserved_resource"

    # The MCP tools: the same rule for a token, and a server bound to alice reads her delegations too.
    tools = MemoryTools(memory, Binding(None, any_resource=True))
    alice, al = Caller("alice-app", frozenset({"alice"})), Caller("al-app", frozenset({"al"}))
    for caller in (alice, ANYONE):
        assert any(ALICE_SECRET in m["text"] for m in tools.read_thread(child.id, resource=alices,
                                                                        caller=caller)["messages"])
        assert ALICE_SECRET in tools.transcript(child.id, caller=caller)
    assert tools.get_working_memory(resource=alices, caller=alice)["workingMemory"] == moved
    assert tools.update_working_memory(moved + "- and a key\n", resource=alices, caller=alice)["resource"] == alices
    for call_ in (lambda: tools.read_thread(child.id, resource=alices, caller=al),
                  lambda: tools.get_working_memory(resource=alices, caller=al),
                  lambda: tools.update_working_memory("# taken\n", resource=alices, caller=al),
                  lambda: tools.transcript(child.id, caller=al),
                  lambda: tools.read_thread(al_child.id, resource=als, caller=alice)):
        with pytest.raises((PermissionError, LookupError)) as mcp_refused:  # (a thread of another: as none)
            call_()
        assert ALICE_SECRET not in str(mcp_refused.value) and AL_SECRET not in str(mcp_refused.value)
    bound = MemoryTools(memory, Binding("alice"))
    assert bound.read_thread(child.id, resource=alices)["resource"] == alices
    assert ALICE_SECRET in bound.transcript(child.id)
    with pytest.raises(ResourceNotAllowed):
        bound.read_thread(al_child.id, resource=als)
    with pytest.raises(PermissionError):
        MemoryTools(memory, Binding("al")).read_thread(child.id, resource=alices)
    assert memory.get_working_memory(resource_id=alices) == moved + "- and a key\n"
    assert memory.get_working_memory(resource_id=als) == f"# Notes\n- {AL_SECRET}\n"


def test_a_token_lists_its_own_resources_delegations_and_no_one_elses(server, users, memory):
    """``GET /api/memory/delegations``: a client that may use alice finds her delegations' threads (nested ones
    too) without knowing their ids, and reads one with the resource it is listed under; al (whose delegation's
    id begins like alice's) finds only his own, and neither is listed a thread stored under an id that only
    reads like one of alice's delegations."""
    import httpx2 as httpx

    chat(server, users.alice, f"delegate: note {ALICE_SECRET}", metadata={"thread_id": "alice-main"})
    chat(server, users.al, f"delegate: note {AL_SECRET}", metadata={"thread_id": "al-main"})
    alices, als = delegation_resource("alice", "helper"), delegation_resource("al", "helper")
    nested = delegation_resource(alices, "checker")
    (child,) = memory.list_threads(resource_id=alices).threads
    (al_child,) = memory.list_threads(resource_id=als).threads
    lookalikes = {"delegation:ali%63e:helper": "lookalike-1", "delegation:alice:helper:x": "lookalike-2",
                  "Delegation:alice:helper": "lookalike-3", "delegation:alice2:helper": "lookalike-4",
                  "delegation::helper": "lookalike-5", "alice-helper": "lookalike-6"}
    memory.save_messages([Message.user("checked twice", thread_id="alice-nested", resource_id=nested)] + [
        Message.user("not alice's", thread_id=thread, resource_id=resource) for resource, thread in lookalikes.items()])

    def listed(token: str, resource: str | None) -> httpx.Response:
        params = {} if resource is None else {"resourceId": resource}
        return httpx.get(f"{server.url}/api/memory/delegations", params=params,
                         headers={"Authorization": f"Bearer {token}"}, timeout=60)

    def found(response: httpx.Response) -> dict[str, tuple[str, list[str], list[str]]]:
        assert response.status_code == 200, response.text
        return {d["resourceId"]: (d["label"], d["agents"], [t["id"] for t in d["threads"]])
                for d in response.json()["delegations"]}

    alice_sees = {alices: ("delegation of alice to helper", ["helper"], [child.id]),
                  nested: ("delegation of alice to helper, then to checker", ["helper", "checker"], ["alice-nested"])}
    for token, named in ((users.alice, "alice"), (users.alice, None), (users.admin, "alice"), (SHARED, "alice")):
        assert found(listed(token, named)) == alice_sees
    assert found(listed(users.al, None)) == {als: ("delegation of al to helper", ["helper"], [al_child.id])}
    assert found(listed(users.alice, alices)) == {nested: alice_sees[nested]}  # a delegation's own delegations
    assert found(listed(users.helper, None)) == {}  # alice-helper's: none of alice's
    # What is listed is read with the resource it is listed under (the official client, over the same HTTP).
    (thread,) = [d for d in listed(users.alice, None).json()["delegations"] if d["resourceId"] == alices][0]["threads"]
    messages = client(server, users.alice).get(
        f"{server.url}/api/memory/threads/{quote(thread['id'], safe='')}/messages", cast_to=httpx.Response,
        options={"params": {"resourceId": alices}})
    assert ALICE_SECRET in messages.text and thread["resourceId"] == alices and thread["messageCount"] >= 1

    # Never another resource's: al's token on alice, alice's on al (and on al's delegation), alice-helper's on
    # alice; malformed ids; a "*" token that names no resource.
    refused = [(users.al, "alice", 403, "resource_not_allowed"), (users.alice, "al", 403, "resource_not_allowed"),
               (users.alice, als, 403, "resource_not_allowed"), (users.helper, "alice", 403, "resource_not_allowed"),
               (users.alice, "alice2", 403, "resource_not_allowed"),
               (users.alice, "delegation:ali%63e:helper", 400, "reserved_resource"),
               (users.admin, "delegation::helper", 400, "reserved_resource"),
               (users.admin, None, 400, "invalid_request")]
    for token, named, status, code in refused:
        response = listed(token, named)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), (named, response.text)
        assert ALICE_SECRET not in response.text and AL_SECRET not in response.text and child.id not in response.text
    everything = " ".join(listed(t, n).text for t, n in ((users.alice, "alice"), (users.al, "al"), (SHARED, "alice")))
    assert not any(thread in everything for thread in lookalikes.values())


@pytest.mark.backends
def test_a_resources_delegations_are_found_by_parsing_their_ids_never_by_prefix(memory):
    """``Memory.delegation_threads`` (what the memory API's and the MCP server's listings use), on both
    backends: alice's delegations and theirs, never al's, nor an id that only reads like one of hers (another
    case, another encoding, three parts, a LIKE wildcard, the old ``<resource>-<agent>`` naming)."""
    alices = delegation_resource("alice", "helper")
    nested = delegation_resource(alices, "checker")
    owners = {"t-alice": alices, "t-nested": nested, "t-al": delegation_resource("al", "helper"),
              "t-case": "Delegation:alice:helper", "t-encoded": "delegation:ali%63e:helper",
              "t-three": "delegation:alice:helper:x", "t-like": "delegation:alic_:helper",
              "t-like2": "delegation%alice:helper", "t-old": "alice-helper", "t-none": "delegation::helper",
              "t-own": "alice"}
    memory.save_messages([Message.user("hi", thread_id=thread, resource_id=resource)
                          for thread, resource in owners.items()])
    assert sorted(s.thread.id for s in memory.delegation_threads("alice")) == ["t-alice", "t-nested"]
    assert [s.thread.id for s in memory.delegation_threads(alices)] == ["t-nested"]
    assert [s.thread.id for s in memory.delegation_threads("al")] == ["t-al"]
    assert [s.thread.id for s in memory.delegation_threads("alic_")] == ["t-like"]  # its own, a literal "_"
    assert memory.delegation_threads("alic%") == [] and memory.delegation_threads("") == []
    assert all(s.message_count == 1 for s in memory.delegation_threads("alice"))


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


def test_a_memory_factory_serves_a_delegations_memory_api_calls_with_the_memory_its_turns_ran_on(tmp_path, users):
    # A memory factory keyed on the request context's resourceId (one database per user, the session-memory
    # write-up's pattern): the delegation of alice's turn ran on alice's memory, so the memory API reads and
    # writes `delegation:alice:helper` there, never in a memory the factory would make for that id.
    from core import MemoryOptions, open_store
    from core.embedding import HashingEmbedder

    made: dict[str, Memory] = {}

    def per_user(ctx: dict[str, Any]) -> Memory:
        rid = str(ctx.get("resourceId") or "default")
        if rid not in made:
            made[rid] = Memory(open_store(tmp_path / f"{quote(rid, safe='')}.db"),
                               MemoryOptions(last_messages=20, working_memory={"enabled": True, "scope": "resource"}),
                               embedder=HashingEmbedder(64))
        return made[rid]

    helper = Agent("helper", instructions="Help.", model=ScriptedModel(sub_agent), tracer=False)
    boss = Agent("boss", instructions="Delegate.", model=ScriptedModel(supervisor), memory=per_user, agents=[helper],
                 tracer=False)
    app = create_app([boss], policy=GuardPolicy(token=SHARED, tokens=users.file), default_resource="default")
    try:
        with GatewayServer(app) as server:
            chat(server, users.alice, f"delegate: note {ALICE_SECRET}", metadata={"thread_id": "alice-main"})
            alices = delegation_resource("alice", "helper")
            (child,) = made["alice"].list_threads(resource_id=alices).threads
            named = quote(alices, safe="")
            status, data = call(server, users.alice, "GET", f"/api/memory/threads?resourceId={named}")
            assert status == 200 and [t["id"] for t in data["threads"]] == [child.id]
            path = f"/api/memory/threads/{quote(child.id, safe='')}"
            status, data = call(server, users.alice, "GET", f"{path}/messages?resourceId={named}")
            assert status == 200 and any(ALICE_SECRET in m["text"] for m in data["messages"])
            moved = f"# Notes\n- {ALICE_SECRET}, moved to locker 9\n"
            status, data = call(server, users.alice, "PUT", f"{path}/working-memory?resourceId={named}",
                                {"workingMemory": moved})
            assert status == 200
            assert made["alice"].get_working_memory(resource_id=alices) == moved
            assert "locker 9" in chat(server, users.alice, "delegate: what is in your notes?",
                                      metadata={"thread_id": "alice-main"})
            assert sorted(made) == ["alice"]  # no memory made for the delegation's id
    finally:
        for m in made.values():
            m.store.close()
