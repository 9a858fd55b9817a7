"""A message edited while the keyword index does not follow (a Memory with recall off, another program
writing the row) is never ranked by a keyword or hybrid search for the text it no longer holds, on
libSQL and on Postgres, whichever path answers (the in-process keyword list, the FTS5 / ``tsvector``
statement of an ``until=`` search, the server's keyword list and Postgres's one hybrid statement):
its keyword doc is left out until a recall write indexes the new text, and the reason says so. Searches
still write nothing. An edit that restores the indexed text, and a message another program wrote new
(no keyword doc, its own vector), keep their places. The next message, whose context holds the old
text, keeps its place too (ARCHITECTURE, Known problems)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from core.embedding import HashingEmbedder
from core.memory import Memory
from core.messages import Message
from core.recall import RecallIndex, pg_hybrid, pg_keyword_cache, pg_vector_cache
from core.recall import search as pipeline
from core.recall.explain import explain_message, inspect_search
from core.storage import Store, open_store

pytestmark = pytest.mark.backends

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
TEXTS = [
    "I planted tomatoes in the garden today",
    "Lovely, what else did you do?",
    "We rode to Lisbon by bicycle last spring",
    "That sounds like a long ride",
    "The concert on Friday was very loud",
    "Earplugs help with loud concerts",
]
OLD, NEW = "Lisbon bicycle", "Porto train"
EDITED, NEXT = "t-2", "t-3"
EDITED_NOTE = "1 message edited since it was keyword-indexed is left out of keyword results"


@pytest.fixture(params=["in process", "by the server"])
def filled(request: pytest.FixtureRequest, db_path: object,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Store, RecallIndex]]:
    """A store with one indexed thread. "by the server": on Postgres, the scope's vectors and keyword
    docs are not kept in process, so the keyword list is the server's statement and a hybrid search
    reads its lists in one statement (``pg_hybrid``); on libSQL the same test runs twice."""
    if request.param == "by the server":
        monkeypatch.setattr(pg_vector_cache, "MAX_ROWS", 0)
        monkeypatch.setattr(pg_keyword_cache, "MAX_DOCS", 0)
    yield from indexed_thread(db_path, 32)


def indexed_thread(db_path: object, dim: int) -> Iterator[tuple[Store, RecallIndex]]:
    """A store whose thread "t" of resource "u" holds ``TEXTS`` (ids t-0…), indexed by a hashing embedder
    of ``dim`` dimensions; closed at the end."""
    store = open_store(db_path)  # type: ignore[arg-type]
    try:
        index = RecallIndex.for_store(store, HashingEmbedder(dim))
        store.memory.create_thread(thread_id="t", resource_id="u")
        msgs = [(Message.user if i % 2 == 0 else Message.assistant)(
            text, id=f"t-{i}", thread_id="t", resource_id="u", created_at=T0 + timedelta(minutes=i))
            for i, text in enumerate(TEXTS)]
        store.memory.save_messages(msgs)
        assert index.index_messages(msgs).ok
        yield store, index
    finally:
        store.close()


def ids(index: RecallIndex, query: str, mode: str, **kw: object) -> tuple[list[str], str]:
    result = index.search(query, resource_id="u", mode=mode, **kw)  # type: ignore[arg-type]
    return [h.message_id for h in result.hits], result.reason or ""


def other_program_edits(index: RecallIndex, message_id: str, old: str, new: str) -> None:
    """Rewrite a stored message's text in its row and drop its vectors, as Mastra's ``updateMessages``
    does (its rule: a changed message's vectors go); the keyword doc is left to the queue."""
    with index.store.db.write() as conn:
        raw = conn.exec_driver_sql("SELECT content FROM mastra_messages WHERE id = ?", (message_id,)).scalar()
        text = raw if isinstance(raw, str) else json.dumps(raw)
        assert old in text
        conn.exec_driver_sql("UPDATE mastra_messages SET content = ? WHERE id = ?", (text.replace(old, new), message_id))
        index.vectors.delete(conn, "message_id", [message_id])


def searches(index: RecallIndex) -> dict[str, tuple[list[str], str]]:
    """The searches for the old words every path answers: keyword (in process or the server's list),
    keyword ``until=`` (the FTS5 / ``tsvector`` statement), hybrid (Postgres: the one statement when
    the server searches), hybrid ``until=`` (the reads one by one)."""
    later = T0 + timedelta(days=1)
    return {"keyword": ids(index, OLD, "keyword"), "keyword until": ids(index, OLD, "keyword", until=later),
            "hybrid": ids(index, OLD, "hybrid"), "hybrid until": ids(index, OLD, "hybrid", until=later)}


@pytest.mark.parametrize("how", ["memory without recall", "another program"])
def test_an_edited_message_is_not_ranked_for_the_words_it_no_longer_holds(filled, how):
    store, index = filled
    assert all(EDITED in found for found, _ in searches(index).values())  # before the edit: found by them
    if how == "memory without recall":
        Memory(store).edit_message(EDITED, resource_id="u", text="We rode to Porto by train last spring")
    else:
        other_program_edits(index, EDITED, "Lisbon by bicycle", "Porto by train")
    for path, (found, reason) in searches(index).items():
        assert EDITED not in found, path
        assert EDITED_NOTE in reason and "`memory-studio reindex`" in reason, (path, reason)
    # The next message (its context held the old text) keeps its place: its own text is current.
    assert NEXT in ids(index, OLD, "keyword")[0]
    run = pipeline.run(index, OLD, resource_id="u", thread_id=None, top_k=5, mode="hybrid")
    assert run.edited == {EDITED} and ("keyword", EDITED) in [(w, r.message_id) for w, r in run.left_out]
    assert EDITED not in {f.message_id for f in run.reranked}

    # The next save with recall indexes the new text: found by its new words, not by the old ones.
    later = Message.user("and then we had dinner", id="t-9", thread_id="t", resource_id="u",
                         created_at=T0 + timedelta(minutes=30))
    store.memory.save_messages([later])
    assert index.index_messages([later]).ok
    found, reason = ids(index, NEW, "keyword")
    assert found[:1] == [EDITED] and "edited since" not in reason
    assert EDITED not in ids(index, OLD, "keyword")[0]
    assert EDITED in ids(index, NEW, "hybrid")[0]


def test_searching_with_an_edit_queued_writes_nothing(filled):
    store, index = filled
    Memory(store).edit_message(EDITED, resource_id="u", text="We rode to Porto by train last spring")
    with store.db.read() as conn:
        queued = conn.exec_driver_sql("SELECT count(*) FROM memory_studio_recall_queue").scalar()
        docs = conn.exec_driver_sql("SELECT message_id, content_hash FROM memory_studio_fts_docs ORDER BY 1").all()
    searches(index)
    inspect_search(index, OLD, resource_id="u", top_k=3)
    with store.db.read() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM memory_studio_recall_queue").scalar() == queued > 0
        assert conn.exec_driver_sql(
            "SELECT message_id, content_hash FROM memory_studio_fts_docs ORDER BY 1").all() == docs


def test_an_edit_undone_and_a_message_another_program_wrote_keep_their_places(filled):
    store, index = filled
    memory = Memory(store)
    memory.edit_message(EDITED, resource_id="u", text="We rode to Porto by train last spring")
    memory.edit_message(EDITED, resource_id="u", text=TEXTS[2])  # back to the indexed text (hashes equal)
    found, reason = ids(index, OLD, "keyword")
    assert found[:1] == [EDITED] and "edited since" not in reason
    assert pipeline.run(index, OLD, resource_id="u", thread_id=None, top_k=5, mode="hybrid").edited == set()

    # Another program writes a message with its own vector and re-saves it (its change is queued): it
    # has no keyword doc to be stale, and keeps its place in the vector list.
    new = Message.user("Lisbon trams and a bicycle shop", id="t-8", thread_id="t", resource_id="u",
                       created_at=T0 + timedelta(minutes=20))
    store.memory.save_messages([new])
    with store.db.write() as conn:  # re-saved as it is (an upsert): an update queued
        conn.exec_driver_sql("UPDATE mastra_messages SET type = type WHERE id = ?", (new.id,))
        assert conn.exec_driver_sql("SELECT count(*) FROM memory_studio_recall_queue WHERE message_id = ? "
                                    "AND op = 'upsert'", (new.id,)).scalar() == 1
    vec = np.asarray(index.embedder.embed(["Lisbon trams and a bicycle shop"], kind="passage"), dtype=np.float32)[0]
    with store.db.write() as conn:
        index.vectors.upsert(conn, [(new.id, vec, {"message_id": new.id, "thread_id": "t", "resource_id": "u",
                                                   "role": "user", "content": "Lisbon trams and a bicycle shop",
                                                   "created_at": "2026-03-01T09:20:00.000Z"}, index.model_id)])
    run = pipeline.run(index, OLD, resource_id="u", thread_id=None, top_k=5, mode="hybrid")
    assert new.id in [r.message_id for r in run.vector] and not run.edited and not run.left_out
    assert new.id in ids(index, OLD, "vector")[0]


def test_the_playground_marks_the_candidate_edited_and_says_why_not(filled):
    store, index = filled
    Memory(store).edit_message(EDITED, resource_id="u", text="We rode to Porto by train last spring")
    ins = inspect_search(index, OLD, resource_id="u", top_k=3, before=0, after=0)
    assert [c.status for c in ins.lists["keyword"] if c.message_id == EDITED] == ["edited"]
    assert EDITED not in [c.message_id for c in ins.hits("hybrid")]
    assert "1 edited since indexed" in ins.summary("keyword")
    assert any(n.startswith(EDITED_NOTE) for n in ins.notes)
    e = explain_message(index, EDITED, ins)
    assert e.verdict == "edited" and "holds the text before the edit" in e.summary
    assert e.placements["keyword"].status == "edited"
    assert explain_message(index, NEXT, ins).verdict != "edited"
