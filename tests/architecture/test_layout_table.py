"""docs/ARCHITECTURE.md's Layout tables name every module of core/ and studio/, and name only modules that exist.

A module file at the top of core/ or studio/ has a row (or is named in a row beside the module it serves, as
``screenshots_replay.py`` in ``screenshots.py``'s). A module of a package is named in its package's row (the row
``storage/``: `` `reading` (…)``) or has a row of its own (``recall/explain.py``); a package inside a package is
named as a whole (``pg/`` in ``storage/``'s row). Each row's first cell names files or folders that exist. The
check is by name only: what a row says of a module is for a reader to keep true."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Package rows that describe their modules in words instead of by name, so the test cannot hold them to it.
IN_WORDS = {"studio/widgets/": "reusable widgets, each described by what it is (code editor, diff view, ...)"}


def layout_rows() -> dict[str, list[tuple[list[str], str]]]:
    """Each of core/ and studio/: its Layout table's rows as (the names in the first cell, the rest of the row)."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    layout = text.split("\n## Layout\n", 1)[1].split("\n### ", 1)[0]
    core_part, studio_part = layout.split("\n`studio/`:", 1)
    tables: dict[str, list[tuple[list[str], str]]] = {}
    for top, part in (("core", core_part.split("\n`core/`:", 1)[1]), ("studio", studio_part)):
        rows = []
        for line in part.splitlines():
            if line.startswith("| `"):
                first, rest = line[2:].split(" | ", 1)
                rows.append((re.findall(r"`([^`]+)`", first), rest))
        tables[top] = rows
    return tables


def unnamed_modules(top: str, rows: list[tuple[list[str], str]]) -> list[str]:
    named_files = {name for names, _ in rows for name in names}
    named_anywhere = {name for names, rest in rows for name in re.findall(r"`([^`]+)`", rest)} | named_files
    package_rows = {name: rest for names, rest in rows for name in names if name.endswith("/")}
    missing = []
    for path in sorted((ROOT / top).rglob("*.py")):
        rel = path.relative_to(ROOT / top).as_posix()
        if rel in named_files or path.name == "__init__.py" and (rel != "__init__.py" or not path.stat().st_size):
            continue  # a package's __init__ is its row's; an empty one holds nothing
        if "/" not in rel:
            if rel not in named_anywhere:
                missing.append(f"{top}/{rel}: no row")
            continue
        package = max((name for name in package_rows if rel.startswith(name)), key=len, default=rel.split("/")[0] + "/")
        if f"{top}/{package}" in IN_WORDS:
            continue
        if package not in package_rows:
            missing.append(f"{top}/{rel}: no row for {package}")
            continue
        parts = rel[len(package):].split("/")
        inner = parts[0] + "/" if len(parts) > 1 else parts[0][:-3]
        if not re.search(rf"`{re.escape(inner)}`", package_rows[package]):
            missing.append(f"{top}/{rel}: not named in the row of {package} (as `{inner}`)")
    return missing


def test_every_module_of_core_and_studio_is_in_the_layout_table() -> None:
    tables = layout_rows()
    assert len(tables["core"]) > 40 and len(tables["studio"]) > 20  # the tables were found and read
    missing = [line for top, rows in tables.items() for line in unnamed_modules(top, rows)]
    assert not missing, "add each to docs/ARCHITECTURE.md's Layout:\n" + "\n".join(missing)


def test_every_layout_row_names_files_that_exist() -> None:
    gone = [f"{top}/{name}" for top, rows in layout_rows().items() for names, _ in rows for name in names
            if not (ROOT / top / name).exists()]
    assert not gone, "Layout rows naming no file:\n" + "\n".join(gone)
    assert all((ROOT / package).is_dir() for package in IN_WORDS)


def test_a_module_left_out_of_its_package_row_is_found() -> None:
    # The check itself: with one name taken out of storage/'s row, that module is reported.
    rows = layout_rows()["core"]
    cut = [(names, rest.replace("`reading`", "reading") if names == ["storage/"] else rest) for names, rest in rows]
    assert unnamed_modules("core", cut) == ["core/storage/reading.py: not named in the row of storage/ (as `reading`)"]
    assert unnamed_modules("core", [row for row in rows if row[0] != ["errors.py"]]) == ["core/errors.py: no row"]
