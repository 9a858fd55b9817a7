"""A very long message or query costs recall a bounded amount of work.

A 440 kB user message of distinct words (a pasted document, or a hostile client of the gateway or the
MCP server) took 13 s of CPU per search in keyword terms alone, and USE took 35 s to embed it, once at
its save and again as a query. A search now matches the query's first ``MAX_QUERY_TERMS`` keyword terms
(and says so), and what is embedded of a message, its context and a query is capped
(``MAX_EMBED_CHARS``, ``MAX_CONTEXT_CHARS``); keyword search still reads whole messages.
"""

from __future__ import annotations

from pathlib import Path

from core import Memory, MemoryOptions, Message, open_store
from core.embedding import HashingEmbedder
from core.recall import search
from core.recall.text import (MAX_CONTEXT_CHARS, MAX_EMBED_CHARS, MAX_QUERY_TERMS, keyword_terms, passage_text,
                              query_text)


class RecordingEmbedder(HashingEmbedder):
    """The hashing embedder, keeping every text it was given."""

    def __init__(self) -> None:
        super().__init__(64)
        self.seen: list[str] = []

    def embed(self, texts, kind="passage"):  # type: ignore[override]
        self.seen.extend(texts)
        return super().embed(texts, kind)


def words(n: int, start: int = 0) -> str:
    return " ".join(f"w{i}x" for i in range(start, start + n))


def test_keyword_terms_are_the_first_ones_up_to_the_cap() -> None:
    assert keyword_terms(words(10)) == [f'"w{i}x"' for i in range(10)]
    long = keyword_terms(words(5_000))
    assert long == [f'"w{i}x"' for i in range(MAX_QUERY_TERMS)]  # in query order, without repeats
    assert keyword_terms("allergy " + words(5_000))[:2] == ['"allergy"', '"allergic"']
    assert len(keyword_terms("the " * 10_000)) == 1  # (stop words only: kept, once)


def test_what_is_embedded_of_a_long_message_and_query() -> None:
    text, context = "a" * (MAX_EMBED_CHARS + 500), "c" * 300 + "b" * MAX_CONTEXT_CHARS
    assert passage_text(context, text) == "b" * MAX_CONTEXT_CHARS + "\n" + "a" * MAX_EMBED_CHARS
    assert passage_text("", text) == "a" * MAX_EMBED_CHARS
    assert passage_text("hi", "there") == "hi\nthere"  # short texts as before
    assert query_text("q" * (MAX_EMBED_CHARS + 1)) == "q" * MAX_EMBED_CHARS and query_text("what?") == "what?"


def test_a_huge_message_and_query_do_bounded_work_and_the_search_says_so(tmp_path: Path) -> None:
    store = open_store(tmp_path / "long.db")
    try:
        emb = RecordingEmbedder()
        memory = Memory(store, MemoryOptions(semantic_recall={"top_k": 3, "scope": "resource"}), embedder=emb)
        memory.create_thread(resource_id="u", thread_id="t")
        huge = words(20_000)  # ~130 kB
        memory.save_messages([Message.user("I am allergic to peanuts", thread_id="t", resource_id="u"),
                              Message.user(huge, thread_id="t", resource_id="u")])
        assert max(len(t) for t in emb.seen) <= MAX_CONTEXT_CHARS + 1 + MAX_EMBED_CHARS
        # Keyword search still reads the whole message: a word near its end is found.
        hits = memory.search(words(1, start=19_999), resource_id="u", mode="keyword", top_k=1)
        assert hits and hits[0].keyword_score is not None
        emb.seen.clear()
        index = memory._recall_index_for_search()
        run = search.run(index, huge + " peanuts", resource_id="u", thread_id=None, top_k=3, mode="hybrid")
        assert len(run.terms) + len(run.dropped_terms) == MAX_QUERY_TERMS
        assert any("only its first 256 are searched" in note for note in run.notes)
        assert emb.seen == [huge[:MAX_EMBED_CHARS]]
        normal = search.run(index, "what am I allergic to?", resource_id="u", thread_id=None, top_k=3, mode="hybrid")
        assert not normal.notes and normal.reranked[0].message_id  # an ordinary question: no note
    finally:
        store.close()
