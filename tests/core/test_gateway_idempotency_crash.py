"""A `memory-studio serve` process killed after it stored a turn, before it answered: the retry of the request (the
official ``openai`` client, the same ``Idempotency-Key``) reaches another process and gets the stored answer; the
turn is stored once. The key's outcome is written in the transaction that saves the turn, so there is no point at
which a process can die with the turn stored and the key still leased (before, a retry took the key over after the
lease and ran the turn again). Both backends: a libSQL file and a Postgres database shared by the two processes."""

from __future__ import annotations

import signal
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from .gateway_processes import Run, client, key_rows, retry_until_taken, serve_processes, thread_messages

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

Start = Run


@pytest.fixture
def start(tmp_path: Path, db_path: Path | str) -> Iterator[Start]:
    with serve_processes(tmp_path, "gw_crash_agents", AGENTS_MODULE, db_path) as run:
        yield lambda *flags, marker=None: run(*flags, env={"GW_SAVED_MARKER": str(marker)} if marker is not None else None)


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
            reply = client(dying, timeout=5).chat.completions.create(**request, stream=stream)
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
    stored = thread_messages(db_path, "crash-1")
    assert [role for role, _ in stored] == ["user", "assistant"]
    dying_proc.send_signal(signal.SIGKILL)  # after the save, before any answer was sent
    dying_proc.wait(60)
    sender.join(60)

    # The retry reaches the other process. The key's outcome was saved with the turn, so it is answered from it
    # at once; a key still leased would answer 409 until the lease ran out and then run the turn a second time.
    reply = retry_until_taken(other, request, deadline, "the dead process's key was never answered or freed")
    assert reply.headers.get("idempotent-replayed") == "true"
    answer = reply.parse().choices[0].message.content
    assert answer.startswith("1 user message(s); pid ") and answer in stored[1][1]
    assert reply.headers["x-thread-id"] == "crash-1"
    assert thread_messages(db_path, "crash-1") == stored  # stored once
    assert key_rows(db_path) == [("k-crash", "done", "crash-1")]
