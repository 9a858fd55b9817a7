"""Piece vectors (``core.recall.pieces``): the cutting rule, the mixed-row algebra, the save path, edits,
deletes, forget and reindex, the vector-only search that ranks a message by its best piece, the
playground's explanation, and hybrid search left as it was. libSQL (Postgres: vecpg's file)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex, pieces, piece_table, reindex
from core.recall.explain import explain_message, inspect_search
from core.recall.text import MAX_EMBED_CHARS, passage_text

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)

LONG = ("Caroline: Yesterday I repaired the old bicycle in the garage, and the chain finally runs smoothly again. "
        "Then we cooked a large dinner for the whole family - everyone loved the pumpkin soup with fresh bread. "
        "Tomorrow I will visit the museum downtown with my friends. [image: a red bicycle]")
TEXTS = [
    LONG,
    "Melanie: The museum downtown is closed on Mondays",
    "Caroline: Good to know, thanks",
    "Melanie: My kids love pottery class, and we made bowls together last weekend at the community center",
]
QUERY = "visit the museum downtown with my friends"


class Counting(HashingEmbedder):
    """The hashing embedder, keeping each call's passage texts."""

    def __init__(self, dim: int = 256) -> None:
        super().__init__(dim)
        self.calls: list[list[str]] = []

    def embed(self, texts, kind="passage"):  # type: ignore[override]
        if kind == "passage":
            self.calls.append(list(texts))
        return super().embed(texts, kind)


def seed(store, texts=TEXTS, thread: str = "t", resource: str = "u") -> list[Message]:
    store.memory.create_thread(thread_id=thread, resource_id=resource)
    msgs = [(Message.user if i % 2 == 0 else Message.assistant)(
        text, id=f"{thread}-{i}", thread_id=thread, resource_id=resource, created_at=T0 + timedelta(seconds=i))
        for i, text in enumerate(texts)]
    store.memory.save_messages(msgs)
    return msgs


def with_pieces(store, embedder=None) -> RecallIndex:
    index = RecallIndex.for_store(store, embedder or Counting())
    index.ensure_tables()
    index.set_pieces(True)  # (the hashing embedder's default is off)
    return index


def edit(store, message: Message, text: str) -> Message:
    changed = message.copy(content={"format": 2, "parts": [{"type": "text", "text": text}], "content": text})
    store.memory.save_messages([changed])
    return changed


def searched_before_and_after_pieces(index: RecallIndex) -> tuple[list, list]:
    """The vector-mode hits for ``QUERY`` over the seeded conversation (pieces off), then again once its four
    messages were given pieces (``index_pieces``)."""
    msgs = seed(index.store)
    assert index.index_messages(msgs).ok
    before = index.search(QUERY, resource_id="u", mode="vector", top_k=4).hits
    index.set_pieces(True)
    done, failed = index.index_pieces([m.id for m in msgs])
    assert not failed and done == 4
    return before, index.search(QUERY, resource_id="u", mode="vector", top_k=4).hits


def stored_pieces(index: RecallIndex, ids) -> dict:
    with index.store.db.read() as conn:
        return index.vectors.read_pieces(conn, ids)


def hashes(index: RecallIndex, ids) -> dict[str, str]:
    with index.store.db.read() as conn:
        return index.vectors.piece_hashes(conn, ids)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x)


# -- the cutting rule ------------------------------------------------------------------------------
def test_the_cut_keeps_the_label_on_each_piece_and_a_trailing_note_is_a_piece_of_its_own():
    cut = pieces.cut(LONG)
    assert cut.label == "Caroline: "
    assert cut.texts(LONG) == [
        "Caroline: Yesterday I repaired the old bicycle in the garage",
        "Caroline: and the chain finally runs smoothly again.",
        "Caroline: Then we cooked a large dinner for the whole family",
        "Caroline: everyone loved the pumpkin soup with fresh bread.",
        "Caroline: Tomorrow I will visit the museum downtown with my friends.",
        "Caroline: [image: a red bicycle]",
    ]
    assert all(LONG[a:b] in LONG for a, b in cut.spans)


