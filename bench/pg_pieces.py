"""Piece vectors on Postgres: save and recall p50 at 10k LoCoMo-length messages, with and without pieces.

    .venv/bin/python bench/pg_pieces.py              # 10,000 messages, 100 queries a mode
    .venv/bin/python bench/pg_pieces.py --n 2000     # smaller

Two databases on one PostgreSQL 18 + pgvector (the test suite's server helper, ``bench/scale.py``'s):
the same messages indexed by the same synthetic 512-d embedder (``recall_speed.TableEmbedder``: vectors
looked up, not computed, so the figures are storage and search, not the model) under the USE model's id,
one with pieces on (USE's default) and one with them off (``RecallIndex.set_pieces(False)``). Messages
are LoCoMo-length: a speaker label and two to four sentences of 6-16 words, so most cut into pieces.
Queries are embedded before timing (latency excludes the query's embedding). Each mode's p50 is the
median over ``--rounds`` rounds (both databases and the modes in turn each round) of each round's p50.
"vector" is vector mode at top 10, "vector50" at top 50: with pieces, the server estimates the 200
re-scored messages' scores and the search reads the pieces of only those that could be among its best
(``pg_pieces.estimate``), so a deeper answer reads more; "read" is how many messages' pieces a search read
(median).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from core.messages import Message  # noqa: E402
from core.recall import RecallIndex, pieces  # noqa: E402
from core.storage import open_store  # noqa: E402
from recall_speed import FUSION_IDS, TableEmbedder, words  # noqa: E402
from scale import _pg_server  # noqa: E402

NAMES = ["Caroline", "Melanie", "Jon", "Gina"]


def locomo_like(n: int, rng: np.random.Generator) -> list[Message]:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    out = []
    for i in range(n):
        sentences = [words(rng, int(rng.integers(6, 17))).capitalize() + "." for _ in range(int(rng.integers(2, 5)))]
        if rng.random() < 0.4:  # a clause mark in a sentence now and then
            sentences[0] = sentences[0][:-1] + ", " + words(rng, 5) + "."
        text = f"{NAMES[i % 2 + 2 * ((i // 500) % 2)]}: " + " ".join(sentences)
        out.append((Message.user if i % 2 == 0 else Message.assistant)(
            text, id=f"m{i}", thread_id="t", resource_id="u", created_at=t0 + timedelta(seconds=i)))
    return out


def build(url: str, msgs: list[Message], on: bool) -> tuple[RecallIndex, float, int]:
    store = open_store(url)
    store.memory.create_thread(thread_id="t", resource_id="u")
    for start in range(0, len(msgs), 1000):
        store.memory.save_messages(msgs[start:start + 1000])
    index = RecallIndex.for_store(store, TableEmbedder(FUSION_IDS["use"]))
    index.ensure_tables()
    if not on:
        index.set_pieces(False)
    assert index.pieces == on
    t0 = time.perf_counter()
    for start in range(0, len(msgs), 256):
        assert index.index_messages(msgs[start:start + 256]).ok
    rate = len(msgs) / (time.perf_counter() - t0)
    return index, rate, sum(index.piece_counts().values())


def p50(index: RecallIndex, queries: list[str], mode: str) -> tuple[float, float, float]:
    """``mode``'s p50 (wall, CPU ms) and the median count of messages whose pieces a search read."""
    walls, cpus, reads = [], [], []
    backend = index.vectors
    read = backend.read_pieces  # type: ignore[attr-defined]
    asked: list[int] = []
    backend.read_pieces = lambda conn, ids: (asked.append(len(ids)), read(conn, ids))[1]  # type: ignore[attr-defined]
    try:
        for q in queries:
            asked.clear()
            t, c = time.perf_counter(), time.process_time()
            index.search(q, resource_id="u", mode="hybrid" if mode == "hybrid" else "vector",
                         top_k=50 if mode == "vector50" else 10)
            walls.append((time.perf_counter() - t) * 1000)
            cpus.append((time.process_time() - c) * 1000)
            reads.append(sum(asked))
    finally:
        del backend.read_pieces  # type: ignore[attr-defined]
    return statistics.median(walls), statistics.median(cpus), statistics.median(reads)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    msgs = locomo_like(args.n, rng)
    cut = sum(1 for m in msgs if pieces.cut(m.text).spans)
    server = _pg_server()
    built = {}
    drops = []
    for on in (True, False):
        url, drop = server.fresh_database()  # type: ignore[attr-defined]
        drops.append(drop)
        built[on] = build(url, msgs, on)
    try:
        queries = [words(rng, 6) for _ in range(args.queries)]
        for index, _, _ in built.values():  # the queries' vectors first (TableEmbedder: looked up from then on)
            emb = index.embedder
            for q in queries:
                emb.fixed.setdefault(q, emb.embed([q], kind="query")[0])  # type: ignore[attr-defined]
            for mode in ("vector", "hybrid"):
                index.search("warm up", resource_id="u", mode=mode, top_k=10)  # type: ignore[arg-type]
        figures: dict[tuple[bool, str], list[tuple[float, float, float]]] = {}
        for r in range(args.rounds):
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                for mode in ("vector", "vector50", "hybrid"):
                    figures.setdefault((on, mode), []).append(p50(built[on][0], queries, mode))
        print(f"postgres, {args.n:,} LoCoMo-length messages ({cut:,} cut into pieces), one resource; synthetic "
              f"512-d vectors under the USE model's id; {args.queries} queries, median of {args.rounds} "
              f"rounds' p50; load average {os.getloadavg()[0]:.1f}")
        for on in (True, False):
            index, rate, with_pieces = built[on]
            cells = []
            for mode in ("vector", "vector50", "hybrid"):
                rounds = figures[(on, mode)]
                cells.append(f"{mode} {statistics.median(w for w, _, _ in rounds):.2f} ms "
                             f"(CPU {statistics.median(c for _, c, _ in rounds):.2f}, read "
                             f"{statistics.median(n for _, _, n in rounds):.0f})")
            print(f"  pieces {'on ' if on else 'off'}: ingest without embedding {rate:,.0f} msgs/s "
                  f"({with_pieces:,} messages with pieces); " + "; ".join(cells))
        for index, _, _ in built.values():
            index.store.close()
    finally:
        for drop in drops:
            drop()


if __name__ == "__main__":
    main()
