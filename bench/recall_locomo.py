"""LoCoMo retrieval through the engine's recall path: vector-only, keyword-only and hybrid.

    .venv/bin/python bench/recall_locomo.py                     # USE model, prints three tables
    .venv/bin/python bench/recall_locomo.py --embedder hashing  # offline lexical embedder
    .venv/bin/python bench/recall_locomo.py --sweep             # tune RRF k / weights / depth (public split only)

Each conversation goes into its own database file and resource (LoCoMo's dia_ids such as ``D1:3``
repeat across conversations and are kept as message ids), one thread per session, through
``Memory.create_thread`` / ``Memory.save_messages`` (which index the messages), and every question is
asked through ``Memory.search``. The stored text is "<speaker>: <text> [image: <caption>]", the same
document BM25's baseline uses. Predictions go to ``--out``; the folder's ``eval_recall.py`` scores them.
"""

from __future__ import annotations

import argparse
import json
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
from core.vector import hybrid  # noqa: E402


def default_data() -> Path:
    for candidate in (REPO.parent / "shared/bench/locomo", REPO / "../shared/bench/locomo"):
        if candidate.exists():
            return candidate.resolve()
    return REPO.parent / "shared/bench/locomo"


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def make_embedder(name: str) -> Any:
    from core.embedding import HashingEmbedder, default_embedder

    return HashingEmbedder(256) if name == "hashing" else default_embedder()


def stored_text(m: dict[str, Any]) -> str:
    text = f'{m["speaker"]}: {m["text"]}'
    if m.get("image_caption"):
        text += f' [image: {m["image_caption"]}]'
    return text


def ingest(conv_id: str, msgs: list[dict[str, Any]], db_dir: Path, embedder: Any) -> Memory:
    store = open_store(db_dir / f"{conv_id}.db")
    memory = Memory(store, MemoryOptions(semantic_recall=True), embedder=embedder)
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
    data: Path = args.data
    messages = load_jsonl(data / "locomo_public_messages.jsonl")
    queries = load_jsonl(data / "locomo_public_queries.jsonl")
    if args.limit_convs:
        keep = sorted({m["conv_id"] for m in messages})[: args.limit_convs]
        messages = [m for m in messages if m["conv_id"] in keep]
        queries = [q for q in queries if q["conv_id"] in keep]
    embedder = make_embedder(args.embedder)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    db_dir = Path(tempfile.mkdtemp(prefix="locomo-"))
    by_conv: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in messages:
        by_conv[m["conv_id"]].append(m)
    memories: dict[str, Memory] = {}
    started = time.perf_counter()
    for conv_id, msgs in sorted(by_conv.items()):
        memories[conv_id] = ingest(conv_id, msgs, db_dir, embedder)
    ingest_s = time.perf_counter() - started
    print(f"ingested {len(messages)} messages of {len(by_conv)} conversations in {ingest_s:.1f} s "
          f"({len(messages) / ingest_s:.0f} msg/s incl. embedding, {args.embedder})")

    if args.sweep:
        sweep(memories, queries, data)
        return
    for mode in args.modes.split(","):
        preds = []
        for q in queries:
            memory = memories[q["conv_id"]]
            t0 = time.perf_counter()
            hits = memory.search(q["query"], resource_id=q["conv_id"], top_k=20, mode=mode)
            ms = (time.perf_counter() - t0) * 1000
            preds.append({"query_id": q["query_id"], "ranked_ids": [h.message_id for h in hits], "latency_ms": round(ms, 3)})
        path = out / f"preds_{args.embedder}_{mode}.jsonl"
        path.write_text("".join(json.dumps(p) + "\n" for p in preds), encoding="utf-8")
        print(f"\n== {mode} ({args.embedder}); latency includes query embedding ==", flush=True)
        subprocess.run(
            [sys.executable, str(data / "eval_recall.py"), str(path), "--queries",
             str(data / "locomo_public_queries.jsonl"), "--by-category"],
            check=True,
        )
    for memory in memories.values():
        memory.store.close()


def sweep(memories: dict[str, Memory], queries: list[dict[str, Any]], data: Path) -> None:
    """Fuse cached vector and keyword lists with different RRF settings; report recall@10 (public split)."""
    from core.vector import keyword

    to_ranked = lambda hs: [hybrid.Ranked(h.message_id, h.thread_id, h.resource_id, h.score) for h in hs]  # noqa: E731
    scored = [q for q in queries if not q.get("adversarial")]
    vectors = {
        q["query_id"]: to_ranked(memories[q["conv_id"]].recall_index.search(
            q["query"], resource_id=q["conv_id"], top_k=200, mode="vector").hits)
        for q in scored
    }
    default_weight = keyword.CONTEXT_WEIGHT
    best_weight, best_kw = default_weight, -1.0
    for weight in (0.0, 0.25, 0.5, 0.75, 1.0):
        keyword.CONTEXT_WEIGHT = weight
        kw_lists = {
            q["query_id"]: to_ranked(memories[q["conv_id"]].recall_index.search(
                q["query"], resource_id=q["conv_id"], top_k=200, mode="keyword").hits)
            for q in scored
        }
        r = sum(len(set(q["gold"]) & {h.message_id for h in kw_lists[q["query_id"]][:10]}) / len(q["gold"]) for q in scored) / len(scored)
        print(f"keyword only, context column weight {weight}: recall@10 {r:.3f}")
        if r > best_kw:
            best_weight, best_kw, best_lists = weight, r, kw_lists
    keyword.CONTEXT_WEIGHT = default_weight
    print(f"using context weight {best_weight} for the fusion sweep")
    lists = [(set(q["gold"]), vectors[q["query_id"]], best_lists[q["query_id"]]) for q in scored]

    def recall_at(k_rrf: float, wv: float, wk: float, depth: int, at: int = 10) -> float:
        total = 0.0
        for gold, vec, kw in lists:
            fused = hybrid.fuse(vec[:depth], kw[:depth], k=k_rrf, vector_weight=wv, keyword_weight=wk)
            top = {f.message_id for f in fused[:at]}
            total += len(gold & top) / len(gold)
        return total / len(lists)

    print(f"vector only r@10 {recall_at(60, 1, 0, 200):.3f}   keyword only r@10 {recall_at(60, 0, 1, 200):.3f}")
    rows = []
    for k_rrf in (1, 5, 10, 20, 40, 60, 100):
        for wk in (0.5, 0.75, 1.0, 1.5):
            for depth in (20, 50, 100):
                rows.append((recall_at(k_rrf, 1.0, wk, depth), k_rrf, wk, depth))
    rows.sort(reverse=True)
    print("best hybrid settings (recall@10, k, keyword weight, depth):")
    for r in rows[:10]:
        print(f"  {r[0]:.3f}  k={r[1]:<4} wk={r[2]:<5} depth={r[3]}")
    print(f"current defaults k={hybrid.RRF_K} wk={hybrid.KEYWORD_WEIGHT}: "
          f"{recall_at(hybrid.RRF_K, hybrid.VECTOR_WEIGHT, hybrid.KEYWORD_WEIGHT, 50):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=default_data(), help="folder with locomo_public_*.jsonl")
    ap.add_argument("--embedder", choices=["use", "hashing"], default="use")
    ap.add_argument("--modes", default="vector,keyword,hybrid")
    ap.add_argument("--out", type=Path, default=REPO / ".temp/bench/locomo")
    ap.add_argument("--sweep", action="store_true", help="tune RRF settings on this split")
    ap.add_argument("--limit-convs", type=int, default=0, help="only the first N conversations (quick runs)")
    run(ap.parse_args())


if __name__ == "__main__":
    main()
