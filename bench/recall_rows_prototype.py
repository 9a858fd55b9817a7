"""What issue 20 item 4's remaining redesign would gain: a hybrid search whose fusion works on the vector
set's rows in numpy, measured against the engine's own searches in one process (a prototype, not the engine).

    PYTHONPATH=$PWD .venv/bin/python bench/recall_rows_prototype.py            # USE's fusion (.65, 70 / 50)
    PYTHONPATH=$PWD .venv/bin/python bench/recall_rows_prototype.py --fusion default

The engine's hybrid search (``search.run``) builds a record per candidate of each list, then fuses,
spreads the neighbours' share, adds the thread prior and re-ranks in Python, through maps keyed by
message id (~120 candidates a search at USE's depths, each looked up in a dozen maps whose entries the
vector scan has just evicted from the CPU's caches). The prototype does the same arithmetic, in the same
order of floating-point operations, on arrays indexed by the vector set's row: the scan's rows and
scores as they come, the keyword hits mapped to rows, each row's thread code, and each row's next
user/assistant message as a row (here read once from the store: the order cache's answer kept as an
array by row, which the engine does not have). It checks its top 10 against the engine's answer for every
query (ids and score bits) and stops if one differs, then times the engine's vector search, the engine's
hybrid search and the prototype query by query (the three in turn, the order rotating), thread CPU, then
each in blocks of the 200 queries as ``recall_speed.py``'s "best of 5" line does; last, the fusion's steps alone,
on rows against the engine's on records (``steps``: what the arrays cost once fed rows; the same steps on arrays
fed the engine's records and maps were slower than its loops, ARCHITECTURE's s30-rows row).

Left out, so only a resource of ``recall_speed.py``'s kind is searched (one thread, no speaker labels,
no period named, every candidate with a vector): the date and speaker boosts, a keyword hit without a
vector, messages with several vectors, and keeping the next-row array up to date under writes (what the
order cache does for its maps). The keyword list is the engine's (its records mapped to rows by a map
built once), so the figure is a lower bound of what the keyword memory answering with rows would give.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recall_speed as rs  # noqa: E402  (puts its own checkout first on the path)

from core.recall import hybrid  # noqa: E402
from core.recall.keyword import CONTEXT_WEIGHT  # noqa: E402
from core.recall import search as pipeline  # noqa: E402
from core.recall.search import today  # noqa: E402
from core.recall.text import query_dates  # noqa: E402
from core.recall.types import SearchHit  # noqa: E402


class RowFusion:
    """The fusion, neighbours' share, thread prior and next-message re-rank of ``search._fuse`` on rows."""

    def __init__(self, vset: Any, next_row: np.ndarray, keyword_share: float) -> None:
        n = vset.n
        self.vset, self.a = vset, keyword_share
        self.mids = vset.message_ids[:n]
        self.keys = np.array(self.mids, dtype=str)  # (ties by id: numpy compares plain text as Python does)
        self.codes = vset._thread_codes[:n].astype(np.int64)
        self.next_row = np.append(next_row, -1)  # (index -1 reads -1: no next message)
        prev_row = np.full(n + 1, -1, dtype=np.int64)
        has = next_row >= 0
        prev_row[next_row[has]] = np.flatnonzero(has)
        self.prev_row = prev_row
        self.slot = np.full(n + 1, -1, dtype=np.int64)  # row -> candidate, -1 elsewhere (reset after each use)
        self.at_kw = np.full(n, -1, dtype=np.int64)  # row -> place in the keyword list
        self.of_thread = np.full(int(self.codes.max(initial=0)) + 2, -1, dtype=np.int64)

    def top(self, vrows: np.ndarray, vcos: np.ndarray, krows: np.ndarray, kscore: np.ndarray, q: np.ndarray,
            k: int) -> tuple[np.ndarray, np.ndarray]:
        slot, at_kw = self.slot, self.at_kw
        slot[vrows] = 1
        only = krows[slot[krows] < 0]  # keyword-only candidates, in list order
        slot[vrows] = -1
        rows = np.concatenate((vrows, only))
        m = len(rows)
        cos = np.concatenate((vcos, np.take(self.vset._matrix, only, axis=0) @ q)).astype(np.float64)
        lo = float(vcos.min())
        span = float(vcos.max()) - lo
        at_kw[krows] = np.arange(len(krows))
        kat = at_kw[rows]
        at_kw[krows] = -1
        listed = kat >= 0
        kw = np.zeros(m)
        kw[listed] = kscore[kat[listed]] * (self.a / float(kscore.max()))
        base = kw + (1.0 - self.a) * np.minimum((cos - lo) / span, 1.0)  # ``Combined``
        slot[rows] = np.arange(m)
        nxt = slot[self.next_row[rows]]
        prv = slot[self.prev_row[rows]]
        slot[rows] = -1
        ns = hybrid.NEIGHBOUR_SHARE  # ``Combined._propagated``
        s = base + np.where(nxt >= 0, ns * base[nxt], 0.0)
        s = (s + np.where(prv >= 0, ns * base[prv], 0.0)) * (1.0 / (1.0 + 2.0 * ns))
        tie = -cos
        th = self.codes[rows]  # ``Combined.reshape``'s thread prior: each thread's best and second entry
        order = np.lexsort((self.keys[rows], tie, -s, th))
        ths = th[order]
        first = np.ones(m, dtype=bool)
        first[1:] = ths[1:] != ths[:-1]
        second = np.zeros(m, dtype=bool)
        second[1:] = first[:-1] & ~first[1:]
        best_of, second_of = self.of_thread.copy(), self.of_thread.copy()
        best_of[ths[first]] = order[first]
        second_of[ths[second]] = order[second]
        best, other = best_of[th], second_of[th]
        ts = hybrid.THREAD_SHARE
        to_best = np.where(other >= 0, ts * s[np.maximum(other, 0)], ts * 0.0)
        s2 = (s + np.where(best == np.arange(m), to_best, ts * s[best])) * (1.0 / (1.0 + ts))
        xs = hybrid.NEXT_SHARE  # ``_rescored``, no period or speaker named
        r = (s2 + np.where(nxt >= 0, xs * s2[nxt], 0.0)) * (1.0 / (1.0 + xs))
        picked = np.lexsort((self.keys[rows], tie, -r))[:k]
        return rows[picked], r[picked]


