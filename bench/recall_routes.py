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
  session's day first), ``ctx_next`` (the reply too), ``ctx2`` (two previous messages);
- prf: pseudo-relevance feedback in embedding space (Rocchio: ``normalise(q + a * mean of the top m hits'
  vectors)``, every message re-scored, or only the candidates already listed), fed by the best vector,
  keyword or fused hits;
- propagate: each fused score plus a share of its previous and next messages' (when candidates), over
  1 + the shares, before the re-rank; ``variants``: the same with a thread's end counting itself, or the
  better neighbour only; ``prev``: a previous-message share inside the re-rank instead; ``boosts``: the
  re-rank's date and speaker boosts made stronger (what the divisor of ``propagate`` does to them);
- thread: a thread-level prior after the neighbours' share: each candidate gains a share of the best
  other candidate of its thread (``max``, the engine's ``Combined.thread_prior``), of the mean of the
  best two others (``top2``) or of all others capped at 1 (``sum``), over 1 + the share;
- asked: what the prompt holds when the question is asked from inside a thread (its last 10 messages
  plus the top 4 hits with their range): the most topical thread without evidence, or the evidence's
  own, with and without the neighbours' share and the thread prior;
- bm25: the keyword list with other BM25 constants (k1, b) and context-column weights (FTS5 fixes k1
  and b, so only the in-process copy can be changed: a lab figure);
- prompt: what the recall processor would show at top k 4 and 10 with its default range (each hit with
  its previous and next message), with and without skipping hits already shown;
- expand: pseudo-relevance expansion of the keyword list (RM3-like, ``expanded``): the words of the best
  few messages of the keyword list, of the engine's hybrid ranking (``fused``) or of the two lists'
  combination alone (``head``), weighted by idf (``rm``: and by each word's frequency in those messages
  and their BM25 scores), the best of them added to every message's keyword score at a small weight;
- within: the same expansion scoring only the candidates the two lists already hold
  (``expand_within_routes``);
- peaked: a per-query keyword share in the fusion that follows how peaked each list is (``peaked_routes``);
- form: the query's form (``form_routes``): the question rewritten toward its statement by English grammar
  (``statement_form``), alone, mixed with the question, or the better of the two cosines; its keyword list;
  one text in the passage's two-line shape ("question\\nquestion", "question\\nstatement"); the question
  lower-cased (landed for USE) and its fusion grid, against passages lower-cased or without speaker labels;
  ``--fusion-before`` scores it against USE's fusion before that change; ``form_cost``: what the extra
  embedding costs;
- depth: the fusion's cost side (``depth_routes``): the vector and the keyword list at separate depths
  under keyword shares .6-.8 (the engine's query as it embeds it: lower-cased with USE), and only the best
  N of the combination going on to the neighbours' share, the thread prior and the re-rank;
- vec: USE's vector-only list (``vec_routes``, session 25): the corpus mean vector subtracted from the
  passages and / or the query (the conversation's, all five conversations', the other four's); the
  mean question vector subtracted from the query (the split's other conversations' questions, a lab
  figure, or a fixed set of 80 written questions, ``GENERIC_QUESTIONS``); per-thread normalisation
  (the thread's mean cosine subtracted, a z-score); a hubness penalty (CSLS: a passage's mean cosine
  to its k nearest passages); neighbour smoothing (cosine + lambda x the next and / or the previous
  message's cosine); the message embedded in pieces (its sentences, or clauses of long sentences, and
  its image caption, each as "speaker: piece", score = the passage's cosine mixed with the best piece's
  or a soft maximum over them, or the better of the two; only the best N passages re-scored); pieces
  and smoothing together; the query in pieces; passage variants (the image caption).
- units: USE's vector-only list at about today's embedding cost (``vec_units``, session 26): the message
  alone, its clause pieces, the stored passage's vector approximated as unit(own + a x previous own)
  (no second embedding), pieces only past N words or joined to at most K, the next message's share, and
  the form both backends scan today (several rows a message, its best row): rows unit(approximation +
  piece); ``units_top``: only the approximations' best M messages re-scored by their piece rows;
  ``units_cost``: the USE embedding time and tokens of what each route embeds (LoCoMo and
  ``recall_speed``'s synthetic messages, alternated); ``units_scan``: an exact scan at 3.3 rows a message;
- cost: the CPU time of the expansion step on a synthetic 10k-row index (numpy, as the in-process
  keyword copy would run it; ``expansion_cost``).

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
from core.recall import hybrid, keyword, keyword_memory, search  # noqa: E402
from core.recall.matrix import single_blas_thread  # noqa: E402
from core.recall.text import SpeakerMatcher, query_dates  # noqa: E402

CATEGORIES = ("multi-hop", "temporal", "open-domain", "single-hop")


def collect(model: str, cache_dir: Path, bm25: list[tuple[float, float, float]] = (),
            forms: dict[str, Callable[[str], str]] | None = None) -> dict[str, Any]:
    """``bm25``: (k1, b, context weight) settings whose keyword lists are read too (``k_bm25``);
    ``forms``: query rewrites whose keyword lists (and terms) are read too (``k_form``, ``terms_form``)."""
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
    mats: dict[str, tuple[list[str], np.ndarray, dict[str, int]]] = {}
    for q in queries:
        index = memories[q["conv_id"]].recall_index
        run = search.run(index, q["query"], resource_id=q["conv_id"], thread_id=None, top_k=20, mode="hybrid",
                         every_candidate=True)
        if q["conv_id"] not in mats:  # (one vector a message here: its row)
            ids = list(run.vset.message_ids[: run.vset.n])
            mats[q["conv_id"]] = (ids, np.array(run.vset.matrix, dtype=np.float32), {m: i for i, m in enumerate(ids)})
        with index.store.db.read() as conn:
            every = run.vset.ranked(run.qvec, 100_000, None, None)
            kw = index.keywords.search(conn, q["query"], resource_id=q["conv_id"], thread_id=None, limit=100_000,
                                       terms=run.terms)
            df = {t: index.keywords.memory.frequency(conn, t) for t in run.terms}
            k_form, terms_form = {}, {}
            for name, form in (forms or {}).items():
                text = form(q["query"])
                terms_form[name] = index.keywords.terms(conn, text)[0]
                k_form[name] = [(h.message_id, h.score) for h in index.keywords.search(
                    conn, text, resource_id=q["conv_id"], thread_id=None, limit=100_000, terms=terms_form[name])]
        per_q[q["query_id"]] = {
            "v": [(h.message_id, h.score) for h in every], "k": [(h.message_id, h.score) for h in kw],
            "df": df, "rows": index.keywords.stats.rows, "qvec": run.qvec,
            "engine": [f.message_id for f in run.reranked], "terms": run.terms,
            "k_form": k_form, "terms_form": terms_form,
        }
    for k1, b, weight in bm25:  # the in-process BM25 (``keyword_memory``) with other constants
        saved = keyword_memory._K1, keyword_memory._B, keyword.CONTEXT_WEIGHT
        keyword_memory._K1, keyword_memory._B, keyword.CONTEXT_WEIGHT = k1, b, weight
        try:
            for memory in memories.values():
                memory.recall_index.keywords.memory._phrases_seen = {}  # (their BM25 parts are kept)
            for q in queries:
                index = memories[q["conv_id"]].recall_index
                d = per_q[q["query_id"]]
                with index.store.db.read() as conn:
                    kw = index.keywords.search(conn, q["query"], resource_id=q["conv_id"], thread_id=None, limit=300,
                                               terms=d["terms"])
                d.setdefault("k_bm25", {})[(k1, b, weight)] = [(h.message_id, h.score) for h in kw]
        finally:
            keyword_memory._K1, keyword_memory._B, keyword.CONTEXT_WEIGHT = saved
            for memory in memories.values():
                memory.recall_index.keywords.memory._phrases_seen = {}
    fuse_us = _fuse_cost(memories, queries)
    fwd = {c: forward_index(memory.recall_index.keywords.memory) for c, memory in memories.items()}
    for q in queries:  # (each query's keyword terms as tokens, for the expansion routes)
        tok = memories[q["conv_id"]].recall_index.keywords.memory._tokenizer
        d = per_q[q["query_id"]]
        d["tokens"] = {t for tokens in tok.tokens([keyword_memory._inner(t) for t in d["terms"]]) for t in tokens}
    for memory in memories.values():
        memory.store.close()
    shutil.rmtree(db_dir, ignore_errors=True)
    return {"queries": queries, "order": order, "q": per_q, "by_conv": by_conv, "embedder": embedder,
            "model_id": embedder.model_id, "mats": mats, "fwd": fwd, "fuse_us": fuse_us}


def _fuse_cost(memories: dict[str, Any], queries: list[dict[str, Any]], rounds: int = 5) -> list[float]:
    """CPU time of the fusion steps of a default hybrid search (``search._fuse``: the keyword candidates'
    cosines, ``Combined``, the thread order, the neighbours' share, the thread prior, the re-rank), what
    an expansion fed by the fused hits would run a second time: per round, the median over the questions
    in microseconds. (Candidates come from the two lists' depth, not from the table's size.)"""
    import time
    real = search._fuse
    took: list[float] = []

    def timed(*args: Any, **kwargs: Any) -> None:
        t0 = time.process_time()
        real(*args, **kwargs)
        took.append(time.process_time() - t0)

    medians = []
    search._fuse = timed  # type: ignore[assignment]
    try:
        for _ in range(rounds):
            took.clear()
            for q in queries:
                search.run(memories[q["conv_id"]].recall_index, q["query"], resource_id=q["conv_id"], thread_id=None,
                           top_k=10, mode="hybrid")
            medians.append(sorted(took)[len(took) // 2] * 1e6)
    finally:
        search._fuse = real  # type: ignore[assignment]
    return medians


def forward_index(mem: Any) -> dict[str, Any]:
    """A conversation's keyword index turned around (from the in-process copy's postings): each message's
    tokens with their body and context frequencies, each token's rows, the rows' sizes."""
    n_rows, n_tokens = mem._avg
    docs: dict[str, dict[str, list[float]]] = defaultdict(dict)
    df: dict[str, int] = {}
    size: dict[str, float] = {}
    for place, mid in enumerate(mem._mids):
        if mid:
            size[mid] = float(mem._sizes[place])
    for token, keys in mem._postings.items():
        rows = keys >> (keyword_memory._OFFSET_BITS + 1)
        ctx = (keys >> keyword_memory._OFFSET_BITS) & 1
        places = np.searchsorted(mem._rowids, rows)
        df[token] = len(np.unique(rows))
        for p, c in zip(places.tolist(), ctx.tolist()):
            mid = mem._mids[p]
            if mid:
                docs[mid].setdefault(token, [0.0, 0.0])[c] += 1.0
    post: dict[str, list[tuple[str, list[float]]]] = defaultdict(list)
    for mid, toks in docs.items():
        for token, f in toks.items():
            post[token].append((mid, f))
    return {"docs": docs, "df": df, "size": size, "rows": n_rows, "avgdl": n_tokens / n_rows, "post": post}


def ranked_hybrid(D: dict[str, Any], q: dict[str, Any], vec: list[tuple[str, float]] | None = None,
                  cos: dict[str, float] | None = None, depth: int | None = None, ceiling: float = 0.0,
                  share: float | None = None,
                  propagate: Callable[[dict[str, float]], dict[str, float]] | None = None,
                  kw: list[tuple[str, float]] | None = None, neighbour_share: float | None = None,
                  thread_share: float | None = None, kw_depth: int | None = None,
                  reshaped: int | None = None) -> list[str]:
    """The engine's hybrid ranking rebuilt from the kept lists (``Combined`` + ``rerank``); ``propagate``
    changes the fused scores before the re-rank. ``depth``: the vector list's (and the keyword list's
    unless ``kw_depth`` says otherwise); ``reshaped``: only the best that many candidates of the
    combination go on (the neighbours' share, the thread prior and the re-rank see no others)."""
    d = D["q"][q["query_id"]]
    fusion = hybrid.fusion_for(D["model_id"])
    depth = fusion.candidates if depth is None else depth
    share = fusion.keyword_share if share is None else share
    cos = cos if cos is not None else d["cos"]
    vec = (vec if vec is not None else d["v"])[:depth]
    kw = (kw if kw is not None else d["k"])[:depth if kw_depth is None else kw_depth]
    if ceiling > 0 and kw:
        idf_sum = sum(_idf(d["rows"], n or 0) for n in d["df"].values())
        scores = _with_ceiling(vec, kw, cos, share, max(max(s for _, s in kw), ceiling * idf_sum))
    else:
        R = lambda m, s: hybrid.Ranked(m, None, None, s)  # noqa: E731
        scores = hybrid.Combined([R(*x) for x in vec], [R(*x) for x in kw], cos,
                                 keyword_share=share).scores()
    if reshaped is not None:  # (``scores`` is best first)
        scores = dict(list(scores.items())[:reshaped])
    neighbour_share = hybrid.NEIGHBOUR_SHARE if neighbour_share is None else neighbour_share
    if neighbour_share > 0:  # (the engine's ``Combined.propagate``)
        scores = propagated(D, q, neighbour_share, neighbour_share)(scores)
    if propagate is not None:
        scores = propagate(scores)
    thread_share = hybrid.THREAD_SHARE if thread_share is None else thread_share
    if thread_share > 0:  # (the engine's ``Combined.thread_prior``)
        scores = thread_prior(D, q, thread_share, "max")(scores)
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


def prompt_score(D: dict[str, Any], ranked_of: Callable[[dict[str, Any]], list[str]], label: str, k: int,
                 skip: bool = False) -> float:
    """What the recall processor would show at top k with its default range (each hit with its previous and
    next message): the share of each question's evidence among those messages, and how many they are.
    ``skip``: a hit already shown (in an earlier hit's range) is passed over for the next one."""
    every, sizes = [], []
    by_conv: dict[str, list[float]] = defaultdict(list)
    for q in D["queries"]:
        order = D["order"][q["conv_id"]]
        prev_of = neighbours(D, q["conv_id"])
        shown: set[str] = set()
        hits = 0
        for m in ranked_of(q):
            if hits == k:
                break
            if skip and m in shown:
                continue
            hits += 1
            shown |= {x for x in (m, prev_of.get(m), order.get(m, (None,))[0]) if x}
        gold = set(q["gold"])
        r = len(gold & shown) / len(gold)
        every.append(r)
        sizes.append(len(shown))
        by_conv[q["conv_id"]].append(r)
    conv = [sum(v) / len(v) for _, v in sorted(by_conv.items())]
    total = sum(every) / len(every)
    print(f"{label:<44} {total:.4f} worst {min(conv):.3f} | {' '.join(f'{v:.3f}' for v in conv)} | "
          f"{sum(sizes) / len(sizes):.1f} messages shown", flush=True)
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


def rocchio(D: dict[str, Any], q: dict[str, Any], fed: list[str], m: int, alpha: float) -> np.ndarray:
    """Pseudo-relevance feedback in embedding space: ``normalise(q + alpha * mean of fed[:m]'s vectors)``
    (with q normalised), and every message's cosine to it."""
    ids, M, pos = D["mats"][q["conv_id"]]
    qv = np.asarray(D["q"][q["query_id"]]["qvec"], dtype=np.float32)
    qv = qv / np.linalg.norm(qv)
    rows = [pos[x] for x in fed[:m] if x in pos]
    if rows and alpha:
        qv = qv + alpha * M[rows].mean(axis=0)
        qv = qv / np.linalg.norm(qv)
    return M @ qv


def as_list(D: dict[str, Any], q: dict[str, Any], cs: np.ndarray, among: list[str] | None = None) -> list[tuple[str, float]]:
    """Cosines as a ranked list, best first (ties by id); ``among``: only these messages (a re-score of
    the candidates already listed, no new scan), the others after them in their old order."""
    ids, _, pos = D["mats"][q["conv_id"]]
    if among is None:
        return sorted(((ids[i], float(c)) for i, c in enumerate(cs.tolist())), key=lambda x: (-x[1], x[0]))
    head = sorted(((m, float(cs[pos[m]])) for m in among), key=lambda x: (-x[1], x[0]))
    seen = set(among)
    return head + [(m, float(cs[pos[m]])) for m, _ in D["q"][q["query_id"]]["v"] if m not in seen]


def neighbours(D: dict[str, Any], conv: str) -> dict[str, str]:
    """Each message's previous message in its thread (the inverse of ``thread_order``'s next)."""
    key = ("prev", conv)
    if key not in D:
        D[key] = {nxt: m for m, (nxt, _, _) in D["order"][conv].items() if nxt}
    return D[key]


def propagated(D: dict[str, Any], q: dict[str, Any], prev_share: float, next_share: float) -> Callable[[dict[str, float]], dict[str, float]]:
    """Fused scores plus a share of the previous and the next message's fused scores (0 when not a
    candidate), over 1 + the shares (the bound stays 1)."""
    order = D["order"][q["conv_id"]]
    prev_of = neighbours(D, q["conv_id"])

    def apply(scores: dict[str, float]) -> dict[str, float]:
        out = {}
        scale = 1.0 / (1.0 + prev_share + next_share)
        for m, s in scores.items():
            p = prev_of.get(m)
            n = order.get(m, (None,))[0]
            out[m] = (s + prev_share * scores.get(p, 0.0) + next_share * scores.get(n, 0.0)) * scale
        return out

    return apply


def propagated_variant(D: dict[str, Any], q: dict[str, Any], share: float, kind: str) -> Callable[[dict[str, float]], dict[str, float]]:
    """Other forms of the neighbours' share: ``edge`` (a thread's first or last message counts itself for
    the neighbour it lacks), ``max`` (the better neighbour only, over 1 + share)."""
    order = D["order"][q["conv_id"]]
    prev_of = neighbours(D, q["conv_id"])

    def apply(scores: dict[str, float]) -> dict[str, float]:
        out = {}
        for m, s in scores.items():
            p, n = prev_of.get(m), order.get(m, (None,))[0]
            sp, sn = scores.get(p, 0.0), scores.get(n, 0.0)
            if kind == "edge":
                sp, sn = (s if p is None else sp), (s if n is None else sn)
                out[m] = (s + share * (sp + sn)) / (1 + 2 * share)
            else:
                out[m] = (s + share * max(sp, sn)) / (1 + share)
        return out

    return apply


def rerank_form(D: dict[str, Any], q: dict[str, Any], prev_share: float, next_share: float) -> list[str]:
    """The re-rank with a previous-message share beside the next message's: candidates ordered by
    ``fused + next_share * next's fused + prev_share * previous's fused + date and speaker boosts``
    (``rerank``'s divisor is the same for every candidate of a query, so it orders nothing)."""
    d = D["q"][q["query_id"]]
    fusion = hybrid.fusion_for(D["model_id"])
    cos = d["cos"]
    R = lambda m, s: hybrid.Ranked(m, None, None, s)  # noqa: E731
    scores = hybrid.Combined([R(*x) for x in d["v"][:fusion.candidates]], [R(*x) for x in d["k"][:fusion.candidates]],
                             cos, keyword_share=fusion.keyword_share).scores()
    order = D["order"][q["conv_id"]]
    prev_of = neighbours(D, q["conv_id"])
    spans = query_dates(q["query"], search.today())
    named = SpeakerMatcher(q["query"])
    key = {}
    for m, s in scores.items():
        nxt, day, label = order.get(m, (None, None, None))
        k = s + next_share * scores.get(nxt, 0.0) + prev_share * scores.get(prev_of.get(m), 0.0)
        if spans and day and any(sp.contains(day) for sp in spans):
            k += hybrid.DATE_BOOST
        if label is not None and named(label):
            k += hybrid.SPEAKER_BOOST
        key[m] = k
    return sorted(key, key=lambda m: (-key[m], -cos.get(m, -2.0), m))


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


def prf_routes(D: dict[str, Any]) -> None:
    """Rocchio feedback in embedding space, from the best vector, keyword or fused hits."""
    depth = hybrid.fusion_for(D["model_id"]).candidates
    fused = {q["query_id"]: ranked_hybrid(D, q) for q in D["queries"]}
    qs = D["queries"]
    grid = [(m, a) for m in (2, 3, 5) for a in (0.3, 0.5, 1.0)]

    def lists(fed: Callable[[dict[str, Any]], list[str]], m: int, a: float) -> dict[str, np.ndarray]:
        return {q["query_id"]: rocchio(D, q, fed(q), m, a) for q in qs}

    top_v = lambda q: [x for x, _ in D["q"][q["query_id"]]["v"]]  # noqa: E731
    top_k = lambda q: [x for x, _ in D["q"][q["query_id"]]["k"]]  # noqa: E731
    top_f = lambda q: fused[q["query_id"]]  # noqa: E731

    def fed_hybrid(cs: dict[str, np.ndarray], label: str) -> None:
        """Hybrid with the fed vector list: every message re-scored, then only the candidates."""
        lv = {q["query_id"]: as_list(D, q, cs[q["query_id"]]) for q in qs}
        score(D, lambda q: ranked_hybrid(D, q, vec=lv[q["query_id"]], cos=dict(lv[q["query_id"]])), f"{label}: hybrid")
        lc = {q["query_id"]: as_list(D, q, cs[q["query_id"]], top_v(q)[:depth]) for q in qs}
        score(D, lambda q: ranked_hybrid(D, q, vec=lc[q["query_id"]], cos=dict(lc[q["query_id"]])),
              f"{label}: hybrid, candidates re-scored")

    for m, a in grid:
        cs = lists(top_v, m, a)
        score(D, lambda q: [x for x, _ in as_list(D, q, cs[q["query_id"]])], f"prf vector<-vector m{m} a{a}: vector")
        score(D, lambda q: [x for x, _ in as_list(D, q, cs[q["query_id"]], top_v(q)[:100])],
              f"prf vector<-vector m{m} a{a}: vector, top 100 re-scored")
    for m, a in grid:
        cs = lists(top_k, m, a)
        score(D, lambda q: [x for x, _ in as_list(D, q, cs[q["query_id"]])], f"prf vector<-keyword m{m} a{a}: vector")
        fed_hybrid(cs, f"prf vector<-keyword m{m} a{a}")
    for m, a in grid:
        fed_hybrid(lists(top_f, m, a), f"prf vector<-fused m{m} a{a}")


def thread_prior(D: dict[str, Any], q: dict[str, Any], gamma: float, kind: str) -> Callable[[dict[str, float]], dict[str, float]]:
    """A thread-level prior: each candidate gains ``gamma`` times a summary of the other candidates of its
    thread (``max``: the best other one; ``top2``: the mean of the best two others; ``sum``: all others,
    capped at 1), over 1 + gamma. A session whose other turns match the query too is more likely to hold
    the answer than a lone match in an unrelated session."""
    thread_of = D.setdefault(("thread_of", q["conv_id"]), {m["id"]: m["session"] for m in D["by_conv"][q["conv_id"]]})

    def apply(scores: dict[str, float]) -> dict[str, float]:
        by_thread: dict[Any, list[float]] = defaultdict(list)
        for m, sc in scores.items():
            by_thread[thread_of.get(m)].append(sc)
        for v in by_thread.values():
            v.sort(reverse=True)
        out = {}
        for m, sc in scores.items():
            v = by_thread[thread_of.get(m)]
            others = list(v)
            others.remove(sc)
            if kind == "max":
                summary = others[0] if others else 0.0
            elif kind == "top2":
                summary = sum(others[:2]) / 2
            else:
                summary = min(sum(others), 1.0)
            out[m] = (sc + gamma * summary) / (1 + gamma)
        return out

    return apply


def asking_session(D: dict[str, Any], q: dict[str, Any], where: str) -> tuple[Any, set[str]]:
    """The session a question is asked from, and the messages its history window shows (its last 10):
    ``topical``: the session without evidence that holds the message most similar to the question (its
    cosine: the same for every route); ``evidence``: the session of the question's first evidence."""
    msgs = D["by_conv"][q["conv_id"]]
    session_of = {m["id"]: m["session"] for m in msgs}
    gold_sessions = {session_of.get(g) for g in q["gold"]}
    if where == "evidence":
        chosen = session_of.get(q["gold"][0])
    else:
        chosen = next((session_of[m] for m, _ in D["q"][q["query_id"]]["v"] if session_of.get(m) not in gold_sessions), None)
    window = [m["id"] for m in msgs if m["session"] == chosen][-10:]
    return chosen, set(window)


def asked_score(D: dict[str, Any], ranked_of: Callable[[dict[str, Any]], list[str]], label: str, where: str,
                k: int = 4) -> float:
    """What the prompt holds when the question is asked from inside a thread (``asking_session``): that
    thread's last 10 messages, plus the top k hits with their previous and next message (hits already in
    the window still take their place, as in the processor): the share of each question's evidence."""
    every: list[float] = []
    by_conv: dict[str, list[float]] = defaultdict(list)
    for q in D["queries"]:
        order = D["order"][q["conv_id"]]
        prev_of = neighbours(D, q["conv_id"])
        _, shown = asking_session(D, q, where)
        for m in ranked_of(q)[:k]:
            shown = shown | {x for x in (m, prev_of.get(m), order.get(m, (None,))[0]) if x}
        gold = set(q["gold"])
        r = len(gold & shown) / len(gold)
        every.append(r)
        by_conv[q["conv_id"]].append(r)
    conv = [sum(v) / len(v) for _, v in sorted(by_conv.items())]
    total = sum(every) / len(every)
    print(f"{label:<44} {total:.4f} worst {min(conv):.3f} | {' '.join(f'{v:.3f}' for v in conv)}", flush=True)
    return total


def expanded(D: dict[str, Any], q: dict[str, Any], fed: list[str], docs: int, terms: int, weight: float,
             kind: str = "rm", ctx: float = 0.5) -> list[tuple[str, float]]:
    """Pseudo-relevance expansion of the keyword list (RM3-like): the words of the best ``docs`` messages of
    ``fed`` (their own text, not the context column), less the query's and the very common ones
    (``keyword.COMMON_SHARE``), each weighted by ``kind``: ``rm`` the sum over those messages of its
    frequency over the message's length times the message's share of their BM25 scores, times its idf;
    ``idf`` how many of those messages hold it, times its idf. The best ``terms`` of them score every
    message by BM25 (weights relative to the best word's) and are added at ``weight`` to its keyword score."""
    d = D["q"][q["query_id"]]
    F = D["fwd"][q["conv_id"]]
    kw = dict(d["k"])
    N, avgdl, fdf, fdocs, fsize = F["rows"], F["avgdl"], F["df"], F["docs"], F["size"]
    top = [m for m in fed[:docs] if m in fdocs]
    total = sum(kw.get(m, 0.0) for m in top) or 1.0
    w: dict[str, float] = defaultdict(float)
    for m in top:
        toks = fdocs[m]
        length = sum(b for b, _ in toks.values()) or 1.0
        for t, (b, _) in toks.items():
            if b <= 0 or t in d["tokens"] or fdf[t] > keyword.COMMON_SHARE * N:
                continue
            w[t] += (b / length) * (kw.get(m, 0.0) / total) if kind == "rm" else 1.0
    for t in w:
        w[t] *= _idf(N, fdf[t])
    chosen = sorted(w.items(), key=lambda x: (-x[1], x[0]))[:terms]
    if not chosen or weight <= 0:
        return d["k"]
    best = chosen[0][1] or 1.0
    out = dict(kw)
    k1, b = keyword_memory._K1, keyword_memory._B
    for t, wt in chosen:
        idf = _idf(N, fdf[t]) * wt / best * weight
        for m, f in F["post"][t]:
            freq = f[0] + ctx * f[1]
            if freq <= 0:
                continue
            out[m] = out.get(m, 0.0) + idf * freq * (k1 + 1) / (freq + k1 * (1 - b + b * fsize[m] / avgdl))
    return sorted(out.items(), key=lambda x: (-x[1], x[0]))


def expand_routes(D: dict[str, Any]) -> None:
    qs = D["queries"]
    fused = {q["query_id"]: ranked_hybrid(D, q) for q in qs}
    fusion = hybrid.fusion_for(D["model_id"])
    R = lambda m, s: hybrid.Ranked(m, None, None, s)  # noqa: E731
    # ``head``: the two lists' combination alone (``Combined``, before the neighbours' share, the thread
    # prior and the re-rank), as a search has it once both lists are read
    head = {q["query_id"]: [m for _, _, m in hybrid.Combined(
        [R(*x) for x in D["q"][q["query_id"]]["v"][:fusion.candidates]],
        [R(*x) for x in D["q"][q["query_id"]]["k"][:fusion.candidates]], D["q"][q["query_id"]]["cos"],
        keyword_share=fusion.keyword_share).order] for q in qs}
    feeds = {"keyword": lambda q: [m for m, _ in D["q"][q["query_id"]]["k"]], "fused": lambda q: fused[q["query_id"]],
             "head": lambda q: head[q["query_id"]]}
    for feed in ("keyword", "fused", "head"):
        for kind in ("rm", "idf"):
            for docs in (3, 5, 10):
                for terms in (5, 10, 20):
                    for weight in (0.1, 0.2, 0.3, 0.5):
                        fed = feeds[feed]
                        lists = {q["query_id"]: expanded(D, q, fed(q), docs, terms, weight, kind) for q in qs}
                        tag = f"expand {feed} {kind} docs {docs} terms {terms} w {weight}"
                        if feed == "keyword":
                            score(D, lambda q: [m for m, _ in lists[q["query_id"]]], f"{tag}: keyword")
                        score(D, lambda q: ranked_hybrid(D, q, kw=lists[q["query_id"]]), f"{tag}: hybrid")


def expand_within_routes(D: dict[str, Any]) -> None:
    """The expansion scoring only the candidates the two lists already hold (no new candidate: no new cosine
    or thread order to read; what an expansion inside the fusion could do), fed by the hybrid ranking or the
    two lists' combination, ``idf`` weighting."""
    qs = D["queries"]
    fusion = hybrid.fusion_for(D["model_id"])
    R = lambda m, s: hybrid.Ranked(m, None, None, s)  # noqa: E731
    fused = {q["query_id"]: ranked_hybrid(D, q) for q in qs}
    head = {q["query_id"]: [m for _, _, m in hybrid.Combined(
        [R(*x) for x in D["q"][q["query_id"]]["v"][:fusion.candidates]],
        [R(*x) for x in D["q"][q["query_id"]]["k"][:fusion.candidates]], D["q"][q["query_id"]]["cos"],
        keyword_share=fusion.keyword_share).order] for q in qs}
    held = {q["query_id"]: {m for m, _ in D["q"][q["query_id"]]["v"][:fusion.candidates]}
            | {m for m, _ in D["q"][q["query_id"]]["k"][:fusion.candidates]} for q in qs}
    for feed, fed in (("fused", fused), ("head", head)):
        for docs in (3, 5):
            for weight in (0.1, 0.2, 0.3, 0.5):
                lists = {q["query_id"]: [(m, s) for m, s in expanded(D, q, fed[q["query_id"]], docs, 10, weight, "idf")
                                         if m in held[q["query_id"]]] for q in qs}
                score(D, lambda q: ranked_hybrid(D, q, kw=lists[q["query_id"]]),
                      f"expand within {feed} idf docs {docs} terms 10 w {weight}: hybrid")


def peak(scores: list[float], at: int = 10) -> float:
    """How peaked a ranked list is: (best - the at-th) / (best - the last), 0 to 1."""
    if len(scores) < 2:
        return 1.0
    span = scores[0] - scores[-1]
    return (scores[0] - scores[min(at, len(scores)) - 1]) / span if span > 1e-12 else 1.0


def peaked_routes(D: dict[str, Any]) -> None:
    """Fusion whose keyword share follows how peaked each list is: ``a' = a pk^g / (a pk^g + (1 - a) pv^g)``."""
    fusion = hybrid.fusion_for(D["model_id"])
    a, depth = fusion.keyword_share, fusion.candidates
    for at in (5, 10, 20):
        for g in (0.5, 1.0, 2.0):
            def share(q: dict[str, Any]) -> float:
                d = D["q"][q["query_id"]]
                pk = peak([s for _, s in d["k"][:depth]], at)
                pv = peak([s for _, s in d["v"][:depth]], at)
                num = a * pk ** g
                den = num + (1 - a) * pv ** g
                return num / den if den > 0 else a
            score(D, lambda q: ranked_hybrid(D, q, share=share(q)), f"peaked fusion at {at} g {g}")


def expansion_cost(rows: int = 10_000, runs: int = 7, number: int = 2000) -> None:
    """CPU time of the expansion step as the in-process keyword copy would run it at ``rows`` rows, in numpy
    (synthetic Zipf text as ``recall_speed.py`` writes; each row's tokens kept as a CSR forward index, each
    token's BM25 parts kept as ``KeywordMemory._parts_of`` keeps them): the words of 5 fed rows counted and
    weighted by idf, the best 10 (less the query's and the very common), their parts added to the first
    pass's per-row sums at a weight, and the scope's best 50 picked again."""
    import time
    rng = np.random.default_rng(0)
    V = 5000
    zipf = 1.0 / np.arange(1, V + 1) ** 1.1
    zipf /= zipf.sum()
    lens = rng.integers(8, 40, rows)
    per_row = [np.unique(rng.choice(V, n, p=zipf), return_counts=True) for n in lens]
    indptr = np.zeros(rows + 1, np.int64)
    indptr[1:] = np.cumsum([len(t) for t, _ in per_row])
    toks = np.concatenate([t for t, _ in per_row])
    cnts = np.concatenate([c for _, c in per_row]).astype(np.float64)
    df = np.bincount(toks, minlength=V)
    idf = np.log((rows - df + 0.5) / (df + 0.5))
    idf[idf <= 0] = 1e-6
    sizes = lens.astype(np.float64)
    by_tok = np.argsort(toks, kind="stable")
    row_of = np.repeat(np.arange(rows), np.diff(indptr))[by_tok]
    tf = cnts[by_tok]
    start = np.zeros(V + 1, np.int64)
    start[1:] = np.cumsum(df)
    parts = {}
    for t in range(V):
        r, f = row_of[start[t]:start[t + 1]], tf[start[t]:start[t + 1]]
        parts[t] = (r, idf[t] * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * sizes[r] / sizes.mean())))
    resources = np.zeros(rows, np.int64)
    first = rng.random(rows) * (rng.random(rows) < 0.15)  # the first pass's per-row sums
    query = {100, 200, 300}
    common = df > keyword.COMMON_SHARE * rows
    fed = np.argsort(-first)[:5]

    def step(terms: int = 10, weight: float = 0.2, limit: int = 50) -> np.ndarray:
        t, c = np.unique(toks[np.concatenate([np.arange(indptr[p], indptr[p + 1]) for p in fed])], return_counts=True)
        keep = ~common[t] & np.array([x not in query for x in t.tolist()], dtype=bool)
        t, c = t[keep], c[keep]
        w = c * idf[t]
        top = np.argsort(-w, kind="stable")[:terms]
        t, w = t[top], w[top] / w[top[0]] * weight
        at = np.concatenate([parts[x][0] for x in t.tolist()])
        ps = np.concatenate([parts[x][1] * y for x, y in zip(t.tolist(), w.tolist())])
        dense = first + np.bincount(at, weights=ps, minlength=rows)
        places = np.flatnonzero(dense > 0)
        places = places[resources[places] == 0]
        score = dense[places]
        best = np.flatnonzero(score >= np.partition(score, len(score) - limit)[len(score) - limit])
        return places[best[np.argsort(-score[best])]][:limit]

    for _ in range(200):
        step()
    took = []
    for _ in range(runs):
        t0 = time.process_time()
        for _ in range(number):
            step()
        took.append((time.process_time() - t0) / number * 1e6)
    print(f"expansion step at {rows} rows, CPU us per search, {runs} runs of {number}: "
          f"{' '.join(f'{x:.1f}' for x in took)} (best {min(took):.1f})", flush=True)

# --- the query's form: a question rewritten toward a statement (issue 20 item 2, session 24) ---------------

_WH = frozenset("what when where which who whom whose why how".split())
_AUX = frozenset("am is are was were be been do does did has have had will would shall should can could may might "
                 "must".split())
_HOW = frozenset("many much long often old far soon big large".split())  # "how many", "how long" ...
_PREP = frozenset("in on at for from to with by of about during after before since until".split())
_AUX_REACH = 5  # words between the wh-phrase and the inverted auxiliary ("what kind of music does ...")


def statement_form(query: str, keep_aux: bool = False) -> str:
    """A question in English turned toward the statement that answers it, by generic English grammar:
    the leading wh-phrase dropped ("when", "how many (times)", "in which"; "what's" with its clitic), then
    the inverted auxiliary within the next few words ("did", "is", "has", ...); a yes/no question loses
    its leading auxiliary; the final "?" goes. "When did Caroline go to the support group?" gives
    "Caroline go to the support group". Anything else (a statement, another language) comes back as is.
    ``keep_aux``: only the wh-phrase dropped (a neighbour of the rule, for the plateau check)."""
    words = query.split()
    low = [w.lower().rstrip("?!.,;:") for w in words]
    if not words or not all(c.isascii() for c in low[0]):
        return query
    i = 1 if len(words) > 1 and low[0] in _PREP and low[1] in _WH else 0
    head = low[i]
    if head.endswith("'s") and head[:-2] in _WH:  # "what's", "who's", "how's": the auxiliary goes with it
        rest = words[i + 1:]
    elif head in _WH:
        j = i + 1
        if head == "how" and j < len(words) and low[j] in _HOW:
            j += 1
            if low[j - 1] == "many" and j < len(words) and low[j] == "times":
                j += 1
        rest = words[j:]
        if not keep_aux:
            aux = next((k for k in range(j, min(j + _AUX_REACH + 1, len(words))) if low[k] in _AUX), None)
            if aux is not None:
                rest = words[j:aux] + words[aux + 1:]
    elif low[0] in _AUX and not keep_aux:
        rest = words[1:]
    else:
        return query
    if rest:
        rest[-1] = rest[-1].rstrip("?")
    out = " ".join(w for w in rest if w)
    return out if out else query


FORMS: dict[str, Callable[[str], str]] = {
    "statement": statement_form,
    "wh only": lambda t: statement_form(t, keep_aux=True),
}


def _unit(M: np.ndarray) -> np.ndarray:
    return M / np.linalg.norm(M, axis=-1, keepdims=True)


QUICK_SLOTS = ("question lower-cased",)


def form_routes(D: dict[str, Any], quick: bool = False) -> None:
    """The query's form: each question's vector from its statement form alone, from the two mixed
    (``normalise((1 - w) q + w r)``, one vector: a batch of 2 embedded, one scan), from the best of the two
    cosines (two scans), and from one text that puts the question in the passage's previous-message slot
    ("question\\nstatement", as a stored passage is "previous message\\nmessage"); the keyword list from
    the statement form; hybrid with each (the speaker and date steps still read the question).
    ``quick``: the statement form, ``QUICK_SLOTS`` and the lower-cased query's fusion grid only (no passage
    re-embedded: for e5, which embeds 20-45 texts a second on a quiet machine)."""
    qs = D["queries"]
    emb = D["embedder"]
    changed = [q for q in qs if statement_form(q["query"]) != q["query"]]
    print(f"statement form: {len(changed)} of {len(qs)} questions rewritten; e.g.")
    for q in changed[:: max(1, len(changed) // 6)][:6]:
        print(f"    {q['query']!r} -> {statement_form(q['query'])!r}")
    for t in ("卡罗琳什么时候去了支持小组？", "キャロラインはいつサポートグループに行きましたか？",
              "Caroline went to the support group", "Wann ging Caroline zur Gruppe?"):
        print(f"    unchanged: {t!r} -> {statement_form(t)!r}")
    ids_q = [q["query_id"] for q in qs]

    def vectors(texts: list[str], kind: str = "query") -> dict[str, np.ndarray]:
        return dict(zip(ids_q, _unit(np.asarray(emb.embed(texts, kind=kind), dtype=np.float32))))

    Q = vectors([q["query"] for q in qs])
    drift = max(float(np.abs(Q[q["query_id"]] - _unit(np.asarray(D["q"][q["query_id"]]["qvec"], dtype=np.float32))).max())
                for q in qs)
    print(f"the questions' vectors against the engine's: max |difference| {drift:.2e}")
    R = {name: vectors([f(q["query"]) for q in qs]) for name, f in FORMS.items() if not quick or name == "statement"}
    slot = vectors([f"{q['query']}\n{statement_form(q['query'])}" for q in qs]) if not quick else None
    slots = {label: vectors([form(q["query"]) for q in qs]) for label, form in [x for x in (
        ("question\\nquestion", lambda t: f"{t}\n{t}"), ("question question", lambda t: f"{t} {t}"),
        ("question\\nquestion\\nquestion", lambda t: f"{t}\n{t}\n{t}"), ("\\nquestion", lambda t: f"\n{t}"),
        ("statement\\nquestion", lambda t: f"{statement_form(t)}\n{t}"),
        ("statement\\nstatement", lambda t: f"{statement_form(t)}\n{statement_form(t)}"),
        ("question without '?'", lambda t: t.rstrip().rstrip("?")), ("question lower-cased", lambda t: t.lower()),
        ("question lower-cased, doubled", lambda t: f"{t.lower()}\n{t.lower()}"),
        ("statement lower-cased", lambda t: statement_form(t).lower()),
        ("question, first letter lower-cased", lambda t: t[:1].lower() + t[1:]),
        ("question, names lower-cased", lambda t: t[:1] + t[1:].lower())) if not quick or x[0] in QUICK_SLOTS]}
    passage_r = (vectors([statement_form(q["query"]) for q in qs], kind="passage")
                 if emb.kind_sensitive and not quick else None)

    def cos(q: dict[str, Any], v: np.ndarray) -> np.ndarray:
        return D["mats"][q["conv_id"]][1] @ v

    def route(label: str, cs_of: Callable[[dict[str, Any]], np.ndarray], kw_form: str | None = None) -> None:
        lists = {q["query_id"]: as_list(D, q, cs_of(q)) for q in qs}
        kw = (lambda q: D["q"][q["query_id"]]["k_form"][kw_form]) if kw_form else (lambda q: None)
        score(D, lambda q: [m for m, _ in lists[q["query_id"]]], f"{label}: vector")
        score(D, lambda q: ranked_hybrid(D, q, vec=lists[q["query_id"]], cos=dict(lists[q["query_id"]]), kw=kw(q)),
              f"{label}: hybrid" + (f" (keyword: {kw_form})" if kw_form else ""))

    route("form: question (as the engine)", lambda q: cos(q, Q[q["query_id"]]))
    for name in R:
        route(f"form: {name} alone", lambda q: cos(q, R[name][q["query_id"]]))
    for name in R:
        for w in (0.25, 0.33, 0.5, 0.67, 0.75):
            route(f"form: mix {name} w {w}", lambda q: cos(q, _unit((1 - w) * Q[q["query_id"]] + w * R[name][q["query_id"]])))
        route(f"form: max(question, {name})", lambda q: np.maximum(cos(q, Q[q["query_id"]]), cos(q, R[name][q["query_id"]])))
    if slot is not None:
        route("form: slot 'question\\nstatement'", lambda q: cos(q, slot[q["query_id"]]))
    for label, vs in slots.items():
        route(f"form: slot '{label}'", lambda q: cos(q, vs[q["query_id"]]))
    if passage_r is not None:
        route("form: statement as a passage", lambda q: cos(q, passage_r[q["query_id"]]))
        route("form: mix question, statement as a passage w 0.5",
              lambda q: cos(q, _unit(Q[q["query_id"]] + passage_r[q["query_id"]])))
    lower = slots["question lower-cased"]
    grids = [("lower-cased", "question lower-cased")]
    if "question lower-cased, doubled" in slots:
        grids.append(("lower-cased, doubled", "question lower-cased, doubled"))
    for share in (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9):  # (a better vector list may earn a larger share)
        for depth in (30, 50, 80, 100, 120, 150):
            if quick and (share > 0.75 or depth not in (50, 80, 100, 150)):
                continue
            for name, slot_name in grids:
                low_lists = {q["query_id"]: as_list(D, q, cos(q, slots[slot_name][q["query_id"]])) for q in qs}
                score(D, lambda q: ranked_hybrid(D, q, vec=low_lists[q["query_id"]], cos=dict(low_lists[q["query_id"]]),
                                                 share=share, depth=depth),
                      f"form: {name}: hybrid, keyword share {share} depth {depth}")
            if not quick:
                score(D, lambda q: ranked_hybrid(D, q, share=share, depth=depth),
                      f"form: question (control): hybrid, keyword share {share} depth {depth}")
    if not quick:
        passage_routes(D, Q, lower)
    score(D, lambda q: [m for m, _ in D["q"][q["query_id"]]["k"]], "form: question: keyword")
    for name in FORMS:  # the keyword side: stop words drop most wh-words and auxiliaries already
        same = sum(D["q"][q["query_id"]]["terms_form"][name] == D["q"][q["query_id"]]["terms"] for q in qs)
        print(f"keyword terms of the {name} form equal the question's for {same} of {len(qs)} questions")
        score(D, lambda q: [m for m, _ in D["q"][q["query_id"]]["k_form"][name]], f"form: {name}: keyword")
        score(D, lambda q: ranked_hybrid(D, q, kw=D["q"][q["query_id"]]["k_form"][name]),
              f"form: {name}: hybrid (question's vector)")
        if name in R:
            route(f"form: mix {name} w 0.5", lambda q: cos(q, _unit(Q[q["query_id"]] + R[name][q["query_id"]])),
                  kw_form=name)


def passage_routes(D: dict[str, Any], Q: dict[str, np.ndarray], lower: dict[str, np.ndarray]) -> None:
    """The question as typed and lower-cased against passages re-embedded: lower-cased, or without the
    speaker labels LoCoMo's stored text starts with (as an agent's own messages are stored)."""
    qs = D["queries"]
    emb = D["embedder"]
    # The passages lower-cased too (a stored-format change: every vector re-embedded), for comparison.
    low_pass = {}
    for c, msgs in D["by_conv"].items():
        msgs = sorted(msgs, key=lambda m: (m["session"], m["seq"]))
        M = _unit(np.asarray(emb.embed([t.lower() for t in passage_texts("ctx", msgs)], kind="passage"), dtype=np.float32))
        low_pass[c] = ([m["id"] for m in msgs], M)
    # The passages without their speaker labels ("Caroline: "), as an agent's messages are stored: is the
    # lower-cased query's gain the speaker's name counting for less?
    bare = {}
    for c, msgs in D["by_conv"].items():
        msgs = sorted(msgs, key=lambda m: (m["session"], m["seq"]))
        texts = []
        for i, m in enumerate(msgs):
            own = m["text"] + (f' [image: {m["image_caption"]}]' if m.get("image_caption") else "")
            prev = msgs[i - 1] if i and msgs[i - 1]["session"] == m["session"] else None
            texts.append(f'{prev["text"]}\n{own}' if prev else own)
        bare[c] = ([m["id"] for m in msgs], _unit(np.asarray(emb.embed(texts, kind="passage"), dtype=np.float32)))
    for pname, mats, label, V in [(p, m, lb, v) for p, m in (("passages lower-cased", low_pass),
                                                            ("passages without speaker labels", bare))
                                  for lb, v in (("question", Q), ("question lower-cased", lower))]:
        lists = {}
        for q in qs:
            ids, M = mats[q["conv_id"]]
            cs = M @ V[q["query_id"]]
            lists[q["query_id"]] = [(ids[i], float(cs[i])) for i in np.argsort(-cs, kind="stable")]
        score(D, lambda q: [m for m, _ in lists[q["query_id"]]], f"form: {pname}, {label}: vector")
        score(D, lambda q: ranked_hybrid(D, q, vec=lists[q["query_id"]], cos=dict(lists[q["query_id"]])),
              f"form: {pname}, {label}: hybrid")


def form_cost(model: str, runs: int = 5) -> None:
    """Wall time of embedding a query (the model, no cache), one text against the question and its statement
    form in one call (a batch of 2) and in two calls, and of the rewrite and the lower-casing alone; median
    over the split's first 300 questions, per round."""
    import time
    data = rl.default_data()
    qs = [q["query"] for q in rl.load_jsonl(data / "locomo_public_queries.jsonl") if not q.get("adversarial")][:300]
    emb = rl.make_embedder(model, None)
    emb = getattr(emb, "inner", emb)  # (the model itself: a cache would answer every round after the first)
    emb.embed(["warm up"], kind="query")
    for _ in range(runs):
        t: dict[str, list[float]] = defaultdict(list)
        for text in qs:
            r = statement_form(text)
            for label, call in (("one", lambda: emb.embed([text], kind="query")),
                                ("batch of 2", lambda: emb.embed([text, r], kind="query")),
                                ("two calls", lambda: (emb.embed([text], kind="query"), emb.embed([r], kind="query"))),
                                ("rewrite only", lambda: statement_form(text)),
                                ("lower-cased only", lambda: text.lower())):
                t0 = time.perf_counter()
                call()
                t[label].append((time.perf_counter() - t0) * 1000)
        print(f"{model} query embedding, median ms over {len(qs)} questions: "
              + ", ".join(f"{k} {sorted(v)[len(v) // 2]:.3f}" for k, v in t.items()), flush=True)



# 80 questions written for ``vec_routes`` (session 25) without reading LoCoMo's: a question mean that is
# not the split's own.
GENERIC_QUESTIONS = (
    'What time does the meeting start tomorrow?',
    'Where did I put the spare keys?',
    'Who is in charge of the budget this quarter?',
    'Why did the build fail last night?',
    'How do I reset my password?',
    'How much does the subscription cost per month?',
    'How many people signed up for the workshop?',
    'When is the next dentist appointment?',
    'Which restaurant did we book for Friday?',
    'What is the name of my landlord?',
    'Did I already pay the electricity bill?',
    'Is the library open on Sundays?',
    "Can you remind me what my sister's address is?",
    'What was the error message from the database?',
    'What did the doctor say about my knee?',
    'Where are we going on holiday this summer?',
    'Who recommended that book to me?',
    'Why was the flight delayed?',
    'How long does it take to drive to the airport?',
    'How often should I water the tomato plants?',
    'When did we last update the server?',
    'Which version of Python does the project use?',
    "What are my kids' favourite foods?",
    'What did I tell you about my allergies?',
    'Do I have any plans for the weekend?',
    'Have we discussed the new marketing plan before?',
    'Was the package delivered yesterday?',
    'What is the wifi password at the office?',
    'Who was at the party on Saturday?',
    'How did the job interview go?',
    'What hobbies have I mentioned?',
    'Where does my brother work now?',
    "What's the deadline for the tax return?",
    'What was the score of the match?',
    'How old is my grandmother?',
    'Which of my friends lives in Berlin?',
    'What did we decide about the kitchen renovation?',
    'When does the lease end?',
    'Why did my manager cancel the review?',
    'How can I speed up the tests?',
    'What are the side effects of this medication?',
    'Who should I call if the heating breaks?',
    'What book am I reading at the moment?',
    'How much did I spend on groceries last week?',
    'Is there anything I need to buy for the trip?',
    'Did my colleague send the report?',
    'What was the first thing I asked you today?',
    'Where did we have dinner on my birthday?',
    'How far is the nearest pharmacy?',
    'What kind of music do I like?',
    'Which movies have I watched recently?',
    'When was the last time I went running?',
    'What pet do I have and what is its name?',
    'Who is my favourite author?',
    'What language am I learning?',
    'How is my project going?',
    'What did I say about moving to another city?',
    'Which bank do I use?',
    "What is my daughter's teacher called?",
    'Why do I feel tired in the afternoons?',
    'How many hours did I work on Monday?',
    'What should I cook tonight?',
    'What is the plan for the product launch?',
    'Can you summarise what we talked about yesterday?',
    'Where was I born?',
    'What car do I drive?',
    'Who fixed the leak in the bathroom?',
    "When is my partner's birthday?",
    'What gift did I buy for my mother?',
    'How do I configure the proxy settings?',
    'What happened at the conference last month?',
    'Did I mention any concerns about the contract?',
    'What sport did I play as a child?',
    'How did I meet my best friend?',
    'What are my goals for this year?',
    'Which doctor did I see in March?',
    'Is the concert still happening?',
    'What did the customer complain about?',
    'How much rent do I pay?',
    'What are the opening hours of the gym?',
)



def vec_routes(D: dict[str, Any]) -> None:
    """USE's vector-only list (issue 20 item 2, session 25): each route re-scores every message of the
    conversation from the kept row vectors (``D["mats"]``: one vector a message, the stored passage
    "previous message\ntext") and the engine's query vector (lower-cased with USE); vector recall@10 and
    the hybrid rebuilt with that list (``ranked_hybrid``, against "base")."""
    import re

    qs = D["queries"]
    convs = sorted(D["mats"])
    emb = D["embedder"]
    Q = {q["query_id"]: _unit(np.asarray(D["q"][q["query_id"]]["qvec"], dtype=np.float32)) for q in qs}
    rows = {c: D["mats"][c][1] for c in convs}

    def route(label: str, cs_of: Callable[[dict[str, Any]], np.ndarray], with_hybrid: bool = True) -> None:
        lists = {}
        for q in qs:
            ids = D["mats"][q["conv_id"]][0]
            cs = cs_of(q)
            lists[q["query_id"]] = [(ids[i], float(cs[i])) for i in np.argsort(-cs, kind="stable")]
        score(D, lambda q: [m for m, _ in lists[q["query_id"]]], f"vec: {label}: vector")
        if with_hybrid:
            score(D, lambda q: ranked_hybrid(D, q, vec=lists[q["query_id"]], cos=dict(lists[q["query_id"]])),
                  f"vec: {label}: hybrid")

    raw = lambda q: rows[q["conv_id"]] @ Q[q["query_id"]]  # noqa: E731
    route("as stored (control)", raw)
    # Centring: the corpus mean subtracted from the passages (and the query), both re-normalised.
    every = np.concatenate([rows[c] for c in convs])
    means = {"conversation": {c: rows[c].mean(0) for c in convs}, "all": {c: every.mean(0) for c in convs},
             "other conversations": {c: np.concatenate([rows[o] for o in convs if o != c]).mean(0) for c in convs}}
    print(f"vec: the mean row vector's norm {np.linalg.norm(every.mean(0)):.3f} (mean cosine between rows "
          f"{float(np.linalg.norm(every.mean(0))) ** 2:.3f})")
    for name, mu in means.items():
        for a in (0.5, 1.0):
            for qside in (False, True):
                route(f"centred, {name} mean x{a}, query {'centred too' if qside else 'as is'}",
                      lambda q: _unit(rows[q["conv_id"]] - a * mu[q["conv_id"]])
                      @ _unit(Q[q["query_id"]] - (a * mu[q["conv_id"]] if qside else 0)), with_hybrid=a == 1.0)
    # The mean question subtracted from the query: the split's other conversations' questions (a lab
    # figure: fitted to LoCoMo's questions), and 80 questions written apart from the split.
    of = {q["query_id"]: q["conv_id"] for q in qs}
    mq = {c: np.stack([Q[k] for k in Q if of[k] != c]).mean(0) for c in convs}
    G = _unit(np.asarray(emb.embed([t.lower() for t in GENERIC_QUESTIONS], kind="query"), dtype=np.float32)).mean(0)
    print(f"vec: the written questions' mean against the split's: cosine {float(_unit(G) @ _unit(mq[convs[0]])):.3f}")
    for b in (0.25, 0.5, 0.75, 1.0, 1.25):
        route(f"query - {b} x the other conversations' question mean",
              lambda q: rows[q["conv_id"]] @ _unit(Q[q["query_id"]] - b * mq[q["conv_id"]]), with_hybrid=b in (0.5, 1.0))
        route(f"query - {b} x the written questions' mean",
              lambda q: rows[q["conv_id"]] @ _unit(Q[q["query_id"]] - b * G), with_hybrid=b in (0.5, 1.0))
    # Per thread (LoCoMo: a session): the thread's mean cosine subtracted, or each thread's z-score.
    thread = {}
    for c in convs:
        sess = {m["id"]: m["session"] for m in D["by_conv"][c]}
        thread[c] = np.unique([sess[m] for m in D["mats"][c][0]], return_inverse=True)[1]

    def per_thread(cs: np.ndarray, c: str, g: float | None) -> np.ndarray:
        t = thread[c]
        k = int(t.max()) + 1
        n = np.bincount(t, minlength=k)
        mean = np.bincount(t, cs, k) / n
        if g is not None:
            return cs - g * mean[t]
        sd = np.sqrt(np.bincount(t, (cs - mean[t]) ** 2, k) / n)
        return (cs - mean[t]) / np.maximum(sd[t], 1e-3)

    for g in (0.25, 0.5, 1.0):
        route(f"thread's mean cosine x{g} subtracted", lambda q: per_thread(raw(q), q["conv_id"], g), with_hybrid=g == 0.5)
    route("thread z-score", lambda q: per_thread(raw(q), q["conv_id"], None), with_hybrid=False)
    # Hubness (CSLS): a passage's mean cosine to its k nearest other passages, a share of it subtracted.
    for k in (5, 10, 30):
        hub = {}
        for c in convs:
            S = rows[c] @ rows[c].T
            np.fill_diagonal(S, -1.0)
            hub[c] = np.sort(S, axis=1)[:, -k:].mean(1)
        for g in (0.25, 0.5, 1.0):
            route(f"hubness k {k} x{g} subtracted", lambda q: raw(q) - g * hub[q["conv_id"]], with_hybrid=(k, g) == (10, 0.5))
    # Neighbour smoothing: + lambda x the next (whose passage holds this message as its context) and / or
    # the previous message's cosine in the same thread (a thread's end adds nothing), over 1 + the lambdas.
    nxt, prv = {}, {}
    for c in convs:
        ids, _, idx = D["mats"][c]
        n = np.full(len(ids), -1)
        p = np.full(len(ids), -1)
        for i, m in enumerate(ids):
            x = D["order"][c].get(m, (None,))[0]
            if x and x in idx:
                n[i], p[idx[x]] = idx[x], i
        nxt[c], prv[c] = n, p

    def smooth(cs: np.ndarray, c: str, ln: float, lp: float = 0.0) -> np.ndarray:
        out = cs + ln * np.where(nxt[c] >= 0, cs[np.maximum(nxt[c], 0)], 0.0)
        out += lp * np.where(prv[c] >= 0, cs[np.maximum(prv[c], 0)], 0.0)
        return out / (1.0 + ln + lp)

    for ln, lp in ((0.2, 0), (0.4, 0), (0.6, 0), (0.8, 0), (1.0, 0), (0, 0.2), (0, 0.4), (0.2, 0.2), (0.4, 0.2),
                   (0.4, 0.4), (0.6, 0.3), (0.4, -0.1), (0.4, -0.2), (0.6, -0.1), (0.6, -0.2)):
        route(f"smoothed, next {ln} previous {lp}", lambda q: smooth(raw(q), q["conv_id"], ln, lp),
              with_hybrid=(ln, lp) in ((0.4, 0), (0.6, 0), (0.4, 0.2)))
    for ln, l2 in ((0.4, 0.1), (0.4, 0.2), (0.6, 0.1)):  # (+ the next message's next)
        route(f"smoothed, next {ln} and the one after it {l2}",
              lambda q: (lambda cs, n: cs + ln * np.where(n >= 0, cs[np.maximum(n, 0)], 0.0)
                         + l2 * np.where((n >= 0) & (nxt[q["conv_id"]][np.maximum(n, 0)] >= 0),
                                         cs[np.maximum(nxt[q["conv_id"]][np.maximum(n, 0)], 0)], 0.0))(raw(q), nxt[q["conv_id"]]),
              with_hybrid=False)
    # The query in pieces: split at ", " and " and " (141 of 760 questions), each piece embedded as the
    # query is (lower-cased); the whole query's cosine mixed with the pieces' mean or best.
    splitq = re.compile(r",\s+|\s+and\s+")
    qparts = {q["query_id"]: [x for x in splitq.split(q["query"].strip().lower()) if len(x.split()) > 1] for q in qs}
    many = [k for k, v in qparts.items() if len(v) > 1]
    flat = [t for k in many for t in qparts[k]]
    got = _unit(np.asarray(emb.embed(flat, kind="query"), dtype=np.float32)) if flat else np.zeros((0, 1))
    qpiece, off = {}, 0
    for k in many:
        qpiece[k] = got[off: off + len(qparts[k])]
        off += len(qparts[k])
    print(f"vec: {len(many)} of {len(qs)} questions in two or more pieces")

    def query_pieces(q: dict[str, Any], kind: str, w: float) -> np.ndarray:
        cs = raw(q)
        if q["query_id"] not in qpiece:
            return cs
        pc = rows[q["conv_id"]] @ qpiece[q["query_id"]].T
        return (1 - w) * cs + w * (pc.mean(1) if kind == "mean" else pc.max(1))

    for kind in ("mean", "max"):
        for w in (0.25, 0.5):
            route(f"query pieces ({kind}) x{w}", lambda q: query_pieces(q, kind, w), with_hybrid=w == 0.5)
    # Passage text variants, re-embedded: the image caption left out, or on its own line after the text.
    for variant in ("no caption", "caption on its own line"):
        mats = {}
        for c in convs:
            msgs = {m["id"]: m for m in D["by_conv"][c]}

            def text(m: dict[str, Any]) -> str:
                own = f'{m["speaker"]}: {m["text"]}'
                if m.get("image_caption") and variant != "no caption":
                    own += f'\n[image: {m["image_caption"]}]'
                return own

            texts = []
            for mid in D["mats"][c][0]:
                m = msgs[mid]
                prev = [x for x in D["by_conv"][c] if x["session"] == m["session"] and x["seq"] < m["seq"]]
                before = max(prev, key=lambda x: x["seq"]) if prev else None
                texts.append(f"{text(before)}\n{text(m)}" if before else text(m))
            mats[c] = _unit(np.asarray(emb.embed(texts, kind="passage"), dtype=np.float32))
        route(f"passages re-embedded, {variant}", lambda q: mats[q["conv_id"]] @ Q[q["query_id"]])
    # The message in pieces: its sentences (split after . ! ?), or its clauses (a sentence of more than 12
    # words also split at ", ", "; " and " - ", parts of 3 words or more), and its image caption, each
    # embedded as "speaker: piece" (no context), for messages of two pieces or more; the best piece's
    # cosine (or a soft maximum over the pieces: t log mean exp(cosine / t)).
    sentences = re.compile(r"(?<=[.!?])\s+")

    def split(text: str, clauses: bool) -> list[str]:
        out = []
        for s in (x for x in sentences.split(text.strip()) if x):
            if clauses and len(s.split()) > 12:
                out += [y for y in re.split(r"[,;]\s+|\s+-\s+", s) if len(y.split()) >= 3]
            else:
                out.append(s)
        return out

    def embedded_pieces(clauses: bool) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        got: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for c in convs:
            msgs = {m["id"]: m for m in D["by_conv"][c]}
            at: list[int] = []
            texts: list[str] = []
            for i, mid in enumerate(D["mats"][c][0]):
                m = msgs[mid]
                parts = split(m["text"], clauses)
                if m.get("image_caption"):
                    parts.append(f'[image: {m["image_caption"]}]')
                if len(parts) > 1:
                    at += [i] * len(parts)
                    texts += [f'{m["speaker"]}: {s}' for s in parts]
            got[c] = (np.array(at), _unit(np.asarray(emb.embed(texts, kind="passage"), dtype=np.float32)))
        print(f"vec: {'clauses' if clauses else 'sentences'}: {sum(len(a) for a, _ in got.values())} pieces for "
              f"{sum(len(np.unique(a)) for a, _ in got.values())} of {len(every)} messages")
        return got

    def best_piece(q: dict[str, Any], pieces: dict[str, tuple[np.ndarray, np.ndarray]], t: float = 0.0) -> np.ndarray:
        at, V = pieces[q["conv_id"]]
        pc = V @ Q[q["query_id"]]
        best = np.full(len(rows[q["conv_id"]]), -2.0)
        np.maximum.at(best, at, pc)
        if t > 0:  # (the soft maximum, from the best piece down)
            total, n = np.zeros(len(best)), np.zeros(len(best))
            np.add.at(total, at, np.exp((pc - best[at]) / t))
            np.add.at(n, at, 1.0)
            best = np.where(n > 0, best + t * np.log(np.maximum(total, 1e-30) / np.maximum(n, 1.0)), -2.0)
        return best

    def mixed(q: dict[str, Any], pieces: dict[str, tuple[np.ndarray, np.ndarray]], w: float, top: int | None = None,
              t: float = 0.0) -> np.ndarray:
        cs, best = raw(q), best_piece(q, pieces, t)
        out = np.where(best > -2, (1 - w) * cs + w * best, cs) if w < 1 else np.maximum(cs, best)
        if top is None:
            return out
        keep = np.argsort(-cs, kind="stable")[:top]  # only the passage list's best re-scored, the rest after them
        cut = cs - 2.0
        cut[keep] = out[keep]
        return cut

    for name, P in (("sentences", embedded_pieces(False)), ("clauses", embedded_pieces(True))):
        route(f"{name}: the better of passage and best piece", lambda q: mixed(q, P, 1.0))
        for w in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7):
            route(f"{name}: passage x{1 - w:.1f} + best piece x{w}", lambda q: mixed(q, P, w), with_hybrid=w in (0.3, 0.5))
        for t in (0.02, 0.05, 0.1):
            for w in (0.3, 0.5):
                route(f"{name}: passage x{1 - w:.1f} + soft maximum (t {t}) x{w}", lambda q: mixed(q, P, w, t=t),
                      with_hybrid=False)
        for top in (30, 50, 100, 200):  # (vector only: the scores below the cut are not cosines for the fusion)
            route(f"{name} x0.5, only the passage list's best {top} re-scored", lambda q: mixed(q, P, 0.5, top),
                  with_hybrid=False)
        for w in (0.3, 0.5):
            for ln in (0.2, 0.4, 0.6):
                route(f"{name} x{w} then smoothed, next {ln}", lambda q: smooth(mixed(q, P, w), q["conv_id"], ln),
                      with_hybrid=ln in (0.2, 0.4))


def vec_cost(rows: int = 10_000, runs: int = 7, number: int = 2000) -> None:
    """CPU time at 10k rows (numpy, USE's 512 dimensions, synthetic vectors) of the steps ``vec_routes``'
    two routes add to a vector scan that already has every row's cosine: neighbour smoothing with a kept
    next-row array (one gather and a masked add), and the best piece's cosine for the scan's best 100 rows
    from a kept piece matrix (3.2 pieces a message, LoCoMo's mean: their rows gathered, one product, the
    maximum per message); the scan's own product for scale. Median per run, microseconds."""
    import time
    rng = np.random.default_rng(5)
    M = _unit(rng.standard_normal((rows, 512)).astype(np.float32))
    q = _unit(rng.standard_normal(512).astype(np.float32))
    nxt = np.arange(1, rows + 1)
    nxt[rng.random(rows) < 0.05] = -1  # (a thread's last message: no next)
    nxt[-1] = -1
    has = nxt >= 0
    safe = np.where(has, nxt, 0)
    per = rng.integers(1, 6, rows)
    start = np.concatenate([[0], np.cumsum(per)])
    P = _unit(rng.standard_normal((int(start[-1]), 512)).astype(np.float32))
    cs = M @ q
    top = np.argpartition(-cs, 100)[:100]

    def scan() -> None:
        M @ q

    def smooth() -> None:
        cs + 0.4 * np.where(has, cs[safe], 0.0)

    def pieces() -> None:
        counts = per[top]
        first = np.cumsum(counts) - counts
        idx = np.repeat(start[top] - first, counts) + np.arange(int(counts.sum()))
        pc = P[idx] @ q
        np.maximum.reduceat(pc, first)

    for label, step in (("scan (M @ q)", scan), ("smoothing", smooth), ("best piece of the best 100", pieces)):
        took = []
        for _ in range(runs):
            with single_blas_thread():  # (as the engine's scan runs)
                t0 = time.process_time()
                for _ in range(number):
                    step()
                took.append((time.process_time() - t0) / number * 1e6)
        print(f"vec cost at {rows} rows: {label}: {sorted(took)[runs // 2]:.1f} us (runs {' '.join(f'{t:.1f}' for t in took)})",
              flush=True)


# --- session 26: routes at about today's embedding cost (``vec_units`` / ``vec_units_cost``) ---
_SENTENCES = r"(?<=[.!?])\s+"
CLAUSE_WORDS = 12  # a sentence longer than this is also split at ", ", "; ", " - " (session 25's rule)


def clause_pieces(text: str) -> list[str]:
    """A message's sentences, a sentence of more than ``CLAUSE_WORDS`` words cut at its clause marks
    (parts of 3 words or more): session 25's ``split(text, clauses=True)``."""
    import re
    out: list[str] = []
    for s in (x for x in re.split(_SENTENCES, text.strip()) if x):
        if len(s.split()) > CLAUSE_WORDS:
            out += [y for y in re.split(r"[,;]\s+|\s+-\s+", s) if len(y.split()) >= 3]
        else:
            out.append(s)
    return out


def piece_texts(m: dict[str, Any], min_words: int = 0, cap: int | None = None, speaker: bool = True) -> list[str]:
    """What a message would be embedded as besides (or instead of) its whole text: "speaker: piece"
    for each clause piece and its image caption, when there are two or more and the message has more
    than ``min_words`` words; more than ``cap`` pieces are joined into ``cap`` runs of neighbouring
    pieces (the text stays whole, fewer texts are embedded); ``speaker`` False: the piece alone."""
    if len(m["text"].split()) <= min_words:
        return []
    parts = clause_pieces(m["text"])
    if m.get("image_caption"):
        parts.append(f'[image: {m["image_caption"]}]')
    if len(parts) < 2:
        return []
    if cap is not None and len(parts) > cap:
        cuts = np.linspace(0, len(parts), cap + 1).round().astype(int)
        parts = [" ".join(parts[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]
    return [f'{m["speaker"]}: {p}' if speaker else p for p in parts]


def unit_texts(by_conv: dict[str, list[dict[str, Any]]], ids_of: dict[str, list[str]], what: str,
               min_words: int = 0, cap: int | None = None, speaker: bool = True) -> list[str]:
    """Every text a route embeds for the split's messages (in ``ids_of``'s order): ``ctx`` (today: the
    previous message's stored text + its own, ``passage_text``), ``own`` (its stored text alone),
    ``own+pieces``, ``pieces|own`` (the pieces where there are two or more, else the stored text)."""
    from core.recall.text import passage_text
    out: list[str] = []
    for c in sorted(ids_of):
        msgs = {m["id"]: m for m in by_conv[c]}
        prev: dict[str, str] = {}
        for s in {m["session"] for m in by_conv[c]}:
            rows = sorted((m for m in by_conv[c] if m["session"] == s), key=lambda m: m["seq"])
            prev.update({b["id"]: a["id"] for a, b in zip(rows, rows[1:])})
        for mid in ids_of[c]:
            m = msgs[mid]
            own = rl.stored_text(m)
            pieces = piece_texts(m, min_words, cap, speaker) if "pieces" in what else []
            if what == "ctx":
                out.append(passage_text(rl.stored_text(msgs[prev[mid]]) if mid in prev else "", own))
            elif what == "pieces|own":
                out += pieces or [passage_text("", own)]
            else:
                out += [passage_text("", own)] + pieces
    return out


def vec_units(D: dict[str, Any], top_only: bool = False) -> None:
    """USE's vector-only list from what costs about today's embedding (issue 20 item 2, session 26).
    Per message: ``own`` (its stored text alone), its clause pieces (``piece_texts``), and the stored
    passage's vector approximated from vectors already computed (``normalise(own + a x previous
    message's own)``, no second embedding of "previous\\ntext"); a message's score is its whole vector's
    cosine (the stored passage, ``own`` or the approximation) x(1-w) + its best piece's x w (messages
    without pieces: the whole cosine), then optionally + lam x the next message's score over 1 + lam.
    Vector recall@10 and the hybrid rebuilt with the route's list (``ranked_hybrid``)."""
    qs = D["queries"]
    convs = sorted(D["mats"])
    emb = D["embedder"]
    Q = {q["query_id"]: _unit(np.asarray(D["q"][q["query_id"]]["qvec"], dtype=np.float32)) for q in qs}
    ids_of = {c: D["mats"][c][0] for c in convs}
    stored = {c: D["mats"][c][1] for c in convs}
    msgs = {c: {m["id"]: m for m in D["by_conv"][c]} for c in convs}
    nxt, prv = {}, {}
    for c in convs:
        ids, _, idx = D["mats"][c]
        n, p = np.full(len(ids), -1), np.full(len(ids), -1)
        for i, m in enumerate(ids):
            x = D["order"][c].get(m, (None,))[0]
            if x and x in idx:
                n[i], p[idx[x]] = idx[x], i
        nxt[c], prv[c] = n, p
    own = {c: _unit(np.asarray(emb.embed(unit_texts(D["by_conv"], {c: ids_of[c]}, "own"), kind="passage"),
                               dtype=np.float32)) for c in convs}

    def pieces_of(min_words: int = 0, cap: int | None = None, speaker: bool = True) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        key = ("units pieces", min_words, cap, speaker)
        if key not in D:
            got = {}
            for c in convs:
                at: list[int] = []
                texts: list[str] = []
                for i, mid in enumerate(ids_of[c]):
                    t = piece_texts(msgs[c][mid], min_words, cap, speaker)
                    at += [i] * len(t)
                    texts += t
                V = _unit(np.asarray(emb.embed(texts, kind="passage"), dtype=np.float32)) if texts else np.zeros((0, 512), np.float32)
                got[c] = (np.array(at, dtype=int), V)
            D[key] = got
        return D[key]

    def from_pieces(P: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
        """Each message's own vector, for a message with pieces their normalised sum (not embedded whole)."""
        out = {}
        for c in convs:
            at, V = P[c]
            u = own[c].copy()
            if len(at):
                s = np.zeros_like(u)
                np.add.at(s, at, V)
                has = np.bincount(at, minlength=len(u)) > 0
                u[has] = _unit(s[has])
            out[c] = u
        return out

    def approx(u: dict[str, np.ndarray], a: float) -> dict[str, np.ndarray]:
        return {c: _unit(u[c] + a * np.where((prv[c] >= 0)[:, None], u[c][np.maximum(prv[c], 0)], 0.0)) for c in convs}

    def scorer(whole: dict[str, np.ndarray], P: dict[str, tuple[np.ndarray, np.ndarray]] | None, w: float,
               lam: float = 0.0) -> Callable[[dict[str, Any]], np.ndarray]:
        def cs_of(q: dict[str, Any]) -> np.ndarray:
            c, v = q["conv_id"], Q[q["query_id"]]
            cs = whole[c] @ v
            if P is not None and len(P[c][0]):
                at, V = P[c]
                best = np.full(len(cs), -2.0, dtype=np.float32)
                np.maximum.at(best, at, V @ v)
                cs = np.where(best > -2, (1 - w) * cs + w * best, cs) if w < 1 else np.maximum(cs, best)
            if lam:
                cs = (cs + lam * np.where(nxt[c] >= 0, cs[np.maximum(nxt[c], 0)], 0.0)) / (1 + lam)
            return cs
        return cs_of

    def route(label: str, cs_of: Callable[[dict[str, Any]], np.ndarray], hybrid_of: Any = "same") -> None:
        lists = {}
        for q in qs:
            ids = ids_of[q["conv_id"]]
            cs = cs_of(q)
            lists[q["query_id"]] = [(ids[i], float(cs[i])) for i in np.argsort(-cs, kind="stable")]
        score(D, lambda q: [m for m, _ in lists[q["query_id"]]], f"units: {label}: vector")
        if hybrid_of is None:
            return
        if hybrid_of != "same":  # (the hybrid fed by another list: the route's whole vector alone)
            hl = {}
            for q in qs:
                ids = ids_of[q["conv_id"]]
                cs = hybrid_of(q)
                hl[q["query_id"]] = [(ids[i], float(cs[i])) for i in np.argsort(-cs, kind="stable")]
        else:
            hl = lists
        score(D, lambda q: ranked_hybrid(D, q, vec=hl[q["query_id"]], cos=dict(hl[q["query_id"]])),
              f"units: {label}: hybrid{'' if hybrid_of == 'same' else ' (whole vector list)'}")

    def unit_rows_top(whole: dict[str, np.ndarray], P: dict[str, tuple[np.ndarray, np.ndarray]], w: float,
                      top: int) -> Callable[[dict[str, Any]], np.ndarray]:
        """Two steps: the whole vectors' scan (one row a message), then only its best ``top`` messages'
        unit rows (``unit_rows_of``) read and scored; those first, the rest after them in the scan's order."""
        R = {c: _unit((1 - w) * whole[c][P[c][0]] + w * P[c][1]) for c in convs}

        def cs_of(q: dict[str, Any]) -> np.ndarray:
            c, v = q["conv_id"], Q[q["query_id"]]
            cs = whole[c] @ v
            keep = np.argsort(-cs, kind="stable")[:top]
            sel = np.isin(P[c][0], keep)
            best = cs.copy()
            best[P[c][0]] = -9.0  # (a message with pieces has only its unit rows, as in ``unit_rows_of``)
            np.maximum.at(best, P[c][0][sel], R[c][sel] @ v)
            out = cs - 4.0
            out[keep] = best[keep]
            return out
        return cs_of

    if top_only:
        A = approx(own, 1.0)
        for n in (12, 16):
            for top in (50, 100, 200, 400):
                route(f"unit rows (> {n} words), only the whole vectors' best {top} re-scored",
                      unit_rows_top(A, pieces_of(n), 0.5, top), hybrid_of="same" if top in (100, 200) else None)
        return
    # The rule for a (no questions): the a whose approximation is nearest the stored passage vectors.
    for a in (0.25, 0.5, 0.75, 1.0, 1.25, 1.5):
        A = approx(own, a)
        has = np.concatenate([prv[c] >= 0 for c in convs])
        near = np.concatenate([np.sum(A[c] * stored[c], 1) for c in convs])[has]
        print(f"units: approx a {a}: cosine to the stored passage vector, mean {near.mean():.4f} median "
              f"{np.median(near):.4f} (messages with a previous one, {has.sum()})")
    P0 = pieces_of()
    print(f"units: clause pieces: {sum(len(P0[c][0]) for c in convs)} for "
          f"{sum(len(np.unique(P0[c][0])) for c in convs)} of {sum(len(ids_of[c]) for c in convs)} messages")
    route("stored passage (control)", scorer(stored, None, 0))
    route("stored passage + pieces x0.5 (s25)", scorer(stored, P0, 0.5), hybrid_of=scorer(stored, None, 0))
    route("own alone", scorer(own, None, 0))
    for a in (0.5, 0.75, 1.0):
        route(f"approx passage a {a}", scorer(approx(own, a), None, 0))
    for w in (0.3, 0.4, 0.5, 0.6, 0.7):
        route(f"own + pieces x{w}", scorer(own, P0, w), hybrid_of=None if w != 0.5 else scorer(own, None, 0))
    A1 = {a: approx(own, a) for a in (0.5, 0.75, 1.0)}
    route("approx a 1.0 + pieces x0.5 (hybrid fed by it)", scorer(A1[1.0], P0, 0.5))
    route("own + pieces x0.5 (hybrid fed by it)", scorer(own, P0, 0.5))
    for a in (0.5, 0.75, 1.0):
        for w in (0.3, 0.4, 0.5, 0.6, 0.7):
            route(f"approx a {a} + pieces x{w}", scorer(A1[a], P0, w),
                  hybrid_of=None if w != 0.5 else scorer(A1[a], None, 0))
    # Pieces embedded, the whole message not (its own vector = the pieces' normalised sum).
    U = from_pieces(P0)
    for a in (0.5, 1.0):
        for w in (0.3, 0.5, 0.7):
            route(f"pieces|own, approx a {a} + pieces x{w}", scorer(approx(U, a), P0, w),
                  hybrid_of=None if w != 0.5 else scorer(approx(U, a), None, 0))
    # Pieces only for messages of more than N words; pieces capped at K.
    for n in (8, 12, 16, 20, 25, 30, 40):
        Pn = pieces_of(n)
        print(f"units: more than {n} words: {sum(len(Pn[c][0]) for c in convs)} pieces for "
              f"{sum(len(np.unique(Pn[c][0])) for c in convs)} messages")
        route(f"approx a 1.0 + pieces (> {n} words) x0.5", scorer(A1[1.0], Pn, 0.5),
              hybrid_of=None if n not in (12, 20) else scorer(A1[1.0], None, 0))
        route(f"own + pieces (> {n} words) x0.5", scorer(own, Pn, 0.5), hybrid_of=None)
    for k in (2, 3, 4):
        Pk = pieces_of(0, k)
        print(f"units: at most {k} pieces: {sum(len(Pk[c][0]) for c in convs)} pieces")
        route(f"approx a 1.0 + pieces (at most {k}, joined) x0.5", scorer(A1[1.0], Pk, 0.5), hybrid_of=None)
        route(f"own + pieces (at most {k}, joined) x0.5", scorer(own, Pk, 0.5), hybrid_of=None)
    # The next message's share.
    for lam in (0.1, 0.2, 0.3, 0.4):
        route(f"own, next share {lam}", scorer(own, None, 0, lam), hybrid_of=None)
        route(f"approx a 1.0, next share {lam}", scorer(A1[1.0], None, 0, lam), hybrid_of=None)
        route(f"own + pieces x0.5, next share {lam}", scorer(own, P0, 0.5, lam), hybrid_of=None)
        route(f"approx a 1.0 + pieces x0.5, next share {lam}", scorer(A1[1.0], P0, 0.5, lam),
              hybrid_of=None if lam != 0.2 else scorer(A1[1.0], None, 0))

    # Landing forms. The better of the whole vector and the best piece (the scans' best row as they are):
    route("approx a 1.0, the better of it and the best piece", scorer(A1[1.0], P0, 1.0))
    route("own, the better of it and the best piece", scorer(own, P0, 1.0), hybrid_of=None)
    # The mix as rows: row j of a message = (1-w) x whole + w x piece j (not re-normalised), so its best
    # row's inner product with the query is exactly (1-w) x whole cosine + w x best piece cosine.
    worst = 0.0
    for c in convs:
        at, V = P0[c]
        R = 0.5 * A1[1.0][c][at] + 0.5 * V
        for q in [q for q in qs if q["conv_id"] == c][:20]:
            v = Q[q["query_id"]]
            best = np.full(len(ids_of[c]), -9.0, dtype=np.float32)
            np.maximum.at(best, at, R @ v)
            want = scorer(A1[1.0], P0, 0.5)(q)
            got = np.where(best > -9, best, A1[1.0][c] @ v)
            worst = max(worst, float(np.abs(got - want).max()))
    print(f"units: mixed rows (whole x0.5 + piece x0.5), best row against the mixed score: max |difference| {worst:.2e}")
    # Both backends scan unit rows (the matrix scales rows on load; pgvector's <=> is a cosine), so the
    # mixed rows stored as they are would be re-normalised: a message's rows unit(whole + w/(1-w) x piece j)
    # and its best row, what the scans do today with several rows a message (Mastra's chunks).
    def unit_rows_of(whole: dict[str, np.ndarray], P: dict[str, tuple[np.ndarray, np.ndarray]],
                     w: float) -> Callable[[dict[str, Any]], np.ndarray]:
        R = {c: _unit((1 - w) * whole[c][P[c][0]] + w * P[c][1]) for c in convs}

        def cs_of(q: dict[str, Any]) -> np.ndarray:
            c, v = q["conv_id"], Q[q["query_id"]]
            best = np.full(len(ids_of[c]), -9.0, dtype=np.float32)
            np.maximum.at(best, P[c][0], R[c] @ v)
            return np.where(best > -9, best, whole[c] @ v)
        return cs_of

    for w in (0.4, 0.5, 0.6):
        route(f"unit rows: unit(approx a 1.0 x{1 - w:.1f} + piece x{w}), best row", unit_rows_of(A1[1.0], P0, w),
              hybrid_of="same" if w == 0.5 else None)
    for n in (8, 12, 16, 20, 25, 30, 40):
        route(f"unit rows: unit(approx a 1.0 + piece (> {n} words)), best row", unit_rows_of(A1[1.0], pieces_of(n), 0.5))
        if n in (12, 16):
            for w in (0.4, 0.6):
                route(f"unit rows: unit(approx a 1.0 x{1 - w:.1f} + piece (> {n} words) x{w}), best row",
                      unit_rows_of(A1[1.0], pieces_of(n), w), hybrid_of=None)
            for a in (0.75, 1.25):
                route(f"unit rows: unit(approx a {a} + piece (> {n} words)), best row",
                      unit_rows_of(approx(own, a), pieces_of(n), 0.5), hybrid_of=None)
            route(f"unit rows: unit(own + piece (> {n} words)), best row", unit_rows_of(own, pieces_of(n), 0.5), hybrid_of=None)
            for lam in (0.1, 0.2):
                route(f"unit rows (> {n} words), next share {lam}",
                      (lambda f, c_lam: lambda q: (lambda cs, c: (cs + c_lam * np.where(nxt[c] >= 0, cs[np.maximum(nxt[c], 0)], 0.0))
                                                   / (1 + c_lam))(f(q), q["conv_id"]))(unit_rows_of(A1[1.0], pieces_of(n), 0.5), lam),
                      hybrid_of=None)
    for n, k in ((12, 2), (12, 3), (12, 4)):
        route(f"unit rows: unit(approx a 1.0 + piece (> {n} words, at most {k})), best row",
              unit_rows_of(A1[1.0], pieces_of(n, k), 0.5), hybrid_of=None)
    route("unit rows: pieces|own, unit(approx a 1.0 + piece), best row", unit_rows_of(approx(U, 1.0), P0, 0.5))
    # The pieces-only form (whole approximated from its pieces) with the next message's share.
    for lam in (0.1, 0.2, 0.3):
        route(f"pieces|own, approx a 1.0 + pieces x0.5, next share {lam}", scorer(approx(U, 1.0), P0, 0.5, lam),
              hybrid_of=None)
    route("pieces|own, approx a 1.0 + pieces x0.5 (hybrid fed by it)", scorer(approx(U, 1.0), P0, 0.5))
    for n in (16, 20, 25):
        route(f"approx a 1.0 + pieces (> {n} words) x0.5 (hybrid fed by it)", scorer(A1[1.0], pieces_of(n), 0.5))
        for w in (0.4, 0.6):
            route(f"approx a 1.0 + pieces (> {n} words) x{w}", scorer(A1[1.0], pieces_of(n), w), hybrid_of=None)
    # Pieces without the speaker label (fewer tokens).
    Pq = pieces_of(0, None, False)
    route("approx a 1.0 + pieces (no speaker) x0.5", scorer(A1[1.0], Pq, 0.5))
    route("pieces|own (no speaker), approx a 1.0 + pieces x0.5", scorer(approx(from_pieces(Pq), 1.0), Pq, 0.5))
    for n in (16, 20, 25):
        route(f"approx a 1.0 + pieces (> {n} words, no speaker) x0.5", scorer(A1[1.0], pieces_of(n, None, False), 0.5),
              hybrid_of=None if n != 20 else "same")


UNIT_COST_SETS = (("ctx", 0, None, True), ("own", 0, None, True), ("own+pieces", 0, None, True),
                  ("pieces|own", 0, None, True), ("own+pieces", 12, None, True), ("own+pieces", 16, None, True),
                  ("own+pieces", 20, None, True), ("own+pieces", 25, None, True), ("own+pieces", 30, None, True),
                  ("own+pieces", 0, 2, True), ("own+pieces", 0, None, False), ("own+pieces", 20, None, False),
                  ("pieces|own", 0, None, False))


def vec_units_cost(D: dict[str, Any] | None, rounds: int = 5, synthetic: int = 2000) -> None:
    """USE embedding cost of what each ``vec_units`` route embeds at save: LoCoMo's public messages and
    ``recall_speed``'s synthetic ones (12 Zipf words, one thread); one ``embed`` call per route (the raw
    local model, no cache), texts and tokens (the graph's own tokenizer), CPU seconds (process time,
    all threads) and wall; the routes alternated, ``rounds`` times, each round's order reversed."""
    import time
    from core.embedding import default_embedder
    from recall_speed import synthetic_messages

    model = default_embedder("use").inner
    model.embed(["warm up", "the batching graphs"])
    sets: dict[str, list[str]] = {}
    if D is not None:
        ids_of = {c: D["mats"][c][0] for c in D["mats"]}
        for what, n, k, sp in UNIT_COST_SETS:
            label = f"locomo {what}" + (f" >{n} words" if n else "") + (f" cap {k}" if k else "") + ("" if sp else " no speaker")
            sets[label] = unit_texts(D["by_conv"], ids_of, what, n, k, sp)
    rng = np.random.default_rng(1)
    syn = [{"id": m.id, "speaker": "user" if i % 2 == 0 else "assistant", "text": m.text, "session": 0, "seq": i}
           for i, m in enumerate(synthetic_messages(synthetic, "t", "r", rng))]
    for what in ("ctx", "own", "own+pieces"):
        sets[f"synthetic {what}"] = unit_texts({"s": syn}, {"s": [m["id"] for m in syn]}, what)
    tokens = {k: sum(model.token_counts(v)) for k, v in sets.items()}
    took: dict[str, list[tuple[float, float]]] = defaultdict(list)
    names = list(sets)
    with single_blas_thread():
        for r in range(rounds):
            for k in (names if r % 2 == 0 else names[::-1]):
                wall, cpu = time.perf_counter(), time.process_time()
                model.embed(sets[k])
                took[k].append((time.process_time() - cpu, time.perf_counter() - wall))
                print(f"  round {r + 1} {k}: cpu {took[k][-1][0]:.2f} s wall {took[k][-1][1]:.2f} s", flush=True)
    import os
    print(f"load average after: {os.getloadavg()}")
    for group in ("locomo", "synthetic"):
        base = f"{group} ctx"
        if base not in sets:
            continue
        b_cpu = float(np.median([t[0] for t in took[base]]))
        for k in names:
            if not k.startswith(group):
                continue
            cpu = float(np.median([t[0] for t in took[k]]))
            print(f"units cost {k:<34} texts {len(sets[k]):>6} tokens {tokens[k]:>7} (x{tokens[k] / tokens[base]:.2f}) "
                  f"cpu median {cpu:.2f} s (x{cpu / b_cpu:.2f}; rounds {' '.join(f'{t[0]:.2f}' for t in took[k])}) "
                  f"wall {' '.join(f'{t[1]:.2f}' for t in took[k])}", flush=True)


def units_scan_cost(messages: int = 10_000, rows_per_message: float = 3.3, depth: int = 70, runs: int = 7,
                    number: int = 500) -> None:
    """What several unit rows a message (``vec_units``' "unit rows" form) would cost an exact vector scan at
    ``messages`` messages (USE's 512 dimensions, synthetic unit rows, one BLAS thread): today's one row a
    message (the product and the best ``depth``) against ``rows_per_message`` rows a message (the product
    over every row, the best ``4 x depth`` rows, each message's best kept until ``depth`` messages).
    Median per run, microseconds."""
    import time
    rng = np.random.default_rng(7)
    q = _unit(rng.standard_normal(512).astype(np.float32))
    one = _unit(rng.standard_normal((messages, 512)).astype(np.float32))
    n_rows = int(messages * rows_per_message)
    many = _unit(rng.standard_normal((n_rows, 512)).astype(np.float32))
    owner = np.sort(rng.integers(0, messages, n_rows))

    def scan_one() -> None:
        cs = one @ q
        top = np.argpartition(-cs, depth)[:depth]
        top[np.argsort(-cs[top])]

    def scan_many() -> None:
        cs = many @ q
        k = 4 * depth
        top = np.argpartition(-cs, k)[:k]
        top = top[np.argsort(-cs[top])]
        _, first = np.unique(owner[top], return_index=True)
        np.sort(first)[:depth]

    for label, step in (("one row a message", scan_one), (f"{rows_per_message} rows a message", scan_many)):
        took = []
        for _ in range(runs):
            with single_blas_thread():
                t0 = time.process_time()
                for _ in range(number):
                    step()
                took.append((time.process_time() - t0) / number * 1e6)
        print(f"units scan at {messages} messages: {label}: {sorted(took)[runs // 2]:.0f} us "
              f"(runs {' '.join(f'{t:.0f}' for t in took)})", flush=True)


def depth_routes(D: dict[str, Any]) -> None:
    """The cost side of the fusion (issue 20 items 2 and 4, session 24): separate depths for the vector
    and the keyword list, the keyword share, and only the best N of the combination reshaped and
    re-ranked, each against the engine's settings (``hybrid.fusion_for``)."""
    for share in (0.6, 0.65, 0.7, 0.75, 0.8):
        for vd in (50, 60, 70, 80, 90, 100, 120):
            for kd in (30, 40, 50, 60, 70, 80, 100):
                score(D, lambda q: ranked_hybrid(D, q, share=share, depth=vd, kw_depth=kd),
                      f"depth: share {share} vector {vd} keyword {kd}")
    for share in (0.7, 0.75, 0.8):
        for vd, kd in ((100, 100), (100, 50), (80, 50), (100, 60)):
            for n in (20, 30, 40, 60, 80):
                score(D, lambda q: ranked_hybrid(D, q, share=share, depth=vd, kw_depth=kd, reshaped=n),
                      f"depth: share {share} vector {vd} keyword {kd}, best {n} reshaped")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="use", help="use or e5")
    ap.add_argument("--passages", default="", help="comma-separated: ctx, own, ctx_date, ctx_next, ctx2 (re-embeds)")
    ap.add_argument("--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "memory-studio-embcache")
    ap.add_argument("--only", default="fusion,window,prf,propagate,bm25,prompt",
                    help="comma-separated sections: fusion, window, prf, propagate, bm25, prompt, variants, boosts, prev, thread, asked, "
                         "expand, within, peaked, form, depth, vec, vec_cost, units, units_cost, units_scan (alone: no LoCoMo pass), cost, form_cost (cost / vec_cost / form_cost alone: no LoCoMo pass) "
                         "(none: the engine, base and vector lines only)")
    ap.add_argument("--bm25", default="1.2:0.75:0.5,0.9:0.4:0.5,0.9:0.75:0.5,1.2:0.5:0.5,1.2:0.9:0.5,1.5:0.75:0.5,2.0:0.75:0.5,"
                    "1.2:0.75:0.25,1.2:0.75:1.0", help="k1:b:context weight settings of the bm25 section")
    ap.add_argument("--neighbour-share", type=float, default=None,
                    help="hybrid.NEIGHBOUR_SHARE for the engine and the rebuilt base (0: the engine before it)")
    ap.add_argument("--thread-share", type=float, default=None,
                    help="hybrid.THREAD_SHARE for the engine and the rebuilt base (0: the engine before it)")
    ap.add_argument("--fusion-before", action="store_true",
                    help="USE's fusion as before session 24 (a=.85, depth 50, the query embedded as typed): the "
                         "form section's routes against the engine they were measured on")
    ap.add_argument("--form-quick", action="store_true", help="the form section without re-embedded passages "
                    "and with fewer query forms (for e5)")
    args = ap.parse_args()
    if args.fusion_before:
        hybrid.MODEL_FUSION.pop("use-multilingual-v3-q", None)
    if args.neighbour_share is not None:
        hybrid.NEIGHBOUR_SHARE = args.neighbour_share
    if args.thread_share is not None:
        hybrid.THREAD_SHARE = args.thread_share
    only = set(args.only.split(","))
    if "form_cost" in only:
        form_cost(args.model)
        if only == {"form_cost"}:
            return
    if "units_scan" in only:
        units_scan_cost()
        if only == {"units_scan"}:
            return
    if "vec_cost" in only:
        vec_cost()
        if only == {"vec_cost"}:
            return
    if "cost" in only:
        expansion_cost()
        if only == {"cost"}:
            return
    settings = [tuple(float(x) for x in s.split(":")) for s in args.bm25.split(",") if s] if "bm25" in only else []
    D = collect(args.model, args.cache_dir, settings, FORMS if "form" in only else None)  # type: ignore[arg-type]
    for d in D["q"].values():
        d["cos"] = dict(d["v"])
    print(f"model {D['model_id']}; recall@10 (public split), worst conversation, per conversation, per category")
    print(f"the fusion steps of a hybrid search (search._fuse), median CPU us per round: "
          f"{' '.join(f'{x:.0f}' for x in D['fuse_us'])}")
    score(D, lambda q: D["q"][q["query_id"]]["engine"], "engine hybrid (search.run)")
    score(D, lambda q: ranked_hybrid(D, q), "base: rebuilt from the lists")
    score(D, lambda q: [m for m, _ in D["q"][q["query_id"]]["v"]], "vector")
    if "form" in only:
        form_routes(D, quick=args.form_quick)
    if "depth" in only:
        depth_routes(D)
    if "vec" in only:
        vec_routes(D)
    if "units" in only:
        vec_units(D)
    if "units_top" in only:
        vec_units(D, top_only=True)
    if "units_cost" in only:
        vec_units_cost(D)
    if "fusion" in only:
        for depth in (30, 50, 80, 100, 150):
            score(D, lambda q: ranked_hybrid(D, q, depth=depth), f"fusion: depth {depth}")
        for r in (0.25, 0.5, 1.0):
            score(D, lambda q: ranked_hybrid(D, q, ceiling=r), f"fusion: keyword over max(best, {r} sum idf)")
    if "prf" in only:
        prf_routes(D)
    if "expand" in only:
        expand_routes(D)
    if "peaked" in only:
        peaked_routes(D)
    if "within" in only:
        expand_within_routes(D)
    if "propagate" in only:
        for ps, ns in ((0.05, 0), (0.1, 0), (0.2, 0), (0.3, 0), (0, 0.1), (0, 0.2), (0, 0.3), (0.05, 0.05), (0.1, 0.1), (0.15, 0.15),
                       (0.2, 0.2), (0.25, 0.25), (0.3, 0.3), (0.4, 0.4), (0.5, 0.5), (0.2, 0.1), (0.1, 0.2), (0.3, 0.2), (0.2, 0.3)):
            score(D, lambda q: ranked_hybrid(D, q, propagate=propagated(D, q, ps, ns), neighbour_share=0.0),
                  f"propagate: prev {ps} next {ns} (+rerank's)")
    if "boosts" in only:  # (fused scores divided by k: the re-rank's date and speaker boosts k times as strong)
        for k in (1.2, 1.4, 1.6, 1.8, 2.0, 2.5):
            score(D, lambda q: ranked_hybrid(D, q, propagate=lambda sc: {m: s / k for m, s in sc.items()}, neighbour_share=0.0),
                  f"boosts x{k} (fused scores / {k})")
    if "variants" in only:
        for kind in ("edge", "max"):
            for share in (0.2, 0.3, 0.4, 0.5, 0.7):
                f = lambda q: ranked_hybrid(D, q, neighbour_share=0.0, propagate=propagated_variant(D, q, share, kind))  # noqa: E731
                score(D, f, f"propagate {kind} {share}")
                prompt_score(D, f, f"  prompt top 4 +-1", 4)
    if "prompt" in only:  # the neighbours' share as the prompt sees it (hits with their default range)
        for k in (4, 10):
            for share in (0.0, 0.3, 0.4, 0.5):
                for skip in (False, True):
                    prompt_score(D, lambda q: ranked_hybrid(D, q, neighbour_share=share),
                                 f"prompt top {k} +-1: share {share}{', skip shown' if skip else ''}", k, skip)
    if "thread" in only:  # on top of the engine's neighbours' share
        for kind in ("max", "top2", "sum"):
            for gamma in (0.05, 0.1, 0.2, 0.3, 0.5):
                f = lambda q: ranked_hybrid(D, q, propagate=thread_prior(D, q, gamma, kind), thread_share=0.0)  # noqa: E731
                score(D, f, f"thread prior {kind} {gamma}")
    if "asked" in only:  # the question asked from inside a thread: the topical one, or the evidence's own
        for where in ("topical", "evidence"):
            for ns, ts in ((0.0, 0.0), (hybrid.NEIGHBOUR_SHARE, 0.0), (hybrid.NEIGHBOUR_SHARE, hybrid.THREAD_SHARE)):
                asked_score(D, lambda q: ranked_hybrid(D, q, neighbour_share=ns, thread_share=ts),
                            f"asked from the {where} thread: share {ns} prior {ts}", where)
    if "prev" in only:
        score(D, lambda q: rerank_form(D, q, 0.0, hybrid.NEXT_SHARE), "re-rank form: prev 0 next 0.2 (= base)")
        for ps in (0.1, 0.2, 0.3, 0.4, 0.5):
            for ns in (0.2, 0.3, 0.4, 0.5):
                score(D, lambda q: rerank_form(D, q, ps, ns), f"re-rank form: prev {ps} next {ns}")
    if "bm25" in only:
        for k in settings:
            score(D, lambda q: [m for m, _ in D["q"][q["query_id"]]["k_bm25"][k]], f"bm25 k1 {k[0]} b {k[1]} ctx {k[2]}: keyword")
            score(D, lambda q: ranked_hybrid(D, q, kw=D["q"][q["query_id"]]["k_bm25"][k]),
                  f"bm25 k1 {k[0]} b {k[1]} ctx {k[2]}: hybrid")
    if "window" not in only:
        return
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
