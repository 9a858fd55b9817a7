"""Recall speed: ingest (with and without the model), query latency per mode at 10k, and a 1M-message
resource's first query after a restart.

    .venv/bin/python bench/recall_speed.py                # everything (about 4 GB of disk for the 1M part)
    .venv/bin/python bench/recall_speed.py --skip-1m      # libSQL-backed 10k figures only
    .venv/bin/python bench/recall_speed.py --no-model     # without the USE model (synthetic vectors only)
    .venv/bin/python bench/recall_speed.py --skip-1m --no-model --fusion use   # searched with USE's fusion settings

Latency excludes query embedding (queries are embedded beforehand). The 10k figures go through the
real path (libSQL file, change-counter check, in-process matrix). The 1M part writes synthetic
clustered 512-d vectors through the index's own write path into a libSQL file, lets the writer
partition the resource (persisted IVF), closes the store, opens it again in the same process with
nothing cached, and times the first vector query (then more), with recall@10 against the exact
answer. The 10k query figures come twice: each mode's 200 queries once, then "best of 5, modes in
turn" (five rounds of the three modes one after the other, each mode's best p50: the line that shows
the code rather than the machine's load, which moves over seconds on a shared VM).
Targets (issue 20): hybrid ≤ 2 ms at 10k and ≤ 1.8x vector-only; first query at 1M after a
restart ≤ 1 s; ingest with the model ≥ 1,000 messages/s. Mastra: 8.5 ms at 10k, 85 KB/message,
150 vectors/s.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from core.messages import Message  # noqa: E402
from core.storage import open_store  # noqa: E402
from core.recall import RecallIndex, vector_table_name  # noqa: E402
from core.recall.matrix import VectorSet, single_blas_thread  # noqa: E402

DIM = 512
# A Zipf-distributed synthetic vocabulary: a few very common words, a long tail of rare ones, as in chat.
VOCAB = np.array([f"w{i}" for i in range(5000)])
ZIPF = 1.0 / np.arange(1, 5001) ** 1.1
ZIPF /= ZIPF.sum()


def words(rng: np.random.Generator, n: int) -> str:
    return " ".join(rng.choice(VOCAB, n, p=ZIPF))


class TableEmbedder:
    """Vectors looked up, not computed: isolates the index's own cost from the model's."""

    dim = DIM

    def __init__(self, model_id: str = "synthetic@d512", seed: int = 0) -> None:
        self.model_id = model_id
        self.rng = np.random.default_rng(seed)
        self.fixed: dict[str, np.ndarray] = {}

    def embed(self, texts, kind="passage"):
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            v = self.fixed.get(t)
            if v is None:
                v = self.rng.standard_normal(DIM).astype(np.float32)
                v /= np.linalg.norm(v)
            out[i] = v
        return out


def clustered(n: int, rng: np.random.Generator, centers: np.ndarray, chunk: int = 100_000) -> np.ndarray:
    """Unit vectors around random topic centres: closer to real embeddings than isotropic noise."""
    out = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        # Noise of about the centre's own length: neighbours share a topic but are not near-duplicates.
        v = centers[rng.integers(0, len(centers), m)] + 0.045 * rng.standard_normal((m, DIM)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        out[start : start + m] = v
    return out


def synthetic_messages(n: int, thread: str, resource: str, rng: np.random.Generator) -> list[Message]:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return [
        (Message.user if i % 2 == 0 else Message.assistant)(
            words(rng, 12), id=f"m{i}", thread_id=thread, resource_id=resource,
            created_at=t0 + timedelta(seconds=i),
        )
        for i in range(n)
    ]


def percentiles(samples: list[float]) -> str:
    s = sorted(samples)
    return f"p50 {statistics.median(s):.2f} ms  p95 {s[int(0.95 * (len(s) - 1))]:.2f} ms  (n={len(s)})"


def file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def time_searches(index: Any, queries: list[str], mode: str) -> tuple[list[float], list[float]]:
    """Each query's search in ``mode`` (top 10, resource scope): wall and CPU milliseconds."""
    times, cpu = [], []
    for q in queries:
        t, c = time.perf_counter(), time.process_time()
        index.search(q, resource_id="u", mode=mode, top_k=10)
        times.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return times, cpu


