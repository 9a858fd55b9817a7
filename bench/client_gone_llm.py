"""A client that gives up on a turn, then the next turn, against a one-slot llama.cpp server (``n_parallel=1``).

The first client asks the agent for a long story (``max_tokens`` 600) with a 2 s timeout and gives up; a second
client asks another agent on the same server for a short answer right after. Prints how long a short turn takes
alone, how long the second one took, and what the first left in its thread. With the gateway stopping a turn whose
client left, the second turn is as fast as alone and the thread is empty; without it, the second waits for the
whole abandoned reply, which is stored. Needs llama.cpp's server from ``xllamacpp`` and SmolLM2-135M (see
``bench/om_yield_llm.py``); skips (exit 0) when they are absent. ``core`` comes from ``PYTHONPATH``, so the same
script measures another tree (a ``git archive`` of main) too:

    PYTHONPATH=$PWD .venv/bin/python bench/client_gone_llm.py LLM_PYTHON GGUF [plain|stream]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import openai

from core import Memory, MemoryOptions, open_store
from core.agent import Agent
from core.gateway import GatewayServer, create_app
from core.llm import OpenAICompatibleModel, RetryPolicy
from llm_requests import start_llama  # (this folder is first on the path; it imports no ``core`` at its top)


def main() -> int:
    llm_python, gguf = sys.argv[1], sys.argv[2]
    stream = len(sys.argv) > 3 and sys.argv[3] == "stream"
    if not Path(llm_python).exists() or not Path(gguf).exists():
        print(f"skipped: {llm_python} or {gguf} is absent (see the docstring)")
        return 0
    proc, port = start_llama(llm_python, gguf)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            memory = Memory(open_store(Path(tmp) / "m.db"), MemoryOptions(last_messages=6))
            model = OpenAICompatibleModel("smollm2-135m", base_url=f"http://127.0.0.1:{port}/v1", api_key="x",
                                          api_key_env=None, keyring_service=None, timeout=300,
                                          retry=RetryPolicy(max_retries=0))
            story = Agent("story", instructions="You write long stories.", model=model, memory=memory, tracer=False,
                          model_settings={"max_tokens": 600, "temperature": 0})
            brief = Agent("brief", instructions="Be brief.", model=model, memory=memory, tracer=False,
                          model_settings={"max_tokens": 16, "temperature": 0})
            with GatewayServer(create_app([story, brief])) as gateway:
                patient = openai.OpenAI(base_url=gateway.base_url, api_key="-", max_retries=0, timeout=300)
                hasty = openai.OpenAI(base_url=gateway.base_url, api_key="-", max_retries=0, timeout=2)
                start = time.perf_counter()
                patient.chat.completions.create(model="brief", messages=[{"role": "user", "content": "Hi"}])
                print(f"a short turn alone: {time.perf_counter() - start:.2f} s")
                try:
                    answer = hasty.chat.completions.create(
                        model="story", messages=[{"role": "user", "content": "Write a very long story about a dragon, "
                                                  "with many chapters."}], metadata={"thread_id": "t1"}, stream=stream)
                    for _ in answer if stream else ():
                        pass
                    print("the first turn was answered within 2 s: nothing measured")
                except openai.APITimeoutError:
                    print("the first client gave up after 2 s")
                start = time.perf_counter()
                patient.chat.completions.create(model="brief", messages=[{"role": "user", "content": "Say hello."}])
                print(f"the second turn, asked right after: {time.perf_counter() - start:.2f} s")
                time.sleep(1)  # (the first turn's worker, if it still runs, has stored what it will by then)
                left = memory.recall(thread_id="t1", per_page=False).messages if memory.get_thread("t1") else []
                print("the first turn's thread:", [(m.role, f"{len(m.text)} chars") for m in left])
    finally:
        proc.terminate()
        proc.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
