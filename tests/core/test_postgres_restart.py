"""A Postgres server restart (issue 17, item 13): faults reach the caller as retryable storage errors
that never show SQL text or parameters, nothing acknowledged is lost, and the store works again once
the server is back. The test starts a server of its own, so the suite's shared one is not disturbed."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import Memory, MemoryOptions, Message, open_store
from core.storage import StorageError, StorageUnavailableError

SECRET = "parameter-value-that-must-never-show"


@pytest.fixture
def own_server() -> Iterator[Any]:
    from tests.conftest import start_server

    folder = Path(tempfile.mkdtemp(prefix="memory-studio-pg-restart-"))
    try:
        server = start_server(folder / "data")
        yield server
        server.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def pg_ctl(server: Any, action: str) -> None:
    """``pg_ctl stop|start|restart`` (fast: open connections are cut, as in a real restart)."""
    import pgserver

    raw = server._server  # the pgserver handle: its data folder and the user it runs as
    # Started again the way pgserver starts it: a Unix socket in the data folder, no TCP.
    options = ["-o", '-h ""', "-o", f"-k {raw.pgdata}", "-l", str(raw.log)] if action == "start" else []
    pgserver.pg_ctl(["-w", "-m", "fast", *options, action], pgdata=raw.pgdata, user=raw.system_user, timeout=60)


def assert_clean(error: BaseException) -> None:
    text = str(error)
    assert SECRET not in text and "[SQL:" not in text and "[parameters:" not in text and "INSERT" not in text
    assert error.__cause__ is None and error.__suppress_context__  # no raw driver error chained either


def test_faults_during_a_restart_are_retryable_storage_errors(own_server):
    url, _drop = own_server.fresh_database()
    store = open_store(url)
    memory = Memory(store, MemoryOptions(last_messages=50, working_memory={"enabled": True}))
    try:
        acknowledged = []
        for i in range(5):
            memory.save_messages([Message.user(f"before {i}", thread_id="t", resource_id="ada")])
            acknowledged.append(f"before {i}")

        # A transaction open while the server restarts: its next statement fails, nothing is committed.
        with pytest.raises(StorageUnavailableError) as during:
            with store.db.write() as conn:
                conn.exec_driver_sql('UPDATE mastra_threads SET title = ? WHERE id = ?', (SECRET, "t"))
                pg_ctl(own_server, "restart")
                conn.exec_driver_sql('UPDATE mastra_threads SET title = ? WHERE id = ?', (SECRET, "t"))
        assert during.value.retryable and "Nothing of it was committed" in str(during.value)
        assert_clean(during.value)

        # The server is down: every call is a clear, retryable error, never a raw OperationalError.
        pg_ctl(own_server, "stop")
        # (A read says it changed nothing, never that something was not committed; a write may fail at its
        # first read, which says the same.)
        calls = ((lambda: memory.save_messages([Message.user(SECRET, thread_id="t", resource_id="ada")]), False),
                 (lambda: memory.recall(thread_id="t", resource_id="ada"), True),
                 (lambda: memory.update_working_memory(resource_id="ada", working_memory=SECRET), False),
                 (lambda: memory.list_threads(resource_id="ada"), True))
        for call, reads in calls:
            with pytest.raises(StorageError) as down:
                call()
            assert isinstance(down.value, StorageUnavailableError) and down.value.retryable, repr(down.value)
            assert url.rsplit("/", 1)[1] in str(down.value) and "Try again" in str(down.value)
            said = ("Nothing was changed." in str(down.value), "Nothing of it was committed." in str(down.value))
            assert said == (True, False) if reads else any(said), repr(down.value)
            assert_clean(down.value)

        # Back up: the same store works again, and everything acknowledged is there.
        pg_ctl(own_server, "start")
        memory.save_messages([Message.user("after", thread_id="t", resource_id="ada")])
        acknowledged.append("after")
        texts = [m.text for m in memory.recall(thread_id="t", resource_id="ada").messages]
        assert texts == acknowledged
        assert memory.get_thread("t").title != SECRET and memory.get_working_memory(resource_id="ada") is None
    finally:
        store.close()
