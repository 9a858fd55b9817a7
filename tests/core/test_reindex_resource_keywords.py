"""``reindex`` for one resource (the Studio's Edit > Index Recall for Resource…) says what its keyword catch-up
wrote. The keyword index's queue of recent message changes is the whole database's, and every recall write
applies it, so a run for one resource writes other resources' waiting keyword docs too: with nothing new it
said "0 indexed" and nothing more while it had written them (found by session 28). The report now counts them,
by whose they are, on libSQL and on Postgres, and its counts are what was written."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from core import Memory, MemoryOptions
from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import reindex
from core.recall.tables import DOCS_TABLE

pytestmark = pytest.mark.backends

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
RECALL = MemoryOptions(semantic_recall={"top_k": 3, "message_range": 0, "scope": "resource"})


def _docs(store: Any, resource: str) -> int:
    with store.db.read() as conn:
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {DOCS_TABLE} WHERE resource_id = ?",
                                        (resource,)).scalar() or 0)


def _say(store: Any, resource: str, n: int, start: int = 0) -> list[Message]:
    return [(Message.user if i % 2 == 0 else Message.assistant)(
        f"{resource} note {i} about the staging mail server", id=f"{resource}-{i}", thread_id=f"t-{resource}",
        resource_id=resource, created_at=T0 + timedelta(seconds=i)) for i in range(start, start + n)]


def test_a_resources_run_counts_the_other_resources_keyword_docs_it_wrote(store: Any) -> None:
    emb = HashingEmbedder(64)
    Memory(store, RECALL, embedder=emb).save_messages(_say(store, "ada", 2))  # indexed as saved
    store.memory.save_messages(_say(store, "bob", 4))  # another program: recall never saw them
    assert _docs(store, "bob") == 0

    report = reindex(store, emb, resource_id="ada")
    assert (report.total, report.indexed, report.already_indexed) == (0, 0, 2)
    assert (report.keyword_docs, report.keyword_docs_elsewhere, report.keyword_docs_dropped) == (0, 4, 0)
    assert _docs(store, "bob") == 4  # what it says it wrote
    assert report.summary_lines() == [
        f"Nothing new: 0 indexed, all 2 message(s) already have a current vector from {emb.model_id}.",
        "Keyword index: 4 queued message(s) of other resources indexed too, 0 of this resource's (the queue of "
        "recent changes is the whole database's; any recall write applies it).",
    ]
    assert report.status_line() == ("Nothing new: 0 embedded, 2 already current. Keyword index: 4 queued message(s) "
                                    "of other resources indexed too, 0 of this resource's.")

    # An edit of ada's (by another program) and a deletion of bob's: its own counted as its own, the gone one's
    # doc dropped; nothing of bob's embedded.
    store.memory.save_messages([Message.user("ada note 0 about the production mail server", id="ada-0",
                                             thread_id="t-ada", resource_id="ada", created_at=T0)])
    store.memory.delete_messages(["bob-3"])
    report = reindex(store, emb, resource_id="ada")
    assert (report.total, report.changed) == (2, 2)  # its vector and its next message's are stale (their passage)
    assert (report.keyword_docs, report.keyword_docs_elsewhere, report.keyword_docs_dropped) == (1, 0, 1)
    assert report.keyword_line() == ("Keyword index: 1 queued message(s) of this resource indexed, the docs of 1 "
                                     "deleted message(s) dropped.")
    assert report.status_line().startswith("Embedded 2 of 2 message(s), 0 already current. Keyword index: 1 ")
    assert _docs(store, "bob") == 3

    # Nothing waits: nothing said beyond the first line, nothing written.
    again = reindex(store, emb, resource_id="ada")
    assert again.keyword_line() is None and len(again.summary_lines()) == 1
    assert again.status_line() == "Nothing new: 0 embedded, 2 already current."


def test_a_whole_database_run_counts_every_keyword_doc_it_wrote_as_its_own(store: Any) -> None:
    emb = HashingEmbedder(64)
    store.memory.save_messages(_say(store, "bob", 3) + _say(store, "ada", 2))
    report = reindex(store, emb)
    assert (report.keyword_docs, report.keyword_docs_elsewhere) == (5, 0) and report.indexed == 5
    assert report.keyword_line() is None  # (it indexes every resource: nothing to tell apart)
