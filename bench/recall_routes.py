"""Recall-quality routes on LoCoMo's public split, scored from one engine pass (issue 20 item 2).

    .venv/bin/python bench/recall_routes.py --model use      # the default local model
    .venv/bin/python bench/recall_routes.py --model e5       # multilingual-e5-small
    .venv/bin/python bench/recall_routes.py --model e5 --passages ctx,ctx_date   # re-embeds (slow for e5)

Ingests the split as ``recall_locomo.py`` does and asks every question once through the engine's
search (``core.recall.search.run``), keeping each question's whole cosine list, its keyword list to
depth 300, its terms' document frequencies and every message's next message, day and speaker label.
The hybrid ranking is then rebuilt from those lists with the engine's own ``hybrid.Combined`` and
``hybrid.rerank`` ("base" reproduces the engine's hybrid recall@10), and each route changes one step:

- fusion: candidate depth; keyword scores over ``max(best BM25, r * sum of the query terms' idf)``
  instead of the best BM25 (a best hit matching only weak terms no longer gets full keyword credit);
- window: a message's vector score is the best of its own passage's cosine and its next message's
  (whose passage holds this message as context): vector-only and hybrid, with the previous messages of
  vector hits as candidates; then with other depths and keyword shares (windowed vectors earn more);
- passages (``--passages``): what is embedded for a message, vector-only and hybrid with the same
  keyword lists: ``ctx`` (stored: previous message + text), ``own`` (text alone), ``ctx_date`` (the
  session's day first), ``ctx_next`` (the reply too), ``ctx2`` (two previous messages).

Prints recall@10 overall, the worst conversation, each conversation and each category. Public split
only; a route is worth landing when it helps both models and is not a constant fitted to these
questions.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import recall_locomo as rl  # noqa: E402
from core.recall import hybrid, search  # noqa: E402
from core.recall.text import SpeakerMatcher, query_dates  # noqa: E402

CATEGORIES = ("multi-hop", "temporal", "open-domain", "single-hop")


def collect(model: str, cache_dir: Path) -> dict[str, Any]:
    data = rl.default_data()
    messages = rl.load_jsonl(data / "locomo_public_messages.jsonl")
    queries = [q for q in rl.load_jsonl(data / "locomo_public_queries.jsonl") if not q.get("adversarial")]
    embedder = rl.make_embedder(model, cache_dir)
    db_dir = Path(tempfile.mkdtemp(prefix="locomo-routes-"))
    by_conv: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in messages:
        by_conv[m["conv_id"]].append(m)
    memories = {c: rl.ingest(c, ms, db_dir, embedder) for c, ms in sorted(by_conv.items())}
    order = {}
    for c, memory in memories.items():
        with memory.recall_index.store.db.read() as conn:
            order[c] = search.thread_order(conn, [m["id"] for m in by_conv[c]], labels=True)
    per_q = {}
    for q in queries:
        index = memories[q["conv_id"]].recall_index
        run = search.run(index, q["query"], resource_id=q["conv_id"], thread_id=None, top_k=20, mode="hybrid",
                         every_candidate=True)
        with index.store.db.read() as conn:
            every = run.vset.ranked(run.qvec, 100_000, None, None)
            kw = index.keywords.search(conn, q["query"], resource_id=q["conv_id"], thread_id=None, limit=300,
                                       terms=run.terms)
            df = {t: index.keywords.memory.frequency(conn, t) for t in run.terms}
        per_q[q["query_id"]] = {
            "v": [(h.message_id, h.score) for h in every], "k": [(h.message_id, h.score) for h in kw],
            "df": df, "rows": index.keywords.stats.rows, "qvec": run.qvec,
            "engine": [f.message_id for f in run.reranked],
        }
    for memory in memories.values():
        memory.store.close()
    shutil.rmtree(db_dir, ignore_errors=True)
    return {"queries": queries, "order": order, "q": per_q, "by_conv": by_conv, "embedder": embedder,
            "model_id": embedder.model_id}


def ranked_hybrid(D: dict[str, Any], q: dict[str, Any], vec: list[tuple[str, float]] | None = None,
                  cos: dict[str, float] | None = None, depth: int | None = None, ceiling: float = 0.0,
                  share: float | None = None) -> list[str]:
    """The engine's hybrid ranking rebuilt from the kept lists (``Combined`` + ``rerank``)."""
    d = D["q"][q["query_id"]]
    fusion = hybrid.fusion_for(D["model_id"])
    depth = fusion.candidates if depth is None else depth
    share = fusion.keyword_share if share is None else share
    cos = cos if cos is not None else d["cos"]
    vec = (vec if vec is not None else d["v"])[:depth]
    kw = d["k"][:depth]
    if ceiling > 0 and kw:
        idf_sum = sum(_idf(d["rows"], n or 0) for n in d["df"].values())
        scores = _with_ceiling(vec, kw, cos, share, max(max(s for _, s in kw), ceiling * idf_sum))
    else:
        R = lambda m, s: hybrid.Ranked(m, None, None, s)  # noqa: E731
        scores = hybrid.Combined([R(*x) for x in vec], [R(*x) for x in kw], cos,
                                 keyword_share=share).scores()
    order = D["order"][q["conv_id"]]
    fused = [hybrid.Fused(m, None, None, s, cos.get(m), None, 1, None) for m, s in scores.items()]
    next_of = {m: order[m][0] for m in scores if m in order and order[m][0]}
    spans = query_dates(q["query"], search.today())
    in_period = ({m for m in scores if m in order and order[m][1] and any(s.contains(order[m][1]) for s in spans)}
                 if spans else None)
    named = SpeakerMatcher(q["query"])
    by_speaker = {m for m in scores if m in order and named(order[m][2])}
    return [f.message_id for f in hybrid.rerank(fused, next_of, in_period, scores=scores, by_speaker=by_speaker or None)]


