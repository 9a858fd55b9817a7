"""``reindex``: resumable after an interruption; a resumed run embeds only what has no vector yet (an
interruption discards at most the one batch embedded ahead of the write, ``RecallIndex.index_batches``)."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from core.embedding import HashingEmbedder
from core.messages import Message
from core.recall import RecallIndex, reindex, vector_table_name

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


class CountingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__(64)
        self.passages: Counter[str] = Counter()

    def embed(self, texts, kind="passage"):  # type: ignore[override]
        if kind == "passage":
            self.passages.update(texts)
        return super().embed(texts, kind)


class Interrupted(Exception):
    pass


def test_interrupted_reindex_resumes_and_indexes_each_message_once(store):
    for t in range(3):
        store.memory.create_thread(thread_id=f"t{t}", resource_id="u")
        store.memory.save_messages([
            Message.user(f"fact number {t}-{i}", id=f"m{t}-{i}", thread_id=f"t{t}", resource_id="u",
                         created_at=T0 + timedelta(seconds=10 * t + i))
            for i in range(10)
        ])
    emb = CountingEmbedder()

    def stop_half_way(done: int, total: int) -> None:
        if done >= total // 2 and done > 0:
            raise Interrupted

    with pytest.raises(Interrupted):
        reindex(store, emb, progress=stop_half_way, batch_size=4)
    # The batch staged ahead was waited for, not left running.
    assert not [t for t in threading.enumerate() if t.name.startswith("recall-stage")]
    with store.db.read() as conn:
        written = conn.exec_driver_sql(f"SELECT count(*) FROM {vector_table_name(64)}").scalar()
    first_run = Counter(emb.passages)
    assert 0 < written < 30 and written <= sum(first_run.values()) <= written + 4  # + the batch staged ahead
    emb.passages.clear()
    seen: list[tuple[int, int]] = []
    report = reindex(store, emb, progress=lambda d, t: seen.append((d, t)), batch_size=4)
    assert report.total == 30 - written and report.already_indexed == written
    assert seen[0] == (0, report.total) and seen[-1] == (report.total, report.total)
    # The resumed run embedded exactly the messages without a vector, each once; now each has one vector.
    assert sum(emb.passages.values()) == 30 - written and max(emb.passages.values()) == 1
    assert len(set(emb.passages) | set(first_run)) == 30
    with store.db.read() as conn:
        rows = conn.exec_driver_sql(f"SELECT vector_id, count(*) FROM {vector_table_name(64)} GROUP BY vector_id").all()
    assert len(rows) == 30 and all(n == 1 for _, n in rows)
    assert reindex(store, emb).total == 0


def test_reindex_can_be_limited_to_one_resource(store):
    for r in ("u1", "u2"):
        store.memory.create_thread(thread_id=f"{r}-t", resource_id=r)
        store.memory.save_messages([Message.user(f"hello {r}", id=f"{r}-m", thread_id=f"{r}-t", resource_id=r)])
    report = reindex(store, HashingEmbedder(64), resource_id="u1")
    assert report.indexed == 1
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    assert index.search("hello", resource_id="u2", mode="vector").hits == []
    assert [h.message_id for h in index.search("hello", resource_id="u1", mode="vector").hits] == ["u1-m"]


def test_reindex_report_reads_as_sentences_grouped_by_reason(store):
    """What `memory-studio reindex` prints: counts, then skips and failures grouped by reason (most
    frequent first, one id each), never the report's repr."""
    store.memory.create_thread(thread_id="t", resource_id="u")
    store.memory.save_messages([
        Message.user("a fact worth keeping", id="m1", thread_id="t", resource_id="u", created_at=T0),
        Message.user("   ", id="m2", thread_id="t", resource_id="u", created_at=T0 + timedelta(seconds=1)),
    ])
    emb = HashingEmbedder(64)
    report = reindex(store, emb)
    assert report.summary_lines() == [
        f"Embedded 1 of 2 message(s) with {emb.model_id}; 0 already had a current vector.",
        "Skipped 1:",
        "  1 × no text to index (e.g. message m2)",
    ]
    again = reindex(store, emb)  # the blank message is still without a vector: tried again, skipped again
    assert again.summary_lines()[0] == f"Embedded 0 of 1 message(s) with {emb.model_id}; 1 already had a current vector."

    from core.recall.reindex import ReindexReport

    many = ReindexReport(total=6, indexed=1, already_indexed=2, changed=1, model_id="x@1",
                         failed={"a": "disk full", "b": "disk full", "c": "model crashed", "d": "bad row", "e": "odd"},
                         dropped={"old@0": 7})
    assert many.summary_lines(shown=2) == [
        "Embedded 1 of 6 message(s) with x@1, 1 of them because their text changed since; 2 already had a current vector.",
        "Failed 5:",
        "  2 × disk full (e.g. message a)",
        "  1 × bad row (e.g. message d)",
        "  … and 2 other reason(s)",
        "Run `memory-studio reindex` again to retry the failed messages: nothing already embedded is embedded twice.",
        "Dropped 7 vector(s) of old@0: the database is now indexed by x@1.",
    ]


def test_reindex_with_nothing_to_embed_draws_no_empty_bar(tmp_path):
    """Piped or on a terminal, `memory-studio reindex` with nothing to embed prints its summary, not a
    bar of ``0/0``."""
    import io

    from core import open_store
    from core.cli import main

    db = tmp_path / "empty.db"
    open_store(db).close()
    out, err = io.StringIO(), io.StringIO()
    assert main(["reindex", "--db", str(db)], out=out, err=err) == 0, err.getvalue()
    assert "0/0" not in err.getvalue() and "[" not in err.getvalue(), err.getvalue()
    assert out.getvalue().startswith("Nothing new: 0 indexed"), out.getvalue()
