"""Postgres: ``forget`` and ``vacuum`` while writers write (``bench/pg_busy_maintenance.py`` measures them).

- A turn's save takes its thread's lock, then its resource's (resource working memory written with the
  turn). ``forget`` took the resource's, then the threads': with a turn of the user mid-save the two
  waited for each other until the server ended one (seen by the bench: the forget failed with
  "deadlock detected"; a turn could fail the same way).
- ``forget`` matched the vector table's rows by a JSON expression no index has, so each of its three
  statements there read and parsed every vector of every user, inside its write transaction.
- ``vacuum`` asked for each table's exclusive lock with one wait of 30 s: while it waited behind any open
  transaction, every reader and writer of the table queued behind its request, for up to those 30 s.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator

import psycopg
import pytest
import sqlalchemy as sa

from core import Memory, MemoryOptions, Message, open_store
from core.edits.forget import forget_resource
from core.embedding import HashingEmbedder
from core.storage import Store
from core.working_memory_stage import StagedWorkingMemory


WAITING_FOR_ADVISORY = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND wait_event_type = 'Lock' AND wait_event = 'advisory'")


def _until(url: str, sql: str, stop: threading.Event | None = None) -> None:
    """Poll the server until ``sql`` counts at least one row (no time limit of its own: the test's
    threads are joined with one)."""
    with psycopg.connect(url, autocommit=True) as conn:
        while not (stop is not None and stop.is_set()):
            row = conn.execute(sql).fetchone()
            if row and row[0]:
                return
            threading.Event().wait(0.01)

VACUUM_WAITS = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query LIKE 'VACUUM FULL \"mastra_messages\"%' AND wait_event_type = 'Lock'")


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    s = open_store(pg_url)
    yield s
    s.close()


class _HoldsTheThreadThen:
    """A staged write of a turn's save: runs inside the save's transaction, after its thread lock, and
    commits the turn's resource working memory only once ``ready`` is set."""

    def __init__(self, staged: StagedWorkingMemory, ready: threading.Event, holding: threading.Event) -> None:
        self.staged, self.ready, self.holding = staged, ready, holding

    def commit(self, conn: sa.Connection) -> None:
        self.holding.set()
        self.ready.wait(60)
        self.staged.commit(conn)


def test_forget_while_a_turn_of_the_user_saves_does_not_deadlock_with_it(pg_url: str, store: Store) -> None:
    opts = MemoryOptions(working_memory={"enabled": True, "scope": "resource"})
    memory = Memory(store, opts)
    memory.save_messages([Message.user("first", thread_id="zed-t0", resource_id="zed")])
    wm = memory.effective_options().working_memory
    staged = StagedWorkingMemory(memory.working_memory_service)
    staged.add(wm, "zed-t0", "zed", "replace", "# Notes\n- likes tea\n")
    holding, forget_waits = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def turn() -> None:
        try:
            memory.save_messages([Message.user("second", thread_id="zed-t0", resource_id="zed")],
                                 _writes=[_HoldsTheThreadThen(staged, forget_waits, holding)])
            outcome["turn"] = "saved"
        except Exception as exc:  # noqa: BLE001 - the outcome asserted below
            outcome["turn"] = f"{type(exc).__name__}: {exc}"

    def forget() -> None:
        other = open_store(pg_url)
        try:
            outcome["forget"] = forget_resource(other, "zed").total
        except Exception as exc:  # noqa: BLE001
            outcome["forget"] = f"{type(exc).__name__}: {exc}"
        finally:
            other.close()

    saving = threading.Thread(target=turn)
    saving.start()
    assert holding.wait(60)  # the turn holds its thread's lock, its resource's not yet
    forgetting = threading.Thread(target=forget)
    forgetting.start()
    _until(pg_url, WAITING_FOR_ADVISORY)  # the forget waits for the turn's thread
    forget_waits.set()  # now the turn takes its resource's lock and commits
    saving.join(120)
    forgetting.join(120)
    assert outcome["turn"] == "saved"
    assert isinstance(outcome["forget"], int) and outcome["forget"] > 0, outcome["forget"]
    # The turn committed first, so the forget took it too: nothing of zed is left.
    assert memory.get_thread("zed-t0") is None
    assert memory.get_working_memory(resource_id="zed") in (None, "")


