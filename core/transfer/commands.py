"""``memory-studio export`` and ``memory-studio import`` (registered by ``core.cli``)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TextIO

from core.cli_store import open_cli_store
from core.storage import open_store

if TYPE_CHECKING:  # pragma: no cover
    from core.transfer.report import ImportReport

# The export and import machinery (SQLAlchemy, the memory engine) loads when ``export`` or ``import`` runs:
# ``core.cli`` imports this module to build its parser for every command.

COMMANDS = ("export", "import")


def add_parsers(sub: Any, db_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add both subcommands to ``core.cli``'s subparsers (``sub``)."""
    p = sub.add_parser("export", help="export a thread or a resource as JSON (for import) or a Markdown transcript")
    db_arg(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--thread", help="thread id")
    which.add_argument("--resource", help="resource id (all of its threads)")
    p.add_argument("--format", choices=("json", "markdown"), default="json")
    p.add_argument("-o", "--output", help="file to write (default: standard output)")
    p.add_argument("--no-versions", action="store_true", help="leave out the working-memory history")
    p.add_argument("--no-observations", action="store_true", help="leave out observational memory")
    p.add_argument("--no-turns", action="store_true", help="leave out the turn records (and the tool definitions they name)")
    p.add_argument("--no-agents", action="store_true",
                   help="leave out the agents' registered configurations and the Studio's overrides")
    p.add_argument("--with-traces", action="store_true",
                   help="include every span of the threads' runs (the trace store beside the database)")

    p = sub.add_parser("import", help="import a JSON export (ids kept; importing twice changes nothing)")
    db_arg(p)
    p.add_argument("file", help="a file written by 'memory-studio export --format json'")
    p.add_argument("--overwrite", action="store_true",
                   help="replace rows that exist with different content (default: keep them and report)")
    p.add_argument("--with-configs", action="store_true",
                   help="also take the file's memory overrides (working-memory templates and schemas, which "
                        "change what every user of that memory is asked to keep; default: leave them out and report)")
    p.add_argument("--dry-run", action="store_true", help="only report what would be written")
    p.add_argument("--no-index", action="store_true", help="do not embed the imported messages for recall now")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _export(args, out, err) if args.command == "export" else _import(args, out, err)


def _export(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from core.terminal_text import visible
    from core.transfer.export import ExportOptions, export_data
    from core.transfer.format import render, render_chunks, shown_path, write_atomically, write_whole

    # A transcript shows no spans: reading every one of them only to leave them out cost the JSON's time.
    traces = args.with_traces and args.format == "json"
    if args.with_traces and not traces:
        err.write("note: a Markdown transcript holds no spans; --with-traces applies to --format json\n")
    options = ExportOptions(working_memory_versions=not args.no_versions, observations=not args.no_observations,
                            turns=not args.no_turns, agents=not args.no_agents, traces=traces)
    # Read-only and never created: exporting a Mastra database leaves it exactly as it was.
    with open_cli_store(args.db, read_only=True) as store:
        # Spans are read while the JSON is written, never all held; standard output gets it only once it
        # is whole (``write_whole``), so a trace store that turns busy halfway never leaves half a document
        # there.
        data = export_data(store, thread_id=args.thread, resource_id=args.resource, options=options,
                           streamed=args.format == "json")
        if not args.output:
            if args.format == "json":
                write_whole(out, render_chunks(data, "json"))
                return 0
            # A transcript on standard output is for a person's terminal: stored text (a message, a title)
            # must not drive it with an escape sequence. JSON escapes control characters itself; a file
            # (``--output``) keeps the text exactly.
            out.write(visible(render(data, args.format), keep="\n\t"))
            return 0
        write_atomically(Path(args.output), render_chunks(data, args.format), name=shown_path(args.output))
    err.write(f"exported {describe_counts(data['counts'])} to {args.output}\n")
    return 0


def describe_counts(counts: dict[str, int]) -> str:
    names = (("threads", "thread"), ("messages", "message"), ("workingMemoryVersions", "working-memory version"),
             ("observations", "observation row"), ("turns", "turn record"), ("toolDefinitions", "tool definition"),
             ("agents", "agent configuration"), ("configs", "override"), ("traces", "span"))
    return ", ".join(f"{counts.get(k, 0)} {label}{'' if counts.get(k, 0) == 1 else 's'}" for k, label in names
                     if k in counts)


def _import(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from core.transfer.format import load, shown_path
    from core.transfer.importer import import_data
    from core.transfer.recall import recall_after_import

    data = load(args.file)
    name = shown_path(args.file)  # every error names the file as given, as ``load``'s do
    if args.dry_run:
        _print_report(_preview(args.db, data, overwrite=args.overwrite, with_configs=args.with_configs, name=name),
                      out, err)
        return 0
    with open_store(args.db) as store:
        report = import_data(store, data, overwrite=args.overwrite, with_configs=args.with_configs, name=name)
        _print_report(report, out, err)
        if report.message_ids:
            out.write("note: " + recall_after_import(store, report.message_ids, embed=not args.no_index) + "\n")
    return 0


def _preview(db: str | None, data: dict[str, Any], *, overwrite: bool, with_configs: bool = False,
             name: str = "the file") -> ImportReport:
    """What an import would do, looking only: the target is opened read-only, never created or migrated.
    A database that does not exist yet or has no tables (an import would make it a memory database) is
    previewed as that new database: a scratch one in a temporary folder."""
    from core.storage.paths import caller_file, resolve_db_path
    from core.transfer.importer import preview_import

    location = resolve_db_path(db, caller=caller_file() if not db else None)
    path = location.path
    missing = path is not None and not path.exists()
    if not missing:
        with open_store(db, read_only=True, create=False) as store:
            if not store.db.is_empty:
                return preview_import(store, data, overwrite=overwrite, with_configs=with_configs, name=name)
    with tempfile.TemporaryDirectory(prefix="memory-studio-preview-") as scratch, \
            open_store(Path(scratch) / "new.db") as store:
        report = preview_import(store, data, overwrite=overwrite, with_configs=with_configs, name=name)
    report.target = location.display
    report.notes.insert(0, f"{location.display} {'does not exist yet' if missing else 'is empty'}: the import would "
                           "make it a memory database and write every row of the file.")
    return report


def _print_report(report: ImportReport, out: TextIO, err: TextIO) -> None:
    out.write(f"{report.target}: {report.summary()}\n")
    for line in report.details():
        err.write(f"  {line}\n")
