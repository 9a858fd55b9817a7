"""The statements of an agent turn on the driver's cursor (``core.storage.driver_sql``) and the turn's
reads on one connection (``Database.reads``): same rows and errors as through SQLAlchemy, every
statement still seen by SQLAlchemy's listeners, nothing stale when another connection or another
process writes between reads or between turns (issue 20 item 7)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from core import Memory, MemoryOptions, open_store
from core.agent import Agent
from core.llm import ScriptedModel
from core.storage import driver_sql

pytestmark = pytest.mark.backends

ROOT = Path(__file__).resolve().parents[2]


def _agent(store: Any, **options: Any) -> Agent:
    memory = Memory(store, MemoryOptions(last_messages=10, working_memory={"enabled": True}, **options))
    return Agent("turns", instructions="Be brief.", memory=memory, tracer=False,
                 model=ScriptedModel(lambda msgs, tools: f"reply to {len(msgs)} messages", name="turns"))


def test_driver_sql_gives_what_sqlalchemy_gives(store: Any) -> None:
    memory = Memory(store)
    memory.create_thread(thread_id="t1", resource_id="u1", title="Été ✓", metadata={"k": [1, "ü"]})
    sql = 'SELECT id, "resourceId", title, "createdAt" FROM mastra_threads WHERE id = ?'
    with store.db.read() as conn:
        through_sqlalchemy = [tuple(r) for r in conn.exec_driver_sql(sql, ("t1",)).all()]
        assert driver_sql.rows(conn, sql, ("t1",)) == through_sqlalchemy
        assert driver_sql.first(conn, sql, ("t1",)) == through_sqlalchemy[0]
        assert driver_sql.first(conn, sql, ("nope",)) is None
        assert driver_sql.scalar(conn, "SELECT count(*) FROM mastra_threads") == 1
        assert driver_sql.scalar(conn, sql, ("nope",)) is None
    with store.db.write() as conn:
        for title in ("a", "b"):
            driver_sql.execute(conn, 'UPDATE mastra_threads SET title = ? WHERE id = ?', (title, "t1"))
        driver_sql.execute(conn, 'UPDATE mastra_threads SET "resourceId" = ? WHERE id = ?', ("u1", "t1"))
    thread = memory.get_thread("t1")
    assert thread is not None and thread.title == "b" and thread.metadata == {"k": [1, "ü"]}


def test_a_failed_write_rolls_back_with_driver_statements(store: Any) -> None:
    memory = Memory(store)
    memory.create_thread(thread_id="t1", resource_id="u1")
    with pytest.raises(RuntimeError):
        with store.db.write() as conn:
            driver_sql.execute(conn, 'UPDATE mastra_threads SET title = ? WHERE id = ?', ("changed", "t1"))
            raise RuntimeError("stop")
    thread = memory.get_thread("t1")
    assert thread is not None and thread.title == ""


def test_every_statement_of_a_turn_reaches_sqlalchemy_listeners(store: Any) -> None:
    agent = _agent(store)
    agent.generate("first", memory={"resource": "u", "thread": "t"})
    seen: list[str] = []
    sa.event.listen(store.db.engine, "before_cursor_execute",
                    lambda _c, _cur, statement, *_a: seen.append(" ".join(statement.split())))
    agent.generate("second", memory={"resource": "u", "thread": "t"})
    joined = "\n".join(seen)
    # The turn's reads and its one write transaction: thread, history, working memory, the upsert.
    assert "FROM mastra_threads WHERE id" in joined
    assert "FROM mastra_messages WHERE thread_id" in joined
    assert "INSERT INTO mastra_messages" in joined
    assert "INSERT INTO memory_studio_turns" in joined
    assert sum("workingMemory" in s for s in seen) >= 1


def test_reads_share_one_connection_and_see_other_connections_writes(store: Any, db_path: Any) -> None:
    Memory(store).create_thread(thread_id="t1", resource_id="u1")
    other = open_store(db_path)
    try:
        with store.db.reads():
            with store.db.read() as first:
                before = store.memory.get_thread("t1")
            other.memory.update_thread("t1", title="from the other connection")
            with store.db.read() as second:
                after = store.memory.get_thread("t1")
            if store.capabilities.driver_qmark:  # libSQL holds one connection for the block
                assert first is second
        assert before is not None and before.title == ""
        assert after is not None and after.title == "from the other connection"
    finally:
        other.close()


def test_a_turn_sees_working_memory_another_connection_wrote_before_it(store: Any, db_path: Any) -> None:
    agent = _agent(store)
    agent.generate("hello", memory={"resource": "u", "thread": "t"})
    other = open_store(db_path)
    try:
        Memory(other, MemoryOptions(working_memory={"enabled": True})).update_working_memory(
            thread_id="t", resource_id="u", working_memory="# User\n- Name: Ada (written elsewhere)")
    finally:
        other.close()
    result = agent.generate("who am I?", memory={"resource": "u", "thread": "t"})
    system = "\n".join(m["content"] for m in result.prompts[0].messages if m["role"] == "system")
    assert "Ada (written elsewhere)" in system


@pytest.mark.libsql_only
def test_a_turn_sees_what_another_process_wrote_between_turns(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    store = open_store(db)
    try:
        agent = _agent(store)
        agent.generate("hello", memory={"resource": "u", "thread": "t"})
        script = (
            "import sys; sys.path.insert(0, sys.argv[2])\n"
            "from core import Memory, MemoryOptions, Message, open_store\n"
            "s = open_store(sys.argv[1])\n"
            "m = Memory(s, MemoryOptions(working_memory={'enabled': True}))\n"
            "m.update_working_memory(thread_id='t', resource_id='u', working_memory='# User\\n- Name: Grace')\n"
            "m.save_messages([Message.user('a message saved by another process', thread_id='t', resource_id='u')])\n"
            "s.close()\n"
        )
        subprocess.run([sys.executable, "-c", script, str(db), str(ROOT)], check=True, timeout=120)
        result = agent.generate("and now?", memory={"resource": "u", "thread": "t"})
        sent = json.dumps(result.prompts[0].messages, ensure_ascii=False)
        assert "Name: Grace" in sent
        assert "a message saved by another process" in sent
        # Ordered after what the other process stored, as before.
        texts = [m.text for m in store.memory.list_messages_page("t", 0, 100)]
        assert texts.index("a message saved by another process") < texts.index("and now?")
    finally:
        store.close()
