"""Edits follow: ``RecallIndex.refresh_messages`` and ``reindex`` on a changed or deleted message
rebuild its rows and its next message's passage, on libSQL and on Postgres."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex, reindex
from core.recall.text import passage_text

pytestmark = pytest.mark.backends

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


class Counting(HashingEmbedder):
    """The hashing embedder, keeping the passages it was asked to embed."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__(dim)
        self.seen: list[str] = []

    def embed(self, texts, kind="passage"):  # type: ignore[override]
        if kind == "passage":
            self.seen.extend(texts)
        return super().embed(texts, kind)


def seed(store, texts: list[str], thread: str = "t", resource: str = "u") -> list[Message]:
    store.memory.create_thread(thread_id=thread, resource_id=resource)
    msgs = [
        (Message.user if i % 2 == 0 else Message.assistant)(
            text, id=f"{thread}-{i}", thread_id=thread, resource_id=resource, created_at=T0 + timedelta(seconds=i)
        )
        for i, text in enumerate(texts)
    ]
    store.memory.save_messages(msgs)
    return msgs


def edit(store, message: Message, text: str) -> Message:
    changed = message.copy(content={"format": 2, "parts": [{"type": "text", "text": text}], "content": text})
    store.memory.save_messages([changed])
    return changed


def cosine_to(index: RecallIndex, passage: str, message_id: str) -> float | None:
    """Cosine between the stored vector of a message and the embedding of ``passage`` (1.0: that passage)."""
    qvec = index.embedder.embed([passage], kind="passage")[0]
    with index.store.db.read() as conn:
        vset = index.vector_set(conn, "u", None)
    assert vset is not None
    return vset.cosines(np.asarray(qvec, dtype=np.float32), [message_id]).get(message_id)


def keyword_ids(index: RecallIndex, query: str) -> list[str]:
    return [h.message_id for h in index.search(query, resource_id="u", mode="keyword", top_k=10).hits]


TEXTS = ["My sister lives in Lisbon", "Lisbon is lovely in spring", "We should visit her in May", "Book the flights"]


def test_an_edited_message_gets_a_new_vector_and_keyword_doc_and_so_does_its_next(store):
    msgs = seed(store, TEXTS)
    index = RecallIndex.for_store(store, Counting())
    assert index.index_messages(msgs).ok
    edit(store, msgs[1], "Porto is lovely in autumn")
    index.embedder.seen.clear()  # type: ignore[attr-defined]

    report = index.refresh_messages(["t-1"])

    assert report.ok and report.indexed == ["t-1", "t-2"] and sorted(report.keyword_indexed) == ["t-1", "t-2"]
    assert report.removed == [] and report.unchanged == []
    # The message is embedded with its previous message; the next one embeds the new text as its context.
    assert index.embedder.seen == [  # type: ignore[attr-defined]
        passage_text(TEXTS[0], "Porto is lovely in autumn"), passage_text("Porto is lovely in autumn", TEXTS[2]),
    ]
    assert cosine_to(index, passage_text(TEXTS[0], "Porto is lovely in autumn"), "t-1") == pytest.approx(1.0, abs=1e-5)
    assert cosine_to(index, passage_text("Porto is lovely in autumn", TEXTS[2]), "t-2") == pytest.approx(1.0, abs=1e-5)
    assert "t-1" in keyword_ids(index, "autumn") and "t-1" not in keyword_ids(index, "spring")
    assert keyword_ids(index, "spring") == []  # no context column still holds the old text either
    assert "t-2" in keyword_ids(index, "porto")  # the next message's context is the new text


def test_refreshing_an_unchanged_message_writes_nothing(store):
    msgs = seed(store, TEXTS)
    index = RecallIndex.for_store(store, Counting())
    index.index_messages(msgs)
    index.embedder.seen.clear()  # type: ignore[attr-defined]

    report = index.refresh_messages(["t-1", "t-3"])

    assert report.unchanged == ["t-1", "t-3"]
    assert report.indexed == report.keyword_indexed == report.removed == [] and report.ok
    assert index.embedder.seen == []  # type: ignore[attr-defined]


def test_a_deleted_message_loses_its_rows_and_its_next_message_is_rebuilt(store):
    msgs = seed(store, TEXTS)
    index = RecallIndex.for_store(store, Counting())
    index.index_messages(msgs)
    store.memory.delete_messages(["t-1"])
    index.embedder.seen.clear()  # type: ignore[attr-defined]

    report = index.refresh_messages(["t-1"])

    assert report.removed == ["t-1"] and report.indexed == ["t-2"] and report.keyword_indexed == ["t-2"]
    assert index.embedder.seen == [passage_text(TEXTS[0], TEXTS[2])]  # type: ignore[attr-defined]
    assert cosine_to(index, passage_text(TEXTS[0], TEXTS[2]), "t-2") == pytest.approx(1.0, abs=1e-5)
    assert cosine_to(index, passage_text(TEXTS[0], TEXTS[1]), "t-1") is None
    hits = index.search("Lisbon lovely spring", resource_id="u", mode="hybrid", top_k=10).hits
    assert "t-1" not in {h.message_id for h in hits}
    assert keyword_ids(index, "spring") == []


