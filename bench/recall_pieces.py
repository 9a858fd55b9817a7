"""Piece vectors (``core.recall.pieces``): what they cost at save and at a vector-only search.

    .venv/bin/python bench/recall_pieces.py               # both parts
    .venv/bin/python bench/recall_pieces.py --only cost   # embedding CPU and ingest rate with the USE model
    .venv/bin/python bench/recall_pieces.py --only cost --model e5 --threads 16 --no-ingest   # e5, a sample
    .venv/bin/python bench/recall_pieces.py --only search # search latency on a LoCoMo-length synthetic set
    .venv/bin/python bench/recall_pieces.py --only turns  # an agent's save-then-search loop on that set

``cost``: the USE model's CPU time embedding what a save embeds, without pieces (the passages) and with
them (passages + pieces, one call, as ``RecallIndex.stage`` does), on LoCoMo's public messages (threaded
by session, "<speaker>: <text> [image: ...]") and on ``recall_speed.py``'s synthetic messages (12 words,
no punctuation: no pieces); raw model, no cache, one call per set, the two sets alternated over
``--rounds`` rounds, CPU medians. Then ``index_messages`` (batches of 64) on each with pieces on and
off: messages per second of wall time and per 2 cores of CPU time (item 3c: >= 1,000 with the model).

``search``: 10,000 messages whose texts are LoCoMo's (cycled; a thread per session), vectors looked
up (``recall_speed.TableEmbedder``, USE's model id so USE's settings apply), so about as many messages
have pieces as in LoCoMo; each mode's p50 over ``--queries`` queries (top 10, resource scope, query
embedding excluded), pieces on and off alternated over five rounds, best p50 of each.

``turns``: the same set, then an agent's loop (``turns``' docstring): per turn a saved pair and a
vector-only search, its ms and the pieces' bytes it read again.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(Path(__file__).resolve().parent))

from core.messages import Message  # noqa: E402
from core.recall import RecallIndex, pieces  # noqa: E402
from core.recall.text import passage_text  # noqa: E402
from core.storage import open_store  # noqa: E402

import recall_locomo as rl  # noqa: E402
import recall_speed as rs  # noqa: E402


def locomo_threads(limit: int | None = None) -> list[list[tuple[str, str, datetime]]]:
    """LoCoMo's public messages as threads (one per conversation and session): (id, stored text, time)."""
    msgs = rl.load_jsonl(rl.default_data() / "locomo_public_messages.jsonl")
    by: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for m in msgs:
        by[(m["conv_id"], m["session"])].append(m)
    out = []
    for key in sorted(by):
        rows = sorted(by[key], key=lambda r: r["seq"])
        out.append([(f'{key[0]}:{m["id"]}', rl.stored_text(m),
                     datetime.fromisoformat(m["createdAt"]).replace(tzinfo=timezone.utc) + timedelta(seconds=m["seq"]))
                    for m in rows])
    return out[:limit] if limit else out


def texts_of(threads: list[list[tuple[str, str, datetime]]]) -> tuple[list[str], list[str]]:
    """(the passages a save embeds, the pieces it adds)."""
    passages_: list[str] = []
    extra: list[str] = []
    for rows in threads:
        prev = ""
        for _, text, _ in rows:
            passages_.append(passage_text(prev, text))
            extra += pieces.cut(text).texts(text)
            prev = text
    return passages_, extra


def synthetic_threads(n: int) -> list[list[tuple[str, str, datetime]]]:
    rng = np.random.default_rng(1)
    msgs = rs.synthetic_messages(n, "t", "u", rng)
    return [[(m.id, m.text, m.created_at) for m in msgs]]