def test_forget_finds_a_users_vectors_through_the_vector_tables_indexes(store: Store) -> None:
    memory = Memory(store, MemoryOptions(semantic_recall={"enabled": True}), embedder=HashingEmbedder(64))
    for user in ("ann", "zed"):
        memory.save_messages([Message.user(f"{user} says {i}", thread_id=f"{user}-t{i % 2}", resource_id=user)
                              for i in range(20)])
    statements: list[tuple[str, Any]] = []

    def seen(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if statement.startswith('DELETE FROM "memory_messages_'):
            statements.append((statement, parameters))

    sa.event.listen(store.db.engine, "before_cursor_execute", seen)
    try:
        report = forget_resource(store, "zed")
    finally:
        sa.event.remove(store.db.engine, "before_cursor_execute", seen)
    assert report.removed["vectors (memory_messages_64)"] == 20 and not report.leftovers
    assert len(statements) == 4  # by message id (both ways), thread, resource
    with store.db.dedicated_connection() as conn:  # (the statements as the driver got them)
        conn.execute("SET enable_seqscan = off")  # a tiny table: ask for the index if one matches
        plans = {s: "\n".join(r[0] for r in conn.execute("EXPLAIN " + s, p).fetchall()) for s, p in statements}
    for statement, plan in plans.items():
        assert "Index" in plan and "Seq Scan" not in plan, f"{statement}\n{plan}"


def test_vacuum_waiting_for_a_busy_table_holds_no_writer_up_and_says_who_holds_the_table(
        pg_url: str, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.storage.pg import database as pg_database

    monkeypatch.setattr(pg_database, "VACUUM_LOCK_TIMEOUT_S", 600.0)  # the open transaction below outlasts it
    memory = Memory(store)
    memory.save_messages([Message.user(f"old {i}", thread_id="ann-t0", resource_id="ann") for i in range(50)])
    memory.delete_thread("ann-t0")  # pages for the vacuum to give back
    said: list[str] = []
    outcome: dict[str, Any] = {}

    def vacuum() -> None:
        other = open_store(pg_url)
        try:
            outcome["vacuum"] = other.vacuum(said.append)
        except Exception as exc:  # noqa: BLE001 - asserted below
            outcome["vacuum"] = f"{type(exc).__name__}: {exc}"
        finally:
            other.close()

    def write() -> None:
        writer = open_store(pg_url)
        try:
            Memory(writer).save_messages([Message.user("written meanwhile", thread_id="bob-t0", resource_id="bob")])
            outcome["write"] = "saved"
        finally:
            writer.close()

    with psycopg.connect(pg_url, application_name="report-reader") as reader:  # a reader left in a transaction
        reader.execute("SELECT count(*) FROM mastra_messages").fetchone()
        vacuuming = threading.Thread(target=vacuum)
        vacuuming.start()
        _until(pg_url, VACUUM_WAITS)  # its request for the table queues behind the reader
        writing = threading.Thread(target=write)
        writing.start()
        writing.join(120)
        assert outcome.get("write") == "saved"
        assert vacuuming.is_alive() and "vacuum" not in outcome  # the writer did not wait for the vacuum's turn
        reader.rollback()
    vacuuming.join(120)
    assert isinstance(outcome["vacuum"], int), outcome["vacuum"]
    line = next(x for x in said if "mastra_messages" in x)
    assert "(report-reader), idle in an open transaction for" in line, line
    assert [m.text for m in Memory(store).recall(thread_id="bob-t0", resource_id="bob").messages] == ["written meanwhile"]


def test_the_vacuum_command_says_what_it_waits_for(pg_url: str, store: Store) -> None:
    import io

    from core.cli import main

    Memory(store).save_messages([Message.user("hello", thread_id="ann-t0", resource_id="ann")])
    out, err = io.StringIO(), io.StringIO()
    done: list[int] = []
    with psycopg.connect(pg_url, application_name="nightly-export") as reader:
        reader.execute("SELECT count(*) FROM mastra_threads").fetchone()
        command = threading.Thread(target=lambda: done.append(main(["vacuum", "--db", pg_url], out=out, err=err)))
        command.start()
        _until(pg_url, VACUUM_WAITS.replace("mastra_messages", "mastra_threads"))
        while "mastra_threads" not in err.getvalue() and command.is_alive():
            threading.Event().wait(0.01)
        reader.rollback()
    command.join(120)
    assert done == [0]
    assert "vacuum: waiting for table mastra_threads: in use by session" in err.getvalue()
    assert "(nightly-export), idle in an open transaction for" in err.getvalue()
    assert "reclaimed" in out.getvalue()


def test_the_check_after_a_forget_reads_no_vector_number_or_time_column_and_still_finds_what_is_left(
        store: Store) -> None:
    from core.edits.forget import mentions

    memory = Memory(store, MemoryOptions(semantic_recall={"enabled": True}), embedder=HashingEmbedder(64))
    memory.save_messages([Message.user(f"ann says {i}", thread_id="ann-t0", resource_id="ann") for i in range(5)])
    with store.db.transaction() as conn:  # another application's table beside ours, naming zed in its JSON
        conn.exec_driver_sql("CREATE TABLE app_notes (id INTEGER, at TIMESTAMP, note JSONB)")
        conn.exec_driver_sql("""INSERT INTO app_notes VALUES (1, now(), '{"who": "zed"}')""")
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        statements.append(statement)

    sa.event.listen(store.db.engine, "before_cursor_execute", seen)
    try:
        found = mentions(store, ["zed", "ann-t0"])
    finally:
        sa.event.remove(store.db.engine, "before_cursor_execute", seen)
    assert found["app_notes"] == 1 and found["mastra_messages"] == 5 and found["memory_messages_64"] == 5
    checks = [s for s in statements if "strpos(" in s]
    assert any('"memory_messages_64"' in s for s in checks)
    for column in ('"embedding"', '"at"'):  # a vector, a time
        assert not any(f"CAST({column} AS TEXT)" in s for s in checks), column
    notes = next(s for s in checks if '"app_notes"' in s)
    assert 'CAST("note" AS TEXT)' in notes and 'CAST("id" AS TEXT)' not in notes  # JSON read, a number not


def test_the_vacuum_command_says_each_holder_once_and_when_it_got_the_table(pg_url: str, store: Store) -> None:
    # Each try of the lock (several a second) printed the waiting line again, because the holder's seconds
    # in it had changed: a transaction left open for a minute wrote a line a second.
    import io

    from core.cli import main

    Memory(store).save_messages([Message.user("hello", thread_id="ann-t0", resource_id="ann")])
    out, err = io.StringIO(), io.StringIO()
    done: list[int] = []
    tries = ("SELECT query_start FROM pg_stat_activity WHERE datname = current_database() "
             "AND query LIKE 'VACUUM FULL \"mastra_threads\"%' AND wait_event_type = 'Lock'")
    with psycopg.connect(pg_url, application_name="nightly-export") as reader, \
            psycopg.connect(pg_url, autocommit=True) as watcher:
        reader.execute("SELECT count(*) FROM mastra_threads").fetchone()
        command = threading.Thread(target=lambda: done.append(main(["vacuum", "--db", pg_url], out=out, err=err)))
        command.start()
        seen: set[Any] = set()
        while len(seen) < 4 and command.is_alive():  # the vacuum asked for the table four times, each refused
            seen.update(row[0] for row in watcher.execute(tries).fetchall())
            threading.Event().wait(0.01)
        reader.rollback()
    command.join(120)
    assert done == [0] and len(seen) >= 4
    lines = [line for line in err.getvalue().splitlines() if "mastra_threads" in line]
    assert len(lines) == 2, lines
    assert lines[0].startswith("vacuum: waiting for table mastra_threads: in use by session")
    assert "(nightly-export), idle in an open transaction for" in lines[0]
    assert lines[1].startswith("vacuum: table mastra_threads rewritten after waiting ") and lines[1].endswith(" s for it")
    assert "reclaimed" in out.getvalue()
