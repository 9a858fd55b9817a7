"""An in-memory database is one connection shared by every thread: a read on another thread must not
end a write transaction in flight (issue 19: a memory's background work reads while a turn writes)."""

from __future__ import annotations

import threading

from core import Memory, open_store


def test_a_read_on_another_thread_waits_for_the_write_in_flight() -> None:
    store = open_store(":memory:")
    memory = Memory(store)
    memory.create_thread(thread_id="t", resource_id="u")
    seen: list[object] = []
    finished = threading.Event()

    def reader() -> None:
        seen.append(memory.get_thread("t"))  # a read: it ends with a rollback of its connection
        finished.set()

    with store.db.write() as conn:
        conn.exec_driver_sql("UPDATE mastra_threads SET title = 'written' WHERE id = 't'")
        other = threading.Thread(target=reader)
        other.start()
        # Give the reader every chance to run now; it must queue behind this transaction instead.
        assert finished.wait(1.0) is False
    other.join(30)
    assert finished.is_set()
    thread = memory.get_thread("t")
    assert thread is not None and thread.title == "written"  # the write committed
    assert seen and getattr(seen[0], "title", None) == "written"  # the reader saw it, after the commit
    store.close()
