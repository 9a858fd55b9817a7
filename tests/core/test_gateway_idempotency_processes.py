"""Idempotency keys across `memory-studio serve` processes on one libSQL file: a retry that reaches another process
gets the kept answer, and a key whose process died is taken over once its lease runs out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import pytest

from core import open_store
from core.storage.schema import IDEMPOTENCY_TABLE

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

Start = Callable[..., tuple[str, "subprocess.Popen[str]"]]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    (tmp_path / "gw_idem_agents.py").write_text(AGENTS_MODULE)
    procs: list[subprocess.Popen[str]] = []

    def run(*flags: str, hang: bool = False) -> tuple[str, subprocess.Popen[str]]:
        env = {**os.environ, "GW_FLEET_DB": str(tmp_path / "fleet.db")}
        env.pop("MEMORY_STUDIO_GATEWAY_TOKEN", None)
        if hang:
            env["GW_HANG"] = "1"
        proc = subprocess.Popen(
            [sys.executable, "-m", "studio.cli", "serve", "--agents", "gw_idem_agents:agents", "--port", "0",
             "--log-level", "warning", *flags],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        line = proc.stdout.readline()  # printed once the socket listens
        assert "memory-studio gateway: 1 agent(s) (echo) on http://127.0.0.1:" in line, proc.stderr.read()
        return line.split(" on ", 1)[1].split(" ", 1)[0], proc

    try:
        yield run
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            proc.wait(60)
            proc.stdout.close()
            proc.stderr.close()


def _client(url: str, **kwargs: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="-", **{"max_retries": 0, "timeout": 120, **kwargs})


def _rows(db: Path) -> list[tuple[object, ...]]:
    store = open_store(db)
    try:
        with store.db.read() as conn:
            return [tuple(r) for r in conn.exec_driver_sql(f"SELECT idem_key, state, thread_id FROM {IDEMPOTENCY_TABLE}")]
    finally:
        store.close()


def _messages(db: Path, thread: str) -> list[tuple[str, str]]:
    store = open_store(db)
    try:
        with store.db.read() as conn:
            return [tuple(r) for r in conn.exec_driver_sql(
                'SELECT role, content FROM mastra_messages WHERE thread_id = ? ORDER BY "createdAt"', (thread,))]
    finally:
        store.close()


@pytest.mark.slow
def test_a_retry_reaching_another_process_gets_the_kept_answer(start, tmp_path):
    (a, _), (b, _) = start(), start()
    meta = {"thread_id": "fleet-1", "resource_id": "ada"}
    first = _client(a).chat.completions.with_raw_response.create(
        model="echo", messages=[{"role": "user", "content": "hello"}], metadata=meta,
        extra_headers={"Idempotency-Key": "k-fleet"})
    again = _client(b).chat.completions.with_raw_response.create(
        model="echo", messages=[{"role": "user", "content": "hello"}], metadata=meta,
        extra_headers={"Idempotency-Key": "k-fleet"})
    assert again.headers["idempotent-replayed"] == "true" and "idempotent-replayed" not in first.headers
    assert again.parse().choices[0].message.content == first.parse().choices[0].message.content
    assert again.parse().id == first.parse().id
    assert len(_messages(tmp_path / "fleet.db", "fleet-1")) == 2


@pytest.mark.slow
def test_a_key_whose_process_died_is_taken_over_after_its_lease(start, tmp_path):
    db = tmp_path / "fleet.db"
    dying, dying_proc = start("--idempotency-lease", "1", hang=True)
    other, _ = start("--idempotency-lease", "1")
    request = {"model": "echo", "messages": [{"role": "user", "content": "plan my trip"}],
               "metadata": {"resource_id": "ada"}, "extra_headers": {"Idempotency-Key": "k-died"}}
    with pytest.raises(openai.APITimeoutError):  # its answer never comes
        _client(dying, timeout=1).chat.completions.create(**request)
    deadline = time.monotonic() + 60
    while not _rows(db):
        assert time.monotonic() < deadline, "the first request never took its key"
        time.sleep(0.05)
    ((_, state, chosen_thread),) = _rows(db)
    assert state == "running"
    dying_proc.send_signal(signal.SIGKILL)
    dying_proc.wait(60)
    # The retry reaches the other process: 409 while the dead one's lease lasts, then it runs, once.
    while True:
        try:
            reply = _client(other).chat.completions.with_raw_response.create(**request)
            break
        except openai.ConflictError as exc:
            assert exc.code == "idempotency_key_in_use"
            assert time.monotonic() < deadline, "the dead process's key was never free"
            time.sleep(0.2)
    # It goes on in the thread the first request chose (which it never answered), stored once.
    assert reply.headers["x-thread-id"] == chosen_thread and "idempotent-replayed" not in reply.headers
    assert reply.parse().choices[0].message.content.startswith("1 user message(s)")
    assert [role for role, _ in _messages(db, chosen_thread)] == ["user", "assistant"]
    assert _rows(db) == [("k-died", "done", chosen_thread)]
