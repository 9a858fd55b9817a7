"""Per-resource tokens (a tokens file): one user's memory never reaches another's token.

A real gateway (``GatewayServer``, uvicorn on a free port) serves two users, each with a token of their
own, beside a support desk's token for two resources, an admin's ``"*"`` token and the shared
``--token``. Everything is asked through the official ``openai`` client or raw HTTP, by every route
(chat completions plain and streamed, the memory API) and every way a request can name a resource
(``metadata.resource_id``, ``x-resource-id``, ``user``, ``resourceId``).
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import openai
import pytest

from core import Memory, MemoryOptions
from core.agent import Agent
from core.gateway import GatewayServer, create_app
from core.gateway.guard import GuardPolicy
from core.gateway.tokens import (
    TokensFile,
    TokensFileError,
    entry_for,
    load_tokens_file,
    new_token,
    parse_entries,
    token_sha256,
)
from core.embedding.hashing import HashingEmbedder
from core.llm import ScriptedModel
from core.messages import Message

SHARED = "shared-secret-token"
BOB_SECRET = "my bank PIN is zebra-4321-quartz"


def everything_sent(messages: list[dict[str, Any]], tools: Any) -> str:
    """Replies with every text the model was sent, so anything of another user's would show."""
    return " | ".join(str(m.get("content") or "") for m in messages)


class Users:
    def __init__(self) -> None:
        self.alice, self.bob, self.desk, self.admin = new_token(), new_token(), new_token(), new_token()
        self.file = TokensFile(None, (entry_for("alice-app", ["alice"], self.alice),
                                      entry_for("bob-app", ["bob"], self.bob),
                                      entry_for("support-desk", ["alice", "carol"], self.desk),
                                      entry_for("admin", ["*"], self.admin)))


@pytest.fixture
def users() -> Users:
    return Users()


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel(everything_sent)


@pytest.fixture
def memory(store) -> Memory:
    # Semantic recall over all of a resource's threads: what another user said must never be recalled.
    return Memory(store, MemoryOptions(last_messages=20, working_memory={"enabled": True, "scope": "resource"},
                                       semantic_recall={"enabled": True, "scope": "resource", "top_k": 5}),
                  embedder=HashingEmbedder(64))


@pytest.fixture
def server(memory, model, users) -> Iterator[GatewayServer]:
    agent = Agent("chat", instructions="Chat.", model=model, memory=memory, tracer=False)
    app = create_app([agent], policy=GuardPolicy(token=SHARED, tokens=users.file), default_resource="default")
    with GatewayServer(app) as server:
        yield server


def client(server: GatewayServer, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=token, max_retries=0, timeout=60)


def chat(server: GatewayServer, token: str, text: str, **kwargs: Any) -> Any:
    return client(server, token).chat.completions.with_raw_response.create(
        model="chat", messages=[{"role": "user", "content": text}], **kwargs)


