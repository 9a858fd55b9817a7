"""Check that requirements.lock pins every dependency pyproject.toml asks for, within its range.

    python tools/lock_check.py requirements.lock

Runs before `make install` installs from the lock (on a fresh virtualenv, so it uses only the standard
library and the `packaging` that pip vendors). A dependency added to pyproject.toml without `make lock`
would otherwise be missing from the installed environment, and the first test to import it would fail
far from the cause. Exit 0 when the lock covers pyproject.toml; 1 with what to run when it does not.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version
except ImportError:  # a fresh virtualenv: pip's own copy
    from pip._vendor.packaging.markers import default_environment  # type: ignore[no-redef]
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import canonicalize_name  # type: ignore[no-redef]
    from pip._vendor.packaging.version import Version  # type: ignore[no-redef]

#: The extras `make install` installs (and `make lock` locks); dev pulls in the optional ones it tests.
LOCKED_EXTRAS = ("dev",)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?\s*$")


def wanted(pyproject: Path) -> list[Requirement]:
    """The project's requirements plus those of the locked extras, self-references followed."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    name = canonicalize_name(project["name"])
    extras = project.get("optional-dependencies", {})
    out: list[Requirement] = []
    seen: set[str] = set()

    def add(specs: list[str]) -> None:
        for spec in specs:
            req = Requirement(spec)
            if canonicalize_name(req.name) == name:
                for extra in sorted(req.extras):
                    if extra not in seen:
                        seen.add(extra)
                        add(extras.get(extra, []))
            else:
                out.append(req)

    add(list(project.get("dependencies", [])))
    for extra in LOCKED_EXTRAS:
        seen.add(extra)
        add(extras.get(extra, []))
    return out


def pins(lock: Path) -> dict[str, list[tuple[str, str | None]]]:
    """name → [(version, marker or None)] for every pin line of the lock."""
    out: dict[str, list[tuple[str, str | None]]] = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        match = _PIN.match(line)
        if match:
            out.setdefault(canonicalize_name(match[1]), []).append((match[2], match[3]))
    return out


def problems(pyproject: Path, lock: Path) -> list[str]:
    if not lock.exists():
        return [f"{lock} does not exist"]
    env = default_environment()
    locked = pins(lock)
    found: list[str] = []
    for req in wanted(pyproject):
        if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
            continue  # not for this platform / Python
        entries = locked.get(canonicalize_name(req.name))
        if not entries:
            found.append(f"{req.name} ({req}) is not in {lock.name}")
            continue
        from_lock = [v for v, marker in entries if marker is None or Requirement(f"x; {marker}").marker.evaluate(env)]
        if not from_lock:
            found.append(f"{req.name}: no pin in {lock.name} applies to this platform")
        elif not any(req.specifier.contains(Version(v), prereleases=True) for v in from_lock):
            found.append(f"{req.name}: {lock.name} pins {', '.join(from_lock)}, outside {req.specifier}")
    return found


def main(argv: list[str]) -> int:
    lock = Path(argv[1] if len(argv) > 1 else "requirements.lock")
    pyproject = lock.with_name("pyproject.toml")
    found = problems(pyproject, lock)
    if found:
        sys.stderr.write(f"{lock.name} does not match pyproject.toml:\n")
        sys.stderr.writelines(f"  - {p}\n" for p in found)
        sys.stderr.write("Run `make lock` to refresh it (then commit both files).\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