def test_the_cut_leaves_short_and_single_piece_messages_whole():
    assert pieces.cut("Caroline: I went to the support group yesterday and it was really good").spans == []  # 12 words
    assert pieces.cut("no label here just one long sentence of well more than twelve words without any clause marks").spans == []
    # More than 12 words, two sentences: cut; without a label the pieces carry none.
    text = "I went to the support group yesterday. It was powerful and everyone listened to each story."
    assert pieces.cut(text).texts(text) == ["I went to the support group yesterday.",
                                            "It was powerful and everyone listened to each story."]
    # A clause part of fewer than 3 words is left out; a short sentence is kept whole.
    text = "Wow, we finally went to the lake on Sunday afternoon with the kids and the dog, yes. Great!"
    assert pieces.cut(text).texts(text) == ["we finally went to the lake on Sunday afternoon with the kids and the dog",
                                            "Great!"]


def test_the_cut_reads_only_what_the_passage_embeds_and_keeps_at_most_max_pieces():
    text = " ".join(f"Sentence number {i} is here." for i in range(2000))
    cut = pieces.cut(text)
    assert len(cut.spans) == pieces.MAX_PIECES and max(b for _, b in cut.spans) <= MAX_EMBED_CHARS


# -- the algebra -----------------------------------------------------------------------------------
def test_the_mixed_score_equals_the_cosine_of_the_unit_mixed_row():
    rng = np.random.default_rng(7)
    for _ in range(50):
        p, q = unit(rng.normal(size=32)), unit(rng.normal(size=32))
        vs = np.stack([unit(rng.normal(size=32)) for _ in range(5)])
        rows = np.stack([unit(p + v) for v in vs])
        assert np.allclose(pieces.mixed_scores(float(q @ p), vs @ q, vs @ p), rows @ q, atol=1e-12)
        best = pieces.best_mixed(q, p, vs)
        assert best.piece == int(np.argmax(rows @ q)) and best.pieces == 5
    # a piece opposite its passage makes a zero row: scored -1, never a division by zero
    assert pieces.mixed_scores(0.5, np.array([0.1]), np.array([-1.0])).tolist() == [-1.0]


# -- the save path ---------------------------------------------------------------------------------
def test_a_save_embeds_the_pieces_in_the_passages_call_and_stores_each_piece_as_embedded_alone(store):
    index = with_pieces(store)
    msgs = seed(store)
    report = index.index_messages(msgs)
    assert report.ok
    call = index.embedder.calls[-1]  # type: ignore[attr-defined]
    cut = pieces.cut(LONG)
    assert call[:4] == [passage_text("", TEXTS[0]), *(passage_text(a, b) for a, b in zip(TEXTS, TEXTS[1:]))]
    assert call[4:] == cut.texts(LONG) + pieces.cut(TEXTS[3]).texts(TEXTS[3])  # one call, passages first
    got = stored_pieces(index, [m.id for m in msgs])
    assert sorted(got) == ["t-0", "t-3"]
    alone = np.stack([HashingEmbedder(256).embed([t])[0] for t in cut.texts(LONG)]).astype(np.float32)
    assert np.array_equal(got["t-0"].vectors, alone)  # bit for bit
    assert got["t-0"].spans == tuple(cut.spans) and got["t-0"].content == LONG
    assert hashes(index, ["t-0"]) == {"t-0": pieces.text_hash(LONG)}


def test_the_hashing_embedder_writes_no_pieces_by_default(store):
    index = RecallIndex.for_store(store, HashingEmbedder(256))
    assert not index.pieces and pieces.pieces_for("use-multilingual-v3-q@b8b05b01")
    assert pieces.pieces_for("multilingual-e5-small-q4@1571fc98")  # (both local models write them, session 28)
    assert index.index_messages(seed(store)).ok
    assert stored_pieces(index, ["t-0"]) == {} and index.piece_counts() == {}


# -- search ----------------------------------------------------------------------------------------
def test_vector_mode_ranks_a_long_message_by_its_best_piece(store):
    index = RecallIndex.for_store(store, Counting())
    before, after = searched_before_and_after_pieces(index)

    assert before[0].message_id == "t-1" and [h.message_id for h in before].index("t-0") > 0
    assert after[0].message_id == "t-0"
    # Its score is the cosine of its best unit(passage + piece) row, computed here from the stored vectors.
    q = unit(np.asarray(index.embedder.embed([QUERY], kind="query")[0], dtype=np.float64))
    with store.db.read() as conn:
        vset = index.vector_set(conn, "u", None)
        assert vset is not None
        p = unit(vset.matrix[vset.positions_of("t-0")[0]].astype(np.float64))
    vs = np.stack([unit(np.asarray(v, dtype=np.float64)) for v in HashingEmbedder(256).embed(pieces.cut(LONG).texts(LONG))])
    rows = np.stack([unit(p + v) for v in vs])
    assert after[0].score == pytest.approx(float(np.max(rows @ q)), abs=1e-6)
    # A message without pieces keeps its passage cosine.
    assert next(h.score for h in after if h.message_id == "t-1") == next(h.score for h in before if h.message_id == "t-1")


