"""Storage speed on one 10,000-message thread.

Prints: save throughput in batches of 100 and in one call of 10,000; reading the last 10; assembling
a prompt with history and working memory. Mastra on this machine kind: 21,400 msgs/s in batches of
100, 1,360 msgs/s in one call of 10,000, 0.30 ms for the last 10.

    .venv/bin/python bench/storage.py [--messages 10000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core import Memory, MemoryOptions, Message, open_store  # noqa: E402
from core.storage.memory_store import MessageQuery  # noqa: E402

MASTRA = {"batch100": 21_400, "one_call": 1_360, "last10_ms": 0.30}


def make_messages(n: int, thread: str) -> list[Message]:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return [
        Message.create("user" if i % 2 == 0 else "assistant",
                       [{"type": "text", "text": f"message number {i} about topic {i % 37} with some words"}],
                       thread_id=thread, resource_id="bench", created_at=t0 + timedelta(milliseconds=i))
        for i in range(n)
    ]


def timed(fn, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=10_000)
    args = parser.parse_args()
    n = args.messages
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "bench.db")
        memory = Memory(store, MemoryOptions(last_messages=10, working_memory={"enabled": True}))
        memory.create_thread(resource_id="bench", thread_id="batched")
        msgs = make_messages(n, "batched")
        start = time.perf_counter()
        for i in range(0, n, 100):
            memory.save_messages(msgs[i:i + 100])
        batch_rate = n / (time.perf_counter() - start)

        memory.create_thread(resource_id="bench", thread_id="single")
        single = make_messages(n, "single")
        one_call = n / timed(lambda: memory.save_messages(single))

        # Larger single calls must not slow down per message (no quadratic dedupe).
        memory.create_thread(resource_id="bench", thread_id="double")
        double = make_messages(2 * n, "double")
        double_rate = 2 * n / timed(lambda: memory.save_messages(double))

        samples = []
        for _ in range(200):
            start = time.perf_counter()
            store.memory.list_messages(MessageQuery(thread_id="batched", last=10))
            samples.append((time.perf_counter() - start) * 1000)
        last10 = statistics.median(samples)

        memory.update_working_memory(resource_id="bench", working_memory="# User\n- Name: Bench\n")
        memory.assemble(thread_id="batched", resource_id="bench", input="warm-up")  # tokenizer load
        asm = []
        for i in range(50):
            start = time.perf_counter()
            memory.assemble(thread_id="batched", resource_id="bench", input=f"question {i}", instructions="Be brief.")
            asm.append((time.perf_counter() - start) * 1000)
        store.close()

    print(f"messages in thread            {n:,}")
    print(f"save, batches of 100          {batch_rate:10,.0f} msgs/s   (Mastra {MASTRA['batch100']:,}; x{batch_rate / MASTRA['batch100']:.1f})")
    print(f"save, one call of {n:,}      {one_call:10,.0f} msgs/s   (Mastra {MASTRA['one_call']:,}; x{one_call / MASTRA['one_call']:.1f})")
    print(f"save, one call of {2 * n:,}      {double_rate:10,.0f} msgs/s   (ratio to {n:,}: {double_rate / one_call:.2f})")
    print(f"read last 10 (median)         {last10:10.3f} ms       (Mastra {MASTRA['last10_ms']} ms)")
    print(f"assemble history+WM (median)  {statistics.median(asm):10.3f} ms")


if __name__ == "__main__":
    main()
