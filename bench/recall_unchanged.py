"""A search's state statements kept per read connection (``core.recall.unchanged``) against running them every
time, paired in one process.

    PYTHONPATH=$PWD .venv/bin/python bench/recall_unchanged.py [--rounds 3]

On ``recall_speed.py``'s 10k resource and queries (USE's fusion), each query is searched seven ways in turn,
the order rotating, and each search's thread CPU kept: vector, keyword and hybrid with every statement run
("old": ``unchanged.stamp`` answering None, as before the change) and with the kept answers ("new": nothing
changed between the searches, as between an agent's writes), and hybrid with a stamp that moved before every
search (as after another connection's write: ``PRAGMA data_version`` read, then every statement). Says
whether the ways give the same hits and score bits.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recall_speed as rs  # noqa: E402  (puts its own checkout first on the path)

from core.recall import unchanged  # noqa: E402
from core.storage.database import read_token  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--mode", choices=("vector", "keyword", "hybrid"), help="only this mode's ways (each search after "
                    "one of the same mode, as in recall_speed.py's blocks)")
    args = ap.parse_args()
    store, index, _, _, queries = rs.indexed_resource(args.n, "use", "recall-unchanged-")
    for text in queries[:5]:  # (the keyword memory, order cache and the set's map loaded)
        index.search(text, resource_id="u", mode="hybrid", top_k=10)
    real = unchanged.stamp

    def off(_conn: Any) -> None:
        return None

    def moved(conn: Any) -> Any:
        now = real(conn)
        return None if now is None else (*now, read_token(conn))  # (a stamp no earlier read had)

    ways = {"vector old": ("vector", off), "vector new": ("vector", real), "keyword old": ("keyword", off),
            "keyword new": ("keyword", real), "hybrid old": ("hybrid", off), "hybrid new": ("hybrid", real),
            "hybrid, stamp moved": ("hybrid", moved)}
    names = [name for name, (mode, _) in ways.items() if args.mode in (None, mode)]
    cpu: dict[str, list[int]] = {name: [] for name in names}
    answers: dict[tuple[str, str], list[tuple[str, str]]] = {}
    try:
        for _ in range(args.rounds):
            for i, text in enumerate(queries):
                for name in names[i % len(names):] + names[: i % len(names)]:
                    mode, stamp = ways[name]
                    unchanged.stamp = stamp  # type: ignore[assignment]
                    t = time.thread_time_ns()
                    got = index.search(text, resource_id="u", mode=mode, top_k=10)
                    cpu[name].append(time.thread_time_ns() - t)
                    answers[(text, name)] = [(h.message_id, float(h.score).hex()) for h in got.hits]
    finally:
        unchanged.stamp = real  # type: ignore[assignment]
    p50 = {name: statistics.median(times) / 1000 for name, times in cpu.items()}
    same = all(answers[(q, name)] == answers[(q, f"{ways[name][0]} old")] for q in queries for name in names)
    print(f"{args.rounds} x {len(queries)} queries, thread CPU p50 µs, the {len(names)} in turn: "
          + " | ".join(f"{name} {p50[name]:.0f}" for name in names))
    said = [f"{name} {p50[name] - p50[f'{ways[name][0]} old']:+.0f} µs" for name in names if not name.endswith(" old")]
    if "vector old" in p50 and "hybrid old" in p50:
        said.insert(0, f"hybrid / vector: old x{p50['hybrid old'] / p50['vector old']:.3f}, new "
                       f"x{p50['hybrid new'] / p50['vector new']:.3f}")
    print(f"  {'; '.join(said)}; the same hits and score bits as old: {same}")
    store.close()


if __name__ == "__main__":
    main()
