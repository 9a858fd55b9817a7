"""The default local embedder (USE-multilingual-v3, quantized ONNX) on the real model file.

``make install`` provisions the model before tests run, so these tests normally run; they skip only
when the file is absent, and the skip reason says how to install it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from core.embedding import CachedEmbedder, Embedder, ModelChecksumError, ModelNotInstalledError
from core.embedding.provision import USE_M3_Q, model_path, verify
from core.embedding.use_onnx import UseOnnxEmbedder


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


@pytest.fixture(scope="module")
def use() -> UseOnnxEmbedder:
    return UseOnnxEmbedder()


def test_model_id_names_the_model_and_its_hash() -> None:
    emb = UseOnnxEmbedder(path=Path("/nonexistent/model.onnx"))
    assert emb.model_id == "use-multilingual-v3-q@b8b05b01"
    assert emb.dim == 512
    assert isinstance(emb, Embedder)


def test_a_missing_model_fails_at_check_with_the_command_to_run(tmp_path: Path) -> None:
    emb = UseOnnxEmbedder(path=tmp_path / "absent.onnx")  # construction is lazy and must not fail
    for attempt in (emb.check, lambda: emb.embed(["hello"])):
        with pytest.raises(ModelNotInstalledError) as info:
            attempt()
        assert "memory-studio models install" in str(info.value)
        assert "make models" in str(info.value)
    assert not emb.loaded
    with pytest.raises(ModelNotInstalledError, match="memory-studio models install"):
        CachedEmbedder(emb).check()


def test_a_file_that_is_not_the_pinned_model_is_refused(tmp_path: Path) -> None:
    impostor = tmp_path / "use-multilingual-v3-q.onnx"
    impostor.write_bytes(b"\x08\x07" * 1000)
    emb = UseOnnxEmbedder(path=impostor)
    with pytest.raises(ModelChecksumError, match="Refusing to load"):
        emb.check()
    with pytest.raises(ModelChecksumError):
        emb.embed(["hello"])
    assert not emb.loaded


@needs_model
def test_shapes_dtype_and_unit_length(use: UseOnnxEmbedder) -> None:
    texts = ["Hello there", "我对花生过敏", "", "🙂🙂🙂", "word " * 400, "tab\tand\nnewline"]
    vecs = use.embed(texts)
    assert vecs.shape == (len(texts), 512)
    assert vecs.dtype == np.float32
    assert np.isfinite(vecs).all()
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert use.embed([]).shape == (0, 512)
    assert use.loaded and use.load_seconds is not None


@needs_model
def test_a_vector_depends_only_on_its_text(use: UseOnnxEmbedder) -> None:
    # The pinned graph quantises per batch, so batches run through the per-text rewrite; a vector is
    # bit-identical whatever shares its call, and across instances (re-embeds, replays).
    alone = use.embed(["I am allergic to peanuts"])[0]
    again = use.embed(["I am allergic to peanuts"])[0]
    in_company = use.embed(["a long unrelated sentence about trains and weather", "I am allergic to peanuts", "x"])[1]
    fresh = UseOnnxEmbedder().embed(["I am allergic to peanuts"])[0]
    assert np.array_equal(alone, again)
    assert np.array_equal(alone, in_company)
    assert np.array_equal(alone, fresh)
    assert np.array_equal(use.embed(["same"], "query"), use.embed(["same"], "passage"))


@needs_model
def test_batched_vectors_are_bit_identical_to_one_at_a_time(use: UseOnnxEmbedder) -> None:
    # A batch runs as true batches of similar token count on parallel workers: every vector equals
    # the one the same text gets alone (the pinned graph), with one worker or two, in any order.
    texts = [f"message {i}: " + "word " * (i % 9) + ("我对花生过敏" if i % 5 == 0 else "") for i in range(60)]
    texts += ["", "a", "Caroline: I went to the LGBTQ support group yesterday and it was so powerful."]
    batched = use.embed(texts)
    alone = np.stack([use.embed([t])[0] for t in texts])
    other_threads = UseOnnxEmbedder(threads=1).embed(texts[::-1])[::-1]
    assert batched.dtype == np.float32 and batched.shape == (len(texts), 512)
    assert np.array_equal(batched, alone)
    assert np.array_equal(batched, other_threads)


@needs_model
def test_every_batch_size_keeps_input_order_and_gives_the_same_vectors(use: UseOnnxEmbedder) -> None:
    texts = [f"message {i}: " + "word " * (i % 7) for i in range(70)]
    exact = use.embed(texts)
    for batch_size in (1, 3, 16, 64):
        assert np.array_equal(UseOnnxEmbedder(batch_size=batch_size).embed(texts), exact), batch_size


@needs_model
def test_a_chinese_question_finds_the_fact_in_chinese_and_in_english(use: UseOnnxEmbedder) -> None:
    facts = ["我对花生过敏", "I am allergic to peanuts"]
    distractors = [
        "明天下午三点开会",
        "The train to Lisbon leaves at 9am",
        "我喜欢在周末去公园散步",
        "Please send me the quarterly report",
        "今天天气很好",
        "My laptop charger is broken",
    ]
    passages = distractors[:3] + [facts[0]] + distractors[3:] + [facts[1]]
    scores = use.embed(passages) @ use.embed(["她对什么过敏?"], "query")[0]
    top_two = {passages[i] for i in np.argsort(-scores)[:2]}
    assert top_two == set(facts)


@needs_model
def test_cache_in_front_of_the_model_counts_hits() -> None:
    cache = CachedEmbedder(UseOnnxEmbedder())
    first = cache.embed(["我对花生过敏", "I am allergic to peanuts"])
    second = cache.embed(["I am allergic to peanuts"], "query")  # USE has no prefixes: a hit
    assert (cache.hits, cache.misses) == (1, 2)
    assert np.array_equal(second[0], first[1])
    assert cache.model_id == USE_M3_Q.model_id


@needs_model
def test_concurrent_first_use_loads_once_and_agrees(use: UseOnnxEmbedder) -> None:
    emb = UseOnnxEmbedder()
    expected = use.embed(["shared text"])
    results: list[np.ndarray] = []
    start = threading.Barrier(4)

    def worker() -> None:
        start.wait()
        results.append(emb.embed(["shared text"]))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    assert all(np.array_equal(r, expected) for r in results)


LOAD_AND_EMBED = """
import sys
from core.embedding.use_onnx import UseOnnxEmbedder
emb = UseOnnxEmbedder()
emb.check()
print(emb.embed(["where do we meet?"], "query").shape)
print(sorted(name for name in ("onnx", "ml_dtypes", "onnxruntime_extensions") if name in sys.modules))
"""


@needs_model
def test_loading_the_model_imports_neither_onnx_nor_ml_dtypes() -> None:
    """A search's first embed loads the model on a worker; the extensions package's ``__init__`` imports
    ``onnx`` and ``ml_dtypes`` (whose compiled module holds the GIL ~0.5 s: the Studio's UI thread froze
    on the first recall search). Only the custom-ops library's path is needed, found without them."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", LOAD_AND_EMBED], cwd=repo, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(repo)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["(1, 512)", "[]"]
