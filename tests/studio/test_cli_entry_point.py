"""The ``memory-studio`` entry point (``studio/cli.py``) runs the engine's subcommands without Qt."""

from __future__ import annotations

import subprocess
import sys

import pytest

import core
from core import Memory, MemoryOptions, Message


@pytest.fixture
def demo_db(db_path):
    with core.open_store(db_path) as s:
        m = Memory(s, MemoryOptions(working_memory={"enabled": True}), name="demo")
        m.register("demo")
        m.create_thread(resource_id="u1", thread_id="t1", title="Food")
        m.save_messages([Message.user("I am allergic to peanuts", thread_id="t1", resource_id="u1"),
                         Message.assistant("Noted.", thread_id="t1", resource_id="u1",
                                           metadata={"agent": "demo"})])
    return db_path


def test_entry_point_runs_subcommands_without_qt(demo_db):
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from studio.cli import main; rc = main(sys.argv[1:]); "
                               "assert 'PySide6' not in sys.modules; sys.exit(rc)",
         "threads", "--db", str(demo_db)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "t1" in proc.stdout