def test_hybrid_answers_do_not_change_with_pieces(store, tmp_path):
    from core import open_store

    index = with_pieces(store)
    assert index.index_messages(seed(store)).ok
    other = open_store(tmp_path / "plain.db")
    try:
        plain = RecallIndex.for_store(other, Counting())
        assert plain.index_messages(seed(other)).ok and not plain.pieces
        for query in (QUERY, "pumpkin soup", "pottery bowls", "bicycle chain"):
            a = index.search(query, resource_id="u", mode="hybrid", top_k=4)
            b = plain.search(query, resource_id="u", mode="hybrid", top_k=4)
            assert a.hits == b.hits
    finally:
        other.close()


def test_a_message_without_pieces_in_a_mixed_scope_is_scored_by_its_passage(store):
    index = RecallIndex.for_store(store, Counting())
    msgs = seed(store)
    assert index.index_messages(msgs).ok  # pieces off: an existing database's single rows
    plain = {h.message_id: h.score for h in index.search(QUERY, resource_id="u", mode="vector", top_k=4).hits}
    index.set_pieces(True)
    index.index_pieces(["t-3"])  # only one message gets pieces
    mixed = {h.message_id: h.score for h in index.search(QUERY, resource_id="u", mode="vector", top_k=4).hits}
    assert sorted(stored_pieces(index, ["t-0", "t-3"])) == ["t-3"]
    assert mixed["t-0"] == plain["t-0"] and mixed["t-1"] == plain["t-1"] and mixed["t-3"] != plain["t-3"]


def test_pieces_of_another_text_than_the_passage_row_are_not_read(store):
    index = with_pieces(store)
    msgs = seed(store)
    assert index.index_messages(msgs).ok
    with store.db.write() as conn:  # another program rewrote the passage row's text, not the pieces
        conn.exec_driver_sql(f"UPDATE {index.info.name} SET metadata = json_set(metadata, '$.content', 'other') "
                             "WHERE vector_id = 't-0'")
    assert "t-0" not in stored_pieces(index, ["t-0", "t-3"]) and "t-3" in stored_pieces(index, ["t-3"])


def test_a_scope_is_known_to_have_pieces_after_another_process_writes_some(store, db_path):
    from core import open_store

    index = RecallIndex.for_store(store, Counting())
    assert index.index_messages(seed(store)).ok
    index.set_pieces(True)
    with store.db.read() as conn:
        index.vector_set(conn, "u", None)
        assert not index.vectors.has_pieces(conn, "u", None)
    other = open_store(db_path)  # another process on the same file
    try:
        writer = RecallIndex.for_store(other, Counting())
        writer.index_pieces(["t-0"])
    finally:
        other.close()
    with store.db.read() as conn:
        index.vector_set(conn, "u", None)  # (a search reads the counters first)
        assert index.vectors.has_pieces(conn, "u", None)
    assert index.search(QUERY, resource_id="u", mode="vector", top_k=1).hits[0].message_id == "t-0"


# -- edits, deletes, forget, reindex ---------------------------------------------------------------
def test_an_edit_gives_the_message_new_pieces_and_an_edit_of_its_previous_message_keeps_them(store):
    index = with_pieces(store)
    msgs = seed(store, [TEXTS[3], LONG, TEXTS[1]])
    assert index.index_messages(msgs).ok
    old = stored_pieces(index, ["t-1"])["t-1"]

    edit(store, msgs[0], "Melanie: something else entirely")  # the previous message: t-1's passage moves
    index.embedder.calls.clear()  # type: ignore[attr-defined]
    assert index.refresh_messages(["t-0"]).ok
    kept = stored_pieces(index, ["t-1"])["t-1"]
    assert np.array_equal(kept.vectors, old.vectors) and not np.array_equal(kept.passage, old.passage)
    assert not any(t in call for call in index.embedder.calls for t in pieces.cut(LONG).texts(LONG))  # type: ignore[attr-defined]

    new_text = LONG.replace("museum downtown", "aquarium by the harbour")
    edit(store, msgs[1], new_text)
    assert index.refresh_messages(["t-1"]).ok
    got = stored_pieces(index, ["t-1"])["t-1"]
    assert got.content == new_text and hashes(index, ["t-1"]) == {"t-1": pieces.text_hash(new_text)}
    # An edit to a short text leaves the message without pieces.
    edit(store, msgs[1], "Caroline: never mind")
    assert index.refresh_messages(["t-1"]).ok
    assert hashes(index, ["t-1"]) == {}


