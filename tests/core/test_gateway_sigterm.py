"""`memory-studio serve` stopped by SIGTERM (a rolling restart, `docker stop`, systemd) writes the traces it
has queued before it exits, as Ctrl+C does: uvicorn finishes the requests in flight, then the process exits
through Python's own shutdown (status 143), not by the default signal action that skips it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import openai
import pytest

from core import open_store

AGENTS_MODULE = textwrap.dedent('''
    import os

    from core import Memory, MemoryOptions, open_store
    from core.agent import Agent
    from core.llm import ScriptedModel


    def agents():
        memory = Memory(open_store(os.environ["GW_SIGTERM_DB"]), MemoryOptions(last_messages=10))
        return [Agent("echo", instructions="Echo.", model=ScriptedModel(lambda messages, tools: "ok"), memory=memory)]
''')


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM is a POSIX signal")
def test_sigterm_writes_the_queued_traces_before_exit(tmp_path: Path) -> None:
    (tmp_path / "gw_sigterm_agents.py").write_text(AGENTS_MODULE)
    db = tmp_path / "memory.db"
    env = {**os.environ, "GW_SIGTERM_DB": str(db)}
    env.pop("MEMORY_STUDIO_GATEWAY_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "studio.cli", "serve", "--agents", "gw_sigterm_agents:agents", "--port", "0",
         "--log-level", "warning"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "memory-studio gateway: 1 agent(s) (echo)" in line, proc.stderr.read()
        url = line.split(" on ", 1)[1].split(" ", 1)[0]
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0, timeout=60)
        for i in range(3):
            client.chat.completions.create(model="echo", messages=[{"role": "user", "content": f"turn {i}"}],
                                           metadata={"thread_id": f"t{i}", "resource_id": "ada"})
        proc.send_signal(signal.SIGTERM)  # at once: the span writer has not written them yet
        status = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        proc.stdout.close()
        proc.stderr.close()
    store = open_store(db)
    try:
        threads = sorted(t.thread_id for t in store.observability.list_traces(limit=50) if t.thread_id)
    finally:
        store.close()
    assert threads == ["t0", "t1", "t2"]
    assert status == 128 + signal.SIGTERM  # exited through Python's shutdown, saying it was terminated
