"""Files a user opens by mistake or after an accident (session 24's walk of the Studio's error paths):
each is refused with what is wrong and what to do, and nothing beside it or in it changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core import open_store
from core.storage import CorruptDatabaseError
from studio.dialogs import explain
from studio.session import open_studio_database

from .conftest import seed_small


def _folder_state(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_truncated_database_is_called_damaged_with_how_to_salvage_it(tmp_path: Path) -> None:
    """A copy cut short (a full disk during a copy, an interrupted download) still starts with SQLite's
    header: it was called "not a usable database" with "Pick another file", as if it were a picture."""
    whole = tmp_path / "whole.db"
    seed_small(whole)
    folder = tmp_path / "cut"
    folder.mkdir()
    cut = folder / "memory.db"
    data = whole.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    before = _folder_state(folder)
    with pytest.raises(CorruptDatabaseError) as caught:
        open_studio_database(str(cut))
    problem = explain(caught.value, str(cut))
    assert problem.title == "Damaged database"
    assert f"{cut} is damaged" in problem.text and f"sqlite3 {cut} .recover" in problem.text
    assert "backup" in problem.advice
    assert _folder_state(folder) == before


def test_a_database_whose_migrations_table_is_damaged_leaves_no_files_beside_it(tmp_path: Path) -> None:
    """The Studio's first look reads the migrations table; when that read failed the look was never
    closed, so the refused file got a -wal and a -shm beside it (and the connections stayed open)."""
    path = tmp_path / "memory.db"
    seed_small(path)
    with open_store(path) as store:
        with store.db.read() as conn:
            page = int(conn.exec_driver_sql("PRAGMA page_size").scalar())
            roots = [int(r[0]) for r in conn.exec_driver_sql(
                "SELECT rootpage FROM sqlite_master WHERE tbl_name = 'memory_studio_migrations'")]
    with open(path, "r+b") as fh:  # the root pages of the migrations table and its index: garbage
        for root in roots:
            fh.seek((root - 1) * page)
            fh.write(b"\xa5" * page)
    before = _folder_state(tmp_path)
    with pytest.raises(CorruptDatabaseError) as caught:
        open_studio_database(str(path))
    assert explain(caught.value, str(path)).title == "Damaged database"
    assert sorted(os.listdir(tmp_path)) == ["memory.db"]
    assert _folder_state(tmp_path) == before
