"""Threads of one process writing to one database at the same time (as gateway turns do)."""

from __future__ import annotations

import threading
import time

import sqlalchemy as sa


def test_a_thread_waiting_to_write_never_stalls_the_thread_holding_the_write_lock(store):
    # Regression: libsql-experimental keeps the GIL while SQLite's busy handler waits, so a second
    # writer waiting inside BEGIN IMMEDIATE froze the first writer's Python code until the busy
    # timeout ran out, and the second write then failed with "database is locked".
    db = store.db
    with db.write() as conn:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS gil_probe (who TEXT)")
    holding = threading.Event()
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with db.write() as conn:
                holding.set()
                time.sleep(0.3)  # Python work while holding the lock (lets the second writer start waiting)
                conn.exec_driver_sql("INSERT INTO gil_probe VALUES ('first')")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def second() -> None:
        holding.wait(30)
        try:
            with db.write() as conn:
                conn.exec_driver_sql("INSERT INTO gil_probe VALUES ('second')")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    with db.read() as conn:
        rows = [r[0] for r in conn.execute(sa.text("SELECT who FROM gil_probe"))]
    assert rows == ["first", "second"]
