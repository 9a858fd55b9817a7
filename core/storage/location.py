"""A database location: where it is, how it was chosen, and what its backend can do.

``ResolvedPath`` is a file (or an in-memory database); ``core.storage.pg.location.PgLocation`` is a
server database. ``core.storage.paths`` decides which one a target names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from core.storage.capabilities import LIBSQL, Capabilities

OBSERVABILITY_FILE = "observability.duckdb"
MEMORY_URL = ":memory:"


@dataclass(frozen=True)
class ResolvedPath:
    """A database location and how it was chosen (shown to users so they know which file)."""

    path: Path | None  # None only for an in-memory database
    how: str  # "explicit" | "environment" | "caller" | "project" | "user-data" | "memory"
    reason: str = field(default="", compare=False)  # one sentence: why this file

    @property
    def display(self) -> str:
        return MEMORY_URL if self.path is None else str(self.path)

    @property
    def capabilities(self) -> Capabilities:
        """What the backend this location opens can do, known before it is opened."""
        return LIBSQL

    @property
    def observability_path(self) -> Path | None:
        """The file beside a database file that holds the observability domain (seed 001: same
        folder, separate engine); whether traces go there is ``core.traces.home``'s decision."""
        return None if self.path is None else self.path.with_name(OBSERVABILITY_FILE)
