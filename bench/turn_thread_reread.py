"""What the turn's second read of its thread costs (``assembly._thread_is_still_the_turns``, session 32): one
``get_thread`` by primary key inside the turn's ``reads()`` block, as the turn makes it, in CPU µs.

    PYTHONPATH=. .venv/bin/python bench/turn_thread_reread.py [--reads 5000] [--rounds 3]

A libSQL file in a temporary directory; compare with ``bench/agent_overhead.py --only history-wm`` (a whole turn's
CPU) to see its share.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from core import Memory, MemoryOptions, Message
from core.storage import open_store


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reads", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, open_store(Path(tmp) / "reread.db") as store:
        Memory(store, MemoryOptions()).save_messages([Message.user("x", thread_id="t1", resource_id="r")])
        for _ in range(args.rounds):
            start = time.process_time()
            with store.db.reads():
                for _ in range(args.reads):
                    store.memory.get_thread("t1")
            print(f"get_thread in a reads() block: {(time.process_time() - start) / args.reads * 1e6:.1f} µs CPU")


if __name__ == "__main__":
    main()
