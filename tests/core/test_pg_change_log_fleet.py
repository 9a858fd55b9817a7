"""Kept recall reads on Postgres while other processes write: nothing is missed.

Two writer processes save and index messages (semantic recall on) into one resource, in many small
transactions that commit in whatever order the server gives them, while this process searches it
over and over (so its kept vectors, keyword docs and threads are updated from the change log between
the writers' commits). Afterwards its answers equal those of a process that kept nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core import Memory, MemoryOptions, open_store
from core.embedding import HashingEmbedder
from core.recall import RecallIndex, keyword

ROOT = Path(__file__).resolve().parents[2]
WRITERS, BATCHES, PER_BATCH = 2, 25, 4

_WRITER = """
import sys
from datetime import datetime, timedelta, timezone
from core import Memory, MemoryOptions, Message, open_store
from core.embedding import HashingEmbedder
url, w, batches, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
words = ("garden", "tomatoes", "Lisbon", "bicycle", "concert", "violin", "harbour", "zebra")
t0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
with open_store(url) as store:
    memory = Memory(store, MemoryOptions(semantic_recall=True), embedder=HashingEmbedder(16))
    memory.create_thread(resource_id="u", thread_id=f"w{w}")
    for b in range(batches):
        msgs = []
        for k in range(per):
            i = b * per + k
            make = Message.user if i % 2 == 0 else Message.assistant
            msgs.append(make(f"writer {w} note {i} about {words[(i + w) % len(words)]} and {words[i % 3]}",
                             id=f"w{w}-{i:03d}", thread_id=f"w{w}", resource_id="u",
                             created_at=t0 + timedelta(minutes=i)))
        memory.save_messages(msgs)
print("ok")
"""

QUERIES = ("garden note", "writer 1 zebra", "violin harbour", "note 7 Lisbon", "bicycle concert tomatoes")


def _answers(store, query: str, mode: str) -> list[tuple[str, float]]:  # type: ignore[no-untyped-def]
    index = RecallIndex.for_store(store, HashingEmbedder(16))
    return [(h.message_id, round(h.score, 6)) for h in index.search(query, resource_id="u", top_k=10, mode=mode).hits]  # type: ignore[arg-type]


def test_kept_reads_miss_nothing_other_processes_write(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every query term searched: which terms count as very common depends on counts a process keeps for a
    # while (``keyword.TermStats``), so two processes may drop different ones; the lists are what is compared.
    monkeypatch.setattr(keyword, "COMMON_SHARE", 1.0)
    with open_store(pg_url) as store:  # migrated, with a first message, before the writers start
        memory = Memory(store, MemoryOptions(semantic_recall=True), embedder=HashingEmbedder(16))
        memory.create_thread(resource_id="u", thread_id="seed")
        from core.messages import Message

        memory.save_messages([Message.user("a seed note about the garden", id="seed-0", thread_id="seed", resource_id="u")])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MEMORY_STUDIO_TRACING": "off"}
    reader = open_store(pg_url)
    try:
        procs = [subprocess.Popen([sys.executable, "-c", _WRITER, pg_url, str(w), str(BATCHES), str(PER_BATCH)],
                                  cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for w in range(WRITERS)]
        searches = 0
        while any(p.poll() is None for p in procs) or searches < 3:
            for mode in ("vector", "keyword", "hybrid"):
                _answers(reader, QUERIES[searches % len(QUERIES)], mode)
            searches += 1
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0 and out.strip() == "ok", err
        fresh = open_store(pg_url)
        try:
            for w in range(WRITERS):
                assert fresh.memory.count_messages(f"w{w}") == BATCHES * PER_BATCH
            for query in QUERIES:
                for mode in ("vector", "keyword", "hybrid"):
                    assert _answers(reader, query, mode) == _answers(fresh, query, mode), (query, mode, searches)
        finally:
            fresh.close()
    finally:
        reader.close()
