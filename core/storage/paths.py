"""Where the memory database lives.

An agent process and the Studio started in the same project must open the same file, whatever
their working directory. So the default is anchored on a project root, found by walking up to the
first folder that holds ``pyproject.toml`` or ``.git`` — never relative to the current directory,
which differs between processes (Mastra's ``file:./mastra.db`` bug, spec §6.6).

Without an explicit path, ``open_store()`` resolves in this order: ``$MEMORY_STUDIO_DB``; the project
root above the file of the code that called it (the first stack frame outside ``core``/``studio``,
unless that file belongs to an installed package or the standard library), as the seeds anchor on
``import.meta.url``; the working directory's project root; the user data folder. An agent started
from another folder therefore still writes the file the Studio of its project reads. Every
resolved path records which rule chose it and why (``memory-studio where`` prints it).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path
from typing import Mapping

import platformdirs

from core.errors import MemoryStudioError
from core.storage.location import MEMORY_URL as MEMORY_URL, OBSERVABILITY_FILE as OBSERVABILITY_FILE
from core.storage.location import ResolvedPath as ResolvedPath
from core.storage.pg.location import PgLocation, is_postgres_url

ENV_VAR = "MEMORY_STUDIO_DB"
PROJECT_MARKERS = ("pyproject.toml", ".git")
DEFAULT_DIR = ".temp"
DEFAULT_FILE = "memory.db"


class DatabaseLocationError(MemoryStudioError, RuntimeError):
    """The database path cannot be used (for example its folder cannot be created)."""


def strip_url(target: str) -> str:
    """Accept ``file:path``, ``file://path``, ``sqlite:///path`` and plain paths."""
    for prefix in ("sqlite+libsql:///", "sqlite:///", "file://", "file:", "libsql:///"):
        if target.startswith(prefix):
            return target[len(prefix):] or MEMORY_URL
    if "://" in target:
        raise DatabaseLocationError(
            f"Remote database URLs are not supported: {_without_secrets(target)!r}. Give a local file path, or a "
            "postgresql:// URL for a PostgreSQL server."
        )
    return target


def _without_secrets(url: str) -> str:
    """``url`` for a message: no user, password or query (a Turso URL carries its token as ``?authToken=``)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
    except ValueError:  # a port that is not a number, brackets that do not close
        return url.split("://", 1)[0] + "://…"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


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
    caller: Path | None = None,
) -> ResolvedPath:
    """Resolve the database path: explicit, then ``$MEMORY_STUDIO_DB``, then the project above
    ``caller`` (the calling code's file; see ``caller_file``), then the working directory's project,
    then the user data folder."""
    env = os.environ if env is None else env
    if explicit is not None and str(explicit) != "":
        if _is_postgres(os.fspath(explicit)):
            return _postgres(os.fspath(explicit), "explicit")
        raw = strip_url(os.fspath(explicit))
        if raw == MEMORY_URL:
            return ResolvedPath(None, "memory", "an in-memory database was asked for")
        return ResolvedPath(_absolute(raw, cwd), "explicit", "the path was given explicitly (--db or open_store(path))")
    if env.get(ENV_VAR):
        if _is_postgres(env[ENV_VAR]):
            return _postgres(env[ENV_VAR], "environment")
        raw = strip_url(env[ENV_VAR])
        if raw == MEMORY_URL:
            return ResolvedPath(None, "memory", f"${ENV_VAR} asks for an in-memory database")
        return ResolvedPath(_absolute(raw, cwd), "environment", f"${ENV_VAR} is set")
    if caller is not None and is_installed_code(caller):
        caller = None  # an installed package or script has no project of its own
    if caller is not None:
        root = find_project_root(caller.resolve().parent)
        if root is not None:
            return ResolvedPath(
                root / DEFAULT_DIR / DEFAULT_FILE, "caller",
                f"{root} is the project of {caller}, the code that opened the database",
            )
    here = (cwd or Path.cwd()).resolve()
    root = find_project_root(here)
    if root is not None:
        return ResolvedPath(root / DEFAULT_DIR / DEFAULT_FILE, "project",
                            f"{root} is the project of the working directory {here}")
    return ResolvedPath(
        Path(platformdirs.user_data_dir("memory-studio")) / DEFAULT_FILE, "user-data",
        f"no project (a folder with {' or '.join(PROJECT_MARKERS)}) above "
        + (f"{caller} or " if caller is not None else "") + f"the working directory {here}",
    )


_ENGINE_DIRS = tuple(Path(__file__).resolve().parents[2] / name for name in ("core", "studio"))


def caller_file() -> Path | None:
    """The file of the first stack frame outside the ``core`` and ``studio`` packages (None if none).

    Frames without a real file (``<frozen runpy>``, ``<string>``) are skipped too.
    """
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if name and not name.startswith("<"):
            path = Path(name).resolve()
            if not any(path.is_relative_to(d) for d in _ENGINE_DIRS):
                return path
        frame = frame.f_back  # type: ignore[assignment]
    return None


def is_installed_code(path: Path) -> bool:
    """Code of an installed package, the standard library or a console script: not a project's own."""
    if {"site-packages", "dist-packages"} & set(path.parts):
        return True
    resolved = path.resolve()
    for key in ("stdlib", "platstdlib", "scripts"):
        folder = sysconfig.get_paths().get(key)
        if folder and resolved.is_relative_to(Path(folder).resolve()):
            return True
    return False


def _is_postgres(target: str) -> bool:
    return is_postgres_url(target)


def _postgres(url: str, how: str) -> ResolvedPath:
    """A Postgres server database (``core.storage.pg``): a location without a file."""
    return PgLocation.parse(url, how)


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
