"""`memory-studio serve --model` with a memory of the user's choosing: working memory, semantic recall and
observational memory from flags (a user of Ollama or llama.cpp had to write an --agents module for any of them).
Each test starts the command for real, in its own process, against a loopback model server, and talks to it with
the official ``openai`` client; what the model server received shows the memory at work."""

from __future__ import annotations

import io
import json
import os
import subprocess
import urllib.request
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest

from core.cli import main as cli_main
from core.gateway import require_serve_extra
from core.llm import LoopbackServer, ScriptedModel, ScriptedReply, tool_call
from core.llm.base import Usage
from core.observational.observer import OBSERVER_SYSTEM_PROMPT


@contextmanager
def serve_model(folder: Path, env: dict[str, str], *flags: str) -> Iterator[tuple[openai.OpenAI, list[str], str]]:
    """`memory-studio serve --model llamacpp/chat --port 0 <flags>` running on ``folder``/memory.db: the official
    client on it, the two lines it printed when it was ready (the rest of what it printed is added to them once it
    has stopped), and its URL."""
    require_serve_extra()
    environment = {**os.environ, **env}
    environment.pop("MEMORY_STUDIO_GATEWAY_TOKEN", None)
    log = (folder / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "studio.cli", "serve", "--model", "llamacpp/chat", "--db", str(folder / "memory.db"),
         "--port", "0", "--log-level", "warning", *flags],
        cwd=folder, env=environment, stdout=subprocess.PIPE, stderr=log, text=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        lines += [proc.stdout.readline(), proc.stdout.readline()]  # printed once the socket listens
        assert "memory-studio gateway: 1 agent(s) (assistant) on http://127.0.0.1:" in lines[0], \
            (folder / "serve.log").read_text()
        url = lines[0].split(" on ", 1)[1].split(" ", 1)[0]
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0, timeout=120), lines, url
    finally:
        proc.terminate()
        proc.wait(60)
        assert proc.stdout is not None
        lines += proc.stdout.read().splitlines(keepends=True)
        proc.stdout.close()
        log.close()


def ask(client: openai.OpenAI, text: str, thread: str, resource: str = "ada") -> str:
    reply = client.chat.completions.create(model="assistant", messages=[{"role": "user", "content": text}],
                                           metadata={"thread_id": thread, "resource_id": resource})
    return reply.choices[0].message.content or ""


