"""The engine's tests stay in the engine's ring: nothing under tests/core imports the Studio or Qt."""

from __future__ import annotations

import ast
from pathlib import Path

FORBIDDEN = ("studio", "PySide6", "shiboken6", "pytestqt")


def test_core_tests_import_neither_the_studio_nor_qt() -> None:
    offenders = []
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == [], "core tests must not import the Studio or Qt (move them to tests/studio)"