def _with_ceiling(vec: list[tuple[str, float]], kw: list[tuple[str, float]], cos: dict[str, float], share: float,
                  reference: float) -> dict[str, float]:
    """``combine``'s scores with the keyword side divided by ``reference`` instead of the best BM25."""
    lo, hi = vec[-1][1], vec[0][1]
    span = hi - lo if hi - lo > 1e-12 else 1.0
    kd = dict(kw)
    return {m: share * kd.get(m, 0.0) / reference + (1 - share) * min((cos.get(m, lo) - lo) / span, 1.0)
            for m in dict.fromkeys([m for m, _ in vec] + [m for m, _ in kw])}


def _idf(rows: int, hits: int) -> float:
    x = math.log((rows - hits + 0.5) / (hits + 0.5))
    return x if x > 0 else 1e-6


def score(D: dict[str, Any], ranked_of: Callable[[dict[str, Any]], list[str]], label: str) -> float:
    by_conv: dict[str, list[float]] = defaultdict(list)
    by_cat: dict[str, list[float]] = defaultdict(list)
    every = []
    for q in D["queries"]:
        gold = set(q["gold"])
        r = len(gold & set(ranked_of(q)[:10])) / len(gold)
        by_conv[q["conv_id"]].append(r)
        by_cat[q["category_name"]].append(r)
        every.append(r)
    total = sum(every) / len(every)
    conv = [sum(v) / len(v) for _, v in sorted(by_conv.items())]
    cats = " ".join(f"{c[:5]} {sum(by_cat[c]) / len(by_cat[c]):.3f}" for c in CATEGORIES if by_cat[c])
    print(f"{label:<44} {total:.4f} worst {min(conv):.3f} | {' '.join(f'{v:.3f}' for v in conv)} | {cats}", flush=True)
    return total


def windowed(D: dict[str, Any], q: dict[str, Any]) -> list[tuple[str, float]]:
    """Every message scored by the best of its own cosine and its next message's."""
    d = D["q"][q["query_id"]]
    order = D["order"][q["conv_id"]]
    cos = d["cos"]
    out = {}
    for m, c in cos.items():
        n = order.get(m, (None,))[0]
        out[m] = max(c, cos[n]) if n in cos else c
    return sorted(out.items(), key=lambda x: (-x[1], x[0]))


