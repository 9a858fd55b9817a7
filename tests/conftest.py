"""Shared fixtures: every test gets its own database folder; nothing touches the project's .temp."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Property tests draw the same examples on every run: the suite must be deterministic.
settings.register_profile("deterministic", derandomize=True, print_blob=True)
settings.load_profile("deterministic")


@pytest.fixture(autouse=True)
def _isolated_default_db(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # Code that resolves "the anchored default" during a test lands in a temp folder, never in the repo.
    monkeypatch.setenv("MEMORY_STUDIO_DB", str(tmp_path_factory.mktemp("anchored") / "memory.db"))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "memory.db"


@pytest.fixture
def store(db_path: Path) -> Iterator["object"]:
    from core import open_store

    s = open_store(db_path)
    yield s
    s.close()
