"""Recall windows (``MemoryStore.message_windows`` / ``messages_with_context``): each hit with its
neighbours in its own thread, read for every hit of a turn in two statements, on libSQL and Postgres.

The property test draws threads (ties in createdAt, system messages, rows of another resource, rows
with no resource) and includes (missing ids, repeated hits, ranges past a thread's ends), and checks
the store against a brute force over the rows in Python (spec §2.4)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import Memory, MemoryOptions
from core.errors import OptionsError
from core.messages import Message
from core.storage import driver_sql
from core.storage.memory_store import Include, InvalidArgumentError

pytestmark = pytest.mark.backends

T0 = datetime(2026, 11, 29, 17, 38, tzinfo=timezone.utc)
THREADS = {"ta": "u1", "tb": "u1", "tc": "u2"}  # thread -> its owner
ROLES = ("user", "assistant", "system", "signal")


@st.composite
def _rows(draw: Any) -> list[tuple[str, str, str, int, str | None]]:
    """(id, thread, role, minute, resourceId) of each stored message; few minutes, so many ties."""
    count = draw(st.integers(0, 24))
    rows = []
    for i in range(count):
        thread = draw(st.sampled_from(sorted(THREADS)))
        resource = draw(st.sampled_from([THREADS[thread], THREADS[thread], THREADS[thread], None, "u3"]))
        rows.append((f"m{draw(st.integers(0, 99)):02d}{i:02d}", thread, draw(st.sampled_from(ROLES)),
                     draw(st.integers(0, 5)), resource))
    return rows


def _includes(ids: list[str]) -> Any:
    wanted = st.sampled_from(ids + ["missing"]) if ids else st.just("missing")
    return st.lists(st.builds(Include, wanted, st.sampled_from([None, "ta", "elsewhere"]),
                              st.integers(0, 6), st.integers(0, 6)), max_size=8)


def _store_rows(store: Any, rows: list[tuple[str, str, str, int, str | None]]) -> None:
    with store.db.write() as conn:
        conn.execute(sa.text("DELETE FROM mastra_messages"))
        for mid, thread, role, minute, resource in rows:
            m = Message.create(role=role, parts=[{"type": "text", "text": f"text of {mid}"}],  # type: ignore[arg-type]
                               id=mid, thread_id=thread, resource_id=resource, created_at=T0 + timedelta(minutes=minute))
            row = m.to_row_tuple()
            driver_sql.execute(conn, 'INSERT INTO mastra_messages ("id", "thread_id", "content", "role", "type", '
                                     '"createdAt", "resourceId") VALUES (?, ?, ?, ?, ?, ?, ?)', row)


def _expected(rows: list[tuple[str, str, str, int, str | None]], inc: Include, resource_id: str | None) -> list[str]:
    """The window by brute force: the target (any role) and the nearest eligible rows of its thread."""
    by_id = {r[0]: r for r in rows}
    target = by_id.get(inc.id)
    if target is None or (resource_id is not None and target[4] not in (None, resource_id)):
        return []
    eligible = sorted(
        (r for r in rows if r[1] == target[1] and r[2] != "system"
         and (resource_id is None or r[4] in (None, resource_id))),
        key=lambda r: (r[3], r[0]))
    key = (target[3], target[0])
    older = [r for r in eligible if (r[3], r[0]) < key]
    newer = [r for r in eligible if (r[3], r[0]) > key]
    window = {target[0]} | {r[0] for r in older[max(0, len(older) - inc.before):]} | {r[0] for r in newer[:inc.after]}
    return sorted(window, key=lambda i: (by_id[i][3], i))


@pytest.fixture
def memory(store: Any) -> Memory:
    memory = Memory(store, MemoryOptions())
    for thread, owner in THREADS.items():
        memory.create_thread(thread_id=thread, resource_id=owner)
    return memory


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_windows_match_a_brute_force(store: Any, memory: Memory, data: Any) -> None:
    rows = data.draw(_rows())
    _store_rows(store, rows)
    includes = data.draw(_includes([r[0] for r in rows]))
    resource_id = data.draw(st.sampled_from([None, "u1", "u2"]))
    windows = store.memory.message_windows(includes, resource_id=resource_id)
    assert [[m.id for m in w] for w in windows] == [_expected(rows, inc, resource_id) for inc in includes]
    merged = sorted({i for inc in includes for i in _expected(rows, inc, resource_id)},
                    key=lambda i: (next(r[3] for r in rows if r[0] == i), i))
    assert [m.id for m in store.memory.messages_with_context(includes, resource_id=resource_id)] == merged


def test_every_hit_of_a_turn_in_two_statements(store: Any, memory: Memory) -> None:
    rows = [(f"m{i:03d}", "ta", ROLES[i % 2], i, "u1") for i in range(300)]
    _store_rows(store, rows)
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    includes = [Include(f"m{i:03d}", "ta", 2, 3) for i in range(0, 300, 3)]  # top-k 100
    sa.event.listen(store.db.engine, "before_cursor_execute", seen)
    try:
        windows = store.memory.message_windows(includes, resource_id="u1")
    finally:
        sa.event.remove(store.db.engine, "before_cursor_execute", seen)
    assert [[m.id for m in w] for w in windows] == [_expected(rows, inc, "u1") for inc in includes]
    # which messages are in which window, then those messages (it was a statement per hit and side)
    assert len([s for s in statements if "mastra_messages" in s]) == 2


def test_a_negative_range_is_refused_with_what_to_do(store: Any, memory: Memory) -> None:
    with pytest.raises(InvalidArgumentError, match="non-negative"):
        store.memory.message_windows([Include("m1", "ta", -1, 0)])


def test_a_negative_range_in_the_options_is_refused_when_they_are_read() -> None:
    with pytest.raises(OptionsError, match="non-negative"):
        MemoryOptions(semantic_recall={"message_range": {"before": -1, "after": 2}})
