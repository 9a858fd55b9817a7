"""Where the memory database lives.

An agent process and the Studio started in the same project must open the same file, whatever
their working directory inside the project. So the default is anchored on the project root, found
by walking up to the first folder that holds ``pyproject.toml`` or ``.git`` — never relative to the
current directory, which differs between processes (Mastra's ``file:./mastra.db`` bug, spec §6.6).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import platformdirs

from core.errors import MemoryStudioError

ENV_VAR = "MEMORY_STUDIO_DB"
PROJECT_MARKERS = ("pyproject.toml", ".git")
DEFAULT_DIR = ".temp"
DEFAULT_FILE = "memory.db"
OBSERVABILITY_FILE = "observability.duckdb"
MEMORY_URL = ":memory:"


class DatabaseLocationError(MemoryStudioError, RuntimeError):
    """The database path cannot be used (for example its folder cannot be created)."""


@dataclass(frozen=True)
class ResolvedPath:
    """A database location and how it was chosen (shown to users so they know which file)."""

    path: Path | None  # None only for an in-memory database
    how: str  # "explicit" | "environment" | "project" | "user-data" | "memory"

    @property
    def display(self) -> str:
        return MEMORY_URL if self.path is None else str(self.path)

    @property
    def observability_path(self) -> Path | None:
        """The DuckDB file beside the memory database (seed 001: same folder, separate engine)."""
        return None if self.path is None else self.path.with_name(OBSERVABILITY_FILE)


def strip_url(target: str) -> str:
    """Accept ``file:path``, ``file://path``, ``sqlite:///path`` and plain paths."""
    for prefix in ("sqlite+libsql:///", "sqlite:///", "file://", "file:", "libsql:///"):
        if target.startswith(prefix):
            return target[len(prefix):] or MEMORY_URL
    if "://" in target:
        raise DatabaseLocationError(
            f"Remote database URLs are not supported: {target!r}. Give a local file path instead."
        )
    return target


def find_project_root(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return folder
    return None


def resolve_db_path(
    explicit: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> ResolvedPath:
    """Resolve the database path: explicit, then ``$MEMORY_STUDIO_DB``, then project, then user data."""
    env = os.environ if env is None else env
    if explicit is not None and str(explicit) != "":
        raw = strip_url(os.fspath(explicit))
        if raw == MEMORY_URL:
            return ResolvedPath(None, "memory")
        return ResolvedPath(_absolute(raw, cwd), "explicit")
    if env.get(ENV_VAR):
        raw = strip_url(env[ENV_VAR])
        if raw == MEMORY_URL:
            return ResolvedPath(None, "memory")
        return ResolvedPath(_absolute(raw, cwd), "environment")
    here = (cwd or Path.cwd()).resolve()
    root = find_project_root(here)
    if root is not None:
        return ResolvedPath(root / DEFAULT_DIR / DEFAULT_FILE, "project")
    return ResolvedPath(Path(platformdirs.user_data_dir("memory-studio")) / DEFAULT_FILE, "user-data")


def _absolute(raw: str, cwd: Path | None) -> Path:
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = (cwd or Path.cwd()) / path
    return path.resolve()


def ensure_parent(path: Path) -> None:
    """Create the parent folder; libSQL does not, and fails with a cryptic CANTOPEN instead."""
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatabaseLocationError(
            f"Cannot create the database folder {parent}: {exc.strerror or exc}. "
            f"Choose another location with --db or ${ENV_VAR}."
        ) from exc
    if not os.access(parent, os.W_OK):
        raise DatabaseLocationError(
            f"The database folder {parent} is not writable. "
            f"Fix its permissions or choose another location with --db or ${ENV_VAR}."
        )
