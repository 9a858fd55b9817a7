"""Outside core/storage/, code asks what a backend can do (``store.capabilities``,
``capabilities_of(conn)``), never which backend it is; tables are listed and looked up through
``core.storage.catalog``."""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = ("core/storage/",)  # the one place that knows the backends by name

#: Attributes and names that ask which backend this is.
NAME_CHECKS = {"is_postgres", "is_sqlite", "is_libsql", "is_duckdb"}
#: SQLAlchemy's dialect names; compared with anything, they are a check of which backend this is.
DIALECT_NAMES = {"postgresql", "sqlite"}
#: A backend's own catalog read in SQL (what ``core.storage.catalog`` is for).
CATALOG_SQL = re.compile(
    r"\b(?:FROM|JOIN|PRAGMA)\b[^;]*\b(?:sqlite_master|sqlite_schema|pg_catalog|pg_tables|table_info|table_list)\b",
    re.IGNORECASE | re.DOTALL)


def backend_checks(path: Path, source: str | None = None) -> list[str]:
    """Each place of one file that asks which backend this is, as ``line: what``."""
    text = path.read_text(encoding="utf-8") if source is None else source
    found: list[str] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and node.attr in NAME_CHECKS:
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in NAME_CHECKS:
            found.append(f"{node.lineno}: {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr == "name" and (
                (isinstance(node.value, ast.Attribute) and node.value.attr == "dialect")
                or (isinstance(node.value, ast.Name) and node.value.id == "dialect")):
            found.append(f"{node.lineno}: dialect.name")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in NAME_CHECKS:
            found.append(f"{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
        elif isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Constant) and isinstance(side.value, str) and side.value in DIALECT_NAMES:
                    found.append(f"{node.lineno}: compared with {side.value!r}")
                elif isinstance(side, (ast.Tuple, ast.List, ast.Set)) and any(
                        isinstance(e, ast.Constant) and e.value in DIALECT_NAMES for e in side.elts):
                    found.append(f"{node.lineno}: compared with a dialect name")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and CATALOG_SQL.search(node.value):
            found.append(f"{node.lineno}: reads the catalog by hand: {node.value.strip()[:60]!r}")
    return sorted(found, key=lambda hit: int(hit.split(":")[0]))


def library_files() -> list[Path]:
    return [p for package in ("core", "studio") for p in sorted((ROOT / package).rglob("*.py"))
            if not p.relative_to(ROOT).as_posix().startswith(ALLOWED)]


def test_no_backend_name_checks_outside_storage():
    files = library_files()
    assert len(files) > 150
    found = {p.relative_to(ROOT).as_posix(): hits for p in files if (hits := backend_checks(p))}
    assert not found, "ask store.capabilities / capabilities_of(conn) instead:\n" + "\n".join(
        f"{path}:{hit}" for path, hits in found.items() for hit in hits)


def test_the_scan_finds_each_spelling(tmp_path):
    planted = tmp_path / "planted.py"
    source = textwrap.dedent('''
        from core.storage import dialect

        def a(conn, store, location):
            if dialect.is_postgres(conn):
                pass
            if conn.dialect.name == "postgresql":
                pass
            if getattr(location, "is_postgres", False):
                pass
            if store.db.engine.dialect.name in ("sqlite",):
                pass
            return conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'")

        def b(conn):
            return conn.exec_driver_sql("SELECT 1 FROM pg_catalog.pg_tables WHERE tablename = ?")
    ''')
    planted.write_text(source, encoding="utf-8")
    hits = backend_checks(planted)
    assert [h.split(":")[0] for h in hits] == ["5", "7", "7", "9", "11", "11", "13", "16"], hits
    assert any("dialect.name" in h for h in hits) and any("sqlite_master" in h for h in hits)


def test_what_is_not_a_backend_check(tmp_path):
    planted = tmp_path / "fine.py"
    planted.write_text(textwrap.dedent('''
        from core.storage import catalog
        from core.storage.capabilities import capabilities_of

        NEVER_WRITTEN = frozenset({"sqlite_sequence", "sqlite_master"})  # names, not a query

        def a(conn, source):
            if capabilities_of(conn).full_text == "fts5" and catalog.has_table(conn, "x"):
                pass
            if source.kind == "duckdb":  # where traces live, not which database this is
                pass
            return conn.exec_driver_sql("SELECT count(*) FROM information_schema.tables")  # DuckDB's
    '''), encoding="utf-8")
    assert backend_checks(planted) == []
