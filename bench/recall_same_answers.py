"""Recall answers, written out to the bit, to compare two versions of the code (a speed change must
not move a hit, its order or a score's last bit).

    # the code under test, then the code before it, then compare:
    cd <checkout A> && .venv/bin/python <this file> --out /tmp/a.jsonl
    cd <checkout B> && .venv/bin/python <this file> --out /tmp/b.jsonl
    cmp /tmp/a.jsonl /tmp/b.jsonl

The code searched is the checkout the command runs in (the current directory goes first on the path,
so one copy of this file can drive both). Two corpora, each through the real libSQL path:

- ``recall_speed.py``'s 10k synthetic resource (its Zipf vocabulary and random vectors, the same seeds):
  its 200 queries in every mode at top_k 10 and 50, hybrid with a threshold, hybrid narrowed to the
  thread, hybrid as of a past moment;
- the LoCoMo public split (``../shared/bench/locomo``, one database per conversation, one thread a
  session) with the offline ``HashingEmbedder`` (``--locomo-model use``: the USE model, whose piece
  vectors vector mode and the inspection's vector-only list read): each question in every mode at
  top_k 20, and the playground's whole inspection of it in hybrid (every list, rank, raw and fused score);
- with ``--pieces N``, ``recall_pieces.py``'s N LoCoMo-length messages (piece vectors on): its 100
  queries in vector mode, twice (the second from the piece cache).

Each line is one answer: the query, the mode and settings, and the hits (message, thread, resource,
score, source, vector and keyword scores; floats as ``repr``, which round-trips exactly) with the
reason and details. The summary on stderr gives the number of answers and hits and a digest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, os.getcwd())  # the checkout under test, before this file's own
sys.path.insert(1, str(Path(__file__).resolve().parent))
# ``core`` is imported from the checkout under test now, before this file's helpers (``recall_speed``,
# ``recall_locomo``) put their own checkout first on the path: once the package is loaded, every
# ``core.*`` module comes from it whatever the path says later.
import core  # noqa: E402

if Path(core.__file__).resolve().parents[1] != Path(os.getcwd()).resolve():
    raise SystemExit(f"core was imported from {Path(core.__file__).resolve().parents[1]}, not from the current "
                     "directory: run this file from the root of the checkout to compare")


def exact(value: Any) -> Any:
    """A JSON-safe, bit-exact form (floats as their repr)."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): exact(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [exact(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # a numpy scalar
        return exact(value.item())
    return value


def hit_row(h: Any) -> list[Any]:
    return [h.message_id, h.thread_id, h.resource_id, exact(float(h.score)), h.source,
            exact(h.vector_score), exact(h.keyword_score)]


def synthetic(n: int, queries: int, fusion: str = "default") -> Iterator[dict[str, Any]]:
    import numpy as np

    import recall_speed as rs
    from core.recall import RecallIndex
    from core.storage import open_store

    rng = np.random.default_rng(1)
    tmp = Path(tempfile.mkdtemp(prefix="recall-same-"))
    store = open_store(tmp / "m.db")
    store.memory.create_thread(thread_id="t", resource_id="u")
    msgs = rs.synthetic_messages(n, "t", "u", rng)
    for start in range(0, n, 1000):
        store.memory.save_messages(msgs[start : start + 1000])
    emb = rs.TableEmbedder(rs.FUSION_IDS[fusion])  # (the model id whose fusion settings search it)
    index = RecallIndex.for_store(store, emb)
    for start in range(0, n, 256):
        index.index_messages(msgs[start : start + 256])
    texts = [rs.words(rng, 6) for _ in range(queries)]
    emb.fixed.update(zip(texts, emb.embed(texts, "query")))
    past = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=n // 2)
    runs: list[tuple[str, dict[str, Any]]] = [
        *((mode, {"top_k": k}) for mode in ("vector", "keyword", "hybrid") for k in (10, 50)),
        ("hybrid", {"top_k": 10, "threshold": 0.05}),
        ("hybrid", {"top_k": 10, "thread_id": "t"}),
        ("hybrid", {"top_k": 10, "until": past}),
    ]
    for q in texts:
        for mode, kw in runs:
            scope = {"resource_id": None if "thread_id" in kw else "u"}
            result = index.search(q, mode=mode, **scope, **kw)
            yield {"corpus": "synthetic", "query": q, "mode": mode, "settings": exact({k: str(v) for k, v in kw.items()}),
                   "hits": [hit_row(h) for h in result.hits], "reason": result.reason, "details": exact(result.details)}
    store.close()
    shutil.rmtree(tmp, ignore_errors=True)