def next_rows(store: Any, vset: Any) -> np.ndarray:
    """Each row's next user/assistant message of its thread, by (createdAt, id), as a row (-1: none)."""
    at = {mid: p for p, mid in enumerate(vset.message_ids[: vset.n])}
    out = np.full(vset.n, -1, dtype=np.int64)
    with store.db.read() as conn:
        rows = conn.exec_driver_sql('SELECT id, thread_id FROM mastra_messages WHERE role IN (\'user\', \'assistant\') '
                                    'ORDER BY thread_id, "createdAt", id').all()
    for (mid, thread), (after, same) in zip(rows, rows[1:]):
        if thread == same and mid in at and after in at:
            out[at[mid]] = at[after]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fusion", choices=sorted(rs.FUSION_IDS), default="use")
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    rng = np.random.default_rng(1)  # (recall_speed.py's resource and queries, the same seeds)
    store = rs.open_store(Path(tempfile.mkdtemp(prefix="recall-rows-")) / "m.db")
    store.memory.create_thread(thread_id="t", resource_id="u")
    msgs = rs.synthetic_messages(args.n, "t", "u", rng)
    for start in range(0, args.n, 1000):
        store.memory.save_messages(msgs[start : start + 1000])
    emb = rs.TableEmbedder(rs.FUSION_IDS[args.fusion])
    index = rs.RecallIndex.for_store(store, emb)
    for start in range(0, args.n, 256):
        index.index_messages(msgs[start : start + 256])
    queries = [rs.words(rng, 6) for _ in range(200)]
    emb.fixed.update(zip(queries, emb.embed(queries, "query")))
    index.search(queries[0], resource_id="u", mode="vector")
    fusion = hybrid.fusion_for(emb.model_id)
    depth, kw_depth = fusion.depths(10)
    with store.db.read() as conn:
        vset = index.vector_set(conn, "u", None)
    rows = RowFusion(vset, next_rows(store, vset), fusion.keyword_share)
    at = {mid: p for p, mid in enumerate(rows.mids)}
    memory = index.keywords.memory

    def prototype(text: str) -> list[SearchHit] | None:
        """The engine's statements and lists, then the fusion on rows; None: not covered (no keyword hit, or a
        keyword hit without a vector)."""
        with store.db.read() as conn:
            terms, _ = index.keywords.terms(conn, text)
            index.backlog(conn)
            index.order.sync(conn)
            hits = memory.search(conn, terms, resource_id="u", thread_id=None, limit=kw_depth,
                                 weight=CONTEXT_WEIGHT)
            q = np.asarray(emb.embed([text.lower() if fusion.lower_query else text], kind="query"),
                           dtype=np.float32)[0]
            pos, cos = index.vector_set(conn, "u", None).search(q, depth)
            found = list(map(at.get, [h.message_id for h in hits]))
            if not found or None in found:
                return None
            krows = np.array(found, dtype=np.int64)
            picked, scores = rows.top(pos, cos, krows, np.array([h.score for h in hits]), q, 10)
            query_dates(text, today())
            return [SearchHit(rows.mids[p], "t", "u", s, "hybrid", None, None)
                    for p, s in zip(picked.tolist(), scores.tolist())]

    covered = 0
    for text in queries:
        got = prototype(text)
        if got is None:
            continue
        want = [(h.message_id, h.score) for h in index.search(text, resource_id="u", mode="hybrid", top_k=10).hits]
        if [(h.message_id, h.score) for h in got] != want:
            raise SystemExit(f"the prototype's top 10 differs from the engine's for {text!r}")
        covered += 1
    print(f"fusion {args.fusion} (keyword share {fusion.keyword_share}, depth {depth} / {kw_depth}): the prototype's "
          f"top 10 equals the engine's (ids and score bits) for {covered} of {len(queries)} queries "
          "(the others have no keyword hit or one without a vector)")
    cpu: dict[str, list[int]] = {"vector": [], "hybrid": [], "prototype": []}
    turns = list(cpu)
    for r in range(args.rounds):
        for i, text in enumerate(queries):
            shift = (i + r) % 3
            for mode in turns[shift:] + turns[:shift]:
                t = time.thread_time_ns()
                if mode == "prototype":
                    prototype(text)
                else:
                    index.search(text, resource_id="u", mode=mode, top_k=10)
                cpu[mode].append(time.thread_time_ns() - t)
    p50 = {mode: statistics.median(v) / 1000 for mode, v in cpu.items()}
    print(f"thread CPU p50 per search, {args.rounds} x {len(queries)} queries, the three in turn: vector "
          f"{p50['vector']:.0f} µs, hybrid {p50['hybrid']:.0f} µs (x{p50['hybrid'] / p50['vector']:.2f}), prototype "
          f"{p50['prototype']:.0f} µs (x{p50['prototype'] / p50['vector']:.2f})")
    # As ``recall_speed.py``'s "best of 5, modes in turn": each mode's 200 searches in a row (vector-only ones then
    # find the scan's copy of the matrix still in the CPU's last-level cache), each mode's best round's p50.
    best = {mode: float("inf") for mode in turns}
    for _ in range(args.rounds):
        for mode in turns:
            block = []
            for text in queries:
                t = time.thread_time_ns()
                if mode == "prototype":
                    prototype(text)
                else:
                    index.search(text, resource_id="u", mode=mode, top_k=10)
                block.append(time.thread_time_ns() - t)
            best[mode] = min(best[mode], statistics.median(block) / 1000)
    print(f"the same in blocks of {len(queries)}, each mode's best of {args.rounds}: vector {best['vector']:.0f} µs, "
          f"hybrid {best['hybrid']:.0f} µs (x{best['hybrid'] / best['vector']:.2f}), prototype {best['prototype']:.0f} µs "
          f"(x{best['prototype'] / best['vector']:.2f})")
    steps(index, store, rows, at, queries, fusion, depth, kw_depth, args.rounds)
    store.close()


