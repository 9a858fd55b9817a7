"""Databases for the export/import tests: one of ours with every kind of row, one as Mastra writes it.

A database is a file path (libSQL) or a ``postgresql://`` URL; the helpers read and write either.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import libsql_experimental as libsql

from core import Memory, MemoryOptions, Message, open_store
from core.messages import file_part, reasoning_part, text_part, tool_invocation_part
from core.observational.records import lookup_key
from core.observational.store import Cursor, Observation, commit_observation
from core.storage import schema

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
# The turn-record table (issue 10) in a shape of its own: export and import find it by name and columns.
TURNS_DDL = ("CREATE TABLE memory_studio_turns (input_message_id TEXT NOT NULL PRIMARY KEY, thread_id TEXT NOT NULL, "
             "resource_id TEXT, wm_version_id INTEGER, record TEXT NOT NULL, \"createdAt\" TEXT NOT NULL)")
TABLES = ("mastra_resources", "mastra_threads", "mastra_messages", "memory_studio_wm_versions",
          "mastra_observational_memory", "memory_studio_turns", "memory_studio_tool_defs", "memory_studio_tool_sets",
          "memory_studio_agents", "memory_studio_configs", "memory_studio_message_versions", "memory_studio_om_versions")


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def is_postgres(target: Path | str) -> bool:
    return isinstance(target, str) and target.startswith("postgresql")


def run_sql(target: Path | str, *statements: tuple[str, tuple[Any, ...]]) -> None:
    """Statements (``?`` placeholders) in one transaction, outside the engine."""
    if is_postgres(target):
        import psycopg

        with psycopg.connect(str(target)) as pg:
            for sql, params in statements:
                pg.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]
        return
    con = sqlite3.connect(target)
    for sql, params in statements:
        con.execute(sql, params)
    con.commit()
    con.close()


def add_turn_table(path: Path | str) -> None:
    run_sql(path, ("DROP TABLE IF EXISTS memory_studio_turns", ()), (TURNS_DDL, ()))


def seed_source(path: Path | str) -> dict[str, Any]:
    """Resource ``ada`` (two threads, resource working memory with history, observations, turn records)
    and resource ``bob`` (one thread, thread-scoped working memory)."""
    store = open_store(path)
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "resource"}))
    thread_mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "thread"}))
    mem.create_thread(thread_id="t-groceries", resource_id="ada", title="Weekly groceries", metadata={"topic": "food"})
    mem.create_thread(thread_id="t-party", resource_id="ada", title="Birthday party")
    thread_mem.create_thread(thread_id="t-bob", resource_id="bob", title="Bob's notes")
    msgs = [
        Message.user("I am allergic to peanuts. Plan dinner.", id="g1", thread_id="t-groceries", resource_id="ada",
                     created_at=at(0)),
        Message.create("assistant", [
            {"type": "step-start"},
            reasoning_part("She is allergic; avoid satay."),
            tool_invocation_part("call-1", "searchRecipes", {"query": "green curry"}, {"hits": ["Thai green curry"]}),
            text_part("Try a Thai green curry."),
        ], id="g2", thread_id="t-groceries", resource_id="ada", created_at=at(1)),
        Message.create("assistant", [file_part("aGVsbG8=", "text/plain", "list.txt")], id="g3",
                       thread_id="t-groceries", resource_id="ada", created_at=at(2)),
        Message.user("Party for 12 on Saturday", id="p1", thread_id="t-party", resource_id="ada", created_at=at(3)),
        Message.user("Remember: standup moved to 10am", id="b1", thread_id="t-bob", resource_id="bob",
                     created_at=at(4)),
    ]
    mem.save_messages(msgs)
    mem.update_working_memory(resource_id="ada", working_memory="# User\n- Name: Ada\n")
    mem.update_working_memory(resource_id="ada", working_memory="# User\n- Name: Ada\n- Allergy: peanuts\n")
    thread_mem.update_working_memory(thread_id="t-bob", resource_id="bob", working_memory="# Notes\n- standup 10am\n")
    key = lookup_key("thread", thread_id="t-groceries", resource_id="ada")
    commit_observation(store, record=None, key=key, scope="thread", thread_id="t-groceries", resource_id="ada",
                       config={"messageTokens": 100}, obs=Observation(
                           active_observations="* 🔴 (09:00) Ada is allergic to peanuts", observation_tokens=9,
                           observed_ids=["g1", "g2"], tokens_observed=40, pending_after=0,
                           cursor=Cursor("2026-03-01T09:01:00.000Z", "g2"), current_task="plan dinner"))
    with store.db.write() as conn:  # a legacy (v1) row exactly as an old Mastra wrote it
        conn.exec_driver_sql(
            'INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
            "VALUES ('g0', 't-groceries', 'plain legacy text', 'user', 'v1', '2026-03-01T08:59:00.000Z', NULL)")
        version = conn.exec_driver_sql(
            "SELECT max(id) FROM memory_studio_wm_versions WHERE owner_id = 'ada'").scalar()
    store.close()
    add_turn_table(path)
    run_sql(path,
            ("INSERT INTO memory_studio_turns VALUES ('g1', 't-groceries', 'ada', ?, ?, ?)",
             (version, json.dumps({"history": [], "tokens": {"total": 120}}), "2026-03-01T09:00:00.000Z")),
            ("INSERT INTO memory_studio_turns VALUES ('b1', 't-bob', 'bob', NULL, '{}', '2026-03-01T09:04:00.000Z')",
             ()))
    return {"ada_version": version}


def table_rows(path: Path | str, table: str, where: str = "") -> list[tuple[Any, ...]]:
    """Every column of every row, with SQLite's storage type of each value (so text vs blob counts);
    on Postgres with each value's type, leaving out Mastra's ``"<col>Z"`` mirrors (the server's)."""
    if is_postgres(path):
        return _pg_table_rows(str(path), table, where)
    con = sqlite3.connect(path)
    try:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
            return []
        cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
        typed = ", ".join(f'"{c}", typeof("{c}")' for c in cols)
        return sorted(con.execute(f"SELECT {typed} FROM {table} {where}").fetchall(), key=repr)
    finally:
        con.close()


def _pg_table_rows(url: str, table: str, where: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url) as pg:
        if pg.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is None:  # type: ignore[index]
            return []
        cols = [(r[0], r[1]) for r in pg.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = %s ORDER BY ordinal_position", (table,))]
        names = {c for c, _t in cols}
        kept = [c for c, t in cols if not (c.endswith("Z") and c[:-1] in names and "time zone" in t)]
        typed = ", ".join(f'"{c}", pg_typeof("{c}")::text' for c in kept)
        return sorted(pg.execute(f"SELECT {typed} FROM {table} {where}").fetchall(), key=repr)  # type: ignore[arg-type]


def snapshot(path: Path | str) -> dict[str, list[tuple[Any, ...]]]:
    return {t: table_rows(path, t) for t in TABLES}


def make_mastra_db(path: Path) -> None:
    """Mastra's LibSQLStore layout: metadata and observation config as JSONB blobs, no tables of ours."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = libsql.connect(str(path))
    for ddl in (*schema.MASTRA_MEMORY_DDL, *schema.OBSERVATIONAL_MEMORY_DDL):
        conn.execute(ddl)
    conn.execute("INSERT INTO mastra_threads VALUES (?, ?, ?, jsonb(?), ?, ?)",
                 ("mt1", "user-1", "From Mastra", json.dumps({"workingMemory": "# Notes\n- a", "custom": True}),
                  "2025-01-02T03:04:05.000Z", "2025-01-02T03:04:06.000Z"))
    rows = [
        ("m1", "mt1", json.dumps({"format": 2, "parts": [{"type": "text", "text": "My name is Ada",
                                                          "createdAt": 1795973922787}], "content": "My name is Ada"}),
         "user", "v2", "2025-01-02T03:04:05.100Z", "user-1"),
        ("m2", "mt1", json.dumps({"format": 2, "parts": [{"type": "step-start"}, {"type": "text", "text": "Got it"}],
                                  "metadata": {"modelId": "mock-model"}, "content": "Got it"}),
         "assistant", "v2", "2025-01-02T03:04:05.200Z", "user-1"),
        ("m3", "mt1", "plain legacy text", "user", "v1", "2025-01-02T03:04:05.300Z", None),
    ]
    conn.executemany("INSERT INTO mastra_messages VALUES (?,?,?,?,?,?,?)", rows)
    conn.execute("INSERT INTO mastra_resources VALUES (?, ?, jsonb(?), ?, ?)",
                 ("user-1", "# User\n- Name: Ada", json.dumps({"plan": "pro"}), "2025-01-02T03:04:05.000Z",
                  "2025-01-02T03:04:05.000Z"))
    conn.execute(
        'INSERT INTO mastra_observational_memory (id, "lookupKey", scope, "resourceId", "threadId", '
        '"activeObservations", "originType", config, "generationCount", "pendingMessageTokens", '
        '"totalTokensObserved", "observationTokenCount", "isObserving", "isReflecting", "isBufferingObservation", '
        '"isBufferingReflection", "lastBufferedAtTokens", "createdAt", "updatedAt") '
        "VALUES ('om1', 'thread:mt1', 'thread', 'user-1', 'mt1', '* Ada said hi', 'initial', jsonb(?), 0, 0, 10, 4, "
        "0, 0, 0, 0, 0, '2025-01-02T03:04:07.000Z', '2025-01-02T03:04:07.000Z')", (json.dumps({"scope": "thread"}),))
    conn.commit()