def call(server: GatewayServer, token: str, method: str, path: str, body: Any = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    conn.request(method, path, None if body is None else json.dumps(body),
                 {"content-type": "application/json", "authorization": f"Bearer {token}", **(headers or {})})
    response = conn.getresponse()
    status, data = response.status, json.loads(response.read())
    conn.close()
    return status, data


def bobs_memory(server: GatewayServer, users: Users, memory: Memory) -> None:
    """Bob, with his own token, tells his thread a secret and has it in his working memory."""
    reply = chat(server, users.bob, BOB_SECRET, metadata={"thread_id": "bob-thread"})
    assert reply.headers["x-resource-id"] == "bob"  # his only resource, though he named none
    memory.update_working_memory(resource_id="bob", working_memory=f"# Bob\n{BOB_SECRET}\n")


def test_chat_with_a_scoped_token_reaches_only_its_resources(server, users, memory, model):
    bobs_memory(server, users, memory)
    # Bob, in a new thread, gets his own memory back (his working memory, recall of the other thread).
    recalled = chat(server, users.bob, "what is my bank PIN?", metadata={"thread_id": "bob-other"})
    assert "zebra-4321-quartz" in recalled.parse().choices[0].message.content
    # Alice's token with no resource named: her own, never the server's --default-resource; the same
    # question recalls nothing of Bob's, and his working memory is not hers.
    reply = chat(server, users.alice, "what is my bank PIN?", metadata={"thread_id": "alice-thread"})
    assert reply.headers["x-resource-id"] == "alice" and memory.get_thread("alice-thread").resource_id == "alice"
    assert "zebra" not in reply.parse().choices[0].message.content
    calls = len(model.requests)
    alice = client(server, users.alice)
    # Every way of naming Bob, plain and streamed, alone or beside her own: 403 before the model is asked.
    for stream in (False, True):
        for how in ({"metadata": {"resource_id": "bob"}}, {"extra_headers": {"x-resource-id": "bob"}},
                    {"user": "bob"},
                    {"metadata": {"resource_id": "bob", "thread_id": "bob-thread"}},
                    {"metadata": {"resource_id": "bob", "conversation_id": "c1"}}):
            with pytest.raises(openai.PermissionDeniedError) as refused:
                alice.chat.completions.create(model="chat", messages=[{"role": "user", "content": "tell me"}],
                                              stream=stream, **how)
            assert refused.value.code == "resource_not_allowed", how
            # (The refusal does not list what else the token reaches: a stolen token should not tell.)
            assert "zebra" not in str(refused.value.body) and "'alice'" not in refused.value.message
    # ``user`` beside her own resource id is an end-user tag, not read: the turn is hers, and nothing of Bob's.
    tagged = alice.chat.completions.with_raw_response.create(
        model="chat", messages=[{"role": "user", "content": "what is my bank PIN?"}],
        metadata={"resource_id": "alice", "thread_id": "alice-tagged"}, user="bob")
    assert tagged.headers["x-resource-id"] == "alice" and "zebra" not in tagged.parse().choices[0].message.content
    calls = len(model.requests)
    # Bob's thread under her own resource stays the documented 403 thread_ownership.
    for stream in (False, True):
        with pytest.raises(openai.PermissionDeniedError) as refused:
            alice.chat.completions.create(model="chat", messages=[{"role": "user", "content": "tell me"}],
                                          metadata={"thread_id": "bob-thread"}, stream=stream)
        assert refused.value.code == "thread_ownership" and "zebra" not in str(refused.value.body)
    assert len(model.requests) == calls  # nothing reached the model
    assert [m.text for m in memory.recall(thread_id="bob-thread", per_page=False).messages][0] == BOB_SECRET
    assert len(memory.recall(thread_id="bob-thread", per_page=False).messages) == 2  # nothing was added
    # A streamed turn of her own works, and a conversation id is hers.
    chunks = list(alice.chat.completions.create(model="chat", messages=[{"role": "user", "content": "more"}],
                                                metadata={"conversation_id": "c1"}, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "more" in text and "zebra" not in text
    assert memory.get_thread("conversation:alice:c1").resource_id == "alice"


def test_a_token_of_several_resources_names_one_and_the_shared_token_reaches_all(server, users, memory):
    bobs_memory(server, users, memory)
    desk = client(server, users.desk)
    with pytest.raises(openai.BadRequestError) as unnamed:  # "default" is not one of its resources
        desk.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])
    assert unnamed.value.code == "resource_required"
    assert chat(server, users.desk, "hi", metadata={"resource_id": "carol"}).headers["x-resource-id"] == "carol"
    with pytest.raises(openai.PermissionDeniedError):
        desk.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}], user="bob")
    # The shared --token and a "*" entry: every resource, the default one for a request naming none.
    assert chat(server, SHARED, "hi").headers["x-resource-id"] == "default"
    for token in (SHARED, users.admin):
        reply = chat(server, token, "what did I say?", metadata={"thread_id": "bob-thread", "resource_id": "bob"})
        assert BOB_SECRET in reply.parse().choices[0].message.content
    # A wrong token, or none: 401.
    for token in ("mst_not-a-token", token_sha256(users.alice)):
        with pytest.raises(openai.AuthenticationError):
            client(server, token).chat.completions.create(model="chat", messages=[{"role": "user", "content": "x"}])
    assert call(server, "wrong", "GET", "/api/memory/threads")[0] == 401


