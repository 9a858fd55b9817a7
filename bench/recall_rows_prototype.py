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
query (ids and score bits) and stops if one differs, then times query by query (the six in turn, the order
rotating), thread CPU: the engine's vector search, the engine's hybrid search, the prototype, the prototype with
every step on rows ("all rows": the keyword memory answering with rows, ``keyword_rows``, and the date and
speaker boosts applied by row from arrays of each row's day and speaker), and the same with the candidates' next
messages, days and speakers read from the order cache in the search and mapped to rows ("order read": the route
without the order cache's arrays by row, the part hardest to keep right under writes), and every step on rows
from the engine's own built pieces ("built": ``KeywordMemory.search_rows`` and the vector set's ``OrderRows``,
kept right under writes by the order cache's change log, filled in each search); then each in blocks of
the 200 queries as ``recall_speed.py``'s "best of 5" line does; then the fusion's steps alone, on rows against
the engine's on records (``steps``: what the arrays cost once fed rows; the same steps on arrays fed the
engine's records and maps were slower than its loops, ARCHITECTURE's s30-rows row); last, each step of the
rows-first route on its own against what the engine does for it (``row_steps``), and what building the arrays
by row for the whole set costs (the price of keeping them right by rebuilding them after a write).

Left out, so only a resource of ``recall_speed.py``'s kind is searched (one thread, no speaker labels,
no period named, every candidate with a vector): a keyword hit without a vector, messages with several
vectors (both by id in the engine's pieces), the playground's explanation and Postgres. The boosts are applied (their cost counted) but never change an answer
here: no query names a period or a speaker.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from datetime import date
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recall_speed as rs  # noqa: E402  (puts its own checkout first on the path)

from core.recall import hybrid  # noqa: E402
from core.recall.keyword import CONTEXT_WEIGHT  # noqa: E402
from core.recall.keyword_memory import NO_ROW  # noqa: E402
from core.recall.order_rows import NEXT_BY_ID  # noqa: E402
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
        self.named = np.zeros(1, dtype=bool)  # (by speaker code: whether the query names it; ``row_steps`` sizes it)

    def top(self, vrows: np.ndarray, vcos: np.ndarray, krows: np.ndarray, kscore: np.ndarray, q: np.ndarray,
            k: int, boosts: tuple[np.ndarray, np.ndarray] | None = None,
            read: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None,
            ) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` rows and their scores. ``boosts``: each row's day (an int, -1 unknown) and speaker
        code (-1 none), when the query names a period or a speaker: the date and speaker boosts as ``_rescored``
        adds them (here with no period and no speaker named, so only their cost shows: the same answer).
        ``read``: the candidates' next messages (as rows), days and speakers read per search from the order
        cache, not from the arrays by row (then with the boosts)."""
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
        if read is None:
            nxt = slot[self.next_row[rows]]
            prv = slot[self.prev_row[rows]]
        else:
            next_rows, cand_days, cand_speakers = read(rows)
            nxt = slot[next_rows]
            prv = np.full(m, -1, dtype=np.int64)
            linked = np.flatnonzero(nxt >= 0)
            prv[nxt[linked]] = linked
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
        xs = hybrid.NEXT_SHARE  # ``_rescored``
        if boosts is None and read is None:  # (no period or speaker named)
            r = (s2 + np.where(nxt >= 0, xs * s2[nxt], 0.0)) * (1.0 / (1.0 + xs))
        else:
            if read is None:
                assert boosts is not None
                days, speakers = boosts
                cand_days, cand_speakers = days[rows], speakers[rows]
            lo, hi = 2**40, 2**40 + 6  # (the period the query names, as day numbers: a week no row is in)
            in_period = (cand_days >= lo) & (cand_days <= hi)
            spoken = self.named[cand_speakers]  # (a table by speaker code, its last entry for -1)
            r = s2 + np.where(nxt >= 0, xs * s2[nxt], 0.0)
            r = r + np.where(in_period, hybrid.DATE_BOOST, 0.0)
            r = (r + np.where(spoken, hybrid.SPEAKER_BOOST, 0.0)) * (1.0 / (1.0 + xs))
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
    store, index, emb, _, queries = rs.indexed_resource(args.n, args.fusion, "recall-rows-")
    index.search(queries[0], resource_id="u", mode="vector")
    fusion = hybrid.fusion_for(emb.model_id)
    depth, kw_depth = fusion.depths(10)
    with store.db.read() as conn:
        vset = index.vector_set(conn, "u", None)
    rows = RowFusion(vset, next_rows(store, vset), fusion.keyword_share)
    at = {mid: p for p, mid in enumerate(rows.mids)}
    memory = index.keywords.memory
    index.search(queries[0], resource_id="u", mode="hybrid")  # (the keyword memory and order cache loaded)
    doc_row = doc_rows(memory, at)
    nxt, days, speakers, label_codes = order_arrays(index, store, rows.mids, at)
    assert np.array_equal(nxt, rows.next_row[: len(rows.mids)])
    rows.named = np.zeros(int(speakers.max(initial=0)) + 2, dtype=bool)  # (no speaker named: the cost, not the answer)

    mid_objs = vset._id_columns()[0]  # type: ignore[union-attr]
    first, second = itemgetter(0), itemgetter(1)

    orows = vset.order_rows  # type: ignore[union-attr]
    rows.named = np.zeros(max(len(rows.named), len(orows.labels) + 2, 1024), dtype=bool)  # (OrderRows' codes too)

    def prototype(text: str, all_rows: bool = False, order_read: bool = False, built: bool = False,
                  ) -> list[SearchHit] | None:
        """The engine's statements and lists, then the fusion on rows; None: not covered (no keyword hit, or a
        keyword hit without a vector). ``all_rows``: the keyword list as rows too (``keyword_rows``) and the date
        and speaker boosts applied by row (``RowFusion.top``'s ``boosts``); ``order_read``: the candidates' next
        messages, days and speakers read from the order cache in the search (as the engine does), mapped to rows,
        not taken from arrays by row. ``built``: every step on rows with the engine's own pieces as built (s31-rows3):
        the keyword list from ``KeywordMemory.search_rows`` and each candidate's next message, day and speaker from
        the vector set's ``OrderRows`` (``fill`` for the unknown ones, then three gathers)."""

        def built_read(cand: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            orows.fill(conn, index.order, vset, cand, reader=pipeline.thread_order, synced=True)
            nxt = orows.next_row[cand].astype(np.int64)
            by_id = np.flatnonzero(nxt == NEXT_BY_ID)
            for i in by_id.tolist():  # (a next message without a single row: none here)
                nxt[i] = at.get(orows.next_ids[int(cand[i])], -1)
            return nxt, orows.day[cand], orows.label[cand]

        def read(cand: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            ids = mid_objs[cand].tolist()
            order = index.order.read(conn, ids, labels=True, reader=pipeline.thread_order, synced=True)
            found = list(map(order.__getitem__, ids))
            m = len(ids)
            return (np.fromiter(map(at.get, map(first, found), repeat(-1)), np.int64, m),
                    np.fromiter(map(date.toordinal, map(second, found)), np.int64, m),
                    np.fromiter(map(label_codes.get, map(pipeline._LABEL, found), repeat(-1)), np.int64, m))

        with store.db.read() as conn:
            terms, _ = index.keywords.terms(conn, text)
            index.backlog(conn)
            index.order.sync(conn)
            if built:
                got = memory.search_rows(conn, terms, vset, resource_id="u", thread_id=None, limit=kw_depth,
                                         weight=CONTEXT_WEIGHT) if terms else None
                if got is None or not len(got[0]) or (got[0] == NO_ROW).any():
                    return None
                krows, kscore = got[0], got[1]
            elif all_rows:
                if not terms:
                    return None
                krows, kscore = keyword_rows(memory, conn, terms, kw_depth, doc_row)
                if not len(krows) or (krows < 0).any():
                    return None
            else:
                hits = memory.search(conn, terms, resource_id="u", thread_id=None, limit=kw_depth,
                                     weight=CONTEXT_WEIGHT)
                found = list(map(at.get, [h.message_id for h in hits]))
                if not found or None in found:
                    return None
                krows, kscore = np.array(found, dtype=np.int64), np.array([h.score for h in hits])
            q = np.asarray(emb.embed([text.lower() if fusion.lower_query else text], kind="query"),
                           dtype=np.float32)[0]
            pos, cos = index.vector_set(conn, "u", None).search(q, depth)
            picked, scores = rows.top(pos, cos, krows, kscore, q, 10, (days, speakers) if all_rows else None,
                                      built_read if built else read if order_read else None)
            query_dates(text, today())
            return [SearchHit(rows.mids[p], "t", "u", s, "hybrid", None, None)
                    for p, s in zip(picked.tolist(), scores.tolist())]

    covered = 0
    for text in queries:
        got = prototype(text)
        if got is None:
            continue
        want = [(h.message_id, h.score) for h in index.search(text, resource_id="u", mode="hybrid", top_k=10).hits]
        also, read_too, built = prototype(text, True), prototype(text, True, True), prototype(text, built=True)
        if [(h.message_id, h.score) for h in got] != want or also != got or read_too != got or built != got:
            raise SystemExit(f"the prototype's top 10 differs from the engine's for {text!r}")
        covered += 1
    print(f"fusion {args.fusion} (keyword share {fusion.keyword_share}, depth {depth} / {kw_depth}): the prototype's "
          f"top 10 equals the engine's (ids and score bits) for {covered} of {len(queries)} queries "
          "(the others have no keyword hit or one without a vector)")
    cpu: dict[str, list[int]] = {"vector": [], "hybrid": [], "prototype": [], "rows": [], "read": [], "built": []}
    turns = list(cpu)
    for r in range(args.rounds):
        for i, text in enumerate(queries):
            shift = (i + r) % len(turns)
            for mode in turns[shift:] + turns[:shift]:
                t = time.thread_time_ns()
                if mode in ("prototype", "rows", "read", "built"):
                    prototype(text, mode in ("rows", "read"), mode == "read", mode == "built")
                else:
                    index.search(text, resource_id="u", mode=mode, top_k=10)
                cpu[mode].append(time.thread_time_ns() - t)
    p50 = {mode: statistics.median(v) / 1000 for mode, v in cpu.items()}
    print(f"thread CPU p50 per search, {args.rounds} x {len(queries)} queries, the six in turn: vector "
          f"{p50['vector']:.0f} µs, hybrid {p50['hybrid']:.0f} µs (x{p50['hybrid'] / p50['vector']:.2f}), prototype "
          f"{p50['prototype']:.0f} µs (x{p50['prototype'] / p50['vector']:.2f}), all rows {p50['rows']:.0f} µs "
          f"(x{p50['rows'] / p50['vector']:.2f}), all rows but the order read in the search {p50['read']:.0f} µs "
          f"(x{p50['read'] / p50['vector']:.2f}), all rows from the engine's built pieces {p50['built']:.0f} µs "
          f"(x{p50['built'] / p50['vector']:.2f})")
    # As ``recall_speed.py``'s "best of 5, modes in turn": each mode's 200 searches in a row (vector-only ones then
    # find the scan's copy of the matrix still in the CPU's last-level cache), each mode's best round's p50.
    best = {mode: float("inf") for mode in turns}
    for _ in range(args.rounds):
        for mode in turns:
            block = []
            for text in queries:
                t = time.thread_time_ns()
                if mode in ("prototype", "rows", "read", "built"):
                    prototype(text, mode in ("rows", "read"), mode == "read", mode == "built")
                else:
                    index.search(text, resource_id="u", mode=mode, top_k=10)
                block.append(time.thread_time_ns() - t)
            best[mode] = min(best[mode], statistics.median(block) / 1000)
    print(f"the same in blocks of {len(queries)}, each mode's best of {args.rounds}: vector {best['vector']:.0f} µs, "
          f"hybrid {best['hybrid']:.0f} µs (x{best['hybrid'] / best['vector']:.2f}), prototype {best['prototype']:.0f} µs "
          f"(x{best['prototype'] / best['vector']:.2f}), all rows {best['rows']:.0f} µs (x{best['rows'] / best['vector']:.2f}), "
          f"order read {best['read']:.0f} µs (x{best['read'] / best['vector']:.2f}), built {best['built']:.0f} µs "
          f"(x{best['built'] / best['vector']:.2f})")
    steps(index, store, rows, at, queries, fusion, depth, kw_depth, args.rounds)
    row_steps(index, store, rows, at, queries, fusion, depth, kw_depth, args.rounds, doc_row, (days, speakers))
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
        received = combined.reach(10, dated=False)
        fewer = combined.reach(10, dated=False, spoken=False, among=received)
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


def keyword_rows(memory: Any, conn: Any, terms: list[str], limit: int, doc_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``KeywordMemory.search`` for resource "u" answering with vector-set rows and scores (``doc_row``: each doc's
    row, kept beside the docs) instead of records: the same statements up to its sort, then one gather."""
    memory.sync(conn)
    with memory._lock:
        phrases = memory._phrases(conn, terms)
        at = np.concatenate([p[3] for p in phrases])
        parts = np.concatenate([memory._parts_of(p, CONTEXT_WEIGHT) for p in phrases])
        dense = np.bincount(at, weights=parts, minlength=len(memory._rowids))
        found = np.zeros(len(memory._rowids), dtype=bool)
        found[at] = True
        places = np.flatnonzero(found)
        places = places[memory._resources[places] == memory._codes.get("u", -3)]
        score = dense[places]
        if len(score) > limit:
            cut = np.partition(score, len(score) - limit)[len(score) - limit]
            best = np.flatnonzero(score >= cut)
            places, score = places[best], score[best]
        order = np.lexsort((places, memory._keys_of_mids()[places], -score))[:limit]
        return doc_row[places[order]], score[order]


def doc_rows(memory: Any, at: dict[str, int]) -> np.ndarray:
    """Each keyword doc's vector-set row (-1: none), as the keyword memory would keep it beside its docs."""
    return np.array([at.get(m, -1) if m is not None else -1 for m in memory._mids], dtype=np.int64)


def order_arrays(index: Any, store: Any, mids: list[str], at: dict[str, int]) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, dict[str | None, int]]:
    """Each row's next message (a row, -1: none), day (an ordinal, -1: unknown) and speaker (a code, -1: none),
    from the order cache's answers for every row: what the cache would keep as arrays by row; and the codes."""
    kept, n = index.order, len(mids)
    with store.db.read() as conn:
        every = kept.read(conn, mids, labels=True, reader=pipeline.thread_order, synced=kept.sync(conn))
    found = list(map(every.get, mids))
    nxt = np.fromiter((at.get(o[0], -1) if o is not None and o[0] is not None else -1 for o in found), np.int64, n)
    days = np.fromiter((o[1].toordinal() if o is not None and o[1] is not None else -1 for o in found), np.int64, n)
    labels: dict[str | None, int] = {None: -1}
    speakers = np.fromiter((labels.setdefault(o[2] if o is not None else None, len(labels) - 1) for o in found),
                           np.int64, n)
    return nxt, days, speakers, labels


def row_steps(index: Any, store: Any, rows: RowFusion, at: dict[str, int], queries: list[str], fusion: hybrid.Fusion,
              depth: int, kw_depth: int, rounds: int, doc_row: np.ndarray, boosts: tuple[np.ndarray, np.ndarray]) -> None:
    """Each step of the rows-first route on its own, against what the engine does for it, paired query by query
    (thread CPU p50; a step the engine runs after the vector scan is timed after an untimed scan, in both ways, so
    it starts with the caches the scan left): 1. the scan's records (the rows way keeps ``search``'s rows and
    cosines); 2. the keyword list as records against vector-set rows (``keyword_rows``); 3. the keyword-only
    candidates' cosines (``places`` and ``VectorSet.cosines`` against a gather and a product by row); 4. the
    order cache's answers and next-message map against gathers from arrays by row (and what building those
    arrays for the whole set costs, the price of keeping them right under writes if rebuilt after each); 5. the
    fusion's steps (``steps``' comparison, here after a scan); 6. the date and speaker boosts on rows
    (``RowFusion.top`` without and with them)."""
    from core.recall.types import ranked_of
    vset, memory, kept = rows.vset, index.keywords.memory, index.order
    doc_builds = []
    for _ in range(3):
        t = time.thread_time_ns()
        doc_rows(memory, at)
        doc_builds.append(time.thread_time_ns() - t)
    n = vset.n
    cases = []
    with store.db.read() as conn:
        for text in queries:
            q = np.asarray(index.embedder.embed([text.lower() if fusion.lower_query else text], kind="query"),
                           dtype=np.float32)[0]
            terms, _ = index.keywords.terms(conn, text)
            hits = memory.search(conn, terms, resource_id="u", thread_id=None, limit=kw_depth, weight=CONTEXT_WEIGHT)
            if not hits or None in map(at.get, [h.message_id for h in hits]):
                continue
            vector = vset.ranked(q, depth, None)
            krows, kscore = keyword_rows(memory, conn, terms, kw_depth, doc_row)
            assert [rows.mids[r] for r in krows.tolist()] == [h.message_id for h in hits]
            assert kscore.tolist() == [h.score for h in hits]
            ids = list(dict.fromkeys([r.message_id for r in vector] + [h.message_id for h in hits]))
            vec_at = hybrid.places(vector)
            cosines = vset.cosines(q, [h.message_id for h in hits if h.message_id not in vec_at])
            order = kept.read(conn, ids, labels=True, reader=pipeline.thread_order, synced=kept.sync(conn))
            next_of = {m: o[0] for m, o in order.items()}
            cases.append((q, terms, hits, vector, krows, ids, cosines, next_of))
    # (each row's next message, day and speaker as arrays by row, from the order cache's answers for every row)
    mids = rows.mids
    builds = []
    for _ in range(3):
        t = time.thread_time_ns()
        order_arrays(index, store, mids, at)
        builds.append(time.thread_time_ns() - t)
    nxt, days, speakers = rows.next_row[:n], *boosts
    ranked_cols = vset._id_columns

    def scan(case: Any) -> Any:
        return vset.search(case[0], depth)

    def records(case: Any, got: Any) -> Any:  # ``VectorSet.ranked`` after its scan
        pos, scores = got
        m, th, rs_ = ranked_cols()
        return list(map(ranked_of, zip(m[pos].tolist(), th[pos].tolist(), rs_[pos].tolist(), scores.tolist())))

    def kw_records(case: Any, got: Any) -> Any:
        return memory.search(conn, case[1], resource_id="u", thread_id=None, limit=kw_depth, weight=CONTEXT_WEIGHT)

    def kw_rows(case: Any, got: Any) -> Any:
        return keyword_rows(memory, conn, case[1], kw_depth, doc_row)

    def cos_records(case: Any, got: Any) -> Any:
        vec_at = hybrid.places(case[3])
        return vset.cosines(case[0], [h.message_id for h in case[2] if h.message_id not in vec_at])

    def cos_rows(case: Any, got: Any) -> Any:
        vrows, slot, krows = got[0], rows.slot, case[4]
        slot[vrows] = 1
        only = krows[slot[krows] < 0]
        slot[vrows] = -1
        return np.concatenate((got[1], np.take(vset._matrix, only, axis=0) @ case[0])).astype(np.float64)

    def order_records(case: Any, got: Any) -> Any:
        order = kept.read(conn, case[5], labels=True, reader=pipeline.thread_order, synced=True)
        return dict(zip(order, map(pipeline._NEXT, order.values())))

    def order_rows(case: Any, got: Any) -> Any:
        cand = np.concatenate((got[0], case[4]))
        return nxt[cand], days[cand], speakers[cand]

    def loops(case: Any, got: Any) -> Any:  # ``steps``' loops (the engine's ``_fuse`` after its order read)
        combined = hybrid.Combined(case[3], case[2], case[6], keyword_share=fusion.keyword_share)
        combined.reshape(case[7], hybrid.NEIGHBOUR_SHARE, hybrid.THREAD_SHARE)
        received = combined.reach(10, dated=False)
        fewer = combined.reach(10, dated=False, spoken=False, among=received)
        return combined.reranked(fewer, case[7], None, limit=10)

    def top_plain(case: Any, got: Any) -> Any:
        return rows.top(got[0], got[1], case[4], np.array([h.score for h in case[2]]), case[0], 10)

    def top_boosts(case: Any, got: Any) -> Any:
        return rows.top(got[0], got[1], case[4], np.array([h.score for h in case[2]]), case[0], 10, boosts)

    for c in cases[:20]:
        got = scan(c)
        a, b = top_plain(c, got), top_boosts(c, got)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    pairs = [("1. the scan's records", records, None, True), ("2. the keyword list", kw_records, kw_rows, False),
             ("3. keyword-only cosines", cos_records, cos_rows, True), ("4. thread order", order_records, order_rows, True),
             ("5. the fusion's steps (rows: the keyword-only cosines included)", loops, top_plain, True),
             ("6. date and speaker boosts (rows, without -> with)", top_plain, top_boosts, True)]
    reading = contextlib.ExitStack()
    conn = reading.enter_context(store.db.read())  # (one read for the timings, as a search holds one)
    print(f"the rows-first route step by step, {rounds} x {len(cases)} queries paired, thread CPU p50 (engine's way "
          "-> rows' way):")
    for name, old, new, after_scan in pairs:
        cpu: dict[str, list[int]] = {"old": [], "new": []}
        for r in range(rounds):
            for i, case in enumerate(cases):
                for way in ("old", "new") if (i + r) % 2 else ("new", "old"):
                    fn = old if way == "old" else new
                    got = scan(case) if after_scan else None
                    if fn is None:
                        cpu[way].append(0)
                        continue
                    t = time.thread_time_ns()
                    fn(case, got)
                    cpu[way].append(time.thread_time_ns() - t)
        print(f"  {name}: {statistics.median(cpu['old']) / 1000:.1f} -> {statistics.median(cpu['new']) / 1000:.1f} µs")
    reading.close()
    print(f"  keeping the order arrays right: building next / day / speaker by row for all {n} rows from the order "
          f"cache's answers {statistics.median(builds) / 1e6:.1f} ms; the keyword docs' rows for all {len(doc_row)} docs "
          f"{statistics.median(doc_builds) / 1e6:.1f} ms")


if __name__ == "__main__":
    main()