def test_deleting_a_message_a_thread_or_forgetting_the_resource_removes_its_pieces(store):
    from core.edits.forget import forget_resource

    index = with_pieces(store)
    msgs = seed(store) + seed(store, [LONG, TEXTS[1]], thread="t2")
    assert index.index_messages(msgs).ok
    table = pieces.table_name(index.dim)
    assert set(hashes(index, [m.id for m in msgs])) == {"t-0", "t-3", "t2-0"}

    store.memory.delete_messages(["t-3"])
    index.refresh_messages(["t-3"])
    assert set(hashes(index, [m.id for m in msgs])) == {"t-0", "t2-0"}

    index.delete_thread("t2")
    assert set(hashes(index, [m.id for m in msgs])) == {"t-0"}

    report = forget_resource(store, "u")
    # t-0's 6 pieces, and nothing naming the resource is left
    assert report.removed.get(f"piece vectors ({table})") == 6 and not report.leftovers
    with store.db.read() as conn:
        assert conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar() == 0


def test_a_thread_deleted_while_recall_is_off_loses_its_pieces(store):
    from core.recall import delete_thread_everywhere

    index = with_pieces(store)
    assert index.index_messages(seed(store)).ok
    delete_thread_everywhere(store, "t")
    assert hashes(index, ["t-0", "t-3"]) == {}


def test_reindex_builds_missing_pieces_and_drops_them_when_turned_off(store):
    index = RecallIndex.for_store(store, Counting())
    msgs = seed(store)
    assert index.index_messages(msgs).ok and hashes(index, ["t-0"]) == {}
    report = reindex(store, index.embedder, pieces="on")
    assert report.total == 0 and report.pieces_written == 2 and report.pieces
    assert set(hashes(index, [m.id for m in msgs])) == {"t-0", "t-3"}
    assert "Piece vectors: made for 2 long message(s) indexed before." in report.summary_lines()
    assert reindex(store, index.embedder).pieces_written == 0  # nothing left to do

    report = reindex(store, index.embedder, pieces="off")
    assert report.pieces_dropped == 2 and hashes(index, ["t-0", "t-3"]) == {} and not index.pieces
    # later saves follow the setting
    assert index.index_messages(seed(store, [LONG], thread="t3")).ok and hashes(index, ["t3-0"]) == {}


def test_reindex_gives_a_message_edited_without_recall_new_pieces(store):
    index = with_pieces(store)
    msgs = seed(store)
    assert index.index_messages(msgs).ok
    with store.db.write() as conn:  # (another program: an UPDATE of the stored text, no recall)
        text = LONG.replace("bicycle", "tricycle")
        conn.exec_driver_sql("UPDATE mastra_messages SET content = json_set(content, '$.content', ?, "
                             "'$.parts[0].text', ?) WHERE id = 't-0'", (text, text))
    report = reindex(store, index.embedder)
    assert not report.failed and report.changed == 2  # (it, and the next message: its context)
    assert hashes(index, ["t-0"]) == {"t-0": pieces.text_hash(text)}


# -- the playground --------------------------------------------------------------------------------
def test_the_explanation_names_the_winning_piece(store):
    index = with_pieces(store)
    assert index.index_messages(seed(store)).ok
    ins = inspect_search(index, QUERY, resource_id="u", top_k=2)
    why = explain_message(index, "t-0", ins).placements["vector"].why
    assert "best of 6 pieces" in why and "Caroline: Tomorrow I will visit the museum downtown with my friends." in why
    assert "rank 1 there" in why
    why = explain_message(index, "t-1", ins).placements["vector"].why
    assert "keeps its passage similarity (it has no pieces" in why