#: ``--fusion``: the model family whose fusion settings (``hybrid.MODEL_FUSION``: keyword share, candidate depth,
#: the query lower-cased) the synthetic vectors are searched with; their id is that family's.
FUSION_IDS = {"default": "synthetic@d512", "use": "use-multilingual-v3-q@d512", "e5": "multilingual-e5-small-q4@d512"}


def indexed_resource(n: int, fusion: str, prefix: str) -> tuple[Any, RecallIndex, TableEmbedder, list[Message],
                                                                list[str]]:
    """(store, index, embedder, messages, queries): this bench's resource of ``n`` messages in one thread, stored and
    indexed, and its 200 queries with their vectors fixed, from the same seeds as ``bench_10k`` (the rows
    benches measure the same searches as this one), in a new folder named by ``prefix``."""
    rng = np.random.default_rng(1)
    store = open_store(Path(tempfile.mkdtemp(prefix=prefix)) / "m.db")
    store.memory.create_thread(thread_id="t", resource_id="u")
    msgs = synthetic_messages(n, "t", "u", rng)
    for start in range(0, n, 1000):
        store.memory.save_messages(msgs[start : start + 1000])
    emb = TableEmbedder(FUSION_IDS[fusion])
    index = RecallIndex.for_store(store, emb)
    for start in range(0, n, 256):
        index.index_messages(msgs[start : start + 256])
    queries = [words(rng, 6) for _ in range(200)]
    emb.fixed.update(zip(queries, emb.embed(queries, "query")))
    return store, index, emb, msgs, queries


def parse_fusion(text: str) -> Any:
    """``a:v:k`` (keyword share, vector depth, keyword depth) as a ``Fusion`` with the query lower-cased
    (USE's)."""
    from core.recall.hybrid import Fusion
    parts = text.split(":")
    return Fusion(keyword_share=float(parts[0]), candidates=int(parts[1]), keyword_candidates=int(parts[2]),
                  lower_query=True)


def compare_fusions(index: Any, model_id: str, queries: list[str], settings: list[str], rounds: int = 7) -> None:
    """Hybrid searches of the same queries under each fusion setting in turn (``--compare-fusion``), ``rounds``
    rounds, the order of the settings reversed every other round: per setting, the median of its rounds'
    p50 (wall and CPU), its best round's, and the median over rounds of its p50 over the first setting's. Settings are set on the index's model family's
    ``hybrid.MODEL_FUSION`` entry between batches (``fusion_for`` reads it at each search)."""
    from core.recall import hybrid
    family = model_id.split("@", 1)[0]
    saved = hybrid.MODEL_FUSION.get(family)
    fusions = {label: parse_fusion(label) if label != "current" else (saved or hybrid.Fusion()) for label in settings}
    walls: dict[str, list[float]] = {label: [] for label in fusions}
    cpus: dict[str, list[float]] = {label: [] for label in fusions}
    try:
        for r in range(rounds):
            for label in (list(fusions) if r % 2 == 0 else list(reversed(fusions))):
                hybrid.MODEL_FUSION[family] = fusions[label]
                times, cpu = time_searches(index, queries, "hybrid")
                walls[label].append(statistics.median(times))
                cpus[label].append(statistics.median(cpu))
    finally:
        if saved is not None:
            hybrid.MODEL_FUSION[family] = saved
    first = next(iter(fusions))
    for label in fusions:
        f = fusions[label]
        # (paired: each round's p50 over the first setting's in the same round, which the load moves alike)
        ratio = statistics.median(w / w0 for w, w0 in zip(walls[label], walls[first]))
        print(f"fusion a={f.keyword_share} vector {f.candidates} keyword {f.keyword_candidates or f.candidates}"
              f" ({label}): hybrid p50 median of {rounds} rounds "
              f"{statistics.median(walls[label]):.2f} ms (CPU {statistics.median(cpus[label]):.2f}), best round "
              f"{min(walls[label]):.2f} (CPU {min(cpus[label]):.2f}); x{ratio:.2f} the first setting's, round by round")


