"""A database location: where it is, how it was chosen, and what its backend can do.

``ResolvedPath`` is a file (or an in-memory database); ``core.storage.pg.location.PgLocation`` is a
server database. ``core.storage.paths`` decides which one a target names.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from core.storage.capabilities import LIBSQL, Capabilities

OBSERVABILITY_FILE = "observability.duckdb"
OWNER_SUFFIX = ".owner"  # ``observability.duckdb.owner``: the name of the database whose traces it holds
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
        folder, separate engine; ``trace_file_for``); whether traces go there is ``core.traces.home``'s
        decision."""
        return None if self.path is None else trace_file_for(self.path)


def trace_file_for(db_file: Path) -> Path:
    """The trace file of the database file ``db_file``: ``observability.duckdb`` beside it (seed 001; the
    file Mastra's dev server writes) unless another database of the folder owns that one, then
    ``<file name>.observability.duckdb``, so two databases in one folder never read, prune or forget
    each other's traces. Who owns ``observability.duckdb`` is said by ``observability.duckdb.owner``
    (the owning file's name), written by the first process that writes a span there (``try_claim_trace_file``);
    a file without one (Mastra's, or from before 2026-12-04) is the traces of whichever database
    claims it first. Reads only."""
    own = db_file.with_name(f"{db_file.name}.{OBSERVABILITY_FILE}")
    if own.exists():
        return own
    shared = db_file.with_name(OBSERVABILITY_FILE)
    owner = _owner_of(shared)
    return shared if owner is None or owner == db_file.name else own


def try_claim_trace_file(db_file: Path) -> tuple[Path, str | None]:
    """``trace_file_for``, for a process about to write spans: an unowned ``observability.duckdb`` is
    claimed for ``db_file`` first (atomically: of two databases claiming at once, one gets it and the
    other its own file). Also returns, when the claim could not be written (a read-only folder, a file
    system without links), a sentence saying so and what to do; the shared file is then written
    unclaimed, as before claims existed."""
    target = trace_file_for(db_file)
    shared = db_file.with_name(OBSERVABILITY_FILE)
    if target != shared:
        return target, None
    if _owner_of(shared) is None:
        owner = shared.with_name(shared.name + OWNER_SUFFIX)
        draft = owner.with_name(f"{owner.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            draft.write_text(db_file.name + "\n", encoding="utf-8")
            try:
                os.link(draft, owner)  # (created whole or not at all: a reader never sees it half written)
            except FileExistsError:
                pass  # claimed meanwhile: by this database's other process, or by another database
            finally:
                draft.unlink(missing_ok=True)
        except OSError as exc:  # nothing claimed, nothing lost
            return target, (f"could not claim {shared.name} for {db_file.name} ({owner.name}: "
                            f"{exc.strerror or exc}); its traces go there unclaimed, so another database of "
                            f"{shared.parent} may later write there too. Make the folder writable, or give "
                            "each database its own folder")
    return trace_file_for(db_file), None  # (as claimed now, by whoever claimed it)


def _owner_of(shared: Path) -> str | None:
    """The database file name ``shared``'s owner file names, or None when it has none (or is unreadable)."""
    try:
        text = shared.with_name(shared.name + OWNER_SUFFIX).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    name = text[:-1] if text.endswith("\n") else text
    return name or None
