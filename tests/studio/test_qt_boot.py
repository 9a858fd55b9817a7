"""``studio.qt_boot``: Qt loads with shiboken's signature module compiled from a cache, and behaves the
same as without it. Each check runs a fresh interpreter (PySide6 loads once per process)."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

LOAD = r"""
import builtins, json, sys
real = builtins.compile
from studio.qt_boot import cache_file, import_qt
counts = import_qt()
from PySide6.QtWidgets import QApplication, QWidget
app = QApplication([])
try:
    QWidget().resize("wide")
except TypeError as exc:
    message = str(exc)
print(json.dumps({**counts, "file": str(cache_file()), "compile_restored": builtins.compile is real,
                  "message": message}))
"""


def load(cache: Path) -> dict[str, Any]:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(cache)}
    proc = subprocess.run([sys.executable, "-c", LOAD], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def test_the_signature_sources_come_from_the_cache_from_the_second_start_on(tmp_path: Path) -> None:
    first = load(tmp_path)
    assert first["compiled"] > 0 and first["cached"] == 0
    path = Path(first["file"])
    assert path.parent == tmp_path / "memory-studio" and path.exists()
    second = load(tmp_path)
    assert second["compiled"] == 0 and second["cached"] == first["compiled"]
    for run in (first, second):
        assert run["compile_restored"] is True
        # PySide's argument errors (built by the signature module) read the same with cached code.
        assert "Supported signatures:" in run["message"] and "resize(w: int, h: int" in run["message"]
    assert first["message"] == second["message"]


def test_a_changed_source_is_compiled_again_and_a_broken_cache_is_replaced(tmp_path: Path) -> None:
    path = Path(load(tmp_path)["file"])
    with path.open("rb") as f:
        entries = marshal.load(f)
    name = sorted(entries)[0]
    source, code = entries[name]
    entries[name] = (source + b"\n# another version\n", code)  # as if PySide6 had been upgraded
    with path.open("wb") as f:
        marshal.dump(entries, f)
    changed = load(tmp_path)
    assert changed["compiled"] == 1 and changed["cached"] == len(entries) - 1
    path.write_bytes(b"not marshal data")
    broken = load(tmp_path)
    assert broken["compiled"] == len(entries) and "Supported signatures:" in broken["message"]
    assert load(tmp_path)["compiled"] == 0  # rewritten whole


def test_an_unwritable_cache_folder_only_costs_the_compile(tmp_path: Path) -> None:
    (tmp_path / "memory-studio").write_text("a file where the folder would be")
    run = load(tmp_path)
    assert run["compiled"] > 0 and "Supported signatures:" in run["message"]
    assert load(tmp_path)["compiled"] > 0