def cost(rounds: int, model_name: str = "use", threads_limit: int = 0, ingest: bool = True) -> None:
    from core.embedding import default_embedder

    model = default_embedder(model_name)
    inner = model.inner
    inner.embed(["warm up"])
    counts = getattr(inner, "token_counts", None)
    every = locomo_threads()
    sample = every[::max(1, len(every) // threads_limit)][:threads_limit] if threads_limit else every
    sets = [(f"LoCoMo public, {threads_limit} sessions spread over it" if threads_limit else "LoCoMo public (2,760 messages)",
             sample)]
    if not threads_limit:
        sets.append(("recall_speed synthetic (2,000 messages)", synthetic_threads(2000)))
    for label, threads in sets:
        plain, extra = texts_of(threads)
        n = len(plain)
        cpu: dict[str, list[float]] = {"passages": [], "passages + pieces": []}
        for r in range(rounds):
            order = list(cpu) if r % 2 == 0 else list(reversed(cpu))
            for which in order:
                batch = plain if which == "passages" else plain + extra
                c = time.process_time()
                inner.embed(batch)
                cpu[which].append(time.process_time() - c)
        a, b = statistics.median(cpu["passages"]), statistics.median(cpu["passages + pieces"])
        tokens = ""
        if callable(counts):
            ta, tb = sum(counts(plain)), sum(counts(plain + extra))
            tokens = f"; tokens {ta:,} -> {tb:,} (x{tb / ta:.2f})"
        with_pieces = sum(1 for rows in threads for _, t, _ in rows if pieces.cut(t).spans)
        print(f"{model_name} embedding CPU at save, {label}: {n:,} passages {a:.2f} s, passages + {len(extra):,} pieces "
              f"({with_pieces:,} messages with pieces) {b:.2f} s: x{b / a:.2f}{tokens} "
              f"(rounds {' '.join(f'{x:.2f}/{y:.2f}' for x, y in zip(cpu['passages'], cpu['passages + pieces']))})",
              flush=True)
        for on in ((True, False) if ingest else ()):
            tmp = Path(tempfile.mkdtemp(prefix="pieces-cost-"))
            store = open_store(tmp / "m.db")
            msgs = []
            for i, rows in enumerate(threads):
                store.memory.create_thread(thread_id=f"t{i}", resource_id="u")
                msgs += [(Message.user if j % 2 == 0 else Message.assistant)(
                    text, id=mid, thread_id=f"t{i}", resource_id="u", created_at=when)
                    for j, (mid, text, when) in enumerate(rows)]
            for start in range(0, len(msgs), 1000):
                store.memory.save_messages(msgs[start:start + 1000])
            model.clear()
            index = RecallIndex.for_store(store, model)
            index.ensure_tables()
            index.set_pieces(on)
            wall, c = time.perf_counter(), time.process_time()
            for start in range(0, len(msgs), 64):
                assert index.index_messages(msgs[start:start + 64]).ok
            wall, c = time.perf_counter() - wall, time.process_time() - c
            print(f"  ingest with {model_name}, pieces {'on ' if on else 'off'}: {n / wall:,.0f} messages/s wall, "
                  f"{2 * n / c:,.0f}/s per 2 cores of CPU time; messages with pieces {index.piece_counts()}",
                  flush=True)
            store.close()


def locomo_index(n: int) -> tuple[Any, Any, RecallIndex, list[list[tuple[str, str, datetime]]]]:
    """(store, embedder, index, LoCoMo's threads): ``n`` messages whose texts are LoCoMo's (cycled; a
    thread per session) saved and indexed with pieces, vectors looked up (USE's model id)."""
    threads = locomo_threads()
    tmp = Path(tempfile.mkdtemp(prefix="pieces-search-"))
    store = open_store(tmp / "m.db")
    msgs: list[Message] = []
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    k = 0
    while len(msgs) < n:
        for i, rows in enumerate(threads):
            tid = f"t{k}-{i}"
            store.memory.create_thread(thread_id=tid, resource_id="u")
            msgs += [(Message.user if j % 2 == 0 else Message.assistant)(
                text, id=f"{k}-{mid}", thread_id=tid, resource_id="u", created_at=t0 + timedelta(seconds=len(msgs) + j))
                for j, (mid, text, _) in enumerate(rows)]
            if len(msgs) >= n:
                break
        k += 1
    msgs = msgs[:n]
    for start in range(0, n, 1000):
        store.memory.save_messages(msgs[start:start + 1000])
    emb = rs.TableEmbedder(rs.FUSION_IDS["use"])
    index = RecallIndex.for_store(store, emb)
    assert index.pieces
    for start in range(0, n, 256):
        assert index.index_messages(msgs[start:start + 256]).ok
    return store, emb, index, threads


def fixed_queries(emb: Any, count: int, seed: int = 3) -> list[str]:
    rng = np.random.default_rng(seed)
    qs = [rs.words(rng, 6) for _ in range(count)]
    for q in qs:
        emb.fixed[q.lower()] = emb.embed([q])[0]  # (the same vector each time it is asked)
        emb.fixed[q] = emb.fixed[q.lower()]
    return qs


def search(n: int, queries: int) -> None:
    store, emb, index, _ = locomo_index(n)
    counted = index.piece_counts()
    with store.db.read() as conn:
        rows = conn.exec_driver_sql(f"SELECT count(*) FROM {pieces.table_name(rs.DIM)}").scalar()
    print(f"search at {n:,} LoCoMo-length messages: {counted} messages with pieces, {rows:,} piece rows", flush=True)
    qs = fixed_queries(emb, queries)
    best: dict[str, list[float]] = defaultdict(list)
    for r in range(5):
        for on in ((True, False) if r % 2 == 0 else (False, True)):
            index.pieces = on
            index.vectors.reads_pieces = on  # type: ignore[attr-defined]
            for mode in ("vector", "hybrid"):
                times, _ = rs.time_searches(index, qs, mode)
                best[f"{mode} pieces {'on' if on else 'off'}"].append(statistics.median(times))
    for key, vals in best.items():
        print(f"  {key}: best p50 {min(vals):.2f} ms (rounds {' '.join(f'{v:.2f}' for v in vals)})", flush=True)
    store.close()


def turns(n: int, count: int, queries: int) -> None:
    """An agent's loop on the 10k set: each turn saves a user + assistant pair of LoCoMo's texts to one
    thread (``save_messages`` then ``index_messages``, as ``Memory`` does), then runs a vector-only search
    (one of ``queries`` fixed queries, in turn: each was searched once before the loop, so its messages'
    pieces were read once), and the same search without pieces (the two in alternating order). Per
    turn: the search's wall ms and the pieces' bytes it read from the table (``piece_table.read``'s
    answers: passage and piece vectors), and the messages it asked the table for."""
    from core.recall import piece_table

    store, emb, index, threads = locomo_index(n)
    read_bytes = [0, 0]  # (bytes, messages asked)
    plain_read = piece_table.read

    def counted_read(conn: Any, table: str, info: Any, model_id: str, message_ids: Any) -> Any:
        got = plain_read(conn, table, info, model_id, message_ids)
        read_bytes[0] += sum(p.passage.nbytes + p.vectors.nbytes for p in got.values())
        read_bytes[1] += len(message_ids)
        return got

    piece_table.read = counted_read  # type: ignore[assignment]
    qs = fixed_queries(emb, queries)
    for q in qs:  # (warm: every query's re-scored messages read once)
        index.search(q, resource_id="u", mode="vector", top_k=10)
    texts = [t for rows in threads for _, t, _ in rows]
    store.memory.create_thread(thread_id="agent", resource_id="u")
    t0 = datetime(2027, 1, 1, tzinfo=timezone.utc)
    ms: list[float] = []
    plain_ms: list[float] = []  # (the same turn's search without pieces)
    saves: list[float] = []
    moved: list[int] = []
    asked: list[int] = []
    for t in range(count):
        pair = [Message.user(texts[(2 * t) % len(texts)], id=f"a{t}u", thread_id="agent", resource_id="u",
                             created_at=t0 + timedelta(seconds=2 * t)),
                Message.assistant(texts[(2 * t + 1) % len(texts)], id=f"a{t}a", thread_id="agent", resource_id="u",
                                  created_at=t0 + timedelta(seconds=2 * t + 1))]
        w = time.perf_counter()
        store.memory.save_messages(pair)
        assert index.index_messages(pair).ok
        saves.append((time.perf_counter() - w) * 1000)
        for on in ((True, False) if t % 2 == 0 else (False, True)):  # (the first pays the scope's new rows)
            index.pieces = on
            index.vectors.reads_pieces = on  # type: ignore[attr-defined]
            read_bytes[:] = [0, 0]
            w = time.perf_counter()
            index.search(qs[t % len(qs)], resource_id="u", mode="vector", top_k=10)
            (ms if on else plain_ms).append((time.perf_counter() - w) * 1000)
            if on:
                moved.append(read_bytes[0])
                asked.append(read_bytes[1])
    print(f"turns at {n:,} LoCoMo-length messages, {count} turns ({len(qs)} queries in turn): vector-only search "
          f"p50 {statistics.median(ms):.2f} ms (p90 {sorted(ms)[int(0.9 * len(ms))]:.2f}), pieces read per search "
          f"p50 {statistics.median(moved) / 1e6:.2f} MB (mean {statistics.mean(moved) / 1e6:.2f}) of "
          f"{statistics.median(asked):.0f} messages asked (mean {statistics.mean(asked):.1f}); without pieces "
          f"p50 {statistics.median(plain_ms):.2f} ms; save p50 {statistics.median(saves):.2f} ms", flush=True)
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=("cost", "search", "turns"), default=None)
    ap.add_argument("--turns", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--model", choices=("use", "e5"), default="use", help="cost: the embedder measured")
    ap.add_argument("--threads", type=int, default=0,
                    help="cost: only N of LoCoMo's sessions, spread over it (no synthetic set; e5 embeds ~20-45 texts/s)")
    ap.add_argument("--no-ingest", action="store_true", help="cost: the embedding only, not index_messages")
    args = ap.parse_args()
    if args.only in (None, "search"):
        search(args.n, args.queries)
    if args.only in (None, "turns"):
        turns(args.n, args.turns, min(args.queries, 20))
    if args.only in (None, "cost"):
        cost(args.rounds, args.model, args.threads, not args.no_ingest)


if __name__ == "__main__":
    main()