def pieces_set(n: int, queries: int) -> Iterator[dict[str, Any]]:
    """``recall_pieces.py``'s LoCoMo-length resource (USE's model id, so pieces on): vector mode at top_k 10
    and 50, each query twice (the second answered from the piece cache)."""
    import recall_pieces as rp

    store, emb, index, _ = rp.locomo_index(n)
    texts = rp.fixed_queries(emb, queries)
    for run in ("first", "again"):
        for q in texts:
            for k in (10, 50):
                result = index.search(q, mode="vector", resource_id="u", top_k=k)
                yield {"corpus": "pieces", "run": run, "query": q, "mode": "vector", "top_k": k,
                       "hits": [hit_row(h) for h in result.hits], "reason": result.reason,
                       "details": exact(result.details)}
    store.close()


def locomo(data: Path, limit: int, model: str = "hashing") -> Iterator[dict[str, Any]]:
    from core.recall.explain import inspect_search

    import recall_locomo as rl  # (core is already the checkout under test's: see the top of this file)

    messages = rl.load_jsonl(data / "locomo_public_messages.jsonl")
    questions = rl.load_jsonl(data / "locomo_public_queries.jsonl")[: limit or None]
    tmp = Path(tempfile.mkdtemp(prefix="recall-same-locomo-"))
    # (hashing: offline, no pieces; use: the default model, its pieces on, vectors from recall_locomo's cache)
    embedder = rl.make_embedder(model, Path(tempfile.gettempdir()) / "memory-studio-embcache")
    by_conv: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in messages:
        by_conv[m["conv_id"]].append(m)
    # ingested as bench/recall_locomo.py does: one database per conversation, one thread a session
    memories = {conv_id: rl.ingest(conv_id, msgs, tmp, embedder) for conv_id, msgs in sorted(by_conv.items())}
    for q in questions:
        memory = memories[q["conv_id"]]
        for mode in ("vector", "keyword", "hybrid"):
            hits = memory.search(q["query"], resource_id=q["conv_id"], top_k=20, mode=mode)
            yield {"corpus": "locomo", "query": q["query_id"], "mode": mode, "hits": [hit_row(h) for h in hits]}
        ins = inspect_search(memory._recall_index_for_search(), q["query"], resource_id=q["conv_id"], top_k=20)
        lists = {name: [[c.rank, c.message_id, c.thread_id, exact(c.score), exact(c.vector_score),
                         exact(c.keyword_score), c.vector_rank, c.keyword_rank, exact(c.combined), c.status]
                        for c in cands] for name, cands in ins.lists.items()}
        yield {"corpus": "locomo", "query": q["query_id"], "mode": "inspect", "lists": lists}
    for memory in memories.values():
        memory.store.close()
    shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--n", type=int, default=10_000, help="messages of the synthetic resource")
    ap.add_argument("--queries", type=int, default=200, help="synthetic queries (recall_speed.py's first ones)")
    ap.add_argument("--data", type=Path, default=None, help="folder with locomo_public_*.jsonl (default: as recall_locomo.py finds it)")
    ap.add_argument("--locomo-limit", type=int, default=0, help="only the first N LoCoMo questions (0: all)")
    ap.add_argument("--skip-locomo", action="store_true")
    ap.add_argument("--skip-synthetic", action="store_true")
    ap.add_argument("--locomo-model", choices=("hashing", "use", "e5"), default="hashing",
                    help="the embedder of the LoCoMo part (use and e5 through recall_locomo.py's vector cache)")
    ap.add_argument("--pieces", type=int, default=0, help="also the piece-vector set of this many messages")
    ap.add_argument("--fusion", choices=("default", "e5", "use"), default="default",
                    help="search the synthetic resource with this model's fusion settings (as recall_speed.py's "
                         "--fusion: keyword share, list depths, the query lower-cased); LoCoMo keeps the defaults")
    args = ap.parse_args()
    if args.data is None:
        import recall_locomo

        args.data = recall_locomo.default_data()
    digest = hashlib.sha256()
    answers = hits = 0
    with args.out.open("w", encoding="utf-8") as f:
        sources = [] if args.skip_synthetic else [synthetic(args.n, args.queries, args.fusion)]
        if not args.skip_locomo:
            if not (args.data / "locomo_public_queries.jsonl").exists():
                raise SystemExit(f"no LoCoMo split at {args.data} (--data, or --skip-locomo)")
            sources.append(locomo(args.data, args.locomo_limit, args.locomo_model))
        if args.pieces:
            sources.append(pieces_set(args.pieces, 100))
        for source in sources:
            for row in source:
                line = json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n"
                f.write(line)
                digest.update(line.encode())
                answers += 1
                hits += len(row.get("hits", [])) + sum(len(v) for v in row.get("lists", {}).values())
    print(f"{answers} answers, {hits} hits or list entries, sha256 {digest.hexdigest()[:16]} -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