def test_the_memory_api_keeps_each_token_to_its_resources(server, users, memory):
    bobs_memory(server, users, memory)
    chat(server, users.alice, "hello", metadata={"thread_id": "alice-thread"})
    wm = "/api/memory/threads/{}/working-memory"
    routes = [("GET", "/api/memory/threads", None), ("GET", "/api/memory/threads/{}/messages", None),
              ("GET", wm, None), ("PUT", wm, {"workingMemory": "# Bob\nowned by alice now\n"})]
    for method, path, body in routes:
        for thread in ("bob-thread", "alice-thread"):
            where = path.format(quote(thread, safe=""))
            # Naming Bob: 403 resource_not_allowed, whichever thread, whatever header beside it.
            status, data = call(server, users.alice, method, f"{where}?resourceId=bob", body)
            assert (status, data["error"]["code"]) == (403, "resource_not_allowed"), (method, where)
            status, data = call(server, users.alice, method, f"{where}?resourceId=bob", body,
                                {"x-resource-id": "alice"})
            assert status == 403 and "zebra" not in json.dumps(data)
        # Bob's thread under her own resource (named, or by her token alone): a thread she does not have (404 for
        # its messages; her own resource's working memory, as through a thread not stored yet).
        if "{}" in path:
            for query in ("?resourceId=alice", ""):
                status, data = call(server, users.alice, method, path.format("bob-thread") + query, body)
                if "messages" in path:
                    assert (status, data["error"]["code"]) == (404, "not_found"), (method, path, query)
                else:
                    assert status == 200 and (data["threadExists"], data["resourceId"]) == (False, "alice")
                assert "zebra" not in json.dumps(data)
    # Her own memory, without naming herself.
    status, data = call(server, users.alice, "GET", "/api/memory/threads")
    assert status == 200 and [t["id"] for t in data["threads"]] == ["alice-thread"]
    status, data = call(server, users.alice, "GET", "/api/memory/threads/alice-thread/messages")
    assert status == 200 and data["total"] == 2 and "zebra" not in json.dumps(data)
    status, data = call(server, users.alice, "PUT", wm.format("alice-thread"), {"workingMemory": "# Alice\n"})
    assert status == 200 and data["resourceId"] == "alice"
    status, data = call(server, users.alice, "GET", wm.format("alice-thread"))
    assert data["workingMemory"] == "# Alice\n"
    # The version says which token wrote it (its name, never the token).
    authors = [v.author for v in memory.working_memory_service.versions("resource", "alice")]
    assert authors[-1] == "gateway: alice-app" and users.alice not in repr(authors)
    # Bob's memory is as he left it; the desk token, with two resources, must say which.
    assert memory.get_working_memory(resource_id="bob") == f"# Bob\n{BOB_SECRET}\n"
    status, data = call(server, users.bob, "GET", wm.format("bob-thread"))
    assert status == 200 and BOB_SECRET in data["workingMemory"]
    status, data = call(server, users.desk, "GET", "/api/memory/threads")
    assert status == 400 and data["error"]["param"] == "resourceId"
    assert call(server, users.desk, "GET", "/api/memory/threads?resourceId=alice")[1]["total"] == 1