def test_a_message_emptied_or_never_indexed_is_handled(store):
    msgs = seed(store, TEXTS)
    index = RecallIndex.for_store(store, Counting())
    index.index_messages(msgs[:3])  # the last message was never indexed
    edit(store, msgs[0], "   ")

    report = index.refresh_messages(["t-0", "t-3", "no-such-message"])

    assert report.skipped == {"t-0": "no text to index"}
    assert report.removed == ["t-0"]
    assert report.indexed == ["t-3", "t-1"]  # t-3 asked for and missing: indexed now
    assert report.unchanged == ["no-such-message"]
    # t-1's context (t-0) is now empty: it is rebuilt too, though nobody named it.
    assert cosine_to(index, passage_text("   ", TEXTS[1]), "t-1") == pytest.approx(1.0, abs=1e-5)


def test_a_failed_re_embedding_drops_the_stale_vector_and_says_so(store):
    msgs = seed(store, TEXTS)
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    index.index_messages(msgs)
    edit(store, msgs[3], "Book the trains instead")

    class Broken(HashingEmbedder):
        def embed(self, texts, kind="passage"):  # type: ignore[override]
            raise RuntimeError("model crashed")

    broken = type(index)(store, Broken(64))  # the same model id, an embedder that fails
    report = broken.refresh_messages(["t-3"])
    assert "model crashed" in report.failed["t-3"]
    assert report.keyword_indexed == ["t-3"]  # the keyword doc does not need the model
    assert cosine_to(index, passage_text(TEXTS[2], TEXTS[3]), "t-3") is None
    assert "t-3" in keyword_ids(index, "trains")


def test_refresh_on_a_read_only_store_writes_nothing_and_says_why(store, db_path):
    from core import open_store

    msgs = seed(store, TEXTS)
    RecallIndex.for_store(store, HashingEmbedder(64)).index_messages(msgs)
    edit(store, msgs[1], "Porto is lovely in autumn")
    reader = open_store(db_path, read_only=True)
    try:
        report = RecallIndex.for_store(reader, HashingEmbedder(64)).refresh_messages(["t-1"])
    finally:
        reader.close()
    assert "read-only" in report.failed["t-1"]
    with pytest.raises(TypeError):
        RecallIndex.for_store(store, HashingEmbedder(64)).refresh_messages("t-1")  # type: ignore[arg-type]


def test_reindex_re_embeds_rows_whose_content_changed(store):
    msgs = seed(store, TEXTS)
    embedder = Counting()
    RecallIndex.for_store(store, embedder).index_messages(msgs)
    edit(store, msgs[2], "We should visit her in June")  # changed behind the index's back
    embedder.seen.clear()

    report = reindex(store, embedder)

    assert report.changed == 2 and report.total == 2 and report.indexed == 2 and report.already_indexed == 2
    assert embedder.seen == [
        passage_text(TEXTS[1], "We should visit her in June"), passage_text("We should visit her in June", TEXTS[3]),
    ]
    index = RecallIndex.for_store(store, embedder)
    assert cosine_to(index, passage_text("We should visit her in June", TEXTS[3]), "t-3") == pytest.approx(1.0, abs=1e-5)
    again = reindex(store, embedder)
    assert again.total == 0 and again.changed == 0 and again.already_indexed == 4


def test_a_turn_saved_into_the_middle_of_its_thread_rebuilds_the_next_messages_passage(store):
    # Two turns at once on one thread (two gateway requests, two processes): the turn that started first is
    # saved last, its messages among the other turn's. The other turn's user message then follows this
    # turn's input, but its passage still held the message before it: `reindex` found it "changed since"
    # (42 of 180 messages after three processes ran 30 turns each on one thread).
    from core import Memory, MemoryOptions

    embedder = Counting()
    memory = Memory(store, MemoryOptions(semantic_recall={"top_k": 2}), embedder=embedder)
    memory.create_thread(thread_id="t", resource_id="u")

    def at(seconds: int, make, text: str) -> Message:  # type: ignore[no-untyped-def]
        return make(text, id=f"m{seconds}", thread_id="t", resource_id="u", created_at=T0 + timedelta(seconds=seconds))

    memory.save_messages([at(0, Message.user, "Hello there"), at(1, Message.assistant, "Hi, how can I help?")])
    memory.save_messages([at(3, Message.user, "What about cashews?"), at(4, Message.assistant, "Cashews are fine.")])
    memory.save_messages([at(2, Message.user, "I am allergic to peanuts."), at(5, Message.assistant, "Noted.")])
    index = RecallIndex.for_store(store, embedder)
    assert cosine_to(index, passage_text("I am allergic to peanuts.", "What about cashews?"), "m3") == pytest.approx(1.0)
    report = reindex(store, embedder)
    assert (report.changed, report.total) == (0, 0)
