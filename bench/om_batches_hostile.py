"""A client's blank-line messages against ``serve --model --observational-memory resource``: the turn that observes them.

A message of one letter, 300 newlines and one letter counts ~25 o200k tokens toward the observation threshold (a
run of newlines is one token) but is 300 indented lines of the observer's history: the planner's estimate is far
short, and the batch must shrink from hundreds of messages to a few dozen to fit the observer's window. Starts
``memory-studio serve --model llamacpp/chat --context-window 32768 --observational-memory resource
--om-message-tokens 28000 --om-model vllm/obs`` on loopback model servers (the observer told a 32,768-token window
by ``VLLM_CONTEXT_WINDOW``), sends such messages until the observer is called, and prints the turns sent, the
observer calls, the observing turn's time and the median turn's. Run it against any tree (``PYTHONPATH=<tree>``)
to compare; the server is started from that tree too.

    PYTHONPATH=. .venv/bin/python bench/om_batches_hostile.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from itertools import count
from pathlib import Path

import httpx2

from core.llm import LoopbackServer, ScriptedModel

HOSTILE = "a" + "\n" * 300 + "b"


def observed(calls: Iterator[int]) -> str:
    """A new observation at each call (one repeating the log would be refused as copying it)."""
    return f"<observations>\nDate: Jan 2, 2025\n* 🔴 (09:00) User sent blank lines, batch {next(calls)}.\n</observations>"


def main() -> None:
    with tempfile.TemporaryDirectory() as folder, \
            LoopbackServer(ScriptedModel(lambda m, t: "Noted.")) as chat, \
            LoopbackServer(ScriptedModel(lambda m, t, calls=count(1): observed(calls))) as observer:
        env = {**os.environ, "LLAMACPP_BASE_URL": chat.base_url, "VLLM_BASE_URL": observer.base_url,
               "VLLM_CONTEXT_WINDOW": "32768"}
        env.pop("MEMORY_STUDIO_GATEWAY_TOKEN", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "studio.cli", "serve", "--model", "llamacpp/chat", "--db",
             str(Path(folder) / "memory.db"), "--port", "0", "--log-level", "warning", "--context-window", "32768",
             "--observational-memory", "resource", "--om-message-tokens", "28000", "--om-model", "vllm/obs"],
            cwd=folder, env=env, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            url = line.split(" on ", 1)[1].split(" ", 1)[0]
            times: list[float] = []
            with httpx2.Client(base_url=url, timeout=900) as http:
                while not observer.chat_requests():
                    started = time.perf_counter()
                    r = http.post("/v1/chat/completions", json={
                        "model": "assistant", "messages": [{"role": "user", "content": HOSTILE}],
                        "metadata": {"thread_id": "t1", "resource_id": "ada"}})
                    r.raise_for_status()
                    times.append(time.perf_counter() - started)
            print(f"{len(times)} turns, {len(observer.chat_requests())} observer calls; the observing turn "
                  f"{times[-1]:.2f} s, the median turn {sorted(times)[len(times) // 2]:.3f} s")
        finally:
            proc.terminate()
            proc.wait(60)


if __name__ == "__main__":
    main()