def passage_texts(kind: str, msgs: list[dict[str, Any]]) -> list[str]:
    out = []
    for i, m in enumerate(msgs):
        same = lambda j: 0 <= j < len(msgs) and msgs[j]["session"] == m["session"]  # noqa: E731
        text = rl.stored_text(m)
        prev = rl.stored_text(msgs[i - 1]) if same(i - 1) else ""
        nxt = rl.stored_text(msgs[i + 1]) if same(i + 1) else ""
        prev2 = rl.stored_text(msgs[i - 2]) if same(i - 2) else ""
        parts = {"ctx": (prev, text), "own": (text,), "ctx_date": (m["createdAt"][:10], prev, text),
                 "ctx_next": (prev, text, nxt), "ctx2": (prev2, prev, text)}[kind]
        out.append("\n".join(p for p in parts if p))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="use", help="use or e5")
    ap.add_argument("--passages", default="", help="comma-separated: ctx, own, ctx_date, ctx_next, ctx2 (re-embeds)")
    ap.add_argument("--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "memory-studio-embcache")
    args = ap.parse_args()
    D = collect(args.model, args.cache_dir)
    for d in D["q"].values():
        d["cos"] = dict(d["v"])
    print(f"model {D['model_id']}; recall@10 (public split), worst conversation, per conversation, per category")
    score(D, lambda q: D["q"][q["query_id"]]["engine"], "engine hybrid (search.run)")
    score(D, lambda q: ranked_hybrid(D, q), "base: rebuilt from the lists")
    score(D, lambda q: [m for m, _ in D["q"][q["query_id"]]["v"]], "vector")
    for depth in (30, 50, 80, 100, 150):
        score(D, lambda q: ranked_hybrid(D, q, depth=depth), f"fusion: depth {depth}")
    for r in (0.25, 0.5, 1.0):
        score(D, lambda q: ranked_hybrid(D, q, ceiling=r), f"fusion: keyword over max(best, {r} sum idf)")
    window = {q["query_id"]: windowed(D, q) for q in D["queries"]}
    score(D, lambda q: [m for m, _ in window[q["query_id"]]], "window: vector")
    score(D, lambda q: ranked_hybrid(D, q, vec=window[q["query_id"]], cos=dict(window[q["query_id"]])),
          "window: hybrid")
    for depth in (50, 80, 100, 150):
        score(D, lambda q: ranked_hybrid(D, q, vec=window[q["query_id"]], cos=dict(window[q["query_id"]]), depth=depth),
              f"window: hybrid, depth {depth}")
    for share in (0.6, 0.65, 0.7, 0.75, 0.85):
        score(D, lambda q: ranked_hybrid(D, q, vec=window[q["query_id"]], cos=dict(window[q["query_id"]]), share=share),
              f"window: hybrid, keyword share {share}")
    for kind in [k for k in args.passages.split(",") if k]:
        mats = {}
        for c, msgs in D["by_conv"].items():
            msgs = sorted(msgs, key=lambda m: (m["session"], m["seq"]))
            M = np.asarray(D["embedder"].embed(passage_texts(kind, msgs), kind="passage"), dtype=np.float32)
            mats[c] = ([m["id"] for m in msgs], M / np.linalg.norm(M, axis=1, keepdims=True))
        lists = {}
        for q in D["queries"]:
            ids, M = mats[q["conv_id"]]
            qv = np.asarray(D["q"][q["query_id"]]["qvec"], dtype=np.float32)
            cs = M @ (qv / np.linalg.norm(qv))
            lists[q["query_id"]] = [(ids[i], float(cs[i])) for i in np.argsort(-cs, kind="stable")]
        score(D, lambda q: [m for m, _ in lists[q["query_id"]]], f"passages {kind}: vector")
        score(D, lambda q: ranked_hybrid(D, q, vec=lists[q["query_id"]], cos=dict(lists[q["query_id"]])),
              f"passages {kind}: hybrid")


if __name__ == "__main__":
    main()
