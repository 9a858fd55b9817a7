"""``memory-studio forget --resource ID [--yes] [--vacuum]`` (registered by ``core.cli``).

It shows what would go, place by place, asks (unless ``--yes``), deletes, shows what went, and offers
``vacuum`` so freed pages stop holding the deleted bytes. Exit 1 when something could not be reached
or a row there when it committed still names the resource afterwards (rows the resource's agents
wrote since are said, no failure).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, TextIO

from core.cli_store import open_cli_store

COMMANDS = ("forget",)


def add_parsers(sub: Any, db_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("forget", help="delete everything about a resource (threads, messages, recall, working "
                                      "memory, observations, turn records, traces)")
    db_arg(p)
    p.add_argument("--resource", required=True, help="the resource (user) id to forget")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--vacuum", action="store_true", help="then vacuum, so freed pages no longer hold old bytes")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _forget(args, out, err)


def _forget(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from core.edits.forget import forget_resource, vacuum_note

    with open_cli_store(args.db) as store:
        preview = forget_resource(store, args.resource, dry_run=True)
        if not preview.found:
            out.write(f"{store.location.display}: nothing is stored about resource {args.resource!r}\n")
            return 0
        for line in preview.summary_lines():
            out.write(line + "\n")
        if not args.yes:
            if not sys.stdin.isatty():
                print("refusing to delete without confirmation: run it in a terminal, or add --yes", file=err)
                return 1
            answer = _ask(f"Delete all of this from {store.location.display}? This cannot be undone. [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                out.write("nothing was deleted\n")
                return 1
        report = forget_resource(store, args.resource)
        if args.vacuum:  # the note is true until the next line: say that it is vacuumed now
            report.notes = [f"{n}; --vacuum was given, so it is vacuumed now" if n == vacuum_note(store) else n
                            for n in report.notes]
        for line in report.summary_lines():
            out.write(line + "\n")
        vacuum = args.vacuum
        if not vacuum and not args.yes and sys.stdin.isatty() and report.total:
            vacuum = _ask("Vacuum now, so the freed pages no longer hold the deleted bytes? [y/N] ").strip().lower() \
                in ("y", "yes")
        if vacuum:
            out.write(vacuum_report(store, vacuum_progress(err)) + "\n")
        elif report.total:
            out.write("run `memory-studio vacuum` to drop the freed pages\n")
    return exit_code(report)


def exit_code(report: Any) -> int:
    """1 when a place was not reached or a row there at the commit still names the resource; rows its agents
    wrote since (``written_since``) are no failure."""
    return 0 if report.complete and not report.leftovers else 1


def _ask(question: str) -> str:
    """The answer typed at the terminal; end of input (Ctrl-D) answers no, as an empty line does."""
    try:
        return input(question)
    except EOFError:
        print()  # the terminal's line still ends with the question
        return ""


def vacuum_progress(err: TextIO) -> Callable[[str], None]:
    """Where a command's vacuum says what it waits for: a line on standard error, at once."""
    def say(said: str) -> None:
        err.write(f"vacuum: {said}\n")
        err.flush()
    return say


def vacuum_report(store: Any, progress: Callable[[str], None] | None = None) -> str:
    """Vacuum the database and compact the trace file beside it; one line saying what came back.
    ``progress``: told what the vacuum waits for (``Store.vacuum``)."""
    reclaimed = store.vacuum(progress)
    if store.capabilities.traces_in_database:  # the span table is one of the tables just rewritten
        return f"vacuumed: {reclaimed / 1e6:.2f} MB from the database (its traces included)"
    obs = store.observability
    compact = getattr(obs, "compact", None)
    traces = 0
    if callable(compact) and getattr(obs, "path", None) is not None and obs.path.exists():
        import duckdb

        from core.traces.recovery import is_broken_file_error

        try:
            traces = compact()
        except duckdb.IOException as exc:  # the file cannot be opened: say so, the database part is done
            if is_broken_file_error(exc):
                return (f"vacuumed: {reclaimed / 1e6:.2f} MB from the database; the trace file {obs.path} is broken "
                        "(not a DuckDB file) and was not compacted: it holds traces only, delete it")
            return (f"vacuumed: {reclaimed / 1e6:.2f} MB from the database; the trace file {obs.path} could not be "
                    f"opened ({str(exc).splitlines()[0]}) and was not compacted: fix its permissions")
    return f"vacuumed: {reclaimed / 1e6:.2f} MB from the database, {traces / 1e6:.2f} MB from the trace file"


__all__ = ["COMMANDS", "add_parsers", "exit_code", "run", "vacuum_progress", "vacuum_report"]
