"""Looking at a database file in a folder this user cannot write.

SQLite reads a WAL-mode file through two files beside it, ``-wal`` (changes not yet copied into the
file) and ``-shm`` (the index of the ``-wal``), and creates them when they are missing, even to read
("a read-only WAL-mode database file can be opened if the -shm and -wal files already exist or those
files can be created or the database is immutable": sqlite.org/wal.html, since 3.22.0). In a folder
this user cannot write they cannot be created, so a plain read-only open of such a file fails with
"unable to open database file" / "attempt to write a readonly database".

What ``Database`` does then, for an open that only looks (``read_only``):

* No ``-wal``, or an empty one: every committed change is in the file itself. It is opened with
  SQLite's ``immutable=1`` (read-only, no locks, no ``-wal`` / ``-shm``): a snapshot, correct as long as
  nobody writes the file. Nobody without write access to the folder can; someone with it (another
  user, root) could, so every read compares the file's state with the state at the open and refuses
  with ``FileChangedError`` when it moved (``check``), rather than show what may be stale or torn.
* A ``-wal`` with content but no usable ``-shm``: those changes can only be read through the index
  SQLite cannot create here; opened without them the file would show its state before them, without
  a word. Refused (``ReadOnlyFileError``), saying to copy the file with its ``-wal`` somewhere writable.
  (A ``-wal`` and ``-shm`` both present need no fallback: SQLite reads them read-only itself.)

The snapshot's URL is ``database.read_only_url(path, immutable="1")``.
"""

from __future__ import annotations

import os
from pathlib import Path


from core.storage.errors import FileChangedError, ReadOnlyFileError


State = tuple[tuple[int, int, int] | None, ...]


def folder_writable(path: Path) -> bool:
    return os.access(path.parent, os.W_OK)


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def state(path: Path) -> State:
    """What ``check`` compares: the file's and its ``-wal`` / ``-shm``'s identity, size and time."""
    return tuple(_stat(path.with_name(path.name + suffix)) for suffix in ("", "-wal", "-shm"))


def unreadable_changes(path: Path) -> ReadOnlyFileError | None:
    """Why ``path`` cannot be looked at as a snapshot (its ``-wal`` holds changes), or None when it can."""
    wal = _stat(path.with_name(path.name + "-wal"))
    if wal is None or wal[1] == 0:
        return None
    return ReadOnlyFileError(
        f"{path} cannot be read as it is: its latest changes are in {path.name}-wal, and SQLite reads them only "
        f"with {path.name}-shm beside it, which it cannot create because the folder {path.parent} is not writable "
        "by this user. Reading the file without them would show it as it was before those changes, so it was not "
        f"opened. Copy {path.name} together with {path.name}-wal to a writable folder and open the copy, or make "
        "the folder writable. Nothing was changed."
    )


def refusal(path: Path) -> str:
    """Why writes are refused on such a file (``Database.refusal``)."""
    return (f"{path} is open for looking only: its folder {path.parent} is not writable by this user, and SQLite "
            f"must keep {path.name}-wal and {path.name}-shm beside a database it writes. Copy the file to a writable "
            "folder and open the copy to change it, or make the folder writable and open it again. Nothing was "
            "written.")


def check(path: Path, at_open: State) -> None:
    """Raise ``FileChangedError`` when ``path`` is not as it was when it was opened as a snapshot."""
    if state(path) != at_open:
        raise FileChangedError(
            f"{path} changed on disk after it was opened (another program opened or wrote it). Its folder "
            f"{path.parent} is not writable by this user, so it was read as a snapshot that cannot follow "
            "changes, and what it shows may be out of date. Open it again to read it as it is now (in the "
            "Studio: File > Open; on the command line: run the command again). Nothing was changed."
        )


__all__ = ["State", "check", "folder_writable", "refusal", "state", "unreadable_changes"]
