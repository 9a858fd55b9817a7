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


WINDOW_CHILD = r"""
import json, sys, time
from PySide6.QtCore import QSettings
from studio.app import make_app
from studio.dialogs import DialogPresenter
from studio.main_window import WORKING_MEMORY, MainWindow, spec_named
from studio.selection import Selection

app = make_app()
window = MainWindow(QSettings(sys.argv[2], QSettings.Format.IniFormat), DialogPresenter())
window.resize(1100, 800)
window.show()
window.open_database(sys.argv[1])

def wait(cond):
    end = time.monotonic() + 60
    while time.monotonic() < end and not cond():
        app.processEvents()
        time.sleep(0.01)
    assert cond()

wait(lambda: window.session is not None and window.resources is not None and bool(window.resources.thread_rows()))
window.set_selection(Selection("u1", "t1"))
wm = window.pane(WORKING_MEMORY)
wait(lambda: wm.snapshot is not None)
chat = window.pane(spec_named("chat"))
app.processEvents()
window.edits.delete_message("m1")
refusals = [(box.text(), box.informativeText()) for box in window.presenter.open if hasattr(box, "informativeText")]
print(json.dumps({"wm": wm.readonly_banner.text(), "chat": chat.banner.text(),
                  "chat_buttons": [b.text() for b in chat.banner.buttons], "request": chat.request("hello"),
                  "refusals": refusals}))
"""


def test_a_file_of_a_read_only_folder_says_what_helps_in_every_editor(open_folder: Path,
                                                                      bound_python: list[str]) -> None:
    """The editors of a file whose folder cannot be written said "Use File > Allow Writes to edit" (the
    working-memory banner) and offered an Allow Writes… button (the chat playground), which can only
    refuse: they say what does help (copy the file to a writable folder) and offer nothing that fails."""
    path = open_folder / "memory.db"
    store = open_store(path)
    try:
        memory = Memory(store)
        memory.create_thread(thread_id="t1", resource_id="u1")
        memory.save_messages([Message.create(role="user", parts=[{"type": "text", "text": "hello"}], id="m1",
                                             thread_id="t1", resource_id="u1")])
    finally:
        store.close()
    os.chmod(path, 0o444)
    os.chmod(open_folder, 0o555)
    settings = open_folder.parent / f"{open_folder.name}-studio.ini"  # writable by the child (not in its folder)
    try:
        done = subprocess.run([*bound_python, "-c", WINDOW_CHILD, str(path), str(settings)], capture_output=True,
                              text=True, timeout=180, check=False,
                              env=dict(os.environ, PYTHONPATH=str(ROOT), QT_QPA_PLATFORM="offscreen"))
    finally:
        settings.unlink(missing_ok=True)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    for text in (seen["wm"], seen["chat"], seen["request"]):
        assert "Allow Writes" not in text, text
        assert "writable folder" in text, text
    assert seen["chat_buttons"] == []
    assert len(seen["refusals"]) == 1 and "writable folder" in seen["refusals"][0][1], seen["refusals"]
    assert "Allow Writes" not in seen["refusals"][0][1]
    assert sorted(p.name for p in open_folder.iterdir()) == ["memory.db"]
