"""The import graph of ``core/`` and ``studio/``, read from the sources with ``ast``.

Every ``import`` counts, at module level or inside a function (a deferred import still ties the two
modules: the layering must not hold only because an import waits), and so does
``import_module("<literal name>")``. Imports under ``if TYPE_CHECKING:`` are left out: they never
run. ``from package import name`` is an edge to ``package.name`` when that is a module of the tree,
else to the package itself. Names computed at run time (a lazy ``__getattr__`` table, a list of
migration providers) are not followed.

Run it to print the cycles: ``.venv/bin/python tests/architecture/import_graph.py``.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "studio")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    deferred: bool  # inside a function or method


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules_of(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            found[module_name(root, path)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool, known: set[str]) -> None:
        self.module, self.is_package, self.known = module, is_package, known
        self.depth = 0
        self.edges: list[Edge] = []

    def _add(self, target: str, line: int) -> None:
        # The longest prefix of the dotted name that is a module of the tree.
        parts = target.split(".")
        while parts and ".".join(parts) not in self.known:
            parts.pop()
        if parts and ".".join(parts) != self.module:
            self.edges.append(Edge(self.module, ".".join(parts), line, self.depth > 0))

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for child in node.orelse:  # only the else branch runs
                self.visit(child)
            return
        self.generic_visit(node)

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Call(self, node: ast.Call) -> None:
        # importlib.import_module("core.x") with a literal name is an import too.
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "import_module" and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            self._add(node.args[0].value, node.lineno)
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.module.split(".")
            if not self.is_package:
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        for alias in node.names:
            full = f"{source}.{alias.name}"
            self._add(full if full in self.known else source, node.lineno)


def import_edges(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[Edge]:
    modules = modules_of(root, packages)
    known = set(modules)
    edges: list[Edge] = []
    for name, path in modules.items():
        visitor = _Imports(name, path.name == "__init__.py", known)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        edges.extend(visitor.edges)
    return edges


def cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted, largest first."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def describe(component: list[str], edges: list[Edge]) -> str:
    members = set(component)
    lines = [" <-> ".join(component)]
    for e in sorted(set(edges), key=lambda e: (e.source, e.target, e.line)):
        if e.source in members and e.target in members:
            how = "deferred" if e.deferred else "top level"
            lines.append(f"    {e.source} -> {e.target} (line {e.line}, {how})")
    return "\n".join(lines)


def main() -> int:
    edges = import_edges()
    found = cycles(edges)
    modules = len(modules_of(ROOT))
    print(f"{modules} modules, {len({(e.source, e.target) for e in edges})} import edges, {len(found)} cycles")
    for component in found:
        print(describe(component, edges))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