def bench_10k(n: int, with_model: bool, model_name: str = "use", fusion: str = "default",
              compare: list[str] | None = None) -> None:
    rng = np.random.default_rng(1)
    tmp = Path(tempfile.mkdtemp(prefix="recall-speed-"))
    path = tmp / "m.db"
    store = open_store(path)
    store.memory.create_thread(thread_id="t", resource_id="u")
    msgs = synthetic_messages(n, "t", "u", rng)
    for start in range(0, n, 1000):
        store.memory.save_messages(msgs[start : start + 1000])
    with store.db.write() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    before = file_bytes(path)
    emb = TableEmbedder(FUSION_IDS[fusion])
    index = RecallIndex.for_store(store, emb)
    from core.recall.hybrid import fusion_for
    settings = fusion_for(emb.model_id)
    vector_depth, keyword_depth = settings.depths(10)
    print(f"fusion: {fusion} (keyword share {settings.keyword_share}, depth {vector_depth} vector / {keyword_depth} keyword"
          f"{', query lower-cased' if settings.lower_query else ''})")
    t0, c0 = time.perf_counter(), time.process_time()
    for start in range(0, n, 256):
        index.index_messages(msgs[start : start + 256])
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"ingest without embedding: {n / dt:,.0f} messages/s (vector row + keyword row, batches of 256; "
          f"{n / cpu:,.0f} per CPU second)")
    with store.db.write() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    per_msg = (file_bytes(path) - before) / n
    with store.db.read() as conn:
        vec_bytes = conn.exec_driver_sql(
            f"SELECT sum(length(embedding)) + sum(length(metadata)) FROM {vector_table_name(DIM)}"
        ).scalar()
    print(f"disk: {per_msg / 1024:.2f} KB per message for the recall index (vectors, metadata, FTS, indexes); "
          f"raw vector+metadata payload {vec_bytes / n / 1024:.2f} KB")

    queries = [words(rng, 6) for _ in range(200)]
    qv = emb.embed(queries, "query")
    emb.fixed.update(zip(queries, qv))  # embedding excluded from the timed path
    index.search(queries[0], resource_id="u", mode="vector")  # loads the matrix once
    if compare:
        compare_fusions(index, emb.model_id, queries, compare)
        store.close()
        shutil.rmtree(tmp, ignore_errors=True)
        return
    p50: dict[str, float] = {}
    cpu50: dict[str, float] = {}
    for mode in ("vector", "keyword", "hybrid"):
        times, cpu = time_searches(index, queries, mode)
        p50[mode] = statistics.median(times)
        cpu50[mode] = statistics.median(cpu)
        print(f"{n:,} msgs, index.search mode={mode:<7} {percentiles(times)}  CPU p50 {statistics.median(cpu):.2f} ms")
    # (CPU too: on a shared machine the wall ratio moves with whatever else runs in those minutes)
    print(f"hybrid / vector p50: x{p50['hybrid'] / p50['vector']:.2f}, CPU x{cpu50['hybrid'] / cpu50['vector']:.2f} "
          "(target <= 2 ms and <= x1.8)")
    # The same queries again, the modes taking turns, five rounds: each mode's best p50. Load from other
    # work comes and goes over seconds; taking turns spreads it over the modes, and the best round of
    # each is the figure closest to a quiet machine's (the ratio above moves with the load of its minute).
    best = {mode: float("inf") for mode in p50}
    best_cpu = dict(best)
    for _ in range(5):
        for mode in best:
            times, cpu = time_searches(index, queries, mode)
            best[mode] = min(best[mode], statistics.median(times))
            best_cpu[mode] = min(best_cpu[mode], statistics.median(cpu))
    print("best of 5, modes in turn: " + " / ".join(f"{m} {best[m]:.2f}" for m in best)
          + f" ms p50 (CPU {' / '.join(f'{best_cpu[m]:.2f}' for m in best)}); "
          f"hybrid / vector x{best['hybrid'] / best['vector']:.2f}, CPU x{best_cpu['hybrid'] / best_cpu['vector']:.2f}")
    # The same queries once more, each query's vector and hybrid searches back to back (which goes first
    # alternating): both modes in the same state of the machine, query by query. In the lines above each
    # mode runs 200 searches in a row, and vector-only ones then find the 20 MB scan copy of the matrix
    # still in this CPU's 32 MB L3 cache, which a hybrid search's other reads (keyword postings, thread
    # order, id columns) partly evict; an agent's searches come between other work, so neither mode
    # finds it there. This line is the figure closest to that, both modes measured alike.
    inter: dict[str, list[float]] = {"vector": [], "hybrid": []}
    inter_cpu: dict[str, list[float]] = {"vector": [], "hybrid": []}
    for _ in range(3):
        for i, q in enumerate(queries):
            for mode in (("vector", "hybrid") if i % 2 else ("hybrid", "vector")):
                times, cpu = time_searches(index, [q], mode)
                inter[mode].extend(times)
                inter_cpu[mode].extend(cpu)
    iv, ih = statistics.median(inter["vector"]), statistics.median(inter["hybrid"])
    cv, ch = statistics.median(inter_cpu["vector"]), statistics.median(inter_cpu["hybrid"])
    print(f"interleaved, each query's vector and hybrid search back to back (3 x {len(queries)}): vector {iv:.2f} / "
          f"hybrid {ih:.2f} ms p50 (CPU {cv:.2f} / {ch:.2f}); hybrid / vector x{ih / iv:.2f}, CPU x{ch / cv:.2f}")
    with store.db.read() as conn:
        vset = index.vector_set(conn, "u", None)
    times = []
    for v in qv:
        t = time.perf_counter()
        vset.search(v, 10)
        times.append((time.perf_counter() - t) * 1000)
    print(f"{n:,} msgs, matrix top-10 only          {percentiles(times)}")
    # The scan (dimension-major copy, then re-score) against the whole row-major product: same rows, same bits.
    times, same = [], 0
    for v in qv:
        t = time.perf_counter()
        with single_blas_thread():
            scores = vset.matrix @ v
        times.append((time.perf_counter() - t) * 1000)
        for k in (10, 2 * 50):
            want = np.lexsort((np.arange(len(scores)), -scores))[:k]
            pos, got = vset.search(v, k)
            same += np.array_equal(pos, want) and np.array_equal(got, scores[want])
    print(f"{n:,} msgs, whole row-major product     {percentiles(times)}; scan top-10 and top-100 identical "
          f"(rows and score bits) for {same}/{2 * len(qv)} bench queries")

    if with_model:
        bench_ingest_with_model(store, msgs[:500], model_name)
    store.close()
    shutil.rmtree(tmp, ignore_errors=True)  # (47 MB a run)


