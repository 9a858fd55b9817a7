"""Worker jobs of the Checks view (no Qt): read a checks file, run its checks (now, and under a what-if),
add a pinned check. Running only reads the database; adding a check writes the user's checks file,
never the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from core import Memory, MemoryOptions, Store
from core.checks import Check, CheckResult, CheckRunner, add_check, load_checks

MemoryFactory = Callable[[MemoryOptions, str], Memory]


@dataclass
class ChecksRun:
    path: Path
    checks: list[Check]
    results: list[CheckResult] | None = None
    what_if: list[CheckResult] | None = None
    options: Mapping[str, Any] | None = None
    exists: bool = True  # False: no file at ``path`` (yet: pinning a check makes it)


def read(path: Path) -> ChecksRun:
    exists = path.exists()
    return ChecksRun(path, load_checks(path) if exists else [], exists=exists)


def run(store: Store, factory: MemoryFactory, path: Path, options: Mapping[str, Any] | None = None,
        report: Callable[[int, int], None] | None = None) -> ChecksRun:
    """Every check of the file as things stand, and with ``options`` (a what-if) when given."""
    exists = path.exists()
    checks = load_checks(path) if exists else []
    total = len(checks) * (2 if options else 1)
    done = 0
    out = ChecksRun(path, checks, options=options, exists=exists)
    for which in ((None, options) if options else (None,)):
        runner = CheckRunner(store, options=which, memory_factory=factory)
        results = []
        for check in checks:
            results.append(runner.run(check))
            done += 1
            if report is not None:
                report(done, total)
        if which is None:
            out.results = results
        else:
            out.what_if = results
    return out


def pin(path: Path, check: Check) -> Check:
    return add_check(path, check)


__all__ = ["ChecksRun", "pin", "read", "run"]
