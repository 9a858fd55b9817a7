"""A `memory-studio serve` process killed after it stored a turn, before it answered: the retry of the request (the
official ``openai`` client, the same ``Idempotency-Key``) reaches another process and gets the stored answer; the
turn is stored once. The key's outcome is written in the transaction that saves the turn, so there is no point at
which a process can die with the turn stored and the key still leased (before, a retry took the key over after the
lease and ran the turn again). One killed mid-turn and started again: its key is taken over at once; one that stops
renewing without ending (SIGSTOP): the 409s say so, and when the key frees. Both backends: a libSQL file and a
Postgres database shared by the processes."""

from __future__ import annotations

import math
import re
import signal
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import openai
import pytest

from core import open_store
from core.storage.schema import IDEMPOTENCY_TABLE

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
        if os.environ.get("GW_HANG"):  # this process never answers: the test kills or stops it mid-turn
            time.sleep(600)
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
        yield lambda *flags, marker=None, hang=False: run(
            *flags, env={**({"GW_SAVED_MARKER": str(marker)} if marker is not None else {}),
                         **({"GW_HANG": "1"} if hang else {})})


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


def sent_mid_turn(url: str, request: dict[str, Any], db_path: Path | str) -> threading.Thread:
    """``request`` sent to the process at ``url`` (whose model hangs) from a thread, once its key is taken."""
    def first() -> None:  # its answer never comes: the test kills or stops the process mid-turn
        try:
            client(url, timeout=600).chat.completions.create(**request)
        except openai.APIError:
            pass

    sender = threading.Thread(target=first, daemon=True)
    sender.start()
    deadline = time.monotonic() + 60
    while not key_rows(db_path):
        assert time.monotonic() < deadline, "the first request never took its key"
        time.sleep(0.05)
    return sender


def locked_until(db_path: Path | str) -> int:
    store = open_store(db_path)
    try:
        with store.db.read() as conn:
            return int(conn.exec_driver_sql(f"SELECT locked_until FROM {IDEMPOTENCY_TABLE}").scalar_one())
    finally:
        store.close()


def answers(url: str, **kwargs: Any) -> tuple[openai.OpenAI, list[httpx.Response]]:
    """The official client on ``url`` with its own retries (``kwargs``), and every response it got, in order."""
    seen: list[httpx.Response] = []

    def keep(response: httpx.Response) -> None:
        response.read()
        seen.append(response)

    http = httpx.Client(event_hooks={"response": [keep]}, timeout=120)
    return openai.OpenAI(base_url=f"{url}/v1", api_key="-", http_client=http, **kwargs), seen


def test_a_gateway_killed_mid_turn_and_restarted_takes_its_key_over_at_once(start, db_path):
    """kill -9 of `serve` mid-turn, then `serve` started again on this host: the official client's retry of the keyed
    request runs it at once and stores it once. Before, the dead process's lease (60 s) answered 409 "is still
    running ... Send it again in 2 second(s)", which the client obeyed twice and then raised ConflictError."""
    dying, dying_proc = start(hang=True)  # the default lease, 60 s: only a proof that its holder is gone frees it
    request = {"model": "echo", "messages": [{"role": "user", "content": "plan my trip"}],
               "metadata": {"resource_id": "ada"}, "extra_headers": {"Idempotency-Key": "k-killed"}}
    sender = sent_mid_turn(dying, request, db_path)
    ((_, state, chosen_thread),) = key_rows(db_path)
    assert state == "running"
    dying_proc.send_signal(signal.SIGKILL)
    dying_proc.wait(60)
    sender.join(60)
    restarted, _ = start()
    retrying, seen = answers(restarted)  # its default retries
    with retrying:
        reply = retrying.chat.completions.with_raw_response.create(**request)
    assert [r.status_code for r in seen] == [200]  # no 409: the key was taken over at once
    assert reply.headers["x-thread-id"] == chosen_thread and "idempotent-replayed" not in reply.headers
    assert reply.parse().choices[0].message.content.startswith("1 user message(s)")
    assert [role for role, _ in thread_messages(db_path, chosen_thread)] == ["user", "assistant"]
    assert key_rows(db_path) == [("k-killed", "done", chosen_thread)]


def test_a_holder_that_stopped_renewing_is_answered_so_and_the_clients_retries_recover(start, db_path):
    """A gateway that stops without its process ending (a frozen host or VM: SIGSTOP here) cannot be proven gone: its
    key frees when its lease runs out. The 409 says what is known: "still running (renewed N s ago)" while it renews,
    "seems to have stopped (last renewed N s ago); the key frees in M s" with ``Retry-After: M`` once it missed its
    renewals, and the official client's own retries (two by default) then get the request run, once."""
    lease = 9
    holding, holding_proc = start("--idempotency-lease", str(lease), hang=True)
    other, _ = start("--idempotency-lease", str(lease))
    request = {"model": "echo", "messages": [{"role": "user", "content": "plan my trip"}],
               "metadata": {"resource_id": "ada"}, "extra_headers": {"Idempotency-Key": "k-frozen"}}
    sent_mid_turn(holding, request, db_path)
    ((_, _, chosen_thread),) = key_rows(db_path)
    try:
        with pytest.raises(openai.ConflictError) as running:  # while it runs and renews
            client(other).chat.completions.create(**request)
        told = running.value.message
        assert re.search(r"is still running \(its gateway renewed the key's lease \d s ago\)\. Send it again in 2 s", told)
        assert running.value.response.headers["retry-after"] == "2"
        assert "The openai client waits Retry-After and sends the request again by itself, at most max_retries " \
               "times (2 unless set)." in told
        # Stopped just after a renewal, so it holds no transaction of the database.
        renewed = locked_until(db_path)
        deadline = time.monotonic() + 60
        while locked_until(db_path) == renewed:
            assert time.monotonic() < deadline, "the holder never renewed its lease"
            time.sleep(0.05)
        holding_proc.send_signal(signal.SIGSTOP)
        last = locked_until(db_path)
        while time.time() * 1000 < last - lease * 1000 + lease * 1000 / 2 + 200:  # its next renewal is overdue
            time.sleep(0.05)
        with pytest.raises(openai.ConflictError) as stopped:
            client(other).chat.completions.create(**request)
        told = stopped.value.message
        found = re.search(r"held by a gateway that seems to have stopped: it last renewed the key's lease (\d) s ago and "
                          r"renews it every 3 s while the request runs\. The key frees in (\d) s", told)
        assert found, told
        assert int(found.group(1)) >= lease // 2 and 1 <= int(found.group(2)) <= math.ceil(lease / 2)
        assert stopped.value.response.headers["retry-after"] == found.group(2)
        assert key_rows(db_path) == [("k-frozen", "running", chosen_thread)]  # nothing ran
        # The client with its default retries waits Retry-After, then the key is free and the request runs.
        retrying, seen = answers(other)
        with retrying:
            reply = retrying.chat.completions.with_raw_response.create(**request)
        assert [r.status_code for r in seen][-1] == 200 and len(seen) <= 2
        assert reply.headers["x-thread-id"] == chosen_thread
        assert [role for role, _ in thread_messages(db_path, chosen_thread)] == ["user", "assistant"]
        assert key_rows(db_path) == [("k-frozen", "done", chosen_thread)]
    finally:
        holding_proc.send_signal(signal.SIGKILL)  # (a stopped process would not end on the SIGTERM the fixture sends)
        holding_proc.wait(60)