def bench_ingest_with_model(store: Any, sample: list[Message], model_name: str) -> None:
    """Ingest with a local model: the embedder alone, on the messages and on the passages the index
    embeds (previous message + message: about twice the tokens, and a text's cost follows its tokens),
    then ``index_messages`` in batches of 64, and what the index adds per message over the embedder on
    those same passages. Besides the wall rate, the rate per 2 cores of this process's CPU time: on a
    machine shared with other work the wall rate only says how busy the machine was, while CPU seconds
    spent per message do not depend on it (2 cores: the rate an idle machine gives)."""
    from core.embedding import default_embedder
    from core.recall.text import passage_text

    model = default_embedder(model_name)
    texts = [m.text for m in sample]
    # What index_messages embeds for this thread: each message after the one before it (the first alone).
    passages = [passage_text(texts[i - 1] if i else "", t) for i, t in enumerate(texts)]
    model.inner.embed(texts[:5])
    counts = getattr(model.inner, "token_counts", None)
    cpu_per_passage = 0.0
    for label, batch in (("messages", texts), ("passages", passages)):
        wall, cpu = time.perf_counter(), time.process_time()
        model.inner.embed(batch)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        tokens = f", {np.mean(counts(batch)):.1f} tokens a text" if callable(counts) else ""
        print(f"embedder {model.model_id} on the {label}: {len(batch) / wall:,.0f} messages/s wall, "
              f"{2 * len(batch) / cpu:,.0f}/s per 2 cores of CPU time (one call of {len(batch)}{tokens}; "
              "vectors as one at a time)")
        cpu_per_passage = cpu / len(batch)
    thread = f"t-{model_name}"
    store.memory.create_thread(thread_id=thread, resource_id="u2")
    sample2 = [m.copy(id=f"{model_name}-{m.id}", thread_id=thread, resource_id="u2") for m in sample]
    store.memory.save_messages(sample2)
    real = RecallIndex.for_store(store, model)
    wall, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(sample2), 64):
        real.index_messages(sample2[start : start + 64])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"ingest with embedding ({model_name}, passage = previous + message, batches of 64): "
          f"{len(sample2) / wall:,.0f} messages/s wall, {2 * len(sample2) / cpu:,.0f}/s per 2 cores of CPU time; "
          f"x{cpu_per_passage * len(sample2) / cpu:.2f} the embedder's rate on the same passages "
          f"(the index adds {1000 * (cpu / len(sample2) - cpu_per_passage):.2f} ms of CPU a message)")
    # The same ingest through index_batches: the next batch is embedded while this one is written.
    thread = f"t-{model_name}-pipelined"
    store.memory.create_thread(thread_id=thread, resource_id="u3")
    sample3 = [m.copy(id=f"{model_name}-p-{m.id}", thread_id=thread, resource_id="u3") for m in sample]
    store.memory.save_messages(sample3)
    model.clear()  # same passages as above: embedded again, not read from the cache
    wall, cpu = time.perf_counter(), time.process_time()
    for _report in real.index_batches(sample3[start : start + 64] for start in range(0, len(sample3), 64)):
        pass
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"ingest with embedding ({model_name}, the same, pipelined by index_batches): "
          f"{len(sample3) / wall:,.0f} messages/s wall, {2 * len(sample3) / cpu:,.0f}/s per 2 cores of CPU time")


