"""Two `memory-studio serve` processes on one libSQL file: one conversation, either process answers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

AGENTS_MODULE = textwrap.dedent('''
    import os

    from core import Memory, MemoryOptions, open_store
    from core.agent import Agent
    from core.llm import ScriptedModel


    def echo(messages, tools):
        users = [m["content"] for m in messages if m["role"] == "user"]
        return f"{len(users)} user message(s); pid {os.getpid()}"


    def agents():
        memory = Memory(open_store(os.environ["GW_FLEET_DB"]), MemoryOptions(last_messages=50))
        return [Agent("echo", instructions="Echo.", model=ScriptedModel(echo), memory=memory)]
''')


@pytest.fixture
def gateways(tmp_path: Path):
    (tmp_path / "gw_fleet_agents.py").write_text(AGENTS_MODULE)
    env = {**os.environ, "GW_FLEET_DB": str(tmp_path / "fleet.db")}
    env.pop("MEMORY_STUDIO_GATEWAY_TOKEN", None)
    procs: list[subprocess.Popen[str]] = []
    urls: list[str] = []
    try:
        for _ in range(2):
            proc = subprocess.Popen(
                [sys.executable, "-m", "studio.cli", "serve", "--agents", "gw_fleet_agents:agents", "--port", "0",
                 "--log-level", "warning"],
                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append(proc)
            line = proc.stdout.readline()  # printed once the socket listens
            assert "memory-studio gateway: 1 agent(s) (echo) on http://127.0.0.1:" in line, proc.stderr.read()
            urls.append(line.split(" on ", 1)[1].split(" ", 1)[0])
        yield urls, procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)
            proc.stdout.close()
            proc.stderr.close()


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0, timeout=120)


@pytest.mark.slow
def test_two_gateway_processes_serve_one_database(gateways):
    urls, procs = gateways
    clients = [_client(u) for u in urls]
    assert urls[0] != urls[1]

    # One conversation, alternating between the processes: each sees everything the other stored.
    pids = set()
    for i in range(4):
        reply = clients[i % 2].chat.completions.create(
            model="echo", messages=[{"role": "user", "content": f"turn {i}"}],
            metadata={"thread_id": "shared", "resource_id": "ada"}).choices[0].message.content
        assert reply.startswith(f"{i + 1} user message(s)")
        pids.add(reply.rsplit(" ", 1)[1])
    assert pids == {str(p.pid) for p in procs}

    # Several clients at once, spread over both processes: no errors, nothing lost.
    def conversation(n: int) -> list[str]:
        return [clients[(n + k) % 2].chat.completions.create(
            model="echo", messages=[{"role": "user", "content": f"c{n} t{k}"}],
            metadata={"thread_id": f"c{n}", "resource_id": "fleet"}).choices[0].message.content.split(";")[0]
            for k in range(3)]

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(conversation, range(6)))
    assert results == [["1 user message(s)", "2 user message(s)", "3 user message(s)"]] * 6

    import http.client
    import json

    for url in urls:  # both processes read the same threads
        conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=60)
        conn.request("GET", "/api/memory/threads?resourceId=fleet")
        data = json.loads(conn.getresponse().read())
        conn.close()
        assert data["total"] == 6
    for n in range(6):
        conn = http.client.HTTPConnection(urls[n % 2].removeprefix("http://"), timeout=60)
        conn.request("GET", f"/api/memory/threads/c{n}/messages?resourceId=fleet")
        assert json.loads(conn.getresponse().read())["total"] == 6
        conn.close()
