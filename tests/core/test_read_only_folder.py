"""A database file in a folder this user cannot write (a read-only share, a copy on read-only media):
SQLite cannot create ``-wal`` / ``-shm`` there, which it needs even to read a WAL-mode file. Opened to
look (``read_only``), such a file is read as a snapshot when nothing is left in a ``-wal``, refused
plainly when there is, and never shown stale (``core.storage.frozen_file``).

Real files and real permissions. The opening runs in a child process: as root, permissions do not
stop anyone (CAP_DAC_OVERRIDE), so there the child runs as root without that capability
(``setpriv``), which makes a folder without its write bit unwritable to it as to any user. The test
itself (root or not) builds and changes the files (``bound_python``, ``open_folder``: tests/conftest.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from core import Memory, open_store
from core.messages import Message

ROOT = Path(__file__).resolve().parents[2]

# The child: open the file to look, report what it sees (or the error), then do what stdin says.
CHILD = r"""
import json, sys
from core import open_store
from core.cli_store import open_cli_store

def report(**kw):
    print(json.dumps(kw), flush=True)

path = sys.argv[1]
try:
    store = open_cli_store(path, read_only=True)
except Exception as exc:
    report(error=type(exc).__name__, message=str(exc))
    sys.exit(0)
def look():
    return [m.id for m in store.memory.list_messages_page("t1", 0, 100)]
try:
    report(messages=look(), frozen=store.db.frozen_at is not None)
    for line in sys.stdin:
        if line.strip() == "look":
            report(messages=look())
        elif line.strip() == "write":
            store.memory.create_thread(thread_id="t9", resource_id="u1")
            report(written=True)
except Exception as exc:
    report(error=type(exc).__name__, message=str(exc))
"""


class Child:
    """The looking process: its first report, and more on request."""

    def __init__(self, python: list[str], path: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen([*python, "-c", CHILD, str(path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.first = self.next()

    def next(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            assert self.proc.stderr is not None
            raise AssertionError(f"the child ended without a report: {self.proc.stderr.read()[-3000:]}")
        report: dict[str, Any] = json.loads(line)
        return report

    def ask(self, what: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        return self.next()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture
def folder(open_folder: Path) -> Path:
    return open_folder


def _fill(path: Path, count: int, *, start: int = 0) -> None:
    store = open_store(path)
    try:
        memory = Memory(store)
        if store.memory.get_thread("t1") is None:
            memory.create_thread(thread_id="t1", resource_id="u1")
        memory.save_messages([Message.create(role="user", parts=[{"type": "text", "text": f"note {i}"}],
                                             id=f"m{i}", thread_id="t1", resource_id="u1")
                              for i in range(start, start + count)])
    finally:
        store.close()


def _lock(folder: Path) -> None:
    """Make ``folder`` and its files read-only (what a copy on read-only media looks like)."""
    for p in folder.iterdir():
        os.chmod(p, 0o444)
    os.chmod(folder, 0o555)


def _with_wal_content(source: Path, target_folder: Path, *, with_shm: bool) -> Path:
    """A copy of ``source`` taken while a writer still held changes in its -wal (not yet checkpointed)."""
    store = open_store(source)
    try:
        with store.db.write() as conn:  # keep the -wal: no checkpoint until this process closes
            conn.exec_driver_sql("PRAGMA wal_autocheckpoint = 0")
        Memory(store).save_messages([Message.create(role="user", parts=[{"type": "text", "text": "late"}],
                                                    id="late", thread_id="t1", resource_id="u1")])
        names = ["memory.db", "memory.db-wal"] + (["memory.db-shm"] if with_shm else [])
        for name in names:
            shutil.copy(source.with_name(name), target_folder / name)
    finally:
        store.close()
    assert (target_folder / "memory.db-wal").stat().st_size > 0
    return target_folder / "memory.db"


def test_a_memory_file_in_a_read_only_folder_opens_for_looking(folder: Path, bound_python: list[str]) -> None:
    path = folder / "memory.db"
    _fill(path, 3)
    assert sorted(p.name for p in folder.iterdir()) == ["memory.db"]  # closed: no -wal, no -shm
    before = path.read_bytes()
    _lock(folder)
    child = Child(bound_python, path)
    try:
        assert child.first == {"messages": ["m0", "m1", "m2"], "frozen": True}
        refused = child.ask("write")
        assert refused["error"] == "ReadOnlyFileError"
        assert "open for looking only" in refused["message"]
        assert "Copy the file to a writable folder" in refused["message"]
    finally:
        child.close()
    assert sorted(p.name for p in folder.iterdir()) == ["memory.db"] and path.read_bytes() == before


def test_changes_left_in_the_wal_are_never_hidden(folder: Path, bound_python: list[str]) -> None:
    (folder / "live").mkdir()
    source = folder / "live" / "memory.db"
    _fill(source, 2)
    (folder / "copy").mkdir()
    path = _with_wal_content(source, folder / "copy", with_shm=False)
    _lock(folder / "copy")
    child = Child(bound_python, path)
    child.close()
    # Read without the -wal, the file would show m0 and m1 only, as if "late" had never been written.
    assert child.first["error"] == "ReadOnlyFileError"
    message = child.first["message"]
    assert "memory.db-wal" in message and "as it was before those changes" in message
    assert "Copy memory.db together with memory.db-wal to a writable folder" in message


def test_a_wal_with_its_index_is_read_whole(folder: Path, bound_python: list[str]) -> None:
    (folder / "live").mkdir()
    source = folder / "live" / "memory.db"
    _fill(source, 2)
    (folder / "copy").mkdir()
    path = _with_wal_content(source, folder / "copy", with_shm=True)
    _lock(folder / "copy")
    child = Child(bound_python, path)
    child.close()
    assert child.first == {"messages": ["m0", "m1", "late"], "frozen": False}


def test_a_snapshot_refuses_to_read_once_the_file_changed(folder: Path, bound_python: list[str]) -> None:
    path = folder / "memory.db"
    _fill(path, 2)
    _lock(folder)
    child = Child(bound_python, path)
    try:
        assert child.first == {"messages": ["m0", "m1"], "frozen": True}
        assert child.ask("look") == {"messages": ["m0", "m1"]}
        # Someone who may write the folder (here: this test) adds a message.
        os.chmod(folder, 0o755)
        os.chmod(path, 0o644)
        _fill(path, 1, start=2)
        _lock(folder)
        stale = child.ask("look")
    finally:
        child.close()
    assert stale["error"] == "FileChangedError"
    assert "changed on disk after it was opened" in stale["message"] and "Open it again" in stale["message"]