def bench_1m_restart(n: int, queries: int) -> None:
    """A 1M-vector resource in a libSQL file, partitioned by the writer; first query after reopening."""
    from core.recall import matrix

    rng = np.random.default_rng(3)
    centers = rng.standard_normal((2000, DIM)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    tmp = Path(tempfile.mkdtemp(prefix="recall-1m-"))
    path = tmp / "big.db"
    emb = TableEmbedder("synthetic@d512")
    store = open_store(path)
    index = RecallIndex.for_store(store, emb)
    index.ensure_tables()  # building an index only looks; the table is made before the first write (as a save does)
    exact = VectorSet(DIM, emb.model_id)
    t = time.perf_counter()
    chunk = 20_000
    for start in range(0, n, chunk):
        vecs = clustered(min(chunk, n - start), rng, centers)
        # Zero-padded ids: every b-tree of the table (vector_id, message_id, thread_id) grows at its right
        # edge, so 1M rows write at several thousand rows/s instead of ~700 (random inserts past the cache).
        ids = [f"b{start + i:07d}" for i in range(len(vecs))]
        rows = [(mid, vecs[i], {"message_id": mid, "thread_id": f"t{(start + i) // 1000:04d}", "resource_id": "big"},
                 emb.model_id) for i, mid in enumerate(ids)]
        with store.db.write() as conn:
            index.vectors.upsert(conn, rows)
        exact.message_ids.extend(r[0] for r in rows)
        exact.thread_ids.extend(r[2]["thread_id"] for r in rows)
        exact.resource_ids.extend(["big"] * len(rows))
        exact.append_vectors(vecs, [r[2]["thread_id"] for r in rows])
    print(f"\n1M restart part: {n:,} vector rows written in {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    built = index.vectors.maintain(store.db, ["big"])
    print(f"partitioned by the writer ({', '.join(built) or 'nothing'}; IVF_MIN_ROWS {matrix.IVF_MIN_ROWS:,}) "
          f"in {time.perf_counter() - t:.1f} s")
    store.close()
    qs = clustered(queries, rng, centers)
    truth = []
    for q in qs:
        with matrix.single_blas_thread():
            pos, _ = matrix._top(None, exact.matrix @ q, 10)
        truth.append({exact.message_ids[p] for p in pos})
    del exact

    store = open_store(path)  # "after a restart": a new store, a new index, nothing cached
    t = time.perf_counter()
    index = RecallIndex.for_store(store, emb)
    texts = [f"q{i}" for i in range(queries)]
    emb.fixed.update(zip(texts, qs))
    first = index.search(texts[0], resource_id="big", mode="vector", top_k=10)
    first_ms = (time.perf_counter() - t) * 1000
    times, rec = [], [len({h.message_id for h in first.hits} & truth[0]) / 10]
    for text, want in zip(texts[1:], truth[1:]):
        t = time.perf_counter()
        hits = index.search(text, resource_id="big", mode="vector", top_k=10).hits
        times.append((time.perf_counter() - t) * 1000)
        rec.append(len({h.message_id for h in hits} & want) / 10)
    print(f"{n:,} after restart: first query {first_ms:.0f} ms (index construction included); "
          f"next {len(times)} {percentiles(times)}; recall@10 vs exact {np.mean(rec):.3f}")
    store.close()
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)


def bench_1m(n: int, queries: int) -> None:
    rng = np.random.default_rng(2)
    centers = rng.standard_normal((2000, DIM)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    t = time.perf_counter()
    vset = VectorSet(DIM, "synthetic@d512")
    vset.message_ids = [f"m{i}" for i in range(n)]
    vset.thread_ids = ["t"] * n
    vset.resource_ids = ["u"] * n
    vset.append_vectors(clustered(n, rng, centers), ["t"] * n)
    print(f"\n1M part: {n:,} synthetic clustered vectors generated in {time.perf_counter() - t:.1f} s "
          f"({vset.nbytes() / 2**30:.2f} GiB float32)")
    qs = clustered(queries, rng, centers)
    exact_ids = []
    times = []
    from core.recall.matrix import _top

    for q in qs:
        t = time.perf_counter()
        with single_blas_thread():
            pos, _ = _top(None, vset.matrix @ q, 10)
        times.append((time.perf_counter() - t) * 1000)
        exact_ids.append({vset.message_ids[p] for p in pos})
    print(f"{n:,} exact scan top-10      {percentiles(times)}")
    t = time.perf_counter()
    part = vset.build_partition()
    print(f"IVF build: {len(part.centroids)} lists in {time.perf_counter() - t:.1f} s")
    for nprobe in (16, 32, 64):
        times, rec = [], []
        for q, exact in zip(qs, exact_ids):
            t = time.perf_counter()
            pos, _ = vset.search(q, 10, nprobe=nprobe)
            times.append((time.perf_counter() - t) * 1000)
            rec.append(len({vset.message_ids[p] for p in pos} & exact) / 10)
        print(f"{n:,} IVF nprobe={nprobe:<3} top-10   {percentiles(times)}  recall@10 vs exact {np.mean(rec):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--skip-1m", action="store_true")
    ap.add_argument("--no-model", action="store_true")
    ap.add_argument("--model", default="use", help="the local model for the ingest-with-model figure (use, e5)")
    ap.add_argument("--fusion", choices=sorted(FUSION_IDS), default="default",
                    help="search the 10k with this model's fusion settings (depth, keyword share); default: the defaults")
    ap.add_argument("--compare-fusion", default="",
                    help="comma-separated fusion settings a:v:k (keyword share, vector depth, keyword depth; "
                         "'current': the --fusion model's own) whose hybrid searches of the 10k take turns "
                         "(7 rounds), instead of the 10k figures")
    ap.add_argument("--only-1m-restart", action="store_true", help="just the 1M first-query-after-restart part")
    args = ap.parse_args()
    if args.only_1m_restart:
        bench_1m_restart(args.big, args.queries)
        return
    bench_10k(args.n, not args.no_model, args.model, args.fusion,
              [x for x in args.compare_fusion.split(",") if x])
    if not args.skip_1m:
        bench_1m_restart(args.big, args.queries)
        bench_1m(args.big, args.queries)


if __name__ == "__main__":
    main()
