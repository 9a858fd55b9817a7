"""The Studio's search across all messages (the thread tree's "searches all messages"): how long it takes and
how far it looks, on a database of many messages.

    .venv/bin/python bench/studio_search.py                     # 100,000 messages in one thread
    .venv/bin/python bench/studio_search.py --messages 20000

Writes the messages into a scratch database (removed at the end), then runs ``studio.reads.search_messages``
for a word every stored message's JSON holds ("type": the search reads up to its limit of messages), a
phrase many messages hold, one that one message holds and one that none holds, and prints each one's wall
time and the line the Studio shows above the results (and the note under it).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from core import open_store  # noqa: E402
from core.messages import Message  # noqa: E402
from studio.reads import search_messages, search_note, search_summary  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100_000)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="studio-search-"))
    try:
        store = open_store(folder / "search.db")
        store.memory.create_thread(thread_id="long", resource_id="bench")
        t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
        for start in range(0, args.messages, 5_000):
            store.memory.save_messages([
                Message.create("user" if i % 2 == 0 else "assistant",
                               [{"type": "text", "text": f"message number {i} about topic {i % 37} with some words"}],
                               thread_id="long", resource_id="bench", created_at=t0 + timedelta(milliseconds=i))
                for i in range(start, min(start + 5_000, args.messages))])
        print(f"{args.messages:,} messages in one thread")
        for query in ("type", "topic 5 with", f"number {args.messages - 7} ", "zzz"):
            started = time.perf_counter()
            found = search_messages(store, query)
            took = time.perf_counter() - started
            note = search_note(found)
            print(f"{query!r:>16}: {took * 1000:7,.0f} ms  {search_summary(query, found)}" + (f"  [{note}]" if note else ""))
        store.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
