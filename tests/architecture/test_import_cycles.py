"""No import cycles among the modules of core/ and studio/ (deferred imports count; only
``TYPE_CHECKING`` imports are left out). Where two modules need each other, the shared part moves
down, or a protocol breaks the loop."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

_spec = importlib.util.spec_from_file_location("import_graph", Path(__file__).with_name("import_graph.py"))
assert _spec is not None and _spec.loader is not None
graph = importlib.util.module_from_spec(_spec)
sys.modules["import_graph"] = graph
_spec.loader.exec_module(graph)


def test_core_and_studio_have_no_import_cycles():
    edges = graph.import_edges()
    assert len({e.source for e in edges}) > 150  # the whole tree was read, not an empty folder
    found = graph.cycles(edges)
    assert not found, "import cycles:\n" + "\n".join(graph.describe(c, edges) for c in found)


def _plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_the_check_finds_a_planted_cycle_through_a_deferred_import(tmp_path):
    _plant(tmp_path, {
        "core/__init__.py": "",
        "core/low.py": """
            def helper():
                from core.high import thing  # deferred: still a cycle
                return thing
        """,
        "core/high.py": "from core.low import helper\nthing = 1\n",
        "core/fine.py": "from core import low\n",
        "studio/__init__.py": "",
        "studio/a.py": "from . import b\n",
        "studio/b.py": "import studio.a\n",
    })
    edges = graph.import_edges(tmp_path)
    assert graph.cycles(edges) == [["core.high", "core.low"], ["studio.a", "studio.b"]]
    deferred = [e for e in edges if e.source == "core.low"]
    assert [(e.target, e.deferred) for e in deferred] == [("core.high", True)]
    assert "core.low -> core.high" in graph.describe(["core.high", "core.low"], edges)


def test_type_checking_imports_are_no_cycle(tmp_path):
    _plant(tmp_path, {
        "core/__init__.py": "",
        "core/low.py": """
            from typing import TYPE_CHECKING
            import typing

            if TYPE_CHECKING:
                from core.high import Thing
            if typing.TYPE_CHECKING:
                import core.high
            else:
                pass
        """,
        "core/high.py": "from core.low import *\n",
        "studio/__init__.py": "",
    })
    assert graph.cycles(graph.import_edges(tmp_path)) == []
    # ... but the else branch of a TYPE_CHECKING test runs, so an import there counts.
    (tmp_path / "core/low.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\nelse:\n    import core.high\n", encoding="utf-8")
    assert graph.cycles(graph.import_edges(tmp_path)) == [["core.high", "core.low"]]


def test_a_name_from_a_package_is_an_edge_to_its_module_or_to_the_package(tmp_path):
    _plant(tmp_path, {
        "core/__init__.py": "",
        "core/pkg/__init__.py": "from core.pkg.part import VALUE\nCONSTANT = 1\n",
        "core/pkg/part.py": "VALUE = 2\n",
        "core/user.py": "from core.pkg import part, CONSTANT\nfrom .pkg.part import VALUE\n",
        "studio/__init__.py": "",
    })
    edges = {(e.source, e.target) for e in graph.import_edges(tmp_path)}
    assert ("core.user", "core.pkg.part") in edges and ("core.user", "core.pkg") in edges
    assert ("core.pkg", "core.pkg.part") in edges