def steps(index: Any, store: Any, rows: RowFusion, at: dict[str, int], queries: list[str], fusion: hybrid.Fusion,
          depth: int, kw_depth: int, rounds: int) -> None:
    """The fusion's steps alone, paired query by query: ``RowFusion.top`` on rows (the keyword-only cosines
    included) against the engine's ``Combined``, ``reshape``, the two cuts and ``reranked`` on its records and
    maps by id (the cosines not included), each with its inputs made before timing."""
    memory = index.keywords.memory
    cases = []
    for text in queries:
        q = np.asarray(index.embedder.embed([text.lower() if fusion.lower_query else text], kind="query"),
                       dtype=np.float32)[0]
        with store.db.read() as conn:
            terms, _ = index.keywords.terms(conn, text)
            hits = memory.search(conn, terms, resource_id="u", thread_id=None, limit=kw_depth, weight=CONTEXT_WEIGHT)
            pos, cos = index.vector_set(conn, "u", None).search(q, depth)
        found = list(map(at.get, [h.message_id for h in hits]))
        if not found or None in found:
            continue
        run = pipeline.run(index, text, resource_id="u", thread_id=None, top_k=10, mode="hybrid")
        with store.db.read() as conn:
            order = pipeline.thread_order(conn, [e[2] for e in run.combined.entries], labels=True)  # type: ignore[union-attr]
        cases.append(((pos, cos, np.array(found, dtype=np.int64), np.array([h.score for h in hits]), q),
                      (run.vector, run.keyword, run.cosines, {m: o[0] for m, o in order.items()})))

    def loops(vector: Any, keyword: Any, cosines: Any, next_of: Any) -> Any:
        combined = hybrid.Combined(vector, keyword, cosines, keyword_share=fusion.keyword_share)
        combined.reshape(next_of, hybrid.NEIGHBOUR_SHARE, hybrid.THREAD_SHARE)
        receivers = pipeline._may_reach(combined.order, 10, dated=False)
        fewer = pipeline._may_reach(receivers, 10, dated=False, spoken=False)
        return combined.reranked(fewer, next_of, None, limit=10)

    cpu: dict[str, list[int]] = {"rows": [], "loops": []}
    for r in range(rounds):
        for i, (on_rows, on_records) in enumerate(cases):
            for name in ("rows", "loops") if (i + r) % 2 else ("loops", "rows"):
                t = time.thread_time_ns()
                if name == "rows":
                    rows.top(*on_rows, 10)
                else:
                    loops(*on_records)
                cpu[name].append(time.thread_time_ns() - t)
    print(f"the fusion's steps alone, {rounds} x {len(cases)} queries paired, thread CPU p50: on rows (RowFusion.top, "
          f"keyword-only cosines included) {statistics.median(cpu['rows']) / 1000:.0f} µs, the engine's on records "
          f"(Combined, reshape, cuts, reranked; cosines not included) {statistics.median(cpu['loops']) / 1000:.0f} µs")


if __name__ == "__main__":
    main()
