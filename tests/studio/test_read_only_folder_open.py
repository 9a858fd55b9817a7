"""The Studio opening a memory file in a folder this user cannot write: it opens for looking (the
engine reads it as a snapshot, ``core.storage.frozen_file``), says why it cannot be written, and
does not try to reopen it for writing (which failed, so the file could not be opened at all).

The opening runs in a child process bound by folder permissions (``bound_python``, tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from core import Memory, open_store
from core.messages import Message

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys
from studio.session import open_studio_database
opened = open_studio_database(sys.argv[1], create_missing=False)
db = opened.store.db
print(json.dumps({"read_only": opened.store.read_only, "has_data": opened.has_data, "refusal": db.refusal,
                  "frozen": db.frozen_at is not None}))
"""


def test_the_studio_opens_a_file_of_a_read_only_folder_for_looking(open_folder: Path, bound_python: list[str]) -> None:
    path = open_folder / "memory.db"
    store = open_store(path)
    try:
        memory = Memory(store)
        memory.create_thread(thread_id="t1", resource_id="u1")
        memory.save_messages([Message.create(role="user", parts=[{"type": "text", "text": "hello"}],
                                             thread_id="t1", resource_id="u1")])
    finally:
        store.close()
    os.chmod(path, 0o444)
    os.chmod(open_folder, 0o555)
    done = subprocess.run([*bound_python, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), QT_QPA_PLATFORM="offscreen"), check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["read_only"] and seen["has_data"] and seen["frozen"]
    assert "open for looking only" in seen["refusal"] and "Copy the file to a writable folder" in seen["refusal"]
    assert sorted(p.name for p in open_folder.iterdir()) == ["memory.db"]
