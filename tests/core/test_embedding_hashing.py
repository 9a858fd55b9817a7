"""HashingEmbedder: the offline lexical stand-in must be deterministic and rank by shared words."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from core.embedding import Embedder, HashingEmbedder


def test_satisfies_the_embedder_protocol_and_names_itself_as_hashing() -> None:
    emb = HashingEmbedder(dim=64)
    assert isinstance(emb, Embedder)
    assert emb.model_id.startswith("hashing-")
    assert "64" in emb.model_id
    assert HashingEmbedder(dim=128).model_id != emb.model_id
    assert emb.semantic is False


def test_shape_dtype_and_unit_length_even_for_empty_and_punctuation() -> None:
    emb = HashingEmbedder(dim=32)
    vecs = emb.embed(["hello world", "", "!!!", "我对花生过敏", "🙂 emoji only"])
    assert vecs.shape == (5, 32)
    assert vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-6)
    assert emb.embed([]).shape == (0, 32)


def test_identical_text_gives_identical_vector_across_instances_and_kinds() -> None:
    a = HashingEmbedder().embed(["The cat sat on the mat"], "passage")
    b = HashingEmbedder().embed(["The cat sat on the mat"], "query")
    assert np.array_equal(a, b)


def test_vectors_do_not_depend_on_the_process_hash_seed() -> None:
    # Python's hash() is salted per process; vectors stored yesterday must match today's queries.
    code = (
        "from core.embedding import HashingEmbedder; "
        "print(HashingEmbedder().embed(['stable words'])[0].tobytes().hex())"
    )
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outputs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                   check=True).stdout)
    assert len(outputs) == 1
    assert HashingEmbedder().embed(["stable words"])[0].tobytes().hex() + "\n" in outputs


def test_shared_words_rank_first_among_distractors() -> None:
    emb = HashingEmbedder(dim=256)
    passages = [
        "The weather is lovely today",
        "I am allergic to peanuts",
        "Let's meet at the station at 3pm",
        "My favourite colour is green",
    ]
    scores = emb.embed(passages) @ emb.embed(["what is she allergic to? peanuts?"], "query")[0]
    assert int(np.argmax(scores)) == 1


def test_character_ngrams_tolerate_inflection() -> None:
    emb = HashingEmbedder(dim=256)
    base, inflected, other = emb.embed(["allergies", "allergy", "railway"])
    assert float(base @ inflected) > float(base @ other)


def test_chinese_shares_characters() -> None:
    emb = HashingEmbedder(dim=256)
    passages = ["我对花生过敏", "今天天气很好", "明天下午三点开会"]
    scores = emb.embed(passages) @ emb.embed(["她对什么过敏?"], "query")[0]
    assert int(np.argmax(scores)) == 0


def test_rejects_a_bare_string_and_an_unknown_kind() -> None:
    emb = HashingEmbedder()
    with pytest.raises(TypeError):
        emb.embed("not a list")
    with pytest.raises(ValueError, match="kind"):
        emb.embed(["x"], "document")  # type: ignore[arg-type]


def test_a_batch_gives_the_vectors_of_summing_each_feature_one_text_at_a_time() -> None:
    # The batched path (cached word features joined once) must equal the plain definition: every
    # feature of ``_features`` added to its signed bucket, text by text, then L2-normalised.
    from core.embedding.base import l2_normalise
    from core.embedding.hashing import _bucket, _features

    texts = ["Hello world, hello!", "我对花生过敏 iphone手机", "", "  ", "!!!", "🙂",
             "Caroline's LGBTQ support group on 9 October 2022?", "ü é café naïve", "a a a a b"] * 2
    for dim in (8, 64):
        emb = HashingEmbedder(dim)
        expected = np.zeros((len(texts), dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature, weight in _features(text):
                bucket, sign = _bucket(feature, dim)
                expected[row, bucket] += sign * weight
        expected = l2_normalise(expected)
        batch = emb.embed(texts)
        assert batch.dtype == np.float32
        assert np.array_equal(batch, expected)
        assert all(np.array_equal(emb.embed([t])[0], batch[i]) for i, t in enumerate(texts))


def _reference(texts: list[str], dim: int) -> np.ndarray:
    """The plain definition: every feature of the whole text added to its signed bucket, then L2-normalised."""
    from core.embedding.base import l2_normalise
    from core.embedding.hashing import _bucket, _features

    expected = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        for feature, weight in _features(text):
            bucket, sign = _bucket(feature, dim)
            expected[row, bucket] += sign * weight
    return l2_normalise(expected)


def test_texts_of_several_lines_give_the_vectors_of_the_whole_text() -> None:
    # Lines are featurised once per batch and summed per text (a recall passage is the previous
    # message, a newline, the message): the vectors must be those of featurising each text whole,
    # bit for bit, whatever normalisation does next to a newline (combining marks, Hangul jamo that
    # compose when adjacent, ligatures, final sigma) and for texts whose lines have no words.
    texts = ["message one\nmessage two", "message two\nmessage three", "message one", "\n", "\n\n", "!!!\n...",
             "\nhello", "hello\n", "e\n\u0301x", "\u1100\n\u1161", "\u1100\u1161\nx", "ﬁ\nﬂ ﬁne", "ΟΔΟΣ\nσ ς",
             "我对花生过敏\n她对什么过敏", "café\ncafe\u0301", "a\n\n\nb", "", "!!!", "x\r\ny", "Ⅻ\n①"]
    for dim in (8, 64):
        emb = HashingEmbedder(dim)
        batch = emb.embed(texts)
        assert np.array_equal(batch, _reference(texts, dim))
        assert all(np.array_equal(emb.embed([t])[0], batch[i]) for i, t in enumerate(texts))
    rng = np.random.default_rng(20)
    alphabet = list("ab Z9_.\n\n") + ["\u0301", "\u0308", "\u1100", "\u1161", "\u11a8", "é", "ﬁ", "Σ", "ς", "花", "生",
                                          "\uac00", "①", "\u00a0", "\u200b"]
    texts = ["".join(rng.choice(alphabet, size=int(rng.integers(0, 14)))) for _ in range(400)]
    assert np.array_equal(HashingEmbedder(16).embed(texts), _reference(texts, 16))


def test_a_batch_of_many_new_words_is_featurised_in_one_pass_with_the_same_vectors() -> None:
    # New words are added to the feature table together (``_FeatureTable._add_all``): the table must
    # grow past its initial arrays, repeated new words in one batch get one id, and a table cleared
    # past ``MAX_WORDS`` is rebuilt; the vectors are the plain definition's every time.
    from core.embedding import hashing

    dim = 24  # a dimension no other test uses: its table starts empty here
    hashing._tables.pop(dim, None)
    words = [f"w{i}x" for i in range(3000)] + ["花生过敏", "ÉCOLE", "naïve"]
    texts = [" ".join(words[i:i + 7]) + " w1x w1x" for i in range(0, len(words), 5)]
    assert np.array_equal(HashingEmbedder(dim).embed(texts), _reference(texts, dim))
    table = hashing._table(dim)
    assert len(table._ids) == len(set(words) | {"w1x"})
    assert table._used == sum(int(table._size[i]) for i in table._ids.values())
    again = [f"{t} w{len(words) + i}y" for i, t in enumerate(texts)]  # old and new words mixed
    assert np.array_equal(HashingEmbedder(dim).embed(again), _reference(again, dim))
    small = hashing._FeatureTable.MAX_WORDS
    try:
        hashing._FeatureTable.MAX_WORDS = 100  # the next call forgets, then adds this batch's words
        assert np.array_equal(HashingEmbedder(dim).embed(texts[:3]), _reference(texts[:3], dim))
        assert len(table._ids) <= 3 * 9
    finally:
        hashing._FeatureTable.MAX_WORDS = small
        hashing._tables.pop(dim, None)


_LINE = st.text(alphabet=st.sampled_from(list("ab Z9_.,") + ["é", "ﬁ", "Σ", "ς", "花", "生", "\u0301", "\u00a0"]),
                max_size=12)


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.lists(_LINE, min_size=1, max_size=3), min_size=1, max_size=8),
       uniform=st.integers(min_value=0, max_value=3))
def test_batches_of_texts_of_equal_or_mixed_line_counts_give_the_plain_vectors(lines: list[list[str]],
                                                                             uniform: int) -> None:
    # Texts of k lines each are summed by k slices (``embed``), others by ``reduceat``; a table that
    # starts empty hashes each new feature once (``_FeatureTable._signed``), one met again is looked up,
    # and a repeated new feature in one batch gets one hash: every path gives the plain definition's vectors.
    from core.embedding import hashing

    texts = ["\n".join((parts * uniform)[:uniform]) for parts in lines] if uniform else ["\n".join(p) for p in lines]
    dim = 40  # a dimension no other test uses
    hashing._tables.pop(dim, None)
    try:
        first = HashingEmbedder(dim).embed(texts)  # every feature new to the table
        assert np.array_equal(first, _reference(texts, dim))
        assert np.array_equal(HashingEmbedder(dim).embed(texts[::-1]), first[::-1])  # every one met before
    finally:
        hashing._tables.pop(dim, None)


def test_the_hashing_embedder_is_rebuilt_from_its_model_id() -> None:
    for dim in (8, 64, 256):
        rebuilt = HashingEmbedder.for_model_id(HashingEmbedder(dim).model_id)
        assert rebuilt is not None and rebuilt.dim == dim
        np.testing.assert_array_equal(rebuilt.embed(["peanut allergy"]), HashingEmbedder(dim).embed(["peanut allergy"]))
    for other in (None, "", "hashing-ngram-v1@d", "hashing-ngram-v1@dx", "hashing-ngram-v1@d4", "use-multilingual-v3-q@b8b05b01"):
        assert HashingEmbedder.for_model_id(other) is None


@pytest.mark.backends
def test_a_database_indexed_with_hashing_vectors_is_searched_with_them(db_path) -> None:
    """The demo built without the model stores hashing vectors: a Memory without an embedder (and the
    Studio, through the same ``store_embedder``) rebuilds that embedder instead of asking for a model
    whose vectors the database does not hold."""
    import core
    from core.memory import Memory
    from core.messages import Message
    from core.options import MemoryOptions
    from core.recall.models import store_embedder, stored_model

    facts = ["I am allergic to peanuts", "The train to Lisbon leaves at 9am", "My sister lives in Porto"]
    with core.open_store(db_path) as store:
        m = Memory(store, MemoryOptions(semantic_recall=True), embedder=HashingEmbedder(256))
        m.save_messages([Message.user(t, id=f"m{i}", thread_id="t", resource_id="u") for i, t in enumerate(facts)])
    with core.open_store(db_path) as store:
        assert stored_model(store) == "hashing-ngram-v1@d256"
        shared = store_embedder(store)
        assert shared.model_id == "hashing-ngram-v1@d256" and store_embedder(store) is shared
        assert store_embedder(store, shared=False) is not shared
        m = Memory(store, MemoryOptions(semantic_recall=True))
        assert m.embedder is not None and m.embedder.model_id == "hashing-ngram-v1@d256"
        assert m.search("train to Lisbon", resource_id="u", mode="vector", top_k=1)[0].message_id == "m1"


def test_ascii_lines_are_cut_into_the_words_the_regex_finds() -> None:
    # An ASCII line is cut by a byte translation and a split instead of NFKC, case folding and \w+:
    # the same words for every ASCII character (control characters, punctuation, capitals, "_"),
    # and the regex for any other line. Checked against the definition over random ASCII lines.
    import random
    import re
    import unicodedata

    from core.embedding.hashing import _words

    def regex(line: str) -> list[str]:
        return re.findall(r"\w+", unicodedata.normalize("NFKC", line).casefold())

    rnd = random.Random(7)
    alphabet = [chr(c) for c in range(128)]
    lines = ["", " ", "Hello, World!", "Caroline's LGBTQ_group: 9 Oct 2022?", "a\tb\x00c\x7fD", "x\r\ny",
             *("".join(rnd.choice(alphabet) for _ in range(rnd.randrange(40))) for _ in range(3000))]
    for line in lines:
        assert _words(line) == regex(line), repr(line)
    for line in ["Straße ÉCOLE", "ﬁne Ⅻ", "我对花生过敏 ok", "ΟΔΟΣ"]:  # not ASCII: the regex itself
        assert _words(line) == regex(line)
    emb = HashingEmbedder(64)
    texts = ["Message number 12, about TOPIC_7!\nwith some words", "plain words", "Ünïcode line\nASCII line"]
    assert np.array_equal(emb.embed(texts), _reference(texts, 64))