def test_a_turns_trace_names_the_token_that_asked_for_it(tmp_path, users):
    from core import open_store
    from core.traces.store import DuckDBObservabilityStore

    with open_store(tmp_path / "traced.db") as store:
        agent = Agent("chat", instructions="Chat.", model=ScriptedModel(everything_sent), memory=Memory(store))
        with GatewayServer(create_app([agent], policy=GuardPolicy(token=SHARED, tokens=users.file))) as server:
            replies = {who: chat(server, token, "hi").parse() for who, token in (("alice", users.alice),
                                                                                 ("shared", SHARED))}
        assert store.tracer().flush(30)
        traces = DuckDBObservabilityStore(store.location.observability_path, read_only=True)
        spans = {who: traces.get_trace(reply.model_extra["memory"]["trace_id"]) for who, reply in replies.items()}
    roots = {who: next(s for s in found if s.parent_span_id is None) for who, found in spans.items()}
    assert roots["alice"].attributes["caller"] == "alice-app" and roots["alice"].resource_id == "alice"
    assert "caller" not in roots["shared"].attributes  # the shared token has no name
    assert users.alice not in repr(spans)  # the name, never the token


# -- the tokens file --------------------------------------------------------------------------------


def write(path: Path, data: Any, mode: int = 0o600) -> Path:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    path.chmod(mode)
    return path


def entry(name: str = "a", sha: str | None = None, resources: Any = ("alice",), **extra: Any) -> dict[str, Any]:
    return {"name": name, "sha256": sha if sha is not None else token_sha256(name + "-token"),
            "resources": list(resources) if isinstance(resources, tuple) else resources, **extra}


@pytest.mark.parametrize("tokens, message", [
    ([entry(sha="abc")], "entry 1 ('a'): 'sha256' must be the token's SHA-256"),
    ([entry(sha="mst_" + "x" * 43)], "It looks like the token itself"),
    ([entry(resources=[])], "entry 1 ('a'): 'resources' must list the resources"),
    ([entry(resources=None)], "'resources' must list"),
    ([entry(resources=["*", "bob"])], '"*" already means every resource'),
    ([entry(resources=["bad\nid"])], "contains a control character"),
    ([entry("a"), entry("a", sha=token_sha256("other"))], "entry 2 ('a'): the name is used by entry 1 too"),
    ([entry("a"), entry("b", sha=token_sha256("a-token"))], "entry 2 ('b'): the same token hash as entry 'a'"),
    ([entry(resource=["alice"])], "unknown key(s) 'resource'"),
    ([entry(name="")], "entry 1: 'name' must be printable text"),
    (["just a string"], "entry 1: each entry is an object"),
])
def test_a_tokens_file_entry_that_cannot_work_is_named(tmp_path, tokens, message):
    with pytest.raises(TokensFileError) as refused:
        load_tokens_file(write(tmp_path / "tokens.json", {"tokens": tokens}))
    assert message in str(refused.value) and str(tmp_path / "tokens.json") in str(refused.value)


def test_tokens_files_that_are_not_one_and_files_others_can_read_or_change(tmp_path):
    with pytest.raises(TokensFileError, match="does not exist"):
        load_tokens_file(tmp_path / "missing.json")
    with pytest.raises(TokensFileError, match="not valid JSON"):
        load_tokens_file(write(tmp_path / "t.json", "{"))
    with pytest.raises(TokensFileError, match='a JSON object {"tokens"'):
        load_tokens_file(write(tmp_path / "t.json", [entry()]))
    good = {"tokens": [entry("a"), entry("b", resources=["*"])]}
    tokens = load_tokens_file(write(tmp_path / "t.json", good))
    assert tokens.warnings == () and [e.resources for e in tokens.entries] == [frozenset({"alice"}), None]
    assert tokens.match("b-token") is tokens.entries[1] and tokens.match("c-token") is None
    if os.name == "posix":
        shared = load_tokens_file(write(tmp_path / "t.json", good, 0o644))
        assert len(shared.warnings) == 1 and "chmod 600" in shared.warnings[0]
        # One that others can change is refused: they could give themselves a token to any resource.
        for mode in (0o664, 0o602):
            with pytest.raises(TokensFileError, match="can be changed by other users.*chmod 600"):
                load_tokens_file(write(tmp_path / "t.json", good, mode))
    assert parse_entries({"tokens": []}) == ()
    with pytest.raises(TokensFileError, match="holds no tokens, so no request could use it"):
        load_tokens_file(write(tmp_path / "t.json", {"tokens": []}))


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None,
         stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "studio.cli", *args], cwd=cwd, input=stdin, text=True,
                          capture_output=True, timeout=120, env={**os.environ, **(env or {})})


