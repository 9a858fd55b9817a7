"""A `memory-studio serve` process killed after it stored a turn, before it answered: the retry of the request (the
official ``openai`` client, the same ``Idempotency-Key``) reaches another process and gets the stored answer; the
turn is stored once. The key's outcome is written in the transaction that saves the turn, so there is no point at
which a process can die with the turn stored and the key still leased (before, a retry took the key over after the
lease and ran the turn again). Both backends: a libSQL file and a Postgres database shared by the two processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import pytest

from core import open_store
from core.storage.schema import IDEMPOTENCY_TABLE

pytestmark = [pytest.mark.backends, pytest.mark.slow]

AGENTS_MODULE = textwrap.dedent('''
    import os
    import time
    from pathlib import Path

    from core import Memory, MemoryOptions, open_store
    from core.agent import Agent
    from core.llm import ScriptedModel
    from core.processors import BaseProcessor


    class HangAfterSave(BaseProcessor):
        """Runs after the built-in saver: in the process the test kills, it says the turn is stored and waits."""

        id = "hang-after-save"

        def process_output(self, ctx):
            marker = os.environ.get("GW_SAVED_MARKER")
            if marker and ctx.saved:
                Path(marker).write_text(",".join(m.id for m in ctx.saved))
                time.sleep(600)


    def echo(messages, tools):
        users = [m["content"] for m in messages if m["role"] == "user"]
        return f"{len(users)} user message(s); pid {os.getpid()}"


    def agents():
        memory = Memory(open_store(os.environ["GW_FLEET_DB"]), MemoryOptions(last_messages=50),
                        output_processors=[HangAfterSave()])
        return [Agent("echo", instructions="Echo.", model=ScriptedModel(echo), memory=memory, tracer=False)]
''')

Start = Callable[..., tuple[str, "subprocess.Popen[str]"]]


@pytest.fixture
def start(tmp_path: Path, db_path: Path | str) -> Iterator[Start]:
    (tmp_path / "gw_crash_agents.py").write_text(AGENTS_MODULE)
    procs: list[subprocess.Popen[str]] = []

    def run(*flags: str, marker: Path | None = None) -> tuple[str, subprocess.Popen[str]]:
        env = {**os.environ, "GW_FLEET_DB": str(db_path)}
        env.pop("MEMORY_STUDIO_GATEWAY_TOKEN", None)
        if marker is not None:
            env["GW_SAVED_MARKER"] = str(marker)
        proc = subprocess.Popen(
            [sys.executable, "-m", "studio.cli", "serve", "--agents", "gw_crash_agents:agents", "--port", "0",
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


def _rows(db: Path | str) -> list[tuple[object, ...]]:
    store = open_store(db)
    try:
        with store.db.read() as conn:
            return [tuple(r) for r in conn.exec_driver_sql(f"SELECT idem_key, state, thread_id FROM {IDEMPOTENCY_TABLE}")]
    finally:
        store.close()


def _messages(db: Path | str, thread: str) -> list[tuple[str, str]]:
    store = open_store(db)
    try:
        with store.db.read() as conn:
            return [tuple(r) for r in conn.exec_driver_sql(
                'SELECT role, content FROM mastra_messages WHERE thread_id = ? ORDER BY "createdAt"', (thread,))]
    finally:
        store.close()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_process_killed_after_storing_a_turn_leaves_its_answer_for_the_retry(start, tmp_path, db_path, stream):
    marker = tmp_path / "saved"
    dying, dying_proc = start("--idempotency-lease", "1", marker=marker)
    other, _ = start("--idempotency-lease", "1")
    request = {"model": "echo", "messages": [{"role": "user", "content": "plan my trip"}],
               "metadata": {"thread_id": "crash-1", "resource_id": "ada"},
               "extra_headers": {"Idempotency-Key": "k-crash"}}

    def first() -> None:  # its answer never comes: the process is killed while it hangs after the save
        try:
            reply = _client(dying, timeout=5).chat.completions.create(**request, stream=stream)
            if stream:
                for _ in reply:
                    pass
        except openai.APIError:
            pass

    sender = threading.Thread(target=first, daemon=True)
    sender.start()
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline, "the first request never stored its turn"
        assert dying_proc.poll() is None, dying_proc.stderr.read()
        time.sleep(0.05)
    stored = _messages(db_path, "crash-1")
    assert [role for role, _ in stored] == ["user", "assistant"]
    dying_proc.send_signal(signal.SIGKILL)  # after the save, before any answer was sent
    dying_proc.wait(60)
    sender.join(60)

    # The retry reaches the other process. The key's outcome was saved with the turn, so it is answered from it
    # at once; a key still leased would answer 409 until the lease ran out and then run the turn a second time.
    while True:
        try:
            reply = _client(other).chat.completions.with_raw_response.create(**request)
            break
        except openai.ConflictError as exc:
            assert exc.code == "idempotency_key_in_use"
            assert time.monotonic() < deadline, "the dead process's key was never answered or freed"
            time.sleep(0.2)
    assert reply.headers.get("idempotent-replayed") == "true"
    answer = reply.parse().choices[0].message.content
    assert answer.startswith("1 user message(s); pid ") and answer in stored[1][1]
    assert reply.headers["x-thread-id"] == "crash-1"
    assert _messages(db_path, "crash-1") == stored  # stored once
    assert _rows(db_path) == [("k-crash", "done", "crash-1")]
