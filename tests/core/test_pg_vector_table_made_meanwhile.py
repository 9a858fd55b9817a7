"""Postgres: a process that found no vector table when it opened, and whose first recall write comes after
another process made the table, must not take a lock on that table that waits for every reader.

Found by ``bench/faults.py --fleet postgres``: three gateways and an embedded agent started at once on a new
database. Each process's first index write ran the table's DDL again (``ALTER TABLE ... ADD COLUMN IF NOT
EXISTS``, ``CREATE INDEX IF NOT EXISTS``), which takes the table's lock before it finds there is nothing to
do: the ALTER queued behind the other processes' open reads of the table, every later read and insert
queued behind it, and the readers' own processes waited for connections their blocked turns held. All
four processes stopped answering (each request a 500 after the pool's 30 s)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Opens the database (no vector table yet), says so, waits for the word, then saves with recall on.
LATE_WRITER = textwrap.dedent('''
    import sys

    from core import Memory, MemoryOptions, Message, open_store
    from core.embedding import HashingEmbedder

    store = open_store(sys.argv[1])
    memory = Memory(store, MemoryOptions(semantic_recall={"enabled": True}), embedder=HashingEmbedder(64))
    assert memory.recall_index is not None
    print("opened", flush=True)
    sys.stdin.readline()
    memory.save_messages([Message.user("the late writer's message", thread_id="late", resource_id="u")])
    print("saved", flush=True)
    store.close()
''')


def test_a_late_first_recall_write_does_not_wait_for_readers_of_the_table(pg_url):
    import psycopg

    from core import Memory, MemoryOptions, Message, open_store
    from core.embedding import HashingEmbedder

    env = {**os.environ, "PYTHONPATH": str(REPO),
           # The lock it must not take would be waited for as long as the reader below holds its read: a
           # lock timeout turns that wait into an error (it has nothing to do with how fast anything runs).
           "PGOPTIONS": "-c lock_timeout=5000"}
    late = subprocess.Popen([sys.executable, "-c", LATE_WRITER, pg_url], cwd=REPO, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert late.stdout.readline().strip() == "opened", late.stderr.read()
        # Another process makes the vector table with its first indexed save...
        store = open_store(pg_url)
        Memory(store, MemoryOptions(semantic_recall={"enabled": True}), embedder=HashingEmbedder(64)).save_messages(
            [Message.user("the first writer's message", thread_id="first", resource_id="u")])
        store.close()
        # ... and a reader (a search in a third process) has the table open in its transaction.
        with psycopg.connect(pg_url) as reader:
            assert reader.execute('SELECT count(*) FROM "memory_messages_64"').fetchone() == (1,)
            late.stdin.write("go\n")
            late.stdin.flush()
            out, err = late.communicate(timeout=300)
            assert out.strip() == "saved" and late.returncode == 0, err[-3000:]
            reader.rollback()
    finally:
        if late.poll() is None:
            late.kill()
            late.wait()
    store = open_store(pg_url)
    try:
        hits = Memory(store, MemoryOptions(semantic_recall={"enabled": True}), embedder=HashingEmbedder(64)).search(
            "late writer", resource_id="u", mode="vector", top_k=2)
        assert len(hits) == 2
    finally:
        store.close()
