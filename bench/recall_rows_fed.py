"""A hybrid search fed the vector set's rows against the same search fed records, paired in one process.

    PYTHONPATH=$PWD .venv/bin/python bench/recall_rows_fed.py [--rounds 3]

On ``recall_speed.py``'s 10k resource and queries (USE's fusion: .65, vector 70 / keyword 50), each query
is searched three ways in turn, the order rotating, and each search's thread CPU kept: vector-only, hybrid
as the engine runs it (fed rows: ``search._RowLists``, the scan's positions, the keyword list as rows,
the order from ``OrderRows``), and hybrid with ``search._row_hits`` answering None (fed records: the
lists' ``Ranked`` records and the order read by id, as Postgres and every search the rows cannot feed
are). Both hybrid ways give the same answers (``tests/core/test_recall_row_fusion.py``); this shows
what feeding rows saves. ``--steps`` adds the p50 of the rows way's parts (each wrapped and timed: the
wrappers' own cost is in them). ``--against DIR`` adds a fourth way, hybrid as another checkout's
``core/recall/search.py`` and ``hybrid.py`` run it (e.g. a ``git archive`` of the branch point; the other
modules are this checkout's), in the same rotation, and says whether both give the same hits and score bits:
a change to the fusion measured paired, query by query, in one process.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any


sys.path.insert(0, str(Path(__file__).resolve().parent))
import recall_speed as rs  # noqa: E402  (puts its own checkout first on the path)

from core.recall import hybrid, matrix, order_rows  # noqa: E402
from core.recall import index as recall_index  # noqa: E402
from core.recall import search as pipeline  # noqa: E402


def other_pipeline(root: Path) -> Any:
    """Another checkout's ``search`` module, with its own ``hybrid`` (loaded under other names)."""
    loaded: dict[str, Any] = {}
    for name in ("hybrid", "search"):
        spec = importlib.util.spec_from_file_location(f"against_{name}", root / "core" / "recall" / f"{name}.py")
        assert spec is not None and spec.loader is not None, f"no core/recall/{name}.py under {root}"
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # (dataclasses look their module up)
        spec.loader.exec_module(module)
        loaded[name] = module
    setattr(loaded["search"], "hybrid", loaded["hybrid"])
    return loaded["search"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--steps", action="store_true", help="also time the rows way's parts")
    ap.add_argument("--against", type=Path, help="also time hybrid as this checkout's search.py and hybrid.py run it")
    args = ap.parse_args()
    other = other_pipeline(args.against) if args.against is not None else None
    store, index, emb, _, queries = rs.indexed_resource(args.n, "use", "recall-rows-fed-")
    for text in queries[:5]:  # (the keyword memory, order cache and the set's map loaded)
        index.search(text, resource_id="u", mode="hybrid", top_k=10)
    real = pipeline._row_hits

    def none(*_: Any, **__: Any) -> None:
        return None

    fed = sum(pipeline.run(index, q, resource_id="u", thread_id=None, top_k=10, mode="hybrid").rows is not None
              for q in queries)
    cpu: dict[str, list[int]] = {"vector": [], "rows": [], "records": []}
    if other is not None:
        cpu["against"] = []
    ways = list(cpu)
    answers: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for _ in range(args.rounds):
        for i, text in enumerate(queries):
            for way in ways[i % len(ways):] + ways[: i % len(ways)]:
                pipeline._row_hits = none if way == "records" else real  # type: ignore[assignment]
                setattr(recall_index, "pipeline", other if way == "against" else pipeline)
                t = time.thread_time_ns()
                got = index.search(text, resource_id="u", mode="vector" if way == "vector" else "hybrid", top_k=10)
                cpu[way].append(time.thread_time_ns() - t)
                answers[(text, way)] = [(h.message_id, float(h.score).hex()) for h in got.hits]
    pipeline._row_hits = real
    setattr(recall_index, "pipeline", pipeline)
    p50 = {way: statistics.median(times) / 1000 for way, times in cpu.items()}
    print(f"{args.rounds} x {len(queries)} queries ({fed} fed rows), thread CPU p50, the {len(ways)} in turn: vector "
          f"{p50['vector']:.0f} µs, hybrid fed rows {p50['rows']:.0f} µs (x{p50['rows'] / p50['vector']:.2f}), "
          f"fed records {p50['records']:.0f} µs (x{p50['records'] / p50['vector']:.2f})")
    if other is not None:
        same = all(answers[(q, "against")] == answers[(q, "rows")] for q in queries)
        print(f"  {args.against}'s hybrid {p50['against']:.0f} µs (x{p50['against'] / p50['vector']:.2f}); this "
              f"checkout's fed rows {p50['rows'] - p50['against']:+.0f} µs; the same hits and score bits: {same}")
    if args.steps:
        steps(index, queries)
    store.close()


def steps(index: Any, queries: list[str]) -> None:
    """The p50 of each part of the rows way, each wrapped (its thread CPU, the wrapper's included)."""
    times: dict[str, list[int]] = {}
    parts = [(pipeline, "_row_hits", "keyword list as rows (with its gate)"), (matrix.VectorSet, "search", "vector scan"),
             (pipeline._RowLists, "combined", "Combined of the rows"), (order_rows.OrderRows, "filled", "OrderRows.filled (fill and gather)"),
             (pipeline._ByRow, "links", "next messages' places"),
             (hybrid.Combined, "reshape", "neighbours' share and thread prior"), (hybrid.Combined, "within", "a cut"),
             (hybrid.Combined, "reranked", "re-rank and records"), (pipeline, "_fuse", "the fusion, whole"),
             (pipeline, "run", "the search, whole")]
    kept = []
    for owner, name, label in parts:
        f = getattr(owner, name)
        kept.append((owner, name, f))

        def timed(*a: Any, _f: Any = f, _label: str = label, **k: Any) -> Any:
            t = time.thread_time_ns()
            try:
                return _f(*a, **k)
            finally:
                times.setdefault(_label, []).append(time.thread_time_ns() - t)

        setattr(owner, name, functools.wraps(f)(timed))
    try:
        for text in queries * 2:
            index.search(text, resource_id="u", mode="hybrid", top_k=10)
    finally:
        for owner, name, f in kept:
            setattr(owner, name, f)
    for label, got in times.items():
        print(f"  {label}: {statistics.median(got) / 1000:.1f} µs ({len(got)} calls)")


if __name__ == "__main__":
    main()
