"""Starting over when the trace file is broken.

A full disk (or a crash while DuckDB created the file) can leave ``observability.duckdb`` empty or
truncated. DuckDB then refuses to open it, every flush fails, and spans pile up in spill files
forever. Traces are derived data (deleting the file loses no conversation), so the writer moves the
broken file aside as ``<file>.broken-<UTC time>`` (an empty one is simply removed), and the next write
creates a new file and imports the spill files into it. Readers never do this: looking never writes.
"""

from __future__ import annotations

import logging
import os
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from core.traces.locking import _observed, _process_lock, gated, is_lock_conflict

log = logging.getLogger(__name__)

# What DuckDB 1.x/2.x says about a file it cannot use as a database (checked against empty,
# truncated and overwritten files). Permission and disk-space errors are not among them: those files
# are fine, and moving them would lose traces.
_BROKEN = ("not a valid duckdb database file", "could not read enough bytes", "corrupt database file",
           "checksum")


def is_broken_file_error(exc: BaseException) -> bool:
    if not isinstance(exc, duckdb.Error) or is_lock_conflict(exc):
        return False
    text = str(exc).lower()
    return any(marker in text for marker in _BROKEN)


def set_aside_if_broken(path: Path, budget_s: float) -> bool:
    """Move ``path`` aside if it is still broken; True when a fresh file may be created now.

    Runs under the exclusive sidecar lock and the in-process lock, so no other writer or reader opens
    the file in between; a file that opens fine (another process recovered it first) is left alone.
    """
    with gated(path, exclusive=True, budget_s=budget_s), _process_lock(path):
        if not path.exists():
            return True
        try:
            con = _observed(duckdb.connect(str(path), read_only=True), path, True)  # (the SQL Log lists what it runs)
        except duckdb.Error as exc:
            if not is_broken_file_error(exc):
                return False
            reason = str(exc).splitlines()[0]
        else:
            con.close()
            return True
        wal = path.with_name(path.name + ".wal")
        if path.stat().st_size == 0:
            path.unlink()
            if wal.exists():
                wal.unlink()
            log.warning("removed the empty trace file %s (%s); starting a new one", path, reason)
            return True
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        aside = path.with_name(f"{path.name}.broken-{stamp}")
        os.replace(path, aside)
        if wal.exists():
            os.replace(wal, aside.with_name(aside.name + ".wal"))
        log.warning("trace file %s is broken (%s); moved it to %s and started a new one", path, reason, aside.name)
        return True
