"""The command line as a developer uses it: wrong files, wrong flags, pipes, terminals, interruptions.

Each test is a defect a user could cause: a traceback, data written where only looking was asked
for, or an error that does not say what to do.
"""

from __future__ import annotations

import hashlib
import io
import os
import select
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from core import Memory, Message, open_store
from core.cli import main as cli_main
from core.traces.store import DuckDBObservabilityStore

from .test_traces_postgres import PgSpanStore
from .test_traces_store import agent_trace

ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def seed(path: Path, thread: str = "t1", resource: str = "ada") -> None:
    with open_store(path) as store:
        Memory(store).save_messages([Message.user("I am allergic to peanuts", thread_id=thread, resource_id=resource)])


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_traces_prune_with_a_huge_age_limit_deletes_nothing(tmp_path: Path) -> None:
    # `--keep-days 1e308` (or 1e6) reached back before the year 1: OverflowError with a traceback.
    db = tmp_path / "m.db"
    seed(db)
    spans = DuckDBObservabilityStore(tmp_path / "observability.duckdb")
    spans.write_spans(agent_trace("old", base=datetime(2001, 1, 1, tzinfo=timezone.utc)))
    for days in ("1e308", "1000000"):
        code, out, err = run("traces", "prune", "--db", str(db), "--keep-days", days)
        assert code == 0, err
        assert "deleted 0 traces" in out
    assert spans.count_traces() == 1
    assert spans.prune(keep_days=1e308).traces_deleted == 0


def test_postgres_prune_with_a_huge_age_limit_deletes_nothing(pg_url: str) -> None:
    with open_store(pg_url) as store:
        obs = store.observability
        assert isinstance(obs, PgSpanStore)
        obs.write_spans(agent_trace("old", base=datetime(2001, 1, 1, tzinfo=timezone.utc)))
        assert obs.prune(keep_days=1e308).traces_deleted == 0
        assert obs.count_traces() == 1
