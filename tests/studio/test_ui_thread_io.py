"""The suite's watch on the UI thread (``conftest._ui_thread_never_waits_on_a_database``) catches what it is
for: the app's own code running a statement on the main thread. Simulated by code compiled as if it were a
pane's, since no pane of the app does it."""

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