def test_tokens_new_adds_an_entry_and_a_server_refuses_a_bad_file_at_start(tmp_path):
    path = tmp_path / "tokens.json"
    made = _cli("tokens", "new", "--name", "alice-app", "--resource", "alice", "--file", str(path), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    token = next(line.strip() for line in made.stdout.splitlines() if line.strip().startswith("mst_"))
    assert token not in path.read_text()  # only its hash is kept
    if os.name == "posix":
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    tokens = load_tokens_file(path)
    assert tokens.match(token).name == "alice-app" and tokens.match(token).resources == frozenset({"alice"})
    again = _cli("tokens", "new", "--name", "alice-app", "--resource", "bob", "--file", str(path), cwd=tmp_path)
    assert again.returncode == 1 and "the name is used by entry 1 too" in again.stderr
    assert len(load_tokens_file(path).entries) == 1  # the refused entry changed nothing
    printed = _cli("tokens", "new", "--name", "bob-app", "--resource", "bob", cwd=tmp_path)
    assert '"resources": ["bob"]' in printed.stdout
    assert _cli("tokens", "hash", cwd=tmp_path, stdin=token + "\n").stdout.strip() == token_sha256(token)
    # A server given a bad file does not start, and says which entry is wrong and why.
    write(path, {"tokens": [entry("alice-app", sha=token)]})  # the token itself where its hash belongs
    for command in (["serve", "--model", "openai/gpt-4o-mini", "--db", str(tmp_path / "m.db")],
                    ["mcp", "--db", str(tmp_path / "m.db"), "--http", "--any-resource"]):
        refused = _cli(*command, "--port", "0", "--tokens-file", str(path), cwd=tmp_path,
                       env={"OPENAI_API_KEY": "sk-unused"})
        assert refused.returncode == 1 and "entry 1 ('alice-app')" in refused.stderr, refused.stderr
        assert "It looks like the token itself" in refused.stderr and token not in refused.stderr
    env_name = {"MEMORY_STUDIO_GATEWAY_TOKENS_FILE": str(tmp_path / "nope.json")}
    refused = _cli("serve", "--model", "openai/gpt-4o-mini", "--db", str(tmp_path / "m.db"), "--port", "0",
                   cwd=tmp_path, env={"OPENAI_API_KEY": "sk-unused", **env_name})
    assert refused.returncode == 1 and "nope.json does not exist" in refused.stderr
    stdio = _cli("mcp", "--db", str(tmp_path / "m.db"), "--resource", "ada", "--tokens-file", str(path), cwd=tmp_path)
    assert stdio.returncode == 1 and "--tokens-file is for --http" in stdio.stderr


def test_the_shared_token_cannot_also_be_a_tokens_files_entry(tmp_path, model, users, store):
    """An existing secret hashed into the file (`tokens hash`, as DEPLOYMENT says) while the shared token's variable
    still holds it: the guard compared the shared token first, so the entry's user reached every resource (Bob's
    secret), and the trace named nobody. The server now refuses to start, naming the entry, never the token."""
    bobs = Memory(store, MemoryOptions(last_messages=20))
    bobs.save_messages([Message.user(BOB_SECRET, thread_id="bob-thread", resource_id="bob")])
    alice_app = TokensFile(None, (entry_for("alice-app", ["alice"], SHARED),))
    with pytest.raises(ValueError) as refused:
        GuardPolicy(token=SHARED, tokens=alice_app)
    assert "'alice-app'" in str(refused.value) and SHARED not in str(refused.value)
    assert "every resource" in str(refused.value)
    # From the command line, for both servers: no start, the entry named, the token never shown.
    path = write(tmp_path / "tokens.json", {"tokens": [entry_for("alice-app", ["alice"], SHARED).to_json()]})
    for command, variable in ((["serve", "--model", "openai/gpt-4o-mini"], "MEMORY_STUDIO_GATEWAY_TOKEN"),
                              (["mcp", "--http", "--any-resource"], "MEMORY_STUDIO_MCP_TOKEN")):
        done = _cli(*command, "--db", str(tmp_path / "m.db"), "--port", "0", "--tokens-file", str(path), cwd=tmp_path,
                    env={"OPENAI_API_KEY": "sk-unused", variable: SHARED})
        assert done.returncode == 1 and "'alice-app'" in done.stderr and SHARED not in done.stderr, done.stderr
    # A shared token of its own beside the file is fine, each reaching what it should.
    agent = Agent("chat", instructions="Chat.", model=model, memory=bobs, tracer=False)
    policy = GuardPolicy(token=SHARED, tokens=users.file)
    with GatewayServer(create_app([agent], policy=policy, default_resource="default")) as server:
        with pytest.raises(openai.PermissionDeniedError):
            chat(server, users.alice, "what did I say?", metadata={"thread_id": "bob-thread", "resource_id": "bob"})
        shared = chat(server, SHARED, "what did I say?", metadata={"thread_id": "bob-thread", "resource_id": "bob"})
        assert BOB_SECRET in shared.parse().choices[0].message.content


def test_a_token_in_a_message_or_in_the_wrong_field_stays_out_of_traces_and_logs(tmp_path, users, caplog):
    """The redaction nets knew provider keys (sk-, ghp_, hf_...) but not our own tokens, which this process never
    sees (the file holds hashes): a user pasting theirs into a chat had it in the turn's trace, and an app sending
    its token as OpenAI's `user` field (refused: not a resource of the token) had it in the server's log line."""
    from core import open_store
    from core.traces.store import DuckDBObservabilityStore

    with open_store(tmp_path / "traced.db") as store:
        agent = Agent("chat", instructions="Chat.", model=ScriptedModel(everything_sent), memory=Memory(store))
        with GatewayServer(create_app([agent], policy=GuardPolicy(tokens=users.file))) as server:
            reply = chat(server, users.alice, f"keep my key {users.alice} and sk-abcdefghijklmnop safe").parse()
            with caplog.at_level(logging.WARNING):
                with pytest.raises(openai.PermissionDeniedError):
                    client(server, users.alice).chat.completions.create(
                        model="chat", messages=[{"role": "user", "content": "hi"}], user=users.alice)
        assert store.tracer().flush(30)
        traces = DuckDBObservabilityStore(store.location.observability_path, read_only=True)
        spans = repr(traces.get_trace(reply.model_extra["memory"]["trace_id"]))
    assert "sk-abcdefghijklmnop" not in spans and "keep my key" in spans  # (provider keys were already kept out)
    assert users.alice not in spans
    refused = [r.getMessage() for r in caplog.records if "refused: token 'alice-app'" in r.getMessage()]
    assert refused and not any(users.alice in line for line in refused)


def answer(server: GatewayServer, token: str, method: str, path: str, body: Any = None) -> tuple[int, str, str]:
    """Status, body and ETag of a memory API call, as raw text (what a client could tell apart)."""
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    conn.request(method, path, None if body is None else json.dumps(body),
                 {"content-type": "application/json", "authorization": f"Bearer {token}"})
    response = conn.getresponse()
    status, text, etag = response.status, response.read().decode(), response.getheader("etag") or ""
    conn.close()
    return status, text, etag


def test_a_token_cannot_tell_another_users_thread_from_one_that_does_not_exist(server, users, memory):
    """Alice's token learned which thread ids exist: Bob's thread answered 403 thread_ownership, a missing one 404
    (also Bob's ``conversation:bob:<id>``, whose ids follow a rule). Every memory API route now answers both alike,
    byte for byte but the id she sent; Bob's memory is untouched. Creating a thread under Bob's id by a chat turn
    is still refused (403), reading nothing of his."""
    bobs_memory(server, users, memory)
    chat(server, users.bob, "the conversation", metadata={"conversation_id": "c1"})
    assert memory.get_thread("conversation:bob:c1").resource_id == "bob"
    wm = "/api/memory/threads/{}/working-memory"
    for taken, missing in (("bob-thread", "nope-thread"), ("conversation:bob:c1", "conversation:bob:c2")):
        for method, path, body in (("GET", "/api/memory/threads/{}/messages", None), ("GET", wm, None),
                                   ("PUT", wm, {"workingMemory": "# Alice\n"})):
            for query in ("?resourceId=alice", ""):
                seen = [answer(server, users.alice, method, path.format(quote(thread, safe="")) + query, body)
                        for thread in (taken, missing)]
                assert seen[0][0] in (200, 404) and "zebra" not in seen[0][1], (method, path, seen[0])
                assert seen[0] == (seen[1][0], seen[1][1].replace(missing, taken), seen[1][2]), (method, path, seen)
    assert memory.get_working_memory(resource_id="bob") == f"# Bob\n{BOB_SECRET}\n"
    assert memory.get_working_memory(resource_id="alice") == "# Alice\n"
    assert memory.get_thread("nope-thread") is None and memory.get_thread("conversation:bob:c2") is None
    # A chat turn would create the thread if it were missing: under Bob's id it is refused, reading nothing.
    with pytest.raises(openai.PermissionDeniedError) as refused:
        client(server, users.alice).chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "what is my PIN?"}],
            metadata={"thread_id": "bob-thread"})
    assert refused.value.code == "thread_ownership" and "zebra" not in str(refused.value.body)
    assert "bob'" not in refused.value.message.replace("bob-thread", "")