def system_text(request: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content")) for m in request["messages"] if m["role"] == "system")


def test_working_memory_from_a_template_file_is_updated_by_the_model_and_read_in_the_next_thread(tmp_path):
    filled = "# Profile\n- Name: Ada\n- Diet: vegan, allergic to peanuts\n"

    def reply(messages: list[dict[str, Any]], tools: Any) -> Any:
        names = [t["function"]["name"] for t in tools or ()]
        if "updateWorkingMemory" in names and messages[-1]["role"] == "user" and "I'm Ada" in messages[-1]["content"]:
            return ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": filled}),))
        return "Noted."

    (tmp_path / "profile.md").write_text("# Profile\n- Name:\n- Diet:\n", encoding="utf-8")
    with LoopbackServer(ScriptedModel(reply)) as upstream, serve_model(
            tmp_path, {"LLAMACPP_BASE_URL": upstream.base_url},
            "--working-memory", "--working-memory-template", "profile.md") as (client, lines, url):
        assert "working memory (resource, a template)" in lines[1] and "the last 10 messages" in lines[1]
        assert ask(client, "Hi, I'm Ada; vegan, and allergic to peanuts.", "t1") == "Noted."
        first = upstream.chat_requests()[0]
        assert "updateWorkingMemory" in [t["function"]["name"] for t in first["tools"]]
        assert "- Diet:" in system_text(first)  # the template the model is asked to fill in
        assert ask(client, "What should I cook tonight?", "t2") == "Noted."  # another thread of the same user
        last = upstream.chat_requests()[-1]
        assert "allergic to peanuts" in system_text(last)  # the stored working memory, read in the next turn
        assert not any("peanuts" in str(m["content"]) for m in last["messages"] if m["role"] != "system")
        # The memory API reads it too (the agent's memory is the one served).
        with urllib.request.urlopen(f"{url}/api/memory/threads/t2/working-memory?resourceId=ada", timeout=60) as r:
            assert "allergic to peanuts" in json.dumps(json.load(r))


def test_semantic_recall_brings_an_older_threads_message_into_the_prompt(tmp_path):
    with LoopbackServer(ScriptedModel(lambda m, t: "Noted.")) as upstream, serve_model(
            tmp_path, {"LLAMACPP_BASE_URL": upstream.base_url},
            "--semantic-recall", "--semantic-recall-top-k", "2", "--semantic-recall-range", "0",
            "--last-messages", "2") as (client, lines, url):
        assert "semantic recall (resource, top 2, 0 before and 0 after each)" in lines[1]
        assert "the last 2 messages" in lines[1]
        ask(client, "My sister's orange cat is called Biscuit.", "pets")
        for i in range(3):
            ask(client, f"Unrelated note number {i} about the weather forecast.", "misc")
        ask(client, "What is the name of my sister's cat?", "new")
        sent = json.dumps(upstream.chat_requests()[-1]["messages"])
        assert "Biscuit" in sent  # from thread "pets": the new thread has no history of its own


def test_observational_memory_observes_with_its_own_model_and_the_next_turn_reads_the_observations(tmp_path):
    observed = ("<observations>\nDate: Mar 3, 2025\n* 🔴 (09:00) User Ada keeps bees on her roof in Lyon.\n"
                "</observations>")
    words = " ".join(f"word{i}" for i in range(120))
    with LoopbackServer(ScriptedModel(lambda m, t: "Reply " + "x " * 40)) as upstream, \
            LoopbackServer(ScriptedModel(lambda m, t: observed)) as observer, serve_model(
                tmp_path, {"LLAMACPP_BASE_URL": upstream.base_url, "VLLM_BASE_URL": observer.base_url},
                "--observational-memory", "resource", "--om-message-tokens", "200", "--om-model",
                "vllm/observer") as (client, lines, url):
        assert "observational memory (resource; observes at 200 tokens, reflects at 40,000; model vllm/observer)" \
            in lines[1]
        for i in range(4):
            ask(client, f"Question {i}: I keep bees on my roof in Lyon. {words}", "bees")
            if observer.chat_requests():
                break
        assert observer.chat_requests(), "the observer was never asked"
        assert observer.chat_requests()[0]["model"] == "observer"  # --om-model, not the agent's model
        assert all(r["model"] == "chat" for r in upstream.chat_requests())
        ask(client, "Where are my bees?", "bees")
        assert "keeps bees on her roof in Lyon" in system_text(upstream.chat_requests()[-1])


def is_observer(messages: list[dict[str, Any]]) -> bool:
    return bool(messages) and OBSERVER_SYSTEM_PROMPT[:80] in str(messages[0].get("content"))


def cut_off_observer(text: str, usage: Usage) -> ScriptedModel:
    """A model server whose observer replies end at a length limit (finish reason "length") with ``text``, as the
    server's ``usage`` says; the agent's turns get a plain reply."""
    def reply(messages: list[dict[str, Any]], tools: Any) -> Any:
        if is_observer(messages):
            return ScriptedReply(text, finish_reason="length", usage=usage)
        return "Reply " + "x " * 40

    return ScriptedModel(reply)


def observation_failed(client: openai.OpenAI) -> str:
    """Turns of long messages on thread "bees" until one's ``observation_failed`` notice comes: its message."""
    words = " ".join(f"word{i}" for i in range(120))
    for i in range(4):
        reply = client.chat.completions.create(
            model="assistant", messages=[{"role": "user", "content": f"Question {i}: I keep bees in Lyon. {words}"}],
            metadata={"thread_id": "bees", "resource_id": "ada"})
        for notice in (reply.model_dump().get("memory") or {}).get("notices", []):
            if notice["code"] == "observation_failed":
                return str(notice["message"])
    return ""


def test_an_observer_that_fills_the_servers_context_is_told_apart_from_one_cut_at_its_cap(tmp_path):
    """Walked with SmolLM2-135M on llama.cpp (--context-window 2048): as observer it wrote "🟡" lines until the
    server's context was full (usage 1,118 + 930 = 2,048, finish reason "length"). The notice said the reply was
    cut off "at the server's own reply limit" and told to raise observational_memory's max_output_tokens, an
    option `serve` had no flag for, and one no value of which makes such a reply end. Now it names the limit the
    reply hit (the end of the context, from the server's usage), says what it wrote was unusable anyway, and
    names the fix that helps (another observer model, --om-model); nothing is observed, the messages stay raw."""
    model = cut_off_observer("🟡\n\n" * 200, Usage(prompt_tokens=1118, completion_tokens=930, total_tokens=2048))
    with LoopbackServer(model) as upstream, serve_model(
            tmp_path, {"LLAMACPP_BASE_URL": upstream.base_url}, "--context-window", "2048",
            "--observational-memory", "resource", "--om-message-tokens", "200") as (client, lines, url):
        message = observation_failed(client)
        assert ("the observer reply was cut off at the end of the model's 2,048-token context (a request of 1,118 "
                "tokens, 930 written) (finish reason 'length')") in message, message
        assert "not usable either (the reply repeats itself (degenerate output)" in message
        assert "the model did not write the observer's format and end it, so a larger limit may not help" in message
        assert "(memory-studio serve: --om-model PROVIDER/MODEL)" in message
        assert "server's own reply limit" not in message and "max_output_tokens" not in message
        assert "the messages stay raw" in message
        observer_calls = [r for r in upstream.chat_requests() if is_observer(r["messages"])]
        assert observer_calls and all("max_tokens" not in r for r in observer_calls)  # no cap was given
        ask(client, "Where are my bees?", "bees")
        sent = json.dumps(upstream.chat_requests()[-1]["messages"])
        assert "Question 0: I keep bees in Lyon" in sent  # nothing observed, nothing lost


def test_om_max_output_tokens_caps_the_observer_and_a_reply_cut_at_it_says_to_raise_it(tmp_path):
    model = cut_off_observer(
        "<observations>\nDate: Mar 3, 2025\n* 🔴 (09:00) User Ada keeps bees in Lyon.\n* 🟡 (09:01) User asked",
        Usage(prompt_tokens=700, completion_tokens=300, total_tokens=1000))
    with LoopbackServer(model) as upstream, serve_model(
            tmp_path, {"LLAMACPP_BASE_URL": upstream.base_url}, "--context-window", "4096", "--max-tokens", "100",
            "--observational-memory", "resource", "--om-message-tokens", "200",
            "--om-max-output-tokens", "300") as (client, lines, url):
        assert "observes at 200 tokens, reflects at 40,000; the agent's model, replies up to 300 tokens)" in lines[1]
        message = observation_failed(client)
        assert ("the observer reply was cut off at observational_memory max_output_tokens (300) (finish reason "
                "'length'), so its last lines are missing and none of it was used; raise "
                "observational_memory={'max_output_tokens': ...} (memory-studio serve: --om-max-output-tokens N)"
                ) in message, message
        observer_calls = [r for r in upstream.chat_requests() if is_observer(r["messages"])]
        assert observer_calls and all(r["max_tokens"] == 300 for r in observer_calls)
        assert all(r["max_tokens"] == 100 for r in upstream.chat_requests() if not is_observer(r["messages"]))


def test_the_start_says_that_requests_naming_no_user_share_its_per_user_memory(tmp_path):
    # `serve --model ... --working-memory` keeps one working memory per user; a chat front end that sends no user
    # id (the openai client sends none unless told) gives all its users the default resource's. The server says
    # so when it starts, and that without a token any client may use any resource's memory (before, it said
    # "(no token)" and nothing of the sharing: DEPLOYMENT's notices section was the only place that did).
    filled = "# User\n- Name: Ada, allergic to peanuts\n"

    def reply(messages: list[dict[str, Any]], tools: Any) -> Any:
        if messages[-1]["role"] == "user" and "I'm Ada" in messages[-1]["content"]:
            return ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": filled}),))
        return "Noted."

    with LoopbackServer(ScriptedModel(reply)) as upstream, serve_model(
            tmp_path, {"LLAMACPP_BASE_URL": upstream.base_url}, "--working-memory", "--semantic-recall",
            "thread") as (client, lines, url):
        assert "(no token: any client may use any resource's memory)" in lines[0]
        # What it says: two clients naming no user, in threads of their own, share one working memory...
        for text, who in (("Hi, I'm Ada.", None), ("What do you know about me?", None),
                          ("What do you know about me?", "bob")):
            client.chat.completions.create(model="assistant", messages=[{"role": "user", "content": text}],
                                           **({"user": who} if who else {}))
        second, named = upstream.chat_requests()[-2:]
        assert "allergic to peanuts" in system_text(second)
        assert "allergic to peanuts" not in json.dumps(named)  # ...and one that names its user has its own
    assert lines[2] == ("working memory is per user (resource): a request names its user by metadata.resource_id, "
                        "x-resource-id, user or a token of one resource; requests naming none all share resource "
                        "'default' (--default-resource), whoever sends them\n")


def test_the_start_says_nothing_of_sharing_when_nothing_is_kept_per_user():
    from core.gateway.cli import shared_default_resource
    from core.options import MemoryOptions

    for options in ({}, {"working_memory": {"enabled": True, "scope": "thread"}},
                    {"semantic_recall": {"enabled": True, "scope": "thread"},
                     "observational_memory": {"enabled": True, "scope": "thread"}}):
        assert shared_default_resource(MemoryOptions(**options), "default") is None, options
    said = shared_default_resource(MemoryOptions(semantic_recall={"enabled": True, "scope": "resource"},
                                                 observational_memory={"enabled": True, "scope": "resource"}), "anon")
    assert said is not None and said.startswith("semantic recall and observational memory are per user (resource)")
    assert "share resource 'anon'" in said


def serve_cli(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["serve", *args], out=out, err=err)
    return code, err.getvalue()


def test_bad_memory_flags_are_refused_by_name_before_anything_opens(tmp_path, monkeypatch):
    require_serve_extra()
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "m.db"
    (tmp_path / "empty.md").write_text("  \n", encoding="utf-8")
    (tmp_path / "list.json").write_text("[1]", encoding="utf-8")
    (tmp_path / "broken.json").write_text('{"type": "object",', encoding="utf-8")
    (tmp_path / "bad.json").write_text('{"type": "object", "properties": {"a": {"type": "nonsense"}}}',
                                       encoding="utf-8")
    (tmp_path / "latin1.md").write_bytes("# Profil\n- Prénom:\n".encode("latin-1"))
    (tmp_path / "ok.md").write_text("# Profile\n", encoding="utf-8")
    for args, said in (
        (("--last-messages", "-1"), "--last-messages must be 0 (no history) or a positive number of messages, got -1."),
        (("--semantic-recall", "--semantic-recall-top-k", "0"),
         "--semantic-recall-top-k must be a positive number of messages, got 0."),
        (("--semantic-recall", "--semantic-recall-range", "-2"), "--semantic-recall-range must be 0"),
        (("--semantic-recall-top-k", "3"), "--semantic-recall-top-k goes with --semantic-recall: add --semantic-recall"),
        (("--working-memory-template", "ok.md", "--working-memory-schema", "list.json"),
         "--working-memory-template and --working-memory-schema go with --working-memory: add --working-memory"),
        (("--working-memory", "--working-memory-template", "ok.md", "--working-memory-schema", "bad.json"),
         "a Markdown template or a JSON schema, not both"),
        (("--working-memory", "--working-memory-template", "missing.md"),
         "--working-memory-template missing.md: cannot be read (No such file or directory)"),
        (("--working-memory", "--working-memory-template", "empty.md"), "--working-memory-template empty.md: the "
                                                                         "file is empty"),
        (("--working-memory", "--working-memory-template", "latin1.md"), "latin1.md: the file is not UTF-8 text"),
        (("--working-memory", "--working-memory-schema", "broken.json"),
         "--working-memory-schema broken.json: not valid JSON (Expecting"),
        (("--working-memory", "--working-memory-schema", "list.json"),
         "--working-memory-schema list.json: a JSON Schema is an object"),
        (("--working-memory", "--working-memory-schema", "bad.json"),
         "--working-memory-schema bad.json: working_memory.schema is not a valid JSON Schema: 'nonsense'"),
        (("--working-memory", "thread", "--working-memory", "nowhere"), "argument --working-memory: invalid choice: "
                                                                        "'nowhere' (choose from 'resource', 'thread')"),
        (("--om-model", "ollama/qwen"), "--om-model goes with --observational-memory"),
        (("--observational-memory", "--om-message-tokens", "0"),
         "--om-message-tokens must be a positive number of tokens, got 0."),
        (("--om-max-output-tokens", "300"), "--om-max-output-tokens goes with --observational-memory"),
        (("--observational-memory", "--om-max-output-tokens", "0"),
         "--om-max-output-tokens must be a positive number of tokens, got 0."),
        (("--observational-memory", "--om-model", "vlm/qwen"), "--om-model vlm/qwen: Unknown model provider 'vlm' "
                                                               "in 'vlm/qwen'. Did you mean 'vllm/qwen'?"),
        (("--observational-memory", "--om-model", "openai/gpt-4o-mini"),
         "The observational memory model of agent 'assistant' (--om-model) 'openai/gpt-4o-mini' needs an API key"),
        (("--observational-memory", "--last-messages", "5"),
         "--last-messages does nothing with --observational-memory, which replaces the message history"),
    ):
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        code, err = serve_cli("--model", "ollama/llama3.1", *args, "--db", str(db), "--port", "0")
        assert code in (1, 2) and said in err, (args, err)
        assert not db.exists(), args  # refused before the database was opened (or made)


def test_memory_flags_go_with_model_only(tmp_path, monkeypatch):
    require_serve_extra()
    monkeypatch.chdir(tmp_path)
    code, err = serve_cli("--agents", "gw_some_agents:agents", "--working-memory", "--semantic-recall", "thread",
                          "--observational-memory", "--om-message-tokens", "500", "--last-messages", "4")
    assert code == 1, err
    assert ("--last-messages, --working-memory, --semantic-recall, --observational-memory, --om-message-tokens go "
            "with --model only") in err and "set them in gw_some_agents" in err


def test_an_observer_failure_that_echoes_a_users_messages_reaches_that_user_only(tmp_path):
    """An observer failure is noted on every turn until an observation succeeds (s35-om6), with the server's error
    text, which some servers fill with the request they refused: here the observer echoes the messages it was sent.
    Each user's notice carries that user's own words (their observational memory's row), never another user's, on
    any turn, plain or streamed."""
    from core.llm.base import ModelError

    def echoing(messages: list[dict[str, Any]], tools: Any) -> Any:
        if is_observer(messages):
            sent = " ".join(str(m.get("content")) for m in messages[1:])
            start = max(0, sent.find("Note "))  # (the messages it was sent, as such a server quotes them)
            raise ModelError(f"cannot parse the request: {sent[start:start + 200]}", model_id="observer")
        return "Reply " + "x " * 40

    words = " ".join(f"word{i}" for i in range(120))
    secrets = {"ada": "my locker code is 4711", "bob": "my locker code is 9052"}
    with LoopbackServer(ScriptedModel(lambda m, t: "Reply " + "x " * 40)) as upstream, \
            LoopbackServer(ScriptedModel(echoing)) as observer, serve_model(
                tmp_path, {"LLAMACPP_BASE_URL": upstream.base_url, "VLLM_BASE_URL": observer.base_url},
                "--observational-memory", "resource", "--om-message-tokens", "200", "--om-model",
                "vllm/observer") as (client, lines, url):
        told: dict[str, list[str]] = {"ada": [], "bob": []}
        for i in range(4):
            for user in ("ada", "bob"):
                text = f"Note {i}: {secrets[user]}. {words}"
                meta = {"thread_id": f"{user}-notes", "resource_id": user}
                reply = client.chat.completions.create(
                    model="assistant", messages=[{"role": "user", "content": text}], metadata=meta)
                told[user] += [n["message"] for n in (reply.model_dump().get("memory") or {}).get("notices", [])
                               if n["code"] == "observation_failed"]
                with client.chat.completions.create(model="assistant", stream=True, metadata=meta,
                                                    messages=[{"role": "user", "content": f"And {i}? {words}"}]) as s:
                    chunks = [c.model_dump() for c in s]
                told[user] += [n["message"] for c in chunks for n in (c.get("memory") or {}).get("notices", [])
                               if n["code"] == "observation_failed"]
        assert observer.chat_requests(), "the observer was never asked"
        for user, other in (("ada", "bob"), ("bob", "ada")):
            assert any(secrets[user] in m for m in told[user]), told[user]  # (the echo reaches its own user)
            assert not any(secrets[other] in m or f"{other}-notes" in m for m in told[user]), told[user]
