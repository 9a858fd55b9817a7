"""The memory an OpenAI Agents SDK run gets, on a long session: the time of ``MemorySession``'s memory prompt
(working memory, semantic recall from other threads, no history: the SDK sends the session itself) per turn.

    .venv/bin/python bench/sdk_memory_prompt.py                    # a 10,000-message session
    .venv/bin/python bench/sdk_memory_prompt.py --messages 2000 --code /work/main

Builds a scratch libSQL database: one resource with the session's thread of ``--messages`` messages and another
thread of 200, resource-scoped recall (top 4, one message each side, the hashing embedder at 512 dimensions,
so the model costs nothing), then times 12 memory prompts after a first one, then 12 times what a run asks of
the session itself (``get_items(limit=20)``, then ``add_items`` of a question and its answer), and prints the
medians. The recall search leaves out the session's own thread (what the session sends) by a filter.
``--code PATH`` runs the timing with another checkout's code (the data is built by this one's).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

OPTIONS = {"semantic_recall": {"top_k": 4, "message_range": 1, "scope": "resource"}}


def build(path: Path, n: int) -> None:
    from core import Memory, MemoryOptions, open_store
    from core.embedding import HashingEmbedder
    from core.messages import Message

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with open_store(path) as store:
        memory = Memory(store, MemoryOptions(**OPTIONS), embedder=HashingEmbedder(512))
        memory.create_thread(thread_id="chat", resource_id="ada")
        for start in range(0, n, 1000):
            memory.save_messages([
                Message.create("user" if i % 2 == 0 else "assistant",
                               [{"type": "text", "text": f"message {i} about topic {i % 37} and more words"}],
                               thread_id="chat", resource_id="ada", created_at=t0 + timedelta(seconds=i))
                for i in range(start, min(start + 1000, n))])
        memory.save_messages([
            Message.create("user", [{"type": "text", "text": f"other thread fact {i} topic {i}"}],
                           thread_id="other", resource_id="ada", created_at=t0 + timedelta(seconds=i))
            for i in range(200)])


CHILD = """import asyncio, statistics, sys, time
from core import Memory, MemoryOptions, open_store
from core.embedding import HashingEmbedder
from core.integrations.openai_agents.session import MemorySession
with open_store({path!r}) as store:
    memory = Memory(store, MemoryOptions(**{options!r}), embedder=HashingEmbedder(512))
    session = MemorySession("chat", memory=memory, resource_id="ada")
    session._memory_prompt("what about topic 1")
    times = []
    for i in range(12):
        began = time.perf_counter()
        session._memory_prompt(f"tell me about topic {{i}}")
        times.append((time.perf_counter() - began) * 1000)
    reads, adds = [], []
    for i in range(12):
        began = time.perf_counter()
        asyncio.run(session.get_items(limit=20))
        reads.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        asyncio.run(session.add_items([{{"role": "user", "content": f"question {{i}}"}},
                                       {{"role": "assistant", "content": f"answer {{i}}"}}]))
        adds.append((time.perf_counter() - began) * 1000)
print(f"{{statistics.median(times):.1f}} {{statistics.median(reads):.1f}} {{statistics.median(adds):.1f}}")
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=10_000, help="messages of the session's thread")
    p.add_argument("--code", type=Path, default=ROOT, help="the checkout whose code is timed")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    scratch = Path(tempfile.mkdtemp(prefix="memory-studio-sdk-bench-"))
    try:
        db = scratch / "memory.db"
        build(db, args.messages)
        code = args.code.resolve()
        done = subprocess.run([sys.executable, "-c", CHILD.format(path=str(db), options=OPTIONS)], cwd=code,
                              env={**os.environ, "PYTHONPATH": str(code)}, check=True, capture_output=True, text=True)
        prompt, reads, adds = done.stdout.split()
        print(f"Agents SDK session of {args.messages:,} messages ({code}), median of 12 each: memory prompt "
              f"{prompt} ms, get_items(limit=20) {reads} ms, add_items (2 items) {adds} ms")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
