"""A long backlog observed synchronously in many observer calls: the work the turn spends planning them.

Stores ``N`` messages nothing has observed (Memory in process, libSQL file, a scripted observer), then runs one turn
past ``message_tokens`` with ``max_tokens_per_batch`` small enough for many calls (``--cap``), with and without the
observer's context window known (``--window``). Prints, per case: the observer calls, the tokenizer calls and the
characters they counted (what missed the token caches: each observer request is counted whole, each new text once),
and the observing turn's time (wall and CPU). Run it against any tree (``PYTHONPATH=<tree>``) to compare.

    PYTHONPATH=. .venv/bin/python bench/om_batches_backlog.py            # 300 and 1,000 messages
    PYTHONPATH=. .venv/bin/python bench/om_batches_backlog.py --messages 2000 --cap 500
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import datetime, timedelta, timezone
from itertools import count
from pathlib import Path
from typing import Any

from core import Memory, MemoryOptions, Message, open_store
from core.llm import ScriptedModel
from core.timeutil import FixedClock
from core.tokens import default_tokenizer

START = datetime(2025, 1, 2, 9, 0, tzinfo=timezone.utc)


class CountingTokenizer:
    """The default tokenizer, counting the calls that reach it and the characters they count."""

    def __init__(self) -> None:
        self._inner = default_tokenizer()
        self.name = self._inner.name
        self.calls = self.chars = 0

    def count(self, text: str) -> int:
        self.calls += 1
        self.chars += len(text)
        return self._inner.count(text)


def observed(calls: Any) -> str:
    n = next(calls)
    return f"<observations>\nDate: Jan 2, 2025\n* 🔴 (09:00) User described part {n} of the plan.\n</observations>"


def run(messages: int, cap: int, window: int | None) -> str:
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(Path(folder) / "m.db")
        tokenizer = CountingTokenizer()
        observer = ScriptedModel(lambda m, t, calls=count(1): observed(calls), name="observer", context_window=window)
        clock = FixedClock(START + timedelta(days=1), step_ms=1_000)
        om = {"enabled": True, "message_tokens": 10_000_000, "observation_tokens": 10_000_000, "buffer_tokens": False,
              "max_tokens_per_batch": cap}

        def memory() -> Memory:
            return Memory(store, MemoryOptions(last_messages=10, observational_memory=dict(om)),
                          observer_model=observer, tokenizer=tokenizer, clock=clock)

        memory().save_messages([
            (Message.user if i % 2 == 0 else Message.assistant)(
                f"Message {i}: the garden plan, bed {i % 17}, " + "compost and seedlings " * (5 + i % 11),
                thread_id="t1", resource_id="u1", created_at=START + timedelta(seconds=30 * i))
            for i in range(messages)])
        om["message_tokens"] = 100
        mem = memory()
        ctx = mem.new_context(mem.request_context(thread_id="t1", resource_id="u1"))
        ctx.live = True
        mem.prepare_input(ctx, input="go on", instructions="You are a helper.")
        tokenizer.calls = tokenizer.chars = 0
        started, cpu = time.perf_counter(), time.process_time()
        mem.run_input(ctx)
        took, cpu = time.perf_counter() - started, time.process_time() - cpu
        store.close()
        where = f"window {window:,}" if window else "no window"
        return (f"{messages:>5} messages, cap {cap:,}, {where:>13}: {len(observer.requests):>4} observer calls, "
                f"{tokenizer.calls:>7,} tokenizer calls, {tokenizer.chars / 1e6:8.2f} M chars counted, {took:6.2f} s ({cpu:.2f} s CPU)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, nargs="*", default=[300, 1000])
    parser.add_argument("--cap", type=int, default=400, help="max_tokens_per_batch (default 400)")
    parser.add_argument("--window", type=int, default=2048, help="the observer's context window in the fitted case")
    args = parser.parse_args()
    for n in args.messages:
        for window in (None, args.window):
            print(run(n, args.cap, window), flush=True)


if __name__ == "__main__":
    main()