def test_the_explanation_says_when_a_message_was_outside_the_rescored_passages(store, monkeypatch):
    monkeypatch.setattr(pieces, "RESCORED", 1)
    index = with_pieces(store)
    assert index.index_messages(seed(store)).ok
    ins = inspect_search(index, "pottery", resource_id="u", top_k=1)
    assert len(ins.rescored) == 1 and ins.rescored != ["t-0"]
    why = explain_message(index, "t-0", ins).placements["vector"].why
    assert "re-scores the best 1 passages by their pieces; this message is outside them" in why


def test_piece_counts_per_model_for_the_studio(store):
    from core.recall.models import stored_piece_counts

    index = with_pieces(store)
    assert index.index_messages(seed(store)).ok
    assert index.piece_counts() == {index.model_id: 2}
    assert stored_piece_counts(store) == {index.model_id: 2}
    with store.db.read() as conn:
        assert piece_table.every_table(conn) == [pieces.table_name(index.dim)]


def test_imported_messages_get_pieces_as_a_save_does(store):
    """Export carries no vectors; an import embeds its messages through the index (``index_for_recall``),
    so they get pieces under the same setting as a save."""
    from core.transfer.recall import index_for_recall

    with_pieces(store)
    store.memory.create_thread(thread_id="t", resource_id="u")
    msgs = [Message.user(LONG, id="imp-0", thread_id="t", resource_id="u", created_at=T0)]
    store.memory.save_messages(msgs)
    done = index_for_recall(store, ["imp-0"], Counting())
    assert done.indexed == 1 and done.failed == 0
    assert hashes(RecallIndex.for_store(store, Counting()), ["imp-0"]) == {"imp-0": pieces.text_hash(LONG)}


class NotFinitePieces(Counting):
    """Counting, but a piece mentioning the museum is embedded as NaN (an embedder's fault)."""

    def embed(self, texts, kind="passage"):  # type: ignore[override]
        out = np.asarray(super().embed(texts, kind), dtype=np.float32)
        for i, text in enumerate(texts):
            if "museum" in text and any(text == t for body in (LONG, LONG.replace("bicycle", "tricycle"))
                                        for t in pieces.cut(body).texts(body)):  # (that piece, never a passage)
                out[i] = np.nan
        return out


def test_a_message_whose_piece_vector_is_not_finite_gets_no_pieces_and_keeps_its_passage(store):
    # At save, in a refresh after an edit and in ``index_pieces``: the message is indexed by its passage alone,
    # its pieces left out (``index_pieces`` reports it failed); the other messages get theirs.
    index = with_pieces(store, NotFinitePieces())
    msgs = seed(store)
    report = index.index_messages(msgs)
    assert report.ok and set(report.indexed) == {m.id for m in msgs}
    assert set(hashes(index, ["t-0", "t-3"])) == {"t-3"}
    edit(store, msgs[0], LONG.replace("bicycle", "tricycle"))
    assert index.refresh_messages(["t-0"]).ok
    assert set(hashes(index, ["t-0", "t-3"])) == {"t-3"}
    done, failed = index.index_pieces(["t-0", "t-3"])
    assert list(failed) == ["t-0"] and "not finite" in failed["t-0"] and done == 1
    assert set(hashes(index, ["t-0", "t-3"])) == {"t-3"}


# -- the stacked scoring ---------------------------------------------------------------------------
WORDS = ("museum garage bicycle chain dinner family soup bread friends pottery bowls kids class weekend lake dog "
         "painting sunset camping tent river guitar concert school teacher garden tomatoes rain morning coffee").split()


