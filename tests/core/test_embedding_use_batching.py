"""Batched USE embedding gives every text, bit for bit, the vector the pinned graph gives it alone.

The per-text graph (core/embedding/use_graph.py) is derived from the real model file; these tests skip
only when that file is absent, and the skip reason says how to install it.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from core.embedding.base import EmbedderError, ModelNotInstalledError, count_sorted_batches
from core.embedding.provision import USE_M3_Q, model_path, verify
from core.embedding.use_graph import (
    REWRITE_VERSION,
    TOKEN_ROWS,
    TOKEN_ROWS_BY_POSITION,
    TOKEN_TEXT,
    TOKEN_WINDOWS,
    batch_inputs,
    derived_paths,
    ensure_derived,
)
from core.embedding.use_onnx import UseOnnxEmbedder
from core.messages import Message
from core.recall import RecallIndex
from core.recall.text import passage_text
from core.storage import open_store


def _installed() -> Path | None:
    try:
        return verify(USE_M3_Q, model_path(USE_M3_Q))
    except ModelNotInstalledError:
        return None


MODEL = _installed()
needs_model = pytest.mark.skipif(
    MODEL is None,
    reason=f"USE model not installed at {model_path(USE_M3_Q)}; run `make models` or `memory-studio models install`",
)

EN = [
    "I think we should move the team meeting to Thursday afternoon",
    "my sister is allergic to peanuts so please check the menu",
    "the deploy failed again because the database migration timed out",
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
]
ZH = ["我对花生过敏", "明天下午三点开会", "我在里斯本河边订了一家酒店是五月的第二个周末", "今天天气很好"]


def _mixed(n: int, seed: int) -> list[str]:
    """EN, ZH and mixed messages of very different lengths, with the edge cases among them."""
    rng = random.Random(seed)
    out = ["", "a", "我", "ok", "🙂", "word " * 300, "tab\tand\nnewline", "Caroline: 我去了 support group"]
    while len(out) < n:
        parts = [rng.choice(EN + ZH) for _ in range(rng.randint(1, 6))]
        out.append((" " if rng.random() < 0.5 else "，").join(parts))
    rng.shuffle(out)
    return out


@pytest.fixture(scope="module")
def alone() -> UseOnnxEmbedder:
    return UseOnnxEmbedder(batch_size=1, threads=1)  # every text alone through the pinned graph


@needs_model
@pytest.mark.parametrize("batch_size,threads", [(32, 2), (7, 1), (64, 2)])
def test_batches_equal_one_at_a_time_bit_for_bit(alone: UseOnnxEmbedder, batch_size: int, threads: int) -> None:
    texts = _mixed(100, seed=batch_size)
    reference = np.stack([alone.embed([t])[0] for t in texts])
    embedder = UseOnnxEmbedder(batch_size=batch_size, threads=threads)
    batched = embedder.embed(texts)
    assert embedder.batching == "batches by token count"
    assert batched.dtype == np.float32 and batched.shape == (len(texts), 512)
    assert np.array_equal(batched, reference)
    # The same texts in another order and other company give the same rows.
    assert np.array_equal(embedder.embed(texts[::-1])[::-1], reference)
    assert np.array_equal(embedder.embed(texts[: len(texts) // 3] + EN)[: len(texts) // 3], reference[: len(texts) // 3])


@needs_model
@pytest.mark.parametrize("texts", [EN * 5, ZH * 5, [t * k for k in (1, 2, 5) for t in EN + ZH]])
def test_english_chinese_and_mixed_lengths(alone: UseOnnxEmbedder, texts: list[str]) -> None:
    reference = np.stack([alone.embed([t])[0] for t in texts])
    assert np.array_equal(UseOnnxEmbedder().embed(texts), reference)


@needs_model
def test_without_the_derived_graphs_every_text_runs_alone_with_the_same_vectors(tmp_path: Path) -> None:
    assert MODEL is not None
    source = tmp_path / MODEL.name
    source.symlink_to(MODEL)
    per_text, _ = derived_paths(source)
    per_text.mkdir()  # the derived file cannot be written there
    embedder = UseOnnxEmbedder(path=source)
    texts = _mixed(20, seed=3)
    vectors = embedder.embed(texts)
    assert embedder.batching.startswith("one text per run: could not write the derived embedding graph")
    assert np.array_equal(vectors, UseOnnxEmbedder(batch_size=1).embed(texts))


@needs_model
def test_derived_graphs_are_written_once_and_rewritten_when_changed(tmp_path: Path) -> None:
    assert MODEL is not None
    source = tmp_path / MODEL.name
    source.symlink_to(MODEL)
    stale = tmp_path / f"{MODEL.stem}.per-text-v0.onnx"  # an earlier rewrite's graph, no stamp
    stale.write_bytes(b"old")
    # An earlier version derived today (an older checkout still in use here) and a later version's
    # file are kept: deleting them would make that code derive them again on its next start.
    recent, newer = (tmp_path / f"{MODEL.stem}.per-text-v{v}.onnx" for v in (REWRITE_VERSION - 1, REWRITE_VERSION + 1))
    for path in (recent, newer):
        path.write_bytes(b"other")
        (tmp_path / (path.name + ".derived")).write_text("{}")
    per_text, tokenizer = ensure_derived(source, USE_M3_Q.sha256)
    assert (per_text, tokenizer) == derived_paths(source)
    assert not stale.exists() and recent.exists() and newer.exists()
    week_ago = time.time() - 7 * 24 * 3600
    os.utime(tmp_path / (recent.name + ".derived"), (week_ago, week_ago))
    ensure_derived(source, USE_M3_Q.sha256)  # unused for a week: deleted, with its stamp
    assert not recent.exists() and not (tmp_path / (recent.name + ".derived")).exists() and newer.exists()
    first = per_text.stat().st_mtime_ns
    assert ensure_derived(source, USE_M3_Q.sha256) == (per_text, tokenizer)
    assert per_text.stat().st_mtime_ns == first  # trusted by its stamp, not derived again
    good = per_text.read_bytes()
    per_text.write_bytes(good[:-4] + b"\0\0\0\0")  # same size, other bytes, new mtime
    ensure_derived(source, USE_M3_Q.sha256)
    assert per_text.read_bytes() == good
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_batch_inputs_index_each_texts_rows_and_pad_with_the_zero_row() -> None:
    feed = batch_inputs([2, 3, 1])
    assert feed[TOKEN_ROWS].tolist() == [[0, 1, 6], [2, 3, 4], [5, 6, 6]]
    assert feed[TOKEN_TEXT].tolist() == [0, 0, 1, 1, 1, 2]
    assert feed[TOKEN_ROWS_BY_POSITION].tolist() == [[0, 2, 5], [1, 3, 6], [6, 4, 6]]
    # Each token's neighbours at offsets -2..2 inside its own text; outside it, the token's own
    # padding row 6 + t (the graph fills it with the zero point of the token's text).
    assert feed[TOKEN_WINDOWS].tolist() == [
        [6, 6, 0, 1, 6],
        [7, 0, 1, 7, 7],
        [8, 8, 2, 3, 4],
        [9, 2, 3, 4, 9],
        [2, 3, 4, 10, 10],
        [11, 11, 5, 11, 11],
    ]
    with pytest.raises(ValueError):
        batch_inputs([])
    with pytest.raises(ValueError):
        batch_inputs([2, 0])


@needs_model
def test_rewrite_reads_windows_and_one_embedding_table(tmp_path: Path) -> None:
    """Rewrite 6: the n-gram windows are six Gathers by TOKEN_WINDOWS and the token embeddings come
    from one interleaved table, so tf2onnx's masks, shards and scatters are gone (1,054 -> 555 nodes);
    the bit-for-bit tests above check the vectors did not move. The file name carries the version so
    code of another version never reads (or deletes and rewrites in a loop) this one."""
    assert MODEL is not None
    onnx = pytest.importorskip("onnx")
    source = tmp_path / MODEL.name
    source.symlink_to(MODEL)
    per_text, _ = ensure_derived(source, USE_M3_Q.sha256)
    assert per_text.name.endswith(f".per-text-v{REWRITE_VERSION}.onnx") and REWRITE_VERSION >= 6
    graph = onnx.load(str(per_text)).graph
    ops = [n.op_type for n in graph.node]
    assert len(ops) < 600
    # No partitioned lookup (per-shard DequantizeLinear, ScatterElements), no batch-wide quantisation,
    # no Transpose for onnxruntime's optimiser to fold into another summation order.
    assert not {"DequantizeLinear", "ScatterElements", "DynamicQuantizeLinear", "Transpose"} & set(ops)
    assert ops.count("Compress") <= 2  # only the ragged-to-sparse indices are left; the shards' 34 went
    assert sum(1 for n in graph.node if TOKEN_WINDOWS in n.input) == 6  # one window Gather per convolution
    tables = [i for i in graph.initializer if len(i.dims) == 2 and i.dims[1] == 512 and i.dims[0] > 100_000]
    assert len(tables) == 1
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_count_sorted_batches_cover_every_index_once_within_both_limits() -> None:
    counts = [5, 1, 9, 5, 2, 200, 3, 9, 1]
    batches = list(count_sorted_batches(counts, 3, 20))
    assert sorted(i for b in batches for i in b) == list(range(len(counts)))
    for b in batches:
        assert len(b) <= 3
        assert len(b) == 1 or len(b) * max(counts[i] for i in b) <= 20
    flat = [counts[i] for b in batches for i in b]
    assert flat == sorted(flat)
    assert [5] in batches  # the 200-token text is alone: over the budget by itself
    with pytest.raises(ValueError):
        list(count_sorted_batches(counts, 0, 20))


@needs_model
@pytest.mark.parametrize("pipelined", [False, True])
def test_recall_ingest_stores_each_passage_s_one_at_a_time_vector(alone: UseOnnxEmbedder, tmp_path: Path, pipelined: bool) -> None:
    """Through the index's own path: a save's messages embedded as one batch of passages (previous
    message + message, of mixed lengths and scripts) are stored with the pinned graph's vector for that
    passage alone, whatever shared their batch; the same through ``index_batches`` (bulk ingest, the
    next batch embedded while this one is written)."""
    texts = [t for t in _mixed(48, seed=11) if t.strip()]
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    messages = [
        (Message.user if i % 2 == 0 else Message.assistant)(
            text, id=f"m{i:02d}", thread_id="t", resource_id="u", created_at=start + timedelta(seconds=i)
        )
        for i, text in enumerate(texts)
    ]
    store = open_store(tmp_path / "m.db")
    try:
        store.memory.create_thread(thread_id="t", resource_id="u")
        store.memory.save_messages(messages)
        index = RecallIndex.for_store(store, UseOnnxEmbedder())
        if pipelined:
            reports = list(index.index_batches(messages[i : i + 10] for i in range(0, len(messages), 10)))
            indexed = [mid for r in reports for mid in r.indexed]
            assert not any(r.failed for r in reports)
        else:
            report = index.index_messages(messages)
            indexed = report.indexed
            assert not report.failed
        assert sorted(indexed) == sorted(m.id for m in messages)
        with store.db.read() as conn:
            stored = index.vector_set(conn, "u", None)
        assert stored is not None
        rows = dict(zip(stored.message_ids, stored.matrix))
        for i, m in enumerate(messages):
            passage = passage_text(texts[i - 1] if i else "", texts[i])
            assert np.array_equal(rows[m.id], alone.embed([passage])[0]), m.id
    finally:
        store.close()


@needs_model
def test_token_counts_follow_the_text_and_say_when_unavailable() -> None:
    counts = UseOnnxEmbedder().token_counts(["", "hello", "hello hello hello", "我对花生过敏"])
    assert min(counts) >= 2 and counts[1] < counts[2]  # begin and end tokens count too
    assert UseOnnxEmbedder().token_counts([]) == []
    with pytest.raises(EmbedderError, match="batch_size=1"):
        UseOnnxEmbedder(batch_size=1).token_counts(["hello"])
