"""``memory-studio test``: memory checks in CI (registered by ``core.cli``).

``test`` exits 0 when every check passes, 1 when one fails or cannot run, 2 when the checks file (or
``--options``) is not usable. ``--export FILE`` runs over a JSON export instead of a database: it is
imported into a temporary database first, so CI can keep a small fixture in the repository.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TextIO

from core.cli_store import open_cli_store
from core.storage import open_store

if TYPE_CHECKING:  # pragma: no cover
    from core.checks.runner import CheckResult

# The checks' model and runner (the memory engine, SQLAlchemy) load when ``test`` runs: ``core.cli`` imports
# this module to build its parser for every command.

COMMANDS = ("test",)
EXIT_BAD_FILE = 2


def add_parsers(sub: Any, db_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("test", help="run memory checks: rebuild each pinned turn's prompt (offline) and test it")
    p.add_argument("file", help="checks file: a JSON (or YAML) list of checks")
    db_arg(p)
    p.add_argument("--export", default=None,
                   help="run over this JSON export (imported into a temporary database) instead of --db")
    p.add_argument("--options", default=None,
                   help="a what-if: memory options as JSON (or @file.json), merged over each turn's recorded options")
    p.add_argument("--junit", default=None, metavar="OUT.xml", help="also write a JUnit XML report here")
    p.add_argument("-q", "--quiet", action="store_true", help="print failures and the total only")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _test(args, out, err)


# -- test ----------------------------------------------------------------------------------------------
def parse_options(text: str | None) -> dict[str, Any]:
    """``--options``: JSON text or ``@path``; checked against the memory options now (exit 2 if bad)."""
    from core.checks.model import CheckFileError
    from core.options import MemoryOptions, OptionsError

    if not text:
        return {}
    source = text
    if text.startswith("@"):
        try:
            source = Path(text[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise CheckFileError(f"--options {text}: cannot be read ({exc}).") from None
    try:
        value = json.loads(source)
    except json.JSONDecodeError as exc:
        raise CheckFileError(f"--options is not valid JSON ({exc.msg} at position {exc.pos}); for example "
                             "--options '{\"semantic_recall\": false}'.") from None
    if not isinstance(value, dict):
        raise CheckFileError("--options must be a JSON object of memory options, e.g. '{\"last_messages\": 4}'.")
    try:
        MemoryOptions().merged(value)
    except (OptionsError, TypeError, ValueError) as exc:
        raise CheckFileError(f"--options: {exc}") from None
    return value


def format_result(result: CheckResult, *, quiet: bool = False) -> list[str]:
    from core.checks.runner import ERROR, FAIL, PASS

    check = result.check
    label = {PASS: "PASS ", FAIL: "FAIL ", ERROR: "ERROR"}[result.status]
    where = f"{check.thread}, turn {result.turn_number}" if result.turn_number else check.thread
    extra = f", {result.tokens:,} tokens" if result.tokens is not None else ""
    if result.status == PASS and quiet:
        return []
    lines = [f"{label} {check.name}  ({where}{extra})"]
    if result.error:
        lines.append(f"      {result.error}")
    for failure in result.failures:
        lines.append(f"      {failure.assertion}: {failure.message}")
        lines += [f"        {line}" for line in failure.excerpt.splitlines()]
    return lines


def _test(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from core.checks.model import CheckFileError, load_checks

    try:
        checks = load_checks(args.file)
        options = parse_options(args.options)
    except CheckFileError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_BAD_FILE
    if args.export and args.db:
        print("error: give --db or --export, not both: --export runs over the export alone (imported into a "
              "temporary database), so --db would be ignored.", file=err)
        return EXIT_BAD_FILE
    if not checks:
        # Not a pass: a CI job over a file emptied by mistake would go green without checking anything
        # (as pytest fails a run that collects no test).
        print(f"error: {args.file} holds no checks, so nothing was checked. Add checks to it (the Studio's Checks "
              "tab, or Pin in the Prompt Inspector), or stop running it.", file=err)
        return EXIT_BAD_FILE
    if args.export:
        with tempfile.TemporaryDirectory(prefix="memory-checks-") as folder:
            target = Path(folder) / "fixture.db"
            from core.transfer.format import load
            from core.transfer.importer import import_data

            try:
                data = load(args.export)
            except Exception as exc:  # noqa: BLE001 - any unreadable export is a bad input file
                print(f"error: {args.export}: {exc}", file=err)
                return EXIT_BAD_FILE
            with open_store(target) as store:
                # A scratch copy of the file alone: its memory overrides are the ones its turns ran with.
                import_data(store, data, with_configs=True)
                where = f"{args.export} (imported)"
                return _run(store, checks, options, args, where, out, err)
    with open_cli_store(args.db, read_only=True) as store:
        return _run(store, checks, options, args, store.location.display, out, err)


def _run(store: Any, checks: list[Any], options: dict[str, Any], args: argparse.Namespace, where: str,
         out: TextIO, err: TextIO) -> int:
    from core.checks.runner import ERROR, FAIL, PASS, CheckRunner
    from core.terminal_text import visible

    from core.stored_text import json_text

    what_if = f" with {json_text(options)}" if options else ""
    if not args.quiet:
        out.write(f"memory checks: {len(checks)} from {args.file} against {where}{what_if}\n")
    results = CheckRunner(store, options=options, where=where).run_all(checks)
    for result in results:
        for line in format_result(result, quiet=args.quiet):
            out.write(visible(line, keep="\t") + "\n")  # excerpts hold stored text
    passed = sum(r.status == PASS for r in results)
    failed = sum(r.status == FAIL for r in results)
    errors = sum(r.status == ERROR for r in results)
    out.write(f"{passed} passed, {failed} failed, {errors} could not run\n")
    if args.junit:
        from core.checks.junit import write_junit

        props = {"database": where, **({"options": json_text(options)} if options else {})}
        try:
            write_junit(args.junit, results, suite=Path(args.file).name, properties=props)
        except OSError as exc:  # the checks ran; only the report could not be written
            print(f"error: --junit {args.junit}: cannot be written ({exc.strerror or exc}). Give a file path "
                  "in a folder you can write to.", file=err)
            return EXIT_BAD_FILE
    return 0 if failed == 0 and errors == 0 else 1


__all__ = ["COMMANDS", "EXIT_BAD_FILE", "add_parsers", "format_result", "parse_options", "run"]