def test_a_header_that_says_where_a_turn_goes_is_refused_when_sent_twice_with_different_values(server, users, memory,
                                                                                              model):
    """``x-resource-id: alice`` then ``x-resource-id: bob`` ran Alice's turn (the first copy), silently; a proxy or
    client library in front that checked or meant the other copy disagreed with the gateway about whose memory the
    turn used. A header that chooses the thread, resource, conversation or idempotency key is now refused when sent
    twice with different values (400 naming it), before anything runs; twice with one value is one value."""
    def send(extra: list[tuple[str, str]]) -> tuple[int, Any]:
        conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
        body = json.dumps({"model": "chat", "messages": [{"role": "user", "content": "hello"}]}).encode()
        conn.putrequest("POST", "/v1/chat/completions")
        for name, value in [("content-type", "application/json"), ("authorization", f"Bearer {users.desk}"),
                            ("content-length", str(len(body))), *extra]:
            conn.putheader(name, value)
        conn.endheaders(body)
        response = conn.getresponse()
        answer = response.status, json.loads(response.read())
        conn.close()
        return answer

    calls = len(model.requests)
    for name, first, second in (("x-resource-id", "alice", "carol"), ("x-thread-id", "t-a", "t-b"),
                                ("x-conversation-id", "c-a", "c-b"), ("Idempotency-Key", "k-a", "k-b")):
        extra = [(name, first), (name, second)] + ([] if name == "x-resource-id" else [("x-resource-id", "alice")])
        status, data = send(extra)
        assert (status, data["error"]["param"]) == (400, name.lower()), (name, data)
        assert "sent 2 times with different values" in data["error"]["message"]
    assert len(model.requests) == calls and memory.list_threads(resource_id="alice").total == 0
    assert memory.list_threads(resource_id="carol").total == 0
    status, data = send([("x-resource-id", "alice"), ("x-resource-id", "alice"), ("x-thread-id", "t-same")])
    assert status == 200 and data["memory"]["resource_id"] == "alice" and data["memory"]["thread_id"] == "t-same"
