"""The suite's watches (``conftest._ui_thread_never_waits_on_a_database``) catch what they are for: the
app's own code running a statement on the UI thread, and a write nobody asked for. Simulated by code
compiled as if it were the app's, since no part of the app does either."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core import open_store

from . import conftest


def _run_as_pane_code(source: str, names: dict[str, Any]) -> None:
    code = compile(source, str(conftest.STUDIO_DIR / "panes" / "imaginary_pane.py"), "exec")
    exec(code, names)  # noqa: S102 - the test's own source, compiled under a Studio file name


def test_a_statement_run_by_pane_code_on_the_ui_thread_is_caught(small_db: Path) -> None:
    store = open_store(small_db)
    try:
        _run_as_pane_code("def on_click(store):\n    store.memory.list_threads()\non_click(store)\n", {"store": store})
    finally:
        store.close()
    caught = list(conftest._ui_io)
    conftest._ui_io.clear()  # caught as intended: this test must not fail for it
    assert caught and all("studio/panes/imaginary_pane.py" in line for line in caught)
    assert any(line.startswith("SQL SELECT") for line in caught)


def test_the_same_statement_on_a_worker_thread_is_not(small_db: Path) -> None:
    import threading

    store = open_store(small_db)
    try:
        worker = threading.Thread(target=_run_as_pane_code, args=(
            "def job(store):\n    store.memory.list_threads()\njob(store)\n", {"store": store}))
        worker.start()
        worker.join()
    finally:
        store.close()
    assert conftest._ui_io == []


@pytest.mark.parametrize("name", ["reads.py", "replay_jobs.py"])
def test_worker_side_functions_called_by_a_test_are_not_the_app(small_db: Path, name: str) -> None:
    store = open_store(small_db)
    try:
        code = compile("store.memory.list_threads()\n", str(conftest.STUDIO_DIR / name), "exec")
        exec(code, {"store": store})  # noqa: S102
    finally:
        store.close()
    assert conftest._ui_io == []


def _write_as(path: str, store: object) -> None:
    code = compile("def look(store):\n    store.memory.create_thread(thread_id='t-new', resource_id='ada')\nlook(store)\n",
                   str(conftest.STUDIO_DIR / path), "exec")
    exec(code, {"store": store})  # noqa: S102


def test_a_write_from_code_that_only_looks_is_caught(small_db: Path) -> None:
    import threading

    store = open_store(small_db)
    try:  # a worker job of the reads layer (off the UI thread, so only the write watch sees it)
        worker = threading.Thread(target=_write_as, args=("reads.py", store))
        worker.start()
        worker.join()
    finally:
        store.close()
    caught = list(conftest._writes)
    conftest._writes.clear()  # caught as intended
    assert caught and all("studio/reads.py" in line for line in caught)
    assert any(line.startswith("INSERT INTO mastra_threads") for line in caught)


def test_a_write_the_user_asked_for_is_not() -> None:
    assert conftest._is_writer("edit_jobs.py", "delete_message")
    assert conftest._is_writer("replay_jobs.py", "ReplayThread.fork")
    assert conftest._is_writer("main_window.py", "MainWindow._migrate.<locals>.job")
    assert not conftest._is_writer("replay_jobs.py", "ReplayThread.prompt")
    assert not conftest._is_writer("main_window.py", "MainWindow._migrated")
    assert not conftest._is_writer("reads.py", "load_page")


def test_reads_are_not_writes() -> None:
    for statement in ("SELECT 1", "  select * from mastra_threads", "PRAGMA busy_timeout = 0", "PRAGMA table_info(x)",
                      "PRAGMA journal_mode", "PRAGMA user_version",
                      "WITH a AS (SELECT 1) SELECT * FROM a", "SET LOCAL hnsw.ef_search = 100"):
        assert not conftest._WRITE.match(statement), statement
    for statement in ("INSERT INTO t VALUES (1)", "WITH gone AS (SELECT 1) DELETE FROM t", "PRAGMA journal_mode=WAL",
                      "create table t (a)", "PRAGMA main.wal_checkpoint(TRUNCATE)"):
        assert conftest._WRITE.match(statement), statement
