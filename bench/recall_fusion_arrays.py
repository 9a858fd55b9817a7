"""The fusion's later steps on arrays by candidate (``hybrid.Combined`` at this commit) against the dict-keyed
loops they replaced (main 0e8a606's, kept as ``DictCombined`` in ``tests/core/test_recall_combined_arrays.py``),
paired in one process on ``recall_speed.py``'s 10k resource and 200 queries with USE's fusion (.65, 70 / 50).

    PYTHONPATH=$PWD .venv/bin/python bench/recall_fusion_arrays.py [--rounds 5]

Each query's lists (vector, keyword, cosines) and every candidate's next message are taken from one engine
search first, so only the steps are timed: ``Combined`` (the fusion), ``reshape`` (neighbours' share and
thread prior), the cut (``_may_reach`` / ``Combined.reach``, twice as a search does) and ``reranked`` to the
top 10, old and new in turn (the order alternating), thread CPU, warm caches (a search runs them right after
the scan, colder). It checks both give the same records first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recall_speed as rs  # noqa: E402  (puts its own checkout first on the path)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "core"))
from test_recall_combined_arrays import DictCombined, may_reach  # noqa: E402

from core.recall import hybrid, search as pipeline  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    store = rs.open_store(Path(tempfile.mkdtemp(prefix="fusion-arrays-")) / "m.db")
    store.memory.create_thread(thread_id="t", resource_id="u")
    msgs = rs.synthetic_messages(10_000, "t", "u", rng)
    for s in range(0, 10_000, 1000):
        store.memory.save_messages(msgs[s:s + 1000])
    emb = rs.TableEmbedder(rs.FUSION_IDS["use"])
    index = rs.RecallIndex.for_store(store, emb)
    for s in range(0, 10_000, 256):
        index.index_messages(msgs[s:s + 256])
    queries = [rs.words(rng, 6) for _ in range(200)]
    emb.fixed.update(zip(queries, emb.embed(queries, "query")))
    share = hybrid.fusion_for(emb.model_id).keyword_share
    cases = []
    for q in queries:
        run = pipeline.run(index, q, resource_id="u", thread_id=None, top_k=10, mode="hybrid")
        with store.db.read() as conn:
            order = pipeline.thread_order(conn, run.combined.ids, labels=True)
        cases.append((run.vector, run.keyword, run.cosines, {m: o[0] for m, o in order.items()}))
    T = time.thread_time_ns
    steps = ("fusion", "reshape", "cut", "rerank")

    def old(v, k, c, nx, out):  # type: ignore[no-untyped-def]
        t0 = T(); cb = DictCombined(v, k, c, keyword_share=share); t1 = T()
        cb.reshape(nx, hybrid.NEIGHBOUR_SHARE, hybrid.THREAD_SHARE); t2 = T()
        rec = may_reach(cb.order, 10, dated=False); few = may_reach(rec, 10, dated=False, spoken=False); t3 = T()
        got = cb.reranked(few, nx, None, limit=10); t4 = T()
        for name, d in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            out[name].append(d)
        return got

    def new(v, k, c, nx, out):  # type: ignore[no-untyped-def]
        t0 = T(); cb = hybrid.Combined(v, k, c, keyword_share=share); t1 = T()
        cb.reshape(nx, hybrid.NEIGHBOUR_SHARE, hybrid.THREAD_SHARE); t2 = T()
        rec = cb.reach(10, dated=False); few = cb.reach(10, dated=False, spoken=False, among=rec); t3 = T()
        got = cb.reranked(few, nx, None, limit=10); t4 = T()
        for name, d in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            out[name].append(d)
        return got

    times = {"dict loops": {s: [] for s in steps}, "arrays": {s: [] for s in steps}}
    for case in cases:
        if old(*case, {s: [] for s in steps}) != new(*case, {s: [] for s in steps}):
            raise SystemExit("the arrays' top 10 differs from the dict loops'")
    for r in range(args.rounds):
        for i, case in enumerate(cases):
            pair = [("dict loops", old), ("arrays", new)]
            for name, f in pair if (i + r) % 2 else pair[::-1]:
                f(*case, times[name])
    print(f"candidates a search p50 {statistics.median(len(hybrid.Combined(*c[:3]).ids) for c in cases):.0f}; "
          f"thread CPU p50 per step, {args.rounds} x {len(cases)} queries, paired")
    for name, by in times.items():
        total = [sum(x) for x in zip(*by.values())]
        print(f"  {name:10} " + "  ".join(f"{s} {statistics.median(v) / 1000:.1f}" for s, v in by.items())
              + f"  total {statistics.median(total) / 1000:.1f} µs")
    store.close()


if __name__ == "__main__":
    main()
