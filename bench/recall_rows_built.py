"""The rows-first route's built steps (issue 20 item 4), each paired with what the engine does for it today.

    PYTHONPATH=$PWD .venv/bin/python bench/recall_rows_built.py [--rounds 6]

On ``recall_speed.py``'s 10k resource and 200 queries (USE's fusion: vector list 70 deep, keyword list 50),
thread CPU per search, the two ways alternated query by query (the first of each pair rotating):

1. the candidates' thread order: the engine's read (``OrderCache.read`` of the ~120 candidates' ids, then its
   next-message map, as ``search._fuse``) against the vector set's arrays by row (``OrderRows.fill``, nothing
   unknown, then three gathers: next row, day, speaker); then the same with a message appended to the thread
   before each search (the agent's turn: ``OrderRows.mark`` marks the row of the message before it, which
   ``fill`` reads again);
2. the keyword list: ``KeywordMemory.search`` (records) against ``KeywordMemory.search_rows`` (the vector set's
   rows), each after an untimed vector scan (a search's keyword list runs with the caches the scan left).

Both check their answers first: the arrays' answers equal the order cache's for every query's candidates, and
the keyword rows name the records' messages. Not read by the engine's search yet (ARCHITECTURE, Known
problems, the s31-rows2 row).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recall_speed as rs  # noqa: E402  (puts its own checkout first on the path)

from core.messages import Message  # noqa: E402
from core.recall import hybrid  # noqa: E402
from core.recall import search as pipeline  # noqa: E402
from core.recall.keyword import CONTEXT_WEIGHT  # noqa: E402
from core.recall.keyword_memory import KeywordMemory  # noqa: E402
from core.recall.matrix import VectorSet  # noqa: E402
from core.recall.order_cache import OrderCache  # noqa: E402


def paired(cases: list[Any], ways: dict[str, Callable[[Any], Any]], rounds: int, before: Callable[[Any], Any] | None = None,
           ) -> dict[str, float]:
    """Each way's thread CPU p50 in µs, the ways alternated per case, the first rotating."""
    cpu: dict[str, list[int]] = {name: [] for name in ways}
    names = list(ways)
    for r in range(rounds):
        for i, case in enumerate(cases):
            if before is not None:
                before(case)
            shift = (i + r) % len(names)
            for name in names[shift:] + names[:shift]:
                t = time.thread_time_ns()
                ways[name](case)
                cpu[name].append(time.thread_time_ns() - t)
    return {name: statistics.median(v) / 1000 for name, v in cpu.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    store, index, emb, msgs, queries = rs.indexed_resource(10_000, "use", "recall-rows-built-")
    index.search(queries[0], resource_id="u", mode="hybrid")  # (the keyword memory and order cache loaded)
    fusion = hybrid.fusion_for(emb.model_id)
    depth, kw_depth = fusion.depths(10)
    memory: KeywordMemory = index.keywords.memory  # type: ignore[attr-defined]
    kept = index.order
    assert isinstance(kept, OrderCache)
    with store.db.read() as conn:
        vset = index.vector_set(conn, "u", None)
        assert isinstance(vset, VectorSet)
        qvecs = [emb.embed([q.lower() if fusion.lower_query else q], kind="query")[0].astype(np.float32) for q in queries]
        terms = [index.keywords.terms(conn, q)[0] for q in queries]
        cands = []  # each query's candidate rows: the vector list's and the keyword list's
        for qv, t in zip(qvecs, terms):
            pos, _ = vset.search(qv, depth)
            hits = memory.search(conn, t, resource_id="u", thread_id=None, limit=kw_depth, weight=CONTEXT_WEIGHT) or []
            extra = [r for h in hits if (r := vset.row_of(h.message_id)) is not None]
            cands.append(np.unique(np.concatenate([pos, np.array(extra, dtype=np.int64)])))
    mids = vset._id_columns()[0]
    orows = vset.order_rows
    nxt_of = pipeline._NEXT

    def engine(rows: np.ndarray) -> Any:
        ids = mids[rows].tolist()
        order = kept.read(conn, ids, labels=True, reader=pipeline.thread_order, synced=True)
        return dict(zip(order, map(nxt_of, order.values())))

    def arrays(rows: np.ndarray) -> Any:
        orows.fill(conn, kept, vset, rows, reader=pipeline.thread_order, synced=True)
        return orows.next_row[rows], orows.day[rows], orows.label[rows]

    with store.db.read() as conn:
        for rows in cands:
            arrays(rows)
            got = orows.answers(vset, rows)
            want = kept.read(conn, mids[rows].tolist(), labels=True, reader=pipeline.thread_order, synced=True)
            assert got is not None and {mids[r]: a for r, a in got.items()} == want
        order = paired(cands, {"engine": engine, "arrays": arrays}, args.rounds)
        print(f"thread order, {args.rounds} x {len(cands)} searches (~{statistics.median(map(len, cands)):.0f} candidate "
              f"rows), thread CPU p50: the engine's read {order['engine']:.1f} µs, the arrays by row "
              f"{order['arrays']:.1f} µs (answers equal)")

        def search_records(i: int) -> Any:
            return memory.search(conn, terms[i], resource_id="u", thread_id=None, limit=kw_depth, weight=CONTEXT_WEIGHT)

        def search_rows(i: int) -> Any:
            return memory.search_rows(conn, terms[i], vset, resource_id="u", thread_id=None, limit=kw_depth,
                                      weight=CONTEXT_WEIGHT)

        for i in range(len(queries)):
            a, b = search_records(i) or [], search_rows(i)
            assert b is not None and [h.message_id for h in a] == b[2] == [vset.message_ids[r] for r in b[0].tolist()]
        kw = paired(list(range(len(queries))), {"records": search_records, "rows": search_rows}, args.rounds,
                    before=lambda i: vset.search(qvecs[i], depth))
        print(f"keyword list after an untimed scan, {args.rounds} x {len(queries)}, thread CPU p50: records "
              f"{kw['records']:.1f} µs, rows {kw['rows']:.1f} µs (the same hits)")
    # After a write: a message appended at the thread's end before each search, then the order read.
    last = msgs[-1].created_at
    after: dict[str, list[int]] = {"engine": [], "arrays": []}
    for i, rows in enumerate(cands[:100]):
        store.memory.save_messages([Message.user(f"turn {i}", id=f"w-{i}", thread_id="t", resource_id="u",
                                                 created_at=last + timedelta(minutes=i + 1))])
        with store.db.read() as conn:
            kept.sync(conn)  # (the search's own sync, before its scan)
            for name in (("engine", "arrays") if i % 2 else ("arrays", "engine")):
                began = time.thread_time_ns()
                (engine if name == "engine" else arrays)(rows)
                after[name].append(time.thread_time_ns() - began)
            got = orows.answers(vset, rows)
            want = kept.read(conn, mids[rows].tolist(), labels=True, reader=pipeline.thread_order, synced=True)
            assert got is not None and {mids[r]: a for r, a in got.items()} == want
    print(f"thread order with a message appended before each search, {len(after['engine'])} searches, thread CPU p50: "
          f"the engine's read {statistics.median(after['engine']) / 1000:.1f} µs, the arrays by row (marked, the changed "
          f"row filled again) {statistics.median(after['arrays']) / 1000:.1f} µs (answers equal)")
    store.close()


if __name__ == "__main__":
    main()
