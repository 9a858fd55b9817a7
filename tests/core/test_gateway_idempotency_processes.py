"""Idempotency keys across `memory-studio serve` processes on one libSQL file: a retry that reaches another process
gets the kept answer, and a key whose process died is taken over once its lease runs out."""

from __future__ import annotations

import json
import signal
import socket
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .gateway_processes import Run, client, key_rows, retry_until_taken, serve_processes, thread_messages

AGENTS_MODULE = textwrap.dedent('''
    import os
    import time

    from core import Memory, MemoryOptions, open_store
    from core.agent import Agent
    from core.llm import ScriptedModel


    def echo(messages, tools):
        if os.environ.get("GW_HANG"):  # this process never answers: the test kills it mid-turn
            time.sleep(600)
        users = [m["content"] for m in messages if m["role"] == "user"]
        return f"{len(users)} user message(s); pid {os.getpid()}"


    def agents():
        memory = Memory(open_store(os.environ["GW_FLEET_DB"]), MemoryOptions(last_messages=50))
        return [Agent("echo", instructions="Echo.", model=ScriptedModel(echo), memory=memory)]
''')

Start = Run


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    with serve_processes(tmp_path, "gw_idem_agents", AGENTS_MODULE, tmp_path / "fleet.db") as run:
        yield lambda *flags, hang=False: run(*flags, env={"GW_HANG": "1"} if hang else None)


@pytest.mark.slow
def test_a_retry_reaching_another_process_gets_the_kept_answer(start, tmp_path):
    (a, _), (b, _) = start(), start()
    meta = {"thread_id": "fleet-1", "resource_id": "ada"}
    first = client(a).chat.completions.with_raw_response.create(
        model="echo", messages=[{"role": "user", "content": "hello"}], metadata=meta,
        extra_headers={"Idempotency-Key": "k-fleet"})
    again = client(b).chat.completions.with_raw_response.create(
        model="echo", messages=[{"role": "user", "content": "hello"}], metadata=meta,
        extra_headers={"Idempotency-Key": "k-fleet"})
    assert again.headers["idempotent-replayed"] == "true" and "idempotent-replayed" not in first.headers
    assert again.parse().choices[0].message.content == first.parse().choices[0].message.content
    assert again.parse().id == first.parse().id
    assert len(thread_messages(tmp_path / "fleet.db", "fleet-1")) == 2


def waiting_client(url: str, request: dict[str, Any]) -> socket.socket:
    """A client that sent ``request`` (a chat completion's arguments) and waits for its answer, connected."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    body = json.dumps({k: v for k, v in request.items() if k != "extra_headers"}).encode()
    headers = "".join(f"{k}: {v}\r\n" for k, v in request["extra_headers"].items()).encode()
    sock = socket.create_connection((host, int(port)), timeout=60)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n%s"
                 b"Content-Length: %d\r\n\r\n%s" % (host.encode(), port.encode(), headers, len(body), body))
    return sock


@pytest.mark.slow
def test_a_key_whose_process_died_is_taken_over_after_its_lease(start, tmp_path):
    db = tmp_path / "fleet.db"
    dying, dying_proc = start("--idempotency-lease", "1", hang=True)
    other, _ = start("--idempotency-lease", "1")
    request = {"model": "echo", "messages": [{"role": "user", "content": "plan my trip"}],
               "metadata": {"resource_id": "ada"}, "extra_headers": {"Idempotency-Key": "k-died"}}
    # Its client stays connected until the process dies (a client that leaves first gives the key back at once:
    # test_gateway_client_gone.py).
    waiting = waiting_client(dying, request)
    deadline = time.monotonic() + 60
    while not key_rows(db):
        assert time.monotonic() < deadline, "the first request never took its key"
        time.sleep(0.05)
    ((_, state, chosen_thread),) = key_rows(db)
    assert state == "running"
    dying_proc.send_signal(signal.SIGKILL)
    dying_proc.wait(60)
    waiting.close()
    # The retry reaches the other process: it runs, once (at once here: the dead process ran on this host, so the other
    # sees it has ended; one on another host is waited for until its lease runs out: test_gateway_idempotency_crash.py).
    reply = retry_until_taken(other, request, deadline, "the dead process's key was never free")
    # It goes on in the thread the first request chose (which it never answered), stored once.
    assert reply.headers["x-thread-id"] == chosen_thread and "idempotent-replayed" not in reply.headers
    assert reply.parse().choices[0].message.content.startswith("1 user message(s)")
    assert [role for role, _ in thread_messages(db, chosen_thread)] == ["user", "assistant"]
    assert key_rows(db) == [("k-died", "done", chosen_thread)]