def many_long(rng: np.random.Generator, count: int) -> list[str]:
    """Messages of 1-4 sentences of 4-16 words (some with a clause mark), a few short ones: most get pieces."""
    out = []
    for i in range(count):
        sentences = []
        for _ in range(int(rng.integers(1, 5))):
            words = [str(w) for w in rng.choice(WORDS, int(rng.integers(4, 17)))]
            if len(words) > 8 and rng.random() < 0.5:
                words[len(words) // 2] += ","
            sentences.append(" ".join(words).capitalize() + ".")
        out.append(f"{'Caroline' if i % 2 == 0 else 'Melanie'}: " + " ".join(sentences))
    return out


def scoring_index(store, count: int = 120) -> tuple[RecallIndex, list[Message]]:
    index = with_pieces(store)
    msgs = seed(store, many_long(np.random.default_rng(7), count))
    assert index.index_messages(msgs).ok
    return index, msgs


def test_vector_search_scores_each_message_by_its_best_mixed_row_and_ranks_by_those_scores(store):
    from core.recall import search

    index, msgs = scoring_index(store)
    held = stored_pieces(index, [m.id for m in msgs])
    assert 60 < len(held) < len(msgs)  # (both kinds of message in the scope)
    for query in ("bicycle chain in the garage", "soup and bread for dinner", "guitar concert at school, rain"):
        run = search.run(index, query, resource_id="u", thread_id=None, top_k=len(msgs), mode="vector")
        assert run.qvec is not None and run.vset is not None and len(run.vector) == len(msgs)
        q = np.asarray(run.qvec, dtype=np.float32)
        q = q / np.linalg.norm(q)
        for hit in run.vector:
            entry = held.get(hit.message_id)
            if entry is None:  # the scan's cosine, as a search without pieces gives it
                assert hit.message_id not in run.by_piece
                continue
            best = pieces.best_mixed(q, entry.passage, entry.vectors)
            assert hit.score == pytest.approx(best.score, abs=1e-6)
            chosen, text = run.by_piece[hit.message_id]
            assert (chosen.pieces, chosen.score) == (best.pieces, hit.score)
            a, b = entry.spans[chosen.piece]
            assert text == pieces.label_of(entry.content) + entry.content[a:b]
            every = pieces.mixed_scores(float(entry.passage @ q), entry.vectors @ q, entry.vectors @ entry.passage)
            if np.sort(every)[-2] < best.score - 1e-6:
                assert chosen.piece == best.piece  # (a clear winner: the same piece)
        scores = [h.score for h in run.vector]
        assert scores == sorted(scores, reverse=True)
        plain = {h.message_id: h.score for h in run.vset.ranked(run.qvec, len(msgs), None)}
        assert {h.message_id: h.score for h in run.vector if h.message_id not in held} == {
            m: s for m, s in plain.items() if m not in held}


def test_the_dots_a_read_keeps_are_the_stacked_ones_to_the_bit_and_answer_the_same(store):
    from core.recall import search

    index, msgs = scoring_index(store)
    assert pieces.dots_by_row(256) and pieces.dots_by_row(384) and pieces.dots_by_row(512)
    info, table = index.info, index.vectors.pieces_table
    with store.db.read() as conn:  # (read from the file, not the cache)
        read = piece_table.read(conn, table, info, index.model_id, [m.id for m in msgs])
    assert read and all(e.passage_dots is not None for e in read.values())
    rng = np.random.default_rng(3)
    ids = sorted(read)
    for size in (1, 2, 5, 17, 40, len(ids)):  # stacks of other messages, in other orders
        chosen = [ids[i] for i in rng.permutation(len(ids))[:size]]
        vecs = np.concatenate([read[m].vectors for m in chosen])
        whole = np.stack([read[m].passage for m in chosen])
        of = np.repeat(np.arange(size), [len(read[m].spans) for m in chosen])
        stacked = np.einsum("ij,ij->i", vecs, whole[of], dtype=np.float64)
        assert np.array_equal(stacked, np.concatenate([read[m].passage_dots for m in chosen]))

    class Reads:  # a backend answering what the table holds, with or without the dots
        estimates_pieces = False  # (reads every message, as libSQL's)

        def __init__(self, keep: bool) -> None:
            self.keep = keep

        def read_pieces(self, conn, message_ids):
            got = piece_table.read(conn, table, info, index.model_id, message_ids)
            return got if self.keep else {m: e._replace(passage_dots=None) for m, e in got.items()}

    for query in ("bicycle chain in the garage", "tomatoes in the garden", "camping tent by the river"):
        through = search.run(index, query, resource_id="u", thread_id=None, top_k=30, mode="vector")  # (the cache)
        answers = []
        for keep in (True, False):
            out = search.SearchRun(mode="vector", scope="u")
            with store.db.read() as conn:
                vset = index.vector_set(conn, "u", None)
                assert vset is not None
                wide = vset.ranked(through.qvec, max(pieces.RESCORED, 30), None)
                answers.append((search._with_pieces(Reads(keep), conn, out, wide, through.qvec, 30), out.by_piece))
        assert answers[0] == answers[1] == (through.vector, through.by_piece)
        assert len(through.vector) == 30 and through.by_piece
